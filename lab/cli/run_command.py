"""`lab run`: one run -> runs/<settings>-seed<k>/ (config.json, metrics.csv, samples.txt, summary.json, policy.pt, curves.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import torch
import typer

from lab.cli.application import DEFAULTS, USER_ERRORS, app, fail, writing
from lab.cli.progress import run_with_progress
from lab.cli.options import (
    ClipOpt,
    DeltaOpt,
    DeviceOpt,
    DimOpt,
    EntropyCoefOpt,
    EpochsOpt,
    ForceOpt,
    GroupOpt,
    HeldoutOpt,
    InitScaleOpt,
    KLOpt,
    KLPeriodOpt,
    LossAggOpt,
    LossOpt,
    LrOpt,
    MaxLengthOpt,
    NumPromptsOpt,
    PolicyOpt,
    PromptLengthOpt,
    PromptSeedOpt,
    PromptsOpt,
    QuietOpt,
    Reward,
    RewardOpt,
    SamplerOpt,
    StepsOpt,
    VocabOpt,
    PROMPT_DEFAULTS,
    cli_message,
    fitted_name,
    hashed_name_note,
    make_task,
    name_value,
    prompts_label,
)
from lab.training.config import Device, TrainConfig, resolve_device
from lab.policies.interface import PolicyKind
from lab.policies import policy_from_state
from lab.policies.factorized import save_policy
from lab.training.divergence import DIVERGED_EXIT_CODE
from lab.training.limits import check_memory
from lab.files.output_folders import RunFolder, write_json_atomic, write_text_atomic
from lab.files.run_text import metrics_csv, samples_text
from lab.training.train import train
from lab.files.writable import check_writable
from tasks import sorting


def default_run_name(config: TrainConfig, prompt_options: dict | None = None) -> str:
    """`<delta>-<loss>-<reward>`, then every other setting that differs from the lecture's (floats with
    every digit; the prompt options included: `prompts_label`), then the seed; past `NAME_BYTES`,
    `<delta>-<loss>-<reward>-config<hash of every setting>-seed<k>` (`fitted_name`)."""
    parts = [config.delta.value, config.loss.value, config.reward]
    for name, value in config.to_dict().items():
        if name in ("delta", "loss", "reward", "seed") or value == DEFAULTS.to_dict()[name]:
            continue
        parts.append(f"{name.replace('_', '')}{name_value(value)}" if isinstance(value, float) else f"{name}{value}")
    label = prompts_label(prompt_options or {})
    name = "-".join(parts + ([label] if label else [])) + f"-seed{config.seed}"
    return fitted_name(name, "-".join(parts[:3]), {"config": config.to_dict(), "prompt_options": {
        **PROMPT_DEFAULTS, **(prompt_options or {})}}, f"seed{config.seed}")


@app.command()
def run(
    delta: DeltaOpt = DEFAULTS.delta,
    loss: LossOpt = DEFAULTS.loss,
    reward: RewardOpt = Reward(DEFAULTS.reward),
    kl: KLOpt = DEFAULTS.kl,
    kl_period: KLPeriodOpt = DEFAULTS.kl_period,
    policy: PolicyOpt = DEFAULTS.policy,
    max_length: MaxLengthOpt = DEFAULTS.max_length,
    loss_agg: LossAggOpt = DEFAULTS.loss_agg,
    clip_eps: ClipOpt = DEFAULTS.clip_eps,
    epochs: EpochsOpt = DEFAULTS.epochs,
    steps: StepsOpt = DEFAULTS.steps,
    group_size: GroupOpt = DEFAULTS.group_size,
    lr: LrOpt = DEFAULTS.lr,
    dim: DimOpt = DEFAULTS.dim,
    init_scale: InitScaleOpt = DEFAULTS.init_scale,
    entropy_coef: EntropyCoefOpt = DEFAULTS.entropy_coef,
    seed: Annotated[int, typer.Option(help="seed of the run's generator (init and sampling)")] = DEFAULTS.seed,
    sampler: SamplerOpt = DEFAULTS.sampler,
    prompts: PromptsOpt = "lecture",
    num_prompts: NumPromptsOpt = 3,
    prompt_length: PromptLengthOpt = 3,
    vocab_size: VocabOpt = sorting.LECTURE_VOCAB_SIZE,
    heldout: HeldoutOpt = 0,
    prompt_seed: PromptSeedOpt = 0,
    device: DeviceOpt = Device.auto,
    out: Annotated[Path | None, typer.Option(help="run folder (default runs/<settings>-seed<k>)")] = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train one run and write config.json, metrics.csv, samples.txt, summary.json, policy.pt and curves.png.

    \b
    Exit codes: 0 done; 2 a mistake in the input (one line, nothing written);
    3 the run diverged: a loss or parameter became inf/NaN (one line saying where;
      the records up to that step are written, summary.json says "status": "diverged",
      no policy.pt); 1 writing failed (full disk: nothing written); 130 interrupted.
    """
    try:
        config = TrainConfig(epochs=epochs, steps=steps, group_size=group_size, lr=lr, seed=seed, sampler=sampler,
                             dim=dim, reward=reward.value, delta=delta, loss=loss, clip_eps=clip_eps, kl=kl,
                             kl_period=kl_period, init_scale=init_scale, entropy_coef=entropy_coef,
                             policy=policy, max_length=max_length, loss_agg=loss_agg)
        prompt_options = dict(prompts=prompts, vocab_size=vocab_size, num_prompts=num_prompts,
                              prompt_length=prompt_length, heldout=heldout, prompt_seed=prompt_seed)
        torch_device = resolve_device(device)
        if prompts == "random":  # before drawing them
            check_memory([config], vocab_size, num_prompts, prompt_length, heldout, torch_device)
        task = make_task(**prompt_options)
        check_fits(config, task)
        check_memory([config], vocab_size, *task.prompts.shape, heldout, torch_device)
        folder = RunFolder(out or Path("runs") / default_run_name(config, prompt_options), force, command="run")
        note = None if out or quiet else hashed_name_note(folder.out.name)
        check_writable(folder.out)  # first: a name too long for the file system fails any other look at it
        folder.check()
    except USER_ERRORS as e:
        fail(cli_message(str(e)))

    if note:
        typer.echo(note, err=True)
    records = run_with_progress(quiet, "training", config.epochs, lambda progress: train(
        task, config, device=torch_device, progress=progress))
    diverged = records.divergence[0] if records.divergence else None  # (checked by lab.training.train)

    from lab.figures.plots import plot_run  # matplotlib only where a figure is made

    final = (lambda name: None) if diverged else (lambda name: float(records.final(name)[0]))  # noqa: E731
    summary = {
        "status": "diverged" if diverged else "ok",
        **({"diverged": diverged.to_dict()} if diverged else {}),
        "final_mean_reward": final("mean_reward"),
        "optimum": float(records.optimum[0].mean()),
        "final_greedy_reward": final("greedy_reward"),
        "final_greedy_accuracy": final("greedy_accuracy"),
        "final_greedy_responses": None if diverged else records.greedy_responses[0].tolist(),
        "seconds": records.seconds,
        "exploration_exact": records.exploration_exact,
    }
    with writing(folder.out), folder as tmp:
        write_json_atomic(tmp / "config.json", {
            "command": "run",
            "config": config.to_dict(),
            "task": {"name": task.name, "prompts": task.prompts.tolist(), "vocab_size": task.vocab_size,
                     "eval_prompts": None if task.eval_prompts is None else task.eval_prompts.tolist()},
            "device": str(torch_device),
            "torch": torch.__version__,
            "prompt_options": prompt_options,
            "rerun": rerun_command(config, prompt_options, torch_device),
        })
        write_text_atomic(tmp / "metrics.csv", metrics_csv(records))
        write_text_atomic(tmp / "samples.txt", samples_text(records))
        write_json_atomic(tmp / "summary.json", summary)
        if not diverged:  # a diverged run has no final policy
            save_policy(policy_from_state(records.state), tmp / "policy.pt")
        plot_run(records, tmp / "curves.png", title=None if not diverged else
                 f"{config.delta.value} deltas, {config.loss.value} loss: diverged at step {diverged.step}")
    if diverged:
        typer.echo(f"Error: {diverged.message(config.lr, config.steps, config.init_scale)}; the records up to that step are in "
                   f"{folder.out} (summary.json \"status\": \"diverged\")", err=True)
        raise typer.Exit(DIVERGED_EXIT_CODE)
    if not quiet:
        accuracy = summary["final_greedy_accuracy"]
        typer.echo(f"final mean reward {summary['final_mean_reward']:.3f} / {summary['optimum']:g}, "
                   f"greedy accuracy {accuracy:.0%} ({round(accuracy * len(task.prompts))}/{len(task.prompts)} "
                   f"prompts sorted), {records.seconds:.2f} s -> {folder.out}")


def check_fits(config: TrainConfig, task) -> None:
    """An autoregressive cap too short for sorted(prompt) + EOS is a user error (one line, exit 2)."""
    if config.policy is not PolicyKind.factorized:
        from lab.training.lengths import resolve_max_length

        resolve_max_length(config, task.prompts.shape[1])


def rerun_command(config: TrainConfig, prompt_options: dict, device: torch.device) -> str:
    """A `lab run` command line that reproduces this run exactly."""
    settings = {k: v for k, v in config.to_dict().items() if k in RUN_OPTIONS and v is not None}
    args = [f"--{k.replace('_', '-')} {v}" for k, v in {**settings, **prompt_options}.items() if k != "prompts"]
    return f"lab run --prompts '{prompt_options['prompts']}' " + " ".join(args) + f" --device {device.type}"


RUN_OPTIONS = ("delta", "loss", "reward", "kl", "kl_period", "clip_eps", "epochs", "steps", "group_size",
               "lr", "dim", "init_scale", "entropy_coef", "seed", "sampler", "policy", "max_length", "loss_agg")
"""TrainConfig fields that `lab run` exposes as options."""
