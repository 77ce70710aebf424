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
# # Lesson 14: What is sampled, and from which policy
#
# The lab's story so far: the lecture's runs get stuck because most groups have equal rewards and give
# no signal. The methods built since attack exactly that (DAPO's dynamic sampling), or the fact that a
# real trainer samples from a policy that is not the one it updates: an asynchronous sampler K optimizer
# steps behind, or an inference engine whose numbers differ from the trainer's. TRL 1.16 corrects such a
# sampler by importance sampling, truncated or masked; it can also let the KL penalty's reference follow
# the policy (TR-DPO's `sync_ref_model`) and move the entropy bonus's coefficient to hold a target
# (Skywork-OR1's adaptive entropy). Each is a `lab run` option; this lesson measures exactly what the
# toy lets it measure exactly, and trains what a short run can show:
#
# 1. dynamic sampling: its expected cost and the batch it keeps, in closed form, then trained;
# 2. a stale or mismatched sampler: the exact bias of its update, with each of TRL's corrections (exact only);
# 3. a reference that follows the policy: where each reference scheme goes, exactly and trained;
# 4. adaptive entropy against a fixed coefficient (trained only);
# 5. graded exercises: dynamic sampling's cost, and TRL's `sequence_mask` weights.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from lab.core.importance import importance_weights
from lab.exact.dynamic_sampling import expected_draws, kept_value_probs, no_signal_probability, value_probs
from lab.exact.sampler_bias import response_tables
from lab.exercises import check
from lab.experiments.sampler_results import CORRECTIONS, bias_tables, initial_logits, reference_numbers, rewards_of
from lab.training.config import TrainConfig
from lab.training.train import train
from tasks.sorting import make_task

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
task = make_task()  # the lecture's three prompts, values 0..4, inclusion-ordering reward (optimum 5)
STUCK = dict(delta="centered", loss="clipped")  # the lecture's stuck setting (lesson 6)
SEEDS, EPOCHS = 4, 60
base = TrainConfig(epochs=EPOCHS, **STUCK)

# %% [markdown]
# ## 1. Dynamic sampling: what a full batch costs
#
# A group of G responses whose rewards are all equal has zero centered deltas: no update. With
# `p_v = P(R = v)` for one response, such a group comes with probability `q = sum_v p_v^G`. DAPO drops it
# and draws again (the lab redraws the group *of the same prompt*, since its prompts are a fixed set), up
# to a cap of N groups. So the groups drawn per prompt are `S_N = 1 + q + ... + q^(N-1)` in expectation,
# and the kept group still has no signal with probability `q^N` (claim 42 in docs/claims.md). Here are
# `q` and `S_10` for the three prompts at seed 0's initial policy, and the reward law of one response
# before and after the filter:

# %%
rewards = rewards_of(base)  # float[batch n]: the reward of each of the 125 responses of each prompt
start = torch.log_softmax(initial_logits(1, base)[0], -1)  # seed 0's per-position log-probs
probs = response_tables(start)[1].sum(-1).exp()  # float[batch n]: pi_0(y | x)
for b in range(3):
    values, p_v = value_probs(probs[b], rewards[b])
    q = no_signal_probability(p_v, base.group_size)
    kept = kept_value_probs(p_v, base.group_size, 10)
    print(f"prompt {task.prompts[b].tolist()}: q = {q:.3f}, expected groups S_10 = {expected_draws(q, 10):.2f}; "
          f"P(R = v) for v = {values.tolist()}: plain {np.round(p_v.numpy(), 3).tolist()}, "
          f"kept {np.round(kept.numpy(), 3).tolist()}")

# %% [markdown]
# The prompt whose q is largest costs the most groups, and its kept responses move mass toward the
# reward values the plain policy rarely draws: a kept group must hold at least two different rewards.
# Under a group baseline nothing else changes: the kept group's expected update is exactly `S_N` times
# the plain one (claim 43). Dynamic sampling reweighs the prompts; it does not turn any prompt's update.
#
# Does it make the stuck setting sort? Four seeds each, the same seeds, 60 epochs:

# %%
plain_and_dynamic = train(task, [base.replace(seed=s) for s in range(SEEDS)]
                          + [base.replace(seed=s, dynamic_sampling=True, max_num_gen_batches=10)
                             for s in range(SEEDS)])
solved = plain_and_dynamic.final("greedy_accuracy") == 1.0
drawn = plain_and_dynamic.epoch_metrics["groups_drawn"][SEEDS:] / 3  # per prompt and epoch
flat = plain_and_dynamic.epoch_metrics["zero_std_fraction"]
print(f"runs sorting every prompt: plain {solved[:SEEDS].sum()} of {SEEDS}, dynamic {solved[SEEDS:].sum()} of {SEEDS}")
print(f"groups drawn per prompt and epoch (dynamic): first epoch {drawn[:, 0].mean():.2f}, "
      f"mean over the run {drawn.mean():.2f}")
print(f"groups with equal rewards in the batch, last 10 epochs: plain {flat[:SEEDS, -10:].mean():.2f}, "
      f"dynamic {flat[SEEDS:, -10:].mean():.2f}")
assert drawn.mean() > 1 and flat[SEEDS:, -10:].mean() < flat[:SEEDS, -10:].mean()

# %% [markdown]
# The batch dynamic sampling keeps has fewer flat groups than the plain batch, and it pays for that
# in groups drawn, several per prompt and epoch. Whether it sorts more often is in the first line;
# figures/RESULTS.md decides it over 20 seeds and 100 epochs (`lab reproduce`, the section "What is sampled").
#
# ## 2. A sampler that is not the policy
#
# At an epoch's first step `pi_old = pi`, so every PPO-style loss has REINFORCE's gradient, and one
# response's update in the logits is `g(y) = (d(y) / L) sum_t W_t(y) (e_{y_t} - pi_t)`, with `W` the
# correction's weight. Drawn from a sampler `mu`, the expected update is `sum_y mu(y) g(y)`, not the
# on-policy `sum_y pi(y) g(y)`. `lab.exact.sampler_bias` sums both over every response. Below, the policy
# is step 40 of the exact expected-update path from seed 0's start, and the sampler is the same path K
# steps back (a stale sampler) or the policy at temperature `T_s` (a mismatched one); each cell is the
# relative bias `|u_mu - u_pi| / |u_pi|`, then one response's variance against the on-policy one. Each
# correction has the bounds printed first (TRL's defaults):

# %%
for name, (mode, low, high) in CORRECTIONS.items():
    if mode is not None:
        print(f"{name}: C_min {low}, C_max {high}")
tables = bias_tables(base)
names = list(tables["stale"][1])
print(f"{'sampler':>16} " + " ".join(f"{n:>20}" for n in names))
for label, rows in (("K = {}", tables["stale"]), ("T_s = {}", tables["mismatch"])):
    for key, row in rows.items():
        print(f"{label.format(key):>16} " + " ".join(f"{b:>9.3f} (var x{v:4.2f})" for b, v in row.values()))
stale = tables["stale"]
assert all(stale[k]["sequence, unbounded"][0] < 1e-9 for k in stale)
assert [stale[k]["none"][0] for k in sorted(stale)] == sorted(stale[k]["none"][0] for k in stale)
assert stale[20]["token-truncate"][0] < 0.5 * stale[20]["none"][0]
trades = [(row[f"{g}-mask"][0] > row[f"{g}-truncate"][0]) and (row[f"{g}-mask"][1] < row[f"{g}-truncate"][1])
          for row in stale.values() for g in ("token", "sequence")]
wins = [(row[f"{g}-mask"][0] < row[f"{g}-truncate"][0]) and (row[f"{g}-mask"][1] < row[f"{g}-truncate"][1])
        for row in stale.values() for g in ("token", "sequence")]
assert any(trades) and any(wins)  # masking trades bias for variance somewhere, and wins both somewhere

# %% [markdown]
# Uncorrected, the bias grows with K. The sequence weight `pi(y) / mu(y)` with no bounds removes it
# exactly (claim 44), at a variance that grows fast with K; that is why TRL bounds it at `C_max = 3` by
# default. Truncating (`token_truncate`, `sequence_truncate`) keeps every response and caps its weight,
# so it leaves the bias of the capped mass; masking drops the far-off responses whole, which leaves
# their whole on-policy term as bias (claim 45 gives both exactly). The table shows that the trade is not
# one-way: at some K masking has more bias and less variance than truncation, at others it wins both.
# The third assertion above is the headline: at K = 20 token truncation removes more than half of the
# uncorrected bias. The per-token weights are never exact (claim 44): a token's weight corrects only its
# own position, and the delta depends on all of them.
#
# ## 3. A reference that follows the policy
#
# With a KL penalty to a frozen reference, the policy ascends `J_beta = E[r] - beta KL` and stops at its
# optimum (claim 26). TR-DPO moves the reference, `phi_ref <- alpha phi + (1 - alpha) phi_ref` every tau
# steps (TRL's `sync_ref_model`, `ref_model_mixup_alpha`, `ref_model_sync_steps`); the lab's
# `--kl-period` is the case alpha = 1. At a fixed point of a moving reference the reference *is* the
# policy, so the penalty's gradient vanishes and only the reward's maximisers are fixed (claim 46): a
# following reference ascends `E[r]`, with the penalty as a trust region. The exact iteration in the
# tabular class, beta 0.1, 3000 steps, with the reference frozen, replaced by the policy every 100 steps
# (periodic: alpha 1, the lab's `--kl-period`), or mixed toward it with alpha 0.6 every 100 steps (synced)
# (expected reward as a share of the optimum, KL to the start):

# %%
for name, (share, kl) in reference_numbers(base).items():
    print(f"{name:>9}: E[r] / optimum {share:.3f}, KL(pi || pi_0) {kl:.2f} nats")
references = train(task, [TrainConfig(epochs=EPOCHS, delta="centered", kl=0.1, kl_period=0, optimum_metrics=True,
                                      seed=s, **extra) for extra in ({}, {"sync_ref_model": True,
                                                                          "ref_model_mixup_alpha": 0.6,
                                                                          "ref_model_sync_steps": 100})
                           for s in range(SEEDS)])
kl_start = references.epoch_metrics["kl_initial_exact"][:, -1]
rounded = np.round(kl_start.astype(float), 2).tolist()
print(f"trained, final exact KL to the initial policy: frozen {rounded[:SEEDS]}, synced {rounded[SEEDS:]}")

# %% [markdown]
# In the exact iteration both following references end higher in `E[r]` than the frozen one, and
# further from the start; after 3000 steps they are still well short of the optimum: from the stuck
# start the climb is slow. For the trained runs, read off the last line whether the synced reference
# lets the policy move further from where it started than the frozen one at the same beta;
# figures/RESULTS.md decides it over 20 seeds. A synced reference changes which objective is ascended, not only
# how fast: that is why TRL's documentation asks for `beta > 0` with it (it refuses it at `beta = 0`,
# where there is nothing to sync), and why the lab refuses it beside `--kl-period`.
#
# ## 4. Adaptive entropy
#
# Skywork-OR1's controller (TRL's `use_adaptive_entropy`) moves the entropy bonus's coefficient by a
# step `delta` each optimizer step: up while the entropy is at or below the target, down above it, and
# it applies the bonus only while the entropy is at or below the target. Against a fixed coefficient of
# 0.03, with a target of 0.3 nats (the lecture's start is above it):

# %%
entropy_runs = train(task, [base.replace(seed=s, entropy_coef=0.03, **extra) for extra in
                            ({}, {"adaptive_entropy": True, "entropy_target": 0.3}) for s in range(SEEDS)])
entropy = entropy_runs.step_metrics["entropy"][:, ::base.steps]  # the sampling policy's, each epoch
distance = np.abs(entropy[:, -10:] - 0.3).mean(axis=1)
fig, ax = plt.subplots(figsize=(6, 3.2))
for runs, label, colour in ((slice(0, SEEDS), "fixed 0.03", "C0"), (slice(SEEDS, None), "adaptive", "C1")):
    ax.plot(entropy[runs].T, color=colour, alpha=0.6)
    ax.plot([], color=colour, label=label)
ax.axhline(0.3, color="grey", ls="--", lw=0.8)
ax.set_xlabel("epoch")
ax.set_ylabel("entropy (nats)")
ax.legend()
plt.tight_layout()
rounded = np.round(distance.astype(float), 3).tolist()
print(f"mean distance to the target over the last 10 epochs: fixed {rounded[:SEEDS]}, adaptive {rounded[SEEDS:]}")
assert distance[SEEDS:].mean() < distance[:SEEDS].mean()
coef = entropy_runs.step_metrics["entropy_coef"][SEEDS:]  # the coefficient each adaptive step applied
above = entropy_runs.step_metrics["entropy"][SEEDS:, :-1] > 0.3  # what the step before measured
idle = max(coef[:, 0].max(), coef[:, 1:][above].max())
print(f"adaptive runs' applied coefficient: largest at a first step or after a step above the target {idle:.3f}; "
      f"largest over each run {np.round(coef.max(axis=1).astype(float), 3).tolist()}")

# %% [markdown]
# The adaptive runs end nearer the target on average (the assertion above). Their applied coefficient is 0
# while the entropy the step before measured is above the target (the first number printed: the bonus acts
# one step late, as in TRL), and grows while the entropy stays at or below it, until the bonus pushes it back
# up (the largest values printed). A fixed coefficient holds no level: where
# the entropy settles depends on the run.
#
# ## Exercises
#
# Write the code where the `...` is, run the check below it, and open the collapsed solution if you
# are stuck.
#
# ### Exercise 1: what dynamic sampling costs
#
# Write `my_expected_draws(q, cap)`: from `q` `float[...]`, each prompt's probability that a group has no
# signal, and the cap N on groups drawn per prompt, the expected number of groups drawn per prompt,
# `float[...]`. Mind q = 1 (a prompt that never gives signal) and the cap.

# %% tags=["exercise"]
def my_expected_draws(q, cap):
    """E[groups drawn] per prompt under a cap of `cap` draws."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_expected_draws(q, cap):
#     """E[groups drawn] per prompt under a cap of `cap` draws."""
#     return sum(q ** k for k in range(cap))  # the k-th draw happens when the k before it had no signal
# ```
#
# </details>

# %%
def test_expected_draws(my_expected_draws):
    q = torch.tensor([0.0, 0.3, 0.9, 0.999, 1.0], dtype=torch.float64)
    for cap in (1, 3, 10):
        yours = torch.as_tensor(my_expected_draws(q, cap), dtype=torch.float64)
        assert yours.shape == q.shape, f"one number per prompt: expected shape {tuple(q.shape)}"
        assert torch.isfinite(yours).all(), "a prompt with q = 1 still costs a finite number of groups: the cap"
        worst = float((yours - expected_draws(q, cap)).abs().max())
        assert worst < 1e-9, (f"with a cap of {cap} your cost is off by up to {worst:.3g}: the first draw always "
                              "happens; does the cap stop the last one?")


check("Exercise 1, dynamic sampling's cost", test_expected_draws, my_expected_draws, without=(expected_draws,));

# %% [markdown]
# ### Exercise 2: TRL's `sequence_mask` weights
#
# Write `my_sequence_mask_weights(old_log_probs, sampling_log_probs, mask, clip_min, clip_max)`: from the
# trainer's and the sampler's per-token log-probs `float[batch trial pos]` and the live-token mask
# `bool[batch trial pos]`, each response's weight `float[batch trial 1]` as TRL's
# `vllm_importance_sampling_mode="sequence_mask"` computes it: the ratio pi_old(y) / mu(y) over the
# response's live tokens, set to 0 where it is below `clip_min` or above `clip_max` (a ratio equal to a
# bound is kept).

# %% tags=["exercise"]
def my_sequence_mask_weights(old_log_probs, sampling_log_probs, mask, clip_min, clip_max):
    """pi_old(y) / mu(y) per response, 0 outside [clip_min, clip_max]."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_sequence_mask_weights(old_log_probs, sampling_log_probs, mask, clip_min, clip_max):
#     """pi_old(y) / mu(y) per response, 0 outside [clip_min, clip_max]."""
#     ratio = ((old_log_probs - sampling_log_probs) * mask).sum(-1, keepdim=True).exp()
#     return torch.where((ratio < clip_min) | (ratio > clip_max), torch.zeros_like(ratio), ratio)
# ```
#
# </details>

# %%
def test_sequence_mask_weights(my_sequence_mask_weights):
    draws = torch.Generator().manual_seed(3)
    old = -torch.rand(4, 6, 4, generator=draws, dtype=torch.float64) * 2
    sampling = old + torch.randn(4, 6, 4, generator=draws, dtype=torch.float64) * 0.6
    mask = torch.arange(4) < torch.randint(1, 5, (4, 6, 1), generator=draws)
    sampling = torch.where(mask, sampling, sampling + 5.0)  # padding: numbers that must not count
    expected = importance_weights(old, sampling, "sequence-mask", 0.5, 2.0, mask)
    ratio = importance_weights(old, sampling, "sequence-mask", None, None, mask)  # no bounds: every ratio
    low, high, inside = ratio < 0.5, ratio > 2.0, (ratio >= 0.5) & (ratio <= 2.0)
    assert low.any() and high.any() and inside.any()  # every case occurs in this test
    yours = torch.as_tensor(my_sequence_mask_weights(old, sampling, mask, 0.5, 2.0), dtype=torch.float64)
    assert yours.shape == expected.shape, f"one weight per response: expected shape {tuple(expected.shape)}"
    close = torch.isclose(yours, expected, rtol=1e-9, atol=1e-12)
    assert close[inside].all(), (f"{int((~close[inside]).sum())} of {int(inside.sum())} responses within the bounds "
                                 "have another weight than TRL's: how do a response's tokens make its one ratio, "
                                 "and which of its tokens count?")
    assert close[high].all(), "a response whose ratio is above clip_max keeps a weight; TRL's mode drops it"
    assert close[low].all(), "a response whose ratio is below clip_min keeps a weight; TRL's mode drops it"


check("Exercise 2, TRL's sequence_mask weights", test_sequence_mask_weights, my_sequence_mask_weights,
      without=(importance_weights,));

# %% [markdown]
# The lab's options for what this lesson did: `lab run --dynamic-sampling --max-num-gen-batches N`,
# `--staleness K`, `--sampler-temperature T`, `--importance-sampling-correction token-truncate|token-mask|
# sequence-truncate|sequence-mask` with `--importance-sampling-clip-min/-max`, `--off-policy-mask-threshold`,
# `--sync-ref-model --ref-model-mixup-alpha A --ref-model-sync-steps N` (with `--kl > 0 --kl-period 0`) and
# `--adaptive-entropy --entropy-target H`; `lab sweep` takes the switches as grid axes
# (`--dynamic-sampling true --dynamic-sampling false`). Their parity with TRL's own code is
# `tests/bridge/test_trl_sampling_parity.py`.
