"""The run configuration: every number of an experiment, with the lecture's defaults.

A run is fully determined by its `TrainConfig`, its task and the device. In a
batched sweep each run has its own config; the fields in `SHARED_FIELDS` fix
tensor shapes or the schedule and must agree across the runs of one batch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum

import torch

from lab.core.aggregation import LossAgg
from lab.core.choices import parse_choice
from lab.core.deltas import NEEDS_GROUP, DeltaMode
from lab.core.losses import LossMode
from lab.policies.interface import PolicyKind
from lab.policies.sampling import Sampler


class ConfigError(ValueError):
    """A user-facing mistake in a setting; its message says what is allowed."""


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def resolve_device(device: Device | str = Device.auto) -> torch.device:
    """`auto` takes CUDA when present; asking for CUDA without it is a `ConfigError`."""
    try:
        device = Device(device)
    except ValueError:
        raise ConfigError(f"unknown device {device!r}; choose one of: auto, cpu, cuda") from None
    if device is Device.cuda and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for, but torch finds no CUDA device; "
                          "use --device cpu or --device auto")
    if device is Device.auto:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device.value)


@dataclass(frozen=True)
class TrainConfig:
    """One GRPO-style run on a task (README, "The experiment"; the lecture's settings as defaults)."""

    epochs: int = 100
    """outer iterations; each samples a fresh group per prompt"""
    steps: int = 10
    """optimizer steps on each epoch's batch (TRL `num_iterations`, verl `ppo_epochs`)"""
    group_size: int = 10
    """G, responses sampled per prompt (TRL `num_generations`, verl `rollout.n`)"""
    lr: float = 1e-3
    """Adam learning rate"""
    seed: int = 5
    """seeds the run's generator: parameter initialisation, then every sample"""
    sampler: Sampler = Sampler.inverse_cdf
    """how responses are drawn from that generator (lab.policies.sampling): the lab's inverse CDF, or `multinomial`,
    the lecture script's torch.multinomial, which reproduces its seed-5 logs"""
    dim: int = 10
    """embedding and hidden width of the policy"""
    reward: str = "inclusion-ordering"
    """name of a reward registered by the task"""
    delta: DeltaMode = DeltaMode.raw
    """how rewards become deltas (lab.core.deltas)"""
    loss: LossMode = LossMode.naive
    """which surrogate loss (lab.core.losses)"""
    clip_eps: float = 0.01
    """clip band half-width eps of the clipped loss (TRL `epsilon`, verl `clip_ratio`); the lecture's 0.01"""
    kl: float = 0.0
    """beta, weight of the k3 KL penalty to the reference (TRL `beta`, verl `kl_loss_coef`); 0 = off"""
    kl_period: int = 10
    """refresh the reference every this many epochs; 0 = freeze it once at the start"""
    std_eps: float = 1e-5
    """added to the group std in `normalized` deltas (the lecture's 1e-5)"""
    std_unbiased: bool = True
    """Bessel-corrected group std (the lecture, torch.std) rather than the population std"""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's moment decay rates (torch defaults)"""
    adam_eps: float = 1e-8
    """Adam's denominator epsilon (torch default)"""
    sample_every: int = 10
    """keep the sampled responses, rewards and deltas every this many epochs (samples.txt)"""
    init_scale: float = 1.0
    """std of the embedding's initialisation: parameters are drawn as the lecture draws them (E ~ N(0, 1),
    as nn.Embedding), then E is multiplied by this; 1 = the lecture; smaller = flatter, more exploring policy"""
    entropy_coef: float = 0.0
    """weight of an entropy bonus: loss - coef x mean per-position entropy on the training prompts, the exact
    entropy of the factorised policy, not a sample estimate (verl `entropy_coeff`, CleanRL `ent_coef`); 0 = off"""
    policy: PolicyKind = PolicyKind.factorized
    """which policy answers: the lecture's factorised model, or an autoregressive one that ends with EOS
    (lab.policies)"""
    max_length: int | None = None
    """autoregressive only: the cap on response tokens, EOS included (a response reaching it is truncated);
    None = the prompt length + 2"""
    loss_agg: LossAgg = LossAgg.token_mean
    """how per-token losses and KL estimates are averaged (lab.core.aggregation; verl `loss_agg_mode`)"""
    temperature: float = 1.0
    """sampling temperature T: responses drawn from softmax(logits / T), and the loss's (and the reference's)
    log-probs taken at the same T, as verl's rollout and actor do (lab.training.kinds); 1 = the plain policy.
    Left out of `to_dict` at 1, so the files of a run without it are unchanged"""

    def __post_init__(self) -> None:
        for name, enum in (("delta", DeltaMode), ("loss", LossMode), ("sampler", Sampler), ("policy", PolicyKind),
                           ("loss_agg", LossAgg)):
            object.__setattr__(self, name, parse_choice(enum, getattr(self, name), name, ConfigError))
        object.__setattr__(self, "adam_betas", tuple(self.adam_betas))
        for name in ("epochs", "steps", "group_size", "dim", "sample_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if not -2**63 <= self.seed < 2**64:  # what torch.Generator.manual_seed accepts
            raise ConfigError(f"seed must be an integer from -2**63 to 2**64 - 1 (torch's range), got {self.seed!r}")
        if not 0 < self.lr < math.inf:
            raise ConfigError(f"lr must be > 0 and finite, got {self.lr!r}")
        if not 0 < self.clip_eps < 1:
            raise ConfigError(f"clip_eps must lie in (0, 1), got {self.clip_eps!r}")
        if not 0 <= self.kl < math.inf:  # inf * a k3 of 0 would make every loss NaN
            raise ConfigError(f"kl (beta) must be >= 0 and finite, got {self.kl!r}")
        if self.kl_period < 0:
            raise ConfigError(f"kl_period must be >= 0 (0 = frozen reference), got {self.kl_period!r}")
        if not 0 < self.init_scale < math.inf:
            raise ConfigError(f"init_scale must be > 0 and finite, got {self.init_scale!r}")
        if not 0 < self.temperature < math.inf:
            raise ConfigError(f"temperature must be > 0 and finite, got {self.temperature!r}")
        if not 0 <= self.entropy_coef < math.inf:
            raise ConfigError(f"entropy_coef must be >= 0 and finite, got {self.entropy_coef!r}")
        if not self.std_eps >= 0:
            raise ConfigError(f"std_eps must be >= 0, got {self.std_eps!r}")
        if self.policy is PolicyKind.autoregressive and self.sampler is not Sampler.inverse_cdf:
            raise ConfigError("the autoregressive policy draws each position by inverse CDF given the tokens before "
                              "it; --sampler multinomial applies to the factorised policy only")
        if self.policy is PolicyKind.autoregressive and self.entropy_coef > 0:
            raise ConfigError("--entropy-coef is the exact per-position entropy of the factorised policy; the "
                              "autoregressive policy has no such bonus yet: use --entropy-coef 0 with it")
        if self.max_length is not None:
            if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length <= 0:
                raise ConfigError(f"max_length must be a positive integer, got {self.max_length!r}")
            if self.policy is PolicyKind.factorized:
                raise ConfigError("max_length applies to the autoregressive policy only (the factorised one "
                                  "answers with exactly the prompt's length); add --policy autoregressive")
        if self.delta in NEEDS_GROUP and self.group_size < 2:
            raise ConfigError(f"delta {self.delta.value!r} needs group_size >= 2 (a group of one has no "
                              f"baseline), got {self.group_size}; use raw or max for G = 1")

    def plain(self) -> dict:
        """Every field as a plain value (enums as their names, tuples as lists)."""
        return {f.name: (v.value if isinstance(v, Enum) else list(v) if isinstance(v, tuple) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    def to_dict(self) -> dict:
        """`plain()` as written to config.json: `temperature` left out at 1, so earlier runs' files are unchanged."""
        return {k: v for k, v in self.plain().items() if not (k == "temperature" and v == 1.0)}

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config fields: {', '.join(sorted(unknown))}")
        return cls(**data)

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)


SHARED_FIELDS = ("epochs", "steps", "group_size", "dim", "kl_period", "std_eps", "std_unbiased",
                 "adam_betas", "adam_eps", "sample_every", "policy", "max_length")
"""Fields that must be equal across the runs of one batched computation."""

PER_RUN_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in SHARED_FIELDS)


def check_batchable(configs: list[TrainConfig]) -> None:
    if not configs:
        raise ConfigError("no runs to train")
    for name in SHARED_FIELDS:
        values = {getattr(c, name) for c in configs}
        if len(values) > 1:
            raise ConfigError(f"runs trained together must share {name}; got {sorted(values, key=str)}. "
                              "Train them in separate batches.")

