"""`lab trl-compare`: the lab's autoregressive policy and TRL's transformer on the same GRPO settings, on the
lecture's task (sorting), through the exact lens: curves and paired verdicts (docs/trl.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lab.cli.application import USER_ERRORS, app, fail, load, load_torch, output_folder, writing
from lab.cli.options import ForceOpt, QuietOpt, cli_message
from lab.cli.trl_command import _check, require_trl


@app.command(name="trl-compare")
def trl_compare(
    seeds: Annotated[int, typer.Option(help="seeds 0..N-1 per setting and learner (at least 2: the verdicts pair seeds; "
                                             "20 let the interaction be seen, issue 35)")] = 20,
    out: Annotated[Path | None, typer.Option(help="output folder (figures/trl_comparison.* is a curated copy)",
                                             show_default="runs/trl-compare-seeds<N>")] = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The lab's autoregressive policy and TRL's transformer on the same GRPO settings: exact curves and verdicts."""
    load_torch()  # here, not for `lab trl-compare --help`
    try:
        _check("--seeds", seeds, 2 <= seeds <= 100, "an integer from 2 to 100")
        require_trl("trl-compare")
        folder = output_folder(out or Path("runs") / f"trl-compare-seeds{seeds}", force, "trl-compare")
    except USER_ERRORS as e:
        fail(cli_message(str(e)))
    load("trl")
    load("figures")
    import trl

    from lab.cli.progress import run_with_progress
    from lab.experiments.trl_comparison import COMPARISON, run_comparison
    from lab.experiments.trl_section import write_report
    from tasks.catalog import default_task

    result = run_with_progress(quiet, "trl-compare", 2 * len(COMPARISON.settings),  # the lecture's task
                               lambda progress: run_comparison(default_task(), seeds, COMPARISON, progress),
                               unit="trainings")
    with writing(folder.out), folder as tmp:
        write_report(result, {"trl": trl.__version__}, tmp)
    if not quiet:
        typer.echo(f"{folder.out}: trl_comparison.md, trl_comparison.png")
