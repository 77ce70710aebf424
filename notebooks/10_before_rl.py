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
# # Lesson 10: Before RL: imitation, filtering, and where RL starts
#
# The recipes the lab's sources describe do not start RL from a random policy. A model is first
# fine-tuned on demonstrations (SFT), and GRPO or DPO start from that model; the DPO recipe says its
# frozen reference is "a copy of the SFT model", not the raw pretrained one. CS336's assignment 5
# compares SFT, expert iteration and GRPO on the same task. This lesson asks its first questions on
# the sorting toy, where every expectation can be computed exactly:
#
# 1. What does SFT optimise, and what does it do with good and with noisy demonstrations?
# 2. Expert iteration (sample, keep what passes a filter, imitate it) is filtered REINFORCE: how far
#    does it get compared with GRPO on the same samples?
# 3. What changes when GRPO and DPO start from an SFT policy, with that policy as their reference?
# 4. Three graded exercises: the SFT loss, expert iteration's filter, and DPO's reference.

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from lab.core.sft import group_best, sft_loss
from lab.exact.enumeration import all_log_probs, flat_grad
from lab.exercises import check
from lab.policies import make_policy, policy_from_state, sequence_log_probs
from lab.policies.factorized import save_policy
from lab.training.config import TrainConfig
from lab.training.train import train
from tasks.sorting import make_task

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and reproducible
task = make_task()  # the lecture's three prompts, vocabulary 0..4, responses of length 3
SEEDS = range(4)
SHORT = dict(epochs=30, steps=10)  # 30 epochs of G = 10 samples per prompt, 10 Adam steps each


def final(records, name):
    """Each run's last value of a metric (epoch or step)."""
    table = records.epoch_metrics if name in records.epoch_metrics else records.step_metrics
    return table[name][:, -1]


# %% [markdown]
# ## 1. SFT is maximum likelihood, and maximum likelihood is a forward KL
#
# SFT minimises the negative log-likelihood of demonstration responses. TRL's `SFTTrainer` averages it
# over every completion token of the batch, and so does `--loss sft` (`lab.core.sft.sft_loss`):
#
# `L(theta) = -sum_{i,q} m_iq log pi_theta(y_iq | x, y_i<q) / sum_{i,q} m_iq`.
#
# The denominator counts tokens, which does not depend on theta, so the population loss is, up to that
# constant, `E_{y ~ pi_demo}[-log pi_theta(y)] = H(pi_demo) + KL(pi_demo || pi_theta)`. SFT minimises
# the KL *from the demonstrations*: in a class that can represent every distribution its fixed point
# is pi_demo itself (claim 30 in `docs/claims.md`). It copies whatever the demonstrations do, errors
# included. Two sources of G = 10 demonstrations per prompt, one fixed set each: `optimal` is sorted(x),
# and `noisy` is sorted(x) with each token replaced by a uniform one with probability 0.3.

# %%
sft_optimal = train(task, [TrainConfig(loss="sft", seed=s, **SHORT) for s in SEEDS])
sft_noisy = train(task, [TrainConfig(loss="sft", demos="noisy", demo_noise=0.3, seed=s, **SHORT) for s in SEEDS])
for name, records in (("SFT on optimal demos", sft_optimal), ("SFT on noisy demos", sft_noisy)):
    print(f"{name:22s} exact E[r] {final(records, 'reward_exact').round(2)}, greedy accuracy "
          f"{final(records, 'greedy_accuracy')}, token accuracy on the demos {final(records, 'token_accuracy').round(2)}")

# The noisy demonstrations' own distribution, exactly: each position holds the sorted token with probability
# 0.7 + 0.3/5 (kept, or replaced by itself) and each other token with 0.3/5, independently.
every = torch.cartesian_prod(*[torch.arange(5)] * 3)  # int[125 pos]: every response
right = every.unsqueeze(0) == task.prompts.sort(dim=-1).values.unsqueeze(1)  # bool[prompt 125 pos]
demo_probs = torch.where(right, 0.7 + 0.3 / 5, 0.3 / 5).double().prod(dim=-1)  # float64[prompt 125]
demo_rewards = task.reward_fn("inclusion-ordering")(task.prompts, every.expand(3, -1, -1)).double()
demo_reward = float((demo_probs * demo_rewards).sum(-1).mean())
noisy_reward, noisy_tokens = final(sft_noisy, "reward_exact"), final(sft_noisy, "token_accuracy")
print(f"the noisy demonstrations' distribution: exact E[r] {demo_reward:.2f}, right tokens {0.7 + 0.3 / 5:.2f}; "
      f"SFT on noisy demos, mean over the {len(SEEDS)} seeds: exact E[r] {noisy_reward.mean():.2f}")
assert noisy_reward[0] > demo_reward > noisy_reward[1:].max() and abs(noisy_reward.mean() - demo_reward) < 0.05
assert noisy_tokens[0] > 0.76 + 0.1 and noisy_tokens[1:].max() < 0.76 + 0.02

# %% [markdown]
# On optimal demonstrations every seed's greedy response sorts all three prompts, and the exact expected
# reward (`reward_exact`, a sum over all 125 responses) is close to the optimum, 5. On noisy ones the
# greedy responses still sort (the most frequent token at each position is still the right one), but
# the expected reward is lower: the policy has learned to put probability on the noise, as the forward
# KL says it must, and no seed's token accuracy on its demonstrations reaches 1, since a replaced token
# is not predictable. Its greedy tokens are the sorted ones, so a run's token accuracy is the share of
# right tokens in *its* fixed set of 10 demonstrations per prompt.
#
# What does imitation reach, then? Not the reward of the distribution the demonstrations were drawn from
# (the last line: 4.04), but that of the demonstrations it was given. Seed 0's set happened to hold far
# more right tokens than the distribution's 0.76 (its token accuracy, 0.89), and its SFT policy ends
# above 4.04; the other seeds' sets hold about 0.76 or fewer, and their policies end below it. Averaged
# over the seeds the two agree closely. Imitation copies its demonstrations, luck included: a clean draw
# of noisy demonstrations teaches better than their distribution, a dirty one worse.
#
# ## 2. Expert iteration is REINFORCE with a 0/1 reward
#
# Expert iteration (CS336 assignment 5; also called rejection-sampling fine-tuning) needs no
# demonstrations: each epoch it samples G responses per prompt from the current policy, keeps those
# whose reward passes a filter F (here `reward >= 4`), and takes SFT steps on the kept ones. At the
# sampling policy, `E[F(R) grad log pi(y)] = grad P(F(R) = 1)`: the expected update is the policy
# gradient of the probability of passing the filter (claim 31). The check below computes both sides
# exactly for the lecture's initial policy on its first prompt.

# %%
policy = make_policy("factorized", 5, 3, 3, 10, torch.Generator().manual_seed(5)).double()
prompt = task.prompts[:1]
rewards = torch.stack([task.reward_fn("inclusion-ordering")(prompt, y.view(1, 1, 3))[0, 0]
                       for y in torch.cartesian_prod(*[torch.arange(5)] * 3)]).double()  # float[125]
log_pi = all_log_probs(policy, prompt)[0]
passes = (rewards >= 4).double()
filtered_imitation = flat_grad((log_pi.exp().detach() * passes * log_pi).sum(), policy)
grad_p_pass = flat_grad((log_pi.exp() * passes).sum(), policy)
grad_reward = flat_grad((log_pi.exp() * rewards).sum(), policy)  # the policy gradient of E[r], for scale
print(f"P(reward >= 4) = {float((log_pi.exp() * passes).sum().detach()):.4f}; "
      f"|E[F grad log pi] - grad P(F)| = {float((filtered_imitation - grad_p_pass).norm()):.1e} "
      f"(|grad P(F)| = {float(grad_p_pass.norm()):.4f}; |grad E[r]| = {float(grad_reward.norm()):.4f})")

# %%
ei = train(task, [TrainConfig(loss="expert-iteration", ei_filter="threshold", reward_threshold=4.0, seed=s,
                              **SHORT) for s in SEEDS])
grpo = train(task, [TrainConfig(delta="centered", loss="clipped", optimum_metrics=True, seed=s, **SHORT)
                    for s in SEEDS])
drawn = ei.epoch_metrics["samples_drawn"][:, -1]
print(f"expert iteration: exact E[r] {final(ei, 'reward_exact').round(2)}, samples drawn {drawn}, "
      f"kept {final(ei, 'samples_kept')}")
print(f"GRPO (centered, clipped), the same {int(drawn[0])} samples: exact E[r] {final(grpo, 'reward_exact').round(2)}")
print(f"means over the seeds: expert iteration {final(ei, 'reward_exact').mean():.2f}, "
      f"GRPO {final(grpo, 'reward_exact').mean():.2f}")

# %% [markdown]
# The two sides agree to rounding error: imitating the responses that pass is exactly REINFORCE whose
# reward is 1 for passing and 0 otherwise. At the initial policy, on the first prompt, only about one
# sample in seventy passes, so the gradient is small: |grad P(F)| is a small fraction of |grad E[r]|. Both methods drew the same 900 samples per run. Expert iteration's signal is
# only as good as its filter: a run whose policy rarely reaches the threshold keeps almost nothing (look
# at the kept counts) and has nothing to imitate, while GRPO's centered deltas use every sample, good or
# bad, and give each a signed weight. On these seeds GRPO's exact expected reward is the higher on
# average. `figures/RESULTS.md` (section "Before RL") compares the methods over 20 seeds of the lecture's 100
# epochs, per sample drawn, with verdicts.
#
# ## 3. Where RL starts: GRPO and DPO from an SFT policy
#
# Now start RL from the noisy SFT policy of seed 0 (`--init-from` a run folder; here its policy.pt in a
# temporary folder). Its KL penalty and DPO's frozen reference are then that starting policy, as in the
# recipe "reference model: the SFT model rather than the raw pretrained one". The step metric `kl_exact`
# at the first step is the exact KL to the reference: 0 when the run starts at its reference. GRPO runs
# twice from it, with the penalty (`kl=0.05` to the frozen start) and without; DPO runs with the lab's
# defaults: online pairs (each epoch draws G = 10 responses per prompt from the current policy and pairs
# the group's highest reward with its lowest) and argmax preferences (the higher reward always wins).

# %%
start_folder = Path(tempfile.mkdtemp())
save_policy(policy_from_state(sft_noisy.state, 0), start_folder / "policy.pt")
from_sft = dict(init_from=str(start_folder), **SHORT)
grpo_sft = train(task, [TrainConfig(delta="centered", loss="clipped", kl=0.05, kl_period=0, optimum_metrics=True,
                                    seed=s, **from_sft) for s in SEEDS])
grpo_free = train(task, [TrainConfig(delta="centered", loss="clipped", kl_period=0, optimum_metrics=True, seed=s,
                                     **from_sft) for s in SEEDS])  # no penalty; the frozen start is still measured
dpo_sft = train(task, [TrainConfig(loss="dpo", kl=0.1, seed=s, **from_sft) for s in SEEDS])
dpo_raw = train(task, [TrainConfig(loss="dpo", kl=0.1, seed=s, **SHORT) for s in SEEDS])
print(f"the SFT start (seed 0's noisy SFT): exact E[r] {final(sft_noisy, 'reward_exact')[0]:.2f}")
for name, records in (("GRPO from SFT", grpo_sft), ("DPO from SFT", dpo_sft), ("DPO from random", dpo_raw)):
    kl = records.step_metrics["kl_exact"]
    print(f"{name:17s} greedy accuracy {final(records, 'greedy_accuracy').round(2)}, final mean reward "
          f"{final(records, 'mean_reward').round(2)}, KL to the reference: first step {kl[:, 0].round(2)}, "
          f"last {kl[:, -1].round(2)}")
print(f"GRPO from random (section 2) greedy accuracy {final(grpo, 'greedy_accuracy').round(2)}")
for name, records in (("with the penalty", grpo_sft), ("without it", grpo_free)):
    print(f"GRPO from SFT, {name:16s}: exact E[r] {final(records, 'reward_exact').round(2)}, exact KL to the SFT "
          f"start {final(records, 'kl_initial_exact').round(2)}, greedy accuracy {final(records, 'greedy_accuracy')}")
held, free = (final(r, "kl_initial_exact") for r in (grpo_sft, grpo_free))
assert held.max() < 0.5 * free.min() and final(grpo_sft, "reward_exact").max() < final(grpo_free, "reward_exact").min()
assert (final(grpo_free, "greedy_accuracy") == 1).all()

fig, ax = plt.subplots(figsize=(7, 3.2))
for name, records in (("SFT, noisy demos", sft_noisy), ("expert iteration", ei), ("GRPO", grpo),
                      ("GRPO from SFT", grpo_sft), ("DPO from SFT", dpo_sft), ("DPO from random", dpo_raw)):
    ax.plot(records.epoch_metrics["mean_reward"].mean(0), label=name)
ax.set(xlabel="epoch", ylabel="mean reward of the samples", title="mean over 4 seeds (the optimum is 5)")
ax.legend(fontsize=7, ncol=2)
plt.show()

# %% [markdown]
# From the SFT start every GRPO and DPO run keeps sorting all three prompts, and its samples' mean
# reward ends above the start's exact expected reward: RL removes the noise that imitation copied.
# From a random start no DPO run and no GRPO run sorts every prompt in these 30 epochs. The KL columns
# show the reference at work: each run from SFT starts at its reference (KL 0) and ends well under one
# nat from it, while DPO from the random start ends several times further from its reference. That
# reference is the random policy, and staying close to it is exactly what a sorter should not do.
#
# Does GRPO's penalty keep what imitation taught? The last two lines answer it with a run without the
# penalty. Both keep sorting (greedy accuracy 1), so sorting survives either way; the penalty holds the
# policy less than half as far from the SFT start, and that costs reward: the runs without it end
# nearer the optimum, 5. What the penalty keeps here is the start's noise. On the true reward, with a
# start that already sorts, there is nothing for RL to unlearn; a penalty to the SFT policy earns its
# place when the reward has holes RL would exploit (lesson 11's reward model).
#
# ## Exercises
#
# Write the code where the `...` is, run the check below it, and open the collapsed solution if you
# are stuck.
#
# ### Exercise 1: the SFT loss
#
# Write `my_sft_loss(log_probs, mask)`: from per-token log-probs `float[run batch trial pos]` and the
# live-token mask `bool[run batch trial pos]` (responses of different lengths; a padding position's
# log-prob may hold any finite number), each run's loss `float[run]` as TRL's SFTTrainer computes it: the
# negative log-likelihood averaged over the completion tokens of the run's whole batch.

# %% tags=["exercise"]
def my_sft_loss(log_probs, mask):
    """-sum m l / sum m over (batch trial pos), per run."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_sft_loss(log_probs, mask):
#     """-sum m l / sum m over (batch trial pos), per run."""
#     live = mask.to(log_probs.dtype)
#     return -(log_probs * live).sum(dim=(-3, -2, -1)) / live.sum(dim=(-3, -2, -1))
# ```
#
# </details>

# %%
def test_sft_loss(my_sft_loss):
    draws = torch.Generator().manual_seed(7)
    log_probs = -torch.rand(2, 3, 4, 5, generator=draws, dtype=torch.float64) * 3
    lengths = torch.randint(1, 6, (2, 3, 4), generator=draws)
    mask = torch.arange(5) < lengths.unsqueeze(-1)  # live tokens: the first |y| positions; the rest is padding
    for padding in ("zeros", "other numbers"):  # the lab's log-probs are 0 on padding; a tokenizer's need not be
        if padding == "zeros":
            log_probs = log_probs * mask
        else:
            log_probs = torch.where(mask, log_probs, -torch.rand(log_probs.shape, generator=draws, dtype=torch.float64))
        yours = torch.as_tensor(my_sft_loss(log_probs, mask), dtype=torch.float64)
        assert yours.shape == (2,), f"one loss per run: expected shape (2,), got {tuple(yours.shape)}"
        worst = float((yours - sft_loss(log_probs, mask)).abs().max())
        hint = ("right with zeros on the padding but not with other numbers: does the mask select the tokens you "
                "sum, as well as the ones you count?" if padding == "other numbers" else
                "check the sign, and over which tokens and runs you average")
        assert worst < 1e-9, f"with {padding} on the padding your loss differs from the lab's by up to {worst:.3g}: {hint}"


check("Exercise 1, the SFT loss", test_sft_loss, my_sft_loss, without=(sft_loss,));

# %% [markdown]
# ### Exercise 2: expert iteration's group-best filter
#
# Write `my_group_best(rewards)`: from rewards `float[... trial]` (the last axis is a group), weights of
# the same shape, 1.0 for each response expert iteration keeps and 0.0 for the others. The `group-best`
# filter keeps every response that ties at its group's highest reward, and nothing from a group whose
# rewards are all equal (it has no better response to imitate).

# %% tags=["exercise"]
def my_group_best(rewards):
    """1.0 where a response is kept, 0.0 elsewhere."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_group_best(rewards):
#     """1.0 where a response is kept, 0.0 elsewhere."""
#     high = rewards.amax(dim=-1, keepdim=True)
#     low = rewards.amin(dim=-1, keepdim=True)
#     return ((rewards == high) & (high > low)).to(rewards.dtype)
# ```
#
# </details>

# %%
def test_group_best(my_group_best):
    draws = torch.Generator().manual_seed(11)
    rewards = torch.randint(0, 4, (6, 3, 5), generator=draws).double()
    rewards[0, 0] = 2.0  # a constant group
    yours = torch.as_tensor(my_group_best(rewards), dtype=torch.float64)
    assert yours.shape == rewards.shape, f"one weight per response: expected {tuple(rewards.shape)}"
    wrong = int((yours != group_best(rewards)).sum())
    assert wrong == 0, f"{wrong} of the {rewards.numel()} responses are kept where they should not be, or the reverse"


check("Exercise 2, the group-best filter", test_group_best, my_group_best, without=(group_best,));

# %% [markdown]
# ### Exercise 3: DPO's reference after SFT
#
# `dpo_sft` above started from the noisy SFT policy. Write `my_reference_logps(responses)`: the sequence
# log-probs `log pi_ref(y | x)` of responses `int[batch trial pos]` on the training prompts, under the
# reference that run's DPO loss used. Two policies are at hand: `sft_start`, the policy the run started
# from, and `random_start`, seed 0's random initial policy;
# `sequence_log_probs(policy, task.prompts, responses)` gives a policy's sequence log-probs.

# %%
sft_start = policy_from_state(sft_noisy.state, 0)
random_start = make_policy("factorized", 5, 3, 3, 10, torch.Generator().manual_seed(0))


# %% tags=["exercise"]
def my_reference_logps(responses):
    """log pi_ref(y | x) of DPO from SFT: float[batch trial]."""
    return ...  # your code here


# %% [markdown] tags=["solution"]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# def my_reference_logps(responses):
#     """log pi_ref(y | x) of DPO from SFT: float[batch trial]."""
#     return sequence_log_probs(sft_start, task.prompts, responses)
# ```
#
# </details>

# %%
def test_reference(my_reference_logps):
    responses = torch.tensor(dpo_sft.samples[0].responses[0])  # the first epoch's groups of run 0
    yours = torch.as_tensor(my_reference_logps(responses)).detach().double()
    assert yours.shape == responses.shape[:-1], f"one log-prob per response: expected {tuple(responses.shape[:-1])}"
    reference = sequence_log_probs(sft_start, task.prompts, responses).detach().double()
    # the run's own record: a reference equal to its start has KL 0 to it at the first step
    assert float(dpo_sft.step_metrics["kl_exact"][0, 0]) == 0.0
    worst = float((yours - reference).abs().max())
    assert worst < 1e-5, f"your log-probs differ from those of the run's reference by up to {worst:.3g}"


check("Exercise 3, DPO's reference after SFT", test_reference, my_reference_logps);

# %% [markdown]
# The lab's options for what this lesson did: `lab run --loss sft --demos optimal|noisy|policy`,
# `lab run --loss expert-iteration --ei-filter group-best|threshold --reward-threshold 4`,
# `lab run --init-from RUN_FOLDER` (GRPO or DPO from a finished run, that run's policy as the reference),
# and `--max-grad-norm 1.0` (TRL's default clipping) for any of them; each also in `lab sweep`.
