"""The exact lens on TRL's model: the enumerated distribution is the one TRL scores and samples.

`lab.bridge.exact_lm` enumerates every response of the autoregressive space and scores it by one
forward pass. Its per-token log-probs must be those TRL's own `_get_per_token_logps_and_entropies`
computes at the same temperature, the probabilities must sum to 1 (the tokenizer's vocabulary is the
task's values and EOS, nothing else can be sampled), and TRL's sampled completions must follow the
enumerated distribution (a chi-square test at a fixed seed, false-alarm rate 1e-3).
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chi2

from tests.bridge.trl_tools import TINY, grpo_trainer, model_folder

from lab.bridge.exact_lm import all_responses, exact_metrics, response_log_probs, sequences
from lab.bridge.tiny_lm import build_model
from lab.policies.ar_model import response_mask

PROMPTS = torch.tensor([[1, 0, 2], [3, 2, 4], [1, 2, 3]])
CAP = 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_enumerated_probabilities_sum_to_one(temperature):
    """Every prompt's response probabilities over the enumerated space sum to 1 (to 1e-12)."""
    log_probs = response_log_probs(build_model(TINY).eval(), PROMPTS, all_responses(TINY.vocab_size, CAP),
                                   TINY.eos_id, temperature)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_enumerated_log_probs_are_trl_per_token_log_probs(folder, temperature):
    """The lens's per-sequence log pi(y | x) equals the sum of TRL's per-token log-probs (its own
    `_get_per_token_logps_and_entropies`, logits divided by the temperature) over live tokens, to 1e-5
    (float32 forward passes)."""
    trainer = grpo_trainer(folder, lambda completions, **kwargs: [0.0] * len(completions),
                           temperature=temperature, max_completion_length=CAP, num_generations=3,
                           per_device_train_batch_size=3)
    responses = all_responses(TINY.vocab_size, CAP)[::37]  # a spread of lengths and contents
    ours = response_log_probs(trainer.model, PROMPTS, responses, TINY.eos_id, temperature)
    tokens = sequences(PROMPTS, responses).reshape(-1, PROMPTS.shape[1] + CAP)
    with torch.no_grad():
        theirs, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, tokens, torch.ones_like(tokens), CAP)
    live = response_mask(responses, TINY.eos_id).repeat(PROMPTS.shape[0], 1)
    theirs = (theirs.double() * live).sum(-1).reshape(ours.shape)
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-5)


def test_trl_samples_follow_the_enumerated_distribution(folder):
    """Completions drawn by TRL's own generation path (`_generate_and_score_completions`) have the
    response lengths and first tokens the exact distribution predicts: chi-square goodness of fit
    on 3 x 64 x 4 completions, rejected only above the 1 - 1e-3 quantile (fixed seed)."""
    group = 64
    drawn = []
    trainer = grpo_trainer(folder, lambda completions, completion_ids, **kwargs: [
        drawn.append(ids) or 0.0 for ids in completion_ids], max_completion_length=CAP, num_generations=group,
        per_device_train_batch_size=3 * group, generation_batch_size=3 * group, seed=0)
    rows = [{"prompt": row["prompt"]} for row in trainer.train_dataset for _ in range(group)]
    for _ in range(4):
        trainer._generate_and_score_completions(rows)
    responses = all_responses(TINY.vocab_size, CAP)
    probs = response_log_probs(trainer.model, PROMPTS, responses, TINY.eos_id).exp().mean(0)  # the prompts are equally often drawn
    lengths = response_mask(responses, TINY.eos_id).sum(-1)
    for key, expected_by in (("length", lengths), ("first token", responses[:, 0])):
        categories = expected_by.unique()
        expected = torch.stack([probs[expected_by == c].sum() for c in categories]) * len(drawn)
        observed = torch.tensor([sum(1 for ids in drawn if (min(len(ids), CAP) if key == "length" else ids[0]) == c)
                                 for c in categories.tolist()], dtype=torch.float64)
        statistic = float(((observed - expected) ** 2 / expected).sum())
        assert statistic < chi2.ppf(1 - 1e-3, len(categories) - 1), (key, observed, expected)


def test_exact_metrics_from_a_hand_made_distribution():
    """The four metrics on a two-response space: E[r], -E[log p], KL(p || p0) and P(optimal)."""
    log_p = torch.tensor([[0.25, 0.75]], dtype=torch.float64).log()
    log_p0 = torch.tensor([[0.5, 0.5]], dtype=torch.float64).log()
    rewards = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    metrics = exact_metrics(log_p, log_p0, rewards)
    assert metrics["reward_exact"] == pytest.approx(0.25 + 2.25, abs=1e-15)
    assert metrics["entropy_exact"] == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-12)
    assert metrics["kl_exact"] == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5), abs=1e-12)
    assert metrics["optimal_prob"] == pytest.approx(0.75, abs=1e-15)
