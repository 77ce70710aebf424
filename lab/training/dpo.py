"""DPO inside the training loop: where a batch's preference pairs come from, its loss, its metrics.

    online   each epoch, pair (y_hi, y_lo) = the group's highest and lowest reward (first of ties); none when
             all G rewards are equal.
    offline  before training: 2N responses per prompt from pi_ref (the initial policy), paired (y_i, y_N+i);
             every epoch takes the loop's S Adam steps on this fixed set.
    preference decides each pair's winner (lab.core.dpo): argmax, or bradley-terry drawn from the run's
             pair generator (seeded from the run's generator, so the sampling stream is untouched by it).
    loss_r   = mean over run r's kept pairs of dpo_loss(...)   (0 without a kept pair: no update)
    log pi(y) = sum over y's live tokens of the step's per-token log-probs, from a forward pass on the pairs
             (`pair_responses`), or, where the kind needs the groups' pass for its step metrics (the
             autoregressive policy), a gather from it (online) or a second pass on the fixed set (offline)

A DPO batch (`TrainConfig.is_dpo`; never mixed with other losses, `pairs` is a shared field) freezes its
reference once, at the initial policy. Step metrics (TRL's names, lab.training.records.DPO_STEP_METRICS) are
means over kept pairs before each step's update, computed once per epoch; the exact optimum metrics
(lab.training.records.OPTIMUM_METRICS) are taken after each epoch's steps from the kind's exact distribution
over every response (lab.exact.distributions, lab.exact.optimum's formulas).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

import lab.policies as P
from lab.core.dpo import DPO_LOSSES, Preference, dpo_loss, preference_probability
from lab.exact import varlen
from lab.training.config import TrainConfig
from lab.training.runs import RunGroups, RunSettings

SEED_RANGE = 2**62
"""A run's pair generator is seeded with one integer drawn below this from the run's own generator."""


@dataclass(frozen=True)
class PairSet:
    """A batch's preference pairs: winners first, then losers, on the trial axis."""

    responses: Tensor | None
    """int[run batch 2K pos] (offline: the fixed set; online: None, the pairs index the epoch's groups)"""
    mask: Tensor | None
    """bool[run batch 2K pos] live tokens (None: fixed length)"""
    index: Tensor | None
    """online: int[run batch 2] trial indices of (winner, loser) in the epoch's groups"""
    keep: Tensor
    """float[run batch K]: 1 for a pair that counts, 0 for a dropped one (a tie, a constant group)"""
    ref_logps: Tensor | None
    """offline: float[run batch 2K] sequence log-probs under pi_ref (online: taken each epoch)"""


def pair_generators(generators: list[torch.Generator], device: torch.device) -> list[torch.Generator]:
    """One generator per run for its preference draws and offline set, seeded from the run's generator."""
    seeds = [int(torch.randint(SEED_RANGE, (1,), generator=g, device=g.device)) for g in generators]
    return [torch.Generator(device).manual_seed(s) for s in seeds]


def _winners(first: Tensor, second: Tensor, first_rewards: Tensor, second_rewards: Tensor,
             preference_groups, generators: list[torch.Generator]) -> tuple[Tensor, Tensor, Tensor]:
    """Each run's preference model on pairs (first, second), int[run batch K ...] with rewards float[run batch K]
    -> winners, losers (same shape as first) and keep float[run batch K]. A bradley-terry run draws one uniform
    per pair from its generator; an argmax run draws nothing (its uniform is 1/2: the sure winner wins)."""
    judged = preference_groups.apply(lambda preference, a, b: torch.stack(
        [v.to(torch.float32) for v in preference_probability(a, b, preference)], dim=-1),
        first_rewards, second_rewards)  # float[run batch K 2]: P(first wins), kept
    probability, keep = judged.unbind(-1)
    uniform = torch.full_like(probability, 0.5)
    for runs_key, runs in preference_groups.groups:
        if runs_key is Preference.bradley_terry:
            for r in runs.tolist():
                uniform[r] = torch.rand(probability.shape[1:], generator=generators[r],
                                        device=probability.device).to(probability)
    wins = uniform < probability
    pick = wins.reshape(*wins.shape, *([1] * (first.dim() - wins.dim())))
    return torch.where(pick, first, second), torch.where(pick, second, first), keep


def online_pairs(responses: Tensor, rewards: Tensor, preference_groups, generators: list[torch.Generator]) -> PairSet:
    """The pair of each group: its highest and lowest reward, ordered by the preference model."""
    high, low = rewards.argmax(dim=-1, keepdim=True), rewards.argmin(dim=-1, keepdim=True)  # int[run batch 1]
    winner, loser, keep = _winners(high, low, rewards.gather(-1, high), rewards.gather(-1, low), preference_groups,
                                   generators)
    keep = keep * (rewards.gather(-1, high) > rewards.gather(-1, low))  # a constant group gives no pair
    return PairSet(None, None, torch.cat([winner, loser], dim=-1), keep, None)


def offline_pairs(kind, reference: list[Tensor], n: int, preference_groups, generators: list[torch.Generator],
                  reward_of) -> PairSet:
    """The fixed set: 2N responses per prompt drawn from pi_ref (the kind's initial policy), paired and judged.

    `reward_of(responses int[run batch trial pos]) -> float[run batch trial]` scores with each run's reward.
    """
    responses = P.sample(kind.tempered_policy(), kind.prompts, 2 * n, generators)  # int[run batch 2N pos], at T
    rewards = reward_of(responses)
    first, second = responses[..., :n, :], responses[..., n:, :]
    winner, loser, keep = _winners(first, second, rewards[..., :n], rewards[..., n:], preference_groups, generators)
    pairs = torch.cat([winner, loser], dim=-2)
    mask = kind.live_tokens(pairs)
    with torch.no_grad():
        ref_logps = kind.log_probs(reference, pairs, mask)[0].sum(dim=-1)  # float[run batch 2N]
    return PairSet(pairs, mask, None, keep, ref_logps)


def pair_responses(pairs: PairSet, responses: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """The pairs' responses int[run batch 2K pos] and live tokens (None: fixed length); online, a gather from
    the epoch's groups int[run batch trial pos]."""
    if pairs.index is None:
        return pairs.responses, pairs.mask
    index = pairs.index.unsqueeze(-1).expand(*pairs.index.shape, responses.shape[-1])
    return responses.gather(-2, index), None if mask is None else mask.gather(-2, index)


def pair_log_probs(pairs: PairSet, kind, parameters: list[Tensor], log_probs: Tensor, on_groups: bool) -> Tensor:
    """Sequence log-probs of the pairs under the policy, with gradient: float[run batch 2K].

    log_probs: the loop's per-token float[run batch trial pos], on the pairs themselves, or (`on_groups`) on
    the epoch's groups: online pairs are then a gather from their sums over positions, and the offline set
    takes a forward pass of its own."""
    if not on_groups:
        return log_probs.sum(dim=-1)
    if pairs.index is not None:
        return log_probs.sum(dim=-1).gather(-1, pairs.index)
    return kind.log_probs(parameters, pairs.responses, pairs.mask)[0].sum(dim=-1)


def pair_loss(logps: Tensor, ref_logps: Tensor, keep: Tensor, loss_groups, beta: Tensor) -> Tensor:
    """Each run's mean DPO loss (lab.core.dpo.dpo_loss) over its kept pairs, float[run] (0 without a kept pair:
    no update).

    logps, ref_logps float[run batch 2K] (winners, then losers); keep float[run batch K]; loss_groups: the
    runs grouped by `dpo_loss`; beta float[run]."""
    k = keep.shape[-1]
    losses = loss_groups.apply(lambda loss_type, lp, ref, b: dpo_loss(lp[..., :k], lp[..., k:], ref[..., :k],
                                                                      ref[..., k:], b, loss_type)[0],
                               logps, ref_logps, beta.reshape(-1, 1, 1).to(logps))  # float[run batch K]
    return (losses * keep).sum(dim=(-2, -1)) / keep.sum(dim=(-2, -1)).clamp_min(1)


@dataclass(frozen=True)
class EpochPairLoss:
    """`pair_loss` for one epoch's pairs as a function of the policy's log-probs alone: what stays fixed over
    the epoch's steps (the pairs' reference log-probs, kept pairs per run, beta per run) is taken once, and
    dpo_loss's h, in its order of operations, goes straight through its loss table (what dpo_loss adds,
    parsing and checking its arguments and the implicit rewards, is done once: TrainConfig checks beta > 0,
    pair_metrics takes the rewards). Bitwise pair_loss (tests/training/test_dpo_train.py). Measured against it,
    alternating runs: one DPO run alone 10% faster (median of 16 pairs), a 500-run sweep 4% at two threads."""

    ref_chosen: Tensor
    """float[run batch K]"""
    ref_rejected: Tensor
    """float[run batch K]"""
    keep: Tensor
    """float[run batch K]"""
    count: Tensor
    """float[run]: kept pairs, at least 1"""
    beta: Tensor
    """float[run 1 1]"""
    loss_groups: RunGroups

    @classmethod
    def of(cls, ref_logps: Tensor, keep: Tensor, loss_groups: RunGroups, beta: Tensor) -> EpochPairLoss:
        """ref_logps float[run batch 2K] (winners, then losers), keep float[run batch K], beta float[run]."""
        k = keep.shape[-1]
        return cls(ref_logps[..., :k], ref_logps[..., k:], keep, keep.sum(dim=(-2, -1)).clamp_min(1),
                   beta.reshape(-1, 1, 1).to(ref_logps), loss_groups)

    def __call__(self, logps: Tensor) -> Tensor:
        """Each run's mean DPO loss over its kept pairs, float[run], for logps float[run batch 2K]."""
        k = self.keep.shape[-1]
        h = (logps[..., :k] - self.ref_chosen) - (logps[..., k:] - self.ref_rejected)  # float[run batch K]
        losses = self.loss_groups.apply(lambda loss_type, h, b: DPO_LOSSES[loss_type](h, b, 0.0), h, self.beta)
        return (losses * self.keep).sum(dim=(-2, -1)) / self.count


DPO_STEP_MEANS = ("chosen_rewards", "rejected_rewards", "reward_accuracy", "reward_margin", "chosen_logps",
                  "rejected_logps")
"""The step metrics that are means over kept pairs (lab.training.records.DPO_STEP_METRICS), pair_metrics' order."""


@torch.no_grad()
def pair_metrics(logps: Tensor, ref_logps: Tensor, keep: Tensor, beta: Tensor) -> dict[str, Tensor]:
    """TRL's DPO metrics of pairs measured before each step's update, float[... run] each.

    logps float[... run batch 2K] (the policy's, one entry per step of an epoch), ref_logps float[run batch 2K],
    keep float[run batch K] and beta float[run]: the means over kept pairs of DPO_STEP_MEANS (NaN for a run
    without one) and `pair_fraction`. An epoch's steps are measured together, all six means in one reduction:
    written out per step (about forty small kernels), the metrics took 0.25 s of a 500-run DPO sweep's 4.5 s
    at one thread (cProfile)."""
    k = keep.shape[-1]
    rewards = beta.reshape(-1, 1, 1).to(logps) * (logps - ref_logps)  # TRL's implicit rewards, beta log pi/pi_ref
    chosen_rewards, rejected_rewards = rewards[..., :k], rewards[..., k:]
    values = torch.stack([chosen_rewards, rejected_rewards, (chosen_rewards > rejected_rewards).to(rewards),
                          chosen_rewards - rejected_rewards, logps[..., :k], logps[..., k:]])
    count = keep.sum(dim=(-2, -1))  # float[run]
    means = (values * keep).sum(dim=(-2, -1)) / count.clamp_min(1)  # float[6 ... run]
    means = torch.where(count > 0, means, torch.full_like(means, float("nan")))
    fraction = (count / (keep.shape[-2] * k)).expand_as(means[0])
    return dict(zip(DPO_STEP_MEANS, means.unbind()), pair_fraction=fraction)


class OptimumTracker:
    """Exact KL(pi_theta || pi*), J_beta(pi_theta) and J_beta(pi*) - J_beta(pi_theta) of every run, means over
    prompts, NaN for a run with beta = 0; from the kind's exact distribution (lab.exact.distributions), all runs
    at once. J_beta(pi*) = beta log Z comes once, from the initial policy's table (lab.exact.optimum):

        J_beta(pi_theta) = E_theta[r] - beta KL(pi_theta || pi_ref)
        KL(pi_theta || pi*) = KL(pi_theta || pi_ref) - E_theta[r] / beta + log Z     (log pi* = log pi_ref + r / beta
                            = (J_beta(pi*) - J_beta(pi_theta)) / beta                  - log Z, summed under pi_theta)
    """

    def __init__(self, kind, reward_names: list[str], betas: list[float]) -> None:
        with torch.no_grad():
            self.reference = kind.exact_distribution()
            log_ref = self.reference.log_probs()  # float[run batch n]
            tables = {name: varlen.reward_table(kind.policy, kind.prompts, name).to(log_ref)
                      for name in dict.fromkeys(reward_names)}
            self.rewards = torch.stack([tables[name] for name in reward_names])  # float[run batch n]
            beta = torch.tensor(betas, dtype=torch.float64, device=log_ref.device)
            self.off = beta <= 0
            self.beta = torch.where(self.off, torch.ones_like(beta), beta).unsqueeze(-1)  # float[run 1]
            self.best = self.beta * torch.logsumexp(log_ref + self.rewards / self.beta.unsqueeze(-1), dim=-1)
        self.log: dict[str, list[Tensor]] = {}  # name -> one float[run] per epoch

    def record(self, kind) -> None:
        """Measure the kind's policy after an epoch's steps and keep the values for `epoch_metrics`."""
        for name, values in self.measure(kind.exact_distribution()).items():
            self.log.setdefault(name, []).append(values)

    def epoch_metrics(self) -> dict[str, Tensor]:
        """name -> float[run epoch], every recorded epoch."""
        return {name: torch.stack(values, dim=1) for name, values in self.log.items()}

    def measure(self, policy) -> dict[str, Tensor]:
        """float[run] each, for a policy's exact distribution (the kind's, as `reference`)."""
        with torch.no_grad():
            objective = policy.expectation(self.rewards) - self.beta * policy.kl(self.reference)  # float[run batch]
            gap = self.best - objective
            values = torch.stack([gap / self.beta, objective, gap]).mean(-1)  # float[3 run]
            values = values.masked_fill(self.off, float("nan")).float()
            return dict(zip(("kl_to_optimum", "objective_exact", "objective_gap"), values.unbind()))


@dataclass
class DPOSetup:
    """What a DPO batch adds to the loop: its pair generators, mode groups, pairs and step metrics."""

    offline: bool
    generators: list[torch.Generator]
    preference_groups: RunGroups
    loss_groups: RunGroups
    reward_of: Callable[[Tensor], Tensor]
    pairs: PairSet | None = None
    step_log: dict[str, list[Tensor]] = field(default_factory=dict)
    """name -> one float[step run] per epoch"""
    ref_logps: Tensor | None = None
    """the epoch's pairs' sequence log-probs under pi_ref, float[run batch 2K]"""
    loss: EpochPairLoss | None = None
    """the epoch's loss of the pairs' log-probs"""
    epoch_logps: list[Tensor] = field(default_factory=list)
    """the epoch's pairs' sequence log-probs under the policy, one float[run batch 2K] per step so far"""

    def start_epoch(self, epoch: int, kind, reference: list[Tensor], pairs_per_prompt: int) -> None:
        """Offline: the fixed set, drawn from pi_ref (the reference, frozen at the start) before the first epoch."""
        if self.offline and epoch == 0:
            self.pairs = offline_pairs(kind, reference, pairs_per_prompt, self.preference_groups, self.generators,
                                       self.reward_of)

    def take_groups(self, responses: Tensor, rewards: Tensor) -> None:
        """Online: each group of the epoch gives its pair (highest, lowest reward), judged by the preference."""
        if not self.offline:
            self.pairs = online_pairs(responses, rewards, self.preference_groups, self.generators)

    def responses(self, groups) -> tuple[Tensor, Tensor | None]:
        """What the epoch's DPO loss reads: its pairs' responses int[run batch 2K pos] and live tokens."""
        return pair_responses(self.pairs, groups.responses, groups.mask)

    def step_loss(self, kind, parameters: list[Tensor], log_probs: Tensor, ref_log_probs: Tensor | None,
                  beta: Tensor, on_groups: bool) -> Tensor:
        """One step's DPO loss float[run]. log_probs: per token, on the pairs (`responses`) or, `on_groups`,
        on the epoch's groups (`pair_log_probs`); `ref_log_probs`, on the same responses, is given at the
        epoch's first step only: the pairs' reference log-probs stay fixed for the epoch."""
        if ref_log_probs is not None:
            self.ref_logps = (self.pairs.ref_logps if self.pairs.index is None else
                              pair_log_probs(self.pairs, kind, [], ref_log_probs, on_groups))
            self.loss = EpochPairLoss.of(self.ref_logps, self.pairs.keep, self.loss_groups, beta)
        logps = pair_log_probs(self.pairs, kind, parameters, log_probs, on_groups)
        self.epoch_logps.append(logps.detach())
        return self.loss(logps)

    def end_epoch(self, beta: Tensor) -> None:
        """The epoch's step metrics, from every step's pair log-probs at once (float[step run] each)."""
        for name, values in pair_metrics(torch.stack(self.epoch_logps), self.ref_logps, self.pairs.keep,
                                         beta).items():
            self.step_log.setdefault(name, []).append(values)
        self.epoch_logps = []

    @classmethod
    def of(cls, configs: list[TrainConfig], kind, settings: RunSettings, generators: list[torch.Generator],
           device: torch.device) -> DPOSetup:
        reward_of = lambda y: settings.reward_groups.apply(  # noqa: E731
            lambda name, responses: kind.rewards[name](kind.prompts, responses), y)
        return cls(configs[0].pairs == "offline", pair_generators(generators, device),
                   RunGroups([c.preference for c in configs], device), RunGroups([c.dpo_loss for c in configs], device),
                   reward_of)
