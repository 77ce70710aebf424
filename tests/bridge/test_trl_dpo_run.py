"""`lab trl --loss dpo`'s training: TRL's DPOTrainer sees exactly the lab's enumerated responses.

TRL appends EOS to every completion; the lab's responses truncated at the cap have none, and the
sequence cap cuts TRL's appended one off. Checked through TRL's own log: at epoch 1 (one step, logged
before its update) TRL's `logps/chosen` and `logps/rejected` are the means over the pairs of the
exact lens's log pi(y | x) under the initial model, for every response of the fixed set.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl", reason="the TRL extra is not installed (pip install -e '.[trl]')")

from lab.bridge.exact_lm import all_responses, response_log_probs, reward_table  # noqa: E402
from lab.bridge.tiny_lm import TinyLM, build_model  # noqa: E402
from lab.bridge.trl_dpo import TRLDPO, offline_pairs, train_trl_dpo  # noqa: E402
from tasks.sorting import make_task, variable_length_reward  # noqa: E402

CAP, EOS = 4, 5


def response_index(text: str, index: dict) -> int:
    tokens = [int(t) for t in text.split()]
    return index[tuple(tokens + [EOS] * (CAP - len(tokens)))]


def test_trl_dpo_logps_are_the_lens_log_probs_of_the_fixed_set():
    task = make_task()
    run = TRLDPO(epochs=1, pairs_per_prompt=6, beta=0.1, seed=3, model=TinyLM(seed=3))
    responses = all_responses(task.vocab_size, CAP)
    rewards = reward_table(task.prompts, responses, variable_length_reward(run.reward, task.vocab_size))
    rows = offline_pairs(task, run, responses, rewards)
    assert any(len(row["chosen"].split()) == CAP or len(row["rejected"].split()) == CAP for row in rows)
    with torch.no_grad():
        log_probs = response_log_probs(build_model(run.model).eval(), task.prompts, responses, EOS)
    index = {tuple(r.tolist()): i for i, r in enumerate(responses)}
    prompt_of = {" ".join(map(str, p.tolist())): b for b, p in enumerate(task.prompts)}
    expected = {side: sum(float(log_probs[prompt_of[row["prompt"]], response_index(row[side], index)])
                          for row in rows) / len(rows) for side in ("chosen", "rejected")}
    records, _, _ = train_trl_dpo(task, run)
    assert records[1]["chosen_logps"] == pytest.approx(expected["chosen"], abs=1e-5)
    assert records[1]["rejected_logps"] == pytest.approx(expected["rejected"], abs=1e-5)


def test_offline_pairs_winners_have_the_higher_reward_under_argmax():
    """Argmax preferences: every kept pair's chosen response scores strictly higher; ties are dropped."""
    task = make_task()
    run = TRLDPO(pairs_per_prompt=20, seed=0)
    responses = all_responses(task.vocab_size, CAP)
    rewards = reward_table(task.prompts, responses, variable_length_reward(run.reward, task.vocab_size))
    index = {tuple(r.tolist()): i for i, r in enumerate(responses)}
    rows = offline_pairs(task, run, responses, rewards)
    prompt_of = {" ".join(map(str, p.tolist())): b for b, p in enumerate(task.prompts)}
    assert 0 < len(rows) <= 3 * 20
    for row in rows:
        b = prompt_of[row["prompt"]]
        assert rewards[b, response_index(row["chosen"], index)] > rewards[b, response_index(row["rejected"], index)]
