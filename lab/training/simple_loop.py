"""The training loop, plainly: one run, one policy, the lab's functions called one after another.

    for epoch in 1..E:
        (every kl_period epochs: pi_ref <- a frozen copy of pi_theta)
        y ~ pi_theta(. | x), G per prompt;  r = R(x, y)
        l_old = log pi_theta(y | x),  l_ref = log pi_ref(y | x)          (frozen: no gradient)
        d = deltas(r)   (--kl-in reward: d = deltas(r - beta * sum_pos k(l_old, l_ref)))
        repeat S times:
            l = log pi_theta(y | x);  L = surrogate(l, d, l_old) + beta * k(l, l_ref) - c_H * H;  Adam step on L
            (k: the config's estimator, k3 by default; no KL term in L with --kl-in reward)

This is the loop a student reads and writes (lesson 4). `lab.training.train.train` is the same loop made
fast (a run axis for many runs, one autograd node for the log-probs, its own Adam, metrics in
bulk); tests/training/test_simple_loop.py checks that for a seed both draw the same samples and end at the
same parameters. The generator drives the initialisation first, then every epoch's sample, in
that order in both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lab.training.config import TrainConfig
from lab.core.deltas import compute_deltas
from lab.exact.exploration import entropy_bonus
from lab.core.modes import KLPlacement
from lab.core.kl import freeze, kl_penalty, penalized_rewards, reference_due
from lab.core.losses import compute_loss
from lab.policies.factorized import Policy
from lab.policies.sampling import response_log_probs
from lab.policies.sampling import draw
from tasks import Task


@dataclass(frozen=True)
class SimpleRun:
    """What `simple_train` returns: every epoch's batch, every step's loss, the final policy."""

    responses: Tensor
    """int[epoch batch trial pos]: the sampled responses"""
    rewards: Tensor
    """float[epoch batch trial]"""
    deltas: Tensor
    """float[epoch batch trial]"""
    losses: Tensor
    """float[epoch step]: the minimised loss (surrogate + beta * k3 - entropy_coef * entropy) before each step"""
    policy: Policy
    """the final policy (its parameters: `policy.state_dict()`)"""


def simple_train(task: Task, config: TrainConfig = TrainConfig(),
                 generator: torch.Generator | None = None) -> SimpleRun:
    """Train one policy on `task` with `config`; `generator` defaults to one seeded with `config.seed`."""
    generator = torch.Generator().manual_seed(config.seed) if generator is None else generator
    prompts, reward = task.prompts, task.reward_fn(config.reward)  # int[batch pos]
    policy = Policy(task.vocab_size, prompts.shape[1], task.response_length, config.dim, generator=generator,
                    init_scale=config.init_scale, dtype=config.dtype.torch)
    optimizer = (torch.optim.SGD(policy.parameters(), lr=config.lr) if config.optimizer.value == "sgd" else
                 torch.optim.Adam(policy.parameters(), lr=config.lr, betas=config.adam_betas, eps=config.adam_eps))
    history = {"responses": [], "rewards": [], "deltas": [], "losses": []}
    for epoch in range(config.epochs):
        if reference_due(epoch, config.kl_period):
            reference = freeze(policy)  # a copy: later steps do not move it
        with torch.no_grad():  # sampling and scoring are not differentiated
            # config.sampler: the lab's inverse CDF, or the lecture script's torch.multinomial (lab.policies.sampling)
            responses = draw(config.sampler, policy(prompts), config.group_size, generator)  # int[batch trial pos]
            rewards = reward(prompts, responses).to(config.dtype.torch)  # float[batch trial], in the run's dtype
            old_log_probs = response_log_probs(policy(prompts), responses)  # float[batch trial pos]
            ref_log_probs = response_log_probs(reference(prompts), responses)
            in_reward = config.kl > 0 and config.kl_in is KLPlacement.reward
            shaped = penalized_rewards(rewards, old_log_probs, ref_log_probs, config.kl, config.kl_estimator) \
                if in_reward else rewards
            deltas = compute_deltas(shaped, config.delta, config.std_eps, config.std_unbiased)
        losses = []
        for _ in range(config.steps):  # S steps on the same batch
            log_probs = response_log_probs(policy(prompts), responses)
            loss = compute_loss(log_probs, deltas, config.loss, old_log_probs, config.clip_eps)
            if config.kl > 0 and not in_reward:  # beta * the summed estimator
                loss = loss + kl_penalty(log_probs, ref_log_probs, config.kl, config.kl_estimator)
            if config.entropy_coef > 0:  # the entropy bonus: the exact mean entropy on the prompts
                loss = loss - config.entropy_coef * entropy_bonus(policy(prompts))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        for name, value in zip(history, (responses, rewards, deltas, torch.stack(losses))):
            history[name].append(value)
    return SimpleRun(**{name: torch.stack(values) for name, values in history.items()}, policy=policy)
