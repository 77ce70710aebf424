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
# # Lesson 2: GRPO's deltas and losses
#
# One epoch of the lecture's loop samples a *group* of $G$ responses $o_1, \dots, o_G$ for each
# prompt $q$, scores them with a reward $R_i = R(q, o_i)$, turns the group's rewards into
# **deltas** $\delta_i$ (the per-response update signal), and then takes several optimizer steps
# on a **surrogate loss** built from the deltas and the log-probabilities of the responses.
#
# This lesson takes the two choices apart:
#
# 1. the delta modes on the lecture's worked example $[3, 2, 1]$, and what each is invariant to;
# 2. why centering on the full-group mean scales the expected gradient by $(G-1)/G$, and why
#    dividing by the group's standard deviation breaks unbiasedness (exact numbers, no sampling);
# 3. the probability ratio and the clip band, drawn;
# 4. freezing the old policy, and what happens without it;
# 5. reusing one batch for several steps: the naive loss against the ratio losses.
#
# Everything is computed by the lab's own functions (`lab.core.deltas`, `lab.core.losses`, `lab.exact`,
# `lab.training.train`); the notebook only arranges and plots. Claim numbers refer to
# [docs/claims.md](../docs/claims.md) (each claim, its source, the test that proves it). Two graded
# exercises let you write a piece yourself: the leave-one-out deltas (section 2) and the clipped
# loss (section 3), each with a check against the lab and a collapsed solution.

# %%
from unittest import mock

import matplotlib.pyplot as plt
import numpy as np
import torch

import lab.core.losses
from lab.core.deltas import REWARD_MODES, compute_deltas
from lab.core.losses import SURROGATES, compute_loss

LOSSES = [mode for mode in SURROGATES if mode.value in ("naive", "unclipped", "clipped")]  # the lecture's three
from lab.core.modes import TrainingLoss
from lab.policies.factorized import Policy
from lab.training.config import TrainConfig
from lab.training.train import train
from lab.exercises import check
from lab.policies.sampling import response_log_probs, sample_responses
from tasks.sorting import make_task

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## 1. The worked example: one group with rewards $[3, 2, 1]$
#
# For one prompt's group of rewards $R_1, \dots, R_G$ the lab offers five modes
# (`lab.core.deltas.REWARD_MODES`; a sixth `DeltaMode`, `gae`, takes its advantages from a learned
# critic instead of the group: lesson 8):
#
# | mode | $\delta_i$ |
# | --- | --- |
# | `raw` | $R_i$ |
# | `centered` | $R_i - \bar R$, with $\bar R = \frac1G \sum_j R_j$ |
# | `normalized` | $(R_i - \bar R) / (\mathrm{std}(R) + 10^{-5})$ (GRPO's advantage) |
# | `max` | $R_i$ if $R_i = \max_j R_j$, else $0$ (every tied maximum is kept) |
# | `loo` | $R_i - \frac{1}{G-1}\sum_{j \ne i} R_j$ (leave-one-out baseline) |
#
# The lecture's example: $[3, 2, 1]$ should give centered deltas $[+1, 0, -1]$ (claim 12).

# %%
rewards = torch.tensor([3.0, 2.0, 1.0])
table = {mode.value: compute_deltas(rewards, mode) for mode in REWARD_MODES}
for name, deltas in table.items():
    print(f"{name:>10}: {deltas.numpy()}")
assert torch.equal(table["centered"], torch.tensor([1.0, 0.0, -1.0]))

# %% [markdown]
# Reading the table:
#
# - **raw** pushes *every* response up, the worst one too, only by less. Whether the worst
#   response ends up more or less likely depends on the others: noisy, and the source of the
#   variance the baselines remove (lesson 1).
# - **centered** sums to zero over the group: above-average responses go up, below-average ones
#   go down, the average one is left alone.
# - **normalized** divides by the group std. Here the (Bessel-corrected, lecture's) std is exactly
#   1, so it equals centered up to the $10^{-5}$; signs and order are always kept (claim 5).
# - **max** rewards only the best response and says nothing about the others.
# - **loo** is centered, stretched by $G/(G-1) = 1.5$; section 2 shows why that factor matters.
#
# The std convention is not universal (README, "Conventions the lab makes explicit"): the lecture
# and `torch.std` divide by $G-1$, the GRPO chapter by $G$. The lab uses Bessel's correction by
# default and lets you choose:

# %%
bessel = compute_deltas(rewards, "normalized", unbiased=True)
population = compute_deltas(rewards, "normalized", unbiased=False)
print("normalized, std with 1/(G-1):", bessel.numpy())
print("normalized, std with 1/G:    ", population.numpy())

# %% [markdown]
# ### What the deltas are blind to (claim 13)
#
# Adding a constant $c$ to every reward of a group changes nothing for the baseline modes
# (the baseline moves with it); multiplying every reward by $a > 0$ changes nothing for
# `normalized` (the std scales too). Raw deltas feel both, which is why the scale of a raw reward
# is a hyperparameter in disguise, and so do `max` deltas: they are the raw rewards with every
# non-best response set to 0, so they have no baseline at all.

# %%
shifted, scaled = rewards + 10.0, rewards * 3.0
print(f"{'mode':>10}  unchanged by +10  unchanged by x3")
for mode in REWARD_MODES:
    base = compute_deltas(rewards, mode)
    same_shift = torch.allclose(compute_deltas(shifted, mode), base, atol=1e-5)
    same_scale = torch.allclose(compute_deltas(scaled, mode), base, atol=1e-4)
    print(f"{mode.value:>10}  {str(same_shift):>16}  {str(same_scale):>15}")
print("max deltas of", rewards.tolist(), compute_deltas(rewards, "max").tolist(), " of", shifted.tolist(),
      compute_deltas(shifted, "max").tolist(), " of", scaled.tolist(), compute_deltas(scaled, "max").tolist())

# %% [markdown]
# ## 2. The full-group mean: the right direction, $(G-1)/G$ too short
#
# The baseline theorem (lesson 1) says that subtracting any $b$ that does *not depend on the
# sampled response* leaves the expected gradient unchanged:
# $\mathbb E[(R_i - b)\,\nabla\log\pi(o_i)] = \nabla J$.
# The leave-one-out mean $b_i = \frac{1}{G-1}\sum_{j\ne i}R_j$ is such a baseline (the other
# responses are independent of $o_i$), so `loo` is unbiased (claim 3).
# The full-group mean is *not*: it contains $R_i$ itself. A line of algebra shows how much that
# costs (claim 4):
#
# $$R_i - \bar R = R_i - \tfrac1G R_i - \tfrac{G-1}{G}\, b_i = \tfrac{G-1}{G}\,(R_i - b_i).$$
#
# So the centered estimator is exactly $(G-1)/G$ times an unbiased one: its expectation is
# $\frac{G-1}{G}\nabla J$, pointing the right way, a little short, which any learning rate absorbs.
# The identity holds sample by sample, for any rewards:

# %%
generator = torch.Generator().manual_seed(0)
for group_size in (2, 3, 5, 10):
    group = torch.randn(4, group_size, generator=generator)  # float[batch trial]
    centered, loo = compute_deltas(group, "centered"), compute_deltas(group, "loo")
    gap = (centered - (group_size - 1) / group_size * loo).abs().max().item()
    print(f"G = {group_size:>2}: max |centered - (G-1)/G * loo| = {gap:.1e}")
    assert gap < 1e-5

# %% [markdown]
# ### Exercise 1: leave-one-out deltas
#
# Write `leave_one_out(rewards)`: for rewards float[batch trial], one group per row, return
# $\delta_i = R_i - \frac{1}{G-1}\sum_{j\ne i} R_j$ for every response, float[batch trial], without a
# Python loop over the group (hint: the sum of the others is the group's sum minus $R_i$). The check
# compares it with `compute_deltas(rewards, "loo")` on random groups of several sizes.

# %% tags=["exercise"]
def leave_one_out(rewards):
    """R_i minus the mean of the other G - 1 rewards of its group: float[batch trial]."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def leave_one_out(rewards):
#     """R_i minus the mean of the other G - 1 rewards of its group: float[batch trial]."""
#     G = rewards.shape[-1]
#     others_mean = (rewards.sum(dim=-1, keepdim=True) - rewards) / (G - 1)
#     return rewards - others_mean
# ```
#
# Equivalently `G / (G - 1) * (rewards - rewards.mean(-1, keepdim=True))`: the identity above, read
# backwards.
#
# </details>

# %%
def test_leave_one_out(leave_one_out):
    groups = torch.Generator().manual_seed(7)
    for G in (2, 3, 8):
        rewards = torch.randint(0, 6, (4, G), generator=groups).double()  # ties and constant groups included
        yours, lab_value = leave_one_out(rewards), compute_deltas(rewards, "loo")
        assert yours.shape == lab_value.shape, f"G = {G}: shape {tuple(yours.shape)}, expected {tuple(lab_value.shape)}"
        assert torch.allclose(yours, lab_value), f"G = {G}: rewards {rewards}, yours {yours}, the lab's {lab_value}"


check("Exercise 1, leave-one-out deltas", test_leave_one_out, leave_one_out, without=(compute_deltas,));

# %% [markdown]
# ### Dividing by the std: a heuristic the theorem does not cover (claim 5)
#
# GRPO's normalization divides each group by its own std, $\sigma(R_1..R_G)$, which depends on
# *every* sampled response, $o_i$ included. Nothing then guarantees that the expectation is even
# parallel to $\nabla J$. The toy is small enough to compute the expectation **exactly**, by
# enumerating every response and every group of $G$ responses (`lab.exact`). For each delta mode we
# print the expected estimator's *scale* along $\nabla J$ (its projection divided by
# $\lVert\nabla J\rVert^2$) and its *angle* to $\nabla J$.

# %%
from lab.exact.diagnose import gradient_diagnostics
from lab.exact.estimators import gradient_moments

task = make_task()  # the lecture's three prompts, vocabulary 0..4
policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))
rows = gradient_diagnostics(policy, task, "inclusion-ordering", modes=("centered", "loo", "normalized", "max"),
                            group_sizes=(2, 5, 10))
print(f"{'mode':>10} {'G':>3}  {'scale':>6}  {'angle to grad J':>15}")
for row in rows:
    print(f"{row.delta:>10} {row.group_size:>3}  {row.scale:>6.3f}  {row.angle_deg:>11.2f} deg")
    if row.delta == "centered":
        assert abs(row.scale - (row.group_size - 1) / row.group_size) < 1e-9
    if row.delta == "loo":
        assert abs(row.scale - 1) < 1e-9 and row.angle_deg < 1e-3
    if row.delta == "normalized":
        assert row.angle_deg > 1.0  # biased in direction, not only in scale

# %%
def angles_deg(a, b):
    """Angle between matching rows of a and b, float[batch params] -> float[batch], in degrees."""
    cosine = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))
    return torch.rad2deg(torch.acos(cosine.clamp(-1, 1)))


# the same expectations prompt by prompt: E[g_b] against that prompt's own grad J_b
batch_angle = {(row.delta, row.group_size): row.angle_deg for row in rows}
print(f"{'mode':>10} {'G':>3}  {'angle to own grad J_b, per prompt':>34}  {'scale along grad J_b':>22}  {'summed':>7}")
for mode in ("normalized", "max"):
    for G in (2, 5, 10):
        moments = gradient_moments(policy, task.prompts, task.reward_fn("inclusion-ordering"), mode, G)
        angle = angles_deg(moments.mean, moments.grad_j)  # float[batch]
        scale = (moments.mean * moments.grad_j).sum(-1) / (moments.grad_j**2).sum(-1)  # float[batch]
        print(f"{mode:>10} {G:>3}  {np.array2string(angle.numpy(), precision=2):>30} deg  "
              f"{np.array2string(scale.numpy(), precision=3):>22}  {batch_angle[mode, G]:>3.2f} deg")
        if G == 10:  # the sum is further off than any one prompt: the per-prompt scales tilt it
            assert batch_angle[mode, G] > angle.max() and scale.max() / scale.min() > 1.4

# %% [markdown]
# The exact numbers (of the update summed over the three prompts) confirm the algebra and show
# what it does not cover:
#
# - `centered` has scale exactly $(G-1)/G$ (0.5, 0.8, 0.9) and angle 0; `loo` has scale 1 and angle 0.
# - `normalized` is off the true gradient by 1.3 to 3.2 degrees, and its scale is not $(G-1)/G$
#   but grows with $G$ (0.69, 1.54, 1.86): dividing by a std below 1 inflates the deltas.
#   Prompt by prompt (second table) its expectation is 1.3 to 1.7 degrees off that prompt's own
#   gradient on the first prompt and within 0.35 degrees on the other two, but with a **different
#   scale per prompt** (1.88, 1.80, 2.61 at $G = 10$): each group is divided by its own std, so a
#   prompt whose group has little spread weighs more (claim 17, Dr. GRPO's difficulty bias).
#   Summing differently weighted prompts tilts the update: at $G = 10$ the sum is 3.2 degrees off,
#   more than any one prompt. Small here, but no theorem bounds it, and it changes as the policy does.
# - `max` is the furthest off, 4.0 to 6.9 degrees, with scales 1.6 to 2.1. It has no baseline (the
#   best response's raw reward, every other delta 0: section 1), it throws away the information in
#   every non-best response, and its per-prompt scales differ the most (1.4 to 2.9 at $G = 2$, 1.9 to
#   2.9 at $G = 10$), so although each prompt's expectation is within 2.3 degrees of its own
#   gradient, the sum is not.
#
# Biased does not mean useless: a consistent tilt of a few degrees still climbs. It means the
# method optimizes something other than $J$, which is worth knowing when it gets stuck.

# %% [markdown]
# ## 3. The probability ratio and the clip band
#
# After the first optimizer step on a batch, the policy $\pi_\theta$ is no longer the policy
# $\pi_{\text{old}}$ that sampled it. The ratio losses weigh each token by
# $\rho = \pi_\theta(y)/\pi_{\text{old}}(y) = \exp(\log\pi_\theta - \log\pi_{\text{old}})$:
#
# $$L_{\text{unclipped}} = -\,\mathrm{mean}(\rho\,\delta), \qquad
#   L_{\text{clipped}} = -\,\mathrm{mean}\big(\min(\rho\,\delta,\ \mathrm{clip}(\rho, 1-\varepsilon, 1+\varepsilon)\,\delta)\big).$$
#
# Below, one token's objective (minus its loss) and its gradient with respect to
# $\log\pi_\theta$, as functions of $\rho$, for $\delta = +1$ and $\delta = -1$, computed by
# `compute_loss` on a grid of ratios. We draw $\varepsilon = 0.2$ (PPO's usual value) so that the
# band is visible; the lecture uses $0.01$.

# %%
clip_eps = 0.2
rho_grid = torch.linspace(0.3, 1.8, 301, dtype=torch.float64)
fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
for column, delta in enumerate((+1.0, -1.0)):
    for mode in LOSSES:
        # one token per grid point: a leading axis of 301, then batch = trial = pos = 1
        log_probs = rho_grid.log().reshape(-1, 1, 1, 1).requires_grad_(True)
        old_log_probs = torch.zeros_like(log_probs)
        deltas = torch.full((len(rho_grid), 1, 1), delta, dtype=torch.float64)
        loss = compute_loss(log_probs, deltas, mode, old_log_probs, clip_eps)  # float[301]
        (gradient,) = torch.autograd.grad(loss.sum(), log_probs)
        style = dict(label=mode.value, lw=2.5 if mode is TrainingLoss.clipped else 1.2,
                     ls="--" if mode is TrainingLoss.naive else "-")
        axes[0, column].plot(rho_grid, -loss.detach(), **style)
        axes[1, column].plot(rho_grid, -gradient.flatten(), **style)
    for row in range(2):
        axes[row, column].axvspan(1 - clip_eps, 1 + clip_eps, color="grey", alpha=0.15)
        axes[row, column].axvline(1.0, color="k", lw=0.6)
        axes[row, column].grid(alpha=0.3)
    axes[0, column].set_title(f"delta = {delta:+g}  (band [1-eps, 1+eps] shaded)")
    axes[1, column].set_xlabel("ratio rho = pi_theta / pi_old")
axes[0, 0].set_ylabel("objective = -loss")
axes[1, 0].set_ylabel("d objective / d log pi_theta")
axes[0, 0].legend()
fig.tight_layout()

# %% [markdown]
# What the picture says (claims 9 and 15):
#
# - At $\rho = 1$ all three gradients are equal ($\delta$): on the first step of an epoch the three
#   losses make the *same* update.
# - The naive loss has no ratio in it: its gradient is $\delta$ whatever the policy has become. It
#   keeps pushing the same tokens with the same force for as many steps as you reuse the batch.
# - The unclipped loss weighs the gradient by $\rho$ (importance sampling), so it follows the
#   policy gradient of the *current* policy, estimated from old samples (to first order: a
#   per-token ratio, as in PPO and GRPO, stands in for the whole response's weight
#   $\prod_t \rho_t$). But nothing stops it.
# - The clipped objective is never above the unclipped one (the min) and equals it inside the band.
#   It goes **flat** once $\rho$ has left the band *on the side the delta pushes toward*
#   ($\rho > 1+\varepsilon$ with $\delta>0$, $\rho < 1-\varepsilon$ with $\delta<0$): those tokens
#   give no gradient, they have moved enough. On the other side the min keeps the unclipped term,
#   so a step that went the wrong way is always corrected.

# %% [markdown]
# ### Exercise 2: the clipped loss
#
# Write `clipped_loss(log_probs, deltas, old_log_probs, clip_eps)`: log-probs float[batch trial pos],
# deltas float[batch trial] (one per response, the same at every position), the result a scalar, the
# mean over (batch, trial, pos) of minus the clipped objective above. The check compares its value
# **and its gradient** with `compute_loss(..., "clipped", ...)` on tokens whose ratios lie inside the
# band and beyond it on both sides, for both signs of the delta.

# %% tags=["exercise"]
def clipped_loss(log_probs, deltas, old_log_probs, clip_eps):
    """-mean(min(rho d, clip(rho, 1 - eps, 1 + eps) d)) over (batch, trial, pos): a scalar."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# The old log-probs are a constant (section 4 shows what happens otherwise), and the deltas gain a
# position axis to broadcast over the tokens.
#
# ```python
# def clipped_loss(log_probs, deltas, old_log_probs, clip_eps):
#     """-mean(min(rho d, clip(rho, 1 - eps, 1 + eps) d)) over (batch, trial, pos): a scalar."""
#     ratio = torch.exp(log_probs - old_log_probs.detach())  # float[batch trial pos]
#     token_deltas = deltas.unsqueeze(-1)  # float[batch trial 1]
#     objective = torch.minimum(ratio * token_deltas,
#                               ratio.clamp(1 - clip_eps, 1 + clip_eps) * token_deltas)
#     return -objective.mean()
# ```
#
# </details>

# %%
def test_clipped_loss(clipped_loss):
    draws = torch.Generator().manual_seed(3)
    old_log_probs = -2 * torch.rand(4, 6, 3, generator=draws, dtype=torch.float64)  # float[batch trial pos]
    log_ratios = 0.6 * torch.randn(4, 6, 3, generator=draws, dtype=torch.float64)  # ratios from ~0.2 to ~5
    deltas = torch.randn(4, 6, generator=draws, dtype=torch.float64)  # both signs
    for eps in (0.2, 0.01):
        for shared in (False, True):  # the old log-probs a separate tensor, or computed from the same parameters
            results = []
            for loss_fn in (clipped_loss, lambda lp, d, old, e: compute_loss(lp, d, "clipped", old, e)):
                log_probs = (old_log_probs + log_ratios).requires_grad_(True)
                old = log_probs - log_ratios if shared else old_log_probs  # the same numbers either way
                loss = loss_fn(log_probs, deltas, old, eps)
                (gradient,) = torch.autograd.grad(loss, log_probs)
                results.append((loss.detach(), gradient))
            (yours, your_gradient), (lab_value, lab_gradient) = results
            assert yours.shape == (), f"the loss should be a scalar, got shape {tuple(yours.shape)}"
            assert torch.allclose(yours, lab_value), (
                f"eps = {eps}: loss {yours.item():.6f}, the lab's {lab_value.item():.6f}")
            assert torch.allclose(your_gradient, lab_gradient), (
                f"eps = {eps}: the values agree but the gradients do not"
                + (" when the old log-probs come from the same parameters as the new ones: which of the inputs "
                   "may the gradient flow through?" if shared else ""))


check("Exercise 2, the clipped loss", test_clipped_loss, clipped_loss, without=(compute_loss,));

# %% [markdown]
# ## 4. Freezing the old policy
#
# The ratio needs $\log\pi_{\text{old}}$ as a **constant**. If it is recomputed from the current
# parameters inside the step and not detached, then $\rho = \exp(\log\pi_\theta - \log\pi_\theta)$
# is identically 1 *as a function of* $\theta$, and its gradient is zero (claim 10): the loss
# prints sensible values and the policy never moves. The lab's `lab.core.losses.ratios` detaches the old
# log-probs; we check its gradient against the naive loss at $\theta = \theta_{\text{old}}$, then
# swap in a ratio that forgets the `detach` (for this cell only) and look at the gradient.

# %%
sampler = torch.Generator().manual_seed(1)
responses = sample_responses(policy(task.prompts), 10, sampler)  # int[batch trial pos]
group_deltas = compute_deltas(task.reward_fn("inclusion-ordering")(task.prompts, responses), "centered")


def gradient_norm(loss_mode, same_forward_pass_as_old=True):
    """Norm of the gradient of one loss, with old log-probs taken from the same forward pass."""
    policy.zero_grad()
    log_probs = response_log_probs(policy(task.prompts), responses)
    old_log_probs = log_probs if same_forward_pass_as_old else None
    compute_loss(log_probs, group_deltas, loss_mode, old_log_probs).backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters()]).norm().item()


def undetached_ratios(log_probs, old_log_probs):
    return torch.exp(log_probs - old_log_probs)  # the bug: no .detach() on the old log-probs


naive, unclipped = gradient_norm("naive", False), gradient_norm("unclipped")
with mock.patch.object(lab.core.losses, "ratios", undetached_ratios):
    broken = gradient_norm("unclipped")
print(f"|grad| naive = {naive:.5f}, unclipped (old detached) = {unclipped:.5f}, "
      f"unclipped (old not detached) = {broken:.5f}")
assert abs(naive - unclipped) < 1e-5 * naive and broken == 0.0

# %% [markdown]
# ## 5. Reusing a batch for several steps
#
# The lecture takes 10 optimizer steps on every epoch's batch. Only the first step is on-policy.
# To see what each loss does with a reused batch, train one epoch of 60 steps on the lecture's
# prompts with each loss (centered deltas, $\varepsilon = 0.2$), as one batched call of `train`,
# and follow the per-step metrics the loop records.

# %%
reuse = [TrainConfig(epochs=1, steps=60, delta="centered", loss=mode, clip_eps=clip_eps)
         for mode in LOSSES]
records = train(task, reuse)
fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
for run, config in enumerate(reuse):
    for ax, metric in zip(axes, ("pg_loss", "ratio_max", "clip_fraction")):
        ax.plot(records.step_metrics[metric][run], label=config.loss.value)
titles = ("surrogate loss", "largest ratio pi_theta / pi_old", "fraction of tokens clipped")
for ax, title in zip(axes, titles):
    ax.set_title(title)
    ax.set_xlabel("optimizer step on the same batch")
    ax.grid(alpha=0.3)
axes[1].set_yscale("log")
axes[0].legend()
fig.tight_layout()
for metric in ("pg_loss", "ratio_max", "clip_fraction"):
    print(f"at step 60, {metric:>13}:", ", ".join(f"{c.loss.value} {value:.3f}"
                                                  for c, value in zip(reuse, records.final(metric))))
longer = train(task, TrainConfig(epochs=1, steps=200, delta="centered", loss="naive"))
print(f"naive, 200 steps on the same batch: surrogate loss {longer.final('pg_loss')[0]:.1f}")
assert longer.final("pg_loss")[0] < 5 * records.final("pg_loss")[0]

# %% [markdown]
# Reading the curves (the clip fraction counts tokens beyond the band on the side their delta
# pushes toward; the loop records it for every loss, as if $\varepsilon$ applied):
#
# - **naive**: the loss keeps falling, faster and faster, and never levels off. Its gradient does
#   not depend on how far the policy has moved, so reused steps keep pushing negative-delta tokens
#   towards probability 0 (their $\log\pi \to -\infty$: the loss is unbounded below) and the largest
#   ratio climbs to the same ~100 as the unclipped run. Given 200 steps instead of 60 the loss
#   goes on down, to -39. The loss value measures nothing useful here.
# - **unclipped**: the ratio of a token is bounded by $1/\pi_{\text{old}}$ (reached when the token's
#   probability hits 1), so the loss levels off, but only after the policy has gone all the way:
#   ratios near 100 mean the policy now puts almost all its mass on what used to be a 1% token.
# - **clipped**: tokens that left the band stop contributing, the loss flattens almost at once and
#   the ratios stay within a few units. Not exactly within the band: the parameters are shared, so
#   the tokens still inside keep moving the others (and Adam rescales small gradients). Clipping is a
#   soft trust region, not a hard one.
#
# And at the very first step the three are the same update (claim 9): one step of each, from the
# same seed, lands on the same parameters, up to float rounding.

# %%
one_step = train(task, [TrainConfig(epochs=1, steps=1, delta="centered", loss=mode) for mode in LOSSES])
for name, value in one_step.state.items():
    spread = (value - value[0]).abs().max().item()
    print(f"{name:>9}: max difference between the three runs after one step = {spread:.1e}")
    assert spread < 1e-6
