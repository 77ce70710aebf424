# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
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
# The toy is small enough to enumerate: 3 response positions over a vocabulary of 5 give
# $5^3 = 125$ responses per prompt, so every expectation below is a finite sum computed by
# `lab.exact`, not a sample average.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from lab import Policy, compute_deltas, compute_loss
from lab.diagnose import gradient_diagnostics, objective_summary
from lab.estimators import gradient_moments
from lab.exact import all_probs, expected_reward, flat_grad, reward_table, score_matrix
from lab.rollout import response_log_probs, sample_responses
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
probs = all_probs(policy, task.prompts, torch.float64)  # float[batch n], n = 125 responses
J = expected_reward(policy, task.prompts, reward, dtype=torch.float64)  # float[batch]
grad_J = flat_grad(J.mean(), policy)  # float[params]: the exact gradient of the mean over prompts
print("responses per prompt:", probs.shape[-1], "  probabilities sum to", probs.sum(-1).detach().numpy())
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
# $\log\pi_\theta(o) = \sum_q \log\pi_\theta(o_q)$ (`response_log_probs` gives the terms).
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
# $L = -\mathrm{mean}(\log\pi_\theta(o_q)\,\delta)$, up to a constant: the loss averages over the
# $L = 3$ positions too, so $-\nabla L$ is the estimate divided by 3 (claim 16: at fixed length such
# normalizers only rescale). The estimate's error should shrink like $1/\sqrt N$.

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
    print(f"{name:>19}: std {values.flatten().std():.2f}, variance {values.flatten().var():.2f}")
assert torch.equal(centered, torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
assert round(two_states.std().item(), 1) == 5.3 and round(centered.std().item(), 1) == 1.2
assert round(two_states.var().item(), 1) == 28.3 and round(centered.var().item(), 1) == 1.3

# %% [markdown]
# Standard deviation 5.3 → 1.2, variance 28.3 → 1.3: a 21-fold reduction in variance, not
# 4.6-fold. (With the population convention, dividing by $n$, the numbers are 4.6 → 1.0 and
# 21.25 → 1.0; say which one you use.)
#
# ## 4. The baseline theorem (claim 2)
#
# Why is subtracting a baseline allowed? For any $b$ that does not depend on the sampled response,
#
# $$\mathbb E_{o\sim\pi_\theta}\big[b\,\nabla\log\pi_\theta(o)\big] = b\sum_o \nabla\pi_\theta(o)
#   = b\,\nabla \sum_o \pi_\theta(o) = b\,\nabla 1 = 0 .$$
#
# So $\mathbb E[(R - b)\nabla\log\pi] = \nabla J$: the mean is unchanged. The *variance* is not:
# a constant reward $b$ contributes nothing on average but adds $b^2\,\mathbb E|\nabla\log\pi|^2$
# of noise. Exactly, with a constant reward table and one response per group:

# %%
mean_score = (probs.unsqueeze(-1) * scores).sum(dim=1)  # float[batch params]: E[grad log pi] per prompt
print(f"max |E[grad log pi]| = {mean_score.abs().max():.1e}")
assert mean_score.abs().max() < 1e-10
for b in (1.0, 10.0):
    constant = torch.full_like(rewards, b)  # R(q, o) = b for every response
    moments = gradient_moments(policy, task.prompts, constant, "raw", group_size=1)
    print(f"constant reward b = {b:>4}: |E[estimate]| = {moments.mean.norm():.1e}, "
          f"tr Cov = {moments.trace_cov.sum():.1f}")

# %% [markdown]
# The estimate of a constant reward's gradient is zero on average and pure noise in any one
# sample, and the noise grows like $b^2$. Raw rewards of the sorting task are all positive
# (between 0 and 5), so part of every raw update is exactly this kind of noise.
#
# ## 5. The estimator's variance as $G$ grows: raw, centered, leave-one-out
#
# GRPO samples a group of $G$ responses per prompt and uses the group itself as the baseline.
# For the per-group estimator $g = \frac1G\sum_i \delta_i\,\nabla\log\pi(o_i)$, `lab.diagnose`
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

# %% [markdown]
# What the exact numbers say:
#
# - **raw** is unbiased (scale 1) but its variance is ten to forty times the others' at every
#   $G$. It falls only like $1/G$, the plain averaging of more samples.
# - **leave-one-out** is unbiased too (claim 3), and far less noisy: its baseline removes the
#   constant part of the reward.
# - **centered** has scale exactly $(G-1)/G$ (claim 4; lesson 2 derives it) and variance
#   exactly $((G-1)/G)^2$ times leave-one-out's. Per unit of signal the two are **identical**
#   (the dashed and solid lines coincide): the full-group mean costs a step size, nothing else.
#   Adam, which divides by the gradient's running scale, barely notices the difference.
# - For small $G$ the baselines are themselves noisy (with $G = 2$ the baseline is one other
#   sample), so the gain over raw grows with $G$ (from about 9-fold at $G = 2$ to 20-fold at
#   $G = 64$ here). That is one reason GRPO needs groups, not pairs.

# %%
for G in group_sizes:
    centered_row, loo_row = table["centered", G], table["loo", G]
    assert abs(centered_row.scale - (G - 1) / G) < 1e-9
    assert abs(centered_row.trace_cov / loo_row.trace_cov - ((G - 1) / G) ** 2) < 1e-6
    assert table["raw", G].trace_cov > 5 * loo_row.trace_cov
gain = [table["raw", G].trace_cov / table["loo", G].trace_cov for G in group_sizes]
assert all(a < b for a, b in zip(gain, gain[1:]))  # the baseline's gain grows with G
print("checked for every G: centered scale = (G-1)/G, centered variance = ((G-1)/G)^2 x leave-one-out")
print("raw variance / leave-one-out variance by G:", ", ".join(f"G={G}: {x:.1f}" for G, x in zip(group_sizes, gain)))

# %% [markdown]
# ## Try it
#
# - Replace the reward by `task.reward_fn("distance")` (maximum 3): does the raw/centered gap
#   shrink or grow, and why? (Think of the size of the reward's constant part.)
# - Add `"normalized"` to the modes of section 5: its scale is not $(G-1)/G$ and its angle is not
#   0 (lesson 2 explains why).
# - Train the policy for a few epochs (lesson 4) and rerun section 5 on the trained policy: what
#   happens to the variance when the policy becomes nearly deterministic?
