"""What is sampled and from which policy (issue 38): the `TrainConfig` fields of dynamic sampling, stale and
mismatched samplers and their corrections, a reference that follows the policy and adaptive entropy control.

    TrainConfig(SamplingSettings)      these fields come first in `dataclasses.fields(TrainConfig)`; each is left out of
                                       config.json at its default, so no earlier run's files change

Each field's marks are `setting(...)`'s (lab.training.setting_marks); their checks are lab.training.sampling_checks,
called from lab.training.config_checks; the loop's side is lab.training.sampler_runs, corrections, reference_sync and
entropy_control. Loads without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.core.modes import ImportanceSampling
from lab.training.setting_marks import setting


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling fields of `TrainConfig` (module docstring)."""

    dynamic_sampling: bool = setting(False, omit=(False,), swept=True)
    """DAPO's dynamic sampling (verl `filter_groups`): a prompt whose rewards are all equal is drawn again, up to
    `max_num_gen_batches` (default 10) groups (lab.training.sampler_runs; metrics groups_drawn, _kept, _discarded)"""
    max_num_gen_batches: int | None = setting(None, omit=(None,))
    staleness: int = setting(0, omit=(0,), swept=True)
    """K: responses drawn by the policy of K optimizer steps earlier (an asynchronous sampler); 0 = on-policy"""
    sampler_temperature: float | None = setting(None, omit=(None,), swept=True)
    """a mismatched sampler: responses drawn at this temperature, the trainer's log-probs at `temperature` (None)"""
    importance_sampling_correction: ImportanceSampling | None = setting(None, omit=(None,), swept=True)
    """TRL's `vllm_importance_sampling_mode` (lab.core.importance), with `importance_sampling_clip_min` (default
    None) and `_clip_max` (default 3; finite: config.json is JSON); a stale or mismatched sampler only. None = no correction"""
    importance_sampling_clip_min: float | None = setting(None, omit=(None,))
    importance_sampling_clip_max: float | None = setting(None, omit=(None,))
    off_policy_mask_threshold: float | None = setting(None, omit=(None,), swept=True)
    """delta of TRL's off-policy sequence mask (DeepSeek-V3.2; lab.core.importance); None = off"""
    sync_ref_model: bool = setting(False, omit=(False,), swept=True)
    """TRL's `sync_ref_model` (TR-DPO): every `ref_model_sync_steps` (default 512) optimizer steps phi_ref <- alpha
    phi_theta + (1 - alpha) phi_ref, alpha = `ref_model_mixup_alpha` (default 0.6); needs --kl > 0, --kl-period 0"""
    ref_model_mixup_alpha: float | None = setting(None, omit=(None,))
    ref_model_sync_steps: int | None = setting(None, omit=(None,))
    adaptive_entropy: bool = setting(False, omit=(False,), swept=True)
    """TRL's `use_adaptive_entropy` (Skywork-OR1; lab.core.adaptive_entropy): `entropy_coef` moves by
    `entropy_coef_delta` (0.005) within [`entropy_coef_min`, `entropy_coef_max`] ([0, 1]) to hold `entropy_target`
    (0.2 nats); factorised policy. The whole block's checks: lab.training.sampling_checks"""
    entropy_target: float | None = setting(None, omit=(None,))
    entropy_coef_delta: float | None = setting(None, omit=(None,))
    entropy_coef_min: float | None = setting(None, omit=(None,))
    entropy_coef_max: float | None = setting(None, omit=(None,))
