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
# # Lesson 3: A KL penalty to a reference policy
#
# GRPO adds to its loss a penalty $\beta\,\mathrm{KL}(\pi_\theta \,\|\, \pi_{\text{ref}})$ that keeps
# the policy near a reference (in LLM training, the model before RL). The KL is a sum over all
# responses, which a real model cannot enumerate, so it is *estimated* from the sampled tokens.
# With $y$ sampled from $\pi_\theta$ and $\rho = \pi_{\text{ref}}(y)/\pi_\theta(y)$, the three
# estimators of Schulman's note are (`lab.core.kl`):
#
# | | per token | value |
# | --- | --- | --- |
# | k1 | $-\log\rho$ | unbiased, can be negative |
# | k2 | $\tfrac12(\log\rho)^2$ | biased, $\ge 0$ |
# | k3 | $\rho - \log\rho - 1$ | unbiased (because $\mathbb E[\rho] = 1$), $\ge 0$ |
#
# GRPO, TRL and verl (`low_var_kl`) use k3. The lab sums it over a response's positions; TRL and
# verl average it per token (so the same $\beta$ weighs $T$ times more here, $T$ the response
# length), and verl clamps it to $[-10, 10]$. This lesson looks at the three as **values** (bias,
# variance, sign), on samples from the current policy and from a stale one, then as **gradients**,
# which is what a loss actually delivers and where they differ most. It checks the explainer's
# $(\pi_{\text{ref}}/\pi - 1)$ term, and ends with two training
# experiments: a frozen versus a refreshed reference, and the trade-off $\beta$ controls.
#
# Expectations are exact (`lab.exact` enumerates every token); variances and signs come from
# samples, with the sample size stated. Claim numbers refer to [docs/claims.md](../docs/claims.md)
# (each claim, its source, the test that proves it). Two graded exercises let you write k3
# (section 1) and measure its bias on stale samples (section 2), each checked against the lab,
# with a collapsed solution.
#
# KL is not symmetric, and "forward" and "reverse" KL mean opposite things depending on which
# distribution one calls the model. This lesson always writes the arguments out:
# $\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}}) = \mathbb E_{\pi_\theta}[\log\pi_\theta - \log\pi_{\text{ref}}]$,
# the one the estimators' *values* target, and $\mathrm{KL}(\pi_{\text{ref}}\|\pi_\theta)$.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

import lab.core.kl
from lab.training.config import TrainConfig
from lab.experiments.drift import drift_from_start
from lab.exact.enumeration import exact_kl, expected_kl_estimate, flat_grad, position_log_probs, sequence_kl
from lab.exercises import check
from lab.experiments.figures import mean_band
from lab.experiments.intervals import mean_interval
from lab.core.kl import ESTIMATORS, KLEstimator
from lab.policies.factorized import Policy
from lab.policies import policy_from_state
from lab.policies.sampling import response_log_probs, sample_responses
from lab.experiments.sweep import build_grid, run_sweep
from tasks.sorting import make_task


torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
np.set_printoptions(precision=4, suppress=True)
task = make_task()  # the lecture's prompts, vocabulary 0..4, responses of 3 positions
policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))


def perturbed(scale, noise_seed=1):
    """A reference near `policy`: its parameters plus scale * a fixed random direction."""
    noise = torch.Generator().manual_seed(noise_seed)
    state = {name: (p.detach() + scale * torch.randn(p.shape, generator=noise)).unsqueeze(0)
             for name, p in policy.named_parameters()}
    return policy_from_state(state)


def log_prob_table(some_policy):
    """log pi_t(v | x) for every prompt, position and token: float[batch pos vocab], float64."""
    return position_log_probs(some_policy, task.prompts, torch.float64)


# %% [markdown]
# ## 1. The estimators as values, on samples from the current policy
#
# A family of references at growing distance from $\pi_\theta$: the same random direction in
# parameter space, scaled. For each, the exact sequence KL (`sequence_kl`), each estimator's exact
# expectation (`expected_kl_estimate`, summed over positions), and, from 20,000 sampled responses
# per prompt, each estimator's standard deviation and how often it is negative. All are per
# response, averaged over the three prompts.

# %%
scales = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
log_pi = log_prob_table(policy).detach()
logits = policy(task.prompts).detach().double()
responses = sample_responses(logits, 20_000, torch.Generator().manual_seed(0))  # int[batch trial pos]
sample_log_pi = response_log_probs(logits, responses)  # float[batch trial pos]

stats = {name: {"bias": [], "std": [], "negative": []} for name in ESTIMATORS}
true_kl = []
for scale in scales:
    reference = perturbed(scale)
    log_ref = log_prob_table(reference).detach()
    kl = sequence_kl(policy, reference, task.prompts, torch.float64).mean().item()
    true_kl.append(kl)
    sample_log_ref = response_log_probs(reference(task.prompts).detach().double(), responses)
    for name, estimator in ESTIMATORS.items():
        expected = expected_kl_estimate(name, log_pi, log_ref).sum(-1).mean().item()
        values = estimator(sample_log_pi, sample_log_ref).sum(-1)  # float[batch trial]: one per response
        stats[name]["bias"].append(expected / kl - 1)
        stats[name]["std"].append(values.std(dim=-1).mean().item() / kl)
        stats[name]["negative"].append((values < 0).double().mean().item())

print(f"{'exact KL':>9} | " + " | ".join(f"{n.value}: rel. bias  std/KL  P(<0)" for n in ESTIMATORS))
for i, kl in enumerate(true_kl):
    print(f"{kl:>9.4f} | " + " | ".join(
        f"{stats[n]['bias'][i]:>+14.4f}  {stats[n]['std'][i]:>6.2f}  {stats[n]['negative'][i]:>5.2f}"
        for n in ESTIMATORS))

fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
for name in ESTIMATORS:
    axes[0].semilogx(true_kl, stats[name]["bias"], "o-", ms=3, label=name.value)
    axes[1].loglog(true_kl, stats[name]["std"], "o-", ms=3, label=name.value)
axes[0].set(title="relative bias E[k] / KL - 1 (exact)", xlabel="exact KL(pi || ref) per response")
axes[1].set(title="relative spread std(k) / KL (20,000 samples)", xlabel="exact KL(pi || ref) per response")
for ax in axes:
    ax.grid(alpha=0.3, which="both")
    ax.legend()
fig.tight_layout()
for name in (KLEstimator.k1, KLEstimator.k3):
    assert max(abs(b) for b in stats[name]["bias"]) < 1e-8  # unbiased on-policy (claim 6)
assert max(stats[KLEstimator.k3]["negative"]) == 0 and min(stats[KLEstimator.k1]["negative"]) > 0
k2_bias = stats[KLEstimator.k2]["bias"]
assert max(abs(b) for b in k2_bias[:4]) < 0.06 and k2_bias[-2] > 0.3 and k2_bias[-1] > 1.5  # as the prose says
assert any(b > a for a, b in zip(k2_bias, k2_bias[1:])) and any(b < a for a, b in zip(k2_bias, k2_bias[1:]))

# %% [markdown]
# Reading it:
#
# - **k1 and k3 are exactly unbiased** at every distance (claim 6); **k2** is not (it matches the KL
#   only to second order in $\log\rho$). Its relative bias is not monotone in the distance: a few
#   percent *below* the KL near the reference (-1.5% to -5% here), then above it and fast growing
#   far away (+34% and +170% at the two largest distances).
# - **Near the reference, k1 is very noisy**: its spread is many times the KL itself, and it is
#   negative on a large share of samples, because $-\log\rho$ is positive or negative token by
#   token and only its average is the KL. **k3** adds $\rho - 1$, which has mean zero and cancels
#   most of k1's first-order noise, and the result is never negative. That is why it is used.
# - Far from the reference, k3's advantage shrinks: $\rho = \pi_{\text{ref}}/\pi_\theta$ is unbounded
#   where $\pi_\theta$ puts little mass, so k3 is heavy-tailed (and a sample standard deviation
#   understates that).

# %% [markdown]
# ### Exercise 1: k3
#
# Write `k3(log_probs, ref_log_probs)`: the per-token k3 of the table above from
# $\log\pi_\theta(y)$ and $\log\pi_{\text{ref}}(y)$ (tensors of any one shape), with
# $\log\rho = \log\pi_{\text{ref}} - \log\pi_\theta$. It must agree with `lab.core.kl.k3` and, like the true
# k3, never be negative, even in float32 when $\log\rho$ is tiny (as it is on the first steps after
# a refresh).

# %% tags=["exercise"]
def k3(log_probs, ref_log_probs):
    """rho - log rho - 1 per token, rho = pi_ref / pi_theta: same shape as the inputs."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# `torch.exp(log_rho) - log_rho - 1` is the formula, but in float32 it rounds below zero for some
# $|\log\rho| < 10^{-3}$: `exp` returns a number near 1 whose last bit is lost when 1 is subtracted.
# `torch.expm1` computes $e^x - 1$ without that loss.
#
# ```python
# def k3(log_probs, ref_log_probs):
#     """rho - log rho - 1 per token, rho = pi_ref / pi_theta: same shape as the inputs."""
#     log_rho = ref_log_probs - log_probs
#     return torch.expm1(log_rho) - log_rho
# ```
#
# </details>

# %%
def test_k3(k3):
    draws = torch.Generator().manual_seed(4)
    log_probs = -3 * torch.rand(3, 5, 4, generator=draws, dtype=torch.float64)
    ref_log_probs = log_probs + torch.randn(3, 5, 4, generator=draws, dtype=torch.float64)
    yours, lab_value = k3(log_probs, ref_log_probs), lab.core.kl.k3(log_probs, ref_log_probs)
    assert torch.allclose(yours, lab_value), f"yours {yours.flatten()[:4]}..., the lab's {lab_value.flatten()[:4]}..."
    tiny = torch.linspace(-1e-3, 1e-3, 2001)  # float32 log rho near 0
    small = torch.as_tensor(k3(torch.zeros_like(tiny), tiny))
    assert small.dtype == tiny.dtype, f"k3 of float32 log-probs should be float32, got {small.dtype}"
    assert (small >= 0).all(), (f"k3 is negative for {(small < 0).sum().item()} of these tiny float32 log rho "
                                f"(as low as {small.min().item():.1e}): rho - 1 loses its digits when rho is near 1")
    worst = (small - lab.core.kl.k3(torch.zeros_like(tiny), tiny)).abs().max().item()
    assert worst <= 1e-9, f"for log rho near 0 your values are off by up to {worst:.1e}, more than float32 rounding"


check("Exercise 1, k3", test_k3, k3, without=(lab.core.kl.k3,));

# %% [markdown]
# ## 2. On samples from a stale policy (claim 7)
#
# In the training loop the KL is computed on the epoch's samples, drawn by $\pi_{\text{old}}$,
# during every one of the epoch's optimizer steps. After the first step
# $\pi_\theta \ne \pi_{\text{old}}$ and the tokens are off-policy. k3's unbiasedness rested on
# $\mathbb E_{\pi_\theta}[\rho] = 1$, which fails under $\pi_{\text{old}}$. Importance weights
# $\pi_\theta/\pi_{\text{old}}$ restore it, for any of the three.

# %%
reference, stale = perturbed(0.02, noise_seed=1), perturbed(0.01, noise_seed=2)
log_ref, log_old = log_prob_table(reference).detach(), log_prob_table(stale).detach()
kl = exact_kl(log_pi, log_ref).sum(-1)  # float[batch]
print(f"exact KL(pi || ref) per prompt: {kl.numpy()}")
print(f"{'':>4}  {'samples from pi':>22}  {'samples from pi_old':>22}  {'pi_old, importance-weighted':>28}")
for name in ESTIMATORS:
    on = expected_kl_estimate(name, log_pi, log_ref).sum(-1)
    off = expected_kl_estimate(name, log_pi, log_ref, sample_log_probs=log_old).sum(-1)
    weighted = expected_kl_estimate(name, log_pi, log_ref, sample_log_probs=log_old, importance_weighted=True).sum(-1)
    print(f"{name.value:>4}  {np.array2string(on.numpy(), precision=4):>22}  "
          f"{np.array2string(off.numpy(), precision=4):>22}  {np.array2string(weighted.numpy(), precision=4):>28}")
    if name.value == "k3":
        assert not torch.allclose(off, kl, rtol=1e-3) and torch.allclose(weighted, kl, rtol=1e-9)

# %% [markdown]
# On stale samples k3 estimates something else (claim 7); the importance-weighted version is exact
# again. The lab's loop, like the lecture's, does not reweight its KL term, so its logged KL is
# slightly off after an epoch's first step. Another reason to read it as a diagnostic and to
# measure drift exactly where it matters (section 5).

# %% [markdown]
# ### Exercise 2: k3's bias off-policy
#
# Write `k3_bias_off_policy(log_pi, log_ref, log_old)`: with log-prob tables float[batch pos vocab]
# of $\pi_\theta$, $\pi_{\text{ref}}$ and the sampling policy $\pi_{\text{old}}$, return the bias of k3
# per response when tokens are drawn from $\pi_{\text{old}}$,
# $\sum_t \big(\mathbb E_{y_t\sim\pi_{\text{old}}}[\mathrm{k3}(y_t)] - \mathrm{KL}_t(\pi_\theta\|\pi_{\text{ref}})\big)$,
# one number per prompt, float[batch]. Use `lab.core.kl.k3` (or yours) for the per-token values. The
# check compares it with the lab's exact expectations (`expected_kl_estimate`, `exact_kl`) and
# makes sure that it vanishes when $\pi_{\text{old}} = \pi_\theta$.

# %% tags=["exercise"]
def k3_bias_off_policy(log_pi, log_ref, log_old):
    """E_{pi_old}[k3] - KL(pi_theta || pi_ref), summed over positions: float[batch]."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# Every position is a sum over the vocabulary: weight each token's k3 by its probability under
# $\pi_{\text{old}}$ for the expectation, by its probability under $\pi_\theta$ (times
# $\log\pi_\theta - \log\pi_{\text{ref}}$) for the KL.
#
# ```python
# def k3_bias_off_policy(log_pi, log_ref, log_old):
#     """E_{pi_old}[k3] - KL(pi_theta || pi_ref), summed over positions: float[batch]."""
#     expected = (log_old.exp() * lab.core.kl.k3(log_pi, log_ref)).sum(-1)  # float[batch pos]
#     kl = (log_pi.exp() * (log_pi - log_ref)).sum(-1)  # float[batch pos]
#     return (expected - kl).sum(-1)
# ```
#
# </details>

# %%
def test_k3_bias_off_policy(k3_bias_off_policy):
    for label, table in (("pi_old = the stale policy", log_old), ("pi_old = pi_theta", log_pi)):
        yours = k3_bias_off_policy(log_pi, log_ref, table)
        lab_value = (expected_kl_estimate("k3", log_pi, log_ref, sample_log_probs=table)
                     - exact_kl(log_pi, log_ref)).sum(-1)
        assert torch.allclose(yours, lab_value, rtol=1e-9, atol=1e-12), f"{label}: yours {yours}, the lab's {lab_value}"
    assert k3_bias_off_policy(log_pi, log_ref, log_pi).abs().max() < 1e-12, "on-policy k3 is unbiased"


check("Exercise 2, k3's bias off-policy", test_k3_bias_off_policy, k3_bias_off_policy,
      without=(expected_kl_estimate, exact_kl));

# %% [markdown]
# ## 3. The estimators as gradients (claim 14)
#
# A penalty acts through its gradient. Used as a loss on tokens sampled from $\pi_\theta$, with
# no gradient through the sampling (which is what autograd does with a sampled batch), the
# expected gradient of each estimator is $\mathbb E_{y\sim\pi_\theta}[\nabla_\theta k(y)]$.
# `expected_kl_estimate(..., sample_log_probs=log_pi.detach())` computes it exactly. We compare it
# with the gradients of the two KL directions,
# $\nabla\,\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$ and $\nabla\,\mathrm{KL}(\pi_{\text{ref}}\|\pi_\theta)$.

# %%
reference = perturbed(0.02)
log_ref = log_prob_table(reference).detach()
log_pi_grad = log_prob_table(policy)  # with gradient to the policy's parameters
grad_kl_theta_ref = flat_grad(exact_kl(log_pi_grad, log_ref).sum(), policy)  # grad KL(pi_theta || pi_ref)
grad_kl_ref_theta = flat_grad(exact_kl(log_ref, log_pi_grad).sum(), policy)  # grad KL(pi_ref || pi_theta)


def cosine(a, b):
    return (a @ b / (a.norm() * b.norm())).item()


def relative_error(a, b):
    return ((a - b).norm() / b.norm()).item()


print(f"|grad KL(pi||ref)| = {grad_kl_theta_ref.norm():.4f}, |grad KL(ref||pi)| = {grad_kl_ref_theta.norm():.4f}, "
      f"cosine between them {cosine(grad_kl_theta_ref, grad_kl_ref_theta):.3f}\n")
print(f"{'':>4}  {'|E[grad k]|':>11}  {'rel. error vs grad KL(pi||ref)':>31}  {'vs grad KL(ref||pi)':>20}")
loss_gradients = {}
for name in ESTIMATORS:
    expected = expected_kl_estimate(name, log_pi_grad, log_ref, sample_log_probs=log_pi_grad.detach())
    gradient = flat_grad(expected.sum(), policy)
    loss_gradients[name.value] = gradient
    print(f"{name.value:>4}  {gradient.norm():>11.4f}  {relative_error(gradient, grad_kl_theta_ref):>31.2e}"
          f"  {relative_error(gradient, grad_kl_ref_theta):>20.2e}")
assert loss_gradients["k1"].norm() < 1e-6 * grad_kl_theta_ref.norm()
assert torch.allclose(loss_gradients["k2"], grad_kl_theta_ref, rtol=1e-5, atol=1e-8)
assert torch.allclose(loss_gradients["k3"], grad_kl_ref_theta, rtol=1e-5, atol=1e-8)

# %% [markdown]
# Three different things (claim 14):
#
# - **k1**'s expected gradient is **zero**: $\nabla(-\log\rho) = \nabla\log\pi_\theta$, and the score has
#   mean zero. The unbiased *value* gives no pull at all, only noise.
# - **k2**'s expected gradient is exactly $\nabla\,\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$, although its
#   value is the biased one.
# - **k3**'s expected gradient is exactly $\nabla\,\mathrm{KL}(\pi_{\text{ref}}\|\pi_\theta)$: the
#   **other direction**. Its value estimates $\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$, but the penalty
#   GRPO actually optimizes is $\mathrm{KL}(\pi_{\text{ref}}\|\pi_\theta)$, an expectation under the
#   *reference*: it punishes $\pi_\theta$ for dropping tokens the reference likes (mass-covering), and
#   barely minds $\pi_\theta$ putting mass where the reference has little. With $\pi_\theta$ as the model
#   fitted to the target $\pi_{\text{ref}}$, this is the direction usually called the *forward* KL;
#   $\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$, the one k3's value estimates, is the *reverse*,
#   mode-seeking one. Both vanish only at $\pi_\theta = \pi_{\text{ref}}$ and agree to second order
#   near it (here their gradients have cosine 0.977), which is why this works in practice.
#
# ## 4. The explainer's $(\pi_{\text{ref}}/\pi_\theta - 1)$ term (claim 8)
#
# A popular GRPO explainer writes the KL term as a sum of $(\pi_{\text{ref}}/\pi_\theta - 1)$ and
# $-\log(\pi_{\text{ref}}/\pi_\theta)$ and reads the first part as "the KL". Since
# $\rho - 1 = \mathrm{k3} - \mathrm{k1}$, the lab's functions measure each part. On-policy,
# $\mathbb E_{\pi_\theta}[\rho - 1] = \sum_y \pi_{\text{ref}}(y) - 1 = 0$: the first term
# **estimates zero**, and the $-\log\rho$ term (k1) carries all of the KL's value.

# %%
ratio_term = expected_kl_estimate("k3", log_pi, log_ref) - expected_kl_estimate("k1", log_pi, log_ref)
log_term = expected_kl_estimate("k1", log_pi, log_ref)
print(f"E[rho - 1] per position, exact: max |.| = {ratio_term.abs().max():.1e}")
print(f"E[-log rho] summed over positions: {log_term.sum(-1).numpy()}  =  exact KL {exact_kl(log_pi, log_ref).sum(-1).numpy()}")
sample_log_ref = response_log_probs(reference(task.prompts).detach().double(), responses)
k1_values, k3_values = (ESTIMATORS[k](sample_log_pi, sample_log_ref) for k in (KLEstimator.k1, KLEstimator.k3))
per_response = (k3_values - k1_values).sum(-1)  # (rho - 1) summed over positions, float[batch trial]
standard_error = per_response.std(-1) / per_response.shape[-1] ** 0.5
print(f"from 20,000 samples: mean of (rho - 1) per response {per_response.mean(-1).numpy()} "
      f"+- {standard_error.numpy()} (one standard error)")
assert ratio_term.abs().max() < 1e-12
assert (per_response.mean(-1).abs() < 5 * standard_error).all()
ratio_gradient = loss_gradients["k3"] - loss_gradients["k1"]
print(f"its gradient as a loss vs grad KL(ref || pi): relative error "
      f"{relative_error(ratio_gradient, grad_kl_ref_theta):.1e}")

# %% [markdown]
# The twist: as a *loss*, the roles swap. The $-\log\rho$ part carries the value but, by section 3,
# no expected gradient; the $(\rho - 1)$ part estimates zero but carries the whole expected
# gradient, that of $\mathrm{KL}(\pi_{\text{ref}}\|\pi_\theta)$. Reading a loss term by its
# value says little about what it does.
#
# ## 5. The reference: frozen once, or refreshed
#
# The lecture refreshes the reference every 10 epochs (`kl_period=10`; TRL's `sync_ref_model`);
# `kl_period=0` freezes it at the initial policy. Twenty seeds each, centered deltas,
# $\beta = 0.3$, and $\beta = 0$ for comparison. The loop logs k3 against the *current* reference.
# We also measure exactly how far each final policy has gone from where it started.

# %%
variants = {"frozen (kl_period=0)": dict(kl=0.3, kl_period=0), "refreshed (kl_period=10)": dict(kl=0.3, kl_period=10),
            "no penalty (beta=0)": dict(kl=0.0, kl_period=0)}
configs = [c for settings in variants.values() for c in build_grid(TrainConfig(delta="centered", **settings), {}, 20)]
records = run_sweep(task, configs)
drift = drift_from_start(task, records)  # lab.experiments.drift: exact KL(pi_final || pi_initial) per run
refresh_every = configs[0].steps * 10  # optimizer steps between two refreshes of kl_period=10
refresh_steps = np.arange(refresh_every, records.step_metrics["kl"].shape[1], refresh_every)

fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw=dict(width_ratios=(3, 2)))
for index, label in enumerate(variants):
    runs = slice(20 * index, 20 * (index + 1))
    print(f"{label:>24}: final reward {mean_interval(records.final('mean_reward')[runs]).text(2)}, "
          f"exact drift from the start {mean_interval(drift[runs]).text(2)}")
    if variants[label]["kl"] > 0:
        mean, low, high = mean_band(records.step_metrics["kl"][runs])
        for ax in axes:
            line, = ax.plot(mean, lw=1, label=label)
            ax.fill_between(np.arange(len(mean)), low, high, color=line.get_color(), alpha=0.2, lw=0)
            ax.plot(refresh_steps, mean[refresh_steps], "o", ms=3, color=line.get_color())
for ax in axes:
    for step in refresh_steps:
        ax.axvline(step, color="k", lw=0.5, ls=":")
    ax.set(xlabel="step", ylabel="logged k3 to the current reference")
    ax.grid(alpha=0.3)
axes[0].set_title("beta = 0.3, mean and 95% band over 20 seeds", fontsize=10)
axes[1].set(xlim=(refresh_every - 25, 3 * refresh_every + 25))
axes[1].set_title("zoom: dots = the first step of every 10th epoch", fontsize=10)
axes[0].legend(fontsize=8)
fig.tight_layout()
refreshed = records.step_metrics["kl"][20:40]
print(f"logged k3 of the refreshed runs at the refresh steps {refresh_steps.tolist()}: largest "
      f"{refreshed[:, refresh_steps].max():.1e}; one step later: mean {refreshed[:, refresh_steps + 1].mean():.3f}")
print(f"largest logged k3 of a no-penalty run: {records.step_metrics['kl'][40:].max():.1e}")
assert refreshed[:, refresh_steps].max() == 0 and records.step_metrics["kl"][:20, refresh_steps].min() > 0
assert drift[:20].mean() < drift[20:40].mean() < drift[40:].mean()

# %% [markdown]
# The logged KL of the refreshed runs drops to exactly 0 at the first step of every 10th epoch (the
# dots in the zoom): each refresh moves the anchor to wherever the policy is, and the KL then grows
# again within the period. The frozen runs' KL never returns to 0. (The no-penalty runs are left
# out of the figure. Far from the reference, their logged k3 is ruled by rare tokens with a huge
# $\rho$ and spikes by orders of magnitude: section 1's heavy tail, live. The exact drift is the
# number to trust.) The penalty then limits the drift *per period*, not in total, and the total
# drift adds up. Frozen, the same $\beta$ keeps the policy far closer to its start, and pays
# for it in reward. Which one you want depends on what the reference is for. A fixed anchor is
# what "stay close to the model we started from" means; a refreshed one is closer to a trust
# region that slows the policy down.
#
# ## 6. What $\beta$ buys: the reward-drift trade-off, from a sweep
#
# A frozen reference and $\beta$ from 0 to 3, twenty seeds each, trained as one sweep. For each
# $\beta$: the final mean reward and the exact drift from the reference, with 95% intervals over
# seeds.

# %%
betas = [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
sweep = run_sweep(task, build_grid(TrainConfig(delta="centered", kl_period=0), {"kl": betas}, seeds=20))
drift = drift_from_start(task, sweep)
start_reward = mean_interval(sweep.epoch_metrics["mean_reward"][:, 0]).estimate

fig, ax = plt.subplots(figsize=(6.4, 4))
print(f"{'beta':>5}  {'final mean reward':>20}  {'exact drift from the reference':>30}")
for index, beta in enumerate(betas):
    runs = [r for r, c in enumerate(sweep.configs) if c.kl == beta]
    reward, kl = mean_interval(sweep.final("mean_reward")[runs]), mean_interval(drift[runs])
    ax.errorbar(kl.estimate, reward.estimate, xerr=[[kl.estimate - kl.low], [kl.high - kl.estimate]],
                yerr=[[reward.estimate - reward.low], [reward.high - reward.estimate]], fmt="o", capsize=3,
                label=f"beta = {beta:g}")
    print(f"{beta:>5g}  {reward.text(2):>20}  {kl.text(3):>30}")
print(f"mean reward of the first epoch's samples, all runs: {start_reward:.2f}")
ax.axhline(start_reward, color="k", ls=":", lw=0.8, label="reward at the start")
ax.set_xscale("symlog", linthresh=1e-2)  # linear near 0, where the large betas sit
ax.set_xlim(left=0)
ax.set(xlabel="exact KL(final || reference) per response", ylabel="final mean reward",
       title="reward against drift, 95% intervals over 20 seeds")
ax.grid(alpha=0.3)
ax.legend(fontsize=7)
fig.tight_layout()
mean_drift = [drift[[r for r, c in enumerate(sweep.configs) if c.kl == b]].mean() for b in betas]
assert mean_drift[-1] < mean_drift[3] < mean_drift[0]

# %% [markdown]
# Small $\beta$ (up to about 0.03 here) costs nothing measurable: the reward intervals overlap with
# $\beta = 0$, and the drift is as large. Around $\beta = 0.1$ to $0.3$ the penalty starts to bind,
# and drift falls by an order of magnitude while the reward falls with it. By $\beta = 1$ the
# policy barely leaves the reference and the reward stays near where it started (2.63 against
# 2.57 for the first epoch's samples). On this toy the
# reference is a random initial policy, so staying near it has no value of its own and the
# trade-off is all cost. With a pretrained model as the reference, the drift is what you buy
# protection against: forgetting, reward hacking, unreadable outputs.
