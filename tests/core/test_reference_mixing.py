"""The reference that follows the policy (lab.core.reference_mixing; TR-DPO arXiv:2404.09656, TRL sync_ref_model);
parity with TRL's `SyncRefModelCallback` is tests/bridge/test_trl_sampling_parity.py."""

import torch

from lab.core.reference_mixing import mix_reference, sync_due


def test_mixing_is_alpha_policy_plus_one_minus_alpha_reference():
    """phi_ref <- alpha phi + (1 - alpha) phi_ref: with phi_ref = 0, phi = 1, alpha 0.25 every entry is 0.25; alpha
    per run [0, 1] leaves run 0 at the reference and sets run 1 to the policy. Mutant tried: alpha on the reference
    (0.75)."""
    ref, theta = [torch.zeros(2, 3)], [torch.ones(2, 3)]
    assert torch.equal(mix_reference(ref, theta, 0.25)[0], torch.full((2, 3), 0.25))
    per_run = mix_reference(ref, theta, torch.tensor([0.0, 1.0]))[0]
    assert per_run[0].eq(0).all() and per_run[1].eq(1).all()


def test_repeated_mixing_decays_the_initial_reference_geometrically():
    """With the policy held at 1 and the reference at 0, n mixes leave 1 - (1 - alpha)^n (alpha = 0.6: 0.6, 0.84,
    0.936). Mutant tried: alpha^n."""
    ref = [torch.zeros(1, dtype=torch.float64)]
    theta = [torch.ones(1, dtype=torch.float64)]
    for n in range(1, 4):
        ref = mix_reference(ref, theta, 0.6)
        assert abs(ref[0].item() - (1 - 0.4 ** n)) < 1e-15


def test_sync_is_due_after_every_tau_th_optimizer_step():
    """Steps counted from 1: with tau = 3 the reference mixes after steps 3, 6, 9 (TRL's global_step % tau == 0
    after the step). Mutant tried: counting from 0 (mixes after step 1)."""
    assert [s for s in range(1, 10) if sync_due(s, 3)] == [3, 6, 9]
