# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 1: The policy gradient and baselines
#
# A policy $\pi_\theta(o \mid q)$ answers a prompt $q$ with a response $o$; a reward $R(q, o)$
# scores it. Reinforcement learning maximizes the expected reward
#
# $$J(\theta) = \mathbb E_{q}\,\mathbb E_{o \sim \pi_\theta(\cdot \mid q)}\,[R(q, o)].$$
#
# The reward is not differentiable (here it counts sorted positions), and neither is sampling,
# so $\nabla J$ needs a trick. This lesson derives it, checks it **exactly** on the lab's toy,
# and then asks the question that the rest of GRPO answers: how noisy is the resulting estimate,
# and what does a baseline do to it?
#
# The toy is small enough to enumerate: a response has $T = 3$ positions $t = 1, 2, 3$, each a
# token from a vocabulary of 5, so there are $5^3 = 125$ responses per prompt and every
# expectation below is a finite sum computed by `lab.exact`, not a sample average.
#
# Claim numbers ("claim 1") refer to [docs/claims.md](../docs/claims.md), which states each claim,
# cites its source and links the test that proves it. The lesson has two graded exercises
# (section 4): you write the code, a check cell compares it with the lab, and a collapsed cell
# holds a solution for when you want it (notebooks/README.md, "Graded exercises").

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

import lab.exact.baselines
from lab.policies.factorized import Policy
from lab.core.deltas import compute_deltas
from lab.core.losses import compute_loss
from lab.exact.diagnose import gradient_diagnostics, objective_summary
from lab.exact.estimators import gradient_moments
from lab.exact.enumeration import all_probs, expected_reward, flat_grad, reward_table, score_matrix
from lab.exercises import check
from lab.policies.sampling import response_log_probs, sample_responses
from tasks.sorting import make_task

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
np.set_printoptions(precision=4, suppress=True)
task = make_task()  # the lecture's prompts [[1,0,2], [3,2,4], [1,2,3]], vocabulary 0..4
reward = task.reward_fn("inclusion-ordering")  # the lecture's reward, maximum 5
policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))

# %% [markdown]
# ## 1. The objective, exactly
#
# `expected_reward` sums $\pi_\theta(o \mid q)\,R(q, o)$ over all 125 responses of each prompt.
# The result is differentiable, so autograd gives the *exact* $\nabla J$.

# %%
probs = all_probs(policy, task.prompts, torch.float64).detach()  # float[batch n], n = 125 responses
J = expected_reward(policy, task.prompts, reward, dtype=torch.float64)  # float[batch]
grad_J = flat_grad(J.mean(), policy)  # float[params]: the exact gradient of the mean over prompts
print("responses per prompt:", probs.shape[-1], "  probabilities sum to", probs.sum(-1).numpy())
print("J per prompt:", J.detach().numpy(), f"  |grad J| = {grad_J.norm():.4f} over {grad_J.numel()} parameters")

# %% [markdown]
# ## 2. The log-derivative trick (claim 1)
#
# Since $\nabla\pi = \pi\,\nabla\log\pi$,
#
# $$\nabla J = \sum_o R(o)\,\nabla\pi_\theta(o) = \sum_o \pi_\theta(o)\,R(o)\,\nabla\log\pi_\theta(o)
#   = \mathbb E_{o\sim\pi_\theta}\big[R(o)\,\nabla\log\pi_\theta(o)\big].$$
#
# The right-hand side needs only samples and the gradient of the log-probability of what was
# sampled. Because the toy samples its positions independently,
# $\log\pi_\theta(o \mid q) = \sum_{t=1}^{T} \log\pi_\theta(o_t \mid q)$ (`response_log_probs` gives the terms).
#
# First, the identity itself, exactly: the *score* $s_o = \nabla\log\pi_\theta(o)$ of every
# response (`score_matrix`), weighted by $\pi_\theta(o) R(o)$ and summed, must be autograd's $\nabla J$.

# %%
scores = score_matrix(policy, task.prompts, torch.float64)  # float[batch n params]
rewards = reward_table(task.prompts, reward, task.vocab_size, task.response_length).double()  # float[batch n]
identity = ((probs * rewards).unsqueeze(-1) * scores).sum(dim=1).mean(dim=0)  # mean over prompts
gap = ((identity - grad_J.double()).norm() / grad_J.norm()).item()
print(f"|sum_o pi R grad log pi - grad J| / |grad J| = {gap:.1e}")
assert gap < 1e-6

# %% [markdown]
# Then the way training uses it: sample $N$ responses per prompt and average
# $R\,\nabla\log\pi$. That is the gradient of the lab's **naive loss** with raw deltas,
# $\mathcal L = -\mathrm{mean}(\log\pi_\theta(o_t \mid q)\,\delta)$, up to a constant: the loss averages
# over the $T = 3$ positions $t$ too, so $-\nabla\mathcal L$ is the estimate divided by 3 (claim 16: at
# fixed length such normalizers only rescale). The estimate's error should shrink like $1/\sqrt N$.

# %%
def monte_carlo_gradient(num_samples, seed):
    """-3 * grad of the naive loss with raw deltas on num_samples responses per prompt."""
    logits = policy(task.prompts)
    responses = sample_responses(logits, num_samples, torch.Generator().manual_seed(seed))
    deltas = compute_deltas(reward(task.prompts, responses), "raw")  # float[batch trial]
    loss = compute_loss(response_log_probs(logits, responses), deltas, "naive")
    return -task.response_length * flat_grad(loss, policy)


sample_sizes = [10, 100, 1_000, 10_000, 100_000]
errors = np.array([[(monte_carlo_gradient(n, seed) - grad_J).norm().item() / grad_J.norm().item()
                    for seed in range(5)] for n in sample_sizes])  # float[size seed]
fig, ax = plt.subplots(figsize=(5.5, 3.6))
ax.loglog(sample_sizes, errors.mean(1), "o-", label="Monte Carlo estimate (mean of 5 seeds)")
ax.loglog(sample_sizes, errors.mean(1)[0] * np.sqrt(sample_sizes[0] / np.array(sample_sizes)), "k:",
          label=r"$\propto 1/\sqrt{N}$")
ax.set(xlabel="responses per prompt N", ylabel="|estimate - grad J| / |grad J|",
       title="the policy-gradient estimate converges to the exact gradient")
ax.grid(alpha=0.3, which="both")
ax.legend(fontsize=8)
fig.tight_layout()
print("relative error by N:", ", ".join(f"N={n}: {e:.3f}" for n, e in zip(sample_sizes, errors.mean(1))))
assert errors.mean(1)[-1] < 0.1 * errors.mean(1)[0]

# %% [markdown]
# Note the size of the error at small $N$: with 10 samples per prompt the estimate is off by
# more than the gradient itself. That noise is what the rest of the lesson is about.
#
# ## 3. The lecture's two-state example, done right (claim 11)
#
# Two states (prompts) with two sampled responses each; rewards $s_1: 11, 9$ and $s_2: 0, 2$.
# The raw rewards swing between 0 and 11 mostly because the *states* differ, not because one
# response is better than the other. Subtracting a per-state baseline (10 for $s_1$, 1 for $s_2$:
# the group means, i.e. centered deltas) leaves only the part that says which response was better.
#
# The lecture's script printed a standard deviation and called it a variance. Here are both, with
# torch's default (Bessel-corrected, divide by $n - 1$) convention:

# %%
two_states = torch.tensor([[11.0, 9.0], [0.0, 2.0]])  # float[batch trial]: rewards of s1 and s2
centered = compute_deltas(two_states, "centered")
print("centered deltas:", centered.tolist(), "  (baselines", two_states.mean(-1).tolist(), ")")
for name, values in (("raw rewards", two_states), ("after the baseline", centered)):
    print(f"{name:>19}: std {values.std():.2f}, variance {values.var():.2f} (divide by n - 1);  "
          f"std {values.std(correction=0):.2f}, variance {values.var(correction=0):.2f} (divide by n)")
print(f"variance reduced {two_states.var() / centered.var():.1f}-fold, the std {two_states.std() / centered.std():.1f}-fold")
assert torch.equal(centered, torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
assert round(two_states.std().item(), 1) == 5.3 and round(centered.std().item(), 1) == 1.2
assert round(two_states.var().item(), 1) == 28.3 and round(centered.var().item(), 1) == 1.3
assert two_states.var(correction=0).item() == 21.25 and centered.var(correction=0).item() == 1.0

# %% [markdown]
# Standard deviation 5.3 → 1.2, variance 28.3 → 1.3: a 21-fold reduction in variance, not
# 4.6-fold. (With the population convention, dividing by $n$, the numbers are 4.61 → 1.00 and
# 21.25 → 1.00; say which one you use.)
#
# ## 4. The baseline theorem (claim 2), and what a baseline does to the variance
#
# Why is subtracting a baseline allowed? For any $b$ that does not depend on the sampled response,
#
# $$\mathbb E_{o\sim\pi_\theta}\big[b\,\nabla\log\pi_\theta(o)\big] = b\sum_o \nabla\pi_\theta(o)
#   = b\,\nabla \sum_o \pi_\theta(o) = b\,\nabla 1 = 0 .$$
#
# So $\mathbb E[(R - b)\nabla\log\pi] = \nabla J$: the mean is unchanged. The *variance* is not.
# Write $s = \nabla\log\pi_\theta(o)$ for the score of the sampled response. If the reward itself
# is a constant, $R \equiv b$, the estimate $b\,s$ is zero on average and pure noise, with total
# variance $b^2\,\mathbb E|s|^2$. Exactly, with a constant reward table and one response per group:

# %%
mean_score = (probs.unsqueeze(-1) * scores).sum(dim=1)  # float[batch params]: E[grad log pi] per prompt
square_score = (probs * (scores**2).sum(-1)).sum(-1)  # float[batch]: E|s|^2 per prompt
print(f"max |E[grad log pi]| = {mean_score.abs().max():.1e}")
assert mean_score.abs().max() < 1e-10
for b in (1.0, 10.0):
    constant = torch.full_like(rewards, b)  # R(q, o) = b for every response
    moments = gradient_moments(policy, task.prompts, constant, "raw", group_size=1)
    print(f"constant reward b = {b:>4}: |E[estimate]| = {moments.mean.norm():.1e}, tr Cov = "
          f"{moments.trace_cov.sum():.1f} = b^2 E|s|^2 = {b**2 * square_score.sum():.1f} (summed over prompts)")
    assert torch.allclose(moments.trace_cov, b**2 * square_score)

# %% [markdown]
# A real reward is not constant, and then a shift does more than add $b^2\,\mathbb E|s|^2$. Because
# the mean stays $\nabla J$,
#
# $$\mathrm{tr}\,\mathrm{Cov}\big[(R - b)\,s\big] = \mathbb E\big[(R-b)^2 |s|^2\big] - |\nabla J|^2
#   = \mathrm{tr}\,\mathrm{Cov}[R\,s] \;-\; 2b\,\mathbb E\big[R\,|s|^2\big] \;+\; b^2\,\mathbb E|s|^2 .$$
#
# Adding $b$ to the reward (a baseline of $-b$) changes the variance by $2b\,\mathbb E[R|s|^2] + b^2\,\mathbb E|s|^2$:
# for a positive reward, adding makes it worse and subtracting a little makes it better. The variance is a
# parabola in $b$, lowest at the **optimal constant baseline**
#
# $$b^* = \frac{\mathbb E\big[R\,|s|^2\big]}{\mathbb E|s|^2}$$
#
# (Greensmith, Bartlett and Baxter 2004, "Variance Reduction Techniques for Gradient Estimates in
# Reinforcement Learning"): the mean reward weighted by how loud each response's score is. It is
# $\mathbb E[R]$ only when $R$ and $|s|^2$ are uncorrelated.
#
# ### Exercise 1: predict a variance
#
# Write `estimate_variance(probs, rewards, scores, baseline)`: for each prompt, the exact
# $\mathrm{tr}\,\mathrm{Cov}[(R - b)\,s]$ of one sampled response, from the tables of section 2
# (`probs` and `rewards` float[batch n], `scores` float[batch n params], `baseline` a number). The check
# compares it with `lab.exact.estimators.gradient_moments`, which computes the same variance another way
# (from the moments of the deltas, for a reward table shifted by $b$).

# %% tags=["exercise"]
def estimate_variance(probs, rewards, scores, baseline):
    """tr Cov[(R - baseline) s] of one response's estimate, per prompt: float[batch]."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# Weight each response by $\pi(o)(R(o) - b)$: summed against the scores that gives the mean
# $\nabla J$, and multiplied once more by $(R(o) - b)\,|s_o|^2$ the second moment.
#
# ```python
# def estimate_variance(probs, rewards, scores, baseline):
#     """tr Cov[(R - baseline) s] of one response's estimate, per prompt: float[batch]."""
#     weights = probs * (rewards - baseline)  # pi(o) (R(o) - b), float[batch n]
#     mean = (weights.unsqueeze(-1) * scores).sum(dim=1)  # E[(R - b) s] = grad J, float[batch params]
#     second = (weights * (rewards - baseline) * (scores**2).sum(-1)).sum(-1)  # E[(R - b)^2 |s|^2]
#     return second - (mean**2).sum(-1)
# ```
#
# </details>

# %%
def test_estimate_variance(estimate_variance):
    for b in (0.0, 2.0, -3.0):
        lab_value = gradient_moments(policy, task.prompts, rewards - b, "raw", group_size=1).trace_cov
        yours = estimate_variance(probs, rewards, scores, b)
        assert torch.allclose(yours, lab_value, rtol=1e-6), f"b = {b}: yours {yours}, the lab's {lab_value}"


check("Exercise 1, the variance of (R - b) s", test_estimate_variance, estimate_variance,
      without=(lab.exact.baselines.estimate_variance, gradient_moments));

# %% [markdown]
# ### Exercise 2: the optimal constant baseline
#
# Write `optimal_baseline(probs, rewards, scores)`: $b^*$ for each prompt, float[batch]. The check
# compares it with `lab.exact.baselines.optimal_baseline` and makes sure that moving it either way raises
# the variance.

# %% tags=["exercise"]
def optimal_baseline(probs, rewards, scores):
    """b* = E[R |s|^2] / E|s|^2 per prompt: float[batch]."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def optimal_baseline(probs, rewards, scores):
#     """b* = E[R |s|^2] / E|s|^2 per prompt: float[batch]."""
#     loudness = (scores**2).sum(-1)  # |s_o|^2, float[batch n]
#     return (probs * rewards * loudness).sum(-1) / (probs * loudness).sum(-1)
# ```
#
# </details>

# %%
def test_optimal_baseline(optimal_baseline):
    yours = optimal_baseline(probs, rewards, scores)
    lab_value = lab.exact.baselines.optimal_baseline(probs, rewards, scores)
    assert torch.allclose(yours, lab_value, rtol=1e-9), f"yours {yours}, the lab's {lab_value}"
    lowest = lab.exact.baselines.estimate_variance(probs, rewards, scores, yours)
    for shift in (-0.05, 0.05):
        assert (lab.exact.baselines.estimate_variance(probs, rewards, scores, yours + shift) > lowest).all()


check("Exercise 2, the optimal constant baseline", test_optimal_baseline, optimal_baseline,
      without=(lab.exact.baselines.optimal_baseline,));

# %% [markdown]
# With the lab's versions of the two functions (`lab.exact.baselines`), the parabola of each prompt, and
# three baselines on it: none ($b = 0$, raw rewards), the mean reward $\mathbb E[R]$ (the
# baseline a group mean estimates), and $b^*$.

# %%
mean_reward = (probs * rewards).sum(-1)  # E[R] per prompt = J
best = lab.exact.baselines.optimal_baseline(probs, rewards, scores)
variance = {name: lab.exact.baselines.estimate_variance(probs, rewards, scores, b)
            for name, b in (("none", 0.0), ("mean reward", mean_reward), ("optimal", best))}
print(f"{'prompt':>6}  {'E[R]':>6}  {'b*':>6}  {'tr Cov, no baseline':>20}  {'with E[R]':>9}  {'with b*':>8}")
for prompt in range(len(best)):
    print(f"{prompt:>6}  {mean_reward[prompt]:>6.3f}  {best[prompt]:>6.3f}  {variance['none'][prompt]:>20.1f}"
          f"  {variance['mean reward'][prompt]:>9.1f}  {variance['optimal'][prompt]:>8.1f}")
no_baseline_cost = variance["none"] / variance["mean reward"]
mean_reward_cost = variance["mean reward"] / variance["optimal"] - 1
print("no baseline / mean reward:", no_baseline_cost.numpy().round(1),
      "  mean reward above the optimum by", (100 * mean_reward_cost).numpy().round(1), "%")
assert (variance["optimal"] < variance["mean reward"]).all() and (no_baseline_cost > 15).all()
assert (mean_reward_cost < 0.25).all()

baselines = torch.linspace(-1.0, 6.0, 141, dtype=torch.float64)
fig, ax = plt.subplots(figsize=(6.4, 3.8))
for prompt in range(len(best)):
    curve = torch.stack([lab.exact.baselines.estimate_variance(probs, rewards, scores, b)[prompt] for b in baselines])
    line, = ax.plot(baselines, curve, label=f"prompt {task.prompts[prompt].tolist()}")
    ax.plot(mean_reward[prompt], variance["mean reward"][prompt], "o", mfc="none", color=line.get_color())
    ax.plot(best[prompt], variance["optimal"][prompt], "*", ms=9, color=line.get_color())
ax.axvline(0.0, color="k", lw=0.6, ls=":")  # b = 0: raw rewards, no baseline
ax.set_yscale("log")
ax.set(xlabel="constant baseline b (dotted: none)", ylabel="tr Cov[(R - b) s]",
       title="one response's estimate: o = mean reward, * = optimal b*")
ax.grid(alpha=0.3, which="both")
ax.legend(fontsize=8)
fig.tight_layout()

# %% [markdown]
# Any baseline near the bottom of the parabola removes almost all of the variance: on this policy
# no baseline leaves 19 to 35 times the variance that the mean reward leaves, while the mean reward
# leaves only 10 to 20% more than the optimum $b^*$. That is the case for the group mean as a baseline:
# it estimates $\mathbb E[R]$ from the other samples, no score needed. The raw rewards of the sorting task are all
# positive (between 0 and 5), so without a baseline a large part of every update is the noise of
# a constant reward.
#
# ## 5. The estimator's variance as $G$ grows: raw, centered, leave-one-out
#
# GRPO samples a group of $G$ responses per prompt and uses the group itself as the baseline.
# For the per-group estimator $g = \frac1G\sum_i \delta_i\,\nabla\log\pi(o_i)$, `lab.exact.diagnose`
# computes exactly, for each delta mode and $G$: the *scale* of $\mathbb E[g]$ along $\nabla J$,
# its *angle* to $\nabla J$, and the total variance $\mathrm{tr}\,\mathrm{Cov}[g]$ (the batch
# estimator, averaged over the three prompts).

# %%
group_sizes = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
rows = gradient_diagnostics(policy, task, "inclusion-ordering", modes=("raw", "centered", "loo"),
                            group_sizes=group_sizes)
grad_norm = objective_summary(policy, task, "inclusion-ordering")["grad_norm"]
table = {(row.delta, row.group_size): row for row in rows}
print(f"{'G':>3}  " + "  ".join(f"{mode:>22}" for mode in ("raw", "centered", "loo")))
print(f"{'':>3}  " + "  ".join(f"{'scale   tr Cov':>22}" for _ in range(3)))
for G in (2, 4, 8, 16, 64):
    print(f"{G:>3}  " + "  ".join(f"{table[m, G].scale:>12.3f} {table[m, G].trace_cov:>9.2f}"
                                  for m in ("raw", "centered", "loo")))

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for mode in ("raw", "centered", "loo"):
    trace = np.array([table[mode, G].trace_cov for G in group_sizes])
    scale = np.array([table[mode, G].scale for G in group_sizes])
    style = dict(marker="o", ms=3, label=mode, ls="--" if mode == "loo" else "-")
    axes[0].loglog(group_sizes, trace, **style)
    # noise per unit of signal: variance divided by the squared length of the expected update
    axes[1].loglog(group_sizes, trace / (scale * grad_norm) ** 2, **style)
axes[0].set(title="tr Cov[g]: total variance of the estimate", xlabel="group size G")
axes[1].set(title="tr Cov[g] / |E g|^2: noise per unit of signal", xlabel="group size G")
for ax in axes:
    ax.set_xticks([2, 4, 8, 16, 32, 64], labels=["2", "4", "8", "16", "32", "64"])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend()
fig.tight_layout()

# %%
for G in group_sizes:
    centered_row, loo_row = table["centered", G], table["loo", G]
    assert abs(centered_row.scale - (G - 1) / G) < 1e-9
    assert abs(centered_row.trace_cov / loo_row.trace_cov - ((G - 1) / G) ** 2) < 1e-6
print("checked for every G: centered scale = (G-1)/G, centered variance = ((G-1)/G)^2 x leave-one-out")
gain = {mode: [table["raw", G].trace_cov / table[mode, G].trace_cov for G in group_sizes]
        for mode in ("loo", "centered")}
for mode, ratios in gain.items():
    print(f"raw variance / {mode} variance by G:", ", ".join(f"{G}: {x:.1f}" for G, x in zip(group_sizes, ratios)))
limit = variance["none"].sum() / variance["mean reward"].sum()  # section 4's E[R] baseline, summed over prompts
print(f"as G grows the leave-one-out baseline becomes E[R]: raw / that variance = {limit:.1f}")
assert all(a < b for a, b in zip(gain["loo"], gain["loo"][1:])) and gain["loo"][-1] < limit  # grows towards it
assert 9 < min(gain["loo"]) and max(gain["centered"]) < 40

# %% [markdown]
# What the exact numbers say:
#
# - **raw** is unbiased (scale 1) but noisy: its variance is 9.4 times leave-one-out's at $G = 2$,
#   rising to 20.6 times at $G = 64$, and 37.5 down to 21.3 times centered's (which is scaled
#   down by $(G-1)/G$, see below). It falls only like $1/G$, the plain averaging of more samples.
# - **leave-one-out** is unbiased too (claim 3), and far less noisy: its baseline removes the
#   constant part of the reward.
# - **centered** has scale exactly $(G-1)/G$ (claim 4; lesson 2 derives it) and variance
#   exactly $((G-1)/G)^2$ times leave-one-out's. Per unit of signal the two are **identical**
#   (the dashed and solid lines coincide): the full-group mean costs a step size, nothing else.
#   Adam, which divides by the gradient's running scale, barely notices the difference.
# - For small $G$ the baselines are themselves noisy (with $G = 2$ the baseline is one other
#   sample), so the gain of leave-one-out over raw grows with $G$, from 9.4-fold at $G = 2$ towards
#   the 21-fold that the exact mean reward achieves as a baseline (section 4's 19- to 35-fold per
#   prompt, pooled over the three prompts). That is one reason GRPO needs groups, not pairs.
