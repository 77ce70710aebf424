"""A constant baseline: how it changes the estimator's variance, and the one that lowers it most.

For one prompt, one response o ~ pi, its score s_o = grad log pi(o) and any b that does not
depend on o, the estimate g_b = (R(o) - b) s_o has E[g_b] = grad J whatever b is (E[s] = 0),
and its total variance is a parabola in b:

    tr Cov[g_b] = E[(R - b)^2 |s|^2] - |grad J|^2
                = tr Cov[g_0] - 2 b E[R |s|^2] + b^2 E[|s|^2]

so a shift of the reward by c (b = -c) changes it by 2 c E[R |s|^2] + c^2 E[|s|^2], and it is
lowest at the optimal constant baseline

    b* = E[R |s|^2] / E[|s|^2]

(Greensmith, Bartlett and Baxter 2004, "Variance Reduction Techniques for Gradient Estimates
in Reinforcement Learning", JMLR 5). b* is the mean reward E[R] only when R and |s|^2 are
uncorrelated under pi. Everything is exact: expectations are sums over the enumerated
responses (`lab.exact.all_probs`, `reward_table`, `score_matrix`); `lab.exact.estimators` gives the
same variance for groups of G responses and every delta mode.
"""

from __future__ import annotations

from torch import Tensor


def estimate_variance(probs: Tensor, rewards: Tensor, scores: Tensor, baseline: float | Tensor = 0.0) -> Tensor:
    """tr Cov[(R - b) s] of one response's estimate, per prompt: float[batch].

    probs, rewards float[batch n]; scores float[batch n params]; baseline a float or float[batch].
    """
    if isinstance(baseline, Tensor) and baseline.dim() > 0:
        baseline = baseline.unsqueeze(-1)  # float[batch 1]: one baseline per prompt
    weights = probs * (rewards - baseline)  # float[batch n]
    mean = (weights.unsqueeze(-1) * scores).sum(dim=1)  # E[g_b] = grad J, float[batch params]
    square_norms = (scores**2).sum(dim=-1)  # |s_o|^2, float[batch n]
    return (weights * (rewards - baseline) * square_norms).sum(dim=-1) - (mean**2).sum(dim=-1)


def optimal_baseline(probs: Tensor, rewards: Tensor, scores: Tensor) -> Tensor:
    """b* = E[R |s|^2] / E[|s|^2] per prompt: float[batch] (shapes as in `estimate_variance`)."""
    square_norms = (scores**2).sum(dim=-1)  # float[batch n]
    return (probs * rewards * square_norms).sum(dim=-1) / (probs * square_norms).sum(dim=-1)
