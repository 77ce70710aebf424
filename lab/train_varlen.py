"""The training loop for variable-length responses (`TrainConfig.policy = autoregressive`).

    for epoch in 1..E:
        y ~ pi_theta(. | x), G per prompt, each ending at EOS or truncated at max_length
        m = live-token mask;  r = R(x, y) (variable-length rewards);  d = deltas(r)
        l_old, l_ref = masked per-token log-probs (frozen)
        repeat S times:
            L = agg(surrogate(l, d, l_old); m) + beta * C * agg(k3(l, l_ref); m)   -> one Adam step

The same algorithm as `lab.train` (which dispatches here), through the policy interface
(`lab.policies`) instead of the factorised model's fused fast path, with the live-token mask
applied to the loss, the KL and every token metric. R runs train as one batched computation and
a seed's run is the same alone or inside a sweep. Step metrics on tokens are means over live
tokens; `entropy` is the mean entropy of each live position's next-token distribution given the
sampled prefix; `kl_exact` is left empty (NaN): the exact sequence KL of this policy needs every
response (`lab.exact_varlen.sequence_kl`), too costly to record every step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

import lab.policies as P
from lab.aggregation import kl_term
from lab.config import TrainConfig, check_batchable
from lab.deltas import compute_deltas
from lab.divergence import DivergenceGuard
from lab.kl import freeze, k3, reference_due
from lab.lengths import length_metrics
from lab.losses import compute_loss
from lab.metrics import greedy_metrics, sample_metrics
from lab.optim import RunAdam
from lab.records import EPOCH_METRICS, GREEDY_METRICS, STEP_METRICS, Records, Samples
from lab.train import RunGroups
from tasks import Task
from tasks.sorting import variable_length_reward

LENGTH_MARGIN = 2
"""max_length = None means prompt length + LENGTH_MARGIN: room for sorted(x), EOS and one extra token."""


def resolve_max_length(config: TrainConfig, prompt_length: int) -> int:
    """The response cap of an autoregressive run; a ValueError when sorted(prompt) + EOS cannot fit."""
    cap = prompt_length + LENGTH_MARGIN if config.max_length is None else config.max_length
    if cap < prompt_length + 1:
        raise ValueError(f"max_length {cap} cannot hold the sorted prompt ({prompt_length} tokens) and EOS; "
                         f"use --max-length {prompt_length + 1} or more")
    return cap


def eos_targets(targets: Tensor, eos: int, length: int) -> Tensor:
    """sorted(prompt) followed by EOS padding: int[batch n] -> int[batch length]."""
    return torch.cat([targets, targets.new_full((targets.shape[0], length - targets.shape[1]), eos)], dim=-1)


@torch.no_grad()
def token_step_metrics(log_probs, old, ref, log_softmax, mask, deltas, clip_eps) -> dict[str, Tensor]:
    """The token metrics of one step over live tokens: float[run] each."""
    live = mask.float()
    tokens = live.sum(dim=(-3, -2, -1))
    rho = (log_probs - old).exp() * live  # 1 - 1 = 0 would be a ratio of 1 on padding; count live only
    eps = clip_eps.reshape(-1, 1, 1, 1)
    side = deltas.unsqueeze(-1)
    low = ((rho < 1 - eps) & (side < 0) & mask).sum(dim=(-3, -2, -1)) / tokens
    high = ((rho > 1 + eps) & (side > 0) & mask).sum(dim=(-3, -2, -1)) / tokens
    entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1) * live
    batch, trial = log_probs.shape[-3:-1]
    return dict(kl=k3(log_probs, ref).sum(dim=(-3, -2, -1)) / (batch * trial),  # padding: k3(0, 0) = 0
                ratio_mean=rho.sum(dim=(-3, -2, -1)) / tokens, ratio_max=rho.amax(dim=(-3, -2, -1)),
                clip_fraction=low + high, clip_low_fraction=low, clip_high_fraction=high,
                entropy=entropy.sum(dim=(-3, -2, -1)) / tokens)


def train_varlen(
    task: Task,
    configs: TrainConfig | Sequence[TrainConfig],
    generators: Sequence[torch.Generator] | None = None,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> Records:
    """Train one run or many together on variable-length responses; return their records."""
    configs = [configs] if isinstance(configs, TrainConfig) else list(configs)
    check_batchable(configs)
    shared = configs[0]
    device = torch.device(device)
    if generators is None:
        generators = [torch.Generator(device).manual_seed(c.seed) for c in configs]
    runs, steps = len(configs), shared.steps
    prompts = task.prompts.to(device)  # int[batch pos]
    eval_prompts = None if task.eval_prompts is None else task.eval_prompts.to(device)
    length = resolve_max_length(shared, prompts.shape[1])
    policy = P.make_stack(shared.policy, task.vocab_size, prompts.shape[1], length, shared.dim, list(generators))
    eos = P.ops_of(policy).eos(policy)
    reward = {c.reward: variable_length_reward(c.reward, eos) for c in configs}  # unknown names fail here

    per_run = lambda name: torch.tensor([getattr(c, name) for c in configs], device=device)  # noqa: E731
    parameters = list(policy.parameters())
    optimizer = RunAdam(parameters, per_run("lr").float(), shared.adam_betas, shared.adam_eps)
    beta, clip_eps = per_run("kl").float(), per_run("clip_eps").float()
    any_kl = any(c.kl > 0 for c in configs)
    reward_groups = RunGroups([c.reward for c in configs], device)
    delta_groups = RunGroups([c.delta for c in configs], device)
    loss_groups = RunGroups([(c.loss, c.loss_agg) for c in configs], device)
    agg_groups = RunGroups([c.loss_agg for c in configs], device)
    targets = eos_targets(task.targets(prompts), eos, length)  # int[batch pos]
    optimum = torch.stack([reward[c.reward](prompts, targets.unsqueeze(-2)).squeeze(-1) for c in configs]).float()
    if eval_prompts is not None:
        eval_targets = eos_targets(task.targets(eval_prompts), eos, length)
        eval_optimum = torch.stack([reward[c.reward](eval_prompts, eval_targets.unsqueeze(-2)).squeeze(-1)
                                    for c in configs]).float()

    def score(some_prompts: Tensor, greedy: Tensor) -> Tensor:
        """Rewards of argmax responses int[run epoch batch pos]: float[run epoch batch]."""
        return reward_groups.apply(lambda name, y: reward[name](some_prompts, y.unsqueeze(-2)), greedy).squeeze(-1)

    step_log = {name: [] for name in STEP_METRICS}
    epoch_rewards, epoch_lengths, epoch_correct, epoch_greedy, epoch_heldout_greedy = [], [], [], [], []
    samples: list[Samples] = []
    correction = 1 if shared.std_unbiased and shared.group_size > 1 else 0
    ones = torch.ones(runs, device=device)
    guard = DivergenceGuard(runs, steps, [name for name, _ in policy.named_parameters()])
    start = time.perf_counter()

    for epoch in range(shared.epochs):
        guard.start_epoch(parameters)
        losses = []  # float[run] per step, for the divergence check (lab.divergence)
        fresh_reference = reference_due(epoch, shared.kl_period)
        if fresh_reference:
            reference = freeze(policy)
        responses = P.sample(policy, prompts, shared.group_size, list(generators))  # int[run batch trial pos]
        mask = P.response_mask(policy, responses)  # bool[run batch trial pos]
        with torch.no_grad():
            rewards = reward_groups.apply(lambda name, y: reward[name](prompts, y), responses)
            deltas = delta_groups.apply(
                lambda mode, r: compute_deltas(r, mode, shared.std_eps, shared.std_unbiased), rewards)
        epoch_rewards.append(rewards)
        epoch_lengths.append(mask.sum(dim=-1))
        epoch_correct.append((responses == targets.unsqueeze(-2)).all(dim=-1))
        if epoch % shared.sample_every == 0 or epoch == shared.epochs - 1:
            samples.append(Samples(epoch, responses.cpu().numpy(), rewards.cpu().numpy(), deltas.cpu().numpy()))

        for step in range(steps):
            logits = P.token_logits(policy, prompts, responses)  # float[run batch trial pos vocab+1]
            log_softmax = logits - torch.logsumexp(logits, dim=-1, keepdim=True)  # faster than log_softmax here
            log_probs = P.masked_log_probs(log_softmax, responses, mask)  # float[run batch trial pos]
            if step == 0:  # the sampling policy (and a reference frozen this epoch) is this one
                old_log_probs = log_probs.detach()
                with torch.no_grad():
                    ref_log_probs = (old_log_probs if fresh_reference
                                     else P.token_log_probs(reference, prompts, responses))
            pg_loss = loss_groups.apply(
                lambda key, lp, d, old, eps, m: compute_loss(lp, d, key[0], old, eps, key[1], m, length),
                log_probs, deltas, old_log_probs, clip_eps, mask)
            kl_loss = agg_groups.apply(lambda agg, lp, ref, m: kl_term(k3(lp, ref), agg, m, length),
                                       log_probs, ref_log_probs, mask)
            loss = pg_loss + beta * kl_loss if any_kl else pg_loss
            metrics = token_step_metrics(log_probs.detach(), old_log_probs, ref_log_probs, log_softmax.detach(),
                                         mask, deltas, clip_eps)
            metrics.update(loss=loss.detach(), pg_loss=pg_loss.detach())
            for name in STEP_METRICS:
                step_log[name].append(metrics.get(name, torch.full((runs,), math.nan, device=device)))
            optimizer.zero_grad()
            loss.backward(ones)
            optimizer.step()
            guard.after_step(parameters)
            losses.append(loss.detach())

        with torch.no_grad():
            guard.check(epoch, losses, None, parameters)  # a diverged run goes back to its epoch start
        epoch_greedy.append(P.greedy(policy, prompts))  # int[run batch pos]
        if eval_prompts is not None:
            epoch_heldout_greedy.append(P.greedy(policy, eval_prompts))
        if progress is not None:
            progress(epoch + 1, shared.epochs)
        if guard.all_diverged:  # nothing left to train
            break

    with torch.no_grad():
        epoch_log = sample_metrics(torch.stack(epoch_rewards, dim=1), optimum, correction)
        epoch_log.update(length_metrics(torch.stack(epoch_lengths, dim=1), torch.stack(epoch_correct, dim=1)))
        greedy = torch.stack(epoch_greedy, dim=1)  # int[run epoch batch pos]
        (epoch_log["greedy_reward"], epoch_log["greedy_fraction"],
         epoch_log["greedy_accuracy"]) = greedy_metrics(score(prompts, greedy), greedy, targets, optimum)
        if eval_prompts is None:
            nan = torch.full((runs, len(epoch_greedy)), math.nan, device=device)
            epoch_log["heldout_greedy_reward"], epoch_log["heldout_greedy_accuracy"] = nan, nan
        else:
            held = torch.stack(epoch_heldout_greedy, dim=1)
            held_reward, _, held_accuracy = greedy_metrics(score(eval_prompts, held), held, eval_targets,
                                                           eval_optimum)
            epoch_log["heldout_greedy_reward"], epoch_log["heldout_greedy_accuracy"] = held_reward, held_accuracy
    nan_epochs = torch.full((runs, len(epoch_greedy)), math.nan)
    step_values = {name: torch.stack(values, dim=1).cpu().float().numpy() for name, values in step_log.items()}
    epoch_values = {name: epoch_log.get(name, nan_epochs).cpu().float().numpy() for name in EPOCH_METRICS}
    guard.mask(step_values, epoch_values, GREEDY_METRICS)
    if guard.all_diverged:  # the records end at the last run's divergence
        last = max(d.step for d in guard.found) + 1
        step_values = {name: values[:, :last] for name, values in step_values.items()}
    return Records(
        configs=configs,
        prompts=task.prompts.cpu().numpy(),
        optimum=optimum.cpu().numpy(),
        step_metrics=step_values,
        epoch_metrics=epoch_values,
        samples=samples,
        state={name: p.detach().cpu().clone() for name, p in policy.named_parameters()},
        greedy_responses=epoch_greedy[-1].cpu().numpy(),
        seconds=time.perf_counter() - start,
        eos=eos,
        divergence=guard.found,
    )
