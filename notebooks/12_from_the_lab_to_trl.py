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
# # Lesson 12: From the lab to TRL
#
# The lab's names come from TRL and verl, and its formulas are checked against TRL's own code
# (`tests/bridge/`, docs/trl.md). This lesson crosses the bridge: it trains a tiny causal transformer
# with TRL's `GRPOTrainer` on the same sorting task, with the same settings as a `lab run`, and reads
# TRL's run through the lab's exact lens, the whole response distribution enumerated every epoch.
#
# 1. the mapping, lab flag to `GRPOConfig` field, printed from the config the lab builds;
# 2. the same experiment both ways: the lab's autoregressive policy and TRL's transformer;
# 3. reading TRL's logs with the exact lens: its sampled `reward` against the exact expectation;
# 4. graded exercises: configure TRL to match a given lab run, and compute the exact lens yourself.
#
# Everything runs on the CPU with no download: the model's config and tokenizer are built in code
# (`lab.bridge.tiny_lm`).

# %%
import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import torch

from lab.bridge.exact_lm import all_responses, reward_table
from lab.bridge.tiny_lm import TinyLM
from lab.bridge.trl_grpo import LOSS_TYPES, SCALE_REWARDS, TRLGRPO, train_trl
from lab.exact import varlen
from lab.exercises import check
from lab.policies import make_policy, policy_from_state
from lab.training.config import TrainConfig
from lab.training.train import train
from tasks.sorting import make_task, variable_length_reward

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible (TRL's trainer included)
task = make_task()  # the lecture's three prompts, values 0..4
EPOCHS, CAP = 40, 4  # responses of at most 4 tokens, EOS included

# %% [markdown]
# ## 1. The mapping
#
# An epoch in the lab is one group of G responses per prompt followed by `steps` optimizer steps on
# that batch. In TRL that is one generation batch of P x G completions (`per_device_train_batch_size`
# = P x G, one optimizer step per generation) reused `num_iterations` times. The clip is `epsilon`,
# the temperature is `temperature`, the loss aggregation is `loss_type`, and the deltas' std scaling
# is `scale_rewards`. Two settings do not carry over by name. TRL adds `beta` times each token's k3 to
# that token's loss and then aggregates the sum by `loss_type`: its KL term is the *loss's own
# aggregation* of k3. The lab's KL term is C times the loss's own aggregation of k3, C the max length
# (`lab.core.aggregation.kl_term`; under token-mean at fixed length that is each sequence's sum of k3,
# averaged over sequences), so TRL's beta = the lab's x C. And TRL 1.16 multiplies k3 by the importance
# ratio unless `use_bias_correction_kl=False`, which changes the KL's gradient (docs/trl.md). Here is the
# config `lab trl` builds for one lab run, beside TRL's own defaults (the fields' declared values):

# %%
lab_settings = TRLGRPO(epochs=EPOCHS, steps=2, group_size=8, clip_eps=0.1, kl=0.05, delta="normalized",
                       loss_agg="seq-mean-token-mean", temperature=0.9, max_length=CAP)
config = lab_settings.grpo_config(task, "/tmp/unused")
from trl import GRPOConfig  # noqa: E402  (TRL itself, for its defaults)

trl_defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
print(f"{'GRPOConfig field':>24}   {'the lab run':<24} TRL's default")
for field in ("num_generations", "num_iterations", "epsilon", "beta", "use_bias_correction_kl", "loss_type",
              "scale_rewards", "temperature", "max_completion_length", "learning_rate", "lr_scheduler_type",
              "max_grad_norm", "bf16"):
    print(f"{field:>24}   {str(getattr(config, field)):<24} {trl_defaults[field]!r}")
assert trl_defaults["beta"] == 0.0 and trl_defaults["loss_type"] == "dapo" and config.beta == 0.05 * CAP

# %% [markdown]
# `beta` is 0.05 x 4 = 0.2, `loss_type="grpo"` is the lab's `seq-mean-token-mean`, and
# `scale_rewards="group"` is `--delta normalized`. TRL's defaults are not the lab's: `beta=0.0` (no KL
# term at all, and no reference model is loaded) and `loss_type="dapo"` (every token of the generation
# batch counted once: on one process with one micro-batch it divides like `"bnpo"`, the lab's
# `token-mean`); a TRL run that does not set `beta` has no KL penalty at all. The last four
# lines make TRL's optimizer the lab's: a constant learning rate (TRL decays it linearly by default), no
# gradient clipping (TRL clips at 1.0), and float32 (TRL's `bf16=None` means bf16 autocast wherever the
# device supports it; the exact lens would read a different model).
#
# ## 2. The same experiment both ways
#
# Centered deltas, the clipped loss with eps 0.2, G = 10, one step per epoch, lr 1e-3, 40 epochs,
# seed 0. The lab's learner is its autoregressive policy (`lab run --policy autoregressive`); TRL's is
# a 2-layer transformer of width 32. Both are measured exactly: the expected reward after every epoch
# (the lab's `optimum_metrics` records it as `reward_exact`; its optimum is 5, a sorted response with its
# EOS) and the entropy of the whole response distribution at the start and the end.

# %%
shared = dict(steps=1, group_size=10, lr=1e-3, clip_eps=0.2, delta="centered", loss_agg="token-mean", seed=0)
records, _, final_weights = train_trl(task, TRLGRPO(epochs=EPOCHS, max_length=CAP, model=TinyLM(seed=0), **shared))
trl_epochs = np.array([row["epoch"] for row in records])
trl_reward = np.array([row["reward_exact"] for row in records])
trl_entropy = np.array([row["entropy_exact"] for row in records])

rewards = reward_table(task.prompts, all_responses(5, CAP), variable_length_reward("inclusion-ordering", 5))
lab_run = train(task, TrainConfig(epochs=EPOCHS, policy="autoregressive", max_length=CAP, loss="clipped",
                                  optimum_metrics=True, **shared))
lab_reward = lab_run.epoch_metrics["reward_exact"][0]  # float[epoch]: after each epoch's steps


def sequence_entropy(policy):
    """The exact entropy of a policy's whole response distribution, mean over prompts (nats)."""
    with torch.no_grad():
        log_probs = varlen.all_log_probs(policy, task.prompts, torch.float64)
    return float(-(log_probs.exp() * log_probs).sum(-1).mean())


# the policy the run started from: the loop draws it first from the seed's generator
lab_start = make_policy("autoregressive", 5, 3, CAP, 10, torch.Generator().manual_seed(shared["seed"]))
lab_entropy = [sequence_entropy(lab_start), sequence_entropy(policy_from_state(lab_run.state))]
lab_epochs = np.arange(1, EPOCHS + 1)

fig, axes = plt.subplots(1, 2, figsize=(9, 3.3))
axes[0].plot(trl_epochs, trl_reward, label="TRL's transformer")
axes[0].plot(lab_epochs, lab_reward, label="the lab's policy")
axes[0].set_title("exact expected reward (the optimum is 5)")
axes[1].plot(trl_epochs, trl_entropy)
axes[1].plot([0, EPOCHS], lab_entropy, "o-")
axes[1].set_title("exact sequence entropy (nats)")
for ax in axes:
    ax.set_xlabel("epoch")
axes[0].legend()
plt.tight_layout()
print(f"best reward per prompt: {rewards.amax(-1).tolist()}")
print(f"exact expected reward, epoch 1 -> {EPOCHS}: lab {lab_reward[0]:.3f} -> {lab_reward[-1]:.3f}, "
      f"TRL {trl_reward[1]:.3f} -> {trl_reward[-1]:.3f}")
print(f"exact sequence entropy at the start: lab {lab_entropy[0]:.2f} nats, TRL {trl_entropy[0]:.2f} nats (the space "
      f"has {len(all_responses(5, CAP))} responses: at most {np.log(781):.2f} nats); at the end: lab "
      f"{lab_entropy[1]:.2f}, TRL {trl_entropy[-1]:.2f}")
print(f"groups with all-equal rewards in epoch 1: lab {lab_run.epoch_metrics['zero_std_fraction'][0, 0]:.0%}, "
      f"TRL {records[1]['zero_std_fraction']:.0%}")
assert lab_reward[-1] > lab_reward[0] and trl_reward[-1] > trl_reward[1] and lab_entropy[0] < 0.5 * trl_entropy[0]

# %% [markdown]
# Both learners raise their exact expected reward (the second line), from very different starts, and
# both stay far below the optimum, 5 (the first line), in 40 epochs. The
# lab's policy starts almost deterministic: its sequence entropy is about one nat, so two thirds of its
# first groups have all-equal rewards and carry no signal (lesson 6). TRL's transformer starts spread over hundreds
# of responses, its entropy not far below the maximum, so every group has a signal. The algorithm is
# the same; the starting distribution decides what the groups can see. `lab trl-compare` repeats this
# over seeds for three settings and asks whether the lab's conclusions about delta and aggregation modes
# carry over (figures/trl_comparison.md).
#
# ## 3. TRL's logs through the exact lens
#
# TRL logs `reward`, the mean of the epoch's sampled rewards (the lab calls it `mean_reward`). It is an
# estimate of the exact expected reward of the policy that sampled: the one *before* the epoch's
# steps, which is the previous row's `reward_exact`.

# %%
sampled = np.array([row["mean_reward"] for row in records[1:]])
before = trl_reward[:-1]  # the policy each epoch sampled from
gap = sampled - before
print(f"sampled mean reward minus exact expectation: mean {gap.mean():+.3f}, std {gap.std(ddof=1):.3f} "
      f"over {len(gap)} epochs; the std of one epoch's mean of 30 rewards is about "
      f"{np.mean([row['reward_std'] for row in records[1:]]) / np.sqrt(30):.3f}")

# %% [markdown]
# The sampled mean scatters around the exact value by about the standard error of a mean of 30
# rewards, and its average gap is near zero: TRL's `reward` is an unbiased but noisy view of the quantity
# the lab computes exactly. A curve of TRL's `reward` can wiggle for many epochs while the exact
# expectation moves steadily; the lens tells the two apart.
#
# ## Exercises
#
# Write the code where the `...` is, run the check below it, and open the collapsed solution if you
# are stuck.
#
# ### Exercise 1: configure TRL to match a lab run
#
# Write `my_trl_fields(delta, loss_agg, kl, clip_eps, group_size, steps, max_length)`: the dict of
# `GRPOConfig` fields `loss_type`, `scale_rewards`, `beta`, `epsilon`, `num_generations` and
# `num_iterations` that make TRL train like `lab run` with these settings. `delta` is "centered" or
# "normalized"; `loss_agg` is "token-mean", "seq-mean-token-mean" or "seq-mean-token-sum-norm" (the
# max length is `max_length`). TRL's own spellings count: `GRPOConfig` maps `scale_rewards=True` to
# "group" and `False` to "none".

# %% tags=["exercise"]
def my_trl_fields(delta, loss_agg, kl, clip_eps, group_size, steps, max_length):
    """GRPOConfig fields for a lab run's settings."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_trl_fields(delta, loss_agg, kl, clip_eps, group_size, steps, max_length):
#     """GRPOConfig fields for a lab run's settings."""
#     loss_type = {"token-mean": "bnpo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
#     scale = {"centered": "none", "normalized": "group"}
#     return {"loss_type": loss_type[loss_agg], "scale_rewards": scale[delta], "beta": kl * max_length,
#             "epsilon": clip_eps, "num_generations": group_size, "num_iterations": steps}
# ```
#
# </details>

# %%
def test_trl_fields(my_trl_fields):
    for delta in SCALE_REWARDS:
        for loss_agg in LOSS_TYPES:
            for kl, clip_eps, group_size, steps, cap in ((0.0, 0.2, 10, 1, 4), (0.05, 0.1, 6, 3, 5)):
                run = TRLGRPO(steps=steps, group_size=group_size, clip_eps=clip_eps, kl=kl, delta=delta,
                              loss_agg=loss_agg, max_length=cap)
                expected = run.grpo_config(task, "/tmp/unused")
                yours = my_trl_fields(delta, loss_agg, kl, clip_eps, group_size, steps, cap)
                setting = f"--delta {delta} --loss-agg {loss_agg} --kl {kl} (max length {cap})"
                for field in ("loss_type", "scale_rewards", "beta", "epsilon", "num_generations", "num_iterations"):
                    assert field in yours, f"your dict has no {field!r}"
                    right = getattr(expected, field)
                    value = yours[field]
                    if field == "beta":
                        same = abs(value - right) < 1e-12
                    elif field == "scale_rewards":  # GRPOConfig.__post_init__ maps True to "group", False to "none"
                        same = {True: "group", False: "none"}.get(value, value) == right
                    else:  # on one process with one micro-batch TRL's "dapo" divides like "bnpo" (tests/bridge)
                        same = value in ({"bnpo", "dapo"} if right == "bnpo" else {right})
                    assert same, f"for {setting}, {field} = {value!r} would not train like the lab's run"


check("Exercise 1, TRL's fields for a lab run", test_trl_fields, my_trl_fields, without=(TRLGRPO, LOSS_TYPES, SCALE_REWARDS));

# %% [markdown]
# ### Exercise 2: the exact lens
#
# Write `my_exact_reward(log_probs, rewards)`: from the table of log pi(y | x) of every response of every
# prompt (`float[prompt n]`, as `lab.bridge.exact_lm.response_log_probs` gives it) and the reward table of the
# same shape, the exact expected reward of the model's sampling distribution, averaged over the prompts:
# what metrics.csv calls `reward_exact`.

# %% tags=["exercise"]
def my_exact_reward(log_probs, rewards):
    """E_{y ~ pi(. | x)}[r(x, y)], mean over prompts."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_exact_reward(log_probs, rewards):
#     """E_{y ~ pi(. | x)}[r(x, y)], mean over prompts."""
#     return float((log_probs.exp() * rewards).sum(-1).mean())
# ```
#
# </details>

# %%
def test_exact_reward(my_exact_reward):
    from lab.bridge.exact_lm import response_log_probs
    from lab.bridge.tiny_lm import build_model

    model = build_model(TinyLM(seed=0))
    for weights, expected in ((None, trl_reward[0]), (final_weights, trl_reward[-1])):
        if weights is not None:
            model.load_state_dict(weights)
        table = response_log_probs(model.eval(), task.prompts, all_responses(5, CAP), 5)
        yours = float(my_exact_reward(table, rewards))
        assert abs(yours - expected) < 1e-9, f"your value {yours:.4f} is not the run's reward_exact"


from lab.bridge.exact_lm import exact_metrics  # the lab's own lens: hidden from your function while it runs

check("Exercise 2, the exact lens", test_exact_reward, my_exact_reward, without=(exact_metrics,));
