"""`lab`: the command line. Commands only build a task and configs, call the library, and save.

    lab run --delta centered --loss clipped      one run -> runs/<settings>-seed<k>/

Mistakes in the input end with exit code 2 and one line on stderr that says
what is allowed; nothing is left half-written.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import torch
import typer
from typer.core import TyperGroup

from lab.config import ConfigError, Device, TrainConfig, resolve_device
from lab.deltas import DeltaMode
from lab.losses import LossMode
from lab.policy import policy_from_state, save_policy
from lab.records import RunFolder, metrics_csv, samples_text, write_json_atomic, write_text_atomic
from lab.train import train
from tasks import sorting

Reward = Enum("Reward", {name.replace("-", "_"): name for name in sorting.REWARDS}, type=str)
"""Reward choices: every reward the sorting task registers."""

DEFAULTS = TrainConfig()
USER_ERRORS = (ConfigError, ValueError, FileExistsError)


class UserError(typer.TyperException):
    """A mistake in the command line; reported as one line, exit code 2."""

    exit_code = 2


class OneLineErrors(TyperGroup):
    """Report usage mistakes (bad choices, bad numbers) as a single `Error:` line, exit code 2."""

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except typer.TyperException as e:  # typer's (vendored click's) usage errors and ours
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `lab`: the help, as usual
                typer.echo(e.format_message())
                sys.exit(0)
            typer.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineErrors, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="GRPO sorting lab: train, sweep and prove policy-gradient mechanics on a toy task.")


@app.callback()
def lab() -> None:
    """GRPO sorting lab: train, sweep and prove policy-gradient mechanics on a toy task."""


def fail(message: str) -> None:
    """Stop with a user-facing one-line error."""
    raise UserError(message)


# Options shared by the commands that train. Defaults are the lecture's (TrainConfig).
DeltaOpt = Annotated[DeltaMode, typer.Option(help="rewards -> deltas: raw, minus the group mean, "
                                                  "also / group std, group max only, leave-one-out")]
LossOpt = Annotated[LossMode, typer.Option(help="surrogate loss: naive log-prob * delta, ratio * delta, "
                                                "or PPO-style clipped ratio")]
RewardOpt = Annotated[Reward, typer.Option(help="reward function of the sorting task")]
KLOpt = Annotated[float, typer.Option("--kl", help="beta, weight of the k3 KL penalty to the reference (0 = off)")]
KLPeriodOpt = Annotated[int, typer.Option(help="refresh the reference every N epochs (0 = frozen at the start)")]
ClipOpt = Annotated[float, typer.Option(help="clip band half-width eps of the clipped loss")]
EpochsOpt = Annotated[int, typer.Option(help="epochs: each samples a fresh group per prompt")]
StepsOpt = Annotated[int, typer.Option(help="optimizer steps on each epoch's batch")]
GroupOpt = Annotated[int, typer.Option(help="G, responses sampled per prompt")]
LrOpt = Annotated[float, typer.Option(help="Adam learning rate")]
DimOpt = Annotated[int, typer.Option(help="embedding width of the policy")]
PromptsOpt = Annotated[str, typer.Option(help="'lecture', 'random' (see --num-prompts, --prompt-length), "
                                              "or a JSON list such as '[[3,1,0,2],[2,2,0,1]]'")]
NumPromptsOpt = Annotated[int, typer.Option(help="how many prompts --prompts random draws")]
PromptLengthOpt = Annotated[int, typer.Option(help="length of the prompts --prompts random draws")]
VocabOpt = Annotated[int, typer.Option(help="vocabulary size: tokens are 0..vocab-1")]
HeldoutOpt = Annotated[int, typer.Option(help="random held-out prompts evaluated greedily, never trained on")]
PromptSeedOpt = Annotated[int, typer.Option(help="seed for random and held-out prompts")]
DeviceOpt = Annotated[Device, typer.Option(help="auto takes CUDA when present")]
ForceOpt = Annotated[bool, typer.Option("--force", help="replace an existing output folder")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="no progress bar and no summary line")]


def make_task(prompts: str, vocab_size: int, num_prompts: int, prompt_length: int, heldout: int,
              prompt_seed: int):
    return sorting.task_from_spec(prompts, vocab_size, num_prompts, prompt_length, heldout, prompt_seed)


def default_run_name(config: TrainConfig) -> str:
    """`<delta>-<loss>-<reward>`, then every other setting that differs from the lecture's, then the seed."""
    parts = [config.delta.value, config.loss.value, config.reward]
    for name, value in config.to_dict().items():
        if name in ("delta", "loss", "reward", "seed") or value == DEFAULTS.to_dict()[name]:
            continue
        parts.append(f"{name.replace('_', '')}{value:g}" if isinstance(value, float) else f"{name}{value}")
    return "-".join(parts) + f"-seed{config.seed}"


def run_with_progress(quiet: bool, label: str, total: int, fn):
    """Call fn(progress) with a callback that drives a progress bar on stderr (none when quiet)."""
    if quiet or not sys.stderr.isatty():  # a bar only where someone watches it
        return fn(None)
    with typer.progressbar(length=total, label=label, file=sys.stderr, show_eta=True) as bar:
        return fn(lambda done, _total: bar.update(done - bar.pos))


@app.command()
def run(
    delta: DeltaOpt = DEFAULTS.delta,
    loss: LossOpt = DEFAULTS.loss,
    reward: RewardOpt = Reward(DEFAULTS.reward),
    kl: KLOpt = DEFAULTS.kl,
    kl_period: KLPeriodOpt = DEFAULTS.kl_period,
    clip_eps: ClipOpt = DEFAULTS.clip_eps,
    epochs: EpochsOpt = DEFAULTS.epochs,
    steps: StepsOpt = DEFAULTS.steps,
    group_size: GroupOpt = DEFAULTS.group_size,
    lr: LrOpt = DEFAULTS.lr,
    dim: DimOpt = DEFAULTS.dim,
    seed: Annotated[int, typer.Option(help="seed of the run's generator (init and sampling)")] = DEFAULTS.seed,
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
    """Train one run and write config.json, metrics.csv, samples.txt, summary.json and curves.png."""
    try:
        config = TrainConfig(epochs=epochs, steps=steps, group_size=group_size, lr=lr, seed=seed, dim=dim,
                             reward=reward.value, delta=delta, loss=loss, clip_eps=clip_eps, kl=kl,
                             kl_period=kl_period)
        prompt_options = dict(prompts=prompts, vocab_size=vocab_size, num_prompts=num_prompts,
                              prompt_length=prompt_length, heldout=heldout, prompt_seed=prompt_seed)
        task = make_task(**prompt_options)
        torch_device = resolve_device(device)
        folder = RunFolder(out or Path("runs") / default_run_name(config), force)
        folder.check()
    except USER_ERRORS as e:
        fail(str(e))

    records = run_with_progress(quiet, "training", config.epochs, lambda progress: train(
        task, config, device=torch_device, progress=progress))

    from lab.plots import plot_run  # matplotlib only where a figure is made

    summary = {
        "final_mean_reward": float(records.final("mean_reward")[0]),
        "optimum": float(records.optimum[0].mean()),
        "final_greedy_reward": float(records.final("greedy_reward")[0]),
        "final_greedy_accuracy": float(records.final("greedy_accuracy")[0]),
        "final_greedy_responses": records.greedy_responses[0].tolist(),
        "seconds": records.seconds,
    }
    with folder as tmp:
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
        save_policy(policy_from_state(records.state), tmp / "policy.pt")
        plot_run(records, tmp / "curves.png")
    if not quiet:
        accuracy = summary["final_greedy_accuracy"]
        typer.echo(f"final mean reward {summary['final_mean_reward']:.3f} / {summary['optimum']:g}, "
                   f"greedy accuracy {accuracy:.0%} ({round(accuracy * len(task.prompts))}/{len(task.prompts)} "
                   f"prompts sorted), {records.seconds:.2f} s -> {folder.out}")


def rerun_command(config: TrainConfig, prompt_options: dict, device: torch.device) -> str:
    """A `lab run` command line that reproduces this run exactly."""
    settings = {k: v for k, v in config.to_dict().items() if k in RUN_OPTIONS}
    args = [f"--{k.replace('_', '-')} {v}" for k, v in {**settings, **prompt_options}.items() if k != "prompts"]
    return f"lab run --prompts '{prompt_options['prompts']}' " + " ".join(args) + f" --device {device.type}"


RUN_OPTIONS = ("delta", "loss", "reward", "kl", "kl_period", "clip_eps", "epochs", "steps", "group_size",
               "lr", "dim", "seed")
"""TrainConfig fields that `lab run` exposes as options."""


# `lab sweep`: the grid options repeat (--delta raw --delta centered); one value each by default.
DeltasOpt = Annotated[list[DeltaMode] | None, typer.Option("--delta", help="repeatable: deltas to sweep")]
LossesOpt = Annotated[list[LossMode] | None, typer.Option("--loss", help="repeatable: losses to sweep")]
RewardsOpt = Annotated[list[Reward] | None, typer.Option("--reward", help="repeatable: rewards to sweep")]
KLsOpt = Annotated[list[float] | None, typer.Option("--kl", help="repeatable: KL weights beta to sweep")]
ClipsOpt = Annotated[list[float] | None, typer.Option("--clip-eps", help="repeatable: clip eps to sweep")]
LrsOpt = Annotated[list[float] | None, typer.Option("--lr", help="repeatable: learning rates to sweep")]
GroupsOpt = Annotated[list[int] | None, typer.Option("--group-size", help="repeatable: group sizes G "
                                                     "(each G trains as its own batch)")]


@app.command()
def sweep(
    delta: DeltasOpt = None,
    loss: LossesOpt = None,
    reward: RewardsOpt = None,
    kl: KLsOpt = None,
    clip_eps: ClipsOpt = None,
    lr: LrsOpt = None,
    group_size: GroupsOpt = None,
    seeds: Annotated[int, typer.Option(help="run seeds 0..N-1 of every grid point")] = 5,
    threads: Annotated[int | None, typer.Option(
        help="torch CPU threads (default: 1, or all cores for 100 runs or more; see lab bench)")] = None,
    kl_period: KLPeriodOpt = DEFAULTS.kl_period,
    epochs: EpochsOpt = DEFAULTS.epochs,
    steps: StepsOpt = DEFAULTS.steps,
    dim: DimOpt = DEFAULTS.dim,
    prompts: PromptsOpt = "lecture",
    num_prompts: NumPromptsOpt = 3,
    prompt_length: PromptLengthOpt = 3,
    vocab_size: VocabOpt = sorting.LECTURE_VOCAB_SIZE,
    heldout: HeldoutOpt = 0,
    prompt_seed: PromptSeedOpt = 0,
    device: DeviceOpt = Device.auto,
    out: Annotated[Path | None, typer.Option(help="sweep folder (default runs/sweep-<grid>-<N>seeds)")] = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train a grid of settings x seeds as batched runs; write config.json, metrics.csv, summary.csv, curves.png."""
    from lab import sweep as sweeps

    given = {"delta": delta, "loss": loss, "reward": [r.value for r in reward] if reward else None, "kl": kl,
             "clip_eps": clip_eps, "lr": lr, "group_size": group_size}
    try:
        grid = {name: values or [getattr(DEFAULTS, name)] for name, values in given.items()}
        base = TrainConfig(epochs=epochs, steps=steps, dim=dim, kl_period=kl_period)
        configs = sweeps.build_grid(base, grid, seeds)
        names = [name for name, values in grid.items() if len(values) > 1]
        prompt_options = dict(prompts=prompts, vocab_size=vocab_size, num_prompts=num_prompts,
                              prompt_length=prompt_length, heldout=heldout, prompt_seed=prompt_seed)
        task = make_task(**prompt_options)
        torch_device = resolve_device(device)
        label = "-".join(f"{n.replace('_', '')}" for n in names) or "-".join(default_run_name(configs[0]).split("-")[:3])
        folder = RunFolder(out or Path("runs") / f"sweep-{label}-{seeds}seeds", force)
        folder.check()
        if threads is not None and threads <= 0:
            raise ConfigError(f"--threads must be a positive integer, got {threads}")
    except USER_ERRORS as e:
        fail(str(e))

    from lab.bench import sweep_threads

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads or sweep_threads(len(configs)))  # tiny runs: 1; hundreds of runs: all cores
    try:
        total = sum(configs[b[0]].epochs for b in sweeps.batches(configs))
        records = run_with_progress(quiet, f"{len(configs)} runs", total, lambda progress: sweeps.run_sweep(
            task, configs, device=torch_device, progress=progress))
    finally:
        torch.set_num_threads(previous_threads)
    summaries = sweeps.summarise(records, names)

    from lab.figures import plot_sweep  # matplotlib only where a figure is made

    with folder as tmp:
        write_json_atomic(tmp / "config.json", {
            "command": "sweep", "grid": {k: [v.value if isinstance(v, Enum) else v for v in vs]
                                         for k, vs in grid.items()},
            "seeds": list(range(seeds)), "base": base.to_dict(), "runs": len(configs),
            "task": {"name": task.name, "prompts": task.prompts.tolist(), "vocab_size": task.vocab_size},
            "device": str(torch_device), "torch": torch.__version__, "prompt_options": prompt_options,
        })
        write_text_atomic(tmp / "metrics.csv", metrics_csv(records, sweeps.extra_columns(records, sweeps.GRID_FIELDS)))
        write_text_atomic(tmp / "summary.csv", sweeps.summary_csv(summaries, names))
        plot_sweep(records, names, tmp / "curves.png")
    if not quiet:
        typer.echo(sweeps.summary_table(summaries, names))
        typer.echo(f"{len(configs)} runs in {records.seconds:.2f} s -> {folder.out}")


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
    prompts: PromptsOpt = "lecture",
    num_prompts: NumPromptsOpt = 3,
    prompt_length: PromptLengthOpt = 3,
    vocab_size: VocabOpt = sorting.LECTURE_VOCAB_SIZE,
    prompt_seed: PromptSeedOpt = 0,
    out: Annotated[Path | None, typer.Option(
        help="figure of variance versus G (default runs/diagnose-<reward>-<prompts>-<policy>.png)")] = None,
) -> None:
    """Exact gradient bias (scale along grad J, angle to it) and variance of each delta mode, for G in a list."""
    from lab import diagnose as diagnostics
    from lab.policy import Policy, load_policy

    try:
        task = make_task(prompts, vocab_size, num_prompts, prompt_length, 0, prompt_seed)
        if from_run is None:
            policy = Policy(task.vocab_size, task.prompts.shape[1], task.response_length, dim,
                            generator=torch.Generator().manual_seed(seed))
            source = f"init-seed{seed}-dim{dim}"
        else:
            if not from_run.is_dir():
                raise ValueError(f"--from-run {from_run}: no such run folder")
            if not (from_run / "policy.pt").is_file():
                raise ValueError(f"--from-run {from_run}: no policy.pt in it (a folder written by lab run)")
            try:
                policy = load_policy(from_run / "policy.pt")
            except Exception as e:  # a damaged or foreign file: say which, not how torch failed
                raise ValueError(f"--from-run {from_run}: cannot read policy.pt ({type(e).__name__})") from None
            shape = (policy.vocab_size, policy.prompt_length, policy.response_length)
            wanted = (task.vocab_size, task.prompts.shape[1], task.response_length)
            if shape != wanted:
                raise ValueError(f"--from-run {from_run}: its policy has (vocab, prompt length, response length) "
                                 f"{shape}, the prompts need {wanted}; pass matching --prompts/--vocab-size")
            source = from_run.resolve().name
        modes = delta or list(DeltaMode)
        sizes = group_size or list(diagnostics.DEFAULT_GROUP_SIZES)
        rows = diagnostics.gradient_diagnostics(policy, task, reward.value, modes, sizes)
        summary = diagnostics.objective_summary(policy, task, reward.value)
    except USER_ERRORS as e:
        fail(str(e))

    from lab.plots import plot_variance_vs_group_size  # matplotlib only where a figure is made

    label = prompts if prompts in sorting.PROMPT_SOURCES else "custom"
    out = out or Path("runs") / f"diagnose-{reward.value}-{label}-{source}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_variance_vs_group_size(rows, out, title=f"{reward.value} reward, {label} prompts, {source}")
    J = ", ".join(f"{j:.4f}" for j in summary["expected_reward"])
    typer.echo(f"policy {source}; {reward.value} reward; exact J per prompt [{J}], "
               f"|grad J| = {summary['grad_norm']:.4g}")
    typer.echo(diagnostics.format_table(rows))
    typer.echo(f"figure -> {out}")


@app.command()
def reproduce(
    seeds: Annotated[int, typer.Option(help="seeds 0..N-1 per setting")] = 20,
    out: Annotated[Path, typer.Option(help="folder to regenerate (replaced as a whole)")] = Path("figures"),
    device: DeviceOpt = Device.auto,
    quiet: QuietOpt = False,
) -> None:
    """Regenerate figures/: the lecture's experiments and their neighbours over seeds, and RESULTS.md."""
    import time

    from lab import reproduce as rep

    start = time.perf_counter()
    try:
        if seeds <= rep.LECTURE_SEED:
            raise ConfigError(f"--seeds must be > {rep.LECTURE_SEED} so that the lecture's seed "
                              f"{rep.LECTURE_SEED} is among them, got {seeds}")
        torch_device = resolve_device(device)
    except USER_ERRORS as e:
        fail(str(e))
    reproduction = run_with_progress(quiet, "reproduce", rep.LECTURE.epochs, lambda progress: rep.run_reproduction(
        seeds, device=torch_device, progress=progress))
    with RunFolder(out, force=True) as tmp:
        paths = rep.write_figures(reproduction, tmp)
    if not quiet:
        typer.echo(f"{reproduction.records.num_runs} runs, {len(paths)} files -> {out}/ "
                   f"in {time.perf_counter() - start:.1f} s (training {reproduction.records.seconds:.1f} s)")


@app.command()
def bench(
    sizes: Annotated[list[int] | None, typer.Option("--runs", help="repeatable: sweep sizes R")] = None,
    threads: Annotated[list[int] | None, typer.Option(
        help="repeatable: torch CPU threads of the lab's runs (default: 1 and all cores, each reported)")] = None,
    repeats: Annotated[int, typer.Option(help="timings per measurement; the best counts")] = 3,
) -> None:
    """Time the lecture's setting: the lecture-style loop, one run alone, and sweeps of R runs (CPU, CUDA)."""
    from lab.bench import ALL_CORES, SIZES, bench_report, lecture_baseline
    from lab.bench import bench as run_bench

    try:
        if repeats <= 0 or any(n <= 0 for n in [*(sizes or []), *(threads or [])]):
            raise ConfigError("--threads, --repeats and every --runs must be positive integers")
    except USER_ERRORS as e:
        fail(str(e))
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    lecture = lecture_baseline(repeats=repeats)  # once, at 1 thread and all cores: its fastest is the baseline
    for count in dict.fromkeys(threads or [1, ALL_CORES]):
        typer.echo(bench_report(run_bench(sizes or SIZES, devices, count, repeats, lecture_seconds=lecture)))


def main() -> None:
    """Console entry point (`lab`)."""
    torch.set_num_threads(1)  # tiny tensors: one thread beats the threading overhead
    app()


if __name__ == "__main__":
    main()
