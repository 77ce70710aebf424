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
the fused log-prob node, the exact per-epoch metrics) is their `lab.training.kinds` entry; sampling
and scoring the groups, what is kept of them and the records at the end are `lab.training.groups`.

R runs train as one computation: parameters and Adam state carry a leading
`run` axis, per-run losses are summed (so each run gets exactly its own
gradient), and each run samples with its own generator. A seed's run is the
same alone or inside a sweep; a diverging run is stopped and frozen (`lab.training.divergence`).
The loop returns `Records` and never prints. A DPO batch (`--loss dpo`) replaces the surrogate and the KL
penalty by DPO's loss on preference pairs and freezes its reference at the initial policy (`lab.training.dpo`);
its steps differentiate only the pairs where the step metrics of the groups come from the kept log-softmaxes
(the factorised policy, `BlockMetrics.from_log_softmax`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lab.core.aggregation import kl_term
from lab.core.kl import ESTIMATORS, freeze, reference_due
from lab.core.losses import compute_loss
from lab.training.config import TrainConfig, check_batchable
from lab.training.groups import (
    Groups,
    History,
    epoch_metrics,
    extensions,
    finish,
    keep_greedy,
    keep_samples,
    sample_groups,
)
from lab.training import dpo
from lab.training.critic import CriticRuns
from lab.training.divergence import DivergenceGuard
from lab.training.kinds import KINDS, Kind
from lab.training.metrics import StepMetricBlock, block_epochs
from lab.training.optim import RunAdam
from lab.training.records import STEP_METRICS, Records
from lab.training.runs import RunSettings
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
    optimizer = RunAdam(parameters, settings.lr, shared.adam_betas, shared.adam_eps)
    guard = DivergenceGuard(len(configs), shared.steps, [name for name, _ in policy.named_parameters()])
    tokens_per_epoch = shared.steps * len(configs) * prompts.shape[0] * shared.group_size * kind.entries
    block = StepMetricBlock(shared.steps, block_epochs(shared.epochs, tokens_per_epoch), kind.step_metrics)
    targets = kind.targets(prompts)  # int[batch pos]
    optimum = kind.optimum(prompts, targets)  # float[run batch]
    step_log, history = {name: [] for name in STEP_METRICS}, History()
    pairing, tracker, critic = extensions(configs, kind, settings, list(generators), device)
    start = time.perf_counter()

    for epoch in range(shared.epochs):
        guard.start_epoch(parameters)
        fresh_reference = reference_due(epoch, 0 if pairing else shared.kl_period)  # DPO: frozen at the start
        if fresh_reference:
            reference = [p for _, p in freeze(policy).named_parameters()]
        if pairing is not None:
            pairing.start_epoch(epoch, kind, reference, shared.pairs_per_prompt)
        first_step = kind.start_epoch(fresh_reference)  # exact metrics of the sampling policy, if any
        groups = sample_groups(kind, settings, shared, critic,
                               (parameters, reference, fresh_reference) if len(settings.reward_kl_runs) else None)
        if pairing is not None:
            pairing.take_groups(groups.responses, groups.rewards)
        write = epoch % shared.sample_every == 0 or epoch == shared.epochs - 1
        pairs = pairing.sample_pairs() if pairing is not None and write else None  # marked in samples.txt
        keep_samples(history, epoch, groups, targets, write, pairs)
        losses = train_steps(kind, parameters, reference, fresh_reference, groups, first_step,
                             settings, optimizer, guard, block, pairing, critic, epoch >= shared.critic_warmup)
        kind.end_epoch(guard, epoch, losses, parameters)  # a diverged run goes back to its epoch start
        if tracker is not None:  # after the epoch's steps (a diverged run's value is emptied in the records)
            tracker.record(kind)
        stop = guard.all_diverged  # nothing left to train
        if block.full or epoch == shared.epochs - 1 or stop:
            # DPO has no ratio clip and no deltas: its clip fractions are NaN, not counted against GRPO's deltas
            for name, values in block.flush(None if pairing else settings.clip_eps).items():  # float[(epoch step) run]
                step_log[name].append(values)
        keep_greedy(history, kind, prompts, eval_prompts)
        if progress is not None:
            progress(epoch + 1, shared.epochs)
        if stop:
            break

    epoch_log = epoch_metrics(kind, settings, shared, history, (prompts, targets, optimum), eval_prompts)
    return finish(task, configs, kind, optimum, step_log, epoch_log, guard, history, time.perf_counter() - start,
                  pairing, tracker, critic)


def train_steps(kind: Kind, parameters: list[Tensor], reference: list[Tensor], fresh_reference: bool, groups: Groups,
                first_step: dict[str, Tensor], settings: RunSettings, optimizer: RunAdam, guard: DivergenceGuard,
                block: StepMetricBlock, pairing: dpo.DPOSetup | None = None, critic: CriticRuns | None = None,
                train_policy: bool = True) -> list[Tensor]:
    """The epoch's S optimizer steps on its groups (the policy's unless `train_policy` is False, in a critic
    warm-up; each critic's every step), on the DPO loss of its pairs for a DPO batch; returns each step's loss
    float[run] (for the divergence check) and hands each step's tensors to the metric block."""
    losses = []
    nans = torch.full((len(parameters[0]),), math.nan, device=parameters[0].device)
    # the forward pass covers what the loss reads: the groups, or where the kind allows, a DPO batch's pairs
    responses, mask, on_groups = ((groups.responses, groups.mask, True) if pairing is None else
                                  pairing.forward_responses(kind, groups))
    for step in range(block.steps):
        # one autograd node from parameters to per-token log-probs (equal to the plain path)
        log_probs, aux = kind.log_probs(parameters, responses, mask)  # float[run batch trial pos]
        if step == 0:
            # the first step's policy is the sampling policy, so its log-probs are the old ones; a
            # reference frozen this epoch is that same policy, so it needs no forward pass either
            old_log_probs = log_probs.detach()
            with torch.no_grad():
                ref_log_probs, ref_aux = ((old_log_probs, aux.detach()) if fresh_reference else
                                          kind.log_probs(reference, responses, mask))
        if pairing is None:
            pg_loss, loss = step_loss(kind, parameters, settings, groups, log_probs, old_log_probs, ref_log_probs)
        else:
            pg_loss = loss = pairing.step_loss(kind, parameters, log_probs, ref_log_probs if step == 0 else None,
                                               settings.beta, on_groups)
        optimizer.zero_grad()
        # d(sum of the runs' losses)/d(loss_r) = 1: each run gets exactly its own gradient (no parameter
        # is shared). Not loss.backward(ones): an explicit gradient makes torch import its symbolic-shape
        # machinery (sympy), about 0.6 s of start-up, far more than the sum costs
        loss.sum().backward()
        if train_policy:
            optimizer.step()
        if critic is not None:
            critic.step()
        guard.after_step(parameters)
        losses.append(loss.detach())
        exact = {name: value if step == 0 else nans for name, value in first_step.items()}
        block.add_step(step, log_probs if on_groups else None, aux, loss=loss.detach(), pg_loss=pg_loss.detach(),
                       **exact)
    if pairing is not None:
        pairing.end_epoch(settings.beta)
    block.end_epoch(old_log_probs, ref_log_probs, ref_aux, groups.mask,
                    groups.deltas if groups.token_deltas is None else groups.token_deltas, groups.responses)
    return losses


def step_loss(kind: Kind, parameters: list[Tensor], settings: RunSettings, groups: Groups, log_probs: Tensor,
              old_log_probs: Tensor, ref_log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """The surrogate and the minimised loss (+ beta * the KL term - c_H * the entropy bonus), float[run] each."""
    mask, horizon, s = groups.mask, kind.max_length, settings  # horizon: C of the aggregations, the cap
    per_token = groups.token_deltas is not None  # some run's critic gives one advantage per token
    pg_loss = s.loss_groups.apply(
        lambda key, lp, d, old, eps, m: compute_loss(lp, d, key[0], old, eps, key[1], m, horizon, per_token),
        log_probs, groups.deltas if groups.token_deltas is None else groups.token_deltas, old_log_probs,
        s.clip_eps, mask)
    group_kl_term = lambda key, lp, ref, m: kl_term(ESTIMATORS[key[1]](lp, ref), key[0], m, horizon)  # noqa: E731
    # beta = 0 everywhere adds exactly nothing to the gradient: leave the KL out of the graph
    if not s.any_kl:
        loss = pg_loss
    elif s.kl_runs is None:
        loss = pg_loss + s.beta * s.kl_agg_groups.apply(group_kl_term, log_probs, ref_log_probs, mask)
    else:
        runs = s.kl_runs
        loss = pg_loss.index_add(0, runs, s.beta[runs] * s.kl_agg_groups.apply(
            group_kl_term, log_probs[runs], ref_log_probs[runs], None if mask is None else mask[runs]))
    if len(s.bonus_runs):  # - c_H * the exact mean entropy, on the bonus runs only
        bonus = kind.entropy_bonus(parameters, s.bonus_runs)
        loss = loss.index_add(0, s.bonus_runs, -s.entropy_coef[s.bonus_runs] * bonus)
    return pg_loss, loss


