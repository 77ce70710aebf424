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
# # Lesson 4: Sorting experiments
#
# The lecture trains its toy policy to sort three lists and draws its conclusions from one seed
# per setting: raw rewards do not learn well, centered rewards help but get stuck, normalizing
# by the std makes little difference. This lesson reruns those experiments the way a lab should:
#
# 1. one run with the lecture's settings, read as the lecture reads it;
# 2. twenty seeds per setting, trained together as one batched computation (`lab.sweep`), with
#    95% bands, so that a difference between settings can be told from seed-to-seed noise;
# 3. a look inside the runs that get stuck: which responses they settle on, whether those are
#    local optima of the reward, and why the gradient cannot get them out;
# 4. random training prompts, evaluated on held-out prompts never trained on.

# %%
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import torch

from lab import TrainConfig, train
from lab.diagnose import objective_summary
from lab.exact import position_log_probs
from lab.figures import draw_curves, mean_band
from lab.intervals import difference_interval, mean_interval
from lab.policy import Policy, policy_from_state
from lab.rollout import response_log_probs
from lab.sweep import build_grid, optimal_everywhere, run_sweep, summarise, summary_table
from tasks import neighbour_rewards
from tasks.sorting import make_task, task_from_spec


torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
np.set_printoptions(precision=3, suppress=True)
task = make_task()  # the lecture's prompts [[1,0,2], [3,2,4], [1,2,3]], vocabulary 0..4

# %% [markdown]
# ## 1. One run, the lecture's way
#
# `TrainConfig()` holds the lecture's settings: 100 epochs of 10 optimizer steps, $G = 10$
# responses per prompt, Adam at $10^{-3}$, seed 5, the inclusion-plus-ordering reward (maximum 5),
# raw rewards as deltas, the naive loss.

# %%
config = TrainConfig()
records = train(task, config)
steps = np.arange(records.step_metrics["loss"].shape[1])
epoch_steps = np.arange(config.epochs) * config.steps
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
axes[0].plot(steps, records.step_metrics["loss"][0], lw=0.8)
axes[0].set(xlabel="step", ylabel="train loss", title="loss (not a measure of progress)")
axes[1].plot(epoch_steps, records.epoch_metrics["mean_reward"][0], label="mean reward of the samples")
axes[1].plot(epoch_steps, records.epoch_metrics["greedy_reward"][0], ls="--", label="greedy (argmax) response")
axes[1].axhline(records.optimum[0].mean(), color="k", ls=":", lw=0.8, label="optimum")
axes[1].set(xlabel="step", ylabel="reward", title=f"seed {config.seed}: {config.delta.value} deltas, naive loss")
axes[1].legend(fontsize=8)
for ax in axes:
    ax.grid(alpha=0.3)
fig.tight_layout()
for prompt, greedy in zip(task.prompts.tolist(), records.greedy_responses[0].tolist()):
    print(f"prompt {prompt}  ->  greedy response {greedy}   (sorted: {sorted(prompt)})")

# %% [markdown]
# The loss of the naive surrogate is $-\mathrm{mean}(\log\pi \cdot \delta)$ on *this epoch's*
# samples: a new batch every 10 steps, with raw deltas that are all positive. Its level says how
# likely the current samples are, not how good the policy is; only the reward curves measure
# progress (Spinning Up: "the loss function means nothing"). One seed gives one curve. Is its
# final level typical, lucky or unlucky? One run cannot say.
#
# ## 2. Twenty seeds per setting
#
# `build_grid` crosses the settings with seeds $0..19$; `run_sweep` trains all 120 runs (three
# delta modes, two rewards, twenty seeds) as one batched computation, and each run is exactly the
# run it would be alone. `summarise` gives per setting the final mean reward with a Student-t 95%
# interval over seeds, and the fraction of runs whose greedy response is optimal on every prompt
# with a Wilson 95% interval.

# %%
names = ["delta", "reward"]
grid = {"delta": ["raw", "centered", "normalized"], "reward": ["inclusion-ordering", "distance"]}
sweep = run_sweep(task, build_grid(TrainConfig(), grid, seeds=20))
print(summary_table(summarise(sweep, names), names))
print(f"\n{sweep.num_runs} runs trained in {sweep.seconds:.1f} s")

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for ax, reward in zip(axes, grid["reward"]):
    runs = [r for r, c in enumerate(sweep.configs) if c.reward == reward]
    draw_curves(ax, sweep, ["delta"], runs=runs, highlight_seed=5)
    ax.set_title(f"{reward}: mean reward, 95% band over 20 seeds (thin: seed 5)", fontsize=9)
fig.tight_layout()


def final_of(delta, reward, metric="mean_reward"):
    runs = [r for r, c in enumerate(sweep.configs) if c.delta.value == delta and c.reward == reward]
    return sweep.final(metric)[runs]


def verdict(interval):
    return "a real difference" if interval.excludes(0.0) else "cannot tell apart"


differences = {}
for reward in grid["reward"]:
    differences[reward, "centered - raw"] = difference_interval(final_of("centered", reward), final_of("raw", reward))
    differences[reward, "normalized - centered"] = difference_interval(final_of("normalized", reward),
                                                                       final_of("centered", reward))
for (reward, label), interval in differences.items():
    print(f"{reward:>18}: final reward, {label:<21} = {interval.text(2)}  -> {verdict(interval)}")
assert differences["inclusion-ordering", "centered - raw"].excludes(0.0)
assert not differences["inclusion-ordering", "normalized - centered"].excludes(0.0)

# %% [markdown]
# How to read this (the intervals are over seeds, at the last epoch):
#
# - **Raw versus centered.** An interval for the difference (Welch's t, `difference_interval`)
#   that excludes 0 says the gap is not seed noise. On the lecture's reward, inclusion-ordering,
#   centering helps, as the lecture says. On the distance reward the gap goes the same way, but
#   check whether 20 seeds are enough to call it.
# - **Normalized versus centered.** An interval that straddles 0 says that 20 seeds cannot tell
#   them apart: "makes little difference" is what the data support, and no more than that.
# - **The thin seed-5 line** often sits far from its band. A conclusion drawn from it alone could
#   have gone either way.
# - **Almost no run is optimal on every prompt**, whatever the setting (the last column of the
#   table). Runs do not fail to learn; they stop learning. Section 3 looks at where they stop.
#
# ## 3. Inside the stuck runs
#
# Take the centered runs of both rewards. For each prompt, which greedy responses do the 20
# runs end on?

# %%
for reward in grid["reward"]:
    runs = [r for r, c in enumerate(sweep.configs) if c.delta.value == "centered" and c.reward == reward]
    optimal = optimal_everywhere(sweep)[runs]
    print(f"{reward}: {optimal.sum()} of {len(runs)} runs optimal on every prompt")
    score = task.reward_fn(reward)
    for b, prompt in enumerate(task.prompts.tolist()):
        endings = Counter(tuple(sweep.greedy_responses[r, b].tolist()) for r in runs)
        shown = ", ".join(
            f"{list(y)}: {n} (R={score(task.prompts[b:b + 1], torch.tensor([[y]])).item():g})"
            for y, n in endings.most_common(4))
        print(f"   prompt {prompt} (sorted {sorted(prompt)}): {shown}")

# %% [markdown]
# ### Are these local optima of the reward?
#
# Call a response a **local optimum** of a reward when no change of a *single* token improves it.
# `tasks.neighbour_rewards` scores every single-token change of a response; we sort each run's
# non-optimal greedy responses into three kinds: *strict* local optima (every change is worse),
# *flat* local optima (some change is as good, none better), and *improvable* (a single change is
# better).

# %%
for reward in grid["reward"]:
    runs = [r for r, c in enumerate(sweep.configs) if c.delta.value == "centered" and c.reward == reward]
    greedy = torch.as_tensor(sweep.greedy_responses[runs])  # int[run batch pos]
    score = task.reward_fn(reward)
    own = score(task.prompts, greedy.unsqueeze(-2)).squeeze(-1)  # float[run batch]
    best_change = neighbour_rewards(score, task.prompts, greedy, task.vocab_size).amax(dim=(-2, -1))
    stuck = own < task.optimum(reward)  # float[run batch] vs float[batch]: not the optimum
    kinds = {"strict": (best_change < own) & stuck, "flat": (best_change == own) & stuck,
             "improvable": (best_change > own) & stuck}
    counts = ", ".join(f"{kind} {int(mask.sum())}" for kind, mask in kinds.items())
    print(f"{reward:>18}: {int(stuck.sum())} non-optimal (run, prompt) endings: {counts}")
    if reward == "distance":  # separable: nothing but the sorted response is a local optimum
        assert int(kinds["strict"].sum()) == int(kinds["flat"].sum()) == 0
    else:  # coupled: some stuck endings are local optima, some are not
        assert 0 < int(kinds["flat"].sum()) < int(stuck.sum())

# %% [markdown]
# The two rewards differ in kind:
#
# - **inclusion-ordering** couples the positions: a response such as $[1, 2, 2]$ for the prompt
#   $[1, 0, 2]$ scores 4 of 5, and every single change scores at most 4. The sorted $[0, 1, 2]$ is
#   two changes away. About half of the stuck endings are such flat local optima: the way up needs
#   two tokens to change *together*, and a policy that samples positions independently finds that
#   only by luck. (Its integer scores make ties common, so none is strict here.)
# - **distance** is a sum over positions, so any unsorted response can be improved by fixing one
#   position: *no* response but the sorted one is a local optimum (`tests/test_neighbours.py`
#   proves it). Yet the distance runs are stuck too.
#
# ### Why the gradient cannot get them out
#
# For a policy that factorises over positions, $\pi(y) = \prod_q \pi_q(y_q)$, with logits
# $z_{q,v}$ at position $q$, the exact gradient of $J$ is
#
# $$\frac{\partial J}{\partial z_{q,v}} = \pi_q(v)\,\big(\mathbb E[R \mid y_q = v] - J\big).$$
#
# When the policy is nearly deterministic on a response $y$, $J \approx R(y)$ and, for $v \ne y_q$,
# $\mathbb E[R \mid y_q = v] \approx R(y \text{ with } y_q := v)$. So the pull towards a better
# token has the *sign* of the single-change improvement and the *size* of that token's
# probability. At a flat local optimum there is no first-order pull towards any alternative (and
# away from the worse ones): only a two-token move helps, which the gradient does not see. At an
# improvable response the pull points the right way but is as small as the probability of the
# better token. In practice it is zero: every sampled response is the
# greedy one, the group's rewards are all equal, and centered deltas are exactly 0. Adam can
# rescale a small gradient, but not a zero one. The exact numbers at the end of the runs:

# %%
for reward in grid["reward"]:
    runs = [r for r, c in enumerate(sweep.configs) if c.delta.value == "centered" and c.reward == reward]
    stats = {"start": [], "end": []}
    greedy_prob = []
    for r in runs:
        start = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(sweep.configs[r].seed))
        end = policy_from_state(sweep.state, r)
        for name, policy in (("start", start), ("end", end)):
            stats[name].append(objective_summary(policy, task, reward)["grad_norm"])
        with torch.no_grad():  # probability of the greedy response = product over positions of the top probability
            greedy_prob.append(position_log_probs(end, task.prompts).amax(-1).sum(-1).exp().min().item())
    zero_std = sweep.epoch_metrics["zero_std_fraction"][runs, -1]
    print(f"{reward:>18}: median |grad J| at the start {np.median(stats['start']):.3f}, at the end "
          f"{np.median(stats['end']):.4f}; median probability of the greedy response (least certain "
          f"prompt) {np.median(greedy_prob):.3f}; groups with zero reward spread at the last epoch "
          f"{zero_std.mean():.0%}")

fig, ax = plt.subplots(figsize=(6, 3.4))
centered_runs = [r for r, c in enumerate(sweep.configs) if c.delta.value == "centered"]
draw_curves(ax, sweep, ["reward"], metric="zero_std_fraction", runs=centered_runs)
ax.set_title("centered deltas: fraction of groups whose rewards are all equal (no signal)", fontsize=9)
fig.tight_layout()

# %% [markdown]
# By the end, the policy is nearly deterministic on every prompt, almost every group carries no
# signal at all, and the exact gradient is a small fraction of what it was at the start. Both
# rewards end up stuck: inclusion-ordering about half the time on flat local optima, distance on
# plateaus where the better token has simply stopped being sampled.
#
# Is it capacity instead? Can this policy represent the sorted responses of all three prompts at
# once? Supervised learning answers that directly: maximize the log-probability of the sorted
# responses (the lab's `response_log_probs`) with Adam, from the lecture's initialisation.

# %%
policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
targets = task.targets(task.prompts).unsqueeze(-2)  # int[batch 1 pos]: the sorted responses, a group of one
for _ in range(300):
    log_likelihood = response_log_probs(policy(task.prompts), targets).sum(-1).mean()
    optimizer.zero_grad()
    (-log_likelihood).backward()
    optimizer.step()
sorted_everywhere = bool((policy(task.prompts).argmax(-1) == targets.squeeze(-2)).all())
print(f"after 300 supervised steps: mean log-probability of the sorted responses {log_likelihood.item():.4f}, "
      f"argmax sorted on every prompt: {sorted_everywhere}")
assert sorted_everywhere and log_likelihood.exp() > 0.99

# %% [markdown]
# It can: told the answer, the same policy puts almost all its mass on the sorted responses in a
# fraction of a second. What runs out in the RL runs is exploration, not capacity: the reward
# signal stops once the samples stop varying.
#
# ## 4. Random prompts and held-out evaluation
#
# The lecture trains and evaluates on the same three prompts, so it measures memorisation.
# `task_from_spec("random", ...)` draws distinct random training prompts and a disjoint set of
# held-out prompts that are only evaluated (greedily, after each epoch), never trained on. With
# the distance reward (whose optimum is exactly the sorted list), we compare 10 training prompts
# with 60, out of the $5^3 = 125$ possible prompts, 10 seeds each, on the same 30 held-out
# prompts.

# %%
heldout_runs = {}
for count in (10, 60):
    random_task = task_from_spec("random", count=count, length=3, heldout=30, prompt_seed=0)
    configs = build_grid(TrainConfig(delta="centered", reward="distance"), {}, seeds=10)
    heldout_runs[count] = run_sweep(random_task, configs)

fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
for ax, (count, result) in zip(axes, heldout_runs.items()):
    epochs = np.arange(result.epoch_metrics["greedy_accuracy"].shape[1])
    for metric, label in (("greedy_accuracy", "training prompts"), ("heldout_greedy_accuracy", "held-out prompts")):
        mean, low, high = mean_band(result.epoch_metrics[metric])
        ax.plot(epochs, mean, label=label)
        ax.fill_between(epochs, low, high, alpha=0.25)
    ax.set(title=f"{count} training prompts: greedy response exactly sorted", xlabel="epoch")
    ax.grid(alpha=0.3)
axes[0].set_ylabel("fraction of prompts")
axes[0].legend()
fig.tight_layout()
for count, result in heldout_runs.items():
    print(f"{count:>3} training prompts: final accuracy on them {mean_interval(result.final('greedy_accuracy')).text(2)}, "
          f"on held-out prompts {mean_interval(result.final('heldout_greedy_accuracy')).text(2)}")
more_prompts = difference_interval(heldout_runs[60].final("heldout_greedy_accuracy"),
                                   heldout_runs[10].final("heldout_greedy_accuracy"))
print(f"held-out accuracy, 60 minus 10 training prompts: {more_prompts.text(2)}")
assert more_prompts.low > 0

# %% [markdown]
# With few training prompts the policy learns them and little else: held-out accuracy barely
# leaves zero. With more prompts it is forced towards something that transfers.
# Why only partly? The toy policy's logits at each response position are a *sum* of one vector per
# (prompt position, prompt token), $z_q(x) = \sum_p U_{p,q}[x_p]$, and sorting is not a sum of
# per-position votes. The sorted token at position $q$ depends on all the prompt's tokens
# *together*. Some of it can be learned that way, and not all of it.
#
# ## Try it
#
# - Add `"loss": ["naive", "clipped"]` or `"delta": ["loo", "max"]` to the grid of section 2.
# - Change `group_size` in `TrainConfig` (for example 4 or 32): how does the fraction of groups
#   without signal change, and with it the number of stuck runs?
# - In section 4, try the inclusion-ordering reward: why is its exact accuracy low even where its
#   reward is high? (Hint: prompts with repeated tokens.)
