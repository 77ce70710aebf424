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
# 4. follows the exact expected update over training, then trains the policy under three modes on a
#    task where Dr. GRPO's argument applies, runs paired by seed;
# 5. ends with two graded exercises that check themselves, each with a collapsed solution.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from lab.training.config import TrainConfig
from lab.training.train import train
from lab.exact import varlen as X
from lab.core.aggregation import LossAgg, aggregate
from lab.exercises import check
from lab.policies.autoregressive import AutoregressivePolicy
from lab.policies.factorized import Policy
from tasks.sorting import make_task

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
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
# With per-token losses `l[i, t]` of G responses, the four modes (verl's names, `lab/core/aggregation.py`) are
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
# truncated there. `lab.exact.varlen` enumerates every response up to the cap, so expectations stay
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
# between. That is the direction Dr. GRPO describe, shown exactly for this policy and prompt, with
# leave-one-out deltas, which give a response below the expected reward a negative expected delta
# (claim 20 states that condition: where wrong responses' deltas are positive the sign reverses);
# `tests/proofs/test_claim_20_length_bias_direction.py` proves it for right responses too in a
# constructed case. It is a statement about one expected step, not yet about training.
#
# ## 4. Training: lengths over time, on a task where Dr. GRPO's argument applies
#
# Section 3's direction needs wrong responses whose deltas are negative: with a 0/1 reward and
# centered deltas a wrong response gets `0 - mean`, below 0 whenever its group holds a right one. (With raw deltas of the lecture's
# partial-credit reward nearly every delta is positive and the sign reverses: claim 20.) So the
# training demo uses Dr. GRPO's own kind of setting, a 0/1 `exact-match` reward on a task the policy can
# solve: prompts `[[0], [1]]` over a vocabulary of 2, responses up to 6 tokens, init scale 0.1, centered
# deltas. First the exact expected-gradient flow (`lab.experiments.length_oracle`: no sampling, each epoch
# the exact expected surrogate, Adam steps as in training), E[|o| | wrong] per epoch for one seed:

# %%
from lab.experiments.intervals import paired_interval
from lab.experiments.length_oracle import Oracle

small = make_task([[0], [1]], vocab_size=2)
SMALL = dict(policy="autoregressive", reward="exact-match", max_length=6, init_scale=0.1, delta="centered", epochs=12)
MODES = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm")
flow = Oracle(small, [TrainConfig(**SMALL, loss_agg=agg, seed=0) for agg in (MODES[0], MODES[2])]).flow()
for agg, curve in zip((MODES[0], MODES[2]), flow):
    print(f"{agg:25s} exact E[|o| | wrong] at epochs 0, 4, 8, 12: {np.round(curve[[0, 4, 8, 12]], 3)}")
assert flow[0, -1] > flow[1, -1]

# %% [markdown]
# In expectation the `1/|o|` update ends with longer wrong responses than the constant divisor.
# Now sampled training: ten seeds per mode, 12 epochs, each seed run under every mode, so that the
# runs pair by seed. The statistic is each seed's mean wrong length over epochs 1-10 under `1/|o|`
# minus the same under the constant divisor, with a paired t-interval over the seeds:

# %%
SEEDS7 = 10
configs = [TrainConfig(**SMALL, loss_agg=agg, seed=seed) for agg in MODES for seed in range(SEEDS7)]
records = train(small, configs)
wrong_length = records.epoch_metrics["incorrect_length"]
early = {agg: np.nanmean(wrong_length[i * SEEDS7:(i + 1) * SEEDS7, 1:11], axis=1) for i, agg in enumerate(MODES)}
fig, ax = plt.subplots(figsize=(6.4, 3.4))
for i, agg in enumerate(MODES):
    ax.plot(np.nanmean(wrong_length[i * SEEDS7:(i + 1) * SEEDS7], axis=0), label=agg)
ax.set_xlabel("epoch"), ax.set_ylabel("mean length of wrong samples"), ax.legend(fontsize=8)
for other in (MODES[2], MODES[1]):  # the constant divisor first: the experiment's verdict
    diff = paired_interval(early[MODES[0]], early[other])
    seen = "longer" if diff.low > 0 else "shorter" if diff.high < 0 else "no difference seen"
    print(f"{MODES[0]} - {other}: {diff.text(3)} (paired t, {diff.n} seeds): {seen}")
token_vs_constant = paired_interval(early["token-mean"], early["seq-mean-token-sum-norm"])
print(f"token-mean - seq-mean-token-sum-norm: {token_vs_constant.text(3)}")

# %% [markdown]
# The first line is the experiment's verdict, from the printed interval: "longer" means ten seeds
# see Dr. GRPO's effect, "no difference seen" that they cannot tell (not that there is none).
# `lab reproduce` runs the same comparison with 20 seeds, 100 epochs, every delta mode and both init
# scales, and the lecture's partial-credit task where the sign reverses; its verdicts are in
# `figures/RESULTS.md`. The last line compares `token-mean` with the constant divisor: in training
# the token-mean divisor is the token count of the whole batch (two prompts x ten responses), one
# number per batch, so within a batch it differs from a constant only by a scale, which Adam divides
# away; section 3's `token-mean` divided by one group's token count.
#
# ## Exercises
#
# Two graded exercises: write the code (or the value) where the `...` is, run the check below it,
# and open the collapsed solution if you are stuck.
#
# ### Exercise 1: two aggregations by hand
#
# Write `token_mean(values, mask)` and `seq_mean_token_mean(values, mask)` for per-token values
# `float[batch trial pos]` and a live-token mask `bool[batch trial pos]` (padding after EOS is
# `False` and may hold any number, even NaN). The check compares them with `lab.core.aggregation.aggregate`
# on random variable-length batches.

# %% tags=["exercise"]
def token_mean(values, mask):
    """sum of the live values / number of live tokens: a scalar tensor."""
    return ...  # your code here


def seq_mean_token_mean(values, mask):
    """each response's mean over its live tokens, then the mean over responses: a scalar tensor."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# Zero the padding with `torch.where` (a product `0 * NaN` would still be NaN), then divide by the
# right count: all live tokens for `token-mean`, each response's own for `seq-mean-token-mean`.
#
# ```python
# def token_mean(values, mask):
#     """sum of the live values / number of live tokens: a scalar tensor."""
#     live = torch.where(mask, values, torch.zeros_like(values))
#     return live.sum() / mask.sum()
#
#
# def seq_mean_token_mean(values, mask):
#     """each response's mean over its live tokens, then the mean over responses: a scalar tensor."""
#     live = torch.where(mask, values, torch.zeros_like(values))
#     return (live.sum(-1) / mask.sum(-1)).mean()
# ```
#
# </details>

# %%
def test_aggregations(token_mean, seq_mean_token_mean):
    draws = torch.Generator().manual_seed(7)
    for _ in range(5):
        values = torch.randn(2, 3, 5, generator=draws, dtype=torch.float64)
        lengths = torch.randint(1, 6, (2, 3), generator=draws)
        mask = torch.arange(5) < lengths.unsqueeze(-1)
        values = torch.where(mask, values, torch.full_like(values, float("nan")))  # padding is garbage
        for yours, mode in ((token_mean, "token-mean"), (seq_mean_token_mean, "seq-mean-token-mean")):
            got, lab_value = float(yours(values, mask)), float(aggregate(values, mode, mask))
            assert abs(got - lab_value) < 1e-12, f"{mode}: yours {got:.6f}, the lab's {lab_value:.6f}"


check("Exercise 1, two aggregations", test_aggregations, token_mean, seq_mean_token_mean, without=(aggregate,));

# %% [markdown]
# ### Exercise 2: the constant divisor with centered deltas
#
# Claim 19 says that with a constant divisor C the expected update is exactly grad J / C with
# leave-one-out deltas. Centered deltas subtract the group mean, which includes the response itself.
# Predict the scale of the `seq-mean-token-sum-norm` update along grad J for centered deltas, G = 3
# and C = 4 (the autoregressive policy of sections 2 and 3), as a number: three digits are enough (the check
# accepts anything within 0.001 of the exact scale, rounded or cut off).

# %% tags=["exercise"]
predicted_scale = ...  # your prediction, a float

# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# The group mean contains the response's own reward with weight 1/G, which removes a fraction 1/G
# of its delta in expectation (claim 4): centered deltas give (G-1)/G of the leave-one-out update,
# so the scale is (G-1)/(G C) = 2/12.
#
# ```python
# predicted_scale = (3 - 1) / (3 * 4)
# ```
#
# </details>

# %%
def test_centered_scale(predicted_scale):
    update = X.expected_update(policy, PROMPT, REWARD, "centered", "seq-mean-token-sum-norm", 3)[0]
    exact = float(update @ grad_j / (grad_j @ grad_j))
    assert angle(update, grad_j) < 1e-3, "the update should be parallel to grad J"
    assert abs(float(predicted_scale) - exact) < 1e-3, (
        f"{float(predicted_scale):.6f} is not the scale to three digits: start from claim 19's leave-one-out scale "
        "1/C and ask what share of a response's own delta the group mean removes in expectation")


check("Exercise 2, the scale with centered deltas", test_centered_scale, predicted_scale);

# %% [markdown]
# ## A last look: token-mean with a group of one
#
# Section 3 found `token-mean` between the two others. Its divisor is the group's total token count
# `sum_j |o_j|`, which contains the response's own length. With a group of one (G = 1, raw deltas)
# the divisor is `|o_1|` alone, and token-mean becomes `seq-mean-token-mean`, the most biased mode:

# %%
one_token_mean = X.expected_update(policy, PROMPT, REWARD, "raw", "token-mean", 1)[0]
one_seq_mean = X.expected_update(policy, PROMPT, REWARD, "raw", "seq-mean-token-mean", 1)[0]
same = torch.allclose(one_token_mean, one_seq_mean, rtol=1e-12, atol=1e-14)
print("token-mean equals seq-mean-token-mean at G = 1:", same)
assert same

# %% [markdown]
# So the bias comes from a response's own length in its divisor. Sharing the divisor with the rest
# of the group dilutes that share, `|o_i| / sum_j |o_j|`, which is why `token-mean` at G = 3 lies
# between the two others, and why in training, where the divisor is the whole batch's token count,
# it behaves like the constant divisor (section 4). With leave-one-out deltas,
# E[d_1 ; o_1 = y] = pi(y) (R(y) - J) does not depend on G, so the direction of the `1/|o|` update is
# the same at every group size.
