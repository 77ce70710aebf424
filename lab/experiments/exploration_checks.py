"""What the exploration data can and cannot say: the referee's checks of lab.experiments.exploration_results.

    discriminates(Q)   AUC of an initial quantity Q for success over every seed of the centered, clipped settings of
                       all init scales = P(Q(sorting seed) > Q(non-sorting seed)) (Mann-Whitney U / (n1 n0)), with
                       the two-sided Mann-Whitney p-value (scipy.stats.mannwhitneyu); Q discriminates when
                       AUC >= DISCRIMINATION (or <= 1 - DISCRIMINATION) and p < 0.05
    pass@k(p)          = 1 - (1 - p)^k per (seed, prompt), p = P(one sample is optimal); increasing in p for every
                       k >= 1, so training lowers pass@k at every k exactly where it lowers p
    crossing k         the smallest k of CROSSING_KS at which the mean over seeds and prompts of pass@k before
                       training exceeds that after (Yue et al. 2025's pattern), or none up to the largest
    fits               per seed and on the seed-mean curve (mean over seeds of each epoch's entropy and reward):
                       R = -a exp(H) + b and R = c H + d by least squares, each with its R^2
    loss share         at init 0.1, clipped minus naive paired by seed: the sampling entropy after EARLY_EPOCH
                       epochs and the success

Pure numpy/scipy on records and exact probabilities; nothing prints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from lab.exact.enumeration import all_probs, reward_table
from lab.exact.voting import pass_at_k_from_probs
from lab.policies.factorized import policy_from_state

DISCRIMINATION = 0.8
"""AUC from which an initial quantity counts as telling sorting seeds from stuck ones."""
CROSSING_KS = tuple(int(k) for k in np.unique(np.round(np.logspace(0, 5, 401))))
"""k of the crossing search: 1 to 100000, log-spaced."""
EARLY_EPOCH = 10
"""The epoch at which the loss's effect on the sampling entropy is read."""


def auc(values: np.ndarray, success: np.ndarray) -> tuple[float, float]:
    """(AUC, two-sided Mann-Whitney p) of `values` for the boolean `success`; (nan, nan) without both classes."""
    good, bad = values[success], values[~success]
    if len(good) == 0 or len(bad) == 0:
        return float("nan"), float("nan")
    test = stats.mannwhitneyu(good, bad, alternative="two-sided")
    return float(test.statistic / (len(good) * len(bad))), float(test.pvalue)


def discriminates(area: float, p: float) -> bool:
    return p < 0.05 and (area >= DISCRIMINATION or area <= 1 - DISCRIMINATION)


def optimal_probs(records, runs, prompts: torch.Tensor, reward: str, initial) -> tuple[np.ndarray, np.ndarray]:
    """P(one sample is optimal) per (seed, prompt) before and after training: float[seed prompt] x2.
    `initial(config, vocab, length)` builds a run's initial policy."""
    vocab, length = int(records.state["embedding"].shape[-2]), prompts.shape[1]
    table = reward_table(prompts, reward, vocab, length).double()
    out = []
    for build in (lambda r: initial(records.configs[r], vocab, length), lambda r: policy_from_state(records.state, r)):
        probs = torch.stack([all_probs(build(r), prompts, torch.float64).detach() for r in runs])
        out.append(pass_at_k_from_probs(probs, table, [1])[..., 0].numpy())
    return out[0], out[1]


def pass_at_k(p: np.ndarray, ks=CROSSING_KS) -> np.ndarray:
    """1 - (1 - p)^k: float[...] -> float[... len(ks)] (log1p, so k = 100000 with p = 1e-6 stays exact)."""
    ks = np.asarray(ks, dtype=float)
    return -np.expm1(ks * np.log1p(-np.clip(p, 0.0, 1.0))[..., None])


def crossing(before: np.ndarray, after: np.ndarray, ks=CROSSING_KS) -> int | None:
    """The smallest k at which mean pass@k before training exceeds mean pass@k after, else None."""
    wins = pass_at_k(before, ks).mean(axis=(0, 1)) > pass_at_k(after, ks).mean(axis=(0, 1))
    return int(np.asarray(ks)[wins.argmax()]) if wins.any() else None


@dataclass(frozen=True)
class FitQuality:
    """R^2 of R = -a exp(H) + b and of R = c H + d, per seed and on the seed-mean curve."""

    exp_per_seed: np.ndarray
    linear_per_seed: np.ndarray
    exp_mean_curve: float
    linear_mean_curve: float
    a_mean_curve: float

    def exp_wins(self) -> tuple[int, float]:
        """Seeds where exp(H) fits better, and the two-sided sign-test p-value (scipy.stats.binomtest)."""
        wins = int((self.exp_per_seed > self.linear_per_seed).sum())
        return wins, float(stats.binomtest(wins, len(self.exp_per_seed)).pvalue)


def _r2(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(R^2, slope) of the least-squares line y = s x + t."""
    design = np.stack([x, np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    total = ((y - y.mean()) ** 2).sum()
    return (float(1 - ((y - design @ coef) ** 2).sum() / total) if total > 0 else float("nan")), float(coef[0])


def fit_quality(entropy: np.ndarray, reward: np.ndarray) -> FitQuality:
    """entropy, reward float[seed epoch] -> the fits of the module docstring."""
    per_seed = np.array([[_r2(np.exp(h), r)[0], _r2(h, r)[0]] for h, r in zip(entropy, reward)])
    h, r = entropy.mean(0), reward.mean(0)
    exp_fit, slope = _r2(np.exp(h), r)
    return FitQuality(per_seed[:, 0], per_seed[:, 1], exp_fit, _r2(h, r)[0], -slope)
