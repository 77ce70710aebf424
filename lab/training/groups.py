"""One epoch's groups and what the training loop keeps of them (`lab.training.train`).

    groups:   y ~ pi_theta(. | x), G per prompt;  m = live tokens;  r = R(x, y);  d = deltas(r)
              (a critic run's d: its GAE advantages per token, `lab.training.critic`; a `--kl-in reward`
              run's d = deltas(r - beta * sum_pos k(l_old, l_ref)), its critic's returns the same)
    kept:     the samples every `sample_every` epochs, each epoch's greedy responses, rewards and lengths
    records:  the epoch metrics computed for all epochs at once after the loop, then `Records`
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from lab.core.deltas import compute_deltas
from lab.core.kl import penalized_rewards
from lab.training.config import TrainConfig
from lab.training.critic import CriticRuns, critic_runs, policy_parameter_count
from lab.training.divergence import DivergenceGuard
from lab.training.kinds import Kind
from lab.training.methods import METHODS
from lab.training.lengths import length_metrics, response_lengths
from lab.training.metrics import greedy_log, sample_metrics
from lab.training.optimum import OptimumTracker, ProgressTracker, ProxyTracker
from lab.training.records import Records, Samples
from lab.training.runs import RunSettings, records_of
from tasks import LEARNED, Task


@dataclass(frozen=True)
class Groups:
    """One epoch's sampled groups, what its S steps train on."""

    responses: Tensor
    """int[run batch trial pos]"""
    mask: Tensor | None
    """bool[run batch trial pos]: the live tokens (None: every position is live)"""
    rewards: Tensor
    """float[run batch trial]"""
    deltas: Tensor
    """float[run batch trial] (a critic run's: its first token's advantage, as samples.txt shows it)"""
    token_deltas: Tensor | None = None
    """float[run batch trial pos]: one delta per token, when some run has a critic (GAE's advantages;
    the other runs' deltas repeated); None: every run's deltas broadcast over the positions"""
    sampling_log_probs: Tensor | None = None
    """float[run batch trial pos]: log mu of the sampled tokens where some run's sampler is not its policy (a
    stale or mismatched one: `lab.training.sampler_runs`); None: mu is the policy"""


@dataclass
class History:
    """What the epoch metrics need of each epoch; they are computed for all epochs at once after the loop."""

    rewards: list[Tensor] = field(default_factory=list)  # float[run batch trial]
    lengths: list[Tensor] = field(default_factory=list)  # int[run batch trial]
    correct: list[Tensor] = field(default_factory=list)  # bool[run batch trial]
    greedy: list[Tensor] = field(default_factory=list)  # int[run batch pos]
    heldout_greedy: list[Tensor] = field(default_factory=list)
    samples: list[Samples] = field(default_factory=list)


def finish(task: Task, configs: list[TrainConfig], kind: Kind, optimum: Tensor, step_log: dict, epoch_log: dict,
           guard: DivergenceGuard, history: History, seconds: float, step_logs: list[dict], method_epochs: dict,
           trackers: list[ProgressTracker], critic: CriticRuns | None) -> Records:
    """The records of the loop: its logs, with the method's (DPO's, SFT's), the gradient clip's and the critic's
    metrics where a run has them. `step_logs`: more step metrics, name -> one float[step run] per epoch;
    `method_epochs`: the method's epoch metrics, name -> one float[run] per epoch."""
    for tracker in trackers:
        epoch_log.update(tracker.epoch_metrics())  # float[run epoch]
    epoch_log.update({name: torch.stack(values, dim=1) for name, values in method_epochs.items()})  # float[run epoch]
    for log in step_logs:
        step_log.update({name: [torch.cat(values)] for name, values in log.items()})  # float[step run]
    policy = kind.policy
    parameters = {"policy": policy_parameter_count(policy), "critic": None if critic is None else critic.parameter_count}
    return records_of(configs, task.prompts, optimum, step_log, epoch_log, guard, policy, samples=history.samples,
                      greedy_responses=history.greedy[-1].cpu().numpy(), seconds=seconds,
                      eos=kind.eos, exploration_exact=kind.exact, parameters=parameters,
                      **({} if critic is None else critic.final_state()),
                      critic_log=None if critic is None else critic.metrics(len(configs)))


def extensions(configs: list[TrainConfig], kind: Kind, settings: RunSettings, generators: list[torch.Generator],
               device: torch.device) -> tuple[object, list[ProgressTracker], CriticRuns | None]:
    """The batch's method (`lab.training.methods.METHODS`), and what some batches add to the loop: exact trackers
    (the distance to pi* of the initial policy, a supervised run's progress, a learned reward's gold), a critic."""
    shared = configs[0]
    method = METHODS[shared.method].of(configs, kind, settings, generators, device)
    rewards = [c.reward for c in configs]
    tracker = (OptimumTracker(kind, rewards, [c.kl for c in configs], shared.optimum_metrics)
               if (method.tracks_optimum or shared.optimum_metrics) and kind.exact else
               ProgressTracker(kind, rewards)
               if method.tracks_progress and kind.exact and kind.eos is None else None)  # see ProgressTracker
    # a learned reward's gold, proxy and d on both policies: what training against a reward model is for
    proxy = ProxyTracker(kind, rewards) if any(r.startswith(LEARNED) for r in rewards) else None
    trackers = [t for t in (tracker, proxy) if t is not None]
    critic = CriticRuns(kind, configs, critic_runs(configs), device) if critic_runs(configs) else None
    return method, trackers, critic


def keep_greedy(history: History, kind: Kind, prompts: Tensor, eval_prompts: Tensor | None) -> None:
    """The epoch's greedy responses, int[run batch pos], on the training prompts and the held-out ones."""
    history.greedy.append(kind.greedy(prompts))
    if eval_prompts is not None:
        history.heldout_greedy.append(kind.greedy(eval_prompts))


def sample_groups(kind: Kind, settings: RunSettings, shared: TrainConfig, critic: CriticRuns | None,
                  policies: tuple[list[Tensor], list[Tensor], bool] | None = None, sampler=None) -> Groups:
    """Draw the epoch's groups from the sampling policy and score them; the critic runs' advantages per token.
    `policies`: (the policy's parameters, the reference's, whether the reference is the policy), which the
    `--kl-in reward` runs' penalty reads (None: no such run). `sampler`: the batch's `SamplerRuns` (stale,
    mismatched or dynamic sampling), None: each run samples its policy once."""
    with torch.no_grad():
        # in the run's dtype: a float64 run makes its deltas in float64 (the task's rewards are float32)
        score = lambda y: settings.reward_groups.apply(  # noqa: E731
            lambda name, y: kind.rewards[name](kind.prompts, y), y).to(shared.dtype.torch)
        responses, mu = (kind.sample(), None) if sampler is None else sampler.draw(kind, score)
        mask = kind.live_tokens(responses)
        rewards = score(responses)
        sampling_log_probs = None if mu is None else kind.log_probs(mu, responses, mask)[0]
        # what the deltas (and a critic's returns) are made from: the task's rewards, KL-penalised where asked
        shaped = rewards if policies is None else reward_penalty(kind, settings, rewards, responses, mask, *policies)
        deltas = settings.delta_groups.apply(  # float[run batch trial]
            lambda mode, r: compute_deltas(r, mode, shared.std_eps, shared.std_unbiased), shaped)
        if critic is None:
            return Groups(responses, mask, rewards, deltas, sampling_log_probs=sampling_log_probs)
        advantages = critic.advantages(responses, mask, shaped)  # float[critic-run batch trial pos]
        token_deltas = deltas.unsqueeze(-1).expand(*responses.shape).clone().index_copy_(0, critic.runs, advantages)
        deltas = deltas.index_copy(0, critic.runs, advantages[..., 0])
    return Groups(responses, mask, rewards, deltas, token_deltas, sampling_log_probs)


def reward_penalty(kind: Kind, settings: RunSettings, rewards: Tensor, responses: Tensor, mask: Tensor | None,
                   parameters: list[Tensor], reference: list[Tensor], fresh_reference: bool) -> Tensor:
    """r - beta * sum_pos k(l_old, l_ref) on the `--kl-in reward` runs (each with its estimator k), the other
    runs' rewards unchanged: float[run batch trial]. l_old: the sampling policy's log-probs (the policy now)."""
    runs = settings.reward_kl_runs
    log_probs = kind.log_probs(parameters, responses, mask)[0]  # float[run batch trial pos]
    ref_log_probs = log_probs if fresh_reference else kind.log_probs(reference, responses, mask)[0]
    chosen = [t if t is None else t[runs] for t in (rewards, log_probs, ref_log_probs, mask, settings.beta)]
    penalised = settings.reward_kl_groups.apply(
        lambda k, r, lp, ref, m, beta: penalized_rewards(r, lp, ref, beta, k, m), *chosen)
    return rewards.index_copy(0, runs, penalised)


def correct(kind: Kind, prompts: Tensor, responses: Tensor, targets: Tensor) -> Tensor:
    """bool[... batch trial]: each response int[... batch trial pos] is a correct answer to its prompt (prompts
    int[batch pos]): the target itself (targets int[batch 1 pos]), or where the task names a 0/1 reward for it
    (`Task.correct`), one that scores 1 (any of a prompt's rearrangements, `tasks.permutation`)."""
    if kind.task.correct is None:
        return (responses == targets).all(dim=-1)
    return kind.task.reward_for(kind.task.correct, getattr(kind, "eos", None))(prompts, responses) == 1


def keep_samples(history: History, epoch: int, groups: Groups, targets: Tensor, write: bool,
                 pairs: Tensor | None = None, kind: Kind | None = None) -> None:
    """Keep what the epoch metrics need of the groups, and the groups themselves when `write` (samples.txt);
    `pairs`: a DPO batch's int[run batch 2] trial indices of each group's (chosen, rejected) pair, -1 for none."""
    history.rewards.append(groups.rewards)
    history.lengths.append(response_lengths(groups.responses, groups.mask))
    history.correct.append((groups.responses == targets.unsqueeze(-2)).all(dim=-1) if kind is None else
                           correct(kind, kind.prompts, groups.responses, targets.unsqueeze(-2)))
    if write:
        history.samples.append(Samples(epoch, groups.responses.cpu().numpy(), groups.rewards.cpu().numpy(),
                                       groups.deltas.cpu().numpy(), None if pairs is None else pairs.cpu().numpy()))


def epoch_metrics(kind: Kind, settings: RunSettings, shared: TrainConfig, history: History,
                  training: tuple[Tensor, Tensor, Tensor], eval_prompts: Tensor | None) -> dict[str, Tensor]:
    """Every epoch metric, float[run epoch] each: the samples', the lengths', the greedy responses' and
    the exact exploration of each epoch's sampling policy. `training`: (prompts, targets, optimum)."""
    heldout = None
    if eval_prompts is not None:
        eval_targets = kind.targets(eval_prompts)
        heldout = (eval_prompts, eval_targets, kind.optimum(eval_prompts, eval_targets))

    def score(some_prompts: Tensor, greedy: Tensor) -> Tensor:
        """Each run's reward of argmax responses int[run epoch batch pos]: float[run epoch batch]."""
        return settings.reward_groups.apply(lambda name, y: kind.rewards[name](some_prompts, y.unsqueeze(-2)),
                                            greedy).squeeze(-1)

    # a single reward has no spread: std 0 for G = 1 (Bessel's correction would give NaN)
    correction = 1 if shared.std_unbiased and shared.group_size > 1 else 0
    with torch.no_grad():
        log = sample_metrics(torch.stack(history.rewards, dim=1), training[2], correction)
        log.update(length_metrics(torch.stack(history.lengths, dim=1), torch.stack(history.correct, dim=1)))
        log.update(greedy_log(score, training, history.greedy, heldout, history.heldout_greedy,
                              lambda some_prompts, responses, targets: correct(  # one response per prompt: trial 1
                                  kind, some_prompts, responses.unsqueeze(-2), targets.unsqueeze(-2)).squeeze(-1)))
        log.update(kind.exploration())
    return log
