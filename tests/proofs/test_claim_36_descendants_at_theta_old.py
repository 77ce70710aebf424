"""Claim 36 (docs/claims.md): at theta = theta_old every descendant of the clip has the policy gradient as its
expected gradient, so their exact flows (lr -> 0, a fresh batch per step) are GRPO's; they part only on a reused
batch. The top-entropy gate keeps exactly the gated positions' part of it.

Sources: DAPO (arXiv 2503.14476), MiniMax-M1 / CISPO (arXiv 2506.13585), GSPO (arXiv 2507.18071), SAPO
(arXiv 2511.20347), LUSPO (arXiv 2602.05261), VESPO (arXiv 2602.10693), INTELLECT-2 (arXiv 2505.07291), the 80/20
paper (arXiv 2506.01939); claim 9 for PPO's clip. Exact: every response of the lecture's prompts enumerated.
"""

import pytest
import torch

from tests.proofs.proof_tools import LENS_SEEDS as SEEDS, lecture_lens

from lab.exact.surrogate_lens import entropy_gate, expected_gradient, on_policy_gradient

DESCENDANTS = {
    "clip-higher": dict(loss="clipped", clip_eps=0.2, epsilon_high=0.28),
    "two-sided": dict(loss="clipped", clip_eps=0.2, clip_delta=1.5),
    "gspo": dict(loss="clipped", clip_eps=0.2, importance_sampling_level="sequence"),
    "cispo": dict(loss="cispo", epsilon_high=5.0),
    "sapo": dict(loss="sapo"),
    "luspo": dict(loss="luspo", clip_eps=0.2),
    "vespo": dict(loss="vespo"),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(DESCENDANTS))
def test_claim_36_every_descendant_has_the_policy_gradient_at_theta_old(name, seed):
    """Each ratio is 1 at theta_old: the clips are inactive, CISPO's weight min(1, eps_max) = 1, SAPO's gate has
    slope 4 sigmoid'(0) = 1, VESPO's phi(1) = 1, GSPO's and LUSPO's s_i = 1. Equal to 1e-12. Mutant: CISPO with a
    cap eps_max = 0.5 < 1 halves the gradient and fails."""
    old, responses, advantages = lecture_lens(seed)
    settings = dict(DESCENDANTS[name])
    g = expected_gradient(old, old, advantages, settings.pop("loss"), responses, **settings)
    torch.testing.assert_close(g, on_policy_gradient(old, advantages, responses), rtol=0, atol=1e-12)
    mutant = expected_gradient(old, old, advantages, "cispo", responses, epsilon_high=0.5)
    assert not torch.allclose(mutant, on_policy_gradient(old, advantages, responses), atol=1e-6)


@pytest.mark.parametrize("quantile", [0.2, 0.5])
def test_claim_36_the_top_entropy_gate_keeps_the_gated_positions_part_of_the_policy_gradient(quantile):
    """With the gate, the expected gradient at theta_old is the policy gradient on the gated (prompt, position)
    entries and 0 elsewhere (the factorised policy's positions are separate parameters). Mutant: the gate's
    complement (the low-entropy positions) fails."""
    old, responses, advantages = lecture_lens(0)
    g = expected_gradient(old, old, advantages, "clipped", responses, clip_eps=0.2, top_entropy_quantile=quantile)
    kept = entropy_gate(old, quantile, responses)[:, 0, :].unsqueeze(-1)  # bool[prompt pos 1]
    g_on = on_policy_gradient(old, advantages, responses)
    torch.testing.assert_close(g, torch.where(kept, g_on, 0.0), rtol=0, atol=1e-12)
    assert not torch.allclose(g, torch.where(~kept, g_on, 0.0), atol=1e-6)
    assert 0 < kept.sum() < kept.numel()
