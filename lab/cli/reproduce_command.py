"""`lab reproduce` (figures/ from scratch) and `lab bench` (speed against the lecture-style loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import torch
import typer

from lab.cli.application import USER_ERRORS, app, fail, load, writing
from lab.cli.progress import run_with_progress
from lab.cli.options import DeviceOpt, QuietOpt, cli_message
from lab.training.config import ConfigError, Device, resolve_device
from lab.experiments.endtoend import END_TO_END_RUNS
from lab.training.bounds import shown
from lab.training.limits import check_memory, check_threads
from lab.files.output_folders import OutputFiles
from lab.files.writable import check_writable


@app.command()
def reproduce(
    seeds: Annotated[int, typer.Option(help="seeds 0..N-1 per setting")] = 20,
    out: Annotated[Path, typer.Option(help="folder to write the figures and RESULTS.md into (only the lab's own files there are replaced)")] = Path("figures"),
    device: DeviceOpt = Device.auto,
    quiet: QuietOpt = False,
) -> None:
    """Regenerate figures/: the lecture's experiments and their neighbours over seeds, and RESULTS.md."""
    import time

    from lab.experiments import reproduce as rep
    start = time.perf_counter()
    try:
        if seeds <= rep.LECTURE_SEED:
            raise ConfigError(f"--seeds must be > {rep.LECTURE_SEED} so that the lecture's seed "
                              f"{rep.LECTURE_SEED} is among them, got {seeds}")
        torch_device = resolve_device(device)
        settings = list({repr(sorted(rep.config_of(o, 0).to_dict().items())): rep.config_of(o, 0)
                         for e in rep.EXPERIMENTS for o in e.settings}.values())
        check_memory(settings, 5, 3, 3, 0, torch_device, f"the reproduction ({len(settings)} settings x {shown(seeds)} "
                     "seeds)", seeds=seeds, advice="lower --seeds")
        check_writable(out / "RESULTS.md", temporary=False)  # first: a name too long fails any other look at it
        files = OutputFiles(out, "reproduce")
        files.check(rep.output_names())
    except USER_ERRORS as e:
        fail(cli_message(str(e)))
    load("figures")
    reproduction = run_with_progress(quiet, "reproduce", rep.progress_epochs(), lambda progress: rep.run_reproduction(
        seeds, device=torch_device, progress=progress))
    with writing(out), files.staging() as tmp:
        paths = rep.write_figures(reproduction, tmp)
    if not quiet:
        typer.echo(f"{reproduction.records.num_runs} runs, {len(paths)} files -> {out}/ "
                   f"in {time.perf_counter() - start:.1f} s (training {reproduction.records.seconds:.1f} s)")


MAX_REPEATS = 100
"""The most timings per measurement `lab bench` takes (the best of 100 is as good as it gets)."""


@app.command()
def bench(
    sizes: Annotated[list[int] | None, typer.Option("--runs", help="repeatable: sweep sizes R",
                                                    show_default="1 10 100 500")] = None,
    threads: Annotated[list[int] | None, typer.Option(
        help="repeatable: torch CPU threads of the lab's runs (each reported)",
        show_default="1 and all cores")] = None,
    repeats: Annotated[int, typer.Option(help=f"timings per measurement, 1 to {MAX_REPEATS}; the best counts")] = 3,
    sweep_runs: Annotated[int, typer.Option(
        help="runs of the end-to-end row: a real `lab sweep` timed from start-up to its written folder "
             "(0 = skip it)")] = END_TO_END_RUNS,
) -> None:
    """Time the lecture's setting: the lecture-style loop, one run alone, and sweeps of R runs (CPU, CUDA)."""
    from lab.experiments.bench import ALL_CORES, SIZES, bench_report, lecture_baseline
    from lab.experiments.bench import bench as run_bench
    from lab.training.config import TrainConfig

    try:
        if not 0 < repeats <= MAX_REPEATS:
            raise ConfigError(f"--repeats must be from 1 to {MAX_REPEATS} (each repeat times every row again), "
                              f"got {repeats}")
        if any(n <= 0 for n in [*(sizes or [])]):
            raise ConfigError("every --runs must be a positive integer")
        if sweep_runs < 0:
            raise ConfigError(f"--sweep-runs must be >= 0 (0 skips the end-to-end row), got {sweep_runs}")
        for count in threads or []:
            check_threads(count)
        largest = max([*(sizes or SIZES), sweep_runs])  # the end-to-end sweep too, before any timing
        check_memory([TrainConfig()], 5, 3, 3, 0, torch.device("cpu"), "this benchmark", seeds=largest,
                     advice="lower the largest --runs or --sweep-runs",
                     seeds_flag="--sweep-runs" if sweep_runs == largest else "--runs")
    except USER_ERRORS as e:
        fail(cli_message(str(e)))
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    lecture = lecture_baseline(repeats=repeats)  # once, at 1 thread and all cores: its fastest is the baseline
    for count in dict.fromkeys(threads or [1, ALL_CORES]):
        typer.echo(bench_report(run_bench(sizes or SIZES, devices, count, repeats, lecture_seconds=lecture)))
    if sweep_runs:
        from lab.experiments.endtoend import end_to_end, end_to_end_report

        for device in devices:
            row = end_to_end(sweep_runs, device, repeats=repeats)
            typer.echo(end_to_end_report(row, min(lecture.values())))
