"""`lab diagnose`: the exact bias and variance of every delta mode's gradient estimator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lab.cli.application import DEFAULTS, USER_ERRORS, app, fail, load, load_torch, writing
from lab.cli.options import DimOpt, cli_message
from lab.cli.task_options import (
    NumPromptsOpt, PromptLengthOpt, PromptSeedOpt, RewardOpt, TaskOpt, VocabOpt, make_task, task_choice, task_reward,
)
from lab.core.modes import DeltaMode
from tasks.catalog import DEFAULT_TASK, task_facts


@app.command()
def diagnose(
    reward: RewardOpt = None,
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
    vocab_size: VocabOpt = None,
    prompt_seed: PromptSeedOpt = 0,
    task: TaskOpt = DEFAULT_TASK,
    out: Annotated[Path | None, typer.Option(
        help="figure of variance versus G: .png, .pdf or .svg (default runs/diagnose-<reward>-<prompts>-"
             "<policy>.png); an existing file is replaced only if the lab wrote it")] = None,
) -> None:
    """Exact gradient bias (scale along grad J, angle to it) and variance of each delta mode, for G in a list.

    The reward: --reward, else the run's own with --from-run, else the task's default. The task: the run's own with
    --from-run (its config.json), else --task.

    (Its options are one signature because Typer reads a command's options off its parameters.)"""
    torch = load_torch()  # torch and the modules that compute load here, not for `lab diagnose --help`
    from lab.core.deltas import REWARD_MODES
    from lab.exact import diagnose as diagnostics
    from lab.figures.figure_files import check_figure_path, sign
    from lab.training.bounds import check_counts
    from lab.training.diagnose_memory import check_diagnose_memory
    from lab.training.limits import available_memory
    from lab.training.settings import folder_label
    from lab.policies.factorized import Policy
    from lab.files.run_folder import check_policy_fits, load_run, run_reward
    from lab.files.writable import check_writable
    from tasks.catalog import make_named_task

    try:
        vocab_size = task_facts(task_choice(task)).vocab_size if vocab_size is None else vocab_size
        if dim <= 0:
            raise ValueError(f"--dim must be a positive integer, got {dim}")
        if not -2**63 <= seed < 2**64:  # what torch.Generator.manual_seed accepts
            raise ValueError(f"--seed must be an integer from -2**63 to 2**64 - 1 (torch's range), got {seed}")
        check_counts({"--dim": dim, "--group-size": max(group_size or [1]), "--vocab-size": vocab_size,
                      "--num-prompts": num_prompts, "--prompt-length": prompt_length},
                     available_memory(), "this diagnosis")  # before a number enters a product or a power
        saved = None
        if out is not None:  # before any work: a name too long, a bad suffix or a user's file
            check_writable(out, temporary=False)
            check_figure_path(out)
        if from_run is not None:
            policy, saved = load_run(from_run, need_task=prompts is None)
        if saved is not None and task != DEFAULT_TASK and saved["name"] != task_choice(task):
            raise ValueError(f"--task {task} is not the task of --from-run {from_run} ({saved['name']}); drop --task: "
                             "the run's own task and prompts are diagnosed")
        if saved is not None:  # the prompts the run was trained on
            try:
                task = make_named_task(saved["name"], saved["prompts"], saved["vocab_size"])
            except ValueError as e:
                raise ValueError(f"{from_run / 'config.json'}: {e}") from None
            label = "run-prompts"
        else:
            spec = prompts or "lecture"
            task = make_task(spec, vocab_size, num_prompts, prompt_length, 0, prompt_seed, task_choice(task))
            label = spec if spec in ("lecture", "random") else "custom"
            label = label if task.name == DEFAULT_TASK else f"{task.name}-{label}"
        sizes = group_size or list(diagnostics.DEFAULT_GROUP_SIZES)
        if any(G < 1 for G in sizes):
            raise ValueError(f"--group-size must be >= 1, got {min(sizes)}")
        check_diagnose_memory(dim if from_run is None else policy.dim, task, sizes)
        if from_run is None:
            policy = Policy(task.vocab_size, task.prompts.shape[1], task.response_length, dim,
                            generator=torch.Generator().manual_seed(seed))
            source = f"init-seed{seed}-dim{dim}"
        else:
            check_policy_fits(policy, task, f"--from-run {from_run}: policy.pt")
            source = folder_label(from_run)  # its name and a hash of where it is: a/run and b/run apart
        if from_run is not None and reward is None:  # the reward the run was trained under, not the default
            reward = run_reward(from_run, task.rewards)
        reward = task_reward(reward, task.name)
        modes = delta or list(REWARD_MODES)
        out = out or Path("runs") / f"diagnose-{reward}-{label}-{source}.png"
        check_writable(out, temporary=False)
        check_figure_path(out)
        rows = diagnostics.gradient_diagnostics(policy, task, reward, modes, sizes)
        summary = diagnostics.objective_summary(policy, task, reward)
    except USER_ERRORS as e:
        fail(cli_message(str(e)))

    load("figures")  # matplotlib only where a figure is made
    from lab.figures.plots import plot_variance_vs_group_size

    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        check_figure_path(out)  # nobody put a file of theirs there meanwhile
        plot_variance_vs_group_size(rows, out, title=f"{reward} reward, {label} prompts, {source}")
        sign(out)
    J = ", ".join(f"{j:.4f}" for j in summary["expected_reward"])
    typer.echo(f"policy {source}; {reward} reward; exact J per prompt [{J}], "
               f"|grad J| = {summary['grad_norm']:.4g}")
    typer.echo(diagnostics.format_table(rows))
    typer.echo(f"figure -> {out}")
