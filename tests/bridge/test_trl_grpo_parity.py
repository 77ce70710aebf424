"""The lab's GRPO loss and deltas against TRL's own code (TRL 1.16.0, `GRPOTrainer`).

Mapping (the lab's flag -> TRL's config field), each checked below to 1e-12 in float64:
    --loss clipped, clip eps         -> epsilon (epsilon_low = epsilon_high)
    --loss-agg seq-mean-token-mean   -> loss_type="grpo"
    --loss-agg token-mean            -> loss_type="bnpo", and "dapo" (one process, one micro-batch)
    --loss-agg seq-mean-token-sum-norm, horizon = max length -> loss_type="dr_grpo"
    --kl beta (k3 in the loss)       -> beta = beta * max length, use_bias_correction_kl=False
    --delta normalized, std_eps=1e-4 -> scale_rewards="group"
    --delta centered                 -> scale_rewards="none"

Differences (docs/trl.md): TRL's beta weighs the mean per-token k3, the lab's the
sequence's sum (a factor of the max length); TRL's default `use_bias_correction_kl=True` multiplies
k3 by the importance ratio, which changes the KL gradient even at ratio 1; `scale_rewards="batch"`
(the std over the whole batch) has no lab counterpart.
"""

from __future__ import annotations

import pytest
import torch

from tests.bridge.trl_tools import grpo_loss, grpo_trainer, model_folder

from lab.core.aggregation import kl_term
from lab.core.deltas import compute_deltas
from lab.core.kl import k3
from lab.core.losses import compute_loss

BATCH, TRIAL, POS = 2, 3, 4
EPS = 0.2
LOSS_TYPES = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
              "dr_grpo": "seq-mean-token-sum-norm"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory)


def shared_inputs(ratio_at_one: bool):
    """Per-token log-probs float[seq pos] (seq = batch x trial), old and reference ones, advantages
    float[seq] and a mask with two short responses. Off ratio 1 the old log-probs differ by up to
    about 1 nat, so many ratios fall outside [1 - eps, 1 + eps] and the clip is active."""
    g = torch.Generator().manual_seed(0)
    shape = (BATCH * TRIAL, POS)
    log_probs = torch.randn(shape, generator=g, dtype=torch.float64) * 0.3 - 1.0
    old = log_probs.clone() if ratio_at_one else log_probs + torch.randn(shape, generator=g, dtype=torch.float64) * 0.3
    ref = log_probs + torch.randn(shape, generator=g, dtype=torch.float64) * 0.3
    advantages = torch.randn(BATCH * TRIAL, generator=g, dtype=torch.float64)
    mask = torch.ones(shape, dtype=torch.bool)
    mask[0, 3:] = False
    mask[4, 2:] = False
    return log_probs, old, ref, advantages, mask


def lab_loss(log_probs, old, ref, advantages, mask, agg: str, beta: float):
    """The lab's loss on the same numbers, in its [batch trial pos] layout."""
    shape = (BATCH, TRIAL, POS)
    loss = compute_loss(log_probs.reshape(shape), advantages.reshape(BATCH, TRIAL), "clipped", old.reshape(shape),
                        EPS, agg, mask.reshape(shape), POS)
    return loss + beta * kl_term(k3(log_probs.reshape(shape), ref.reshape(shape)), agg, mask.reshape(shape), POS)


@pytest.mark.parametrize("ratio_at_one", [True, False], ids=["ratio-at-1", "clipping-active"])
@pytest.mark.parametrize("beta", [0.0, 0.05], ids=["no-kl", "kl"])
@pytest.mark.parametrize("loss_type", list(LOSS_TYPES))
def test_grpo_loss_and_gradient_match_trl_for_each_loss_type(folder, loss_type, beta, ratio_at_one):
    """The lab's clipped loss under the matching --loss-agg, plus its k3 penalty, has TRL's value and
    gradient for `loss_type` grpo, bnpo, dapo and dr_grpo, with and without TRL's per-token k3
    (beta_TRL = max length x beta_lab), with the clip active and with the ratio at 1."""
    log_probs, old, ref, advantages, mask = shared_inputs(ratio_at_one)
    if not ratio_at_one:
        ratio = (log_probs - old).exp()[mask]
        assert ((ratio < 1 - EPS) | (ratio > 1 + EPS)).float().mean() > 0.2  # the clip is really exercised
    trainer = grpo_trainer(folder, lambda completions, **kwargs: [0.0] * len(completions), loss_type=loss_type,
                           epsilon=EPS, beta=beta * POS, max_completion_length=POS, use_bias_correction_kl=False,
                           num_generations=TRIAL, per_device_train_batch_size=TRIAL)
    theirs_input = log_probs.clone().requires_grad_(True)
    theirs = grpo_loss(trainer, theirs_input, old, ref, advantages, mask)
    ours_input = log_probs.clone().requires_grad_(True)
    ours = lab_loss(ours_input, old, ref, advantages, mask, LOSS_TYPES[loss_type], beta)
    theirs.backward()
    ours.backward()
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert torch.allclose(ours_input.grad, theirs_input.grad, rtol=0, atol=1e-12)


def test_trl_default_kl_bias_correction_changes_the_gradient_not_the_value_at_ratio_one(folder):
    """TRL's default `use_bias_correction_kl=True` multiplies k3 by the (differentiable) ratio: at ratio 1
    the loss's value is the lab's, its gradient is not. The lab's k3 in the loss is TRL's with the
    correction off (the test above); this records the difference rather than hiding it."""
    log_probs, old, ref, advantages, mask = shared_inputs(ratio_at_one=True)
    trainer = grpo_trainer(folder, lambda completions, **kwargs: [0.0] * len(completions), loss_type="grpo",
                           epsilon=EPS, beta=0.05 * POS, max_completion_length=POS,
                           num_generations=TRIAL, per_device_train_batch_size=TRIAL)
    assert trainer.args.use_bias_correction_kl
    theirs_input = log_probs.clone().requires_grad_(True)
    theirs = grpo_loss(trainer, theirs_input, old, ref, advantages, mask)
    ours_input = log_probs.clone().requires_grad_(True)
    ours = lab_loss(ours_input, old, ref, advantages, mask, "seq-mean-token-mean", 0.05)
    theirs.backward()
    ours.backward()
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert not torch.allclose(ours_input.grad, theirs_input.grad, rtol=0, atol=1e-6)


REWARDS = torch.tensor([[1.0, 0.0, 2.0, 0.5], [3.0, 3.0, 3.0, 3.0], [0.0, 1.0, 0.0, 0.0]])


@pytest.mark.parametrize(("scale_rewards", "delta"), [("group", "normalized"), ("none", "centered")])
def test_deltas_match_trl_advantages(folder, scale_rewards, delta):
    """TRL's advantages from `_generate_and_score_completions` (its own sampling and scoring path, with a
    reward function returning fixed rewards) equal the lab's deltas: scale_rewards="group" is
    `--delta normalized` with std_eps = 1e-4 and the Bessel-corrected std, "none" is `--delta centered`;
    a group of equal rewards gives zeros in both. TRL computes in float32, hence 1e-6."""
    prompts, group = REWARDS.shape
    trainer = grpo_trainer(folder, lambda completions, **kwargs: REWARDS.flatten().tolist(), beta=0.0,
                           scale_rewards=scale_rewards, num_generations=group, max_completion_length=3,
                           per_device_train_batch_size=prompts * group, generation_batch_size=prompts * group)
    rows = [{"prompt": row["prompt"]} for row in trainer.train_dataset for _ in range(group)]
    advantages = trainer._generate_and_score_completions(rows)["advantages"].reshape(prompts, group)
    deltas = compute_deltas(REWARDS.double(), delta, std_eps=1e-4)
    assert torch.allclose(advantages.double(), deltas, rtol=0, atol=1e-6)
    assert torch.equal(advantages[1], torch.zeros(group))
