"""Every task file in tasks/ keeps the task protocol (docs/architecture.md), checked by exhaustive enumeration.

For each task the lab finds (`tasks.catalog.task_names`), on its own prompts at a small vocabulary:
- the literals `lab --help` reads without importing the file are its tables' own names, in order;
- each vectorized reward equals its plain-Python reference on every response, at fixed and variable length;
- its target is optimal under every reward (the optimum the lab records is the target's reward: `best_reward`);
- a variable-length response that is exactly the target then EOS scores as the target does at fixed length.
Mutants tried: a reversed REWARD_NAMES, a reward off by one on one response, a target one token off: each fails here.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from tasks.catalog import load, task_facts, task_names

TASKS = task_names()
VOCAB = 3
"""A vocabulary small enough to enumerate every response of length 3 (27, or 4^4 = 256 with EOS and a cap of 4)."""


def small_task(name: str):
    """The task on three prompts of length 3 over 0..2 (one with a repeated token, one constant)."""
    return load(name).make_task([[1, 0, 2], [2, 2, 0], [1, 1, 1]], VOCAB)


def test_the_lab_finds_the_lecture_task_and_the_two_that_teach_what_sorting_does_not():
    """tasks/ holds sorting and the two tasks docs/tasks.md argues for; non-task modules are not tasks."""
    assert {"sorting", "reverse", "permutation"} <= set(TASKS)
    assert not {"prompts", "catalog", "windows"} & set(TASKS)


@pytest.mark.parametrize("name", TASKS)
def test_the_torch_free_literals_are_the_tasks_own_tables(name):
    """REWARD_NAMES, DEFAULT_REWARD and VOCAB_SIZE, read off the file's text, are what make_task returns."""
    facts, task = task_facts(name), load(name).make_task()
    assert facts.reward_names == tuple(task.rewards) == tuple(task.variable_length_rewards)
    assert tuple(task.references) == tuple(task.variable_length_references) == facts.reward_names
    assert task.default_reward == facts.default_reward and task.vocab_size == facts.vocab_size
    assert task.name == name and task.solved


@pytest.mark.parametrize("name", TASKS)
def test_every_reward_equals_its_reference_on_every_response(name):
    """Fixed length: all 27 responses to each prompt; variable length: all 256 token strings of a cap of 4 over
    0..2 and EOS = 3 (EOS anywhere, padding after it included)."""
    task = small_task(name)
    fixed = torch.tensor(list(itertools.product(range(VOCAB), repeat=3)))
    varlen = torch.tensor(list(itertools.product(range(VOCAB + 1), repeat=4)))
    for reward in task.rewards:
        got = task.reward_fn(reward)(task.prompts, fixed.expand(3, *fixed.shape))
        got_varlen = task.variable_length_reward(reward, VOCAB)(task.prompts, varlen.expand(3, *varlen.shape))
        for b, prompt in enumerate(task.prompts.tolist()):
            want = [task.references[reward](prompt, y) for y in fixed.tolist()]
            want_varlen = [task.variable_length_references[reward](prompt, y, VOCAB) for y in varlen.tolist()]
            assert got[b].tolist() == want, (reward, prompt)
            assert got_varlen[b].tolist() == want_varlen, (reward, prompt)


@pytest.mark.parametrize("name", TASKS)
def test_the_target_is_optimal_under_every_reward_at_both_lengths(name):
    """max over all responses of R(x, y) = R(x, target(x)) = the task's optimum, for every prompt and reward; and the
    target followed by EOS scores the same at variable length."""
    task = small_task(name)
    fixed = torch.tensor(list(itertools.product(range(VOCAB), repeat=3)))
    varlen = torch.tensor(list(itertools.product(range(VOCAB + 1), repeat=4)))
    targets = task.targets(task.prompts)
    with_eos = torch.cat([targets, torch.full((3, 1), VOCAB)], dim=-1)
    for reward in task.rewards:
        best = task.reward_fn(reward)(task.prompts, fixed.expand(3, *fixed.shape)).amax(-1)
        best_varlen = task.variable_length_reward(reward, VOCAB)(task.prompts, varlen.expand(3, *varlen.shape)).amax(-1)
        assert torch.equal(task.optimum(reward), best) and torch.equal(best_varlen, best), reward
        at_eos = task.variable_length_reward(reward, VOCAB)(task.prompts, with_eos.unsqueeze(-2)).squeeze(-1)
        assert torch.equal(at_eos, best), reward
