"""The lab's modes: the `str` enums its options choose from, one definition each, without torch.

    DeltaMode (--delta)                  its functions: DELTA_FUNCTIONS in lab.core.deltas
    TrainingLoss (--loss)                its method: METHOD_OF in lab.training.config
    LossAgg (--loss-agg)                 AGGREGATIONS in lab.core.aggregation
    DPOLoss, Preference, Pairs           DPO_LOSSES in lab.core.dpo; lab.training.dpo, preference_pairs
    IPOLogps (--ipo-logps)               lab.training.dpo (pair_lengths)
    KLEstimator, KLPlacement             ESTIMATORS in lab.core.kl; lab.training.runs
    Filter (--ei-filter)                 lab.training.supervised
    PolicyKind (--policy)                POLICIES in lab.policies
    Sampler (--sampler)                  SAMPLERS in lab.policies.sampling
    RewardModelSize (lab reward-model)   SIZES in lab.training.reward_model

They live here, apart from the math that dispatches on them, so that the `lab` command builds its options
(`lab --help`, `lab run --help`) without loading torch (tests/cli/test_help_imports.py).
"""

from __future__ import annotations

from enum import Enum


class DeltaMode(str, Enum):
    """How rewards become deltas."""

    raw = "raw"
    centered = "centered"
    normalized = "normalized"
    max = "max"
    loo = "loo"
    gae = "gae"


NEEDS_GROUP = frozenset({DeltaMode.centered, DeltaMode.normalized, DeltaMode.loo})
"""Modes whose baseline needs at least two responses per prompt."""

NEEDS_CRITIC = frozenset({DeltaMode.gae})
"""Modes whose advantages come from a learned critic (`lab.training.critic`), not from the rewards alone."""


class TrainingLoss(str, Enum):
    """What a run minimises (`--loss`): one of the surrogates of `lab.core.losses` (`LossMode`, on deltas), `dpo`,
    the loss on preference pairs of `lab.core.dpo`, or the negative log-likelihood of responses (`lab.core.sft`) on
    demonstrations (`sft`) or on the policy's own filtered samples (`expert-iteration`). The training loop
    dispatches on its method (`lab.training.methods`)."""

    naive = "naive"
    unclipped = "unclipped"
    clipped = "clipped"
    dpo = "dpo"
    sft = "sft"
    expert_iteration = "expert-iteration"


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


class KLPlacement(str, Enum):
    """Where the KL penalty goes (`--kl-in`): verl's `use_kl_loss` (loss) or `use_kl_in_reward` (reward)."""

    loss = "loss"
    reward = "reward"


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
