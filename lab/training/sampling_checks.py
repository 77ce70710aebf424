"""The checks of what is sampled and from which policy (issue 38's settings; `lab.training.config_checks` calls
`check_sampling` on every config): each switch's sub-settings filled with their defaults (TRL's where TRL has the
setting) when it is on and refused when it is off, numbers in range, and what a setting would do nothing with
refused in one line. Loads without torch.

    switch                              its settings (default)
    dynamic_sampling                    max_num_gen_batches (10)
    importance_sampling_correction      importance_sampling_clip_min (None), importance_sampling_clip_max (3)
    sync_ref_model                      ref_model_mixup_alpha (0.6), ref_model_sync_steps (512)
    adaptive_entropy                    entropy_target (0.2), entropy_coef_delta (0.005), entropy_coef_min (0),
                                        entropy_coef_max (1)
"""

from __future__ import annotations

import math

from lab.core.choices import ConfigError, parse_choice
from lab.core.modes import ImportanceSampling, Method, PolicyKind

SUB_SETTINGS = {
    "dynamic_sampling": {"max_num_gen_batches": 10},
    "importance_sampling_correction": {"importance_sampling_clip_min": None, "importance_sampling_clip_max": 3.0},
    "sync_ref_model": {"ref_model_mixup_alpha": 0.6, "ref_model_sync_steps": 512},
    "adaptive_entropy": {"entropy_target": 0.2, "entropy_coef_delta": 0.005, "entropy_coef_min": 0.0,
                         "entropy_coef_max": 1.0},
}
"""Each switch's own settings with the defaults they take when it is on (None otherwise)."""

OFF = {"dynamic_sampling": False, "staleness": 0, "sampler_temperature": None,
       "importance_sampling_correction": None, "off_policy_mask_threshold": None, "sync_ref_model": False,
       "adaptive_entropy": False}
"""The settings issue 38 adds, at the values that leave a run as it was without them."""


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def put(config, name: str, value) -> None:
    object.__setattr__(config, name, value)  # a frozen dataclass, normalised while it is made


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_sampling(c) -> None:
    """Fill and check the sampling settings of config `c` (one `ConfigError` per mistake)."""
    if c.importance_sampling_correction is not None:
        put(c, "importance_sampling_correction", parse_choice(ImportanceSampling, c.importance_sampling_correction,
                                                               "--importance-sampling-correction", ConfigError))
    for switch, settings in SUB_SETTINGS.items():
        on = getattr(c, switch) not in (None, False)
        for name, default in settings.items():
            if on and getattr(c, name) is None:
                put(c, name, default)
            elif not on and getattr(c, name) is not None:
                raise ConfigError(f"{option(name)} applies to {option(switch)} only; drop it or add {option(switch)}")
    used = [name for name, off in OFF.items() if getattr(c, name) != off]
    if used and c.method is not Method.policy_gradient:
        raise ConfigError(f"{option(used[0])} applies to the policy-gradient losses; --loss {c.loss.value} "
                          "samples and trains otherwise")
    check_samplers(c)
    check_reference(c)
    check_entropy(c)


def check_samplers(c) -> None:
    """Dynamic sampling's cap, the stale or mismatched sampler and its corrections."""
    if c.dynamic_sampling and (not is_int(c.max_num_gen_batches) or c.max_num_gen_batches < 1):
        raise ConfigError(f"--max-num-gen-batches must be a positive integer, got {c.max_num_gen_batches!r}")
    if not is_int(c.staleness) or c.staleness < 0:
        raise ConfigError(f"--staleness must be an integer >= 0 (optimizer steps; 0 = on-policy), got {c.staleness!r}")
    if c.sampler_temperature is not None and not 0 < c.sampler_temperature < math.inf:
        raise ConfigError(f"--sampler-temperature must be > 0 and finite, got {c.sampler_temperature!r}")
    if c.importance_sampling_correction is not None:
        if c.staleness == 0 and c.sampler_temperature is None:
            raise ConfigError("--importance-sampling-correction reweighs a sampler that is not the trained policy; "
                              "add --staleness K or --sampler-temperature T (on-policy its weights are all 1)")
        if c.staleness == 0 and c.sampler_temperature == c.temperature:
            raise ConfigError(f"--sampler-temperature {c.sampler_temperature:g} is the policy's own --temperature, so "
                              "the sampler is the trained policy and --importance-sampling-correction has nothing to "
                              "reweigh; choose another --sampler-temperature or add --staleness K")
        low, high = c.importance_sampling_clip_min, c.importance_sampling_clip_max
        if low is not None and not 0 <= low < math.inf:
            raise ConfigError(f"--importance-sampling-clip-min must be >= 0 and finite, got {low!r}")
        if not 0 < high < math.inf or (low is not None and not low < high):
            raise ConfigError(f"--importance-sampling-clip-max must be > 0, finite and above "
                              f"--importance-sampling-clip-min (for no upper bound, a large number), got {high!r}")
    threshold = c.off_policy_mask_threshold
    if threshold is not None:
        if not 0 <= threshold < math.inf:
            raise ConfigError(f"--off-policy-mask-threshold must be >= 0 and finite, got {threshold!r}")
        if c.delta.entry.needs_critic:
            raise ConfigError("--off-policy-mask-threshold drops responses by the sign of their one advantage; "
                              "--delta gae gives one per token: use another --delta")


def check_reference(c) -> None:
    """The reference that follows the policy."""
    if not c.sync_ref_model:
        return
    if not c.kl > 0:
        raise ConfigError("--sync-ref-model moves the KL penalty's reference, and --kl 0 has none (as TRL refuses "
                          "sync_ref_model with beta = 0): add --kl > 0")
    if c.kl_period != 0:
        raise ConfigError("--sync-ref-model replaces the periodic refresh of the reference: add --kl-period 0")
    if not 0 < c.ref_model_mixup_alpha <= 1:
        raise ConfigError(f"--ref-model-mixup-alpha must lie in (0, 1], got {c.ref_model_mixup_alpha!r}")
    if not is_int(c.ref_model_sync_steps) or c.ref_model_sync_steps < 1:
        raise ConfigError(f"--ref-model-sync-steps must be a positive integer, got {c.ref_model_sync_steps!r}")


def check_entropy(c) -> None:
    """Adaptive entropy control."""
    if not c.adaptive_entropy:
        return
    if c.policy is PolicyKind.autoregressive:
        raise ConfigError("--adaptive-entropy moves the coefficient of the exact entropy bonus, which the "
                          "autoregressive policy does not have yet: use it with --policy factorized")
    for name in ("entropy_target", "entropy_coef_delta", "entropy_coef_min", "entropy_coef_max"):
        if not 0 <= getattr(c, name) < math.inf:
            raise ConfigError(f"{option(name)} must be >= 0 and finite, got {getattr(c, name)!r}")
    if not c.entropy_coef_min <= c.entropy_coef_max:
        raise ConfigError(f"--entropy-coef-min must not exceed --entropy-coef-max, got {c.entropy_coef_min!r} > "
                          f"{c.entropy_coef_max!r}")
