"""The GRPO-style training loop (docs/task.md), for one run or many at once, for both policies.

    for epoch in 1..E:
        y ~ pi_theta(. | x), G per prompt                         (one group per prompt)
        m = live tokens of y;  r = R(x, y);  d = deltas(r)         (per group)
        l_old = log pi_theta(y | x), l_ref = log pi_ref(y | x)    (per token, frozen: no gradient)
        repeat S times:
            L = agg(surrogate(l, d, l_old); m) + beta * kl_term(l, l_ref; m) - c_H * H(pi_theta)   -> one Adam step

kl_term = C * agg(k(l, l_ref); m) (`lab.core.aggregation`, k the run's estimator, k3 by default): under
token-mean at fixed length the per-sequence sum of k, averaged over sequences. A `--kl-in reward` run has
no KL term: its deltas are made from r - beta * sum_pos k(l_old, l_ref) (`lab.training.groups`). The factorised policy is the case where every
position is live (no mask, C = the response length); the autoregressive one ends each response at
EOS (or at max_length) and masks the padding after it. What the two truly do differently (sampling,
the fused log-prob node, the exact per-epoch metrics) is their `lab.training.kinds` entry; what the
methods do differently (what a step trains on, its loss, what it logs: GRPO, DPO, SFT, expert iteration)
is their `lab.training.methods` entry; sampling and scoring the groups, what is kept of them and the
records at the end are `lab.training.groups`.

R runs train as one computation: parameters and Adam state carry a leading
`run` axis, per-run losses are summed (so each run gets exactly its own
gradient), and each run samples with its own generator. A seed's run is the
same alone or inside a sweep; a diverging run is stopped and frozen (`lab.training.divergence`).
The loop returns `Records` and never prints. A DPO batch (`--loss dpo`) replaces the surrogate and the KL
penalty by DPO's loss on preference pairs and freezes its reference at the initial policy (`lab.training.dpo`);
its steps differentiate only the pairs where the step metrics of the groups come from the kept log-softmaxes
(the factorised policy, `BlockMetrics.from_log_softmax`). Runs of different methods train in separate batches.
"""

from __future__ import annotations

import math
import time
from functools import partial
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lab.core.kl import freeze, reference_due
from lab.training.clipping import GradClip
from lab.training.config import TrainConfig, check_batchable
from lab.training.groups import (
    History,
    epoch_metrics,
    extensions,
    finish,
    keep_greedy,
    keep_samples,
    sample_groups,
)
from lab.training.divergence import DivergenceGuard
from lab.training.kinds import KINDS
from lab.training.methods import Epoch, Loop
from lab.training.metrics import StepMetricBlock, block_epochs
from lab.training.optim import OPTIMIZERS
from lab.training.records import STEP_METRICS, Records
from lab.training.reference_sync import ReferenceSync
from lab.training.sampler_runs import SamplerRuns
from lab.training.runs import RunSettings, clip_metrics
from tasks import Task


def train(
    task: Task,
    configs: TrainConfig | Sequence[TrainConfig],
    generators: Sequence[torch.Generator] | None = None,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> Records:
    """Train one run (a `TrainConfig`) or many (a sequence) together; return their records.

    `generators[r]` drives run r's initialisation and sampling; by default each is
    seeded with its config's `seed`. `progress(epochs_done, epochs)` is called after
    every epoch, for the caller's progress bar.
    """
    configs = [configs] if isinstance(configs, TrainConfig) else list(configs)
    check_batchable(configs)
    shared, device = configs[0], torch.device(device)
    if generators is None:
        generators = [torch.Generator(device).manual_seed(c.seed) for c in configs]
    settings = RunSettings.of(configs, device)
    kind = KINDS[shared.policy](task, configs, list(generators), settings.reward_groups, device)
    policy, prompts = kind.policy, kind.prompts  # int[batch pos]
    eval_prompts = None if task.eval_prompts is None else task.eval_prompts.to(device)
    parameters = [p for _, p in policy.named_parameters()]  # float[run ...] each
    optimizer = OPTIMIZERS[shared.optimizer](parameters, settings.lr, shared.adam_betas, shared.adam_eps)
    guard = DivergenceGuard(len(configs), shared.steps, [name for name, _ in policy.named_parameters()])
    tokens_per_epoch = shared.steps * len(configs) * prompts.shape[0] * shared.group_size * kind.entries
    block = StepMetricBlock(shared.steps, block_epochs(shared.epochs, tokens_per_epoch), kind.step_metrics)
    targets = kind.targets(prompts)  # int[batch pos]
    optimum = kind.optimum(prompts, targets)  # float[run batch]
    step_log, history = {name: [] for name in STEP_METRICS}, History()
    method, trackers, critic = extensions(configs, kind, settings, list(generators), device)
    loop = Loop(kind, method, parameters, settings, optimizer, guard, block, critic,
                GradClip.of([c.max_grad_norm for c in configs], device))
    sampler = SamplerRuns.of(configs, parameters, device)  # stale, mismatched or dynamic sampling (else None)
    loop.after_step = [hook.after_step for hook in (sampler, ReferenceSync.of(configs, parameters, device),
                                                    settings.entropy_control) if hook is not None]
    start = time.perf_counter()

    for index in range(shared.epochs):
        guard.start_epoch(parameters)
        fresh_reference = reference_due(index, method.reference_period(shared.kl_period))
        if fresh_reference:
            reference = [p for _, p in freeze(policy).named_parameters()]
        epoch = Epoch(index, reference, fresh_reference, train_policy=index >= shared.critic_warmup)
        method.start_epoch(epoch, kind, shared)
        epoch.first_step = kind.start_epoch(fresh_reference)  # exact metrics of the sampling policy, if any
        epoch.groups = sample_groups(kind, settings, shared, critic,
                                     (parameters, reference, fresh_reference) if len(settings.reward_kl_runs) else None,
                                     sampler)
        method.take_groups(epoch.groups)
        write = index % shared.sample_every == 0 or index == shared.epochs - 1
        keep_samples(history, index, epoch.groups, targets, write, method.sample_marks() if write else None, kind)
        losses = train_steps(loop, epoch)
        kind.end_epoch(guard, index, losses, parameters)  # a diverged run goes back to its epoch start
        for tracker in trackers:  # after the epoch's steps (a diverged run's value is emptied in the records)
            tracker.record(kind)
        stop = guard.all_diverged  # nothing left to train
        if block.full or index == shared.epochs - 1 or stop:
            for name, values in block.flush(partial(clip_metrics, settings)).items():  # float[(epoch step) run]
                step_log[name].append(values)
        keep_greedy(history, kind, prompts, eval_prompts)
        if progress is not None:
            progress(index + 1, shared.epochs)
        if stop:
            break

    epoch_log = epoch_metrics(kind, settings, shared, history, (prompts, targets, optimum), eval_prompts)
    logs = [extra.log for extra in (settings.corrections, settings.entropy_control) if extra is not None]
    return finish(task, configs, kind, optimum, step_log, epoch_log, guard, history, time.perf_counter() - start,
                  [method.step_log, {} if loop.clip is None else loop.clip.log, *logs],
                  {**method.epoch_log, **({} if sampler is None else sampler.epoch_log)}, trackers, critic)


def train_steps(loop: Loop, epoch: Epoch) -> list[Tensor]:
    """The epoch's S optimizer steps on the method's loss (the policy's unless `epoch.train_policy` is False, in a
    critic warm-up; each critic's every step); returns each step's loss float[run] (for the divergence check) and
    hands each step's tensors to the metric block."""
    kind, method, parameters, block, groups = loop.kind, loop.method, loop.parameters, loop.block, epoch.groups
    losses = []
    nans = torch.full((len(parameters[0]),), math.nan, device=parameters[0].device)
    # the forward pass covers what the loss reads: the groups, or where the kind allows, the method's own responses
    responses, mask, on_groups = method.forward_responses(kind, groups)
    for step in range(block.steps):
        # one autograd node from parameters to per-token log-probs (equal to the plain path)
        log_probs, aux = kind.log_probs(parameters, responses, mask)  # float[run batch trial pos]
        if step == 0:
            # the first step's policy is the sampling policy, so its log-probs are the old ones; a
            # reference frozen this epoch is that same policy, so it needs no forward pass either
            old_log_probs = log_probs.detach()
            with torch.no_grad():
                ref_log_probs, ref_aux = ((old_log_probs, aux.detach()) if epoch.fresh_reference else
                                          kind.log_probs(epoch.reference, responses, mask))
        pg_loss, loss = method.step_loss(loop, epoch, step, log_probs, aux, old_log_probs, ref_log_probs,
                                         on_groups)
        loop.optimizer.zero_grad()
        # d(sum of the runs' losses)/d(loss_r) = 1: each run gets exactly its own gradient (no parameter
        # is shared). Not loss.backward(ones): an explicit gradient makes torch import its symbolic-shape
        # machinery (sympy), about 0.6 s of start-up, far more than the sum costs
        loss.sum().backward()
        if loop.clip is not None:  # each run's gradient to its own global norm, before Adam reads it
            loop.clip(parameters)
        if epoch.train_policy:
            loop.optimizer.step()
        if loop.critic is not None:
            loop.critic.step()
        loop.guard.after_step(parameters)
        if epoch.train_policy:  # a stale sampler's snapshot, a synced reference, adaptive entropy (issue 38)
            for hook in loop.after_step:
                hook(epoch)
        losses.append(loss.detach())
        exact = {name: value if step == 0 else nans for name, value in epoch.first_step.items()}
        block.add_step(step, log_probs if on_groups else None, aux, loss=loss.detach(), pg_loss=pg_loss.detach(),
                       **exact)
    method.end_epoch(loop.settings)
    if loop.clip is not None:
        loop.clip.end_epoch()
    for extra in (loop.settings.corrections, loop.settings.entropy_control):
        if extra is not None:
            extra.end_epoch()
    block.end_epoch(old_log_probs, ref_log_probs, ref_aux, groups.mask,
                    groups.deltas if groups.token_deltas is None else groups.token_deltas, groups.responses)
    return losses
