"""What a training call returns, what each metric means, and how it is written.

Records hold one row per (run, optimizer step). In a run's `metrics.csv` the
per-epoch metrics (those of the epoch's samples and of the greedy evaluation)
repeat on every step row of their epoch, so it is one flat table; a sweep writes
them once per epoch (`lab.files.tables`). Files are written atomically
(`lab.files.output_folders`): an interrupted run leaves no file that looks complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lab.core.modes import PPO_CLIP, TrainingLoss
from lab.training.lengths import LENGTH_METRICS

PPO_CLIPPED = ", ".join(loss.value for loss in TrainingLoss if loss.entry.clip_metrics == PPO_CLIP)
"""The losses whose clip metrics are PPO's (their `TrainingLoss` entries say so), as the glossary names them."""

STEP_METRICS = {
    "loss": "the minimised loss: surrogate + beta * KL (its value is not progress; the reward is)",
    "pg_loss": "the surrogate alone (the --loss's per-token loss, aggregated)",
    "kl": "k3 estimate of KL(pi_theta || pi_ref) per sequence: summed over positions, averaged over the "
          "epoch's samples (recorded also when beta = 0). On an epoch's first step the samples come from "
          "pi_theta itself and k3 is unbiased; on later steps they are stale (drawn from pi_old), so `kl` is "
          "biased there (claim 7) while `kl_exact` stays exact. TRL `kl` and verl `actor/kl_loss` average "
          "over tokens instead: theirs = ours / response length",
    "kl_exact": "exact KL(pi_theta || pi_ref) per sequence, summed over positions and averaged over prompts: "
                "what `kl` estimates, without its sampling noise, heavy tail or stale-sample bias (the toy's "
                "factorised policy makes it cheap; autoregressive runs record it exactly at each epoch's first "
                "step only, empty at the others)",
    "ratio_mean": "mean of pi_theta / pi_old over tokens (1 on an epoch's first step). CleanRL's "
                  "`old_approx_kl` (mean of -log ratio) and `approx_kl` (mean of ratio - 1 - log ratio) and "
                  "verl's `actor/ppo_kl` come from these ratios: a KL between the sampling and the current "
                  "policy, not to the reference",
    "ratio_max": "largest pi_theta / pi_old over tokens",
    "clip_fraction": "the loss's clip metrics (its entry's `clip_metrics`, lab.core.modes), low + high; PPO's "
                     f"({PPO_CLIPPED}): tokens whose clipped term has no gradient, ratio > 1 + eps with "
                     "delta > 0, or ratio < 1 - eps with delta < 0 (a token whose delta is 0 never counts), as if "
                     "eps applied in every such loss (TRL `clip_ratio/region_mean`, verl `actor/pg_clipfrac`; "
                     "CleanRL's `clipfrac` differs: |ratio - 1| > eps whatever the delta's sign); the high side's bound "
                     "is 1 + epsilon_high, and at --importance-sampling-level sequence a token counts where its "
                     "response's ratio is out (luspo always). CISPO's (TRL `cispo_clip_ratio`) is something else: "
                     "tokens with delta > 0 whose weight was capped at eps_max, which keep their gradient, scaled; its "
                     "low side is 0. SAPO's and VESPO's are PPO's as a diagnostic: they clip nothing. Empty for DPO and "
                     "the supervised losses, which have no ratio clip and no deltas",
    "clip_low_fraction": "ratio < 1 - eps with delta < 0 (TRL `clip_ratio/low_mean`; not verl's "
                         "`actor/pg_clipfrac_lower`, which counts dual-clip events: delta < 0 and ratio "
                         "above clip_ratio_c = 3)",
    "clip_high_fraction": "ratio > 1 + eps with delta > 0 (TRL `clip_ratio/high_mean`)",
    "entropy": "mean per-position policy entropy in nats on the training prompts (TRL `entropy`)",
}
"""Measured on every optimizer step, before that step's update."""

EPOCH_METRICS = {
    "mean_reward": "mean reward of the epoch's samples (TRL `reward`; with one reward function also "
                   "`rewards/<func>/mean`)",
    "reward_fraction": "mean of reward / best achievable reward of its prompt",
    "reward_std": "std of the rewards within each group, averaged over prompts; Bessel-corrected when "
                  "`std_unbiased` (the default), the population std otherwise. TRL before 0.27 logged this "
                  "as `reward_std`; TRL >= 0.27 logs the std over the whole batch under that name",
    "zero_std_fraction": "fraction of groups whose rewards are all equal: no GRPO signal "
                         "(TRL `frac_reward_zero_std`)",
    "greedy_reward": "mean reward of the argmax response per training prompt, after the epoch's steps",
    "greedy_fraction": "greedy_reward as a fraction of the optimum",
    "greedy_accuracy": "fraction of training prompts whose argmax response is exactly sorted",
    "heldout_greedy_reward": "greedy_reward on the held-out prompts (empty without them)",
    "heldout_greedy_accuracy": "greedy_accuracy on the held-out prompts (empty without them)",
    "optimal_prob": "exact probability that one response sampled by the epoch's sampling policy reaches its "
                    "prompt's optimum reward, mean over the training prompts (Monte Carlo past the "
                    "enumeration limit: summary.json `exploration_exact`)",
    "zero_std_prob": "exact probability that a group of G responses has all-equal rewards (no GRPO signal), "
                     "sum over reward values v of P(R = v)^G, mean over prompts: what zero_std_fraction "
                     "estimates",
    **LENGTH_METRICS,
}
"""Measured once per epoch; in a run's metrics.csv repeated on its step rows, in a sweep's
`metrics_epoch` table stored once (`lab.files.tables`)."""

DPO_STEP_METRICS = {
    "chosen_rewards": "DPO: mean implicit reward beta (log pi_theta - log pi_ref) of the pairs' winners, over kept "
                      "pairs (TRL `rewards/chosen`)",
    "rejected_rewards": "DPO: the same for the losers (TRL `rewards/rejected`)",
    "reward_accuracy": "DPO: fraction of kept pairs whose winner has the higher implicit reward (TRL "
                       "`rewards/accuracies`)",
    "reward_margin": "DPO: mean chosen minus rejected implicit reward, beta h (TRL `rewards/margins`)",
    "chosen_logps": "DPO: mean sequence log-prob log pi_theta of the winners (TRL `logps/chosen`; with "
                    "--ipo-logps token-mean each divided by its token count, as TRL's IPO, and the rewards with it)",
    "rejected_logps": "DPO: the same for the losers (TRL `logps/rejected`)",
    "pair_fraction": "DPO: fraction of the step's possible pairs that count (online: groups whose rewards are not "
                     "all equal; argmax: pairs that are not ties)",
}
"""Recorded on every step of a DPO run (`--loss dpo`) only, before that step's update; its `loss` is the DPO
loss and its `pg_loss` the same. Other runs' files have none of these columns."""

GRAD_CLIP_METRICS = {
    "grad_norm": "--max-grad-norm: the global L2 norm of the step's policy gradient over all its parameters, before "
                 "clipping (TRL `grad_norm`)",
    "grad_clipped": "--max-grad-norm: 1 where the step's gradient was scaled down to the limit, 0 where it was "
                    "within it; its mean over steps is the fraction of steps clipped",
}
"""Recorded on every step of a batch where some run clips its gradient (`--max-grad-norm`; NaN-free for the runs
without a limit, whose `grad_clipped` is 0); other runs' files have none of these columns."""

OPTIMUM_METRICS = {
    "kl_to_optimum": "exact KL(pi_theta || pi*) per sequence, mean over prompts, pi* = pi_ref exp(r / beta) / Z with "
                     "beta = --kl and pi_ref the initial policy (lab.exact.optimum); after the epoch's steps",
    "objective_exact": "exact J_beta(pi_theta) = E[r] - beta KL(pi_theta || pi_ref), mean over prompts",
    "objective_gap": "J_beta(pi*) - J_beta(pi_theta) = beta kl_to_optimum (claim 26): how far from the optimum the "
                     "objective is",
}
"""Recorded each epoch for DPO runs and for runs with `optimum_metrics`, on enumerable response spaces only.
A DPO run's `kl_exact` (a step metric) is the exact KL to its reference, the initial policy."""

GREEDY_METRICS = ("greedy_reward", "greedy_fraction", "greedy_accuracy", "heldout_greedy_reward",
                  "heldout_greedy_accuracy")
"""The epoch metrics taken after the epoch's steps (the others describe its samples, taken before)."""

CRITIC_STEP_METRICS = {
    "vf_loss": "the critic's value loss, verl's clipped one: 0.5 x token mean of max((V - R_t)^2, (V_clip - R_t)^2) "
               "with V_clip = V_old + clip(V - V_old, -cliprange_value, cliprange_value) (verl `critic/vf_loss`, TRL "
               "`loss/value_avg`), before that step's critic update",
    "vf_clipfrac": "fraction of live tokens where the clipped term of the value loss is the larger (verl "
                   "`critic/vf_clipfrac`, TRL `val/clipfrac_avg`)",
}
"""`--delta gae` only: measured on every optimizer step (NaN for the runs without a critic)."""

CRITIC_EPOCH_METRICS = {
    "values_mean": "mean of the critic's values V_old(s_t) over the epoch's live tokens (verl `critic/vpred_mean`)",
    "vf_explained_var": "1 - Var(R_t - V_old) / (Var(R_t) + 1e-5) over the epoch's live tokens, Bessel-corrected, "
                        "as verl computes `critic/vf_explained_var`: 1 for a critic that predicts its targets, about "
                        "0 for one no better than their mean",
    "value_error_exact": "exact E_{s~pi}[(V_psi(s) - V^pi(s))^2] of the critic that made the epoch's values, over "
                         "every state the epoch's sampling policy visits, once per live token, so each prompt weighs "
                         "as its expected number of live tokens (lab.exact.critic_error); what no PPO "
                         "implementation can log",
    "value_error_exact_<t>": "the same at the states before token t only (its expectation given t is live); the "
                             "factorised policy's one state is the prompt, so every t has the total",
}
"""`--delta gae` only: measured once per epoch (NaN for the runs without a critic); in metrics.csv and a
sweep's tables after the other columns, only when some run has a critic."""


METHOD_STEP_METRICS = {
    "demo_logps": "SFT, expert iteration: mean sequence log-prob log pi_theta(y | x) of the responses the step trains "
                  "on (the demonstrations, or the kept samples; NaN where none is kept)",
    "token_accuracy": "SFT, expert iteration: fraction of the trained responses' live tokens where the policy's most "
                      "likely next token (given the response's prefix) is the response's (TRL `mean_token_accuracy`); "
                      "autoregressive runs measure it at each epoch's first step only, empty at the others",
}
"""The step metrics of the supervised methods (`--loss sft`, `--loss expert-iteration`), recorded by their runs
only, before each step's update; their `loss` (and `pg_loss`) is the NLL averaged over the trained tokens."""

SUPERVISED_EPOCH_METRICS = {
    "samples_drawn": "SFT, expert iteration: responses sampled from the policy to train on, from the start (SFT: 0; "
                     "expert iteration: G per prompt each epoch)",
    "samples_kept": "SFT, expert iteration: of those, the ones kept to train on, from the start (SFT: its "
                    "demonstrations, counted once)",
    "samples_trained": "SFT, expert iteration: responses trained on, one per response and step, from the start",
    "reward_exact": "SFT, expert iteration (factorised policy): exact expected reward E_theta[r] of the policy after "
                    "the epoch's steps, mean over prompts (enumerable response spaces only)",
    "kl_initial_exact": "SFT, expert iteration (factorised policy): exact KL(pi_theta || pi_0) to the policy the run "
                        "started from, per sequence, mean over prompts, after the epoch's steps (enumerable response "
                        "spaces only; an autoregressive run's kl_exact is the same KL, at each epoch's first step)",
}
"""Recorded once per epoch: the counts for the supervised methods' runs only; `reward_exact` and `kl_initial_exact`
also for runs with `optimum_metrics`."""


PROXY_EPOCH_METRICS = {
    "gold_reward_exact": "--reward learned:PATH: exact expected gold reward E_theta[R] of the policy after the epoch's "
                         "steps, R the true reward its reward model was fitted to, mean over prompts",
    "proxy_reward_exact": "--reward learned:PATH: exact expected score E_theta[r_phi] of the reward model that trains the "
                          "run (its `mean_reward` is the same score on the epoch's samples)",
    "d": "--reward learned:PATH: sqrt(kl_initial_exact), the distance Gao, Schulman and Hilton (2023) plot gold and "
         "proxy reward against",
}
"""Recorded once per epoch, with `kl_initial_exact`, by every run of a batch where some run trains against a reward
model (a true reward's run has gold = proxy)."""


SAMPLER_EPOCH_METRICS = {
    "groups_drawn": "--dynamic-sampling: groups drawn this epoch, over all prompts (one per prompt without it); "
                    "what DAPO's sampler would generate (lab.training.sampler_runs)",
    "groups_kept": "--dynamic-sampling: of the epoch's batch, the groups with signal (rewards not all equal)",
    "groups_discarded": "--dynamic-sampling: groups drawn and dropped for having no signal (drawn - prompts)",
}
"""Recorded once per epoch by every run of a batch where some run uses dynamic sampling."""

SAMPLER_STEP_METRICS = {
    "importance_weight_mean": "--importance-sampling-correction: mean weight over live tokens (1 without it)",
    "off_policy_kept_fraction": "--off-policy-mask-threshold: fraction of responses the mask keeps (1 without it)",
    "entropy_coef": "--adaptive-entropy: the entropy coefficient the step applied (TRL `entropy_coef`; 0 while "
                    "the entropy is above target; a run without it: its fixed --entropy-coef)",
}
"""Recorded on every step of a batch where some run uses the matching setting (issue 38)."""

TRACKED_EPOCH_METRICS = {**OPTIMUM_METRICS, **SUPERVISED_EPOCH_METRICS, **PROXY_EPOCH_METRICS, **SAMPLER_EPOCH_METRICS}
"""The exact epoch metrics some batches add (`lab.training.optimum`'s trackers), in the order files show them."""


def is_critic_metric(name: str) -> bool:
    """A critic metric's name (value_error_exact_<t> included)."""
    return name in CRITIC_STEP_METRICS or name in CRITIC_EPOCH_METRICS or name.startswith("value_error_exact_")


INDEX_COLUMNS = ("epoch", "step", "inner_step")
METRIC_COLUMNS = (*INDEX_COLUMNS, *EPOCH_METRICS, *STEP_METRICS)


def epoch_metric_names(records: Records) -> list[str]:
    """The epoch metrics a records holds: EPOCH_METRICS, then the optimum metrics where recorded, then the
    critic's where some run has a critic."""
    return [*EPOCH_METRICS, *(name for name in TRACKED_EPOCH_METRICS if name in records.epoch_metrics),
            *records.critic_columns()[1]]


def step_metric_names(records: Records) -> list[str]:
    """The step metrics a records holds: STEP_METRICS, then the DPO metrics of a DPO run, then the critic's
    where some run has a critic."""
    return [*STEP_METRICS, *(name for name in (*DPO_STEP_METRICS, *METHOD_STEP_METRICS, *GRAD_CLIP_METRICS,
                                               *SAMPLER_STEP_METRICS)
                             if name in records.step_metrics), *records.critic_columns()[0]]


def metric_columns(records: Records) -> tuple[str, ...]:
    """A metrics.csv's columns: METRIC_COLUMNS, then the other epoch metrics the records hold (optimum, critic),
    then the other step metrics (DPO, critic), so a run of the other losses and deltas keeps exactly its columns."""
    extra_epoch = epoch_metric_names(records)[len(EPOCH_METRICS):]
    extra_step = step_metric_names(records)[len(STEP_METRICS):]
    return (*METRIC_COLUMNS, *extra_epoch, *extra_step)


@dataclass
class Samples:
    """The epoch's batch for every run: responses int[run batch trial pos], rewards and deltas float[run batch trial]."""

    epoch: int
    responses: np.ndarray
    rewards: np.ndarray
    deltas: np.ndarray
    pairs: np.ndarray | None = None
    """a DPO batch's int[run batch 2]: trial indices of each group's (chosen, rejected) pair, -1 where the group
    gave none (online pairs); all -1 for offline pairs (they are not the groups); None for the other losses"""


@dataclass
class Records:
    """Everything a training call produced, for R runs of E epochs x S steps."""

    configs: list
    prompts: np.ndarray
    """int[batch pos]"""
    optimum: np.ndarray
    """float[run batch]: best achievable reward per prompt under each run's reward"""
    step_metrics: dict[str, np.ndarray]
    """name -> float[run epoch*steps]"""
    epoch_metrics: dict[str, np.ndarray]
    """name -> float[run epoch]"""
    samples: list[Samples] = field(default_factory=list)
    state: dict = field(default_factory=dict)
    """final parameters, name -> float[run ...] (cpu)"""
    greedy_responses: np.ndarray | None = None
    """int[run batch pos]: each run's final argmax response per training prompt"""
    seconds: float = 0.0
    exploration_exact: bool = True
    """whether `optimal_prob` and `zero_std_prob` are exact (else Monte Carlo, lab.exact.exploration; an
    autoregressive run past the enumeration limit leaves them and `kl_exact` empty, lab.exact.ar_exploration)"""
    eos: int | None = None
    """the EOS token id of variable-length responses (None: fixed length)"""
    divergence: list = field(default_factory=list)
    """per run: None, or the `lab.training.divergence.Divergence` where it stopped (its later records are NaN)"""
    critic_state: dict = field(default_factory=dict)
    """`--delta gae`: the critics' final parameters, name -> float[critic-run ...] (cpu), for the runs
    `critic_runs` in that order (a sweep of several batches keeps none)"""
    critic_runs: list = field(default_factory=list)
    parameters: dict = field(default_factory=dict)
    """free parameters of one run's policy and, with `--delta gae`, of its critic (None without):
    {"policy": int, "critic": int | None}"""

    def critic_columns(self) -> tuple[list[str], list[str]]:
        """The critic's (step, epoch) metric names these records hold, in glossary order (none without a critic)."""
        steps = [name for name in CRITIC_STEP_METRICS if name in self.step_metrics]
        epochs = [name for name in self.epoch_metrics if is_critic_metric(name)]
        return steps, epochs

    @property
    def num_runs(self) -> int:
        return len(self.configs)

    def diverged(self) -> np.ndarray:
        """bool[run]: the run diverged (`divergence`)."""
        return np.array([d is not None for d in self.divergence] or [False] * self.num_runs, dtype=bool)

    def final(self, name: str) -> np.ndarray:
        """A metric's last value per run, float[run]."""
        table = self.epoch_metrics if name in self.epoch_metrics else self.step_metrics
        return table[name][:, -1]
