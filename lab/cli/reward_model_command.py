"""`lab reward-model`: fit a reward model on preference pairs labelled by the true reward, into a folder runs train on.

    lab reward-model --init-scale 0.1 --pairs-per-prompt 64      -> runs/reward-model-init-scale0.1-pairs-per-prompt64-seed5/
    lab run --init-scale 0.1 --reward learned:runs/reward-model-...-seed5      (GRPO against the proxy)

The folder: config.json (settings, task, response space, gold reward), model.pt (the model's state), metrics.csv
(TRL's `loss`, `accuracy`, `margin` per optimizer step), summary.json (the final ones, and the exact
`preference_accuracy` and `reward_correlation` over every pair, `lab.training.reward_model`), pairs.csv (the
training pairs) and the lab's mark. The pairs come from the initial policy of a run with the same --seed,
--init-scale, --dim, --policy (its pi_0), or from a finished run's policy (--from-run).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from lab.cli.application import DEFAULTS, USER_ERRORS, app, fail, load_torch, output_folder, writing
from lab.cli.options import DimOpt, ForceOpt, InitScaleOpt, MaxLengthOpt, PolicyOpt, QuietOpt, cli_message
from lab.cli.task_options import (
    HeldoutOpt, NumPromptsOpt, PromptLengthOpt, PromptSeedOpt, PromptsOpt, RewardOpt, TaskOpt, VocabOpt,
    prompt_options, task_reward,
)
from lab.core.modes import Preference, RewardModelSize
from tasks.catalog import DEFAULT_TASK, task_facts

BT_ONLY, ARGMAX_ONLY = ("preference_temperature",), ("label_noise",)


def _check(name: str, ok: bool, allowed: str, value) -> None:
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {value}")


WHAT = "this reward model"


def check_enumerable(draw, vocab_size: int, prompt_length: int) -> None:
    """The drawing policy's responses can be listed (the pairs, the exact measures and the model's scores enumerate
    them all): at most `lab.exact.enumeration.LIMITS.max_responses`, counted without computing a huge power."""
    from lab.exact.enumeration import LIMITS
    from lab.training.bounds import capped_power
    from lab.training.lengths import resolve_max_length
    from lab.training.limits import space_within

    cap = LIMITS.max_responses
    if draw.policy.value == "factorized":
        if capped_power(vocab_size, prompt_length, cap) > cap:
            raise ValueError(f"lab reward-model lists every response: --vocab-size {vocab_size} ^ --prompt-length "
                             f"{prompt_length} is more than the {cap} responses it enumerates; lower either")
    elif not space_within(vocab_size, length := resolve_max_length(draw, prompt_length), cap):
        raise ValueError(f"lab reward-model lists every response: the autoregressive policy's responses of up to "
                         f"{length} tokens (--max-length, --prompt-length) over --vocab-size {vocab_size} are more "
                         f"than the {cap} it enumerates; lower them")


def check_size(draw, options: dict, prompt_count: int, prompt_length: int, pairs_per_prompt: int) -> None:
    """The drawing policy (as a run's: `lab.training.limits.check_memory`) and the pairs, float64 one-hot features
    of both responses each, fit in memory."""
    import torch

    from lab.training.limits import available_memory, check_memory, gigabytes

    check_memory([draw], options["vocab_size"], prompt_count, prompt_length, options["heldout"],
                 torch.device("cpu"), WHAT, advice="lower --dim, --vocab-size, the number of prompts or --max-length")
    features = (prompt_length + draw.max_length if draw.max_length else 2 * prompt_length + 2) * \
        (options["vocab_size"] + 1)
    need = prompt_count * pairs_per_prompt * 2 * features * 8 * 4  # features, scores, their gradients, Adam
    if need > available_memory():
        raise ValueError(f"{WHAT} needs about {gigabytes(need)} for its pairs' features, more than the "
                         f"{gigabytes(available_memory())} available; lower --pairs-per-prompt or the prompts")


def check_finite(policy, task, from_run: str | None) -> None:
    """The drawing policy's probabilities over every response are finite numbers (`--init-scale 1e300` makes its
    logits overflow: "invalid multinomial distribution" once it is sampled)."""
    import torch

    from lab.exact import varlen

    with torch.no_grad():
        probs = varlen.all_probs(policy, task.prompts, torch.float64)
    if not torch.isfinite(probs).all():
        source = f"--from-run {from_run}'s policy" if from_run else "the initial policy (--init-scale, --dim)"
        raise ValueError(f"{source} gives probabilities that are not finite numbers (its logits overflow), so no "
                         "pairs can be drawn from it; lower --init-scale")


def default_name(settings: dict, defaults: dict) -> str:
    """reward-model-<each setting that differs, as typed, glued to its value>-seed<k> (`lab run`'s scheme)."""
    from lab.training.settings import folder_label, option, text

    parts = [option(k) + (folder_label(v) if k == "from_run" else text(v)) for k, v in settings.items()
             if k != "seed" and v != defaults.get(k)]
    return "-".join(["reward-model", *parts, f"seed{settings['seed']}"])


@app.command(name="reward-model")
def reward_model(
    ctx: typer.Context,
    reward: RewardOpt = None,
    size: Annotated[RewardModelSize, typer.Option(help="the model's width: small 4, medium 16, large 64 tanh units "
                                                       "(one family)")] = RewardModelSize.medium,
    pairs_per_prompt: Annotated[int, typer.Option(help="N: 2N responses per prompt from the drawing policy, "
                                                       "paired")] = 64,
    preference: Annotated[Preference, typer.Option(help="who wins a pair: bradley-terry (with probability "
                                                        "sigmoid((R_a - R_b) / T)) or argmax (the higher reward, "
                                                        "ties by a fair coin)")] = Preference.bradley_terry,
    preference_temperature: Annotated[float, typer.Option(help="--preference bradley-terry: T")] = 1.0,
    label_noise: Annotated[float, typer.Option(help="--preference argmax: the rate at which a label is flipped, "
                                                    "in [0, 0.5]")] = 0.0,
    margin: Annotated[float | None, typer.Option(help="TRL's margin m in -log sigmoid(r_c - r_r - m), the same for "
                                                      "every pair (default: none)")] = None,
    center_rewards_coefficient: Annotated[float | None, typer.Option(
        help="TRL's center_rewards_coefficient: + mu mean((r_c + r_r)^2) (default: none)")] = None,
    steps: Annotated[int, typer.Option(help="full-batch Adam steps")] = 500,
    lr: Annotated[float, typer.Option(help="Adam learning rate")] = 0.01,
    seed: Annotated[int, typer.Option(help="seeds the drawing policy (as lab run --seed), the pairs and the model")
                    ] = DEFAULTS.seed,
    policy: PolicyOpt = DEFAULTS.policy,
    max_length: MaxLengthOpt = DEFAULTS.max_length,
    dim: DimOpt = DEFAULTS.dim,
    init_scale: InitScaleOpt = DEFAULTS.init_scale,
    from_run: Annotated[str | None, typer.Option(help="draw the pairs from this finished run folder's policy.pt "
                                                        "instead of the initial policy")] = None,
    prompts: PromptsOpt = "lecture",
    num_prompts: NumPromptsOpt = 3,
    prompt_length: PromptLengthOpt = 3,
    vocab_size: VocabOpt = None,
    heldout: HeldoutOpt = 0,
    prompt_seed: PromptSeedOpt = 0,
    task: TaskOpt = DEFAULT_TASK,
    out: Annotated[Path | None, typer.Option(help="output folder", show_default="runs/reward-model-<settings>-seed<k>")
                   ] = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Fit a reward model on preference pairs labelled by the true reward; --reward learned:FOLDER trains against it.

    (Its options are one signature because Typer reads a command's options off its parameters.)"""
    load_torch()  # here, not for `lab reward-model --help`
    from lab.cli.jobs import check_fits
    from lab.cli.task_options import make_task
    from lab.files.reward_model_folder import drawing_policy
    from lab.files.start_folder import start_mismatches, start_sha256
    from lab.training.bounds import check_counts
    from lab.training.config import ConfigError, TrainConfig
    from lab.training.limits import available_memory
    from lab.training.reward_model import RewardModelConfig

    try:
        reward = task_reward(reward, task)  # None: the task's default (the one a run trains against)
        options = prompt_options(prompts, vocab_size, num_prompts, prompt_length, heldout, prompt_seed, task)
        vocab_size = options["vocab_size"]  # None (not given): the task's own
    except ValueError as e:
        fail(cli_message(str(e)))
    settings = dict(reward=reward, size=size.value, pairs_per_prompt=pairs_per_prompt,
                    preference=preference.value, preference_temperature=preference_temperature,
                    label_noise=label_noise, margin=margin, center_rewards_coefficient=center_rewards_coefficient,
                    steps=steps, lr=lr, policy=policy.value, max_length=max_length, dim=dim, init_scale=init_scale,
                    from_run=from_run, seed=seed)
    defaults = {p.name: p.default.value if hasattr(p.default, "value") else p.default
                for p in ctx.command.params if p.name in settings}
    defaults["reward"] = task_facts(task).default_reward  # a folder's name says its reward where it is not that
    try:
        unused = ARGMAX_ONLY if preference is Preference.bradley_terry else BT_ONLY
        for name in unused:
            if ctx.get_parameter_source(name).name != "DEFAULT":  # by name: typer vendors its own click
                raise ValueError(f"--{name.replace('_', '-')} applies to --preference "
                                 f"{'argmax' if preference is Preference.bradley_terry else 'bradley-terry'} only")
        _check("--pairs-per-prompt", 1 <= pairs_per_prompt <= 10_000, "an integer from 1 to 10000", pairs_per_prompt)
        _check("--steps", 0 <= steps <= 100_000, "an integer from 0 to 100000", steps)
        for name, value in (("--lr", lr), ("--preference-temperature", preference_temperature)):
            _check(name, math.isfinite(value) and value > 0, "a finite number > 0", value)
        _check("--label-noise", 0 <= label_noise <= 0.5, "in [0, 0.5]", label_noise)
        _check("--margin", margin is None or math.isfinite(margin), "a finite number", margin)
        _check("--center-rewards-coefficient", center_rewards_coefficient is None or (
            math.isfinite(center_rewards_coefficient) and center_rewards_coefficient >= 0), "a finite number >= 0",
            center_rewards_coefficient)
        check_counts({"--dim": dim, "--vocab-size": vocab_size, "--num-prompts": num_prompts, "--max-length": max_length,
                      "--prompt-length": prompt_length, "--heldout": heldout}, available_memory(), WHAT)
        start = {} if from_run is None else dict(init_from=from_run,
                                                   init_sha256=start_sha256(from_run, "--from-run"))
        draw = TrainConfig(seed=seed, policy=policy, max_length=max_length, dim=dim, init_scale=init_scale,
                           **start)  # the drawing policy, checked as a run's start
        if prompts == "random":  # before drawing them
            check_enumerable(draw, vocab_size, prompt_length)
            check_size(draw, options, num_prompts, prompt_length, pairs_per_prompt)
        task = make_task(**options)
        check_fits(draw, task)
        check_enumerable(draw, vocab_size, task.prompts.shape[1])
        check_size(draw, options, *task.prompts.shape, pairs_per_prompt)
        if from_run is not None and (lines := start_mismatches(from_run, draw, task, "--from-run")):
            raise ConfigError("\n".join(lines))
        pi = drawing_policy(draw, task)
        check_finite(pi, task, from_run)
        config = RewardModelConfig(size=size.value, pairs_per_prompt=pairs_per_prompt, preference=preference.value,
                                   temperature=preference_temperature, label_noise=label_noise, steps=steps, lr=lr,
                                   margin=margin, center_rewards_coefficient=center_rewards_coefficient, seed=seed)
        folder = output_folder(out or Path("runs") / default_name(settings, defaults), force, "reward-model")
    except USER_ERRORS as e:
        fail(cli_message(str(e)))

    from lab.exact.varlen import policy_reward
    from lab.files.reward_model_folder import write_reward_model
    from lab.training.reward_model import train_reward_model

    model, metrics, fitted = train_reward_model(pi, task.prompts, policy_reward(pi, task, reward), config)
    header = {"command": "reward-model", "settings": settings, "prompt_options": options,
              "task": {"name": task.name, "prompts": task.prompts.tolist(), "vocab_size": task.vocab_size},
              "drawing_policy": {"policy": draw.policy.value, "seed": seed, "dim": dim, "init_scale": init_scale,
                                 "init_from": draw.init_from, "init_sha256": draw.init_sha256}}
    with writing(folder.out), folder as tmp:
        write_reward_model(tmp, header, pi, model, metrics, fitted)
    if not quiet:
        m = metrics
        typer.echo(f"{folder.out}: {m['parameters']} parameters, {m['pairs']} pairs, training accuracy "
                   f"{m['accuracy']:.2f}; exact preference accuracy {m['preference_accuracy']:.3f}, correlation "
                   f"with the gold reward {m['reward_correlation']:.3f} (under the drawing policy)")
