"""DPO inside the training loop: where a batch's preference pairs come from, its loss, its metrics.

    online   each epoch, pair (y_hi, y_lo) = the group's highest and lowest reward (first of ties); none when
             all G rewards are equal. Sequence log-probs come from the loop's own per-token log-probs.
    offline  before training: 2N responses per prompt from pi_ref (the initial policy), paired (y_i, y_N+i);
             every epoch takes the loop's S Adam steps on this fixed set.
    preference decides each pair's winner (lab.core.dpo): argmax, or bradley-terry drawn from the run's
             pair generator (seeded from the run's generator, so the sampling stream is untouched by it).
    loss_r   = mean over run r's kept pairs of dpo_loss(...)   (0 without a kept pair: no update)

A DPO batch (`TrainConfig.is_dpo`; never mixed with other losses, `pairs` is a shared field) freezes its
reference once, at the initial policy. Step metrics (TRL's names, lab.training.records.DPO_STEP_METRICS) are
means over kept pairs before each step's update; the exact optimum metrics (DPO_EPOCH_METRICS) are taken
after each epoch's steps from every run's enumerated response table (lab.exact.optimum).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

import lab.policies as P
from lab.policies.factorized import policy_logits
from lab.core.dpo import Preference, dpo_loss, preference_probability
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


def pair_log_probs(pairs: PairSet, kind, parameters: list[Tensor], log_probs: Tensor,
                   ref_log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """Sequence log-probs of the pairs under the policy (with gradient) and pi_ref: float[run batch 2K] each.

    log_probs, ref_log_probs: the loop's per-token float[run batch trial pos] on the epoch's groups."""
    if pairs.index is not None:  # online: a gather from the groups' sums over positions
        return (log_probs.sum(dim=-1).gather(-1, pairs.index),
                ref_log_probs.sum(dim=-1).gather(-1, pairs.index))
    return kind.log_probs(parameters, pairs.responses, pairs.mask)[0].sum(dim=-1), pairs.ref_logps


def pair_loss(logps: Tensor, ref_logps: Tensor, keep: Tensor, loss_groups, beta: Tensor) -> tuple[Tensor, dict]:
    """Each run's mean DPO loss over its kept pairs float[run], and the step's DPO metrics float[run] each.

    logps, ref_logps float[run batch 2K] (winners, then losers); keep float[run batch K]; loss_groups: the
    runs grouped by `dpo_loss`; beta float[run]."""
    k = keep.shape[-1]
    chosen, rejected, ref_chosen, ref_rejected = logps[..., :k], logps[..., k:], ref_logps[..., :k], ref_logps[..., k:]
    per_run = beta.reshape(-1, 1, 1).to(logps)  # float[run 1 1]
    losses = loss_groups.apply(lambda loss_type, c, r, rc, rr, b: dpo_loss(c, r, rc, rr, b, loss_type)[0],
                               chosen, rejected, ref_chosen, ref_rejected, per_run)  # float[run batch K]
    count = keep.sum(dim=(-2, -1))
    mean = lambda values: (values * keep).sum(dim=(-2, -1)) / count.clamp_min(1)  # noqa: E731
    with torch.no_grad():
        chosen_rewards, rejected_rewards = per_run * (chosen - ref_chosen), per_run * (rejected - ref_rejected)
        nan = torch.full_like(count, float("nan"))
        metric = lambda values: torch.where(count > 0, mean(values), nan)  # noqa: E731
        metrics = dict(chosen_rewards=metric(chosen_rewards), rejected_rewards=metric(rejected_rewards),
                       reward_accuracy=metric((chosen_rewards > rejected_rewards).float()),
                       reward_margin=metric(chosen_rewards - rejected_rewards),
                       chosen_logps=metric(chosen), rejected_logps=metric(rejected),
                       pair_fraction=count / keep[0].numel())
    return mean(losses), metrics


def table_log_probs(policy, prompts: Tensor) -> Tensor:
    """log pi(y | x) of every enumerated response in float64, for a run stack: float[run batch n]. The
    factorised policy's positions are independent given the prompt, so one log-softmax per position is
    gathered for every response (the same numbers as lab.exact.varlen, without a forward pass per response)."""
    if P.ops_of(policy).eos(policy) is not None:
        return varlen.all_log_probs(policy, prompts, torch.float64)
    params = {name: p.detach().to(torch.float64) for name, p in policy.named_parameters()}
    table = torch.log_softmax(policy_logits(params["embedding"], params["encode"], params["decode"], prompts), -1)
    responses = varlen.enumerate_responses(policy).to(prompts.device)  # int[n pos]
    picked = table.unsqueeze(-3).expand(*table.shape[:-2], len(responses), *table.shape[-2:])
    return picked.gather(-1, responses.unsqueeze(-1).expand(*picked.shape[:-1], 1)).squeeze(-1).sum(-1)


class OptimumTracker:
    """Exact KL(pi_theta || pi*), J_beta(pi_theta) and J_beta(pi*) - J_beta(pi_theta) of every run, means over
    prompts (lab.exact.optimum's formulas, all runs at once; NaN for a run with beta = 0). pi_ref's table and
    pi* are computed once, from the initial policy."""

    def __init__(self, reference, prompts: Tensor, reward_names: list[str], betas: list[float]) -> None:
        with torch.no_grad():
            self.prompts, self.log_ref = prompts, table_log_probs(reference, prompts)  # float[run batch n]
            tables = {name: varlen.reward_table(reference, prompts, name).to(self.log_ref)
                      for name in dict.fromkeys(reward_names)}
            self.rewards = torch.stack([tables[name] for name in reward_names])  # float[run batch n]
            beta = torch.tensor(betas, dtype=torch.float64, device=self.log_ref.device)
            self.off = beta <= 0
            self.beta = torch.where(self.off, torch.ones_like(beta), beta).reshape(-1, 1, 1)  # float[run 1 1]
            tilted = self.log_ref + self.rewards / self.beta
            self.log_star = torch.log_softmax(tilted, dim=-1)  # lab.exact.optimum.log_optimum
            self.best = self.beta.squeeze(-1) * torch.logsumexp(tilted, dim=-1)  # J_beta(pi*) = beta log Z
        self.log: dict[str, list[Tensor]] = {}  # name -> one float[run] per epoch

    def record(self, policy) -> None:
        """Measure the policy stack at the end of an epoch and keep the values for `epoch_metrics`."""
        for name, values in self.measure(policy).items():
            self.log.setdefault(name, []).append(values)

    def epoch_metrics(self) -> dict[str, Tensor]:
        """name -> float[run epoch], every recorded epoch."""
        return {name: torch.stack(values, dim=1) for name, values in self.log.items()}

    def measure(self, policy) -> dict[str, Tensor]:
        """float[run] each, for the policy stack as it is now."""
        with torch.no_grad():
            log_p = table_log_probs(policy, self.prompts)
            probs = log_p.exp()
            objective = (probs * (self.rewards - self.beta * (log_p - self.log_ref))).sum(-1)  # float[run batch]
            values = {"kl_to_optimum": (probs * (log_p - self.log_star)).sum(-1), "objective_exact": objective,
                      "objective_gap": self.best - objective}
            return {name: v.mean(-1).masked_fill(self.off, float("nan")).float() for name, v in values.items()}


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
    """name -> one float[run] per optimizer step"""

    def start_epoch(self, epoch: int, kind, reference: list[Tensor], pairs_per_prompt: int) -> None:
        """Offline: the fixed set, drawn from pi_ref (the reference, frozen at the start) before the first epoch."""
        if self.offline and epoch == 0:
            self.pairs = offline_pairs(kind, reference, pairs_per_prompt, self.preference_groups, self.generators,
                                       self.reward_of)

    def take_groups(self, responses: Tensor, rewards: Tensor) -> None:
        """Online: each group of the epoch gives its pair (highest, lowest reward), judged by the preference."""
        if not self.offline:
            self.pairs = online_pairs(responses, rewards, self.preference_groups, self.generators)

    @classmethod
    def of(cls, configs: list[TrainConfig], kind, settings: RunSettings, generators: list[torch.Generator],
           device: torch.device) -> DPOSetup:
        reward_of = lambda y: settings.reward_groups.apply(  # noqa: E731
            lambda name, responses: kind.rewards[name](kind.prompts, responses), y)
        return cls(configs[0].pairs == "offline", pair_generators(generators, device),
                   RunGroups([c.preference for c in configs], device), RunGroups([c.dpo_loss for c in configs], device),
                   reward_of)
