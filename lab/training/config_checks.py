"""The checks every `TrainConfig` passes when it is made: modes parsed, numbers in range, a method's settings filled
with their defaults for its losses and refused for the others, each mistake one line (`ConfigError`) that says what
is allowed.

    check_config(config)  =  modes -> DPO's -> SFT's and expert iteration's -> numbers -> the policy's -> the
                             critic's -> the loss's own settings -> the group's

Loads without torch (`lab --help` shows the config's defaults).
"""

from __future__ import annotations

import dataclasses
import math

from lab.core.choices import ConfigError, parse_choice
from lab.core.modes import (DeltaMode, Demos, DPOLoss, DType, Filter, ImportanceLevel, IPOLogps, KLEstimator,
                            KLPlacement, LossAgg, Method, Optimizer, Pairs, PolicyKind, Preference, Sampler,
                            TrainingLoss)
from lab.training.sampling_checks import check_sampling

DPO_DEFAULTS = {"pairs": Pairs.online, "pairs_per_prompt": 16, "preference": Preference.argmax,
                "dpo_loss": DPOLoss.sigmoid, "ipo_logps": IPOLogps.sum}
"""The DPO settings a --loss dpo run takes when not given (None for the other losses)."""

SUPERVISED_DEFAULTS = {"demos": Demos.optimal, "demo_noise": 0.2, "ei_filter": Filter.group_best}
"""The SFT and expert-iteration settings their runs take when not given (None for the other losses)."""

DESCENDANT_DEFAULTS = {TrainingLoss.cispo: {"epsilon_high": 5.0},
                       TrainingLoss.sapo: {"sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05},
                       TrainingLoss.vespo: {"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0,
                                            "vespo_lambda_neg": 2.0}}
"""The settings a descendant's run takes when not given (TRL 1.16's defaults; CISPO's cap TRL's recommended 5)."""

DESCENDANT_RANGES = (  # (the field, whether a value is allowed, what is allowed); None (not set) always passes
    ("epsilon_high", lambda v: 0 < v < math.inf, "must be > 0 and finite"),
    ("clip_delta", lambda v: 1 < v < math.inf, "must be > 1 and finite (it caps a ratio above 1)"),
    ("sapo_temperature_pos", lambda v: 0 < v < math.inf, "must be > 0 and finite"),
    ("sapo_temperature_neg", lambda v: 0 < v < math.inf, "must be > 0 and finite"),
    ("vespo_k_pos", lambda v: 0 <= v < math.inf, "must be >= 0 and finite"),
    ("vespo_lambda_pos", lambda v: 0 < v < math.inf, "must be > 0 and finite"),
    ("vespo_k_neg", lambda v: 0 <= v < math.inf, "must be >= 0 and finite"),
    ("vespo_lambda_neg", lambda v: 0 < v < math.inf, "must be > 0 and finite"),
    ("top_entropy_quantile", lambda v: 0 <= v <= 1, "must lie in [0, 1] (1 = every token)"),
)

KL_DEFAULTS = {"kl_estimator": KLEstimator.k3, "kl_in": KLPlacement.loss}
"""Where the KL penalty goes and which estimator it uses, by default: k3 in the loss (TRL's GRPO, verl's default)."""

PLACEMENT_ESTIMATORS = {KLPlacement.loss: KLEstimator.k3, KLPlacement.reward: KLEstimator.k1}
"""The estimator `lab run` and `lab sweep` give each placement when none is named: k3 in the loss (TRL's GRPO, verl's
GRPO recipe), k1 in the reward (verl's `use_kl_in_reward`, `kl_penalty="kl"`): k3 there has no fixed point (claim 35)."""


def default_estimator(placement, loss=TrainingLoss.naive) -> KLEstimator:
    """The estimator of `PLACEMENT_ESTIMATORS` for a placement (a member or its name); for a loss with no KL penalty
    (DPO, SFT, expert iteration) the plain default, so that its check names the option that does not apply."""
    method = parse_choice(TrainingLoss, loss, "loss", ConfigError).entry.method
    if method is not Method.policy_gradient:
        return KL_DEFAULTS["kl_estimator"]
    return PLACEMENT_ESTIMATORS[parse_choice(KLPlacement, placement, "kl_in", ConfigError)]


MODES = (("delta", DeltaMode), ("loss", TrainingLoss), ("sampler", Sampler), ("policy", PolicyKind), ("dtype", DType),
         ("loss_agg", LossAgg), ("kl_estimator", KLEstimator), ("kl_in", KLPlacement), ("optimizer", Optimizer),
         ("importance_sampling_level", ImportanceLevel))
"""The fields given as a mode's name or member, parsed to the member."""

POSITIVE_INTEGERS = ("epochs", "steps", "group_size", "dim", "sample_every")
MIN_BETA = 1e-30
"""The least positive beta: the exact metrics against pi* = pi_ref exp(r / beta) / Z grow as (R* - r) / beta, and
rewards of at most ~10 over 1e-30 stay far inside float32 (3.4e38), the precision the records keep."""
MAX_KL_PERIOD = 2**31 - 1
"""The longest reference refresh period (in epochs); every count the lab takes is bounded."""
MIN_GRAD_NORM = 1e-6
"""The least --max-grad-norm: 100 x Adam's eps (1e-8), so a clipped gradient still moves Adam at about lr; 1e-300
(0 in float32) used to freeze every run without a word."""

RANGES = (  # (the field as the message names it, the field, whether a value is allowed, what is allowed)
    ("lr", "lr", lambda v: 0 < v < math.inf, "must be > 0 and finite"),
    ("clip_eps", "clip_eps", lambda v: 0 < v < 1, "must lie in (0, 1)"),
    ("kl (beta)", "kl", lambda v: v == 0 or MIN_BETA <= v < math.inf,  # inf * a k3 of 0 would be NaN
     f"must be >= 0 and finite: 0, or at least {MIN_BETA:g} (below it r / beta overflows the float32 records: "
     "kl_to_optimum would be inf)"),
    ("kl_period", "kl_period", lambda v: 0 <= v <= MAX_KL_PERIOD,
     f"must be >= 0 (0 = frozen reference) and at most {MAX_KL_PERIOD} (a period past the run's epochs never "
     "refreshes the reference, as 0)"),
    ("init_scale", "init_scale", lambda v: 0 < v < math.inf, "must be > 0 and finite"),
    ("temperature", "temperature", lambda v: 0 < v < math.inf, "must be > 0 and finite"),
    ("max_grad_norm", "max_grad_norm", lambda v: v is None or MIN_GRAD_NORM <= v < math.inf,
     f"must be > 0 and finite, at least {MIN_GRAD_NORM:g} (a smaller norm stops Adam, whose eps is 1e-8; leave it "
     "out for no clipping)"),
    ("entropy_coef", "entropy_coef", lambda v: 0 <= v < math.inf, "must be >= 0 and finite"),
    ("std_eps", "std_eps", lambda v: v >= 0, "must be >= 0"),
)


def put(config, name: str, value) -> None:
    object.__setattr__(config, name, value)  # a frozen dataclass, normalised while it is made


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_config(c) -> None:
    """Parse `c`'s modes, fill its method's defaults and check every setting (one `ConfigError` per mistake)."""
    for name, enum in MODES:
        put(c, name, parse_choice(enum, getattr(c, name), name, ConfigError))
    check_dpo(c)
    check_supervised(c)
    put(c, "adam_betas", tuple(c.adam_betas))
    for name in POSITIVE_INTEGERS:
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if not -2**63 <= c.seed < 2**64:  # what torch.Generator.manual_seed accepts
        raise ConfigError(f"seed must be an integer from -2**63 to 2**64 - 1 (torch's range), got {c.seed!r}")
    for label, name, allowed, what in RANGES:
        if not allowed(getattr(c, name)):
            value = repr(getattr(c, name))
            raise ConfigError(f"{label} {what}, got {value if len(value) <= 20 else value[:8] + f'... ({len(value)} digits)'}")
    check_policy(c)
    check_critic(c)
    check_descendants(c)
    check_loss_settings(c)
    check_sampling(c)
    if c.delta.entry.needs_group and c.group_size < 2:
        raise ConfigError(f"delta {c.delta.value!r} needs group_size >= 2 (a group of one has no "
                          f"baseline), got {c.group_size}; use raw or max for G = 1")


def check_policy(c) -> None:
    """What the autoregressive policy does not take, and the cap that only it takes."""
    if c.policy is PolicyKind.autoregressive and c.sampler is not Sampler.inverse_cdf:
        raise ConfigError("the autoregressive policy draws each position by inverse CDF given the tokens before "
                          "it; --sampler multinomial applies to the factorised policy only")
    if c.policy is PolicyKind.autoregressive and c.entropy_coef > 0:
        raise ConfigError("--entropy-coef is the exact per-position entropy of the factorised policy; the "
                          "autoregressive policy has no such bonus yet: use --entropy-coef 0 with it")
    if c.max_length is not None:
        if isinstance(c.max_length, bool) or not isinstance(c.max_length, int) or c.max_length <= 0:
            raise ConfigError(f"max_length must be a positive integer, got {c.max_length!r}")
        if c.policy is PolicyKind.factorized:
            raise ConfigError("max_length applies to the autoregressive policy only (the factorised one "
                              "answers with exactly the prompt's length); add --policy autoregressive")


def check_dpo(c) -> None:
    """DPO's settings: filled with their defaults for --loss dpo, refused (one line each) otherwise."""
    given = [name for name in ("pairs_from", *DPO_DEFAULTS) if getattr(c, name) is not None]
    if c.loss is not TrainingLoss.dpo:
        if given:
            raise ConfigError(f"{option(given[0])} applies to --loss dpo only; drop it or add --loss dpo")
        return
    for name, enum in (("pairs", Pairs), ("preference", Preference), ("dpo_loss", DPOLoss)):
        value = DPO_DEFAULTS[name] if getattr(c, name) is None else getattr(c, name)
        put(c, name, parse_choice(enum, value, option(name), ConfigError))
    if c.dpo_loss is DPOLoss.ipo:
        value = DPO_DEFAULTS["ipo_logps"] if c.ipo_logps is None else c.ipo_logps
        put(c, "ipo_logps", parse_choice(IPOLogps, value, "--ipo-logps", ConfigError))
    elif c.ipo_logps is not None:
        raise ConfigError("--ipo-logps applies to --dpo-loss ipo only (the sigmoid loss takes whole-sequence "
                          "log-probs, as TRL's); drop it or add --dpo-loss ipo")
    if c.pairs is Pairs.offline and c.pairs_per_prompt is None:
        put(c, "pairs_per_prompt", DPO_DEFAULTS["pairs_per_prompt"])
    if c.pairs_from is not None and c.pairs is not Pairs.offline:
        raise ConfigError("--pairs-from applies to --pairs offline only (its pairs are a fixed set)")
    if c.pairs is not Pairs.offline and c.pairs_per_prompt is not None:
        raise ConfigError("--pairs-per-prompt applies to --pairs offline only (online pairs come one per group)")
    n = c.pairs_per_prompt
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
        raise ConfigError(f"--pairs-per-prompt must be a positive integer, got {n!r}")
    if not c.kl > 0:
        raise ConfigError("--loss dpo needs --kl > 0: beta is the KL weight of the objective DPO optimises, "
                          "pi* = pi_ref exp(r / beta) / Z")
    if c.pairs is Pairs.online and c.group_size < 2:
        raise ConfigError(f"--loss dpo with online pairs needs --group-size >= 2 (a pair per group), "
                          f"got {c.group_size}")
    if c.entropy_coef > 0:
        raise ConfigError("--entropy-coef applies to the policy-gradient losses; use --entropy-coef 0 with --loss dpo")
    for name in KL_DEFAULTS:
        if getattr(c, name) != KL_DEFAULTS[name]:
            raise ConfigError(f"{option(name)} applies to the policy-gradient losses' KL penalty; "
                              "DPO's beta is no penalty (drop it with --loss dpo)")
    if c.delta.entry.needs_critic:
        raise ConfigError("--loss dpo uses no advantages, so --delta gae (a learned critic) has nothing to do; "
                          "drop --delta gae or use a policy-gradient --loss")


def check_supervised(c) -> None:
    """SFT's and expert iteration's settings: their defaults for their --loss, refused (one line each) otherwise."""
    sft, ei = c.loss is TrainingLoss.sft, c.loss is TrainingLoss.expert_iteration
    for name, applies, needs in (("demos", sft, "--loss sft"), ("demo_noise", sft, "--demos noisy"),
                                 ("demos_from", sft, "--demos policy"), ("ei_filter", ei, "--loss expert-iteration"),
                                 ("reward_threshold", ei, "--ei-filter threshold")):
        if getattr(c, name) is not None and not applies:
            raise ConfigError(f"{option(name)} applies to {needs} only; drop it or add {needs}")
    if sft:
        check_demos(c)
    if ei:
        name = SUPERVISED_DEFAULTS["ei_filter"] if c.ei_filter is None else c.ei_filter
        put(c, "ei_filter", parse_choice(Filter, name, "--ei-filter", ConfigError))
        if c.ei_filter is Filter.threshold and c.reward_threshold is None:
            raise ConfigError("--ei-filter threshold needs --reward-threshold: the reward a kept response reaches")
        if c.ei_filter is not Filter.threshold and c.reward_threshold is not None:
            raise ConfigError("--reward-threshold applies to --ei-filter threshold only")
        if c.reward_threshold is not None and not math.isfinite(c.reward_threshold):
            raise ConfigError(f"--reward-threshold must be finite, got {c.reward_threshold!r}")
    if not (sft or ei):
        return
    method = f"--loss {c.loss.value}"
    for name, default, why in (("kl", 0.0, "it has no KL penalty (its kl_exact is measured all the same)"),
                               ("kl_estimator", KL_DEFAULTS["kl_estimator"], "it has no KL penalty"),
                               ("kl_in", KL_DEFAULTS["kl_in"], "it has no KL penalty"),
                               ("entropy_coef", 0.0, "it has no entropy bonus"),
                               ("loss_agg", LossAgg.token_mean, "its NLL is the token mean, as TRL's SFT")):
        if getattr(c, name) != default:
            raise ConfigError(f"{option(name)} does not apply to {method}: {why}")
    if c.delta.entry.needs_critic:
        raise ConfigError(f"{method} uses no advantages, so --delta gae (a learned critic) has nothing to do")


def check_demos(c) -> None:
    """SFT's demonstrations: their source (default `optimal`), its noise rate or its folder."""
    demos = parse_choice(Demos, SUPERVISED_DEFAULTS["demos"] if c.demos is None else c.demos, "--demos", ConfigError)
    put(c, "demos", demos)
    if demos is Demos.noisy and c.demo_noise is None:
        put(c, "demo_noise", SUPERVISED_DEFAULTS["demo_noise"])
    for name, needs in (("demo_noise", Demos.noisy), ("demos_from", Demos.policy)):
        if getattr(c, name) is not None and demos is not needs:
            raise ConfigError(f"{option(name)} applies to --demos {needs.value} only")
    if c.demo_noise is not None and not 0 <= c.demo_noise <= 1:
        raise ConfigError(f"--demo-noise must lie in [0, 1], got {c.demo_noise!r}")
    if demos is Demos.policy and not c.demos_from:
        raise ConfigError("--demos policy needs --demos-from RUN_FOLDER: the run whose policy draws them")


def check_critic(c) -> None:
    """The critic's options: valid numbers, and only with `--delta gae` (they would do nothing else)."""
    if c.critic_lr is not None and not 0 < c.critic_lr < math.inf:
        raise ConfigError(f"critic_lr must be > 0 and finite, got {c.critic_lr!r}")
    if not 0 <= c.gae_lambda <= 1:
        raise ConfigError(f"gae_lambda must lie in [0, 1], got {c.gae_lambda!r}")
    if not 0 < c.cliprange_value < math.inf:
        raise ConfigError(f"cliprange_value must be > 0 and finite, got {c.cliprange_value!r}")
    if isinstance(c.critic_warmup, bool) or not isinstance(c.critic_warmup, int) or \
            not 0 <= c.critic_warmup < c.epochs:
        raise ConfigError(f"critic_warmup must be an integer from 0 to epochs - 1 = {c.epochs - 1}, "
                          f"got {c.critic_warmup!r}")
    if not c.delta.entry.needs_critic:
        changed = [f.name for f in dataclasses.fields(c) if f.metadata.get("critic") and getattr(c, f.name) != f.default]
        if changed and c.loss is TrainingLoss.dpo:
            raise ConfigError(f"{changed[0]} applies to the learned critic of --delta gae, which --loss dpo "
                              "does not use")
        if changed:
            raise ConfigError(f"{changed[0]} applies to the learned critic only; add --delta gae")


def check_descendants(c) -> None:
    """The descendants' settings (issue 37): their defaults filled for their loss, numbers in range, and the
    token masks only where they mean something."""
    for name, value in DESCENDANT_DEFAULTS.get(c.loss, {}).items():
        if getattr(c, name) is None:
            put(c, name, value)
    for name, allowed, what in DESCENDANT_RANGES:
        value = getattr(c, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not allowed(value)):
            raise ConfigError(f"{option(name)} {what}, got {value!r}")
    pg = c.method is Method.policy_gradient
    if c.top_entropy_quantile != 1 and not pg:
        raise ConfigError(f"--top-entropy-quantile applies to the policy-gradient losses; drop it with --loss "
                          f"{c.loss.value}")
    if c.mask_truncated_completions:
        if c.policy is not PolicyKind.autoregressive:
            raise ConfigError("--mask-truncated-completions applies to the autoregressive policy only (the factorised "
                              "one's responses are never truncated); add --policy autoregressive")
        if not pg:
            raise ConfigError(f"--mask-truncated-completions applies to the policy-gradient losses; drop it with "
                              f"--loss {c.loss.value}")
    if c.loss is TrainingLoss.luspo:  # LUSPO is GSPO's loss: sequence ratios (TRL: "requires" them)
        put(c, "importance_sampling_level", ImportanceLevel.sequence)
    if c.loss is TrainingLoss.luspo and c.loss_agg is not LossAgg.seq_mean_token_sum:
        raise ConfigError("--loss luspo is GSPO's loss summed over each response's tokens: it needs --loss-agg "
                          f"seq-mean-token-sum (TRL's luspo), got --loss-agg {c.loss_agg.value}")


def check_loss_settings(c) -> None:
    """A field marked `loss_only` is read by the losses whose entry names it (`Loss.settings`); set apart from its
    default for another loss it would do nothing: one line naming the losses that read it."""
    for f in dataclasses.fields(c):
        if f.metadata.get("loss_only") and getattr(c, f.name) != f.default and f.name not in c.loss.entry.settings:
            readers = [m.value for m in TrainingLoss if f.name in m.entry.settings]
            raise ConfigError(f"{option(f.name)} applies to --loss {' or '.join(readers)} only; drop it or choose "
                              + ("one of those" if len(readers) > 1 else "that loss"))
