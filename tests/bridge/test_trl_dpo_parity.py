"""The lab's DPO loss (`lab.core.dpo.dpo_loss`) against TRL's own code (TRL 1.16.0, `DPOTrainer`).

    --dpo-loss sigmoid, label smoothing 0   -> loss_type=["sigmoid"]
    --dpo-loss ipo on per-token mean log-ratios -> loss_type=["ipo"] (TRL divides each sequence's
                                                log-ratio by its completion's token count)

Differences (docs/trl.md): TRL 1.16's "sigmoid" ignores `label_smoothing` (it applies to
its "robust" and "exo_pair" losses); the lab's label-smoothed sigmoid is the conservative-DPO form
-(1 - e) log sigmoid(beta h) - e log sigmoid(-beta h), which older TRL releases computed under "sigmoid".
"""

from __future__ import annotations

import pytest
import torch

from tests.bridge.trl_tools import dpo_loss, dpo_trainer, model_folder

from lab.core.dpo import dpo_loss as lab_dpo_loss

PAIRS, POS = 3, 4
BETA = 0.3


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory)


def shared_inputs():
    """Per-token log-probs float[2P pos] (chosen rows, then rejected), the reference's, and a
    completion mask int[2P pos+1] (TRL's, before its shift) with two responses shorter than the rest."""
    g = torch.Generator().manual_seed(1)
    token_log_probs = torch.randn(2 * PAIRS, POS, generator=g, dtype=torch.float64) * 0.5 - 1.0
    ref_token_log_probs = torch.randn(2 * PAIRS, POS, generator=g, dtype=torch.float64) * 0.5 - 1.0
    completion_mask = torch.ones(2 * PAIRS, POS + 1, dtype=torch.long)
    completion_mask[:, 0] = 0  # the prompt's last token
    completion_mask[1, 3:] = 0
    completion_mask[4, 4:] = 0
    return token_log_probs, ref_token_log_probs, completion_mask


def split(values):
    return values[:PAIRS], values[PAIRS:]


def test_dpo_sigmoid_loss_and_gradient_match_trl(folder):
    """DPO's sigmoid loss -log sigmoid(beta h) averaged over pairs (Rafailov et al. 2023, eq. 7) has TRL's
    value and gradient in the sequence log-probs."""
    token_log_probs, ref_token_log_probs, completion_mask = shared_inputs()
    live = completion_mask[:, 1:].double()
    ref_sums = (ref_token_log_probs * live).sum(-1)
    theirs_input = token_log_probs.clone().requires_grad_(True)
    theirs = dpo_loss(dpo_trainer(folder, beta=BETA, loss_type=["sigmoid"]), theirs_input, ref_sums, completion_mask)
    ours_input = token_log_probs.clone().requires_grad_(True)
    sums = (ours_input * live).sum(-1)
    ours = lab_dpo_loss(*split(sums), *split(ref_sums), BETA, "sigmoid")[0].mean()
    theirs.backward()
    ours.backward()
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert torch.allclose(ours_input.grad, theirs_input.grad, rtol=0, atol=1e-12)


def test_ipo_loss_matches_trl_on_length_normalised_log_ratios(folder):
    """IPO's loss (h - 1/(2 beta))^2 (Azar et al. 2023, eq. 17) is TRL's when h is taken from per-token
    mean log-ratios, each sequence's sum divided by its completion's token count."""
    token_log_probs, ref_token_log_probs, completion_mask = shared_inputs()
    live = completion_mask[:, 1:].double()
    ref_sums = (ref_token_log_probs * live).sum(-1)
    theirs_input = token_log_probs.clone().requires_grad_(True)
    theirs = dpo_loss(dpo_trainer(folder, beta=BETA, loss_type=["ipo"]), theirs_input, ref_sums, completion_mask)
    ours_input = token_log_probs.clone().requires_grad_(True)
    lengths = live.sum(-1)
    means, ref_means = (ours_input * live).sum(-1) / lengths, ref_sums / lengths
    ours = lab_dpo_loss(*split(means), *split(ref_means), BETA, "ipo")[0].mean()
    theirs.backward()
    ours.backward()
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert torch.allclose(ours_input.grad, theirs_input.grad, rtol=0, atol=1e-12)


def test_trl_sigmoid_ignores_label_smoothing_where_the_lab_applies_it(folder):
    """TRL 1.16's "sigmoid" gives the same loss at label_smoothing 0.1 as at 0; the lab's conservative-DPO
    form at 0.1 does not. The two agree only without smoothing (the first test)."""
    token_log_probs, ref_token_log_probs, completion_mask = shared_inputs()
    live = completion_mask[:, 1:].double()
    ref_sums = (ref_token_log_probs * live).sum(-1)
    smoothed = dpo_loss(dpo_trainer(folder, beta=BETA, loss_type=["sigmoid"], label_smoothing=0.1),
                        token_log_probs, ref_sums, completion_mask)
    plain = dpo_loss(dpo_trainer(folder, beta=BETA, loss_type=["sigmoid"]), token_log_probs, ref_sums, completion_mask)
    sums = (token_log_probs * live).sum(-1)
    ours = lab_dpo_loss(*split(sums), *split(ref_sums), BETA, "sigmoid", label_smoothing=0.1)[0].mean()
    assert torch.equal(smoothed, plain)
    assert not torch.allclose(ours, plain, rtol=0, atol=1e-6)
