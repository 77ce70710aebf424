"""The lab's modes: the `str` enums its options choose from, one definition each, without torch.

    DeltaMode (--delta)                  a table (lab.core.choices.Table): each member's entry names its formula
    TrainingLoss (--loss)                a table: each member's entry names its method, surrogate, clip metrics
    Method                               the training methods (lab.training.methods.METHODS)
    LossAgg (--loss-agg)                 AGGREGATIONS in lab.core.aggregation
    DPOLoss, Preference, Pairs           DPO_LOSSES in lab.core.dpo; lab.training.dpo, preference_pairs
    IPOLogps (--ipo-logps)               lab.training.dpo (pair_lengths)
    KLEstimator, KLPlacement             ESTIMATORS in lab.core.kl; lab.training.runs
    ImportanceSampling                   lab.core.importance (--importance-sampling-correction)
    Demos (--demos), Filter (--ei-filter) lab.training.supervised
    PolicyKind (--policy)                POLICIES in lab.policies
    Sampler (--sampler)                  SAMPLERS in lab.policies.sampling
    RewardModelSize (lab reward-model)   SIZES in lab.training.reward_model
    DType (--dtype)                      the runs' floating-point type (lab.training.kinds, runs, groups)

They live here, apart from the math that dispatches on them, so that the `lab` command builds its options
(`lab --help`, `lab run --help`) without loading torch (tests/cli/test_help_imports.py). A new delta mode or loss is
its formula (a function in lab/core), its entry below and its test: the options, their help, the config's checks
and the training loop read everything else off the entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from lab.core.choices import Ref, Table


@dataclass(frozen=True)
class Delta:
    """What a delta mode is: `formula(rewards float[... trial], std_eps, unbiased) -> deltas float[... trial]`."""

    name: str
    help: str
    """its line in `--delta`'s help"""
    formula: Ref
    needs_group: bool = False
    """its baseline needs G >= 2, and a group of equal rewards gets exact zeros (`lab.core.deltas.compute_deltas`)"""
    needs_critic: bool = False
    """its advantages come from a learned critic (`lab.training.critic`), not from the rewards alone: its deltas
    are the returns, and exact analyses of the group modes leave it out (`lab.core.deltas.REWARD_MODES`)"""
    scale: Ref | None = None
    """s(G): its expected update is s grad J (claims 4, 14), what a KL'd run's beta' divides by
    (`lab.training.objective`); None where no constant s exists (normalized, max: claims 5, 17; gae)"""
    needs_batch: bool = False
    """its deltas read the whole batch's rewards (every prompt's group), not one group's: exact analyses of one
    group leave it out (`lab.core.deltas.REWARD_MODES`)"""


class DeltaMode(Table):
    """How rewards become deltas (`--delta`)."""

    raw = Delta("raw", "the reward itself", Ref("lab.core.deltas:raw"), scale=Ref("lab.core.deltas:unit_scale"))
    centered = Delta("centered", "minus the group mean", Ref("lab.core.deltas:centered"), needs_group=True,
                     scale=Ref("lab.core.deltas:centered_scale"))
    normalized = Delta("normalized", "minus the group mean, over the group std", Ref("lab.core.deltas:normalized"),
                       needs_group=True)
    max = Delta("max", "the reward where it is the group's maximum, else 0", Ref("lab.core.deltas:group_max"))
    loo = Delta("loo", "minus the mean of the group's other rewards (leave-one-out)",
                Ref("lab.core.deltas:leave_one_out"), needs_group=True, scale=Ref("lab.core.deltas:unit_scale"))
    batch = Delta("batch", "minus the group mean, over the std of the whole batch's rewards (TRL's "
                  "scale_rewards=batch)", Ref("lab.core.deltas:batch_normalized"), needs_group=True, needs_batch=True)
    gae = Delta("gae", "a learned critic's GAE advantages, one per token (PPO)", Ref("lab.core.deltas:raw"),
                needs_critic=True)


NEEDS_GROUP = frozenset(m for m in DeltaMode if m.entry.needs_group)
"""Modes whose baseline needs at least two responses per prompt."""

NEEDS_CRITIC = frozenset(m for m in DeltaMode if m.entry.needs_critic)
"""Modes whose advantages come from a learned critic (`lab.training.critic`), not from the rewards alone."""


class Method(str, Enum):
    """The training methods (`lab.training.methods.METHODS`); each `--loss` belongs to one (its entry's `method`)."""

    policy_gradient = "policy-gradient"
    dpo = "dpo"
    sft = "sft"
    expert_iteration = "expert-iteration"


PPO_CLIP = Ref("lab.core.losses:ppo_clip_fractions")
"""PPO's clip metrics: the fractions of live tokens whose clipped term has no gradient, by side."""
CISPO_CLIP = Ref("lab.core.descendants:cispo_clip_fractions")
"""CISPO's: the fraction of live tokens whose weight was capped (their gradient kept, scaled down)."""
LEVEL = "importance_sampling_level"
"""The setting that picks token or sequence ratios (GSPO); a mode, so runs are grouped by it, not given it per run."""
CLIP_SETTINGS = ("clip_eps", "epsilon_high", "clip_delta")


@dataclass(frozen=True)
class Loss:
    """What a `--loss` is. For a policy-gradient loss:

        surrogate(log_probs, token_deltas, old_log_probs, mask, **settings) -> per-token loss float[... batch trial pos]
        clip_metrics(ratio, side, mask, **settings) -> (low, high) fractions of live tokens, float[...]

    log_probs, old_log_probs float[... batch trial pos] (old: None unless `needs_old`; constants), token_deltas
    float[... batch trial 1] (one per response) or float[... batch trial pos] (one per token: GAE), mask
    bool[... batch trial pos] of the live tokens or None (every position live); ratio = exp(l - l_old) float[...
    batch trial pos] (1 on padding), side the deltas shaped as token_deltas. A ratio per sequence (GSPO) is the
    surrogate's own reduction over `mask`. `settings` are the `TrainConfig` fields the two functions read, each a
    float or float[...] per leading index (a batch's runs). The loop aggregates the per-token loss
    (`lab.core.aggregation`) and adds the KL term and the entropy bonus.
    """

    name: str
    method: Method
    help: str
    """its line in `--loss`'s help"""
    surrogate: Ref | None = None
    needs_old: bool = False
    """its surrogate reads the sampling policy's log-probs (a ratio)"""
    clip_metrics: Ref | None = None
    """the `clip_*fraction` step metrics (None: NaN, no clip applies)"""
    clips: bool = False
    """the loss itself clips, so its clip fraction is what it cut (a run's figure shows it)"""
    settings: tuple[str, ...] = ()
    """the `TrainConfig` fields the surrogate and the clip metrics read (per run)"""


PG = Method.policy_gradient


class TrainingLoss(Table):
    """What a run minimises (`--loss`). The training loop dispatches on the entry's method (`lab.training.methods`);
    a policy-gradient loss's surrogate and clip metrics are its entry's functions (`lab.core.losses.compute_loss`)."""

    naive = Loss("naive", PG, "-log-prob x delta (REINFORCE)", Ref("lab.core.losses:naive"),
                 clip_metrics=PPO_CLIP, settings=("clip_eps",))
    unclipped = Loss("unclipped", PG, "-ratio x delta", Ref("lab.core.losses:unclipped"), needs_old=True,
                     clip_metrics=PPO_CLIP, settings=("clip_eps", LEVEL))
    clipped = Loss("clipped", PG, "PPO's -min(ratio x delta, clip(ratio, 1 - eps, 1 + eps) x delta), eps = "
                   "--clip-eps", Ref("lab.core.losses:clipped"), needs_old=True, clip_metrics=PPO_CLIP, clips=True,
                   settings=(*CLIP_SETTINGS, LEVEL))
    dpo = Loss("dpo", Method.dpo, "DPO on preference pairs, beta = --kl (> 0), the reference frozen at the initial "
               "policy")
    sft = Loss("sft", Method.sft, "the NLL of demonstrations (--demos)")
    expert_iteration = Loss("expert-iteration", Method.expert_iteration,
                            "the NLL of the policy's own samples that pass --ei-filter")
    cispo = Loss("cispo", PG, "MiniMax-M1's -sg(min(ratio, eps_max)) x delta x log-prob, eps_max = --epsilon-high "
                 "(default 5): the weight capped, every token's gradient kept", Ref("lab.core.descendants:cispo"),
                 needs_old=True, clip_metrics=CISPO_CLIP, clips=True, settings=("epsilon_high", LEVEL))
    sapo = Loss("sapo", PG, "SAPO's soft gate -(4 / tau) sigmoid(tau (ratio - 1)) x delta in place of the clip, "
                "tau = --sapo-temperature-pos/neg", Ref("lab.core.descendants:sapo"), needs_old=True,
                clip_metrics=PPO_CLIP, settings=("clip_eps", "sapo_temperature_pos", "sapo_temperature_neg", LEVEL))
    luspo = Loss("luspo", PG, "LUSPO: GSPO's clipped loss on sequence ratios, summed over each response's tokens "
                 "(with --loss-agg seq-mean-token-sum; its ratios are sequence level)", Ref("lab.core.descendants:luspo"), needs_old=True,
                 clip_metrics=PPO_CLIP, clips=True, settings=(*CLIP_SETTINGS, LEVEL))
    vespo = Loss("vespo", PG, "VESPO: -sg(phi(w)) x delta x log-prob, phi a weight shaped as a Gamma density in "
                 "the sequence ratio w (its shape: the four vespo options)", Ref("lab.core.descendants:vespo"),
                 needs_old=True, clip_metrics=PPO_CLIP,
                 settings=("clip_eps", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"))


class ImportanceLevel(str, Enum):
    """Whose ratio a ratio loss weighs each token by (`--importance-sampling-level`, TRL's): the token's own, or its
    response's, exp of the mean log-ratio over its live tokens (GSPO, `lab.core.losses.log_ratios`)."""

    token = "token"
    sequence = "sequence"


TRL_AGGREGATION = {"cispo": "token-mean", "vespo": "token-mean", "sapo": "seq-mean-token-mean",
                   "luspo": "seq-mean-token-sum"}
"""TRL 1.16's descendant loss types and the aggregation (`LossAgg` value) each loss_type does (`lab trl`)."""


class LossAgg(str, Enum):
    """How per-token losses are averaged (`--loss-agg`, verl's `loss_agg_mode`)."""

    token_mean = "token-mean"
    seq_mean_token_mean = "seq-mean-token-mean"
    seq_mean_token_sum = "seq-mean-token-sum"
    seq_mean_token_sum_norm = "seq-mean-token-sum-norm"


class DPOLoss(str, Enum):
    """How a pair's log-ratio difference becomes a loss (`--dpo-loss`, TRL's `loss_type`)."""

    sigmoid = "sigmoid"
    ipo = "ipo"


class IPOLogps(str, Enum):
    """Which sequence log-probs IPO's h is made of (`--ipo-logps`): sums over the response's tokens (Azar et al.,
    the default) or their per-token mean, each sequence's summed log-prob divided by its token count (TRL's
    `loss_type="ipo"`)."""

    sum = "sum"
    token_mean = "token-mean"


class Preference(str, Enum):
    """Which response of a pair wins (`--preference`)."""

    argmax = "argmax"
    bradley_terry = "bradley-terry"


class Pairs(str, Enum):
    """Where the pairs come from (`--pairs`): the current policy's groups, or a fixed set drawn from pi_ref."""

    online = "online"
    offline = "offline"


class KLEstimator(str, Enum):
    """The per-token KL estimator (`--kl-estimator`, verl's `kl_loss_type`)."""

    k1 = "k1"
    k2 = "k2"
    k3 = "k3"


class Optimizer(str, Enum):
    """Which optimizer steps the policy (`optimizer`, no CLI option): Adam, whose step is lr m / sqrt(v) whatever the
    gradient's scale, or plain SGD, whose step scales with the gradient (lab.training.optim.OPTIMIZERS)."""

    adam = "adam"
    sgd = "sgd"


class KLPlacement(str, Enum):
    """Where the KL penalty goes (`--kl-in`): verl's `use_kl_loss` (loss) or `use_kl_in_reward` (reward)."""

    loss = "loss"
    reward = "reward"


class ImportanceSampling(str, Enum):
    """How a sampler's responses are reweighted toward the trainer's policy (`--importance-sampling-correction`,
    TRL's `vllm_importance_sampling_mode`): one weight per token or per response, truncated to [C_min, C_max] or
    set to 0 outside it (`lab.core.importance`)."""

    token_truncate = "token-truncate"
    token_mask = "token-mask"
    sequence_truncate = "sequence-truncate"
    sequence_mask = "sequence-mask"


class Demos(str, Enum):
    """Where SFT's demonstrations come from (`--demos`, `lab.training.supervised`)."""

    optimal = "optimal"
    noisy = "noisy"
    policy = "policy"


class Filter(str, Enum):
    """Which of its own samples expert iteration keeps (`--ei-filter`)."""

    group_best = "group-best"
    threshold = "threshold"


class PolicyKind(str, Enum):
    """Which policy generates responses (`--policy`)."""

    factorized = "factorized"
    autoregressive = "autoregressive"


class Sampler(str, Enum):
    """How a run's generator draws responses (`--sampler`): the lab's inverse CDF or torch.multinomial."""

    inverse_cdf = "inverse-cdf"
    multinomial = "multinomial"


class RewardModelSize(str, Enum):
    """A reward model's size (`lab reward-model --size`): one family, its width apart."""

    small = "small"
    medium = "medium"
    large = "large"


class DType(str, Enum):
    """The floating-point type a run trains in (`--dtype`): its parameters, Adam state, rewards, deltas and losses."""

    float32 = "float32"
    float64 = "float64"

    @property
    def torch(self):
        import torch  # here: the config loads without torch

        return getattr(torch, self.value)
