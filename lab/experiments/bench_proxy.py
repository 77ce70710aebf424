"""The reward model `lab bench`'s learned-reward row trains against: the lecture's task with one proxy added.

    task.rewards["learned:bench"] = r_phi,  fitted (`lab.training.reward_model`) on Bradley-Terry pairs drawn from
                                    the lecture's initial policy (seed 0), as `lab reward-model` would fit it

The row times what `--reward learned:PATH` adds to a sweep: the proxy's forward pass on every epoch's samples and
the exact gold, proxy and d of every run after every epoch (`lab.training.optimum.ProxyTracker`), against the
same sweep on the true reward.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from lab.experiments.overoptimisation import proxy_reward
from lab.policies import make_policy
from lab.training.config import TrainConfig
from lab.training.reward_model import RewardModelConfig, train_reward_model
from tasks import LEARNED, Task

BENCH_REWARD = f"{LEARNED}bench"
BENCH_MODEL = RewardModelConfig(size="medium", pairs_per_prompt=64, steps=100)
"""The row's reward model: the default size, fitted briefly (its quality does not change its cost)."""


def with_bench_proxy(task: Task, config: TrainConfig) -> Task:
    """`task` with `BENCH_REWARD` added: a proxy of `config.reward` fitted on pairs from the seed-0 initial policy."""
    policy = make_policy("factorized", task.vocab_size, task.prompts.shape[1], task.response_length, config.dim,
                         torch.Generator().manual_seed(0), config.init_scale)
    model, _, _ = train_reward_model(policy, task.prompts, config.reward, BENCH_MODEL)
    return replace(task, rewards={**task.rewards, BENCH_REWARD: proxy_reward(task, model, config.reward)})
