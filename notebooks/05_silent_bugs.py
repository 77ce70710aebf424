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
# # Lesson 5: Silent bugs
#
# Most bugs in reinforcement-learning code raise no error. The loss prints numbers, the curves move,
# and the run is simply worse than it should be, or quietly optimizes something else. Spinning Up's
# exercises call them *silent bugs*; the only defence is to know what each part of the algorithm
# must do and to check it.
#
# Each bug below trains with the lab's own loop (`lab.training.train.train`) in which **one** function
# has been swapped for a broken one, for the length of a `with` block. The lab itself is never
# edited; the broken versions are built in the next cell, the workshop, by wrapping or replacing
# lab functions. Seven bugs: three ways to get the ratio of the clipped loss wrong (one of them is
# in the lecture's own script), two in the deltas, two in the KL penalty.
#
# How to use this notebook:
#
# 1. **Do not read the workshop cell** (its source is collapsed in Jupyter; if you see it, scroll
#    past). The bugs are numbered there, and their names say nothing.
# 2. For each bug, run the *symptom* cell and look at what the lab's own records say.
# 3. Answer the *question*: what is wrong, where, and which check would have caught it?
# 4. Then open the *solution* (collapsed), which names the bug and explains the symptom; the cell
#    after it runs a check that fails on the broken function and passes on the lab's. Claim numbers
#    refer to the lab's list of claims, [docs/claims.md](../docs/claims.md), each with its proof.
# 5. Three graded exercises have you write such checks yourself (notebooks/README.md explains the
#    format: your cell, a collapsed solution, a check that says "not yet solved" until you are done).

# %%
import copy
import importlib
from contextlib import contextmanager
from unittest import mock

import matplotlib.pyplot as plt
import numpy as np
import torch

import lab.core.losses
from lab.policies.factorized import Policy
from lab.training.config import TrainConfig
from lab.core.deltas import compute_deltas
from lab.core.losses import compute_loss
from lab.training.train import train
from lab.experiments.drift import drift_from_start
from lab.exercises import check
from lab.experiments.figures import mean_band
from lab.experiments.intervals import mean_interval, seed_difference
from lab.core.aggregation import kl_term
from lab.core.kl import freeze
from lab.policies.sampling import response_log_probs, sample_responses
from tasks.sorting import make_task

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
np.set_printoptions(precision=3, suppress=True)
loop = importlib.import_module("lab.training.train")  # the loop's module (`lab.training.train` is also the function's name)
scoring = importlib.import_module("lab.training.groups")  # where the loop turns an epoch's rewards into deltas
penalties = importlib.import_module("lab.training.methods")  # where a policy-gradient step adds beta * the KL term
task = make_task()  # the lecture's prompts [[1,0,2], [3,2,4], [1,2,3]], vocabulary 0..4
SEEDS = range(20)


def seeds_of(**settings):
    """The same setting for every seed in SEEDS (all of them train as one batched computation)."""
    return [TrainConfig(seed=seed, **settings) for seed in SEEDS]


def compare(runs, metric="reward_fraction", title=""):
    """Curves of one epoch metric, mean over seeds with its 95% t-band (lab.experiments.figures.mean_band)."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for label, records in runs.items():
        values = records.epoch_metrics[metric]
        mean, low, high = mean_band(values[np.isfinite(values).all(axis=1)])  # a run gone NaN has no curve
        ax.plot(mean, label=label)
        ax.fill_between(np.arange(len(mean)), low, high, alpha=0.25)
    ax.set(xlabel="epoch", ylabel=metric.replace("_", " "), title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


# The batch on which gradients are compared below: the lecture's policy at seed 5, ten samples
# per prompt, centered deltas, and theta = theta_old (the ratio losses' first step).
policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))
responses = sample_responses(policy(task.prompts), 10, torch.Generator().manual_seed(0))
deltas = compute_deltas(task.reward_fn("inclusion-ordering")(task.prompts, responses), "centered")


# %% jupyter={"source_hidden": true}
# The workshop: seven broken variants of lab functions. Spoilers: read only after the exercises.

def broken_a(log_probs, old_log_probs):
    old_log_probs = log_probs
    return torch.exp(log_probs - old_log_probs)


def broken_b(log_probs, old_log_probs):
    return torch.exp(log_probs - log_probs.detach())


def broken_c(log_probs, old_log_probs):
    return log_probs / old_log_probs.detach()


def broken_d(rewards, mode, std_eps=1e-5, unbiased=True):
    if mode != "normalized":  # only the mode that divides by a std has the bug
        return compute_deltas(rewards, mode, std_eps, unbiased)
    centered = rewards - rewards.mean(dim=-1, keepdim=True)
    return centered / (rewards.std(dim=-2, keepdim=True) + std_eps)


def broken_e(rewards, mode, std_eps=1e-5, unbiased=True):
    return compute_deltas(rewards, mode, std_eps, unbiased).roll(1, dims=-1)


def broken_f(values, mode="token-mean", mask=None, horizon=None):
    return -kl_term(values, mode, mask, horizon)


def broken_g(policy):
    return policy


BUGS = {
    1: (lab.core.losses, "ratios", broken_a),
    2: (lab.core.losses, "ratios", broken_b),
    3: (lab.core.losses, "ratios", broken_c),
    4: (scoring, "compute_deltas", broken_d),
    5: (scoring, "compute_deltas", broken_e),
    6: (penalties, "kl_term", broken_f),
    7: (loop, "freeze", broken_g),
}


@contextmanager
def bug(number):
    """Inside this block the loop runs with bug `number` in place of the lab's function."""
    with mock.patch.object(*BUGS[number]):
        yield


def broken(number):
    """Bug `number`'s broken function itself (to run a check on it)."""
    return BUGS[number][2]


def loss_gradient(mode, number=None):
    """The gradient of `mode`'s loss on the batch above at theta = theta_old, optionally under a bug."""
    policy.zero_grad()
    log_probs = response_log_probs(policy(task.prompts), responses)
    with bug(number) if number else mock.patch.object(lab.core.losses, "ratios", lab.core.losses.ratios):
        compute_loss(log_probs, deltas, mode, old_log_probs=log_probs.detach()).backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters()])


def cosine(a, b):
    return 0.0 if a.norm() == 0 or b.norm() == 0 else (a @ b / (a.norm() * b.norm())).item()


# %% [markdown]
# ## Bug 1: the clipped loss that never learns
#
# Centered deltas, clipped loss, the lecture's other settings, 30 epochs, 20 seeds.

# %%
settings = dict(epochs=30, delta="centered", loss="clipped")
correct = train(task, seeds_of(**settings))
with bug(1):
    broken_run = train(task, seeds_of(**settings))
compare({"lab": correct, "broken": broken_run}, title="bug 1: mean reward / optimum, 95% band over seeds")
print("broken run, seed 0, first 12 steps")
print("  pg_loss   :", np.round(broken_run.step_metrics["pg_loss"][0, :12], 6))
print("  ratio_mean:", np.round(broken_run.step_metrics["ratio_mean"][0, :12], 6))
print("  entropy   :", np.round(broken_run.step_metrics["entropy"][0, :12], 6))

# %% [markdown]
# **Question.** The broken runs' reward never leaves its starting level, yet nothing crashed and
# the loss is a tidy 0. The entropy does not move either. What does a flat entropy tell you about
# the gradient? Which quantity in the clipped loss can make it vanish, and what must be true of
# $\log\pi_{\text{old}}$ for it not to?

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The old log-probs were not frozen.** The ratio was built from this step's log-probs on both
# sides, $\rho = \exp(\log\pi_\theta - \log\pi_\theta)$, without `.detach()`:
#
# ```python
# old_log_probs = log_probs                  # "old" taken from this very forward pass
# ratio = torch.exp(log_probs - old_log_probs)
# ```
#
# Its value is always exactly 1, so the loss *looks* normal ($-\mathrm{mean}(\delta)$, which is 0
# for centered deltas), and its gradient is exactly 0, because $\rho$ is a constant function of
# $\theta$ (claim 10). Nothing moves: not the policy, not the entropy.
#
# The check that catches it (claim 9): at $\theta = \theta_{\text{old}}$ the ratio losses must have
# the same gradient as the naive loss. The cell below runs that check on the lab's `ratios` and on
# the broken one.
# </details>

# %%
naive = loss_gradient("naive")
for name, number in (("lab's ratios", None), ("broken ratios", 1)):
    clipped = loss_gradient("clipped", number)
    print(f"{name:>13}: clipped gradient == naive gradient: {torch.allclose(clipped, naive, atol=1e-6)}"
          f" (norm {clipped.norm():.2f}; the naive one's {naive.norm():.2f})")
assert torch.allclose(loss_gradient("clipped"), naive, atol=1e-6) and loss_gradient("clipped", 1).norm() == 0

# %% [markdown]
# ## Bug 2: the clipped loss that never clips
#
# The same setting as bug 1, with another broken function, and a third curve: the lab's loop with
# the *naive* loss.

# %%
naive_run = train(task, seeds_of(epochs=30, delta="centered", loss="naive"))
with bug(2):
    broken_run = train(task, seeds_of(**settings))
compare({"lab, clipped": correct, "broken, clipped": broken_run, "lab, naive": naive_run},
        title="bug 2: mean reward / optimum, 95% band over seeds")
gap = max((broken_run.state[name] - naive_run.state[name]).abs().max().item() for name in naive_run.state)
print(f"largest parameter difference, broken clipped runs against the lab's naive runs: {gap:.1e}")
print("the lab's log of the broken runs (from the true old log-probs): tokens outside the clip band,",
      f"over all steps, {broken_run.step_metrics['clip_fraction'].mean():.1%};",
      f"the correct clipped runs: {correct.step_metrics['clip_fraction'].mean():.1%}")
assert gap == 0.0

# %% [markdown]
# **Question.** The broken runs learn, and their curve is hard to tell from the lab's (it lies
# exactly under the naive runs' curve, which hides it). But their final parameters are exactly
# those of the *naive* loss (the difference printed is 0): the clipping never acted, even though
# the lab's own log, computed from the true old log-probs, says tokens left the clip band. At
# $\theta = \theta_{\text{old}}$ the broken loss has exactly the right value and the right
# gradient (bug 1's check passes). What
# can the loss be comparing the current log-probs with, if its ratio is 1 on *every* step?

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The old log-probs were recomputed at every inner step**, detached this time:
#
# ```python
# for step in range(steps):
#     log_probs = compute_log_probs(...)
#     old_log_probs = log_probs.detach()         # should be computed once, before the steps
#     ratio = torch.exp(log_probs - old_log_probs)
# ```
#
# The ratio's value is 1 on every step, so the clip never fires, and its gradient is the gradient
# of $\log\pi_\theta$: the clipped (or unclipped) loss silently becomes the naive one. A loop that
# logs its clip fraction from these same tensors logs 0, which looks like a healthy, small update.
# Bug 1's check cannot catch it: at the first step it *is* the right loss.
#
# The check that catches it: $\log\pi_{\text{old}}$ must be computed once per batch, before the
# steps; on the steps after the first, the ratios must move away from 1 (the lab's tests assert
# it for every ratio loss), and with a small clip band some tokens must be clipped.
# </details>

# %%
old_log_probs = response_log_probs(policy(task.prompts), responses).detach()  # the sampling policy's
later = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(6))
later_log_probs = response_log_probs(later(task.prompts), responses)  # stands in for the policy after some steps
for name, ratio in (("lab", lab.core.losses.ratios), ("broken", broken(2))):
    rho = ratio(later_log_probs, old_log_probs)
    print(f"{name:>6}: ratios once the policy has moved: from {rho.min().item():.3g} to {rho.max().item():.3g}")
assert not (lab.core.losses.ratios(later_log_probs, old_log_probs) == 1).all()
assert (broken(2)(later_log_probs, old_log_probs) == 1).all()
at_old = cosine(loss_gradient("clipped", 2), naive)  # bug 1's check, at theta = theta_old
print(f"bug 1's check on the broken ratio: cosine with the naive gradient at theta_old = {at_old:.6f}")
assert at_old > 1 - 1e-6

# %% [markdown]
# ## Bug 3: the lecture's own ratio
#
# Centered deltas, the *unclipped* loss and the clipped one, 50 epochs, 20 seeds. The broken
# function is the one the lecture's script uses for both losses.

# %%
runs = {}
for loss_mode in ("unclipped", "clipped"):
    runs["lab, " + loss_mode] = train(task, seeds_of(epochs=50, delta="centered", loss=loss_mode))
    with bug(3):
        runs["broken, " + loss_mode] = train(task, seeds_of(epochs=50, delta="centered", loss=loss_mode))
compare(runs, metric="mean_reward", title="bug 3: mean reward, 95% band over seeds (optimum 5)")
for label, records in runs.items():
    final = records.final("mean_reward")
    print(f"{label:>17}: final mean reward {mean_interval(final[~records.diverged()]).text(2)}"
          f" ({records.diverged().sum()} of {len(final)} runs diverged: left out)")
cosines = {mode: cosine(loss_gradient(mode, 3), naive) for mode in ("unclipped", "clipped")}
print("broken: cosine of the gradient with the naive one at theta = theta_old:",
      {mode: round(value, 3) for mode, value in cosines.items()})
assert all(value < -0.9 for value in cosines.values())
for mode in ("unclipped", "clipped"):
    stayed = ~runs["broken, " + mode].diverged()  # the diverged runs' records stop where they diverged
    broken_curve = runs["broken, " + mode].epoch_metrics["mean_reward"][stayed].mean(axis=0)
    assert broken_curve[-1] < broken_curve[0] and runs["lab, " + mode].final("mean_reward").mean() > 3

# %% [markdown]
# **Question.** The broken runs' reward falls from its starting level and settles far below the
# lab's, with either loss. The loss at the first step of every epoch has the right value (the
# ratio is exactly 1 there).
# Yet at $\theta = \theta_{\text{old}}$ the gradient points almost exactly *against* the naive one.
# What function of $\log\pi_\theta$ equals 1 at $\theta_{\text{old}}$ and has a gradient of the
# wrong sign? Hint: what is the sign of a log-probability?

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The ratio is a quotient of log-probs, not of probabilities:**
#
# ```python
# ratio = log_probs / old_log_probs            # should be torch.exp(log_probs - old_log_probs)
# ```
#
# At $\theta_{\text{old}}$ it is exactly 1, like the real ratio, so the loss value is right. Its
# gradient is $\nabla \log\pi_\theta / \log\pi_{\text{old}}$: every token's gradient divided by its
# old log-prob, which is **negative**. So each token's push is reversed (the update descends $J$),
# and it is weighted by $1/|\log\pi_{\text{old}}|$: tokens that were likely get the largest weight.
# The tokens' weights differ, so the cosine is not exactly $-1$. The lecture's script has this line in
# its unclipped and clipped losses; its naive runs, which use no ratio, are unaffected.
#
# The check that catches it is bug 1's (claim 9): at $\theta = \theta_{\text{old}}$ the ratio
# loss's gradient must equal the naive one. Exercise 1 has you write it.
# </details>

# %% [markdown]
# ### Exercise 1: the check for the ratio
#
# Write `agreement_with_naive(ratio)`: the cosine between the gradient of the unclipped loss
# $-\mathrm{mean}(\rho\,\delta)$, built with `rho = ratio(log_probs, old_log_probs)`, and the
# gradient of the naive loss $-\mathrm{mean}(\log\pi_\theta\,\delta)$, both at
# $\theta = \theta_{\text{old}}$, on the batch of the setup cell (`policy`, `responses`, `deltas`,
# with `response_log_probs(policy(task.prompts), responses)` as the per-token log-probs; the
# deltas apply to every position). Return 0.0 when either gradient is zero.

# %% tags=["exercise"]
def agreement_with_naive(ratio):
    """Cosine between the unclipped loss's gradient (with this ratio function) and the naive one's."""
    return ...


# %% [markdown] tags=["solution"]
# <details><summary><b>Solution</b> (click to open)</summary>
#
# ```python
# def agreement_with_naive(ratio):
#     """Cosine between the unclipped loss's gradient (with this ratio function) and the naive one's."""
#     def gradient(loss_of):
#         policy.zero_grad()
#         log_probs = response_log_probs(policy(task.prompts), responses)  # float[batch trial pos]
#         loss_of(log_probs).backward()
#         return torch.cat([p.grad.flatten() for p in policy.parameters()])
#
#     token_deltas = deltas.unsqueeze(-1)  # float[batch trial 1]: the same delta at every position
#     with_ratio = gradient(lambda lp: -(ratio(lp, lp.detach()) * token_deltas).mean())
#     plain = gradient(lambda lp: -(lp * token_deltas).mean())
#     if with_ratio.norm() == 0 or plain.norm() == 0:
#         return 0.0
#     return (with_ratio @ plain / (with_ratio.norm() * plain.norm())).item()
# ```
# </details>

# %%
def agrees_with_the_lab(agreement_with_naive):
    lab_value = agreement_with_naive(lab.core.losses.ratios)
    assert abs(lab_value - 1) < 1e-5, f"the lab's ratio must agree with the naive loss (claim 9), got {lab_value:.6f}"
    assert agreement_with_naive(broken(1)) == 0.0, "bug 1's gradient is exactly zero"
    plain_ratio = lambda lp, old: torch.exp(lp - old)  # noqa: E731  (a ratio that leaves the old log-probs as given)
    assert abs(agreement_with_naive(plain_ratio) - 1) < 1e-5, (
        "exp(log_probs - old_log_probs) is a right ratio when its caller holds the old log-probs fixed, as the "
        "training loop does: does your check give it old log-probs that carry no gradient?")
    for number in (2, 3):
        mine, measured = agreement_with_naive(broken(number)), cosine(loss_gradient("unclipped", number), naive)
        assert abs(mine - measured) < 1e-5, f"bug {number}: yours {mine:.6f}, measured through the lab {measured:.6f}"


check("Exercise 1: the check for the ratio", agrees_with_the_lab, agreement_with_naive);

# %% [markdown]
# Bug 2 passes this check (cosine 1, printed under bug 2's check): at $\theta_{\text{old}}$ it is
# the right loss. Only a check on a later step, once the policy has moved, can see it.
#
# ## Bug 4: normalized deltas that learn less
#
# Normalized deltas (GRPO's advantage), naive loss, 50 epochs, 20 seeds.

# %%
settings = dict(epochs=50, delta="normalized")
correct = train(task, seeds_of(**settings))
with bug(4):
    broken_run = train(task, seeds_of(**settings))
compare({"lab": correct, "broken": broken_run}, title="bug 4: mean reward / optimum, 95% band over seeds")
largest = {name: max(np.abs(snapshot.deltas).max() for snapshot in records.samples)
           for name, records in (("lab", correct), ("broken", broken_run))}
for name, value in largest.items():
    print(f"{name:>6}: largest |delta| in the sample logs = {value:,.1f}")
less = seed_difference(broken_run.final("reward_fraction"), correct.final("reward_fraction"), SEEDS, SEEDS)  # paired
print(f"final reward / optimum, broken minus lab: {less.text(3)}")
assert largest["broken"] > 100_000 and largest["lab"] < 5 and less.high < 0

# %% [markdown]
# **Question.** The broken runs learn, but less on average (the difference of the final rewards,
# printed with its 95% interval, paired by seed, says how much less, and whether 20 seeds can tell), and
# somewhere in the sample logs a delta of more than 100,000 appears, although every reward lies
# between 0 and 5. A normalized delta is $(R_i - \bar R)/(\sigma + 10^{-5})$. When can it be that
# large, and over *which* responses must $\sigma$ be computed for that to be impossible? Hint: look
# at the axis names, `float[batch trial]`.

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The std was taken over the wrong axis**: over the prompts (`dim=-2`, batch) instead of within
# each prompt's group (`dim=-1`, trial):
#
# ```python
# centered = rewards - rewards.mean(dim=-1, keepdim=True)
# deltas = centered / (rewards.std(dim=-2, keepdim=True) + std_eps)   # dim=-2 is batch, not trial
# ```
#
# For each trial index it is the spread of the three *different prompts'* rewards, which has
# nothing to do with the group. Whenever the three prompts happen to give the same reward at one
# trial index that std is 0, and the delta is divided by $10^{-5}$: a delta of about $10^5$, and a
# huge step on that sample. Worse, a prompt's deltas now depend on the other prompts' rewards.
#
# The check that catches it: a group's deltas depend on that group's rewards only. Changing another
# prompt's rewards must leave them unchanged. Exercise 2 has you write it.
# </details>

# %%
rewards = torch.tensor([[3.0, 2.0, 1.0, 2.0], [5.0, 5.0, 4.0, 1.0], [0.0, 2.0, 2.0, 1.0]])  # float[batch trial]
other_prompts_changed = rewards.clone()
other_prompts_changed[1:] = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 0.0, 5.0]])
for name, fn in (("lab", compute_deltas), ("broken", broken(4))):
    first_group = fn(rewards, "normalized")[0]
    after = fn(other_prompts_changed, "normalized")[0]
    print(f"{name:>6}: prompt 0's deltas {first_group.numpy().round(3)} -> {after.numpy().round(3)}")
assert torch.equal(compute_deltas(rewards, "normalized")[0], compute_deltas(other_prompts_changed, "normalized")[0])
assert not torch.allclose(broken(4)(rewards, "normalized")[0], broken(4)(other_prompts_changed, "normalized")[0])

# %% [markdown]
# ### Exercise 2: the group check
#
# Write `own_group_only(delta_fn)`: True when, for `delta_fn(rewards, "normalized")` on random
# rewards `float[batch trial]` (say 4 prompts, 6 responses, integer rewards 0..5), every prompt's
# deltas stay the same when all *other* prompts' rewards are redrawn; False otherwise. Use a
# seeded `torch.Generator` and several draws: a single draw can miss.

# %% tags=["exercise"]
def own_group_only(delta_fn):
    """Whether each group's deltas depend on that group's rewards only."""
    return ...


# %% [markdown] tags=["solution"]
# <details><summary><b>Solution</b> (click to open)</summary>
#
# ```python
# def own_group_only(delta_fn):
#     """Whether each group's deltas depend on that group's rewards only."""
#     generator = torch.Generator().manual_seed(0)
#     draw = lambda: torch.randint(0, 6, (4, 6), generator=generator).float()  # float[batch trial]
#     for _ in range(20):
#         rewards = draw()
#         for prompt in range(rewards.shape[0]):
#             others = draw()
#             others[prompt] = rewards[prompt]  # only the other prompts' rewards change
#             if not torch.equal(delta_fn(rewards, "normalized")[prompt], delta_fn(others, "normalized")[prompt]):
#                 return False
#     return True
# ```
# </details>

# %%
def flags_the_broken_std(own_group_only):
    assert own_group_only(compute_deltas) is True, "the lab's compute_deltas keeps each group to itself"
    for mode in ("raw", "centered", "max", "loo"):  # the lab's other modes, through the same call
        fixed_mode = lambda rewards, _mode, mode=mode: compute_deltas(rewards, mode)  # noqa: E731
        assert own_group_only(fixed_mode) is True, f"the lab's {mode} deltas keep each group to itself"
    assert own_group_only(broken(4)) is False, (
        "bug 4's normalized deltas depend on the other prompts: does your check call delta_fn with the mode the bug "
        "is in, \"normalized\"? (its other modes are the lab's)")
    assert own_group_only(lambda rewards, mode: rewards - rewards.mean()) is False, "a batch-wide mean too"

    def leaks_into_later_prompts(rewards, mode):  # prompt 0's deltas are its own; every later prompt's are not
        shift = torch.zeros_like(rewards)
        shift[1:] = rewards[0].mean()
        return compute_deltas(rewards, mode) + shift

    assert own_group_only(leaks_into_later_prompts) is False, (
        "a function whose later prompts' deltas depend on another prompt's rewards must be flagged: "
        "does your check look at every prompt?")

    def leaks_sometimes(prompt):  # that prompt's deltas move only when the next prompt's rewards sum above 15
        def deltas(rewards, mode):
            follower = rewards[(prompt + 1) % len(rewards)]
            return compute_deltas(rewards, mode) + (follower.sum() > 15).float() * (
                torch.arange(len(rewards)) == prompt).float().unsqueeze(-1)
        return deltas

    for prompt in range(3):
        assert own_group_only(leaks_sometimes(prompt)) is False, (
            "a leak that only some reward draws set off must be flagged too: how many draws does your check try?")

    def leaks_from_the_previous_prompt(rewards, mode):  # every prompt but the first reads the one before it
        shift = torch.zeros_like(rewards)
        shift[1:] = 0.1 * rewards[:-1].sum(dim=-1, keepdim=True)
        return compute_deltas(rewards, mode) + shift

    assert own_group_only(leaks_from_the_previous_prompt) is False, (
        "a prompt's deltas that depend on the prompt before it must be flagged: does your check redraw *every* "
        "other prompt's rewards, not only the next one's?")


check("Exercise 2: the group check", flags_the_broken_std, own_group_only);

# %% [markdown]
# ## Bug 5: the reward goes *down*
#
# Centered deltas, naive loss, 50 epochs, 20 seeds.

# %%
settings = dict(epochs=50, delta="centered")
correct = train(task, seeds_of(**settings))
with bug(5):
    broken_run = train(task, seeds_of(**settings))
compare({"lab": correct, "broken": broken_run}, title="bug 5: mean reward / optimum, 95% band over seeds")
print("final reward / optimum: lab", mean_interval(correct.final("reward_fraction")).text(),
      " broken", mean_interval(broken_run.final("reward_fraction")).text())
fraction = broken_run.epoch_metrics["reward_fraction"]  # float[run epoch]
fell = int((fraction[:, -1] < fraction[:, 0]).sum())
print(f"broken runs that end below their first epoch's reward: {fell} of {len(fraction)}")
assert fell >= len(fraction) - 2

# %% [markdown]
# **Question.** Random updates would make the reward wander. This one falls steadily, and ends
# below where it started on nearly every seed. So the broken update is *systematically*
# anti-aligned with $\nabla J$. The deltas are still the right numbers: centered, summing to zero
# in each group. What can be wrong about them, if not their values? (Compare
# `broken_run.samples[0].rewards[0, 0]` with `broken_run.samples[0].deltas[0, 0]`: run 0, prompt 0,
# its group of 10.)

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The deltas are attached to the wrong responses**: shifted by one place within each group, as
# happens when one of the two tensors is reordered (sorted for a log, say) and the other is not:
#
# ```python
# deltas = compute_deltas(rewards, mode).roll(1, dims=-1)
# ```
#
# Response $i$ is updated with $\delta_{i-1} = R_{i-1} - \bar R$. Why downhill? Given $o_i$, the
# other rewards average $J$, so $\mathbb E[\delta_{i-1} \mid o_i] = J - (R_i + (G-1)J)/G = (J - R_i)/G$,
# and
#
# $$\mathbb E[\delta_{i-1}\,\nabla\log\pi(o_i)] = -\tfrac1G\,\mathbb E[R_i\,\nabla\log\pi(o_i)] = -\tfrac1G\,\nabla J .$$
#
# The only trace of response $i$ left in its delta is its own share of the mean, with a minus sign:
# the update is gradient *descent*, at $1/G$ of the speed. (With raw deltas the same shift would
# leave pure noise.)
#
# The check that catches it: in a group where one response is much better than the others, its
# delta must be the largest.
# </details>

# %%
group = torch.tensor([0.0, 0.0, 5.0, 0.0])  # response 2 is the good one
for name, fn in (("lab", compute_deltas), ("broken", broken(5))):
    d = fn(group, "centered")
    print(f"{name:>6}: deltas {d.numpy()}, largest at response {int(d.argmax())}")
assert int(compute_deltas(group, "centered").argmax()) == 2
assert int(broken(5)(group, "centered").argmax()) != 2

# %% [markdown]
# ## Bug 6: the more KL penalty, the more drift
#
# A KL penalty to a reference that is frozen at the start (`kl_period=0`), so the reference is the
# initial policy. With the lab, a larger $\beta$ should keep the final policy closer to it. We
# measure the drift *exactly* (every response enumerated, `lab.experiments.drift.drift_from_start`),
# independently of the loop's own log: $\mathrm{KL}(\pi_{\text{final}} \,\|\, \pi_{\text{initial}})$
# per prompt.

# %%
betas = (0.0, 0.1, 1.0)
kl_configs = [config for beta in betas for config in seeds_of(epochs=30, delta="centered", kl=beta, kl_period=0)]
correct = train(task, kl_configs)
with bug(6):
    broken_run = train(task, kl_configs)


def by_beta(values, statistic=np.mean):
    """float[run] (runs ordered beta-major, as built above) -> one statistic over seeds per beta."""
    return statistic(np.asarray(values).reshape(len(betas), len(SEEDS)), axis=1)


def drift_bars(runs, title):
    """Mean exact drift from the start per beta, one bar per loop; returns the drifts."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    width = 0.35
    drifts = {name: by_beta(drift_from_start(task, records)) for name, records in runs.items()}
    for shift, (name, drift) in zip((-width / 2, width / 2), drifts.items()):
        ax.bar(np.arange(len(betas)) + shift, drift, width, label=name)
    ax.set(xticks=range(len(betas)), xticklabels=[f"beta = {b:g}" for b in betas],
           ylabel="exact KL(final || initial)", title=title)
    ax.legend()
    return drifts


drifts = drift_bars({"lab": correct, "broken": broken_run}, "bug 6: drift from the reference after 30 epochs")
logged = {name: by_beta(records.final("kl"), np.median) for name, records in (("lab", correct), ("broken", broken_run))}
print("the loop's logged kl at the last step, median over seeds, per beta:")
for name, values in logged.items():
    print(f"   {name:7s}", np.round(values, 3))
print("exact drift from the start per beta, broken:", np.round(drifts["broken"], 3))
assert drifts["broken"][-1] > drifts["broken"][0]
assert (logged["broken"][1:] > logged["broken"][0]).all() and (logged["broken"][1:] > logged["lab"][1:]).all()

# %% [markdown]
# **Question.** With a penalty the broken loop drifts *further* from its start than without one (at
# $\beta = 1$ more than at $\beta = 0$, printed above), and the loop's logged `kl` (computed by the lab's
# own k3, outside the loss) says so too: at both $\beta > 0$ it is above the broken run without a
# penalty and above the lab's. It need not rise steadily with $\beta$ (compare the two printed values
# for $\beta > 0$): what gives the bug away is the direction, not a trend. Nothing is negative,
# nothing crashes.
# The penalty is meant to pull the policy back toward the reference. In which single place of the
# loss could it turn into a push away from it?

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The penalty's sign is flipped**:
#
# ```python
# loss = pg_loss - beta * kl
# ```
#
# Minimizing it *maximizes* the KL to the reference, so $\beta$ becomes a drift bonus that pushes
# the policy away (while its reward, with nothing holding it, may even look fine); how far it gets
# also depends on the rest of the loss, so the drift need not grow steadily with $\beta$. The log cannot give this one away by its sign: the metric is the lab's k3, computed
# apart from the loss, and k3 is never negative ($\rho - \log\rho - 1 \ge 0$, claim 6). What gives
# it away is the direction: a penalty that raises the KL instead of lowering it.
#
# The checks that catch it: the KL to the reference must fall as $\beta$ grows; and one gradient
# step on the penalty alone must bring the policy closer to the reference.
# </details>

# %%
print("exact drift from the reference per beta, lab:   ", np.round(drifts["lab"], 4))
print("exact drift from the reference per beta, broken:", np.round(drifts["broken"], 4))
assert drifts["lab"][-1] < drifts["lab"][0] < drifts["broken"][-1]

# %% [markdown]
# ## Bug 7: a KL that looks perfect
#
# The same experiment as bug 6, with another broken function.

# %%
with bug(7):
    broken_run = train(task, kl_configs)
drifts = drift_bars({"lab": correct, "broken": broken_run}, "bug 7: drift from the reference after 30 epochs")
print("the loop's logged kl at the last step, median over seeds, per beta:")
print("   lab   ", by_beta(correct.final("kl"), np.median))
print("   broken", by_beta(broken_run.final("kl"), np.median))
print("exact drift from the start per beta, lab:   ", np.round(drifts["lab"], 3))
print("exact drift from the start per beta, broken:", np.round(drifts["broken"], 3))
assert (drifts["broken"][1:] > 2 * drifts["lab"][1:]).all() and drifts["broken"][1] > 0.95 * drifts["broken"][0]

# %% [markdown]
# **Question.** The broken loop's logged KL is tiny at every $\beta$, far below the lab's: the
# penalty seems to work wonderfully. Yet the policy drifts from its starting point far more than
# the lab's at every $\beta > 0$ (at $\beta = 0.1$ as much as with no penalty at all). The logged
# number is a correct k3, of the right sign. So it measures the distance to *something*: to what?
# When is "the reference" evaluated in the loop, and what does it hold at that moment?

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The reference was not frozen**: `freeze` handed back the live policy instead of a copy:
#
# ```python
# def freeze(policy):
#     return policy                  # should be a deep copy with requires_grad off
# ```
#
# The loop evaluates the reference once per epoch, before the steps, so "the reference" is the
# policy as it was at the start of *each epoch*. The penalty then only resists movement within an
# epoch (a proximal term, like a trust region to $\pi_{\text{old}}$), the logged KL is the
# distance travelled in one epoch (small by construction), and nothing holds the policy near where
# it started. The lecture's script meant to make the copy with `model.clone()`, which crashes;
# forgetting the copy altogether does not crash, which is worse.
#
# The check that catches it: after an optimizer step on the policy, the reference's outputs must
# be unchanged. Exercise 3 has you write it.
# </details>

# %% [markdown]
# ### Exercise 3: the reference check
#
# Write `stays_put(make_reference)`: build the lecture's policy (`Policy(task.vocab_size, 3,
# task.response_length, generator=torch.Generator().manual_seed(5))`), take its reference with
# `make_reference(policy)`, take one Adam step on the policy (any loss that moves it, for example
# minus the mean log-prob of a fixed response), and return whether the reference's logits on
# `task.prompts` are exactly what they were before the step.

# %% tags=["exercise"]
def stays_put(make_reference):
    """Whether a reference made by `make_reference(policy)` is unmoved by an optimizer step on the policy."""
    return ...


# %% [markdown] tags=["solution"]
# <details><summary><b>Solution</b> (click to open)</summary>
#
# ```python
# def stays_put(make_reference):
#     """Whether a reference made by `make_reference(policy)` is unmoved by an optimizer step on the policy."""
#     policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))
#     reference = make_reference(policy)
#     before = reference(task.prompts).detach().clone()
#     optimizer = torch.optim.Adam(policy.parameters(), lr=0.1)
#     target = torch.zeros(3, 1, 3, dtype=torch.long)  # the response [0, 0, 0] for every prompt
#     optimizer.zero_grad()
#     (-response_log_probs(policy(task.prompts), target).mean()).backward()
#     optimizer.step()
#     return torch.equal(reference(task.prompts), before)
# ```
# </details>

# %%
def flags_the_live_reference(stays_put):
    assert stays_put(freeze) is True, "the lab's freeze makes a copy that does not move"
    assert stays_put(broken(7)) is False, "bug 7's reference is the policy itself"
    assert stays_put(copy.copy) is False, (
        "a shallow copy is another object that shares the policy's parameters, so it moves with them: "
        "does your check take an optimizer step and compare outputs?")
    assert stays_put(lambda policy: Policy(task.vocab_size, 3, task.response_length,
                                           generator=torch.Generator().manual_seed(9))) is True, (
        "a reference that is another policy altogether never moves with this one: does your check compare the "
        "reference with itself before and after the step?")

    def shares_the_embedding(policy):  # a copy whose embedding is still the policy's own tensor
        reference = copy.deepcopy(policy)
        reference.embedding = policy.embedding
        return reference

    assert stays_put(shares_the_embedding) is False, (
        "a copy that still shares one of the policy's tensors moves with it, though it never equals it: does your "
        "check compare the reference with itself before the step, rather than with the stepped policy?")


check("Exercise 3: the reference check", flags_the_live_reference, stays_put);

# %% [markdown]
# ## Not every oddity is a bug: the batch-wide baseline
#
# A last case, to show why the checks matter more than intuition. Suppose the centered deltas
# subtracted the mean of the *whole batch* (all prompts, all responses) instead of each prompt's
# group mean. It looks wrong: a prompt whose group all got the same reward is still updated, and it
# fails exercise 2's check. But the batch mean is a legitimate baseline. Apart from response $i$'s
# own $1/(BG)$ share it does not depend on $o_i$, so by the argument of lesson 2 its expected update
# is $(1 - \tfrac{1}{BG})\nabla J$: the right direction. What it loses is variance reduction when the
# prompts differ in difficulty, since one shared baseline cannot suit them all. On the lecture's
# three prompts, which are about equally hard (their first samples' mean rewards are printed first),
# the data cannot tell it from the group mean:

# %%
def deltas_batch_mean(rewards, mode, std_eps=1e-5, unbiased=True):
    return rewards - rewards.mean(dim=(-2, -1), keepdim=True)  # one baseline for the whole batch


settings = dict(epochs=50, delta="centered")
correct = train(task, seeds_of(**settings))
first = np.asarray(correct.samples[0].rewards).mean(axis=(0, 2))  # float[batch]: over seeds and the group
print("mean reward of each prompt's first samples (20 seeds):", [round(float(x), 2) for x in first])
with mock.patch.object(scoring, "compute_deltas", deltas_batch_mean):
    batch_baseline = train(task, seeds_of(**settings))
print("final reward / optimum over 20 seeds: group mean", mean_interval(correct.final("reward_fraction")).text(),
      " batch mean", mean_interval(batch_baseline.final("reward_fraction")).text())
difference = seed_difference(batch_baseline.final("reward_fraction"), correct.final("reward_fraction"), SEEDS, SEEDS)
print(f"batch mean minus group mean: {difference.text(3)}")
assert not difference.excludes(0.0)

# %% [markdown]
# The difference's interval contains 0: 20 seeds cannot tell the two apart (which is not the same
# as showing they are equal). A different estimator, not a broken one. Whether it matters on your
# prompts is an experiment, and lesson 4 shows how to run it.
#
# ## What to take away
#
# | bug | symptom in the lab's records | the check that catches it |
# | --- | --- | --- |
# | old log-probs not frozen | reward and entropy flat, loss exactly 0, ratio exactly 1 | ratio loss's gradient at $\theta_{\text{old}}$ equals the naive one (claim 9) |
# | old log-probs recomputed every step | the clipped run *is* the naive run; a home-made clip-fraction log reads 0 | ratios move away from 1 after the first step |
# | ratio of log-probs (the lecture's script) | reward falls from the start and settles far below the lab's | ratio loss's gradient at $\theta_{\text{old}}$ equals the naive one (claim 9) |
# | std over the wrong axis | huge deltas in the sample log, weaker learning | a group's deltas depend on its own rewards only |
# | deltas shifted off their responses | reward falls steadily | the best response of a group gets the largest delta |
# | KL penalty sign flipped | more drift with a penalty than without | KL falls as $\beta$ grows; a penalty step reduces the KL |
# | reference not frozen | logged KL tiny, drift from the start far above the lab's | the reference does not move when the policy does |
#
# Each check is a few lines. The lab's test suite holds them as proofs, so none of these bugs can
# come back unnoticed.
