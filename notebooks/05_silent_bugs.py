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
# # Lesson 5: Silent bugs
#
# Most bugs in reinforcement-learning code raise no error. The loss prints numbers, the curves move,
# and the run is simply worse than it should be, or quietly optimizes something else. Spinning Up's
# exercises call them *silent bugs*; the only defence is to know what each part of the algorithm
# must do and to check it.
#
# Each exercise below trains with the lab's own loop (`lab.train.train`) in which **one** function
# has been swapped for a broken one, for the length of a `with` block. The lab itself is never
# edited; the broken versions are built in the next cell by wrapping or replacing lab functions.
#
# How to use this notebook:
#
# 1. **Do not read the workshop cell** (its source is hidden in Jupyter; if you see it, scroll past).
# 2. For each bug, run the *symptom* cell and look at what the lab's own records say.
# 3. Answer the *question*: what is wrong, where, and which check would have caught it?
# 4. Then open the *solution* (collapsed), which names the bug, explains the symptom, and runs a
#    check that fails on the broken function and passes on the lab's.

# %%
import importlib
import inspect
from contextlib import contextmanager
from unittest import mock

import matplotlib.pyplot as plt
import numpy as np
import torch

import lab.losses
from lab import Policy, TrainConfig, compute_deltas, compute_loss, train
from lab.exact import sequence_kl
from lab.intervals import mean_interval
from lab.kl import freeze, k3, kl_estimate
from lab.policy import policy_from_state
from lab.rollout import response_log_probs, sample_responses
from tasks.sorting import make_task

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
np.set_printoptions(precision=3, suppress=True)
loop = importlib.import_module("lab.train")  # the loop's module (`lab.train` is also the function's name)
task = make_task()  # the lecture's prompts [[1,0,2], [3,2,4], [1,2,3]], vocabulary 0..4
SEEDS = range(20)


def seeds_of(**settings):
    """The same setting for every seed in SEEDS (all of them train as one batched computation)."""
    return [TrainConfig(seed=seed, **settings) for seed in SEEDS]


def plot_mean_with_band(ax, values, label):
    """Mean over runs of float[run epoch] with its 95% t-interval (lab.intervals) as a band."""
    intervals = [mean_interval(column) for column in values.T]
    epochs = np.arange(values.shape[1])
    ax.plot(epochs, [i.estimate for i in intervals], label=label)
    ax.fill_between(epochs, [i.low for i in intervals], [i.high for i in intervals], alpha=0.25)


def compare(correct, broken, metric="reward_fraction", title=""):
    """Curves of one epoch metric, correct loop against broken loop."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    plot_mean_with_band(ax, correct.epoch_metrics[metric], "lab")
    plot_mean_with_band(ax, broken.epoch_metrics[metric], "broken")
    ax.set(xlabel="epoch", ylabel=metric.replace("_", " "), title=title)
    ax.grid(alpha=0.3)
    ax.legend()


def drift_from_start(records):
    """Exact KL(pi_final || pi_initial) of whole responses, averaged over prompts: float[run].

    Run r started from Policy(..., generator seeded with its seed), exactly as `train` builds it.
    """
    drifts = []
    for run, config in enumerate(records.configs):
        start = Policy(task.vocab_size, 3, task.response_length, config.dim,
                       generator=torch.Generator().manual_seed(config.seed))
        final = policy_from_state(records.state, run)
        with torch.no_grad():
            drifts.append(sequence_kl(final, start, task.prompts).mean().item())
    return np.array(drifts)


# %% jupyter={"source_hidden": true}
# The workshop: five broken variants of lab functions. Spoilers: read only after the exercises.

def ratios_from_this_pass(log_probs, old_log_probs):
    old_log_probs = log_probs  # "old" taken from this step's forward pass, and not detached
    return torch.exp(log_probs - old_log_probs)


def deltas_std_over_prompts(rewards, mode, std_eps=1e-5, unbiased=True):
    centered = rewards - rewards.mean(dim=-1, keepdim=True)
    return centered / (rewards.std(dim=-2, keepdim=True) + std_eps)  # dim=-2 is batch, not trial


def deltas_shifted_by_one(rewards, mode, std_eps=1e-5, unbiased=True):
    # the deltas were reordered (say, sorted for a log) and the responses were not
    return compute_deltas(rewards, mode, std_eps, unbiased).roll(1, dims=-1)


def kl_with_its_sign_flipped(log_probs, ref_log_probs, estimator="k3"):
    return -kl_estimate(log_probs, ref_log_probs, estimator)  # as in `loss = pg_loss - beta * kl`


def reference_without_a_copy(policy):
    return policy  # "freeze" hands back the live policy itself


BUGS = {
    1: (lab.losses, "ratios", ratios_from_this_pass),
    2: (loop, "compute_deltas", deltas_std_over_prompts),
    3: (loop, "compute_deltas", deltas_shifted_by_one),
    4: (loop, "kl_estimate", kl_with_its_sign_flipped),
    5: (loop, "freeze", reference_without_a_copy),
}


@contextmanager
def bug(number):
    """Inside this block the loop runs with bug `number` in place of the lab's function."""
    with mock.patch.object(*BUGS[number]):
        yield


# %% [markdown]
# ## Bug 1: the clipped loss that never learns
#
# Centered deltas, clipped loss, the lecture's other settings, 30 epochs, 20 seeds.

# %%
settings = dict(epochs=30, delta="centered", loss="clipped")
correct = train(task, seeds_of(**settings))
with bug(1):
    broken = train(task, seeds_of(**settings))
compare(correct, broken, title="bug 1: mean reward / optimum, 95% band over seeds")
print("broken run, seed 0, first 12 steps")
print("  pg_loss   :", np.round(broken.step_metrics["pg_loss"][0, :12], 6))
print("  ratio_mean:", np.round(broken.step_metrics["ratio_mean"][0, :12], 6))
print("  entropy   :", np.round(broken.step_metrics["entropy"][0, :12], 6))

# %% [markdown]
# **Question.** The broken runs' reward never leaves its starting level, yet nothing crashed and
# the loss is a tidy 0. The entropy does not move either. What does a flat entropy tell you about
# the gradient? Which quantity in the clipped loss can make it vanish, and what must be true of
# $\log\pi_{\text{old}}$ for it not to?

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The old log-probs were not frozen.** The ratio was built from this step's log-probs on both
# sides, $\rho = \exp(\log\pi_\theta - \log\pi_\theta)$, without `.detach()`. Its value is always
# exactly 1, so the loss *looks* normal ($-\mathrm{mean}(\delta)$, which is 0 for centered deltas),
# and its gradient is exactly 0, because $\rho$ is a constant function of $\theta$ (SPEC claim 10).
# Nothing moves: not the policy, not the entropy.
#
# The check that catches it (claim 9): at $\theta = \theta_{\text{old}}$ the ratio losses must have
# the same gradient as the naive loss. The cell below runs that check on the lab's `ratios` and on
# the broken one.
# </details>

# %%
print(inspect.getsource(ratios_from_this_pass))
policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))
responses = sample_responses(policy(task.prompts), 10, torch.Generator().manual_seed(0))
deltas = compute_deltas(task.reward_fn("inclusion-ordering")(task.prompts, responses), "centered")


def loss_gradient(mode):
    policy.zero_grad()
    log_probs = response_log_probs(policy(task.prompts), responses)
    compute_loss(log_probs, deltas, mode, old_log_probs=log_probs.detach()).backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters()])


naive = loss_gradient("naive")
lab_clipped = loss_gradient("clipped")
with bug(1):
    broken_clipped = loss_gradient("clipped")
print("lab's ratios:  clipped gradient == naive gradient:", torch.allclose(lab_clipped, naive, atol=1e-6))
print("broken ratios: clipped gradient == naive gradient:", torch.allclose(broken_clipped, naive, atol=1e-6),
      f"(its norm is {broken_clipped.norm():.1f})")
assert torch.allclose(lab_clipped, naive, atol=1e-6) and broken_clipped.norm() == 0

# %% [markdown]
# ## Bug 2: normalized deltas that learn less
#
# Normalized deltas (GRPO's advantage), naive loss, 50 epochs, 20 seeds.

# %%
settings = dict(epochs=50, delta="normalized")
correct = train(task, seeds_of(**settings))
with bug(2):
    broken = train(task, seeds_of(**settings))
compare(correct, broken, title="bug 2: mean reward / optimum, 95% band over seeds")
for name, records in (("lab", correct), ("broken", broken)):
    largest = max(np.abs(snapshot.deltas).max() for snapshot in records.samples)
    print(f"{name:>6}: largest |delta| in the sample logs = {largest:,.1f}")

# %% [markdown]
# **Question.** The broken runs learn, but less on average, and somewhere in the sample logs a delta of tens of
# thousands appears, although every reward lies between 0 and 5. A normalized delta is
# $(R_i - \bar R)/(\sigma + 10^{-5})$. When can it be that large, and over *which* responses must
# $\sigma$ be computed for that to be impossible? Hint: look at the axis names,
# `float[batch trial]`.

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The std was taken over the wrong axis**: over the prompts (`dim=-2`, batch) instead of within
# each prompt's group (`dim=-1`, trial). For each trial index it is the spread of the three
# *different prompts'* rewards, which has nothing to do with the group. Whenever the three prompts
# happen to give the same reward at one trial index that std is 0, and the delta is divided by
# $10^{-5}$: a delta of about $10^5$, and a huge step on that sample. Worse, a prompt's deltas now
# depend on the other prompts' rewards.
#
# The check that catches it: a group's deltas depend on that group's rewards only. Changing another
# prompt's rewards must leave them unchanged (and scaling a group's rewards must not change its
# normalized deltas, claim 13).
# </details>

# %%
print(inspect.getsource(deltas_std_over_prompts))
rewards = torch.tensor([[3.0, 2.0, 1.0, 2.0], [5.0, 5.0, 4.0, 1.0], [0.0, 2.0, 2.0, 1.0]])  # float[batch trial]
other_prompts_changed = rewards.clone()
other_prompts_changed[1:] = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 0.0, 5.0]])
for name, fn in (("lab", compute_deltas), ("broken", deltas_std_over_prompts)):
    first_group = fn(rewards, "normalized")[0]
    after = fn(other_prompts_changed, "normalized")[0]
    print(f"{name:>6}: prompt 0's deltas {first_group.numpy().round(3)} -> {after.numpy().round(3)}")
assert torch.equal(compute_deltas(rewards, "normalized")[0], compute_deltas(other_prompts_changed, "normalized")[0])
assert not torch.allclose(deltas_std_over_prompts(rewards, "normalized")[0],
                          deltas_std_over_prompts(other_prompts_changed, "normalized")[0])

# %% [markdown]
# ## Bug 3: the reward goes *down*
#
# Centered deltas, naive loss, 50 epochs, 20 seeds.

# %%
settings = dict(epochs=50, delta="centered")
correct = train(task, seeds_of(**settings))
with bug(3):
    broken = train(task, seeds_of(**settings))
compare(correct, broken, title="bug 3: mean reward / optimum, 95% band over seeds")
print("final reward / optimum: lab", mean_interval(correct.final("reward_fraction")).text(),
      " broken", mean_interval(broken.final("reward_fraction")).text())

# %% [markdown]
# **Question.** Random updates would make the reward wander. This one falls steadily, on every
# seed. So the broken update is *systematically* anti-aligned with $\nabla J$. The deltas are still
# the right numbers: centered, summing to zero in each group. What can be wrong about them, if not
# their values? (Compare `broken.samples[0].rewards[0, 0]` with `broken.samples[0].deltas[0, 0]`:
# run 0, prompt 0, its group of 10.)

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The deltas are attached to the wrong responses**: shifted by one place within each group, as
# happens when one of the two tensors is reordered (sorted for a log, say) and the other is not.
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
print(inspect.getsource(deltas_shifted_by_one))
group = torch.tensor([0.0, 0.0, 5.0, 0.0])  # response 2 is the good one
for name, fn in (("lab", compute_deltas), ("broken", deltas_shifted_by_one)):
    d = fn(group, "centered")
    print(f"{name:>6}: deltas {d.numpy()}, largest at response {int(d.argmax())}")
assert int(compute_deltas(group, "centered").argmax()) == 2
assert int(deltas_shifted_by_one(group, "centered").argmax()) != 2

# %% [markdown]
# ## Bug 4: the more KL penalty, the more drift
#
# A KL penalty to a reference that is frozen at the start (`kl_period=0`), so the reference is the
# initial policy. With the lab, a larger $\beta$ should keep the final policy closer to it. We
# measure the drift *exactly* (every response enumerated with `lab.exact`), independently of the
# loop's own log: $\mathrm{KL}(\pi_{\text{final}} \,\|\, \pi_{\text{initial}})$ per prompt.

# %%
betas = (0.0, 0.1, 1.0)
kl_configs = [config for beta in betas for config in seeds_of(epochs=30, delta="centered", kl=beta, kl_period=0)]
correct = train(task, kl_configs)
with bug(4):
    broken = train(task, kl_configs)


def by_beta(values, statistic=np.mean):
    """float[run] (runs ordered beta-major, as built above) -> one statistic over seeds per beta."""
    return statistic(np.asarray(values).reshape(len(betas), len(SEEDS)), axis=1)


fig, ax = plt.subplots(figsize=(6, 3.2))
width = 0.35
for shift, (name, records) in zip((-width / 2, width / 2), (("lab", correct), ("broken", broken))):
    ax.bar(np.arange(len(betas)) + shift, by_beta(drift_from_start(records)), width, label=name)
ax.set(xticks=range(len(betas)), xticklabels=[f"beta = {b:g}" for b in betas],
       ylabel="exact KL(final || initial)", title="bug 4: drift from the reference after 30 epochs")
ax.legend()
print("the loop's logged kl at the last step, median over seeds, per beta:")
print("   lab   ", by_beta(correct.final("kl"), np.median))
print("   broken", by_beta(broken.final("kl"), np.median))

# %% [markdown]
# **Question.** The broken loop drifts *further* the larger $\beta$ is, and the loop's logged `kl`
# (computed by the lab's own k3, outside the loss) agrees: nothing is negative, nothing crashes.
# The penalty is meant to pull the policy back toward the reference. In which single place of the
# loss could it turn into a push away from it?

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The penalty's sign is flipped**: the loss is effectively `pg_loss - beta * kl`. Minimizing it
# *maximizes* the KL to the reference, so $\beta$ becomes a drift bonus, and the larger it is the
# faster the policy runs away (while its reward, with nothing holding it, may even look fine).
# The log cannot give this one away by its sign: the metric is the lab's k3, computed apart from
# the loss, and k3 is never negative ($\rho - \log\rho - 1 \ge 0$, claim 6). What gives it away
# is the direction: more $\beta$, more KL.
#
# The checks that catch it: the KL to the reference must fall as $\beta$ grows; and one gradient
# step on the penalty alone must bring the policy closer to the reference.
# </details>

# %%
print(inspect.getsource(kl_with_its_sign_flipped))
lab_drift, broken_drift = by_beta(drift_from_start(correct)), by_beta(drift_from_start(broken))
print("exact drift from the reference per beta, lab:   ", np.round(lab_drift, 4))
print("exact drift from the reference per beta, broken:", np.round(broken_drift, 4))
assert lab_drift[-1] < lab_drift[0] < broken_drift[-1]

# %% [markdown]
# ## Bug 5: a KL that looks perfect
#
# The same experiment as bug 4, with another broken function.

# %%
with bug(5):
    broken = train(task, kl_configs)
fig, ax = plt.subplots(figsize=(6, 3.2))
for shift, (name, records) in zip((-width / 2, width / 2), (("lab", correct), ("broken", broken))):
    ax.bar(np.arange(len(betas)) + shift, by_beta(drift_from_start(records)), width, label=name)
ax.set(xticks=range(len(betas)), xticklabels=[f"beta = {b:g}" for b in betas],
       ylabel="exact KL(final || initial)", title="bug 5: drift from the reference after 30 epochs")
ax.legend()
print("the loop's logged kl at the last step, median over seeds, per beta:")
print("   lab   ", by_beta(correct.final("kl"), np.median))
print("   broken", by_beta(broken.final("kl"), np.median))

# %% [markdown]
# **Question.** The broken loop's logged KL is tiny at every $\beta$, far below the lab's: the
# penalty seems to work wonderfully. Yet the policy drifts from its starting point nearly as much
# as with no penalty at $\beta = 0.1$. The logged number is a correct k3, of the right sign. So it
# measures the distance to *something*: to what? When is "the reference" evaluated in the loop,
# and what does it hold at that moment?

# %% [markdown]
# <details><summary><b>Solution (click to open)</b></summary>
#
# **The reference was not frozen**: `freeze` handed back the live policy instead of a copy. The
# loop evaluates the reference once per epoch, before the steps, so "the reference" is the policy
# as it was at the start of *each epoch*. The penalty then only resists movement within an
# epoch (a proximal term, like a trust region to $\pi_{\text{old}}$), the logged KL is the
# distance travelled in one epoch (small by construction), and nothing holds the policy near where
# it started. The lecture's script meant to make the copy with `model.clone()`, which crashes;
# forgetting the copy altogether does not crash, which is worse.
#
# The check that catches it: after an optimizer step on the policy, the reference's outputs must
# be unchanged.
# </details>

# %%
print(inspect.getsource(reference_without_a_copy))
for name, make_reference in (("lab freeze", freeze), ("broken", reference_without_a_copy)):
    policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))
    reference = make_reference(policy)
    before = reference(task.prompts).detach().clone()
    with torch.no_grad():
        policy.embedding.add_(0.1)  # stands in for an optimizer step
    moved = not torch.equal(reference(task.prompts), before)
    print(f"{name:>10}: the reference moved with the policy: {moved}")
    assert moved == (make_reference is reference_without_a_copy)

# %% [markdown]
# ## Not every oddity is a bug: the batch-wide baseline
#
# A last case, to show why the checks matter more than intuition. Suppose the centered deltas
# subtracted the mean of the *whole batch* (all prompts, all responses) instead of each prompt's
# group mean. It looks wrong: a prompt whose group all got the same reward is still updated. But
# the batch mean is a legitimate baseline. Apart from response $i$'s own $1/(BG)$ share it does not
# depend on $o_i$, so by the argument of lesson 2 its expected update is
# $(1 - \tfrac{1}{BG})\nabla J$: the right direction. What it loses is variance reduction when the
# prompts differ in difficulty, since one shared baseline cannot suit them all. On the lecture's
# three prompts, which are about equally hard, the data cannot tell it from the group mean:

# %%
def deltas_batch_mean(rewards, mode, std_eps=1e-5, unbiased=True):
    return rewards - rewards.mean(dim=(-2, -1), keepdim=True)  # one baseline for the whole batch


settings = dict(epochs=50, delta="centered")
correct = train(task, seeds_of(**settings))
with mock.patch.object(loop, "compute_deltas", deltas_batch_mean):
    batch_baseline = train(task, seeds_of(**settings))
print("final reward / optimum over 20 seeds: group mean", mean_interval(correct.final("reward_fraction")).text(),
      " batch mean", mean_interval(batch_baseline.final("reward_fraction")).text())

# %% [markdown]
# The two intervals overlap: a different estimator, not a broken one. Whether it matters on your
# prompts is an experiment, and lesson 4 shows how to run it.
#
# ## What to take away
#
# | bug | symptom in the lab's records | the check that catches it |
# | --- | --- | --- |
# | old log-probs not frozen | reward and entropy flat, loss exactly 0, ratio exactly 1 | ratio loss's gradient at $\theta_{\text{old}}$ equals the naive one (claim 9) |
# | std over the wrong axis | huge deltas in the sample log, weaker learning | a group's deltas depend on its own rewards only (claim 13) |
# | deltas shifted off their responses | reward falls steadily | the best response of a group gets the largest delta |
# | KL penalty sign flipped | drift grows with $\beta$ | KL falls as $\beta$ grows; a penalty step reduces the KL |
# | reference not frozen | logged KL tiny, drift from the start barely reduced | the reference does not move when the policy does |
#
# Each check is a few lines. The lab's test suite holds them as proofs, so none of these bugs can
# come back unnoticed.
