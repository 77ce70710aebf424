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
# 3. follows the proxy's KL-regularised optimum, then trains GRPO against an overfit proxy with the KL in
#    the reward at three betas, until it over-optimises, and measures how much gold it gives back;
# 4. fits Gao et al.'s curves, best-of-n's and RL's;
# 5. ends with three graded exercises: the Bradley-Terry loss, best-of-n's KL, and the gold/proxy gap.

# %%
import math
import tempfile
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from lab.core.reward_model import reward_model_loss
from lab.exact import varlen
from lab.exact.best_of_n import best_of_n_kl, best_of_n_probs, kl_bound
from lab.exercises import check
from lab.experiments.intervals import mean_interval
from lab.experiments.overoptimisation import (OVEROPTIMISATION, best_of_n_curve, fit_gao, optimum_curve,
                                              proxy_reward)
from lab.policies import make_policy
from lab.policies.factorized import save_policy
from lab.training.config import TrainConfig
from lab.training.reward_model import RewardModelConfig, train_reward_model
from lab.training.train import train
from tasks.sorting import make_task

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
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
# ## 3. The KL-regularised optimum of the proxy, and GRPO against it until it over-optimises
#
# GRPO with k1 in the reward (`--kl-estimator k1 --kl-in reward`, PPO-RLHF's and verl's placement) ascends
# `E[r_phi] - beta KL(pi || pi_0)`, whose optimum is `pi*_beta = pi_0 exp(r_phi / beta) / Z` (claims 14 and
# 26). Following pi*_beta from a large beta to a small one traces where the penalised method converges;
# first for the proxy on 256 pairs:

# %%
betas = OVEROPTIMISATION.betas
optimum = optimum_curve(base, gold, scores[256], betas)
best = int(np.argmax(optimum.gold))
print(f"pi*_beta: gold {optimum.gold[best]:.3f} at beta = {betas[best]} (d = {optimum.d[best]:.2f}), "
      f"{optimum.gold[-1]:.3f} at beta = {betas[-1]} (d = {optimum.d[-1]:.2f})")

# %% [markdown]
# Along pi*_beta the gold reward is highest at a finite beta when the proxy's argmax is worse in gold than
# a milder optimum (compare the two printed values): the KL penalty then limits over-optimisation. This
# proxy's fall is small. A proxy that overfits more shows it in training: a **large** reward model (64 tanh
# units) on only **32 pairs** per prompt, from the same pi_0. GRPO against it (centered deltas, clipped
# loss, 10 steps per epoch) with the KL in the reward at three betas and without it, the reference frozen
# at pi_0 (`--kl-period 0`), 300 epochs, five sampling seeds each from the same pi_0 (`--init-from`), all
# 20 runs in one batch; after every epoch the lab records the exact gold and proxy rewards and d:

# %%
overfit, overfit_fit, _ = train_reward_model(pi_0, prompts, "inclusion-ordering",
                                             RewardModelConfig(size="large", pairs_per_prompt=32, steps=300))
with torch.no_grad():
    overfit_scores = overfit(prompts.unsqueeze(1), responses.unsqueeze(0))
print(f"large, 32 pairs per prompt: training accuracy {overfit_fit['accuracy']:.2f}, exact preference accuracy "
      f"{overfit_fit['preference_accuracy']:.2f}, correlation with the gold reward {overfit_fit['reward_correlation']:.2f}")
start_folder = Path(tempfile.mkdtemp())
save_policy(pi_0, start_folder / "policy.pt")  # every run starts at pi_0, its frozen reference
proxy_task = replace(task, rewards={**task.rewards, "learned:overfit": proxy_reward(task, overfit, "inclusion-ordering")})
KL_BETAS, RL_SEEDS, RL_EPOCHS = (0.0, 0.1, 0.3, 1.0), 5, 300
penalty = dict(kl_estimator="k1", kl_in="reward", kl_period=0)
rl = train(proxy_task, [TrainConfig(epochs=RL_EPOCHS, steps=10, seed=seed, reward="learned:overfit", delta="centered",
                                    loss="clipped", init_from=str(start_folder), kl=beta,
                                    **(penalty if beta > 0 else {"kl_period": 0}))
                        for beta in KL_BETAS for seed in range(RL_SEEDS)])
rl_gold, rl_proxy, rl_d = (rl.epoch_metrics[name].reshape(len(KL_BETAS), RL_SEEDS, RL_EPOCHS)
                           for name in ("gold_reward_exact", "proxy_reward_exact", "d"))
gold_0 = float((base * gold).sum(-1).mean())  # E_pi_0[R], the runs' common start
aims = optimum_curve(base, gold, overfit_scores, tuple(beta if beta > 0 else 1e-3 for beta in KL_BETAS))
peak = int(np.argmax(rl_gold[0].mean(0)))  # the epoch where the unpenalised runs' mean gold is highest

fig, ax = plt.subplots(figsize=(6.4, 3.6))
for k, beta in enumerate(KL_BETAS):
    line, = ax.plot(np.arange(RL_EPOCHS + 1), np.concatenate([[gold_0], rl_gold[k].mean(0)]), label=f"beta = {beta:g}")
    ax.axhline(aims.gold[k], color=line.get_color(), ls=":", lw=1)
ax.set(xlabel="epoch", ylabel="exact gold reward (mean of 5 seeds)", title="GRPO against an overfit proxy "
       "(dotted: gold at pi*_beta)")
ax.legend(fontsize=8)
print(f"gold at pi_0 {gold_0:.3f}; the unpenalised runs' mean gold is highest after epoch {peak + 1}")
falls = {}
for k, beta in enumerate(KL_BETAS):
    falls[beta] = mean_interval(rl_gold[k, :, peak] - rl_gold[k, :, -1])
    print(f"beta = {beta:<4g} gold after epoch {peak + 1}: {rl_gold[k, :, peak].mean():.3f}, after {RL_EPOCHS}: "
          f"{rl_gold[k, :, -1].mean():.3f} (pi*_beta's: {aims.gold[k]:.3f}); the fall {falls[beta].text(3)}, "
          f"{int((rl_gold[k, :, peak] > rl_gold[k, :, -1]).sum())} of {RL_SEEDS} seeds fall; proxy "
          f"{rl_proxy[k, :, peak].mean():.2f} -> {rl_proxy[k, :, -1].mean():.2f}, d {rl_d[k, :, peak].mean():.2f} -> "
          f"{rl_d[k, :, -1].mean():.2f}")
assert all(falls[b].low > 0 for b in KL_BETAS) and all(falls[a].estimate > falls[b].estimate
                                                       for a, b in zip(KL_BETAS, KL_BETAS[1:]))
assert all(abs(rl_gold[k, :, -1].mean() - aims.gold[k]) < 0.05 < rl_gold[k, :, peak].mean() - aims.gold[k]
           and (rl_proxy[k, :, -1] > rl_proxy[k, :, peak]).all() for k in range(len(KL_BETAS)))
assert RL_EPOCHS / 6 < peak + 1 < RL_EPOCHS / 3

# %% [markdown]
# Every run over-optimises: the gold reward climbs from pi_0's for about the first quarter of training,
# then falls while the proxy's score keeps rising, in every seed at every beta (the intervals above are
# 95% t-intervals over the five seeds of gold after the peak epoch minus gold at the end; the peak epoch
# is read off these same runs, so they describe the fall rather than test it). The penalty shrinks the
# fall: the larger beta, the less gold is given back, and each beta's runs end where the exact theory
# puts them, at the gold of pi*_beta (the dotted lines). The KL penalty does not stop the climb past the
# peak, because pi*_beta itself lies past it; it decides how far past. This is one proxy, fitted on one
# draw of pairs from one pi_0, and the five seeds vary only the sampling: another draw gives another proxy,
# whose fall may be larger, smaller or absent within 300 epochs (the lab's over-optimisation experiment,
# `lab.experiments.overoptimisation`, repeats the whole chain over seeds). How much gold a KL budget buys
# before the fall, and how fast it is lost after, is what Gao et al.'s curves summarise.
#
# ## 4. Gao et al.'s curves
#
# Gao et al. fit `gold(d) - gold(0) = d (alpha - beta d)` for best-of-n and `d (alpha - beta log d)` for
# RL. Fitted to the exact best-of-n points of the proxy on 256 pairs, and to the unpenalised GRPO runs'
# mean curve against the overfit proxy (d and gold after every epoch, d = 0 at pi_0):

# %%
fit = fit_gao(bon_256.d, bon_256.gold - bon_256.gold[0], "bon")
print(f"best-of-n: alpha = {fit['alpha']:.3f}, beta = {fit['beta']:.3f}, fitted peak at d = {fit['peak_d']:.2f} "
      f"(the exact curve peaks at d = {bon_256.d[int(np.argmax(bon_256.gold))]:.2f}); "
      f"RMS residual {fit['rms']:.3f} against a straight line's {fit['line_rms']:.3f}")
rl_curve_d = np.concatenate([[0.0], rl_d[0].mean(0)])
rl_curve_gain = np.concatenate([[0.0], rl_gold[0].mean(0) - gold_0])
rl_fit = fit_gao(rl_curve_d, rl_curve_gain, "rl")
print(f"GRPO, beta = 0: alpha = {rl_fit['alpha']:.3f}, beta = {rl_fit['beta']:.3f}, fitted peak at d = "
      f"{rl_fit['peak_d']:.2f} (the mean curve peaks at d = {rl_curve_d[peak + 1]:.2f}); RMS residual "
      f"{rl_fit['rms']:.3f} against a straight line's {rl_fit['line_rms']:.3f}")
assert fit["rms"] < fit["line_rms"] and rl_fit["rms"] < rl_fit["line_rms"] and rl_fit["peak_d"] < rl_curve_d[peak + 1]
assert 1.2 < rl_d[0, :, -1].mean() / rl_d[0, :, peak].mean() < 1.5 and 0.35 < falls[0.0].estimate < 0.45

# %% [markdown]
# Both forms fit better than a straight line (the residuals above), and neither locates its peak. The
# best-of-n form's fitted peak lies past the exact one: on 125 responses per prompt and a few reward levels
# the curve flattens where the quadratic keeps bending. The RL form's lies before it: once the runs pass
# the peak, the gold falls by about 0.4 while d grows by only about a third (section 3's first row: d at the
# peak epoch and at the end), a steep drop that `d (alpha - beta log d)` can only meet by bending down early.
# The forms summarise the curves without locating their peaks.
# `lab.experiments.overoptimisation.run_overoptimisation` repeats this over seeds, three proxies, three KL
# weights and DPO on each proxy's own pairs, and `lab.experiments.overoptimisation_section` decides Gao et
# al.'s claims with rules that can fail (`lab reproduce` writes them into RESULTS.md).
#
# The same steps from the shell, for a proxy of your own:
#
# ```
# lab reward-model --init-scale 0.1 --size large --pairs-per-prompt 32 --steps 300 --seed 0 --out runs/rm
# lab run --init-scale 0.1 --seed 0 --delta centered --loss clipped --reward learned:runs/rm \
#     --kl 0.3 --kl-estimator k1 --kl-in reward --kl-period 0 --epochs 300
# lab run --init-scale 0.1 --seed 0 --loss dpo --kl 0.05 --pairs-from runs/rm
# ```
#
# The first writes the model, its metrics (TRL's `accuracy` and `margin`, and the exact
# `preference_accuracy` and `reward_correlation`) and its pairs; the second trains GRPO against the proxy,
# the KL in the reward and the reference frozen at pi_0, and records `gold_reward_exact`,
# `proxy_reward_exact`, `kl_initial_exact` and `d` after every epoch (section 3's setting, one seed); the
# third trains DPO on the very pairs the proxy was fitted on.
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


check("Exercise 1, the reward model's loss", test_bt_loss, my_bt_loss, without=(reward_model_loss,));

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


check("Exercise 2, best-of-n's KL", test_bon_kl, my_bon_kl, without=(best_of_n_kl,));

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
