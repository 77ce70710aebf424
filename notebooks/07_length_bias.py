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
# # Lesson 7: Variable length and the length bias
#
# The GRPO paper averages each response's per-token losses, `1/|o_i| sum_t`, before averaging over
# the group. Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training") argue that this
# normalisation is biased: a wrong response's push-down is spread over its tokens, so long wrong
# responses are penalised less per token, and the policy drifts toward long wrong answers. TRL
# (`loss_type`) and verl (`loss_agg_mode`) offer several normalisers because of this argument.
#
# In the lecture's toy every response has the same length, so none of this can happen. This lesson:
#
# 1. shows exactly why the choice vanishes at fixed length;
# 2. introduces the lab's autoregressive policy, whose responses end with an EOS token;
# 3. computes the exact expected update of each aggregation mode side by side, and how each moves
#    the expected length of wrong responses;
# 4. trains the policy under three modes and looks at the lengths over training;
# 5. ends with exercises that check themselves.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from lab import TrainConfig, train
from lab import exact_varlen as X
from lab.aggregation import LossAgg, aggregate
from lab.policies import AutoregressivePolicy, Policy
from tasks.sorting import make_task

AGGS = [m.value for m in LossAgg]
PROMPT = torch.tensor([[1, 0, 2]])  # one of the lecture's prompts, over a vocabulary of 3 tokens
REWARD = "inclusion-ordering"


def angle(u, v):
    """Degrees between two flat vectors."""
    return math.degrees(math.acos(max(-1.0, min(1.0, float(u @ v / (u.norm() * v.norm()))))))


def updates_against_grad_j(policy, group_size=3, delta="loo"):
    """Exact E[g] of every aggregation mode: its component along grad J (in units of grad J), its angle,
    and the update itself."""
    scores = X.score_matrix(policy, PROMPT)
    probs = X.all_probs(policy, PROMPT).detach()
    grad_j = X.expectation_gradient(scores, probs, X.reward_table(policy, PROMPT, REWARD).double())[0]
    rows = {}
    for agg in AGGS:
        update = X.expected_update(policy, PROMPT, REWARD, delta, agg, group_size)[0]
        rows[agg] = (float(update @ grad_j / (grad_j @ grad_j)), angle(update, grad_j), update)
    return rows


# %% [markdown]
# ## 1. At fixed length the aggregation is a step size
#
# With per-token losses `l[i, t]` of G responses, the four modes (verl's names, `lab/aggregation.py`) are
# `token-mean` (sum over every token / number of tokens), `seq-mean-token-mean` (each response's token
# mean, then the mean over responses), `seq-mean-token-sum` (each response's token sum, then the mean)
# and `seq-mean-token-sum-norm` (token sums divided by a constant C, the maximal length). When every
# response has L tokens, the first two are equal and the others are L and L/C times them, so the
# expected updates differ only in length, never in direction. Here is that, exactly, for the lecture's
# factorised policy (L = 3, so C = 3 too) with leave-one-out deltas and G = 3:

# %%
lecture = Policy(3, 3, 3, dim=5, generator=torch.Generator().manual_seed(5)).double()
fixed = updates_against_grad_j(lecture)
for agg, (scale, degrees, _) in fixed.items():
    print(f"{agg:25s} E[g] = {scale:.4f} x grad J + (a part at {degrees:.3f} degrees)")
assert all(degrees < 1e-3 for _, degrees, _ in fixed.values())

# %% [markdown]
# Every angle is zero: at fixed length the choice of normaliser rescales the gradient, and Adam
# divides most of a constant scale away anyway. That is the lab's claim 16.
#
# ## 2. A policy whose responses end
#
# `lab.policies.AutoregressivePolicy` keeps the lecture's encoder and tied embedding, adds one matrix
# per (position, earlier position) pair so that each position sees the tokens already emitted, and
# adds an EOS token (id = vocabulary size). A response ends at its first EOS; the positions after it
# are padding, masked out of every log-prob and loss; a response that reaches the cap without EOS is
# truncated there. `lab.exact_varlen` enumerates every response up to the cap, so expectations stay
# exact. With a cap of 4 tokens over a vocabulary of 3 there are 1 + 3 + 9 + 27 responses that end with
# EOS and 81 truncated ones:

# %%
policy = AutoregressivePolicy(3, 3, 4, dim=5, generator=torch.Generator().manual_seed(5)).double()
lengths = X.lengths(policy)
probs = X.all_probs(policy, PROMPT).detach()[0]
print("responses:", X.space_size(3, 4), " total probability:", round(float(probs.sum()), 12))
for length in range(1, 5):
    print(f"P(|o| = {length}) = {float(probs[lengths == length].sum()):.3f}")

# %% [markdown]
# The lengths vary (|o| counts the EOS), so the four normalisers now weigh responses differently.
#
# ## 3. The exact expected updates side by side
#
# The same computation as in section 1, on the autoregressive policy:

# %%
varying = updates_against_grad_j(policy)
for agg, (scale, degrees, _) in varying.items():
    print(f"{agg:25s} E[g] = {scale:.4f} x grad J + (a part at {degrees:.2f} degrees)")
assert varying["seq-mean-token-mean"][1] > 10 and varying["token-mean"][1] > 1
assert varying["seq-mean-token-sum-norm"][1] < 1e-3 and varying["seq-mean-token-sum"][1] < 1e-3

# %% [markdown]
# The per-sequence sums point exactly along grad J (with leave-one-out deltas the constant divisor
# gives grad J / C with C = 4: the scale 0.25 above; claim 19). The GRPO paper's `1/|o|` turns the
# expected update about 15 degrees away from grad J, and DAPO's `token-mean`, whose divisor is the
# group's total token count, by about 4.5 degrees. Which way do they turn? Dr. GRPO's answer concerns
# the length of wrong responses. With right = the optimal reward and f = E[|o| ; wrong] =
# sum over wrong y of pi(y) |y|, the directional derivative of f along an update, per unit of
# expected reward gained along it, compares the updates at equal progress:

# %%
scores = X.score_matrix(policy, PROMPT)
probs_row = X.all_probs(policy, PROMPT).detach()
rewards = X.reward_table(policy, PROMPT, REWARD).double()
wrong = (rewards < rewards.max()).double()
grad_j = X.expectation_gradient(scores, probs_row, rewards)[0]
grad_wrong_length = X.expectation_gradient(scores, probs_row, wrong * lengths.double())[0]
per_unit = {}
for agg, (_, _, update) in varying.items():
    per_unit[agg] = float(grad_wrong_length @ update / (grad_j @ update))
    print(f"{agg:25s} d E[|o| ; wrong] / d J = {per_unit[agg]:.3f}")
assert per_unit["seq-mean-token-mean"] > per_unit["token-mean"] > per_unit["seq-mean-token-sum-norm"]

# %% [markdown]
# For the same gain in expected reward, the `1/|o|` update raises the expected length of wrong
# responses the most, the unbiased update (either per-sequence sum) the least, and `token-mean` lies
# between. That is the direction Dr. GRPO describe, shown exactly for this policy and prompt;
# `tests/proofs/test_claim_20_length_bias_direction.py` proves it for right responses too in a
# constructed case. It is a statement about one expected step, not yet about training.
#
# ## 4. Training: lengths over time
#
# A small sweep: the three modes Dr. GRPO's argument is about, centered deltas, 5 seeds, 30 epochs
# on the lecture's three prompts (vocabulary 5, cap 5). `correct_length` and `incorrect_length` are
# the mean lengths of the epoch's exactly correct and other samples.

# %%
configs = [TrainConfig(epochs=30, policy="autoregressive", delta="centered", loss_agg=agg, seed=seed)
           for agg in ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm") for seed in range(5)]
records = train(make_task(), configs)
late = {}
fig, ax = plt.subplots(figsize=(6.4, 3.6))
for i, agg in enumerate(("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm")):
    runs = list(range(5 * i, 5 * i + 5))
    curve = np.nanmean(records.epoch_metrics["incorrect_length"][runs], axis=0)
    ax.plot(np.arange(len(curve)) * configs[0].steps, curve, label=agg)
    late[agg] = float(curve[-10:].mean())
    print(f"{agg:25s} incorrect length, last 10 epochs: {late[agg]:.2f};  final mean reward "
          f"{records.final('mean_reward')[runs].mean():.2f}")
ax.set_xlabel("step"), ax.set_ylabel("mean length of wrong samples"), ax.legend(fontsize=8)
assert late["seq-mean-token-mean"] > late["seq-mean-token-sum-norm"]
assert abs(late["token-mean"] - late["seq-mean-token-sum-norm"]) < 0.05

# %% [markdown]
# Here the `1/|o|` runs end with longer wrong responses than the two others, the direction of
# section 3. `token-mean` and `seq-mean-token-sum-norm` train almost identically: in training the
# token-mean divisor is the token count of the whole batch (three prompts x ten responses), one number
# per batch, so within a batch the two losses differ by a constant factor, and Adam divides a constant
# scale away. (Section 3's `token-mean` divided by one group's token count, which varies with the
# group: that is where its smaller bias came from.)
#
# Five seeds and 30 epochs are not evidence. `lab reproduce` runs the comparison with 20 seeds,
# 100 epochs, normalized and centered deltas, and states its verdict under a stated rule in
# `figures/RESULTS.md`; read it there rather than from this small run. Note also what the toy cannot
# show: a correct response here is `sorted(prompt)` + EOS, whose length is fixed, so only wrong
# responses can change length.
#
# ## Exercises
#
# **Exercise 1.** One group of two responses: the first has 1 live token with loss 2, the second 3
# live tokens with losses 1, 1, 1 (padding after EOS is masked). Compute every mode by hand with
# C = 5, then check with `lab.aggregation.aggregate`.

# %%
values = torch.tensor([[[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])  # batch trial pos
mask = torch.tensor([[[True, False, False], [True, True, True]]])
by_hand = {"token-mean": 5 / 4, "seq-mean-token-mean": (2 / 1 + 3 / 3) / 2, "seq-mean-token-sum": (2 + 3) / 2,
           "seq-mean-token-sum-norm": (2 + 3) / 2 / 5}
for agg, expected in by_hand.items():
    assert abs(float(aggregate(values, agg, mask, horizon=5)) - expected) < 1e-12
print("all four modes agree with the hand computation")

# %% [markdown]
# **Exercise 2.** Claim 19 says that with a constant divisor C, centered deltas give exactly
# (G-1)/(G C) grad J. Predict the scale for G = 3 and C = 4, then check it on the autoregressive policy.

# %%
centered = X.expected_update(policy, PROMPT, REWARD, "centered", "seq-mean-token-sum-norm", 3)[0]
scale = float(centered @ grad_j / (grad_j @ grad_j))
print(f"scale {scale:.6f}, predicted {(3 - 1) / (3 * 4):.6f}, angle {angle(centered, grad_j):.2e} degrees")
assert abs(scale - (3 - 1) / (3 * 4)) < 1e-9

# %% [markdown]
# **Exercise 3.** Section 3 found `token-mean` between the two others. Its divisor is the group's
# total token count, so a long response weighs less only when it shares a group with others. Predict:
# with a group of one (G = 1, raw deltas, where no other response shares the divisor), is `token-mean`
# equal to `seq-mean-token-mean`? Check it.

# %%
one_token_mean = X.expected_update(policy, PROMPT, REWARD, "raw", "token-mean", 1)[0]
one_seq_mean = X.expected_update(policy, PROMPT, REWARD, "raw", "seq-mean-token-mean", 1)[0]
print("equal:", torch.allclose(one_token_mean, one_seq_mean, rtol=1e-12, atol=1e-14))
assert torch.allclose(one_token_mean, one_seq_mean, rtol=1e-12, atol=1e-14)

# %% [markdown]
# With one response per group, `sum_j |o_j| = |o_1|`, so the two divisors coincide: `token-mean`'s
# length bias comes from sharing its divisor within a group. With leave-one-out deltas, by contrast,
# E[d_1 ; o_1 = y] = pi(y) (R(y) - J) does not depend on G, so the direction of the `1/|o|` update
# is the same at every group size.
