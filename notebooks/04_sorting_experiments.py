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
# # Lesson 4: Sorting experiments
#
# The lecture trains its toy policy to sort three lists and draws its conclusions from one seed
# per setting: raw rewards do not learn well, centered rewards help but get stuck, normalizing
# by the std makes little difference. This lesson first has you write the training loop itself, then
# reruns those experiments the way a lab should:
#
# 0. the loop, written by you and checked against the lab's;
# 1. one run with the lecture's settings, read as the lecture reads it;
# 2. twenty seeds per setting, trained together as one batched computation (`lab.experiments.sweep`), with
#    95% bands, so that a difference between settings can be told from seed-to-seed noise;
# 3. a look inside the runs that get stuck: which responses they settle on, whether those are
#    local optima of the reward, and why the gradient cannot get them out;
# 4. random training prompts, evaluated on held-out prompts never trained on.
#
# Three graded exercises: write the loop (section 0), Welch's interval (section 2) and the kind of a
# stuck ending (section 3). Each is your cell with `...` to replace, a collapsed solution, and a check
# against the lab that says "not yet solved" until you have written it (notebooks/README.md).

# %%
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import torch

from lab.training.config import TrainConfig
from lab.core.deltas import compute_deltas
from lab.core.losses import compute_loss
from lab.training.train import train
from lab.exact.diagnose import objective_summary
from lab.experiments.drift import initial_policy
from lab.exact.enumeration import all_probs, position_log_probs, reward_table
from lab.exercises import check
from lab.experiments.figures import draw_curves, mean_band
from lab.experiments.intervals import difference_interval, mean_interval, seed_difference, t_quantile
from lab.core.kl import freeze, kl_estimate, reference_due
from lab.policies.factorized import Policy
from lab.policies import policy_from_state
from lab.policies.sampling import response_log_probs, sample_responses
from lab.training.simple_loop import simple_train
from lab.experiments.sweep import build_grid, optimal_everywhere, run_sweep, summarise, summary_table
from tasks import neighbour_rewards
from tasks.sorting import make_task, task_from_spec


torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
np.set_printoptions(precision=3, suppress=True)
task = make_task()  # the lecture's prompts [[1,0,2], [3,2,4], [1,2,3]], vocabulary 0..4

# %% [markdown]
# ## 0. The loop
#
# Every run in this lesson is one loop, the lecture's, for `epochs` epochs:
#
# 1. **sample** a group of $G$ responses per prompt from the current policy;
# 2. **score** them with the reward and turn each group's rewards into **deltas**;
# 3. **freeze** the log-probs of the batch under the sampling policy ($\log\pi_{\text{old}}$) and
#    under the reference ($\log\pi_{\text{ref}}$, a frozen copy refreshed every `kl_period` epochs);
# 4. take `steps` Adam steps on the same batch, each on the loss
#    $\text{surrogate}(\log\pi_\theta, \delta, \log\pi_{\text{old}}) + \beta\,k_3(\log\pi_\theta, \log\pi_{\text{ref}})$.
#
# `lab.training.train.train` runs it fast, for one run or hundreds at once (a `run` axis, a hand-written
# backward, metrics in bulk), which makes it hard to read. `lab.training.simple_loop.simple_train` is the
# same loop in about forty plain lines, and the lab's tests check that the two draw the same
# samples and reach the same parameters. The pieces are the lab's functions; here is each, once,
# on the lecture's policy:

# %%
config = TrainConfig(delta="centered", loss="clipped", kl=0.1)
generator = torch.Generator().manual_seed(config.seed)  # first the initialisation draws from it ...
policy = Policy(task.vocab_size, 3, task.response_length, config.dim, generator=generator)
reference = freeze(policy)  # a copy that later steps do not move (lab.core.kl.freeze)
with torch.no_grad():  # ... then every epoch's sample, and nothing else
    responses = sample_responses(policy(task.prompts), config.group_size, generator)  # int[batch trial pos]
    rewards = task.reward_fn(config.reward)(task.prompts, responses)  # float[batch trial]
    deltas = compute_deltas(rewards, config.delta)  # float[batch trial]
    old_log_probs = response_log_probs(policy(task.prompts), responses)  # float[batch trial pos]
    ref_log_probs = response_log_probs(reference(task.prompts), responses)
log_probs = response_log_probs(policy(task.prompts), responses)  # this one carries the gradient
loss = compute_loss(log_probs, deltas, config.loss, old_log_probs, config.clip_eps)
loss = loss + config.kl * kl_estimate(log_probs, ref_log_probs)
print("prompt 0's group:", responses[0].tolist())
print("its rewards:     ", rewards[0].tolist())
print("its deltas:      ", deltas[0].numpy())
print(f"the loss of the first step: {loss.item():.4f} (ratios 1, centered deltas summing to 0, no KL yet);",
      "reference due at epochs",
      [e for e in range(25) if reference_due(e, config.kl_period)], "of the first 25")

# %% [markdown]
# Four details decide whether a loop is *this* loop:
#
# - The generator is used for the initialisation first and then for one `sample_responses` call
#   per epoch, nothing else; that is what makes a seed's samples reproducible.
# - Sampling, rewards, deltas and the frozen log-probs need no gradient (`torch.no_grad()`).
# - $\log\pi_{\text{old}}$ is computed **once per epoch, before the steps**, and kept for all
#   `steps` of them (lesson 5 shows what goes wrong otherwise). At the first step the ratio is 1.
# - The reference is refreshed when `reference_due(epoch, config.kl_period)` says so, and the KL
#   term is added only when $\beta$ (`config.kl`) is above 0. The optimizer is
#   `torch.optim.Adam(policy.parameters(), lr=config.lr)`, created once, before the first epoch.
#
# ### Exercise 1: write the loop
#
# Complete `my_train` so that it returns the responses of every epoch, stacked as
# `int[epoch batch trial pos]`, and the final policy. The check runs it for seed 5 with the
# clipped loss, a KL penalty and a reference refreshed every 4 epochs, and compares it with
# `simple_train`: the same samples in every epoch, and the same final parameters (to $10^{-5}$).

# %% tags=["exercise"]
def my_train(task, config, generator):
    """One run of the loop: (responses int[epoch batch trial pos], final policy)."""
    prompts, reward = task.prompts, task.reward_fn(config.reward)
    policy = Policy(task.vocab_size, prompts.shape[1], task.response_length, config.dim, generator=generator)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    # your loop: for every epoch, the four steps above
    return ...


# %% [markdown] tags=["solution"]
# <details><summary><b>Solution</b> (click to open)</summary>
#
# ```python
# def my_train(task, config, generator):
#     """One run of the loop: (responses int[epoch batch trial pos], final policy)."""
#     prompts, reward = task.prompts, task.reward_fn(config.reward)
#     policy = Policy(task.vocab_size, prompts.shape[1], task.response_length, config.dim, generator=generator)
#     optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
#     every_epoch = []
#     for epoch in range(config.epochs):
#         if reference_due(epoch, config.kl_period):
#             reference = freeze(policy)
#         with torch.no_grad():
#             responses = sample_responses(policy(prompts), config.group_size, generator)
#             deltas = compute_deltas(reward(prompts, responses), config.delta)
#             old_log_probs = response_log_probs(policy(prompts), responses)
#             ref_log_probs = response_log_probs(reference(prompts), responses)
#         for _ in range(config.steps):
#             log_probs = response_log_probs(policy(prompts), responses)
#             loss = compute_loss(log_probs, deltas, config.loss, old_log_probs, config.clip_eps)
#             if config.kl > 0:
#                 loss = loss + config.kl * kl_estimate(log_probs, ref_log_probs)
#             optimizer.zero_grad()
#             loss.backward()
#             optimizer.step()
#         every_epoch.append(responses)
#     return torch.stack(every_epoch), policy
# ```
#
# It is `lab.training.simple_loop.simple_train` without its records of rewards, deltas and losses.
# </details>

# %%
def same_as_the_lab(my_train):
    config = TrainConfig(epochs=12, steps=5, seed=5, delta="centered", loss="clipped", clip_eps=0.05, kl=0.1,
                         kl_period=4)
    responses, policy = my_train(task, config, torch.Generator().manual_seed(config.seed))
    lab_run = simple_train(task, config)
    responses = torch.as_tensor(torch.stack(list(responses)) if isinstance(responses, list) else responses)
    assert responses.shape == lab_run.responses.shape, (
        f"responses have shape {tuple(responses.shape)}, the lab's {tuple(lab_run.responses.shape)}")
    differ = [e for e in range(config.epochs) if not torch.equal(responses[e], lab_run.responses[e])]
    assert not differ or differ[0] > 0, (
        "the samples differ already in epoch 0: check the generator's use (what draws from it, in which order)")
    assert not differ, (f"the samples agree until epoch {differ[0] - 1} and differ from epoch {differ[0]} on: the "
                        "sampling is right, so check the update (the loss, the steps, when the reference is refreshed)")
    mine = dict(policy.named_parameters())
    for name, value in lab_run.policy.named_parameters():
        gap = (mine[name].detach() - value.detach()).abs().max().item()
        assert gap <= 1e-5, f"same samples, but the final {name} differs by {gap:.2g} (the loss or the steps?)"


check("Exercise 1: the loop", same_as_the_lab, my_train, without=(simple_train, train));

# %% [markdown]
# The lab's fast engine is the same loop: for the lecture's settings with centered deltas, 100
# epochs of 10 steps, both loops draw the same 100 batches, and their parameters end within float
# rounding of each other (the two loops compute the same gradients and Adam steps, in float32, with
# their operations in another order, so the last bits differ).

# %%
plain, fast = simple_train(task, TrainConfig(delta="centered")), train(task, TrainConfig(delta="centered", sample_every=1))
same_batches = sum(torch.equal(plain.responses[e], torch.as_tensor(fast.samples[e].responses[0])) for e in range(100))
gap = max((fast.state[name][0] - p.detach()).abs().max().item() for name, p in plain.policy.named_parameters())
print(f"identical batches: {same_batches} of 100; largest parameter difference at the end: {gap:.1e}")
assert same_batches == 100 and gap < 1e-5

# %% [markdown]
# ## 1. One run, the lecture's way
#
# `TrainConfig()` holds the lecture's settings: 100 epochs of 10 optimizer steps, $G = 10$
# responses per prompt, Adam at $10^{-3}$, seed 5, the inclusion-plus-ordering reward (maximum 5),
# raw rewards as deltas, the naive loss. With `sampler="multinomial"` the run draws its samples as
# the lecture's script does (`torch.multinomial`, from the run's own generator), so this *is* the
# lecture's logged seed-5 run: its loss and mean reward agree with the script's log at every step
# (`tests/test_lecture_run.py`). The lab's default draw (inverse CDF) gives a different run for the
# same seed; the seed sweeps below use it.

# %%
config = TrainConfig(sampler="multinomial")
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
    ax.set_title(f"{reward}: mean reward, 95% band over 20 seeds (thin: seed 5, the lab's draw)", fontsize=9)
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
inconclusive = differences["inclusion-ordering", "normalized - centered"]
assert inconclusive.low < -0.2 and inconclusive.high > 0.35  # the sizes the text below reads off

# %% [markdown]
# How to read this (the intervals are over seeds, at the last epoch):
#
# - **Raw versus centered.** An interval for the difference (Welch's t, `difference_interval`)
#   that excludes 0 says the gap is not seed noise. On the lecture's reward, inclusion-ordering,
#   centering helps, as the lecture says. On the distance reward the gap goes the same way, but
#   check whether 20 seeds are enough to call it.
# - **Normalized versus centered.** An interval that straddles 0 says only that 20 seeds cannot tell
#   them apart. It does not say they are equivalent: on inclusion-ordering the interval printed
#   above still allows normalized deltas to end a quarter of a point lower or almost 0.4 higher.
#   The data are inconclusive; "makes little difference" would need an interval that lies inside
#   a margin we agree to call little, and more seeds.
# - **The thin seed-5 line** often sits far from its band. A conclusion drawn from it alone could
#   have gone either way.
# - **Almost no run is optimal on every prompt**, whatever the setting (the last column of the
#   table). Runs do not fail to learn; they stop learning. Section 3 looks at where they stop.
#
# ### Exercise 2: Welch's interval
#
# The differences above come from `lab.experiments.intervals.difference_interval`: Welch's t-interval for
# $\bar a - \bar b$ over independent seeds with unequal variances. With $v_a = s_a^2/n_a$ and
# $v_b = s_b^2/n_b$ ($s$ the Bessel-corrected std), the half-width is $t_{0.975,\,\nu}\sqrt{v_a + v_b}$
# with $\nu = (v_a + v_b)^2 / \big(v_a^2/(n_a - 1) + v_b^2/(n_b - 1)\big)$ degrees of freedom,
# rounded down. Write it; `t_quantile(0.975, df)` gives the quantile.

# %% tags=["exercise"]
def welch_interval(a, b):
    """(estimate, low, high) of mean(a) - mean(b), 95% Welch t-interval; a, b: float[seed] arrays."""
    return ...


# %% [markdown] tags=["solution"]
# <details><summary><b>Solution</b> (click to open)</summary>
#
# ```python
# def welch_interval(a, b):
#     """(estimate, low, high) of mean(a) - mean(b), 95% Welch t-interval; a, b: float[seed] arrays."""
#     a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
#     va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
#     df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
#     half = t_quantile(0.975, int(np.floor(df))) * np.sqrt(va + vb)
#     estimate = a.mean() - b.mean()
#     return estimate, estimate - half, estimate + half
# ```
# </details>

# %%
def matches_difference_interval(welch_interval):
    for reward in grid["reward"]:
        for first, second in (("centered", "raw"), ("normalized", "centered"), ("normalized", "raw")):
            a, b = final_of(first, reward), final_of(second, reward)
            mine, lab_interval = welch_interval(a, b), difference_interval(a, b)
            expected = (lab_interval.estimate, lab_interval.low, lab_interval.high)
            assert np.allclose(mine, expected, rtol=0, atol=1e-6), (
                f"{reward}, {first} - {second}: yours {np.round(mine, 4)}, the lab's {np.round(expected, 4)}")


check("Exercise 2: Welch's interval", matches_difference_interval, welch_interval, without=(difference_interval,));

# %% [markdown]
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
ending_kinds = {}  # reward -> kind -> bool[run batch], over the centered runs
for reward in grid["reward"]:
    runs = [r for r, c in enumerate(sweep.configs) if c.delta.value == "centered" and c.reward == reward]
    greedy = torch.as_tensor(sweep.greedy_responses[runs])  # int[run batch pos]
    score = task.reward_fn(reward)
    own = score(task.prompts, greedy.unsqueeze(-2)).squeeze(-1)  # float[run batch]
    best_change = neighbour_rewards(score, task.prompts, greedy, task.vocab_size).amax(dim=(-2, -1))
    stuck = own < task.optimum(reward)  # float[run batch] vs float[batch]: not the optimum
    kinds = {"strict": (best_change < own) & stuck, "flat": (best_change == own) & stuck,
             "improvable": (best_change > own) & stuck}
    ending_kinds[reward] = kinds
    counts = ", ".join(f"{kind} {int(mask.sum())}" for kind, mask in kinds.items())
    print(f"{reward:>18}: {int(stuck.sum())} non-optimal (run, prompt) endings: {counts}")
    if reward == "distance":  # separable: nothing but the sorted response is a local optimum
        assert int(kinds["strict"].sum()) == int(kinds["flat"].sum()) == 0
    else:  # coupled: some stuck endings are local optima, some are not
        assert 0 < int(kinds["flat"].sum()) < int(stuck.sum())

# %% [markdown]
# ### Exercise 3: the kind of an ending
#
# Write the classification yourself, with plain loops: `score(prompts, responses)` is a reward
# function of the task (`int[batch pos]`, `int[batch trial pos]` -> `float[batch trial]`), `best` the
# prompt's optimum. Try every single-token change of `response` (each position, each token of
# `range(task.vocab_size)` other than the one already there) and return `"optimal"`, `"strict"`,
# `"flat"` or `"improvable"`.

# %% tags=["exercise"]
def ending_kind(score, prompt, response, best):
    """The kind of `response` (a list of tokens) for `prompt` (a list): optimal, strict, flat or improvable."""
    return ...


# %% [markdown] tags=["solution"]
# <details><summary><b>Solution</b> (click to open)</summary>
#
# ```python
# def ending_kind(score, prompt, response, best):
#     """The kind of `response` (a list of tokens) for `prompt` (a list): optimal, strict, flat or improvable."""
#     reward = lambda y: score(torch.tensor([prompt]), torch.tensor([[y]])).item()
#     own = reward(response)
#     if own >= best:
#         return "optimal"
#     changes = [reward(response[:t] + [v] + response[t + 1:])
#                for t in range(len(response)) for v in range(task.vocab_size) if v != response[t]]
#     if max(changes) > own:
#         return "improvable"
#     return "flat" if max(changes) == own else "strict"
# ```
# </details>

# %%
def table_score(values):
    """A reward given as a table {response: value} (0 elsewhere), in the reward functions' shapes."""
    return lambda prompts, responses: torch.tensor([[values.get(tuple(y), 0.0) for y in trial]
                                                    for trial in responses.tolist()])


def agrees_with_neighbour_rewards(ending_kind):
    # hand-made endings of every kind, the strict one included (the sweep's rewards have none)
    peaks = table_score({(1, 1): 2.0, (0, 0): 1.0})  # [0, 0]: every single change scores 0 < 1
    ridge = table_score({(1, 1): 2.0, (0, 0): 1.0, (0, 2): 1.0})  # [0, 0]: a change to [0, 2] ties
    for score, response, kind in ((peaks, [0, 0], "strict"), (ridge, [0, 0], "flat"), (peaks, [1, 0], "improvable"),
                                  (peaks, [1, 1], "optimal")):
        mine = ending_kind(score, [3, 4], response, 2.0)
        assert mine == kind, f"a made-up reward, response {response}: yours {mine!r}, expected {kind!r}"
    for reward, kinds in ending_kinds.items():
        runs = [r for r, c in enumerate(sweep.configs) if c.delta.value == "centered" and c.reward == reward]
        for i, r in enumerate(runs):
            for b, prompt in enumerate(task.prompts.tolist()):
                response = sweep.greedy_responses[r, b].tolist()
                lab_kind = next((kind for kind, mask in kinds.items() if mask[i, b]), "optimal")
                mine = ending_kind(task.reward_fn(reward), prompt, response, task.optimum(reward)[b].item())
                assert mine == lab_kind, f"{reward}, prompt {prompt}, response {response}: yours {mine!r}, lab {lab_kind!r}"


check("Exercise 3: the kind of an ending", agrees_with_neighbour_rewards, ending_kind, without=(neighbour_rewards,));

# %%
example = torch.tensor([[1, 2, 2]])  # a response to the prompt [1, 0, 2]
coupled = task.reward_fn("inclusion-ordering")
own = coupled(torch.tensor([[1, 0, 2]]), example.unsqueeze(-2)).item()
best_change = neighbour_rewards(coupled, torch.tensor([[1, 0, 2]]), example, task.vocab_size).max().item()
print(f"[1, 2, 2] for the prompt [1, 0, 2]: scores {own:g} of 5; the best single change scores {best_change:g}")

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
# For a policy that factorises over positions, $\pi(y) = \prod_t \pi_t(y_t)$, with logits
# $z_{t,v}$ at position $t$, the exact gradient of $J$ is
#
# $$\frac{\partial J}{\partial z_{t,v}} = \pi_t(v)\,\big(\mathbb E[R \mid y_t = v] - J\big).$$
#
# When the policy is nearly deterministic on a response $y$, $J \approx R(y)$ and, for $v \ne y_t$,
# $\mathbb E[R \mid y_t = v] \approx R(y \text{ with } y_t := v)$. So the pull towards a better
# token has the *sign* of the single-change improvement and the *size* of that token's
# probability. At a flat local optimum no single change is better, so no alternative token is
# pulled up (the equally good ones feel no pull, the worse ones are pushed down): only a two-token
# move helps, which the gradient does not see. At an improvable response the pull points the right
# way but is as small as the probability of the better token. In practice it is zero: the samples
# rarely contain the better token, so almost always every sample of a group scores the same as the
# greedy one (even though the ten samples are ten copies of one response only about three times in
# four), the group's rewards are all equal, and centered deltas are exactly 0. Adam can rescale a small
# gradient, but not a zero one. The exact numbers at the end of the runs, with the probability
# that a group of $G = 10$ samples is ten copies of one response, $\sum_y \pi(y)^{10}$, and that
# its ten rewards are all equal, $\sum_r P(R = r)^{10}$, both computed exactly from the final
# policies (mean over runs and prompts):

# %%
for reward in grid["reward"]:
    runs = [r for r, c in enumerate(sweep.configs) if c.delta.value == "centered" and c.reward == reward]
    stats = {"start": [], "end": []}
    greedy_prob, all_identical, all_equal_rewards = [], [], []
    table = reward_table(task.prompts, reward, task.vocab_size, task.response_length).double()  # float[batch n]
    for r in runs:
        start = initial_policy(task, sweep.configs[r])
        end = policy_from_state(sweep.state, r)
        for name, policy in (("start", start), ("end", end)):
            stats[name].append(objective_summary(policy, task, reward)["grad_norm"])
        with torch.no_grad():  # probability of the greedy response = product over positions of the top probability
            greedy_prob.append(position_log_probs(end, task.prompts).amax(-1).sum(-1).exp().min().item())
            probs = all_probs(end, task.prompts, torch.float64)  # float[batch n]: every response
            all_identical.append((probs ** 10).sum(-1).mean().item())
            reward_probs = torch.stack([(probs * (table == value)).sum(-1) for value in table.unique()])
            all_equal_rewards.append((reward_probs ** 10).sum(0).mean().item())
    zero_std = sweep.epoch_metrics["zero_std_fraction"][runs, -1]
    print(f"{reward:>18}: median |grad J| at the start {np.median(stats['start']):.3f}, at the end "
          f"{np.median(stats['end']):.4f}; median probability of the greedy response (least certain "
          f"prompt) {np.median(greedy_prob):.3f}; groups with zero reward spread at the last epoch "
          f"{zero_std.mean():.0%}")
    print(f"{'':>18}  P(10 samples all one response) = {np.mean(all_identical):.2f}, "
          f"P(10 samples all the same reward) = {np.mean(all_equal_rewards):.2f}")
    assert np.mean(all_identical) < 0.8 < 0.95 < np.mean(all_equal_rewards)

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
# It can: told the answer, the same policy puts almost all its mass on the sorted responses in 300
# supervised steps. What the RL runs lack is exploration, not capacity, and from the first
# step: at the lecture's initialisation a group almost never contains the sorted response (lesson
# 6 measures it exactly), and the reward signal stops once the samples stop varying.
#
# ## 4. Random prompts and held-out evaluation
#
# The lecture trains and evaluates on the same three prompts, so it measures memorisation.
# `task_from_spec("random", ...)` draws distinct random training prompts and a disjoint set of
# held-out prompts that are only evaluated (greedily, after each epoch), never trained on. With
# the distance reward (whose optimum is exactly the sorted list), we compare 10 training prompts
# with 60, out of the $5^3 = 125$ possible prompts, 10 seeds each, on the same 30 held-out
# prompts: the 10 are the first 10 of the 60, and both sweeps are evaluated on the 60-prompt task's
# held-out set.

# %%
heldout_runs = {}
wide = task_from_spec("random", count=60, length=3, heldout=30, prompt_seed=0)  # 60 prompts, 30 held out
tasks_by_count = {10: make_task(wide.prompts[:10], wide.vocab_size, eval_prompts=wide.eval_prompts), 60: wide}
for count, random_task in tasks_by_count.items():
    configs = build_grid(TrainConfig(delta="centered", reward="distance"), {}, seeds=10)
    heldout_runs[count] = run_sweep(random_task, configs)
shared = {tuple(p) for p in tasks_by_count[10].eval_prompts.tolist()} & {tuple(p) for p in wide.eval_prompts.tolist()}
seen = {tuple(p) for p in wide.prompts.tolist()} & {tuple(p) for p in wide.eval_prompts.tolist()}
print(f"held-out prompts shared by the two sweeps: {len(shared)} of {len(wide.eval_prompts)}; "
      f"held-out prompts among the training prompts: {len(seen)}")

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
more_prompts = seed_difference(heldout_runs[60].final("heldout_greedy_accuracy"),  # paired: the same seeds
                               heldout_runs[10].final("heldout_greedy_accuracy"),
                               [c.seed for c in heldout_runs[60].configs], [c.seed for c in heldout_runs[10].configs])
print(f"held-out accuracy, 60 minus 10 training prompts: {more_prompts.text(2)}")
assert more_prompts.low > 0

# %% [markdown]
# With few training prompts the policy learns some of them and little else: held-out accuracy
# barely leaves zero. With more prompts it is forced towards something that transfers.
# Why only partly? The toy policy's logits at each response position are a *sum* of one vector per
# (prompt position, prompt token), $z_t(x) = \sum_p U_{p,t}[x_p]$, and sorting is not a sum of
# per-position votes. The sorted token at position $t$ depends on all the prompt's tokens
# *together*. Some of it can be learned that way, and not all of it.
#
# ## Try it
#
# - Add `"loss": ["naive", "clipped"]` or `"delta": ["loo", "max"]` to the grid of section 2.
# - Change `group_size` in `TrainConfig` (for example 4 or 32): how does the fraction of groups
#   without signal change, and with it the number of stuck runs?
# - In section 4, try the inclusion-ordering reward: why is its exact accuracy low even where its
#   reward is high? (Hint: prompts with repeated tokens.)
