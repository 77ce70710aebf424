"""The GRPO-style training loop (README, "The experiment"), for one run or many at once.

    for epoch in 1..E:
        y ~ pi_theta(. | x), G per prompt                    (one group per prompt)
        r = R(x, y);  d = deltas(r)                          (per group)
        l_old = log pi_theta(y | x), l_ref = log pi_ref(y | x)   (frozen: no gradient)
        repeat S times:
            L = surrogate(l, d, l_old) + beta * k3(l, l_ref) - c_H * H(pi_theta)   -> one Adam step

R runs train as one computation: parameters and Adam state carry a leading
`run` axis, per-run losses are summed (so each run gets exactly its own
gradient), and each run samples with its own generator. A seed's run is the
same alone or inside a sweep. The loop returns `Records` and never prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lab.core.aggregation import LossAgg, kl_term
from lab.training.config import TrainConfig, check_batchable
from lab.core.deltas import compute_deltas
from lab.training.divergence import DivergenceGuard
from lab.exact.exploration import entropy_bonus, epoch_exploration, is_exact
from lab.policies.fused import policy_log_probs
from lab.core.kl import freeze, k3, kl_estimate, reference_due
from lab.training.lengths import length_metrics
from lab.core.losses import compute_loss
from lab.training.metrics import StepMetricBlock, block_epochs, greedy_log, sample_metrics
from lab.training.optim import RunAdam
from lab.training.runs import RunGroups, RunSettings, records_of
from lab.policies.interface import PolicyKind
from lab.policies.factorized import PolicyStack, policy_logits
from lab.training.records import STEP_METRICS, Records, Samples
from lab.policies.sampling import UniformStream, greedy_responses
from lab.policies.sampling import SAMPLERS, Sampler
from tasks import Task


UNIFORM_CHUNK_EPOCHS = 10
"""Epochs of sampling uniforms drawn per generator call (speed only: the draws are the same)."""


def kl_penalty_term(agg: LossAgg, log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """The KL term before beta: the per-sequence k3 sum under token-mean (`kl_estimate`, as always), else C * agg(k3)."""
    if agg is LossAgg.token_mean:
        return kl_estimate(log_probs, ref_log_probs)
    return kl_term(k3(log_probs, ref_log_probs), agg)


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
    shared = configs[0]
    if shared.policy is not PolicyKind.factorized:  # responses of varying length: lab.training.varlen
        from lab.training.varlen import train_varlen

        return train_varlen(task, configs, generators, device, progress)
    device = torch.device(device)
    if generators is None:
        generators = [torch.Generator(device).manual_seed(c.seed) for c in configs]
    runs, steps = len(configs), shared.steps
    for c in configs:
        task.reward_fn(c.reward)  # fail before any work on an unknown reward

    prompts = task.prompts.to(device)  # int[batch pos]
    eval_prompts = None if task.eval_prompts is None else task.eval_prompts.to(device)
    policy = PolicyStack(task.vocab_size, prompts.shape[1], task.response_length, shared.dim,
                         list(generators), [c.init_scale for c in configs])
    per_run = lambda name, dtype=torch.float32: torch.tensor(  # noqa: E731
        [getattr(c, name) for c in configs], device=device, dtype=dtype)
    parameters = [policy.embedding, policy.encode, policy.decode]  # float[run ...] each
    (lr, beta, clip_eps, any_kl, kl_runs, kl_agg_groups, reward_groups, delta_groups, loss_groups,
     agg_groups) = RunSettings.of(configs, device)
    optimizer = RunAdam(parameters, lr, shared.adam_betas, shared.adam_eps)
    entropy_coef = per_run("entropy_coef")
    # only the runs with an entropy bonus pay for its differentiable forward pass
    bonus_runs = torch.tensor([r for r, c in enumerate(configs) if c.entropy_coef > 0], device=device,
                              dtype=torch.long)
    sampler_groups = RunGroups([c.sampler for c in configs], device)
    # each sampler draws for its own runs, each run from its own generator (lab.policies.sampling)
    sampler_generators = {s: [generators[i] for i in idx.tolist()] for s, idx in sampler_groups.groups}
    if Sampler.inverse_cdf in sampler_generators:  # its uniforms drawn ahead, a chunk of epochs per call
        sampler_generators[Sampler.inverse_cdf] = UniformStream(
            sampler_generators[Sampler.inverse_cdf], (prompts.shape[0], shared.group_size, task.response_length),
            shared.epochs, UNIFORM_CHUNK_EPOCHS, device)
    optimum = torch.stack([task.optimum(c.reward, prompts) for c in configs]).float()  # float[run batch]
    eval_optimum = (None if eval_prompts is None else
                    torch.stack([task.optimum(c.reward, eval_prompts) for c in configs]).float())
    targets = task.targets(prompts)  # int[batch pos]
    eval_targets = None if eval_prompts is None else task.targets(eval_prompts)

    def score(some_prompts: Tensor, greedy: Tensor) -> Tensor:
        """Each run's reward of argmax responses int[run epoch batch pos]: float[run epoch batch]."""
        return reward_groups.apply(lambda name, y: task.reward_fn(name)(some_prompts, y.unsqueeze(-2)),
                                   greedy).squeeze(-1)

    step_log = {name: [] for name in STEP_METRICS}
    tokens_per_epoch = steps * runs * prompts.shape[0] * shared.group_size * task.response_length
    block = StepMetricBlock(steps, block_epochs(shared.epochs, tokens_per_epoch))
    # per epoch only what the epoch metrics need; they are computed for all epochs at once after the loop
    epoch_rewards, epoch_greedy, epoch_heldout_greedy, epoch_logits, epoch_correct = [], [], [], [], []
    samples: list[Samples] = []
    # a single reward has no spread: std 0 for G = 1 (Bessel's correction would give NaN)
    correction = 1 if shared.std_unbiased and shared.group_size > 1 else 0
    guard = DivergenceGuard(runs, steps, [name for name, _ in policy.named_parameters()])
    start = time.perf_counter()
    with torch.no_grad():
        logits = policy(prompts)  # float[run batch pos vocab]; later epochs reuse the greedy evaluation's

    for epoch in range(shared.epochs):
        guard.start_epoch(parameters)
        losses = []  # float[run] per step, for the divergence check
        fresh_reference = reference_due(epoch, shared.kl_period)
        if fresh_reference:
            reference = freeze(policy)
        epoch_logits.append(logits)  # the sampling policy, for the exact exploration metrics
        with torch.no_grad():
            responses = sampler_groups.apply(  # int[run batch trial pos]
                lambda s, lg: SAMPLERS[s](lg, shared.group_size, sampler_generators[s]), logits)
            rewards = reward_groups.apply(lambda name, y: task.reward_fn(name)(prompts, y), responses)
            deltas = delta_groups.apply(  # float[run batch trial]
                lambda mode, r: compute_deltas(r, mode, shared.std_eps, shared.std_unbiased), rewards)
        epoch_rewards.append(rewards)
        epoch_correct.append((responses == targets.unsqueeze(-2)).all(dim=-1))  # bool[run batch trial]
        if epoch % shared.sample_every == 0 or epoch == shared.epochs - 1:
            samples.append(Samples(epoch, responses.cpu().numpy(), rewards.cpu().numpy(),
                                   deltas.cpu().numpy()))

        for step in range(steps):
            # one autograd node from parameters to per-token log-probs (lab.policies.fused; equal to the plain path)
            log_probs, log_softmaxes = policy_log_probs(  # float[run batch trial pos], float[run batch pos vocab]
                *parameters, prompts, responses)
            if step == 0:
                # the first step's policy is the sampling policy, so its log-probs are the old ones; a
                # reference frozen this epoch is that same policy, so it needs no forward pass either
                old_log_probs = log_probs.detach()
                with torch.no_grad():
                    ref_log_probs, ref_log_softmax = (
                        (old_log_probs, log_softmaxes.detach()) if fresh_reference else
                        policy_log_probs(reference.embedding, reference.encode, reference.decode,
                                         prompts, responses))
            pg_loss = loss_groups.apply(  # float[run]
                lambda key, lp, d, old, eps: compute_loss(lp, d, key[0], old, eps, key[1]),
                log_probs, deltas, old_log_probs, clip_eps)
            # beta = 0 everywhere adds exactly nothing to the gradient: leave the KL out of the graph
            if not any_kl:
                loss = pg_loss
            elif kl_runs is None:
                loss = pg_loss + beta * agg_groups.apply(kl_penalty_term, log_probs, ref_log_probs)
            else:
                loss = pg_loss.index_add(0, kl_runs, beta[kl_runs] * kl_agg_groups.apply(
                    kl_penalty_term, log_probs[kl_runs], ref_log_probs[kl_runs]))
            if len(bonus_runs):  # - c_H * the exact mean entropy, on the bonus runs only
                live = policy_logits(*(p.index_select(0, bonus_runs) for p in parameters), prompts)
                loss = loss.index_add(0, bonus_runs, -entropy_coef[bonus_runs] * entropy_bonus(live))
            optimizer.zero_grad()
            # d(sum of the runs' losses)/d(loss_r) = 1: each run gets exactly its own gradient (no parameter
            # is shared). Not loss.backward(ones): an explicit gradient makes torch import its symbolic-shape
            # machinery (sympy), about 0.6 s of start-up, far more than the sum costs
            loss.sum().backward()
            optimizer.step()
            guard.after_step(parameters)
            losses.append(loss.detach())
            block.add_step(step, log_probs, log_softmaxes, pg_loss, loss)
        block.end_epoch(old_log_probs, ref_log_probs, ref_log_softmax, deltas)

        with torch.no_grad():
            logits = policy(prompts)  # also the next epoch's sampling logits: the policy is unchanged until then
            if guard.check(epoch, losses, logits, parameters):  # a run diverged: it is back at its epoch start
                logits = policy(prompts)
        stop = guard.all_diverged  # nothing left to train
        if block.full or epoch == shared.epochs - 1 or stop:
            for name, values in block.flush(clip_eps).items():  # float[(epoch step) run]
                step_log[name].append(values)

        with torch.no_grad():
            epoch_greedy.append(greedy_responses(logits))  # int[run batch pos]
            if eval_prompts is not None:
                epoch_heldout_greedy.append(greedy_responses(policy(eval_prompts)))
        if progress is not None:
            progress(epoch + 1, shared.epochs)
        if stop:
            break

    with torch.no_grad():  # the epochs' sample and greedy metrics, all at once
        epoch_log = sample_metrics(torch.stack(epoch_rewards, dim=1), optimum, correction)
        correct = torch.stack(epoch_correct, dim=1)  # bool[run epoch batch trial]
        epoch_log.update(length_metrics(torch.full(correct.shape, task.response_length, device=device), correct))
        epoch_log.update(greedy_log(score, (prompts, targets, optimum), epoch_greedy,
                                    None if eval_prompts is None else (eval_prompts, eval_targets, eval_optimum),
                                    epoch_heldout_greedy))
        # exact P(optimal) and P(no signal) of every epoch's sampling policy (lab.exact.exploration)
        exact = is_exact(task.vocab_size, task.response_length)
        mc_generators = None if exact else [torch.Generator(device).manual_seed(c.seed) for c in configs]
        explored = reward_groups.apply(
            lambda name, lg, runs_of: torch.stack(list(epoch_exploration(
                lg, prompts, task.reward_fn(name), task.optimum(name, prompts).to(device), shared.group_size,
                None if exact else [mc_generators[r] for r in runs_of.tolist()]).values()), dim=-1),
            torch.stack(epoch_logits, dim=1), torch.arange(runs, device=device))  # float[run epoch 2]
        epoch_log["optimal_prob"], epoch_log["zero_std_prob"] = explored.unbind(-1)

    return records_of(configs, task.prompts, optimum, step_log, epoch_log, guard, policy, samples=samples,
                      greedy_responses=epoch_greedy[-1].cpu().numpy(), seconds=time.perf_counter() - start,
                      exploration_exact=exact)
