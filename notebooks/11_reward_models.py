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
# # Lesson 11: Reward models and over-optimisation
#
# Every reward in the earlier lessons was the true one. In RLHF it is not: a **reward model** r_phi is
# fitted on preference pairs, and the policy is optimised against it. Optimising a proxy too hard finds
# the proxy's mistakes: the proxy's score keeps rising while the true ("gold") reward peaks and falls
# (Gao, Schulman and Hilton 2023, "Scaling Laws for Reward Model Overoptimization"). On a real model
# nobody can measure the gold reward exactly; on the lab's toy every expectation is a sum over the 125
# responses of a prompt. This lesson:
#
# 1. fits a small reward model on Bradley-Terry pairs and measures it exactly;
# 2. optimises it by best-of-n, exactly, and watches gold and proxy against d = sqrt(KL);
# 3. follows the proxy's KL-regularised optimum and a GRPO run against the proxy;
# 4. fits Gao et al.'s curve;
# 5. ends with three graded exercises: the Bradley-Terry loss, best-of-n's KL, and the gold/proxy gap.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from lab.core.reward_model import reward_model_loss
from lab.exact import varlen
from lab.exact.best_of_n import best_of_n_kl, best_of_n_probs, kl_bound
from lab.exercises import check
from lab.experiments.overoptimisation import (OVEROPTIMISATION, best_of_n_curve, fit_gao, optimum_curve,
                                              rl_curves)
from lab.policies import make_policy
from lab.training.reward_model import RewardModelConfig, train_reward_model
from tasks.sorting import make_task

task = make_task()
prompts = task.prompts
pi_0 = make_policy("factorized", 5, 3, 3, 10, torch.Generator().manual_seed(0), 0.1)  # a spread initial policy
with torch.no_grad():
    base = varlen.all_probs(pi_0, prompts, torch.float64)  # float64[prompt 125]
gold = varlen.reward_table(pi_0, prompts, "inclusion-ordering").double()
responses = varlen.enumerate_responses(pi_0)

# %% [markdown]
# ## 1. A reward model, measured exactly
#
# Pairs (y_1, y_2) are drawn from pi_0 and labelled by the true reward: y_1 is preferred with probability
# sigmoid(R_1 - R_2) (Bradley-Terry). The model, a one-hot MLP with 4 tanh units, minimises TRL's
# `RewardTrainer` loss, `-log sigmoid(r_chosen - r_rejected)`. Its training `accuracy` is measured on
# its own pairs; the exact `preference_accuracy` over *every* pair under pi_0 says how well it ranks
# responses it never saw.

# %%
proxies = {}
for pairs in (16, 256):
    model, metrics, _ = train_reward_model(pi_0, prompts, "inclusion-ordering",
                                           RewardModelConfig(size="small", pairs_per_prompt=pairs, steps=300))
    proxies[pairs] = model
    print(f"{pairs:>4} pairs per prompt: training accuracy {metrics['accuracy']:.2f}, exact preference accuracy "
          f"{metrics['preference_accuracy']:.2f}, correlation with the gold reward {metrics['reward_correlation']:.2f}")
with torch.no_grad():
    scores = {pairs: m(prompts.unsqueeze(1), responses.unsqueeze(0)) for pairs, m in proxies.items()}

# %% [markdown]
# On 16 pairs per prompt the model ranks its training pairs perfectly and every other pair barely
# better than a coin (the numbers above): it has memorised its data. On 256 pairs it ranks about four
# pairs in five right. Both are proxies; the second is the better one.
#
# ## 2. Best-of-n, exactly
#
# Draw n responses from pi_0 and keep the one the proxy scores highest. With the score levels' cumulative
# probabilities F, the kept response has probability `pi_0(y) / pi_0(level) (F(level)^n - F(level-)^n)`
# (claim 32 in docs/claims.md; ties are broken uniformly), so its gold and proxy expectations and its
# KL to pi_0 are sums, not samples.

# %%
ns = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for pairs, colour in ((16, "C0"), (256, "C1")):
    curve = best_of_n_curve(base, gold, scores[pairs], ns)
    axes[0].plot(curve.d, curve.gold, "o-", color=colour, ms=3, label=f"gold, proxy on {pairs} pairs")
    axes[1].plot(curve.d, curve.proxy, "o--", color=colour, ms=3, label=f"proxy on {pairs} pairs")
    peak = int(np.argmax(curve.gold))
    print(f"proxy on {pairs} pairs: gold {curve.gold[0]:.3f} at n = 1, {curve.gold[ns.index(16)]:.3f} at n = 16, "
          f"highest {curve.gold[peak]:.3f} at n = {ns[peak]} (d = {curve.d[peak]:.2f}), {curve.gold[-1]:.3f} at "
          f"n = {ns[-1]}; proxy {curve.proxy[0]:.2f} -> {curve.proxy[-1]:.2f}")
    if pairs == 256:
        bon_256 = curve
for ax, title in zip(axes, ("gold reward", "proxy reward")):
    ax.set_xlabel("d = sqrt(KL(best-of-n || pi_0))")
    ax.set_title(title)
    ax.legend(fontsize=8)
plt.tight_layout()

# %% [markdown]
# The proxy's expectation can only rise with n: best-of-n climbs the proxy by construction. The gold
# reward rises with it at first, because the proxy is right more often than not; where the proxy on 256
# pairs has its peak before the largest n, the last draws buy proxy score with gold reward (the
# printed peak and end). The proxy on 16 pairs, barely correlated with the gold reward, buys less gold
# at moderate n (compare n = 16); its top responses happen to be decent, so at the largest n the two end
# at the same gold. A proxy's quality shows in how much gold each nat of KL buys, not only at the end.
#
# The KL of best-of-n is often quoted as `log n - (n-1)/n`. That is an upper bound (Beirami et al.
# 2024): here the exact value falls below it as soon as n draws can find the proxy's top responses,
# and stops growing at the proxy's argmax:

# %%
for n in (2, 16, 128, 1024, 4096):
    print(f"n = {n:>4}: exact KL {float(best_of_n_kl(base, scores[256], n).mean()):.3f}, "
          f"log n - (n-1)/n = {kl_bound(n):.3f}")

# %% [markdown]
# ## 3. The KL-regularised optimum of the proxy, and GRPO against it
#
# GRPO with a KL penalty in the reward ascends `E[r_phi] - beta KL(pi || pi_0)`, whose optimum is
# `pi*_beta = pi_0 exp(r_phi / beta) / Z` (claims 14 and 26). Following pi*_beta from a large beta to a
# small one traces where the penalised method converges; a sampled GRPO run (centered deltas, clipped
# loss, no penalty, 100 epochs) shows how far it gets in its budget.

# %%
betas = OVEROPTIMISATION.betas
optimum = optimum_curve(base, gold, scores[256], betas)
grpo = rl_curves(task, {0: proxies[256]}, {0: base}, gold, {0: scores[256]}, OVEROPTIMISATION, 0.0)[0]
plt.figure(figsize=(5, 3.5))
plt.plot(optimum.d, optimum.gold, "k-", label="gold at pi*_beta")
plt.plot(grpo.d, grpo.gold, "-", color="C4", label="gold, GRPO (every epoch)")
plt.plot(bon_256.d, bon_256.gold, "o-", color="C1", ms=3, label="gold, best-of-n")
plt.xlabel("d")
plt.legend(fontsize=8)
best = int(np.argmax(optimum.gold))
print(f"pi*_beta: gold {optimum.gold[best]:.3f} at beta = {betas[best]} (d = {optimum.d[best]:.2f}), "
      f"{optimum.gold[-1]:.3f} at beta = {betas[-1]} (d = {optimum.d[-1]:.2f})")
print(f"GRPO after {OVEROPTIMISATION.epochs} epochs: d = {grpo.d[-1]:.2f}, gold {grpo.gold[-1]:.3f}, "
      f"proxy {grpo.proxy[-1]:.2f}")

# %% [markdown]
# Along pi*_beta the gold reward is highest at a finite beta when the proxy's argmax is worse in gold
# than a milder optimum (compare the two printed values): the KL penalty then limits over-optimisation.
# The GRPO run moves along a similar curve; after 100 epochs it has not reached its end, which is a
# statement about the budget, not about where it converges.
#
# ## 4. Gao et al.'s curve
#
# Gao et al. fit `gold(d) - gold(0) = d (alpha - beta d)` for best-of-n and `d (alpha - beta log d)` for
# RL. Fitted to the exact best-of-n points of the proxy on 256 pairs:

# %%
fit = fit_gao(bon_256.d, bon_256.gold - bon_256.gold[0], "bon")
print(f"alpha = {fit['alpha']:.3f}, beta = {fit['beta']:.3f}, fitted peak at d = {fit['peak_d']:.2f} "
      f"(the exact curve peaks at d = {bon_256.d[int(np.argmax(bon_256.gold))]:.2f}); "
      f"RMS residual {fit['rms']:.3f} against a straight line's {fit['line_rms']:.3f}")

# %% [markdown]
# The quadratic form fits better than a straight line (the two residuals above), but its fitted peak
# lies past the exact one: on 125 responses per prompt and a few reward levels the curve flattens where the
# quadratic keeps bending, so the form summarises the curve without locating its peak.
# `lab.experiments.overoptimisation.run_overoptimisation` repeats this over seeds, three proxies, three KL
# weights and DPO on each proxy's own pairs, and `lab.experiments.overoptimisation_section` decides Gao et
# al.'s claims with rules that can fail (`lab reproduce` writes them into RESULTS.md).
#
# The same steps from the shell, for a proxy of your own:
#
# ```
# lab reward-model --init-scale 0.1 --size small --pairs-per-prompt 256 --seed 0 --out runs/rm
# lab run --init-scale 0.1 --seed 0 --delta centered --loss clipped --reward learned:runs/rm
# lab run --init-scale 0.1 --seed 0 --loss dpo --kl 0.05 --pairs-from runs/rm
# ```
#
# The first writes the model, its metrics (TRL's `accuracy` and `margin`, and the exact
# `preference_accuracy` and `reward_correlation`) and its pairs; the second trains GRPO against the proxy and
# records `gold_reward_exact`, `proxy_reward_exact`, `kl_initial_exact` and `d` after every epoch; the third
# trains DPO on the very pairs the proxy was fitted on.
#
# ## Exercises
#
# Write the code where the `...` is, run the check below it, and open the collapsed solution if you are
# stuck.
#
# ### Exercise 1: the reward model's loss
#
# Write `my_bt_loss(chosen, rejected)`: the mean over pairs of `-log sigmoid(r_chosen - r_rejected)`, for
# score tensors of one shape. Use `torch.nn.functional.logsigmoid`.

# %% tags=["exercise"]
def my_bt_loss(chosen, rejected):
    """Mean Bradley-Terry negative log-likelihood of the chosen responses being preferred."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_bt_loss(chosen, rejected):
#     """Mean Bradley-Terry negative log-likelihood of the chosen responses being preferred."""
#     return -torch.nn.functional.logsigmoid(chosen - rejected).mean()
# ```
#
# </details>

# %%
def test_bt_loss(my_bt_loss):
    draws = torch.Generator().manual_seed(4)
    for scale in (0.5, 500.0):  # at 500 some gaps pass 709: sigmoid underflows to 0 in float64
        chosen, rejected = (torch.randn(64, generator=draws, dtype=torch.float64) * scale for _ in range(2))
        worst = abs(float(my_bt_loss(chosen, rejected)) - float(reward_model_loss(chosen, rejected)))
        assert worst < 1e-9, f"at score scale {scale} your loss differs from TRL's by {worst:.3g}"


check("Exercise 1, the reward model's loss", test_bt_loss, my_bt_loss);

# %% [markdown]
# ### Exercise 2: best-of-n's KL
#
# Write `my_bon_kl(probs, scores, n)`: KL(best-of-n || pi) per prompt, exactly, for tables `float[prompt m]`
# of base probabilities and proxy scores. You may call `best_of_n_probs(probs, scores, n)` for the
# best-of-n distribution.

# %% tags=["exercise"]
def my_bon_kl(probs, scores, n):
    """KL(p_n || pi) per prompt, float[prompt]."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_bon_kl(probs, scores, n):
#     """KL(p_n || pi) per prompt, float[prompt]."""
#     best = best_of_n_probs(probs, scores, n)
#     terms = torch.where(best > 0, best * (best.log() - probs.log()), torch.zeros_like(best))
#     return terms.sum(-1)
# ```
#
# </details>

# %%
def test_bon_kl(my_bon_kl):
    for n in (2, 64, 1024):
        yours = torch.as_tensor(my_bon_kl(base, scores[256], n), dtype=torch.float64)
        exact = best_of_n_kl(base, scores[256], n)
        assert yours.shape == exact.shape, f"expected one KL per prompt, shape {tuple(exact.shape)}"
        worst = float((yours - exact).abs().max())
        assert worst < 1e-9, f"at n = {n} your KL is off by up to {worst:.3g}"


check("Exercise 2, best-of-n's KL", test_bon_kl, my_bon_kl);

# %% [markdown]
# ### Exercise 3: the gold/proxy gap
#
# Write `my_gap(policy_probs)`: for a distribution over the 125 responses of each prompt (`float[prompt 125]`),
# the expected proxy score minus the expected gold reward under *that* distribution, averaged over the
# prompts. Use the tables `scores[256]` and `gold` above.

# %% tags=["exercise"]
def my_gap(policy_probs):
    """E_pi[r_phi] - E_pi[R], mean over prompts."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_gap(policy_probs):
#     """E_pi[r_phi] - E_pi[R], mean over prompts."""
#     return float((policy_probs * (scores[256] - gold)).sum(-1).mean())
# ```
#
# </details>

# %%
def test_gap(my_gap):
    for n in (1, 64, 4096):
        p_n = best_of_n_probs(base, scores[256], n)
        exact = float((p_n * (scores[256] - gold)).sum(-1).mean())
        yours = float(my_gap(p_n))
        assert abs(yours - exact) < 1e-9, f"for best-of-{n} your gap is off by {abs(yours - exact):.3g}"


check("Exercise 3, the gold/proxy gap", test_gap, my_gap);
