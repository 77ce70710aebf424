"""The run configuration: every number of an experiment, with the lecture's defaults.

A run is fully determined by its `TrainConfig`, its task and the device. In a
batched sweep each run has its own config; the fields in `SHARED_FIELDS` fix
tensor shapes or the schedule and must agree across the runs of one batch.

The module loads without torch (its modes come from `lab.core.modes`; only `resolve_device` needs torch),
so that the `lab` command shows its options and their defaults without loading it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from lab.core.choices import parse_choice
from lab.core.modes import (NEEDS_GROUP, DeltaMode, DPOLoss, Filter, IPOLogps, KLEstimator, KLPlacement, LossAgg, Pairs,
                            PolicyKind, Preference, Sampler, TrainingLoss)

if TYPE_CHECKING:
    import torch


class Method(str, Enum):
    """The training methods (`lab.training.methods.METHODS`), each `--loss` belonging to one (`METHOD_OF`)."""

    policy_gradient = "policy-gradient"
    dpo = "dpo"
    sft = "sft"
    expert_iteration = "expert-iteration"


METHOD_OF = {TrainingLoss.naive: Method.policy_gradient, TrainingLoss.unclipped: Method.policy_gradient,
             TrainingLoss.clipped: Method.policy_gradient, TrainingLoss.dpo: Method.dpo, TrainingLoss.sft: Method.sft,
             TrainingLoss.expert_iteration: Method.expert_iteration}
"""`--loss` -> the method whose loss it is."""


class Demos(str, Enum):
    """Where SFT's demonstrations come from (`lab.training.supervised`)."""

    optimal = "optimal"
    noisy = "noisy"
    policy = "policy"


class ConfigError(ValueError):
    """A user-facing mistake in a setting; its message says what is allowed."""


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def resolve_device(device: Device | str = Device.auto) -> torch.device:
    """`auto` takes CUDA when present; asking for CUDA without it is a `ConfigError`."""
    import torch  # here, not above: the config (and `lab --help`, which shows its defaults) loads without torch

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
    """One GRPO-style run on a task (docs/task.md; the lecture's settings as defaults)."""

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
    loss: TrainingLoss = TrainingLoss.naive
    """which surrogate loss (lab.core.losses), or `dpo`: DPO's loss on preference pairs (lab.core.dpo), with
    beta = `kl` and the reference frozen at the initial policy (`kl_period` does not apply)"""
    clip_eps: float = 0.01
    """clip band half-width eps of the clipped loss (TRL `epsilon`, verl `clip_ratio`); the lecture's 0.01"""
    kl: float = 0.0
    """beta, weight of the KL penalty to the reference (TRL `beta`, verl `kl_loss_coef` / `kl_ctrl.kl_coef`); 0 = off;
    the estimator and where it goes: `kl_estimator`, `kl_in` (k3 in the loss by default)"""
    kl_estimator: KLEstimator = KLEstimator.k3
    """which per-token estimator of KL(pi_theta || pi_ref) the penalty uses (lab.core.kl): k1 = log(pi / pi_ref),
    k2 = its square / 2, k3 = rho - log rho - 1 (verl `kl_loss_type` / `kl_penalty`: k1 is `kl`, k2 `mse`,
    k3 `low_var_kl` without its clamp; TRL's GRPO: k3). Left out of `to_dict` at k3"""
    kl_in: KLPlacement = KLPlacement.loss
    """where the penalty goes: `loss`, beta * the estimator added to the loss (verl `use_kl_loss`, TRL's GRPO), or
    `reward`, each response's reward becomes r - beta * its summed estimator, detached, before the deltas (verl
    `use_kl_in_reward`, PPO-RLHF; the `reward` metrics stay the task's). Claim 14: k2 in the loss and k1 in the
    reward follow grad KL(pi_theta || pi_ref); k3 in the loss grad KL(pi_ref || pi_theta). Left out of `to_dict`
    at loss"""
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
    pairs: Pairs | None = None
    """DPO only (None otherwise; `online` by default): `online` takes each epoch's group of G samples from the
    current policy and pairs its highest with its lowest reward (no pair when all are equal); `offline` draws
    one fixed set of pairs from pi_ref before training and takes `steps` Adam steps on it every epoch"""
    pairs_per_prompt: int | None = None
    """DPO with offline pairs only (default 16): pairs drawn per prompt (a tie under argmax drops its pair)"""
    preference: Preference | None = None
    """DPO only (default `argmax`): which response of a pair wins: the higher reward (ties dropped), or
    `bradley-terry`: the first with probability sigmoid(r_1 - r_2), drawn from a generator seeded from the run's"""
    dpo_loss: DPOLoss | None = None
    """DPO only (default `sigmoid`): Rafailov et al.'s -log sigmoid(beta h), or `ipo`: (h - 1/(2 beta))^2 (TRL's
    `loss_type`; h of summed sequence log-probs unless `ipo_logps`)"""
    ipo_logps: IPOLogps | None = None
    """`--dpo-loss ipo` only (default `sum`, None otherwise): h of whole-sequence log-probs, sums over the response's
    live tokens (Azar et al.), or `token-mean`: each sequence's log-prob, the policy's and the reference's, divided by
    its token count first (TRL's `loss_type="ipo"`; lab.core.dpo). Left out of `to_dict` at sum"""
    optimum_metrics: bool = False
    """record the exact distance to the KL-regularised optimum pi* each epoch (kl_to_optimum, objective_exact,
    objective_gap: lab.exact.optimum, beta = `kl`, pi_ref = the initial policy; always on for DPO), and with it the
    exact expected reward and KL to the initial policy (reward_exact, kl_initial_exact, as SFT's)"""
    critic_lr: float | None = None
    """`--delta gae` only: the critic's Adam learning rate (verl `critic.optim.lr`); None = the policy's lr"""
    gae_lambda: float = 1.0
    """`--delta gae` only: GAE's lambda in [0, 1], gamma = 1 (verl `algorithm.lam`, default 1.0; TRL `lam`)"""
    cliprange_value: float = 0.5
    """`--delta gae` only: how far a value prediction may move from the one its targets were made with before
    the value loss stops rewarding the move (verl `critic.cliprange_value`, 0.5; TRL `cliprange_value`, 0.2)"""
    critic_warmup: int = 0
    """`--delta gae` only: the first this many epochs train the critic alone (verl `trainer.critic_warmup`)"""
    whiten_advantages: bool = False
    """`--delta gae` only: whiten the advantages over each run's batch of tokens, (A - mean) / std, as verl's
    `masked_whiten` and TRL's PPO do; off by default, so the expected update is the unbiased one of claim 23"""
    temperature: float = 1.0
    """sampling temperature T: responses drawn from softmax(logits / T), and the loss's (and the reference's)
    log-probs taken at the same T, as verl's rollout and actor do (lab.training.kinds); 1 = the plain policy.
    Left out of `to_dict` at 1, so the files of a run without it are unchanged"""
    max_grad_norm: float | None = None
    """clip each run's gradient to this global L2 norm over all its policy parameters before each Adam step (TRL
    `max_grad_norm`, verl `grad_clip`; lab.training.clipping); None = off"""
    demos: Demos | None = None
    """`--loss sft` only (default `optimal`): its G demonstrations per prompt, one fixed set drawn before training:
    `optimal`, the task's target sorted(x) (then EOS) repeated, the one response that is optimal under every reward
    (the tie rule among equally rewarded responses); `noisy`, that target with each token replaced, at rate
    `demo_noise`, by a uniform draw from the vocabulary; `policy`, G samples per prompt from the policy of the
    run folder `demos_from`"""
    demo_noise: float | None = None
    """`--demos noisy` only (default 0.2): the rate at which each demonstration token is replaced"""
    demos_from: str | None = None
    """`--demos policy` only: the run folder whose policy.pt draws the demonstrations"""
    ei_filter: Filter | None = None
    """`--loss expert-iteration` only (default `group-best`): which sampled responses are kept for the supervised
    steps: each group's best (all that tie at its highest reward, none when all are equal), or `threshold`,
    those with reward >= `reward_threshold`"""
    reward_threshold: float | None = None
    """`--ei-filter threshold` only: the reward a kept response reaches"""
    init_from: str | None = None
    """start from this run folder's policy.pt instead of a random policy; it is also the reference (KL, DPO)"""
    init_sha256: str | None = None
    """the sha256 of the policy.pt that `init_from` read (set by the command that read it)"""
    reward_sha256: str | None = None
    """`reward` learned:PATH only: the sha256 of the model.pt it read (set by the command that read it)"""
    pairs_from: str | None = None
    """DPO, offline pairs only: the fixed set is this reward-model folder's pairs.csv (the pairs its model was fitted
    on, `lab reward-model`), judged as they were drawn, in place of a set drawn from pi_ref"""
    pairs_sha256: str | None = None
    """the sha256 of the pairs.csv that `pairs_from` read (set by the command that read it)"""

    def __post_init__(self) -> None:
        for name, enum in (("delta", DeltaMode), ("loss", TrainingLoss), ("sampler", Sampler), ("policy", PolicyKind),
                           ("loss_agg", LossAgg), ("kl_estimator", KLEstimator), ("kl_in", KLPlacement)):
            object.__setattr__(self, name, parse_choice(enum, getattr(self, name), name, ConfigError))
        self._check_dpo()
        self._check_supervised()
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
        if self.max_grad_norm is not None and not 0 < self.max_grad_norm < math.inf:
            raise ConfigError(f"max_grad_norm must be > 0 and finite (leave it out for no clipping), "
                              f"got {self.max_grad_norm!r}")
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
        self._check_critic()
        if self.delta in NEEDS_GROUP and self.group_size < 2:
            raise ConfigError(f"delta {self.delta.value!r} needs group_size >= 2 (a group of one has no "
                              f"baseline), got {self.group_size}; use raw or max for G = 1")

    def _check_dpo(self) -> None:
        """DPO's settings: filled with their defaults for --loss dpo, refused (one line each) otherwise."""
        given = [name for name in ("pairs_from", *DPO_DEFAULTS) if getattr(self, name) is not None]
        if self.loss is not TrainingLoss.dpo:
            if given:
                raise ConfigError(f"--{given[0].replace('_', '-')} applies to --loss dpo only; drop it or add "
                                  "--loss dpo")
            return
        for name, enum in (("pairs", Pairs), ("preference", Preference), ("dpo_loss", DPOLoss)):
            value = DPO_DEFAULTS[name] if getattr(self, name) is None else getattr(self, name)
            option = "--" + name.replace("_", "-")
            object.__setattr__(self, name, parse_choice(enum, value, option, ConfigError))
        if self.dpo_loss is DPOLoss.ipo:
            value = DPO_DEFAULTS["ipo_logps"] if self.ipo_logps is None else self.ipo_logps
            object.__setattr__(self, "ipo_logps", parse_choice(IPOLogps, value, "--ipo-logps", ConfigError))
        elif self.ipo_logps is not None:
            raise ConfigError("--ipo-logps applies to --dpo-loss ipo only (the sigmoid loss takes whole-sequence "
                              "log-probs, as TRL's); drop it or add --dpo-loss ipo")
        if self.pairs is Pairs.offline and self.pairs_per_prompt is None:
            object.__setattr__(self, "pairs_per_prompt", DPO_DEFAULTS["pairs_per_prompt"])
        if self.pairs_from is not None and self.pairs is not Pairs.offline:
            raise ConfigError("--pairs-from applies to --pairs offline only (its pairs are a fixed set)")
        if self.pairs is not Pairs.offline and self.pairs_per_prompt is not None:
            raise ConfigError("--pairs-per-prompt applies to --pairs offline only (online pairs come one per group)")
        n = self.pairs_per_prompt
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
            raise ConfigError(f"--pairs-per-prompt must be a positive integer, got {n!r}")
        if not self.kl > 0:
            raise ConfigError("--loss dpo needs --kl > 0: beta is the KL weight of the objective DPO optimises, "
                              "pi* = pi_ref exp(r / beta) / Z")
        if self.pairs is Pairs.online and self.group_size < 2:
            raise ConfigError(f"--loss dpo with online pairs needs --group-size >= 2 (a pair per group), "
                              f"got {self.group_size}")
        if self.entropy_coef > 0:
            raise ConfigError("--entropy-coef applies to the policy-gradient losses; use --entropy-coef 0 with "
                              "--loss dpo")
        for name in ("kl_estimator", "kl_in"):
            if getattr(self, name) != KL_DEFAULTS[name]:
                raise ConfigError(f"--{name.replace('_', '-')} applies to the policy-gradient losses' KL penalty; "
                                  "DPO's beta is no penalty (drop it with --loss dpo)")
        if self.delta is DeltaMode.gae:
            raise ConfigError("--loss dpo uses no advantages, so --delta gae (a learned critic) has nothing to do; "
                              "drop --delta gae or use a policy-gradient --loss")

    def _check_supervised(self) -> None:
        """SFT's and expert iteration's settings: their defaults for their --loss, refused (one line each) otherwise."""
        sft, ei = self.loss is TrainingLoss.sft, self.loss is TrainingLoss.expert_iteration
        for name, applies, option in (("demos", sft, "--loss sft"), ("demo_noise", sft, "--demos noisy"),
                                      ("demos_from", sft, "--demos policy"),
                                      ("ei_filter", ei, "--loss expert-iteration"),
                                      ("reward_threshold", ei, "--ei-filter threshold")):
            if getattr(self, name) is not None and not applies:
                raise ConfigError(f"--{name.replace('_', '-')} applies to {option} only; drop it or add {option}")
        if not (sft or ei):
            return
        if sft:
            demos = parse_choice(Demos, SUPERVISED_DEFAULTS["demos"] if self.demos is None else self.demos, "--demos",
                                 ConfigError)
            object.__setattr__(self, "demos", demos)
            if demos is Demos.noisy and self.demo_noise is None:
                object.__setattr__(self, "demo_noise", SUPERVISED_DEFAULTS["demo_noise"])
            for name, needs in (("demo_noise", Demos.noisy), ("demos_from", Demos.policy)):
                if getattr(self, name) is not None and demos is not needs:
                    raise ConfigError(f"--{name.replace('_', '-')} applies to --demos {needs.value} only")
            if self.demo_noise is not None and not 0 <= self.demo_noise <= 1:
                raise ConfigError(f"--demo-noise must lie in [0, 1], got {self.demo_noise!r}")
            if demos is Demos.policy and not self.demos_from:
                raise ConfigError("--demos policy needs --demos-from RUN_FOLDER: the run whose policy draws them")
        if ei:
            name = SUPERVISED_DEFAULTS["ei_filter"] if self.ei_filter is None else self.ei_filter
            object.__setattr__(self, "ei_filter", parse_choice(Filter, name, "--ei-filter", ConfigError))
            if self.ei_filter is Filter.threshold and self.reward_threshold is None:
                raise ConfigError("--ei-filter threshold needs --reward-threshold: the reward a kept response reaches")
            if self.ei_filter is not Filter.threshold and self.reward_threshold is not None:
                raise ConfigError("--reward-threshold applies to --ei-filter threshold only")
            if self.reward_threshold is not None and not math.isfinite(self.reward_threshold):
                raise ConfigError(f"--reward-threshold must be finite, got {self.reward_threshold!r}")
        method = f"--loss {self.loss.value}"
        for name, default, why in (("kl", 0.0, "it has no KL penalty (its kl_exact is measured all the same)"),
                                   ("kl_estimator", KL_DEFAULTS["kl_estimator"], "it has no KL penalty"),
                                   ("kl_in", KL_DEFAULTS["kl_in"], "it has no KL penalty"),
                                   ("entropy_coef", 0.0, "it has no entropy bonus"),
                                   ("loss_agg", LossAgg.token_mean, "its NLL is the token mean, as TRL's SFT")):
            if getattr(self, name) != default:
                raise ConfigError(f"--{name.replace('_', '-')} does not apply to {method}: {why}")
        if self.delta is DeltaMode.gae:
            raise ConfigError(f"{method} uses no advantages, so --delta gae (a learned critic) has nothing to do")

    @property
    def is_dpo(self) -> bool:
        return self.loss is TrainingLoss.dpo

    @property
    def method(self) -> Method:
        return METHOD_OF[self.loss]

    def _check_critic(self) -> None:
        """The critic's options: valid numbers, and only with `--delta gae` (they would do nothing else)."""
        if self.critic_lr is not None and not 0 < self.critic_lr < math.inf:
            raise ConfigError(f"critic_lr must be > 0 and finite, got {self.critic_lr!r}")
        if not 0 <= self.gae_lambda <= 1:
            raise ConfigError(f"gae_lambda must lie in [0, 1], got {self.gae_lambda!r}")
        if not 0 < self.cliprange_value < math.inf:
            raise ConfigError(f"cliprange_value must be > 0 and finite, got {self.cliprange_value!r}")
        if isinstance(self.critic_warmup, bool) or not isinstance(self.critic_warmup, int) or \
                not 0 <= self.critic_warmup < self.epochs:
            raise ConfigError(f"critic_warmup must be an integer from 0 to epochs - 1 = {self.epochs - 1}, "
                              f"got {self.critic_warmup!r}")
        if self.delta is not DeltaMode.gae:
            changed = [f.name for f in dataclasses.fields(self) if f.name in CRITIC_FIELDS
                       and getattr(self, f.name) != f.default]
            if changed and self.is_dpo:
                raise ConfigError(f"{changed[0]} applies to the learned critic of --delta gae, which --loss dpo "
                                  "does not use")
            if changed:
                raise ConfigError(f"{changed[0]} applies to the learned critic only; add --delta gae")

    def plain(self) -> dict:
        """Every field as a plain value (enums as their names, tuples as lists)."""
        return {f.name: (v.value if isinstance(v, Enum) else list(v) if isinstance(v, tuple) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    def to_dict(self) -> dict:
        """`plain()` as written to config.json: `temperature`, `kl_estimator`, `kl_in` and `ipo_logps` left out at their
        defaults and the OPTIONAL_FIELDS while None, so earlier runs' files are unchanged."""
        return {k: v for k, v in self.plain().items() if not (k in OMITTED_AT_DEFAULT and v == OMITTED_AT_DEFAULT[k])
                and not (k in OPTIONAL_FIELDS and v is None)}

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config fields: {', '.join(sorted(unknown))}")
        return cls(**data)

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)


DPO_DEFAULTS = {"pairs": Pairs.online, "pairs_per_prompt": 16, "preference": Preference.argmax,
                "dpo_loss": DPOLoss.sigmoid, "ipo_logps": IPOLogps.sum}
"""The DPO settings a --loss dpo run takes when not given (None for the other losses)."""

SUPERVISED_DEFAULTS = {"demos": Demos.optimal, "demo_noise": 0.2, "ei_filter": Filter.group_best}
"""The SFT and expert-iteration settings their runs take when not given (None for the other losses)."""

OPTIONAL_FIELDS = ("max_grad_norm", "ipo_logps", "demos", "demo_noise", "demos_from", "ei_filter", "reward_threshold",
                   "init_from", "init_sha256", "reward_sha256", "pairs_from", "pairs_sha256")
"""Fields left out of config.json while None (unset), so the files of runs without them are unchanged."""

KL_DEFAULTS = {"kl_estimator": KLEstimator.k3, "kl_in": KLPlacement.loss}
"""Where the KL penalty goes and which estimator it uses, by default: k3 in the loss (TRL's GRPO, verl's default)."""

OMITTED_AT_DEFAULT = {"temperature": 1.0, "kl_estimator": "k3", "kl_in": "loss", "ipo_logps": "sum"}
"""Fields `to_dict` leaves out at these (plain) values: written only by runs that use them."""

CRITIC_FIELDS = ("critic_lr", "gae_lambda", "cliprange_value", "critic_warmup", "whiten_advantages")
"""The critic's settings (`--delta gae` only)."""

SHARED_FIELDS = ("epochs", "steps", "group_size", "dim", "kl_period", "std_eps", "std_unbiased",
                 "adam_betas", "adam_eps", "sample_every", "policy", "max_length", "pairs", "pairs_per_prompt",
                 "optimum_metrics", "critic_warmup", "demos", "demo_noise", "demos_from", "init_from",
                 "init_sha256")
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
    methods = {c.method.value for c in configs}
    if len(methods) > 1:
        raise ConfigError(f"runs trained together must share their method; got {sorted(methods)}. "
                          "Train them in separate batches.")

