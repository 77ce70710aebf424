"""`lab trl`: a tiny transformer trained by TRL's GRPOTrainer on the task, seen through the exact lens.

    lab trl --epochs 30 --group-size 10      -> runs/trl-seed5/ (config.json, metrics.csv, policy.pt, curves.png)

The settings are `lab run`'s where TRL has them (docs/trl.md maps each to its `GRPOConfig` field);
config.json records the full `GRPOConfig`. Every epoch's row of metrics.csv holds TRL's logged
metrics under the lab's names and the exact ones of `lab.bridge.exact_lm`, computed by enumerating
the model's whole response distribution.
"""

from __future__ import annotations

import csv
import io
import math
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from lab.cli.application import USER_ERRORS, app, fail, load, load_torch, output_folder, writing
from lab.cli.options import (ClipDeltaOpt, EpsilonHighOpt, ForceOpt, ImportanceLevelOpt, MaskTruncatedOpt, QuietOpt,
                             SapoNegOpt, SapoPosOpt, TopEntropyOpt, VespoKNegOpt, VespoKPosOpt, VespoLambdaNegOpt,
                             VespoLambdaPosOpt, cli_message)
from lab.cli.task_options import RewardOpt, TaskOpt, task_reward
from lab.cli.trl_descendants import DESCENDANT_DEFAULTS, check_descendants
from lab.core.modes import TRL_AGGREGATION, ImportanceLevel
from tasks.catalog import DEFAULT_TASK
from lab.files.output_folders import write_json_atomic, write_text_atomic

TRLLoss = Enum("TRLLoss", {name: name for name in ("clipped", "cispo", "sapo", "luspo", "vespo", "dpo")}, type=str)
TRLPreference = Enum("TRLPreference", {"argmax": "argmax", "bradley_terry": "bradley-terry"}, type=str)
TRLPairs = Enum("TRLPairs", {"offline": "offline", "online": "online"}, type=str)
TRLDPOLoss = Enum("TRLDPOLoss", {"sigmoid": "sigmoid", "ipo": "ipo"}, type=str)
TRLDelta = Enum("TRLDelta", {"centered": "centered", "normalized": "normalized", "batch": "batch"}, type=str)
TRLLossAgg = Enum("TRLLossAgg", {m.replace("-", "_"): m for m in ("token-mean", "seq-mean-token-mean",
                                                                  "seq-mean-token-sum-norm", "seq-mean-token-sum")},
                  type=str)
EXACT_COLUMNS = ("reward_exact", "entropy_exact", "kl_exact", "optimal_prob")


def _check(name: str, value, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {value}")


def default_name(settings: dict, defaults: dict) -> str:
    """trl-<each setting that differs, the option as typed glued to its value>-seed<k> (`lab run`'s scheme)."""
    from lab.training.settings import option, text

    parts = [option(k) + text(v) for k, v in settings.items() if k != "seed" and v != defaults[k]]
    return "-".join(["trl", *parts, f"seed{settings['seed']}"])


def require_trl(command: str) -> None:
    """TRL is an extra of the install: its absence is a user's one line, found without importing it."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        raise ValueError(f"lab {command} needs TRL, which this install lacks: pip install -e '.[trl]'")


def rows_csv(records: list[dict]) -> str:
    columns = list(dict.fromkeys(k for row in records for k in row))
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    for row in records:
        writer.writerow(["" if row.get(c) is None else repr(row[c]) if isinstance(row[c], float) else row[c]
                         for c in columns])
    return text.getvalue()


DPO_ONLY = ("pairs", "pairs_per_prompt", "preference", "dpo_loss")
GRPO_ONLY = ("group_size", "clip_eps", "delta", "loss_agg", "temperature", *DESCENDANT_DEFAULTS)


def check_applies(ctx: typer.Context, loss) -> None:
    """An option the chosen trainer does not use is a mistake (one line), not silently ignored."""
    unused = GRPO_ONLY if loss is TRLLoss.dpo else DPO_ONLY
    for name in unused:
        if ctx.get_parameter_source(name).name != "DEFAULT":  # by name: typer vendors its own click
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} applies to --loss {'clipped (or a descendant)' if loss is TRLLoss.dpo else 'dpo'} "
                             "only")


@app.command(name="trl")
def trl_run(
    ctx: typer.Context,
    loss: Annotated[TRLLoss, typer.Option(help="clipped: GRPOTrainer; dpo: DPOTrainer on the lab's offline pairs")
                    ] = TRLLoss.clipped,
    epochs: Annotated[int, typer.Option(help="epochs: one group per prompt, then --steps optimizer steps")] = 30,
    steps: Annotated[int, typer.Option(help="optimizer steps per epoch's batch (TRL num_iterations)")] = 1,
    group_size: Annotated[int, typer.Option(help="responses per prompt (TRL num_generations)")] = 10,
    lr: Annotated[float, typer.Option(help="Adam learning rate, constant")] = 1e-3,
    clip_eps: Annotated[float, typer.Option(help="ratio clip (TRL epsilon)")] = 0.2,
    kl: Annotated[float, typer.Option(help="the lab's beta on the sequence's k3 (TRL beta = kl x max length); "
                                      "with --loss dpo DPO's beta (> 0)")] = 0.0,
    delta: Annotated[TRLDelta, typer.Option(help="centered: scale_rewards none; normalized: group; batch: batch")
                     ] = TRLDelta.centered,
    loss_agg: Annotated[TRLLossAgg | None, typer.Option(show_default="token-mean; cispo, vespo: token-mean; sapo: "
                                                               "seq-mean-token-mean; luspo: seq-mean-token-sum",
                                                   help="token-mean: bnpo; seq-mean-token-mean: grpo; "
                                                 "seq-mean-token-sum-norm: dr_grpo")] = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 1.0,
    epsilon_high: EpsilonHighOpt = None,
    clip_delta: ClipDeltaOpt = None,
    importance_sampling_level: ImportanceLevelOpt = ImportanceLevel.token,
    top_entropy_quantile: TopEntropyOpt = 1.0,
    mask_truncated_completions: MaskTruncatedOpt = False,
    sapo_temperature_pos: SapoPosOpt = None,
    sapo_temperature_neg: SapoNegOpt = None,
    vespo_k_pos: VespoKPosOpt = None,
    vespo_lambda_pos: VespoLambdaPosOpt = None,
    vespo_k_neg: VespoKNegOpt = None,
    vespo_lambda_neg: VespoLambdaNegOpt = None,
    reward: RewardOpt = None,
    task: TaskOpt = DEFAULT_TASK,
    pairs: Annotated[TRLPairs, typer.Option(help="--loss dpo: offline (DPOTrainer, a fixed set from the initial "
                                            "model) or online (OnlineDPOTrainer, two fresh samples per prompt)")
                     ] = TRLPairs.offline,
    pairs_per_prompt: Annotated[int, typer.Option(help="--loss dpo: N, 2N responses per prompt from the initial "
                                                  "model, paired")] = 16,
    preference: Annotated[TRLPreference, typer.Option(help="--loss dpo: who wins a pair")] = TRLPreference.argmax,
    dpo_loss: Annotated[TRLDPOLoss, typer.Option(help="--loss dpo: TRL's loss_type (its ipo is length-normalised)")
                        ] = TRLDPOLoss.sigmoid,
    max_length: Annotated[int | None, typer.Option(help="response cap, EOS included", show_default="prompt length + 1")] = None,
    seed: Annotated[int, typer.Option(help="seeds the model's initialisation and TRL's sampling")] = 5,
    layers: Annotated[int, typer.Option(help="transformer layers")] = 2,
    width: Annotated[int, typer.Option(help="hidden size (a multiple of 4, the heads)")] = 32,
    out: Annotated[Path | None, typer.Option(help="output folder", show_default="runs/trl-<settings>-seed<k>")] = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train a tiny transformer with TRL's GRPOTrainer (or DPOTrainer) on a task (--task); exact metrics every epoch.

    (Its options are one signature because Typer reads a command's options off its parameters.)"""
    load_torch()  # here, not for `lab trl --help`
    try:
        reward = task_reward(reward, task)  # None: the task's default reward
    except ValueError as e:
        fail(cli_message(str(e)))
    settings = dict(loss=loss.value, epochs=epochs, steps=steps, lr=lr, kl=kl, reward=reward,
                    max_length=max_length, seed=seed, layers=layers, width=width)
    settings |= dict(pairs=pairs.value, pairs_per_prompt=pairs_per_prompt, preference=preference.value,
                     dpo_loss=dpo_loss.value) \
        if loss is TRLLoss.dpo else dict(group_size=group_size, clip_eps=clip_eps, delta=delta.value,
                                         loss_agg=loss_agg.value if loss_agg else TRL_AGGREGATION.get(loss.value,
                                                                                                     "token-mean"),
                                         temperature=temperature)
    given = dict(epsilon_high=epsilon_high, clip_delta=clip_delta, importance_sampling_level=importance_sampling_level.value,
                 top_entropy_quantile=top_entropy_quantile, mask_truncated_completions=mask_truncated_completions,
                 sapo_temperature_pos=sapo_temperature_pos, sapo_temperature_neg=sapo_temperature_neg,
                 vespo_k_pos=vespo_k_pos, vespo_lambda_pos=vespo_lambda_pos, vespo_k_neg=vespo_k_neg,
                 vespo_lambda_neg=vespo_lambda_neg)
    settings |= {k: v for k, v in given.items() if v != DESCENDANT_DEFAULTS[k]}  # issue 37's, where changed
    named = {} if task == DEFAULT_TASK else {"task": task}  # the folder's name says a task that is not the lecture's
    try:
        check_applies(ctx, loss)
        _check("--epochs", epochs, 1 <= epochs <= 100_000, "an integer from 1 to 100000")
        _check("--steps", steps, 1 <= steps <= 1000, "an integer from 1 to 1000")
        _check("--group-size", group_size, 2 <= group_size <= 1000, "an integer from 2 to 1000")
        for name, value in (("--lr", lr), ("--clip-eps", clip_eps), ("--temperature", temperature)):
            _check(name, value, math.isfinite(value) and value > 0, "a finite number > 0")
        _check("--kl", kl, math.isfinite(kl) and kl >= 0, "a finite number >= 0")
        check_descendants(loss, given)
        if loss is TRLLoss.dpo:
            _check("--kl", kl, kl > 0, "> 0 with --loss dpo (DPO's beta)")
            _check("--pairs-per-prompt", pairs_per_prompt, 1 <= pairs_per_prompt <= 10_000, "an integer from 1 to 10000")
            if pairs is TRLPairs.online:
                offline_only = {"steps": steps != 1, "pairs_per_prompt": True, "preference": True}
                for name, used in offline_only.items():
                    if used and ctx.get_parameter_source(name).name != "DEFAULT":
                        raise ValueError(f"--{name.replace('_', '-')} applies to --pairs offline only (TRL's online DPO "
                                         "samples two responses per prompt at every step and judges them by argmax)")
        _check("--max-length", max_length, max_length is None or 1 <= max_length <= 6,
               "an integer of at most 6 (the exact enumeration's size)")
        _check("--seed", seed, 0 <= seed < 2**32, "an integer from 0 to 2**32 - 1")
        _check("--layers", layers, 1 <= layers <= 8, "an integer from 1 to 8")
        _check("--width", width, 8 <= width <= 256 and width % 4 == 0, "a multiple of 4 from 8 to 256")
        require_trl("trl")
        from lab.bridge.tiny_lm import TinyLM
        from lab.bridge.trl_dpo import TRLDPO
        from lab.bridge.trl_grpo import TRLGRPO
        from tasks.catalog import make_named_task

        task = make_named_task(task)
        method = TRLDPO if loss is TRLLoss.dpo else TRLGRPO
        fields = {k: v for k, v in settings.items() if k not in ("loss", "layers", "width", "kl")}
        fields |= {"beta": kl} if loss is TRLLoss.dpo else {"kl": kl, "loss": loss.value}
        run = method(**fields, model=TinyLM(vocab_size=task.vocab_size, layers=layers, width=width, seed=seed))
        TRLGRPO(max_length=max_length).check(task)  # the cap and vocabulary checks hold for both trainers
        if loss is not TRLLoss.dpo:
            run.check(task)  # the loss type's own aggregation
        defaults = dict(TRLGRPO().__dict__, **TRLDPO().__dict__, layers=2, width=32)
        defaults |= dict(loss="clipped", loss_agg=TRL_AGGREGATION.get(loss.value, "token-mean"))
        defaults["kl"] = 0.0
        defaults["task"] = DEFAULT_TASK
        folder = output_folder(out or Path("runs") / default_name({**named, **settings}, defaults), force, "trl")
    except USER_ERRORS as e:
        fail(cli_message(str(e)))
    load("trl")
    load("figures")
    from lab.bridge.trl_dpo import train_trl_dpo
    from lab.bridge.trl_grpo import train_trl
    from lab.figures.plots import plot_epoch_series

    trainer = "GRPOTrainer" if loss is not TRLLoss.dpo else "OnlineDPOTrainer" if pairs is TRLPairs.online \
        else "DPOTrainer"
    from lab.cli.progress import run_with_progress

    if not quiet:
        typer.echo(f"lab trl: {epochs} epochs of TRL's {trainer} on a {layers}-layer transformer ...", err=True)
    train_with = train_trl_dpo if loss is TRLLoss.dpo else train_trl
    records, trainer_config, weights = run_with_progress(quiet, "trl", epochs,
                                                         lambda progress: train_with(task, run, progress=progress))
    broken = [row["epoch"] for row in records if not all(math.isfinite(row[c]) for c in EXACT_COLUMNS)]
    if broken:
        typer.echo(f"Error: the model's distribution went numerically wrong at epoch {broken[0]} (non-finite "
                   "exact metrics); try a smaller --lr. Nothing was written.", err=True)
        raise typer.Exit(3)
    import torch
    import transformers
    import trl

    with writing(folder.out), folder as tmp:
        write_json_atomic(tmp / "config.json", {
            "command": "trl", "task": {"name": task.name, "prompts": task.prompts.tolist(),
                                       "vocab_size": task.vocab_size},
            "settings": settings, "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                                               "torch": torch.__version__},
            ("dpo_config" if loss is TRLLoss.dpo else "grpo_config"): trainer_config})
        write_text_atomic(tmp / "metrics.csv", rows_csv(records))
        torch.save(weights, tmp / "policy.pt")
        plot_epoch_series([r["epoch"] for r in records], {c: [r[c] for r in records] for c in EXACT_COLUMNS},
                          tmp / "curves.png", title=f"TRL {trainer}, seed {seed}")
    if not quiet:
        last = records[-1]
        typer.echo(f"{folder.out}: exact expected reward {records[0]['reward_exact']:.3f} -> "
                   f"{last['reward_exact']:.3f}, optimal probability {last['optimal_prob']:.3f}, "
                   f"KL to the initial model {last['kl_exact']:.3f}")


@app.command(name="trl-compare")
def trl_compare(
    seeds: Annotated[int, typer.Option(help="seeds 0..N-1 per setting and learner (at least 2: the verdicts pair seeds)")] = 20,
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
