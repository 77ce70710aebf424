"""`lab diagnose`: the exact bias and variance of every delta mode's gradient estimator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import torch
import typer

from lab.cli.app import DEFAULTS, USER_ERRORS, app, fail
from lab.cli.options import (
    DimOpt,
    NumPromptsOpt,
    PromptLengthOpt,
    PromptSeedOpt,
    Reward,
    RewardOpt,
    VocabOpt,
    make_task,
)
from lab.deltas import DeltaMode
from tasks import load_task_module, sorting


@app.command()
def diagnose(
    reward: RewardOpt = Reward(DEFAULTS.reward),
    delta: Annotated[list[DeltaMode] | None, typer.Option(
        "--delta", help="repeatable: delta modes to diagnose (default all)")] = None,
    group_size: Annotated[list[int] | None, typer.Option(
        "--group-size", help="repeatable: group sizes G (default 2 3 4 5)")] = None,
    dim: DimOpt = DEFAULTS.dim,
    seed: Annotated[int, typer.Option(help="seed of the policy at initialisation (as in lab run)")] = DEFAULTS.seed,
    from_run: Annotated[Path | None, typer.Option(
        help="a lab run folder: diagnose its final policy (PATH/policy.pt) instead of the initialisation")] = None,
    prompts: Annotated[str | None, typer.Option(
        help="as in lab run (default: the run's own prompts with --from-run, else 'lecture')")] = None,
    num_prompts: NumPromptsOpt = 3,
    prompt_length: PromptLengthOpt = 3,
    vocab_size: VocabOpt = sorting.LECTURE_VOCAB_SIZE,
    prompt_seed: PromptSeedOpt = 0,
    out: Annotated[Path | None, typer.Option(
        help="figure of variance versus G (default runs/diagnose-<reward>-<prompts>-<policy>.png)")] = None,
) -> None:
    """Exact gradient bias (scale along grad J, angle to it) and variance of each delta mode, for G in a list."""
    from lab import diagnose as diagnostics
    from lab.policy import Policy

    try:
        saved = None
        if from_run is not None:
            policy, saved = diagnostics.load_run(from_run)
        if saved is not None and prompts is None:  # the prompts the run was trained on
            task = load_task_module(saved["name"]).make_task(saved["prompts"], saved["vocab_size"])
            label = "run-prompts"
        else:
            spec = prompts or "lecture"
            task = make_task(spec, vocab_size, num_prompts, prompt_length, 0, prompt_seed)
            label = spec if spec in sorting.PROMPT_SOURCES else "custom"
        if from_run is None:
            policy = Policy(task.vocab_size, task.prompts.shape[1], task.response_length, dim,
                            generator=torch.Generator().manual_seed(seed))
            source = f"init-seed{seed}-dim{dim}"
        else:
            diagnostics.check_policy_fits(policy, task, f"--from-run {from_run}")
            source = from_run.resolve().name
        modes = delta or list(DeltaMode)
        sizes = group_size or list(diagnostics.DEFAULT_GROUP_SIZES)
        rows = diagnostics.gradient_diagnostics(policy, task, reward.value, modes, sizes)
        summary = diagnostics.objective_summary(policy, task, reward.value)
    except USER_ERRORS as e:
        fail(str(e))

    from lab.plots import (
        plot_variance_vs_group_size,  # matplotlib only where a figure is made
    )

    out = out or Path("runs") / f"diagnose-{reward.value}-{label}-{source}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_variance_vs_group_size(rows, out, title=f"{reward.value} reward, {label} prompts, {source}")
    J = ", ".join(f"{j:.4f}" for j in summary["expected_reward"])
    typer.echo(f"policy {source}; {reward.value} reward; exact J per prompt [{J}], "
               f"|grad J| = {summary['grad_norm']:.4g}")
    typer.echo(diagnostics.format_table(rows))
    typer.echo(f"figure -> {out}")
