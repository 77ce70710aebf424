"""Importance-sampling weights and the off-policy sequence mask (lab.core.importance), against their definitions
computed by hand in float64 (TRL 1.16's `vllm_importance_sampling_*`, DeepSeek-V3.2 arXiv:2512.02556 eq. 9; the
parity with TRL's own code is tests/bridge/test_trl_sampling_parity.py)."""

import math

import pytest
import torch

from lab.core.importance import importance_weights, off_policy_mask

# one batch of 1, trial 2, pos 3: per-token log pi_old - log mu chosen so the weights are round numbers
LOG_W = torch.tensor([[[math.log(2.0), math.log(2.0), math.log(0.25)],
                       [math.log(4.0), math.log(0.5), 0.0]]], dtype=torch.float64)
MASK = torch.tensor([[[True, True, True], [True, True, False]]])


def weights(mode, clip_min=None, clip_max=3.0, mask=None):
    old = torch.full_like(LOG_W, -1.0)
    return importance_weights(old, old - LOG_W, mode, clip_min, clip_max, mask)


def test_token_truncate_clamps_each_token_ratio():
    """token-truncate: w_t = clamp(pi_old / mu, C_min, C_max) per token. Ratios 2, 2, 0.25 / 4, 0.5, 1 with
    C = [0.5, 3] give 2, 2, 0.5 / 3, 0.5, 1. Mutants tried: no lower clamp (0.25 stays), ratio mu / pi_old."""
    expected = torch.tensor([[[2.0, 2.0, 0.5], [3.0, 0.5, 1.0]]], dtype=torch.float64)
    torch.testing.assert_close(weights("token-truncate", 0.5, 3.0), expected, rtol=1e-12, atol=0)


def test_token_mask_zeroes_tokens_outside_the_bounds():
    """token-mask: w_t = ratio if C_min <= ratio <= C_max else 0; with C_min None the band is open below.
    Mutant tried: clamping instead of zeroing (3.0 in place of 0 for the ratio 4)."""
    expected = torch.tensor([[[2.0, 2.0, 0.25], [0.0, 0.5, 1.0]]], dtype=torch.float64)
    torch.testing.assert_close(weights("token-mask", None, 3.0), expected, rtol=1e-12, atol=0)
    at_bound = weights("token-mask", 0.5, 2.0)  # a ratio equal to a bound is kept (TRL masks < min, > max)
    torch.testing.assert_close(at_bound, torch.tensor([[[2.0, 2.0, 0.0], [0.0, 0.5, 1.0]]], dtype=torch.float64),
                               rtol=1e-12, atol=0)


def test_sequence_modes_weigh_the_whole_response_by_the_product_of_its_live_token_ratios():
    """sequence-*: one weight per response, the product of its live tokens' ratios: 2 x 2 x 0.25 = 1 and 4 x 0.5 =
    2 (the third token is padding; unmasked it would count its ratio 1 all the same here, so the mask is checked
    with a padding ratio of 8 below). Mutants tried: the mean of log ratios (GSPO's) instead of the sum; padding
    counted."""
    torch.testing.assert_close(weights("sequence-truncate", None, 3.0, MASK),
                               torch.tensor([[[1.0], [2.0]]], dtype=torch.float64), rtol=1e-12, atol=0)
    torch.testing.assert_close(weights("sequence-mask", None, 1.5, MASK),
                               torch.tensor([[[1.0], [0.0]]], dtype=torch.float64), rtol=1e-12, atol=0)
    padded = LOG_W.clone()
    padded[0, 1, 2] = math.log(8.0)
    old = torch.zeros_like(padded)
    torch.testing.assert_close(importance_weights(old, -padded, "sequence-truncate", None, 100.0, MASK)[0, 1, 0],
                               torch.tensor(2.0, dtype=torch.float64), rtol=1e-12, atol=0)


def test_weights_carry_no_gradient():
    """The weights are constants of the step: no gradient reaches log pi_old through them (mutant: no detach)."""
    old = torch.zeros(1, 2, 3, dtype=torch.float64, requires_grad=True)
    assert not importance_weights(old, old.detach() - LOG_W, "token-truncate").requires_grad


@pytest.mark.parametrize("mode", ["token-truncate", "sequence-mask"])
def test_on_policy_weights_are_one(mode):
    """mu = pi_old (no mismatch): every weight is exactly 1 under every mode, so the correction changes nothing."""
    old = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.equal(importance_weights(old, old, mode), torch.ones_like(old[..., : 4 if "token" in mode else 1]))


def test_off_policy_mask_drops_only_negative_advantage_responses_far_off_policy():
    """keep = [A >= 0] or [mean live-token (log mu - log pi_theta) <= delta]. Responses: A = -1 with mean KL 0.6
    (dropped at delta 0.5), A = +1 with the same KL (kept), A = -1 with mean KL 0.4 (kept), A = 0 with KL 0.6 (kept:
    A >= 0). The mean is over live tokens: the last response's padding carries a KL of 10 that must not count.
    Mutants tried: A > 0 in place of A >= 0 (drops the fourth), the sum over tokens (drops the third), padding in
    the mean."""
    log_probs = torch.zeros(1, 4, 2, dtype=torch.float64)
    sampling = torch.tensor([[[0.6, 0.6], [0.6, 0.6], [0.3, 0.5], [0.6, 10.0]]], dtype=torch.float64)
    mask = torch.tensor([[[True, True], [True, True], [True, True], [True, False]]])
    deltas = torch.tensor([[-1.0, 1.0, -1.0, 0.0]], dtype=torch.float64)
    keep = off_policy_mask(deltas, log_probs, sampling, 0.5, mask)
    assert keep.shape == (1, 4, 1)
    assert keep.flatten().tolist() == [0.0, 1.0, 1.0, 1.0]
    deltas[0, 3] = -1.0
    assert off_policy_mask(deltas, log_probs, sampling, 0.5, mask).flatten().tolist() == [0.0, 1.0, 1.0, 0.0]
