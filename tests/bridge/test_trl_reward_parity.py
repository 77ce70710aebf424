"""The lab's reward-model loss (`lab.core.reward_model`) against TRL 1.16.0's `RewardTrainer.compute_loss`.

    -log sigmoid(r_c - r_r) averaged over pairs, with TRL's optional per-pair `margin` and
    `center_rewards_coefficient`; TRL's logged `accuracy` (strict) and `margin`.

TRL's method runs the model on the batch (chosen rows, then rejected rows) and reads one score per
row from its logits; the test hands it a stand-in whose logits are the scores it chose.
"""

from __future__ import annotations

import types

import pytest
import torch

from tests.bridge.trl_tools import model_folder, quiet_args, trl

from lab.core.reward_model import reward_model_loss, reward_model_metrics

CHOSEN = torch.tensor([2.0, 0.5, -1.0, 3.0, 0.25], dtype=torch.float64)
REJECTED = torch.tensor([1.0, 0.5, 0.0, -2.0, 0.75], dtype=torch.float64)
MARGIN = torch.tensor([0.5, 1.0, 0.0, 2.0, -0.5], dtype=torch.float64)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory)


def trl_loss(folder, with_margin: bool, center: float | None):
    from datasets import Dataset

    from lab.bridge.tiny_lm import TinyLM, build_tokenizer

    data = Dataset.from_dict({"chosen": ["1 0 2 0 1 2"], "rejected": ["1 0 2 2 1 0"]})
    trainer = trl.RewardTrainer(model=str(folder), args=quiet_args(trl.RewardConfig, folder / "rm_out",
                                                                   center_rewards_coefficient=center),
                                train_dataset=data, processing_class=build_tokenizer(TinyLM()))
    trainer.model.eval()
    scores = torch.cat([CHOSEN, REJECTED]).unsqueeze(-1).requires_grad_(True)
    inputs = {"attention_mask": torch.ones(2 * len(CHOSEN), 3, dtype=torch.long)}
    if with_margin:
        inputs["margin"] = MARGIN
    loss = trainer.compute_loss(lambda **kwargs: types.SimpleNamespace(logits=scores), inputs)
    logged = {k: v[-1] for k, v in trainer._metrics["eval"].items()}
    return loss, scores, logged


@pytest.mark.parametrize(("with_margin", "center"), [(False, None), (True, None), (True, 0.01)])
def test_reward_model_loss_and_gradient_match_trl(folder, with_margin, center):
    """The lab's loss has TRL's value and gradient in the scores, with and without a margin and the
    centring term; the logged accuracy (strict: the tied pair is not right) and margin are TRL's."""
    theirs, scores, logged = trl_loss(folder, with_margin, center)
    ours_scores = torch.cat([CHOSEN, REJECTED]).requires_grad_(True)
    ours = reward_model_loss(ours_scores[:5], ours_scores[5:], MARGIN if with_margin else None, center)
    theirs.backward()
    ours.backward()
    assert torch.allclose(ours, theirs.double(), rtol=0, atol=1e-12)
    assert torch.allclose(ours_scores.grad, scores.grad.squeeze(-1).double(), rtol=0, atol=1e-12)
    metrics = reward_model_metrics(CHOSEN, REJECTED)
    assert metrics["accuracy"] == pytest.approx(logged["accuracy"], abs=1e-6) and metrics["accuracy"] == 0.4
    assert metrics["margin"] == pytest.approx(logged["margin"], abs=1e-12)
