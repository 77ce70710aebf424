"""Where a DPO batch's preference pairs come from, and which response of each pair wins.

    online     each epoch, pair (y_hi, y_lo) = the group's highest and lowest reward (first of ties); none when
               all G rewards are equal.
    offline    before training: 2N responses per prompt from pi_ref (the initial policy), paired (y_i, y_N+i);
               every epoch takes the loop's S Adam steps on this fixed set. With `pairs_from`, the set is a
               reward model's own (its folder's pairs.csv, judged when it was drawn): DPO on the very pairs the
               reward model was fitted on; a pair of one response twice does not count.
    preference decides each pair's winner (lab.core.dpo): argmax, or bradley-terry drawn from the run's pair
               generator (seeded from the run's generator, so the sampling stream is untouched by it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

import lab.policies as P
from lab.core.dpo import Preference, preference_probability


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
                  reward_of, given: dict[int, Tensor] | None = None) -> PairSet:
    """The fixed set: 2N responses per prompt drawn from pi_ref (the kind's initial policy), paired and judged.

    `reward_of(responses int[run batch trial pos]) -> float[run batch trial]` scores with each run's reward.
    `given`: run -> its set int[batch 2N pos] (winners, then losers) read from a reward model's folder
    (`read_pairs`), in place of the drawn one (drawn all the same, so each run's generators advance alike).
    """
    responses = P.sample(kind.tempered_policy(), kind.prompts, 2 * n, generators)  # int[run batch 2N pos], at T
    rewards = reward_of(responses)
    first, second = responses[..., :n, :], responses[..., n:, :]
    winner, loser, keep = _winners(first, second, rewards[..., :n], rewards[..., n:], preference_groups, generators)
    pairs = torch.cat([winner, loser], dim=-2)
    for run, fixed in (given or {}).items():
        pairs[run] = fixed.to(pairs)
        keep[run] = (fixed[:, :n] != fixed[:, n:]).any(-1).to(keep)  # one response twice: no preference in it
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


PAIRS_HEADER = ["prompt", "chosen", "rejected"]
TOKEN_DIGITS = 10
"""A token has at most 10 digits (vocabulary sizes are below 2**31): longer text is refused before int() sees it."""


def read_pairs(folder: str, batch: int, n: int, length: int | None = None, top: int | None = None) -> Tensor:
    """A reward-model folder's pairs.csv (`lab reward-model`: prompt, chosen, rejected tokens) as int[batch 2N pos],
    winners then losers per prompt, parsed strictly: the header, `batch * n` rows whose prompt column counts
    0, ..., 0, 1, ... (n rows each), and every response of `length` tokens in 0..`top` (None: as the first row). A
    `ValueError` names the row and the field (`lab.files.reward_model_folder.read_reward_model` reads it first)."""
    import csv
    from pathlib import Path

    path = Path(folder) / "pairs.csv"
    with open(path, newline="") as f:
        reader = csv.reader(f)
        if next(reader, None) != PAIRS_HEADER:
            raise ValueError(f"{path}: its first line must be {','.join(PAIRS_HEADER)}")
        responses = []
        for number, row in enumerate(reader, start=2):
            if len(row) != 3:
                raise ValueError(f"{path}: line {number}: a line must have three fields, {','.join(PAIRS_HEADER)}")
            if len(responses) == batch * n:
                raise ValueError(f"{path}: line {number}: more than the {batch} prompts x {n} pairs the folder's "
                                 "config.json says")
            if row[0] != str(len(responses) // n):
                raise ValueError(f"{path}: line {number}: the prompt must be {len(responses) // n} (the pairs of "
                                 f"prompt b are lines {n} b + 2 ...), got {row[0][:20]!r}")
            pair = [_tokens(path, number, field, text, top) for field, text in zip(PAIRS_HEADER[1:], row[1:])]
            length = len(pair[0]) if length is None else length
            if any(len(tokens) != length for tokens in pair):
                raise ValueError(f"{path}: line {number}: a response must have {length} tokens")
            responses.append(pair)
    if len(responses) != batch * n:
        raise ValueError(f"{path}: {len(responses)} pairs, the folder's config.json says {batch} prompts x {n} pairs")
    pairs = torch.tensor(responses, dtype=torch.long).reshape(batch, n, 2, length)
    return torch.cat([pairs[:, :, 0], pairs[:, :, 1]], dim=1)


def _tokens(path, number: int, field: str, text: str, top: int | None) -> list[int]:
    """One response's space-separated tokens, each a whole number in 0..top."""
    words = text.split(" ")
    if not all(w.isascii() and w.isdigit() and len(w) <= TOKEN_DIGITS for w in words):
        raise ValueError(f"{path}: line {number}: \"{field}\" must be space-separated whole numbers, got {text[:30]!r}")
    tokens = [int(w) for w in words]
    if top is not None and max(tokens) > top:
        raise ValueError(f"{path}: line {number}: \"{field}\" holds token {max(tokens)}; tokens lie in 0..{top}")
    return tokens
