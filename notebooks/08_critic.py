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
# # Lesson 8: The critic GRPO removes
#
# GRPO is usually explained by what it removes. PPO computes each token's advantage with GAE
# (Schulman et al. 2016) from a learned value function `V_psi`, trained beside the policy by
# regression on returns: a second network with its own forward and backward passes, its own
# optimizer state and its own errors. Under a terminal reward that network must predict, at every
# unfinished prefix, what the whole response will finally earn. GRPO replaces it by the mean reward
# of G responses to the same prompt: no network, but G samples per prompt.
#
# No PPO implementation can measure its critic's error, because the true value `V^pi(s)` is unknown.
# Here it is a finite sum: the autoregressive policy's responses can all be enumerated, so
# `lab.exact.values` computes `V^pi` at every prefix, and `lab.exact.critic_moments` the exact mean and
# variance of the policy-gradient estimator with any critic. This lesson:
#
# 1. measures what a baseline buys: the exact variance with no baseline, with the prompt's value
#    (what the group mean estimates) and with `V^pi` at every prefix;
# 2. looks at `V^pi` prefix by prefix, and at how noisy its regression target is;
# 3. shows what GAE's lambda trades: variance against bias, exactly, for a critic that is wrong;
# 4. trains a critic by regression and follows its exact error;
# 5. puts GRPO's bargain in numbers: samples against a critic;
# 6. ends with two graded exercises: the value loss, and GAE for one response by hand.

# %%
import math

import matplotlib.pyplot as plt
import torch

import lab.policies as P
from lab.core.gae import gae_advantages, terminal_rewards, value_loss
from lab.exact import critic_error, critic_moments, values, varlen
from lab.exercises import check
from lab.policies.autoregressive import AutoregressivePolicy
from lab.policies.critic import Critic
from tasks.sorting import variable_length_reward

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
PROMPT = torch.tensor([[1, 0, 2]])  # one of the lecture's prompts, over a vocabulary of 3 tokens (EOS = 3)
REWARD = "inclusion-ordering"
policy = AutoregressivePolicy(3, 3, 4, dim=5, generator=torch.Generator().manual_seed(5), init_scale=0.5).double()
v_pi = values.state_values(policy, PROMPT, REWARD)  # V^pi at every prefix: one float[1 3^t] per position t


def angle(u, v):
    """Degrees between two flat vectors."""
    return math.degrees(math.acos(max(-1.0, min(1.0, float(u @ v / (u.norm() * v.norm()))))))


# %% [markdown]
# The policy is the lab's autoregressive one (lesson 7): responses of at most 4 tokens that end at EOS,
# here drawn with a flatter embedding (`init_scale=0.5`) so that every length occurs. A state `s_t` is
# the prompt and the prefix before token `t`; `V^pi(s_t)` is the expected final reward from there.
#
# ## 1. What a baseline buys
#
# The per-response estimator is `g = sum_t A_t grad log pi(a_t | s_t)`. Without a baseline `A_t = R`.
# With a critic and lambda = 1, GAE gives `A_t = R - V(s_t)`, unbiased for any critic (claim 23). Three
# critics: none (`V = 0`), the prompt's value `J(x) = V^pi(s_0)` at every prefix (what GRPO's group mean
# estimates), and `V^pi` at every prefix:

# %%
zero = [torch.zeros_like(v) for v in v_pi]
prompt_only = [v_pi[0].expand(-1, 3 ** t) for t in range(4)]
critics = {"no baseline": zero, "J(x) at every prefix": prompt_only, "V^pi at every prefix": v_pi}
variance = {}
for name, critic in critics.items():
    moments = critic_moments.gae_moments(policy, PROMPT, REWARD, critic, 1.0, group_size=1)
    variance[name] = float(moments.trace_cov)
    print(f"{name:22s} tr Cov[g] = {variance[name]:7.2f}   angle to grad J = "
          f"{angle(moments.mean[0], moments.grad_j[0]):.1e} degrees")
assert variance["no baseline"] > 4 * variance["J(x) at every prefix"] > 4 * variance["V^pi at every prefix"]

# %% [markdown]
# All three are unbiased (angle 0). The prompt's value cuts the variance about fivefold; the value of
# every prefix cuts it further, to about 60% of the prompt-only baseline's: a token late in a response
# is judged against what was still possible after the tokens before it, not against the prompt's
# average.
#
# `J(x)` is not the best a baseline that sees only the prompt can do. tr Cov[g] is a quadratic in a
# constant baseline b, least at `b* = E[R |grad log pi|^2] / E[|grad log pi|^2]` (lesson 1's optimal
# constant), which weighs each response by the size of its score. Three constant critics fix the
# quadratic exactly:

# %%
def constant_critic_variance(b):
    return float(critic_moments.gae_moments(policy, PROMPT, REWARD, [torch.full_like(v, b) for v in v_pi], 1.0,
                                            group_size=1).trace_cov)


v0, v1, v2 = (constant_critic_variance(b) for b in (0.0, 1.0, 2.0))
curvature, slope = (v2 - 2 * v1 + v0) / 2, (v1 - v0) - (v2 - 2 * v1 + v0) / 2  # tr Cov(b) = curvature b^2 + slope b + v0
best_constant = -slope / (2 * curvature)
print(f"J(x) = {float(v_pi[0]):.3f}: tr Cov[g] = {variance['J(x) at every prefix']:.2f};  "
      f"b* = {best_constant:.3f}: tr Cov[g] = {constant_critic_variance(best_constant):.2f}")
assert constant_critic_variance(best_constant) < variance["J(x) at every prefix"]

# %% [markdown]
# The least-variance constant sits above `J(x)` here, and lowers the variance further; GRPO's group mean
# estimates `J(x)`, not `b*`.
#
# ## 2. V^pi prefix by prefix, and the noise of its target
#
# The critic learns by regression on returns: at state `s_t` its target is the final reward `R`, whose
# mean given `s_t` is `V^pi(s_t)` (claim 25). How far the target scatters around that mean,
# `E[Var(R | s_t)]`, is the noise the regression must average away:

# %%
rows = varlen.varlen_responses(3, 4)
probs = varlen.all_probs(policy, PROMPT).detach()[0]
rewards = varlen.reward_table(policy, PROMPT, REWARD)[0].double()
live = varlen.live_mask(policy, rows)
at_state = values.on_responses(policy, v_pi, rows)[0]  # V^pi(s_t) of every response and position
visits = values.visit_probs(policy, PROMPT)
noise = []
for t in range(4):
    weight = probs * live[:, t]
    noise.append(float((weight * (rewards - at_state[:, t]) ** 2).sum() / weight.sum()))
    print(f"t = {t}: {3 ** t:2d} prefixes, P(reached) = {float(visits[t].sum()):.3f}, "
          f"V^pi from {float(v_pi[t].min()):.2f} to {float(v_pi[t].max()):.2f}, E[Var(R | s_t)] = {noise[-1]:.3f}")
assert noise == sorted(noise, reverse=True)

# %% [markdown]
# The target is noisiest at the first token (the whole response is still to come) and gets quieter
# with every token: under a terminal reward the early predictions are the hardest to learn from
# samples. But the first position has one state per prompt and later ones many (`3^t` prefixes), each
# visited less often; section 4 shows which of the two wins for a learned critic here.
#
# ## 3. What lambda trades
#
# GAE(lambda) mixes the one-step deltas `delta_t = r_t + V(s_{t+1}) - V(s_t)` (lambda = 0) and the whole
# return (lambda = 1). With `V = V^pi` every lambda is unbiased (claim 22). With a wrong critic only
# lambda = 1 is (claim 23). The critic that knows only the prompt, `J(x)` at every prefix, is wrong
# everywhere after the first token:

# %%
lambdas = (0.0, 0.5, 0.9, 1.0)
trade = {}
for name in ("J(x) at every prefix", "V^pi at every prefix"):
    for lam in lambdas:
        moments = critic_moments.gae_moments(policy, PROMPT, REWARD, critics[name], lam, group_size=1)
        bias = float((moments.mean - moments.grad_j).norm() / moments.grad_j.norm())
        trade[name, lam] = (float(moments.trace_cov), bias)
        print(f"{name:22s} lambda = {lam:.1f}: tr Cov[g] = {trade[name, lam][0]:6.2f}, "
              f"|E[g] - grad J| / |grad J| = {bias:.3f}")
assert all(trade["V^pi at every prefix", lam][1] < 1e-9 for lam in lambdas)
assert trade["J(x) at every prefix", 0.0][1] > 0.5 and trade["J(x) at every prefix", 1.0][1] < 1e-9
for name in ("J(x) at every prefix", "V^pi at every prefix"):
    assert [trade[name, lam][0] for lam in lambdas] == sorted(trade[name, lam][0] for lam in lambdas)

# %% [markdown]
# Smaller lambda, smaller variance, for both critics. For the exact critic that is free. For the wrong
# one it costs bias: at lambda = 0 the expected update is off grad J by more than half its length; at
# lambda = 0.9 by about a tenth. `lab.exact.critic_error.expected_gae_gradient` gives the same expected
# update from a recursion over prefixes, and claim 23 writes the bias in closed form: the critic's
# errors at the states after an action, which the action decides.
#
# ## 4. A learned critic and its exact error
#
# The lab's critic (`lab.policies.critic`) has the policy's shape: its own embedding and matrices, the
# prefix state `z_t`, read out to one number. It is trained here on the fixed policy's samples (10 per
# epoch, 10 Adam steps on each batch) with verl's clipped value loss against the returns (lambda = 1:
# the target is `R`). After each epoch its exact error is measured at every state the policy visits:

# %%
critic = Critic("autoregressive", 3, 3, 4, 5, [torch.Generator().manual_seed(1)]).double()
adam = torch.optim.Adam(critic.parameters(), lr=1e-2)
draws = torch.Generator().manual_seed(0)
score = variable_length_reward(REWARD, policy.eos)


def exact_error():
    """E_{s ~ pi}[(V_psi(s) - V^pi(s))^2], in total and by position (V^pi and the visits computed above)."""
    with torch.no_grad():
        tables = [t[0] for t in critic_error.critic_state_values(critic, policy, PROMPT)]
    return critic_error.value_error_exact(policy, PROMPT, REWARD, tables, truth=v_pi, visits=visits)


errors = [exact_error()]  # before any training: V = 0
for epoch in range(60):
    responses = P.sample(policy, PROMPT, 10, draws).unsqueeze(0)  # int[run batch trial pos], one run
    mask = P.response_mask(policy, responses)
    returns = terminal_rewards(score(PROMPT, responses[0]).double().unsqueeze(0), mask)
    with torch.no_grad():
        old = critic(PROMPT, responses)
    _, targets = gae_advantages(returns, old, mask, 1.0)
    for step in range(10):
        loss, _ = value_loss(critic(PROMPT, responses), old, targets, mask, 0.5)
        adam.zero_grad(), loss.sum().backward(), adam.step()
    errors.append(exact_error())
late_total = float(torch.stack([e.total for e in errors[-20:]]).mean())
late = torch.stack([e.by_position for e in errors[-20:]]).mean(0)
print(f"exact error E[(V_psi - V^pi)^2] at V = 0: {float(errors[0].total):.2f};  after one epoch: "
      f"{float(errors[1].total):.2f};  mean of the last 20 epochs: {late_total:.3f} (root {math.sqrt(late_total):.2f})")
print("by position, mean of the last 20 epochs:", [round(float(x), 3) for x in late])
fig, ax = plt.subplots(figsize=(6.4, 3.4))
for t in range(4):
    ax.plot([float(e.by_position[t]) for e in errors], label=f"position {t}")
ax.set_yscale("log"), ax.set_xlabel("epoch"), ax.set_ylabel("exact squared error"), ax.legend(fontsize=8)
assert float(errors[0].total) > 20 * late_total and 0.25 < math.sqrt(late_total) < 0.5
assert int(late.argmax()) == 3 and float(late[0]) < float(late[3])

# %% [markdown]
# The critic starts at `V = 0`, far from values between 1.7 and 4.1, and after a few epochs predicts
# the visited prefixes to within about a third of a reward point (the root printed above). Its error
# does not settle at zero: each epoch's ten noisy returns pull it around. And here it is largest not
# at the first position, where the target was noisiest, but at the last: position 0 is one state seen ten times per epoch, position 3
# has 27 prefixes, most seen rarely, and the critic must generalise across them. Noisy targets and
# many rarely visited states are the two ways a terminal-reward regression is hard; which dominates
# depends on the task. `lab reproduce` measures it while the policy trains (`value_error_exact` and
# its split by position, in `figures/RESULTS.md`).
#
# ## 5. GRPO's bargain
#
# GRPO needs no critic but G samples per prompt, and its group mean is an estimate of `J(x)`, not
# the value of each prefix. At equal samples, the exact variance per sample (tr Cov[g] times the
# number of samples it averages):

# %%
bargain = {"GAE, V^pi at every prefix, G = 1": variance["V^pi at every prefix"],
           "GAE, J(x) at every prefix, G = 1": variance["J(x) at every prefix"]}
for mode in ("loo", "centered"):
    moments = critic_moments.group_moments(policy, PROMPT, REWARD, mode, 10)
    bargain[f"group baseline {mode}, G = 10"] = 10 * float(moments.trace_cov)
for name, per_sample in bargain.items():
    print(f"{name:34s} variance x samples = {per_sample:6.2f}")
assert bargain["GAE, V^pi at every prefix, G = 1"] < bargain["group baseline centered, G = 10"]
assert bargain["GAE, V^pi at every prefix, G = 1"] < bargain["group baseline loo, G = 10"]
assert bargain["group baseline loo, G = 10"] > bargain["GAE, J(x) at every prefix, G = 1"]

# %% [markdown]
# With an exact critic, one sample does more than one sample of a group: the leave-one-out estimator
# pays for estimating `J(x)` from the other nine rewards (47.65 against 42.05 with `J(x)` known), and
# both group estimators judge every token against the prompt's value. The centered number is smaller
# than the leave-one-out one entirely because of the group scale: centered deltas are exactly (G-1)/G
# times the leave-one-out ones (claim 4), so the variance is ((G-1)/G)^2 = 0.81 times as large, and the
# expected update shrinks by the same (G-1)/G:

# %%
shrink = bargain["group baseline centered, G = 10"] / bargain["group baseline loo, G = 10"]
print(f"centered / leave-one-out variance: {shrink:.6f}  ((G-1)/G)^2 = {(9 / 10) ** 2:.6f}")
assert abs(shrink - 0.81) < 1e-9

# %% [markdown]
# The bargain is that no one has the exact critic. A learned one costs a second network, its own
# steps and its own error (section 4); the group mean costs samples and nothing else. Whether the
# trade pays is an experiment.
#
# ## 6. Training with a learned critic
#
# `TrainConfig(delta="gae")` (`lab run --delta gae`) trains PPO's actor-critic in the lab's loop: the
# critic and the policy step together, and `value_error_exact` records the critic's exact error against
# the sampling policy's `V^pi` every epoch. Three settings on the lecture's factorised policy and
# prompts, 3 seeds, 30 epochs: GRPO's centered deltas with G = 10, and the critic with G = 10 and G = 1
# (a tenth of the samples):

# %%
from lab.experiments.sweep import run_sweep
from lab.training.config import TrainConfig
from tasks.sorting import make_task

arms = {"GRPO centered, G = 10": dict(delta="centered"), "gae, G = 10": dict(delta="gae"),
        "gae, G = 1": dict(delta="gae", group_size=1)}
configs = [TrainConfig(epochs=30, seed=seed, **arm) for arm in arms.values() for seed in range(3)]
records = run_sweep(make_task(), configs)
fig, ax = plt.subplots(figsize=(6.4, 3.2))
first_error, last_error = {}, {}
for i, name in enumerate(arms):
    runs = list(range(3 * i, 3 * i + 3))
    ax.plot(records.epoch_metrics["mean_reward"][runs].mean(0), label=name)
    line = f"{name:22s} final mean reward {records.final('mean_reward')[runs].mean():.2f}"
    if "gae" in name:
        errors = records.epoch_metrics["value_error_exact"][runs]  # float[run epoch]
        first_error[name], last_error[name] = errors[:, 0], errors[:, -1]
        line += (f";  exact critic error, first epoch {errors[:, 0].mean():.2f}, last {errors[:, -1].mean():.4f}"
                 f" (each seed's fall: x{[round(float(x)) for x in errors[:, 0] / errors[:, -1]]})")
    print(line)
ax.set_xlabel("epoch"), ax.set_ylabel("mean sample reward"), ax.legend(fontsize=8)
assert all((last_error[name] < first_error[name] / 10).all() for name in last_error)

# %% [markdown]
# In every critic run the exact error falls by more than a factor of ten over the 30 epochs: the critic
# starts at 0, far from the values, and catches up while the policy sharpens and its returns vary
# less. Three seeds and 30 epochs are not evidence about which setting sorts better; `lab reproduce`
# runs these settings (and the autoregressive policy at lambda 0, 0.9 and 1) over 20 seeds, with the
# exact variance of each estimator at the start and the end and verdicts under stated rules, in the
# critic section of `figures/RESULTS.md`.
#
# ## Exercises
#
# Two graded exercises: write the code where the `...` is, run the check below it, and open the
# collapsed solution if you are stuck.
#
# ### Exercise 1: the value loss
#
# Write verl's clipped value loss for one batch: predictions `values`, the predictions `old_values`
# the targets were made with, targets `returns` (all `float[n]`, every token live) and a clip range
# `c`. The prediction may move at most `c` from the old one before the loss stops rewarding the move:
# take the larger of the plain squared error and the squared error of the clipped prediction, halve
# it, and average over tokens.

# %% tags=["exercise"]
def clipped_value_loss(values, old_values, returns, c):
    """0.5 * mean(max((V - R)^2, (V_clip - R)^2)), V_clip = V_old + clip(V - V_old, -c, c): a scalar tensor."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# Clip the *change* of the prediction, not the prediction itself, and take the larger (more
# pessimistic) of the two errors.
#
# ```python
# def clipped_value_loss(values, old_values, returns, c):
#     """0.5 * mean(max((V - R)^2, (V_clip - R)^2)), V_clip = V_old + clip(V - V_old, -c, c): a scalar tensor."""
#     clipped = old_values + (values - old_values).clamp(-c, c)
#     return 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2).mean()
# ```
#
# </details>

# %%
def test_value_loss(clipped_value_loss):
    draws = torch.Generator().manual_seed(3)
    for c in (0.1, 0.5):
        old = torch.randn(12, generator=draws, dtype=torch.float64)
        new = old + torch.randn(12, generator=draws, dtype=torch.float64)
        returns = torch.randn(12, generator=draws, dtype=torch.float64) * 2
        everywhere = torch.ones(1, 1, 12, dtype=torch.bool)
        lab_value, _ = value_loss(new.view(1, 1, 12), old.view(1, 1, 12), returns.view(1, 1, 12), everywhere, c)
        got = float(clipped_value_loss(new, old, returns, c))
        assert abs(got - float(lab_value)) < 1e-12, f"c = {c}: yours {got:.6f}, the lab's {float(lab_value):.6f}"


check("Exercise 1, the clipped value loss", test_value_loss, clipped_value_loss, without=(value_loss,));

# %% [markdown]
# ### Exercise 2: GAE for one response by hand
#
# A response of three tokens earns `R = 4` at its end. The critic's values before its tokens are
# `V(s_0) = 2.0`, `V(s_1) = 3.0`, `V(s_2) = 2.5`, and nothing follows the last token. With gamma = 1
# and lambda = 0.5, write the three advantages `[A_0, A_1, A_2]` as numbers (work them out on paper
# from `delta_t = r_t + V(s_{t+1}) - V(s_t)` and `A_t = delta_t + lambda A_{t+1}`).

# %% tags=["exercise"]
advantages_by_hand = ...  # [A_0, A_1, A_2], three floats

# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# The deltas are `3.0 - 2.0 = 1.0`, `2.5 - 3.0 = -0.5` and `4 + 0 - 2.5 = 1.5` (the reward arrives
# with the last token, and the value after it is 0). Scanning back: `A_2 = 1.5`,
# `A_1 = -0.5 + 0.5 * 1.5 = 0.25`, `A_0 = 1.0 + 0.5 * 0.25 = 1.125`.
#
# ```python
# advantages_by_hand = [1.125, 0.25, 1.5]
# ```
#
# </details>

# %%
def test_gae_by_hand(advantages_by_hand):
    mask = torch.ones(1, 1, 3, dtype=torch.bool)
    rewards = terminal_rewards(torch.tensor([[4.0]], dtype=torch.float64), mask)
    lab_values, _ = gae_advantages(rewards, torch.tensor([[[2.0, 3.0, 2.5]]], dtype=torch.float64), mask, 0.5)
    yours = [float(a) for a in advantages_by_hand]
    assert len(yours) == 3, "three advantages, one per token"
    wrong = [t for t in range(3) if abs(yours[t] - float(lab_values[0, 0, t])) > 1e-9]
    assert not wrong, f"A_{wrong[0]} is not right yet (the scan runs from the last token back)"


check("Exercise 2, GAE by hand", test_gae_by_hand, advantages_by_hand);
