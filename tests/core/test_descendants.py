"""GRPO's descendants in lab/core (issue 37): clip-higher, the two-sided clip, GSPO's sequence ratio, the top-entropy
gate and the truncation mask, each against its definition written out here element by element.

Sources: DAPO (clip-higher, overlong filtering), arXiv 2503.14476; INTELLECT-2 (two-sided clip), arXiv 2505.07291;
GSPO, arXiv 2507.18071; "Beyond the 80/20 rule", arXiv 2506.01939; TRL 1.16.0's `GRPOTrainer._compute_loss` and
`get_high_entropy_mask`. The loss formulas of CISPO, SAPO, LUSPO and VESPO are checked in tests/core/test_losses.py
(value and gradient against a reference written per token) and against TRL in tests/bridge.
"""

import math

import pytest
import torch

from lab.core.aggregation import aggregate
from lab.core.losses import clip_fractions, compute_loss, log_ratios, ppo_clip_fractions, ratios
from lab.core.token_masks import top_entropy_gate, top_entropy_gate_plain, untruncated


def one_token(rho: float, delta: float, **settings):
    """(loss, d loss / d log-prob) of one token with ratio rho and delta, under the clipped loss."""
    log_probs = torch.tensor([[[math.log(rho)]]], dtype=torch.float64, requires_grad=True)
    loss = compute_loss(log_probs, torch.tensor([[delta]], dtype=torch.float64), "clipped",
                        torch.zeros(1, 1, 1, dtype=torch.float64), **settings)
    loss.backward()
    return loss.item(), log_probs.grad.item()


@pytest.mark.parametrize("rho, delta, symmetric_grad, higher_grad", [
    (1.25, +1.0, 0.0, -1.25),   # above 1 + 0.2 but below 1 + 0.28: clip-higher keeps its gradient
    (1.30, +1.0, 0.0, 0.0),     # above both upper bounds: clipped either way
    (0.75, -1.0, 0.0, 0.0),     # below 1 - 0.2: the lower bound is unchanged
    (0.85, -1.0, 0.85, 0.85),   # inside both bands
])
def test_clip_higher_moves_only_the_upper_bound(rho, delta, symmetric_grad, higher_grad):
    """DAPO's clip-higher (arXiv 2503.14476, TRL `epsilon_high`): the band is [1 - eps, 1 + eps_high], so a token
    with delta > 0 and a ratio between 1 + eps and 1 + eps_high keeps its gradient -rho d; the negative side is as
    PPO's. Mutant tried: eps_high on both bounds (clamp(rho, 1 - eps_high, 1 + eps_high)) gives the rho = 0.75
    token a gradient and fails."""
    assert one_token(rho, delta, clip_eps=0.2)[1] == pytest.approx(symmetric_grad, abs=1e-12)
    assert one_token(rho, delta, clip_eps=0.2, epsilon_high=0.28)[1] == pytest.approx(higher_grad, abs=1e-12)


@pytest.mark.parametrize("rho, value, grad", [
    (5.0, 3.0, 0.0),    # delta < 0, ratio far above 1: PPO's loss is -rho d = 5, capped at delta = 3, no gradient
    (2.0, 2.0, 2.0),    # under the cap: PPO's -rho d, gradient -rho d = 2
    (0.5, 0.8, 0.0),    # below 1 - eps: the clipped term (1 - 0.2) wins, as in PPO
])
def test_two_sided_clip_caps_a_negative_token_ratio(rho, value, grad):
    """INTELLECT-2's two-sided clip (arXiv 2505.07291, TRL `delta`): for delta < 0 PPO's min(rho d, clip(rho) d)
    is -rho |d|, unbounded as rho grows; the cap min(rho, delta) bounds it at delta |d| (and makes its gradient 0).
    d = -1, eps = 0.2, cap 3. Mutant tried: capping the clipped term instead of the unclipped one leaves the
    rho = 5 token's loss at 5 and fails."""
    got_value, got_grad = one_token(rho, -1.0, clip_eps=0.2, clip_delta=3.0)
    assert got_value == pytest.approx(value, abs=1e-12) and got_grad == pytest.approx(grad, abs=1e-12)
    assert one_token(5.0, -1.0, clip_eps=0.2)[0] == pytest.approx(5.0)  # without the cap: PPO's 5


def test_sequence_ratio_is_the_exp_of_the_mean_live_log_ratio():
    """GSPO (arXiv 2507.18071, TRL importance_sampling_level="sequence"): s_i = exp((1/|o_i|) sum_t m_t (l_t -
    l_old_t)), the same for every token of response i, padding left out of the mean. Worked: log-ratios [0.3, -0.1,
    0.4] with the last padded give s = exp(0.1). Mutant tried: the mean over every position (padding's log-ratio
    0.4 included) gives exp(0.2) and fails."""
    log_probs = torch.tensor([[[0.3, -0.1, 0.4]]], dtype=torch.float64)
    mask = torch.tensor([[[True, True, False]]])
    sequence = log_ratios(log_probs, torch.zeros_like(log_probs), mask, "sequence")
    torch.testing.assert_close(sequence, torch.full_like(log_probs, 0.1))
    assert torch.equal(log_ratios(log_probs, torch.zeros_like(log_probs), mask, "token"), log_probs)


def test_sequence_ratio_gradient_spreads_over_the_response_tokens():
    """d s_i / d l_t = s_i / |o_i| on each live token: the unclipped loss at sequence level, one response of two live
    tokens and delta 1 under seq-mean-token-mean, has gradient -s / 2 on each (0 on padding). Mutant tried: token
    ratios give -rho_t instead and fail."""
    log_probs = torch.tensor([[[0.2, -0.4, 0.0]]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[[True, True, False]]])
    compute_loss(log_probs, torch.ones(1, 1, dtype=torch.float64), "unclipped", torch.zeros(1, 1, 3,
                 dtype=torch.float64), agg="seq-mean-token-mean", mask=mask,
                 importance_sampling_level="sequence").backward()
    s = math.exp(-0.1)
    torch.testing.assert_close(log_probs.grad, torch.tensor([[[-s / 2, -s / 2, 0.0]]], dtype=torch.float64))


def test_clip_metrics_with_clip_higher_and_sequence_ratios():
    """The clip metrics follow the loss: with eps_high the high side counts ratios above 1 + eps_high only; at
    sequence level a token counts when its response's s_i is outside the band. Mutant tried: counting the high side
    against 1 + eps fails the first assertion."""
    ratio = torch.tensor([[[1.25, 1.25], [0.5, 2.0]]])  # two responses of two tokens
    side = torch.tensor([[[1.0], [1.0]]])
    low, high = ppo_clip_fractions(ratio, side, None, 0.2, 0.28)
    assert (low.item(), high.item()) == (0.0, 0.25)  # only the 2.0 token
    low, high = ppo_clip_fractions(ratio, side, None, 0.2, None, None, "sequence")
    # s = 1.25 for the first response (clipped high), exp(mean(log 0.5, log 2)) = 1 for the second
    assert (low.item(), high.item()) == (0.0, 0.5)
    assert clip_fractions(torch.log(ratio), torch.zeros_like(ratio), side[..., 0], 0.2)[1].item() == 0.75


def test_top_entropy_gate_keeps_the_top_share_by_torch_quantile():
    """The 80/20 paper's gate (arXiv 2506.01939; TRL `get_high_entropy_mask`): a token trains when its entropy is
    >= the (1 - rho)-quantile of the batch's live entropies. Enumerated: entropies 1..10 (one padded token of
    entropy 100 left out), rho = 0.2: the 0.8-quantile of 1..9 with linear interpolation is 7.4, so 8 and 9 train.
    The batched gate equals the plain one (torch.quantile) for every run, each with its own rho. Mutant tried: the
    rho-quantile in place of the (1 - rho)-quantile keeps 3..9 and fails."""
    entropies = torch.tensor([[[1.0, 2, 3], [4, 5, 6], [7, 8, 9], [100, 0, 0]]], dtype=torch.float64)
    mask = torch.tensor([[[True] * 3] * 3 + [[False] * 3]])
    gate = top_entropy_gate(entropies, mask, 0.2)
    assert entropies[gate].tolist() == [8.0, 9.0]
    assert torch.equal(gate, top_entropy_gate_plain(entropies, mask, 0.2))
    g = torch.Generator().manual_seed(0)
    runs = torch.rand(4, 2, 3, 5, generator=g, dtype=torch.float64)
    live = torch.rand(4, 2, 3, 5, generator=g) < 0.7
    rho = torch.tensor([0.2, 0.5, 1.0, 0.0], dtype=torch.float64)
    batched = top_entropy_gate(runs, live, rho)
    for r in range(4):
        assert torch.equal(batched[r], top_entropy_gate_plain(runs[r], live[r], rho[r].item()))
    assert torch.equal(batched[2], live[2]) and batched[3].sum() == 1  # rho 1: every token; rho 0: the top one


def test_gate_drops_gradients_but_keeps_denominators():
    """TRL multiplies the per-token loss by its entropy mask before the aggregation, whose token count stays that of
    every live token: a gated token's gradient is 0, the others' equal to the ungated loss's. Mutant tried:
    aggregating over the gated tokens only (the gate as a mask) doubles the kept gradients here and fails."""
    log_probs = torch.zeros(1, 1, 4, dtype=torch.float64, requires_grad=True)
    gate = torch.tensor([[[True, False, True, False]]])
    compute_loss(log_probs, torch.ones(1, 1, dtype=torch.float64), "naive", gate=gate).backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[[-0.25, 0.0, -0.25, 0.0]]], dtype=torch.float64))


def test_untruncated_clears_responses_that_reached_the_cap_without_eos():
    """DAPO's overlong filtering (arXiv 2503.14476; TRL `mask_truncated_completions`): a response whose last
    position is live and not EOS leaves the loss; one ending in EOS at the cap stays. EOS = 9. Mutant tried: testing
    only that the last position is live drops the EOS-at-cap response too and fails."""
    responses = torch.tensor([[[1, 9, 9], [1, 2, 3], [1, 2, 9]]])
    mask = torch.tensor([[[True, True, False], [True, True, True], [True, True, True]]])
    kept = untruncated(responses, mask, eos=9)
    assert kept.tolist() == [[[True, True, False], [False, False, False], [True, True, True]]]


def test_a_response_masked_out_whole_adds_zero_not_nan():
    """With every token of a response masked (truncated), each aggregation takes it as TRL does (its token count
    clamped at 1): no NaN, and token-mean over a batch with no live token is 0."""
    values = torch.ones(1, 2, 3, dtype=torch.float64)
    mask = torch.tensor([[[True, True, False], [False, False, False]]])
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        assert aggregate(values, agg, mask).isfinite().all()
        assert aggregate(values, agg, torch.zeros_like(mask)).item() == 0.0
    assert aggregate(values, "seq-mean-token-mean", mask).item() == 0.5  # (1 + 0) / 2 responses


def test_per_run_descendant_settings_broadcast_over_the_run_axis():
    """epsilon_high, clip_delta and the SAPO temperatures as float[run] apply run r's value to run r alone."""
    g = torch.Generator().manual_seed(4)
    old = -torch.rand(3, 2, 4, 3, generator=g, dtype=torch.float64)
    log_probs = old + 0.5 * torch.randn(3, 2, 4, 3, generator=g, dtype=torch.float64)
    deltas = torch.randn(3, 2, 4, generator=g, dtype=torch.float64)
    for mode, settings in (("clipped", dict(epsilon_high=[0.1, 0.3, 0.5], clip_delta=[1.5, 2.0, math.inf])),
                           ("sapo", dict(sapo_temperature_pos=[0.5, 1.0, 2.0], sapo_temperature_neg=[1.0, 3.0, 0.5])),
                           ("vespo", dict(vespo_k_pos=[1.0, 2.0, 3.0], vespo_lambda_neg=[1.0, 2.0, 4.0]))):
        batched = compute_loss(log_probs, deltas, mode, old, 0.1,
                               **{k: torch.tensor(v, dtype=torch.float64) for k, v in settings.items()})
        for r in range(3):
            alone = compute_loss(log_probs[r], deltas[r], mode, old[r], 0.1, **{k: v[r] for k, v in settings.items()})
            torch.testing.assert_close(batched[r], alone)
    assert ratios(log_probs, old).shape == log_probs.shape


@pytest.mark.parametrize("rho, cispo_grad, ppo_grad", [
    (0.5, -0.5, -0.5),   # under the cap: the weight is rho, the gradient -rho d, as PPO's inside its band
    (8.0, -5.0, 0.0),    # above the cap 5: CISPO keeps -eps_max d, PPO's clip (eps 0.2) drops the token
])
def test_cispo_keeps_the_gradient_of_tokens_the_clip_drops(rho, cispo_grad, ppo_grad):
    """MiniMax-M1 (arXiv 2506.13585): CISPO's loss -sg(min(rho, eps_max)) d l has gradient -min(rho, eps_max) d on
    every token, where PPO's clipped loss has 0 for a token with d > 0 past 1 + eps. d = 1, eps_max = 5. Mutant
    tried: the weight without its stop-gradient adds -rho l d to the gradient (at rho = 0.5, -0.153 instead of
    -0.5) and fails."""
    log_probs = torch.tensor([[[math.log(rho)]]], dtype=torch.float64, requires_grad=True)
    old, deltas = torch.zeros(1, 1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    compute_loss(log_probs, deltas, "cispo", old, epsilon_high=5.0).backward()
    assert log_probs.grad.item() == pytest.approx(cispo_grad, abs=1e-12)
    assert one_token(rho, 1.0, clip_eps=0.2)[1] == pytest.approx(ppo_grad, abs=1e-12)
