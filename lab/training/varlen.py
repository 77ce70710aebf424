"""The training loop for variable-length responses (`TrainConfig.policy = autoregressive`).

    for epoch in 1..E:
        y ~ pi_theta(. | x), G per prompt, each ending at EOS or truncated at max_length
        m = live-token mask;  r = R(x, y) (variable-length rewards);  d = deltas(r)
        l_old, l_ref = masked per-token log-probs (frozen)
        repeat S times:
            L = agg(surrogate(l, d, l_old); m) + beta * C * agg(k3(l, l_ref); m)   -> one Adam step

The same algorithm as `lab.training.train` (which dispatches here), with the policy's fused log-probs
(`lab.policies.ar_fused`) and the live-token mask applied to the loss, the KL and every token
metric (means over live tokens, in bulk per block of epochs: `lab.training.metrics_varlen`). R runs train
as one batched computation; a seed's run is the same alone or inside a sweep, and a diverging run
is stopped and frozen (`lab.training.divergence`). One prefix tree of the sampling policy per epoch
(`lab.exact.ar_exploration`) gives the exact `optimal_prob`, `zero_std_prob` and, at each epoch's first
step only, `kl_exact` (where `kl` is its unbiased estimate, claim 21); later steps leave it empty,
since the tree costs about three training steps at 500 runs (`lab.exact.prefix_tree.tree_pass`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

import lab.policies as P
from lab.core.aggregation import kl_term
from lab.exact.ar_exploration import SamplingPolicyMetrics
from lab.training.config import TrainConfig, check_batchable
from lab.core.deltas import compute_deltas
from lab.training.divergence import DivergenceGuard
from lab.core.kl import freeze, k3, reference_due
from lab.training.lengths import LENGTH_MARGIN, eos_targets, length_metrics, resolve_max_length  # noqa: F401 (re-exported)
from lab.core.losses import compute_loss
from lab.training.metrics import block_epochs, greedy_log, sample_metrics
from lab.training.metrics_varlen import VarlenMetricBlock
from lab.training.optim import RunAdam
from lab.policies.ar_fused import ar_log_probs
from lab.training.records import STEP_METRICS, Records, Samples
from lab.training.runs import RunSettings, records_of
from tasks import Task
from tasks.sorting import variable_length_reward

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
    policy = P.make_stack(shared.policy, task.vocab_size, prompts.shape[1], length, shared.dim, list(generators),
                          [c.init_scale for c in configs])
    eos = P.ops_of(policy).eos(policy)
    reward = {c.reward: variable_length_reward(c.reward, eos) for c in configs}  # unknown names fail here

    parameters = [policy.embedding, policy.encode, policy.decode, policy.previous]  # float[run ...] each
    (lr, beta, clip_eps, any_kl, kl_runs, kl_agg_groups, reward_groups, delta_groups, loss_groups,
     agg_groups) = RunSettings.of(configs, device)
    optimizer = RunAdam(parameters, lr, shared.adam_betas, shared.adam_eps)
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
    guard = DivergenceGuard(runs, steps, [name for name, _ in policy.named_parameters()])
    nans = torch.full((runs,), math.nan, device=device)
    exact_metrics = SamplingPolicyMetrics(prompts, targets, reward, reward_groups, shared.group_size,
                                          task.vocab_size, length)
    tokens_per_epoch = steps * runs * prompts.shape[0] * shared.group_size * length * (eos + 1)
    block = VarlenMetricBlock(steps, block_epochs(shared.epochs, tokens_per_epoch))
    start = time.perf_counter()

    for epoch in range(shared.epochs):
        guard.start_epoch(parameters)
        losses = []  # float[run] per step, for the divergence check (lab.training.divergence)
        fresh_reference = reference_due(epoch, shared.kl_period)
        if fresh_reference:
            reference = freeze(policy)
            reference_parameters = [reference.embedding, reference.encode, reference.decode, reference.previous]
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
            # one autograd node from parameters to masked per-token log-probs (equal to the plain path)
            log_probs, entropy = ar_log_probs(*parameters, prompts, responses, mask)
            if step == 0:  # the sampling policy (and a reference frozen this epoch) is this one
                old_log_probs = log_probs.detach()
                with torch.no_grad():
                    ref_log_probs = (old_log_probs if fresh_reference else
                                     ar_log_probs(*reference_parameters, prompts, responses, mask)[0])
            pg_loss = loss_groups.apply(
                lambda key, lp, d, old, eps, m: compute_loss(lp, d, key[0], old, eps, key[1], m, length),
                log_probs, deltas, old_log_probs, clip_eps, mask)
            kl_penalty = lambda agg, lp, ref, m: kl_term(k3(lp, ref), agg, m, length)  # noqa: E731
            if not any_kl:  # beta = 0 everywhere adds exactly nothing: leave the KL out of the graph
                loss = pg_loss
            elif kl_runs is None:
                loss = pg_loss + beta * agg_groups.apply(kl_penalty, log_probs, ref_log_probs, mask)
            else:
                loss = pg_loss.index_add(0, kl_runs, beta[kl_runs] * kl_agg_groups.apply(
                    kl_penalty, log_probs[kl_runs], ref_log_probs[kl_runs], mask[kl_runs]))
            # exact at each epoch's first step only, with the exploration metrics (module docstring: the cost)
            kl_exact = exact_metrics.epoch(policy, fresh_reference) if step == 0 else nans
            recorded = dict(loss=loss.detach(), pg_loss=pg_loss.detach(), kl_exact=kl_exact)
            optimizer.zero_grad()
            loss.sum().backward()  # each run's parameters get exactly its own loss's gradient
            optimizer.step()
            guard.after_step(parameters)
            losses.append(loss.detach())
            block.add_step(step, log_probs, entropy, recorded)
        block.end_epoch(old_log_probs, ref_log_probs, mask, deltas)
        with torch.no_grad():
            guard.check(epoch, losses, None, parameters)  # a diverged run goes back to its epoch start
        stop = guard.all_diverged  # nothing left to train
        if block.full or epoch == shared.epochs - 1 or stop:
            for name, values in block.flush(clip_eps).items():  # float[(epoch step) run]
                step_log[name].append(values)

        epoch_greedy.append(P.greedy(policy, prompts))  # int[run batch pos]
        if eval_prompts is not None:
            epoch_heldout_greedy.append(P.greedy(policy, eval_prompts))
        if progress is not None:
            progress(epoch + 1, shared.epochs)
        if stop:
            break

    with torch.no_grad():
        epoch_log = sample_metrics(torch.stack(epoch_rewards, dim=1), optimum, correction)
        epoch_log.update(length_metrics(torch.stack(epoch_lengths, dim=1), torch.stack(epoch_correct, dim=1)))
        epoch_log.update(exact_metrics.exploration())
        epoch_log.update(greedy_log(score, (prompts, targets, optimum), epoch_greedy,
                                    None if eval_prompts is None else (eval_prompts, eval_targets, eval_optimum),
                                    epoch_heldout_greedy))
    return records_of(configs, task.prompts, optimum, step_log, epoch_log, guard, policy, samples=samples,
                      greedy_responses=epoch_greedy[-1].cpu().numpy(), seconds=time.perf_counter() - start,
                      eos=eos, exploration_exact=exact_metrics.exact)
