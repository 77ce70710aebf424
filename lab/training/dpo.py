"""DPO inside the training loop: its loss on a batch's preference pairs (lab.training.preference_pairs), its metrics.

    loss_r   = mean over run r's kept pairs of dpo_loss(...)   (0 without a kept pair: no update)
    log pi(y) = sum over y's live tokens of the step's per-token log-probs, from a forward pass on the pairs
             (`pair_responses`), or, where the kind needs the groups' pass for its step metrics (the
             autoregressive policy), a gather from it (online) or a second pass on the fixed set (offline);
             an `--ipo-logps token-mean` run divides it, and log pi_ref(y), by |y|, y's live tokens (EOS
             included), before h: TRL's IPO (`pair_lengths`)

A DPO batch (`TrainConfig.is_dpo`; never mixed with other losses, `pairs` is a shared field) freezes its
reference once, at the initial policy. Step metrics (TRL's names, lab.training.records.DPO_STEP_METRICS) are
means over kept pairs before each step's update, computed once per epoch; the exact optimum metrics
(lab.training.records.OPTIMUM_METRICS) are taken after each epoch's steps (lab.training.optimum).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from lab.core.dpo import DPO_LOSSES, dpo_loss
from lab.core.modes import IPOLogps
from lab.training.config import TrainConfig
from lab.training.lengths import response_lengths
from lab.training.preference_pairs import (PairSet, offline_pairs, online_pairs, pair_generators, pair_responses,
                                           read_pairs)
from lab.training.runs import RunGroups, RunSettings


def pair_log_probs(pairs: PairSet, kind, parameters: list[Tensor], log_probs: Tensor, on_groups: bool) -> Tensor:
    """Sequence log-probs of the pairs under the policy, with gradient: float[run batch 2K].

    log_probs: the loop's per-token float[run batch trial pos], on the pairs themselves, or (`on_groups`) on
    the epoch's groups: online pairs are then a gather from their sums over positions, and the offline set
    takes a forward pass of its own."""
    if on_groups and pairs.index is None:
        return kind.log_probs(parameters, pairs.responses, pairs.mask)[0].sum(dim=-1)
    return online_sums(pairs, log_probs, on_groups)


def pair_lengths(responses: Tensor, mask: Tensor | None, mean_runs: Tensor) -> Tensor:
    """What each pair's sequence log-probs are divided by, float[run batch 2K]: |y|, the live tokens of y (the pairs'
    responses int[run batch 2K pos], live tokens bool or None: every position), on the `--ipo-logps token-mean`
    runs (mean_runs bool[run]), 1 on the others (a division by 1 is exact: their h is bitwise the summed one)."""
    counts = response_lengths(responses, mask).to(torch.get_default_dtype())
    return torch.where(mean_runs.reshape(-1, 1, 1), counts, torch.ones_like(counts))


def online_sums(pairs: PairSet, log_probs: Tensor, on_groups: bool) -> Tensor:
    """Sequence log-probs float[run batch 2K] from per-token ones already taken on the pairs, or (`on_groups`)
    on the epoch's groups, where online pairs are a gather from their sums."""
    sums = log_probs.sum(dim=-1)
    return sums.gather(-1, pairs.index) if on_groups else sums


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
    pair_metrics takes the rewards; the loop has no label smoothing, so both paths take dpo_loss's 0). Bitwise
    pair_loss (tests/training/test_dpo_train.py). Measured against it, alternating runs: one DPO run alone
    0.90x (median of 16 pairs' ratios; best times 0.604 s against 0.623 s), a 500-run sweep 0.96x at two
    threads (median of 8), 0.99x at one."""

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


@dataclass
class DPOSetup:
    """DPO's entry in the method table (`lab.training.methods.METHODS`): its pair generators, mode groups,
    pairs and step metrics. Its reference is frozen once, at the start (the initial policy)."""

    tracks_optimum = True
    tracks_progress = False
    epoch_log = {}

    offline: bool
    generators: list[torch.Generator]
    preference_groups: RunGroups
    loss_groups: RunGroups
    reward_of: Callable[[Tensor], Tensor]
    given: dict[int, Tensor] = field(default_factory=dict)
    """offline with `pairs_from`: run -> the reward model's pairs int[batch 2N pos] (`read_pairs`)"""
    pairs: PairSet | None = None
    step_log: dict[str, list[Tensor]] = field(default_factory=dict)
    """name -> one float[step run] per epoch"""
    ref_logps: Tensor | None = None
    """the epoch's pairs' sequence log-probs under pi_ref, float[run batch 2K]"""
    loss: EpochPairLoss | None = None
    """the epoch's loss of the pairs' log-probs"""
    epoch_logps: list[Tensor] = field(default_factory=list)
    """the epoch's pairs' sequence log-probs under the policy, one float[run batch 2K] per step so far"""
    mean_runs: Tensor | None = None
    """bool[run]: the `--ipo-logps token-mean` runs (None where no run is one: nothing is divided)"""
    lengths: Tensor | None = None
    """the pairs' divisors float[run batch 2K] (`pair_lengths`), None without `mean_runs`"""

    def reference_period(self, kl_period: int) -> int:
        return 0  # frozen at the start, whatever `kl_period` says

    def start_epoch(self, epoch, kind, shared: TrainConfig) -> None:
        """Offline: the fixed set, drawn from pi_ref (the reference, frozen at the start) before the first epoch."""
        if self.offline and epoch.index == 0:
            self.pairs = offline_pairs(kind, epoch.reference, shared.pairs_per_prompt, self.preference_groups,
                                       self.generators, self.reward_of, self.given)
            if self.mean_runs is not None:
                self.lengths = pair_lengths(self.pairs.responses, self.pairs.mask, self.mean_runs)

    def take_groups(self, groups) -> None:
        """Online: each group of the epoch gives its pair (highest, lowest reward), judged by the preference."""
        if not self.offline:
            self.pairs = online_pairs(groups.responses, groups.rewards, self.preference_groups, self.generators)
            if self.mean_runs is not None:
                self.lengths = pair_lengths(*pair_responses(self.pairs, groups.responses, groups.mask), self.mean_runs)

    def sample_marks(self) -> Tensor:
        """int[run batch 2]: each group's (chosen, rejected) trial indices for samples.txt, -1 where it gave no pair
        (all -1 offline: the fixed set is not the groups)."""
        if self.pairs.index is None:
            return torch.full((*self.pairs.keep.shape[:2], 2), -1, dtype=torch.long, device=self.pairs.keep.device)
        return self.pairs.index.masked_fill(self.pairs.keep == 0, -1)

    def forward_responses(self, kind, groups) -> tuple[Tensor, Tensor | None, bool]:
        """The responses a step's forward pass covers, their live tokens, and whether they are the groups.

        What the DPO loss reads are the pairs (int[run batch 2K pos]); a kind that reads the groups' step
        metrics off its log-softmaxes (`BlockMetrics.from_log_softmax`: the factorised policy) forwards just
        those, the others the groups. A speed path, bitwise the groups' pass (tests/training/test_dpo_train.py):
        counted with valgrind (cachegrind, 500 runs at one thread, 30 epochs minus 10), 5.3% fewer instructions
        for online DPO (4.997 G against 5.279 G), 13.5% for offline with N = 5 (5.661 G against 6.546 G)."""
        if not kind.step_metrics.from_log_softmax:
            return groups.responses, groups.mask, True
        return *pair_responses(self.pairs, groups.responses, groups.mask), False

    def step_loss(self, loop, epoch, step: int, log_probs: Tensor, aux: Tensor, old_log_probs: Tensor,
                  ref_log_probs: Tensor, on_groups: bool) -> tuple[Tensor, Tensor]:
        """One step's DPO loss float[run], twice (it is also the step's `pg_loss`). log_probs: per token, on the
        pairs (`responses`) or, `on_groups`, on the epoch's groups (`pair_log_probs`); `ref_log_probs`, on the same
        responses, is read at the epoch's first step only: the pairs' reference log-probs stay fixed for the
        epoch."""
        if step == 0:
            self.ref_logps = (self.pairs.ref_logps if self.pairs.index is None else
                              online_sums(self.pairs, ref_log_probs, on_groups))
            if self.lengths is not None:
                self.ref_logps = self.ref_logps / self.lengths.to(self.ref_logps)
            self.loss = EpochPairLoss.of(self.ref_logps, self.pairs.keep, self.loss_groups, loop.settings.beta)
        logps = pair_log_probs(self.pairs, loop.kind, loop.parameters, log_probs, on_groups)
        if self.lengths is not None:  # TRL's IPO: log pi(y) / |y| (the step metrics read it too, as TRL's logps)
            logps = logps / self.lengths.to(logps)
        self.epoch_logps.append(logps.detach())
        loss = self.loss(logps)
        return loss, loss

    def end_epoch(self, settings: RunSettings) -> None:
        """The epoch's step metrics, from every step's pair log-probs at once (float[step run] each)."""
        for name, values in pair_metrics(torch.stack(self.epoch_logps), self.ref_logps, self.pairs.keep,
                                         settings.beta).items():
            self.step_log.setdefault(name, []).append(values)
        self.epoch_logps = []

    @classmethod
    def of(cls, configs: list[TrainConfig], kind, settings: RunSettings, generators: list[torch.Generator],
           device: torch.device) -> DPOSetup:
        reward_of = lambda y: settings.reward_groups.apply(  # noqa: E731
            lambda name, responses: kind.rewards[name](kind.prompts, responses), y)
        given = {run: read_pairs(c.pairs_from, len(kind.prompts), c.pairs_per_prompt).to(device)
                 for run, c in enumerate(configs) if c.pairs_from is not None}
        means = [c.ipo_logps is IPOLogps.token_mean for c in configs]
        return cls(configs[0].pairs == "offline", pair_generators(generators, device),
                   RunGroups([c.preference for c in configs], device), RunGroups([c.dpo_loss for c in configs], device),
                   reward_of, given, mean_runs=torch.tensor(means, device=device) if any(means) else None)
