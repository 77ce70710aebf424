"""Issue 38's settings against TRL 1.16.0's own code (the installed trl is the source of truth).

Mapping (the lab's option -> TRL's field), each checked below in float64:
    --importance-sampling-correction MODE  -> vllm_importance_sampling_correction=True, vllm_importance_sampling_mode
    --importance-sampling-clip-min/-max    -> vllm_importance_sampling_clip_min / _clip_max
    --off-policy-mask-threshold            -> off_policy_mask_threshold (GRPOTrainer.get_off_policy_mask)
    --sync-ref-model, --ref-model-mixup-alpha, --ref-model-sync-steps
                                           -> sync_ref_model, ref_model_mixup_alpha, ref_model_sync_steps
                                              (SyncRefModelCallback)
    --adaptive-entropy, --entropy-target, --entropy-coef-delta/-min/-max
                                           -> use_adaptive_entropy, entropy_target, entropy_coef_delta/_min/_max

TRL computes the importance weights inline in `_generate_and_score_completions` (behind `use_vllm`, which needs a
vLLM server): `trl_importance_ratio` runs that very block of TRL's source, cut out of the installed method, on the
test's numbers. The weighted loss itself goes through `_compute_loss` as tests/bridge/test_trl_grpo_parity.py does.
"""

from __future__ import annotations

import inspect
import math
import textwrap
import types

import pytest
import torch
from torch import nn

from tests.bridge.trl_tools import grpo_loss, grpo_trainer, model_folder, trl

from lab.core.adaptive_entropy import applied_entropy_coef, next_entropy_coef
from lab.core.importance import importance_weights, off_policy_mask
from lab.core.losses import compute_loss
from lab.core.reference_mixing import mix_reference, sync_due

SEQS, POS, TRIAL = 6, 4, 3
MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
BOUNDS = [(None, 3.0), (0.5, 2.0), (0.8, None)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory)


def trl_importance_block() -> str:
    """The lines of `GRPOTrainer._generate_and_score_completions` that turn the trainer's and the sampler's log-probs
    into `vllm_importance_sampling_ratio`, as installed (dedented)."""
    source = inspect.getsource(trl.GRPOTrainer._generate_and_score_completions)
    start = source.index("            if self.use_vllm and self.vllm_importance_sampling_correction:\n"
                         "                mask = completion_mask")
    end = source.index("'sequence_mask'.\"", start)
    end = source.index(")\n", end) + 2
    return textwrap.dedent(source[start:end])


def trl_importance_ratio(mode, clip_min, clip_max, old, sampling, mask):
    settings = types.SimpleNamespace(use_vllm=True, vllm_importance_sampling_correction=True,
                                     vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=clip_min,
                                     vllm_importance_sampling_clip_max=clip_max)
    scope = dict(self=settings, completion_mask=mask.long(), tool_mask=None, old_per_token_logps=old,
                 sampling_per_token_logps=sampling, torch=torch, math=math)
    exec(trl_importance_block(), scope)
    return scope["vllm_importance_sampling_ratio"]


def inputs():
    """Per-token log-probs float64[seq pos]: the policy's, the old (trainer's) ones and the sampler's, about 0.5 nat
    apart so that each bound is crossed by some tokens and some sequences; two short responses."""
    g = torch.Generator().manual_seed(1)
    log_probs = torch.randn(SEQS, POS, generator=g, dtype=torch.float64) * 0.3 - 1.0
    old = log_probs + torch.randn(SEQS, POS, generator=g, dtype=torch.float64) * 0.1
    sampling = old + torch.randn(SEQS, POS, generator=g, dtype=torch.float64) * 0.5
    advantages = torch.randn(SEQS, generator=g, dtype=torch.float64)
    mask = torch.ones(SEQS, POS, dtype=torch.bool)
    mask[0, 3:] = False
    mask[4, 1:] = False
    return log_probs, old, sampling, advantages, mask


@pytest.mark.parametrize("clip_min, clip_max", BOUNDS)
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_are_trls(mode, clip_min, clip_max):
    """`importance_weights` equals TRL's `vllm_importance_sampling_ratio` for each of its four modes and bounds on
    either side or both, on live tokens (TRL's token weights on padding are 1, as the lab's). Mutant tried: the
    lab's sequence weight as the mean log ratio: fails every sequence mode."""
    _, old, sampling, _, mask = inputs()
    theirs = trl_importance_ratio(mode, clip_min, clip_max, old, sampling, mask)
    ours = importance_weights(old, sampling, mode.replace("_", "-"), clip_min, clip_max, mask)
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert 0 < ((theirs == 0) | (theirs == clip_max) | (theirs == clip_min)).double().mean() < 1  # bounds act


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask"])
def test_weighted_and_masked_loss_and_gradient_are_trls(folder, mode):
    """TRL's clipped loss (loss_type="bnpo" = --loss-agg token-mean, beta 0) with the importance ratio and the
    off-policy mask (threshold 0.02) equals the lab's `compute_loss` with gate = weights x keep, value and gradient,
    to 1e-12. Mutant tried: the mask's KL from the old log-probs instead of the sampler's (TRL reads
    sampling_per_token_logps): the gradient differs."""
    log_probs, old, sampling, advantages, mask = inputs()
    trainer = grpo_trainer(folder, lambda completions, **kwargs: [0.0] * len(completions), loss_type="bnpo",
                           epsilon=0.2, beta=0.0, max_completion_length=POS, off_policy_mask_threshold=0.02,
                           num_generations=TRIAL, per_device_train_batch_size=TRIAL,
                           vllm_importance_sampling_mode=mode)
    trainer.use_vllm = True  # TRL weighs the loss only behind use_vllm; nothing here calls vLLM
    ratio = trl_importance_ratio(mode, None, 3.0, old, sampling, mask)
    theirs_input = log_probs.clone().requires_grad_(True)
    theirs = grpo_loss(trainer, theirs_input, old, None, advantages, mask,
                       importance_sampling_ratio=ratio, sampling_per_token_logps=sampling)
    ours_input = log_probs.clone().requires_grad_(True)
    shape = (2, TRIAL, POS)
    keep = off_policy_mask(advantages.reshape(2, TRIAL), ours_input.reshape(shape), sampling.reshape(shape), 0.02,
                           mask.reshape(shape))
    assert 0 < keep.mean() < 1
    gate = importance_weights(old.reshape(shape), sampling.reshape(shape), mode.replace("_", "-"), None, 3.0,
                              mask.reshape(shape)) * keep
    ours = compute_loss(ours_input.reshape(shape), advantages.reshape(2, TRIAL), "clipped", old.reshape(shape), 0.2,
                        "token-mean", mask.reshape(shape), POS, gate=gate)
    theirs.backward()
    ours.backward()
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    torch.testing.assert_close(ours_input.grad, theirs_input.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("threshold", [0.0, 0.05, 0.5])
def test_off_policy_mask_is_trls(threshold):
    """`off_policy_mask` equals `GRPOTrainer.get_off_policy_mask` (a static method of TRL's) response by response."""
    log_probs, _, sampling, advantages, mask = inputs()
    theirs = trl.GRPOTrainer.get_off_policy_mask(advantages.unsqueeze(1), log_probs, sampling, mask.double(),
                                                  threshold)
    ours = off_policy_mask(advantages, log_probs, sampling, threshold, mask)
    assert torch.equal(ours.squeeze(-1), theirs.squeeze(-1))


def test_reference_mixing_is_trls_sync_callback():
    """`mix_reference` and `sync_due` are TRL's `SyncRefModelCallback`: after 7 optimizer steps with tau = 3 and
    alpha = 0.6 (TRL's default) the reference has mixed twice (steps 3 and 6), to the same float64 parameters.
    Mutant tried: alpha on the reference's side."""
    from trl.trainer.callbacks import SyncRefModelCallback

    torch.manual_seed(0)  # nn.Linear's initialisation only; the test's numbers are its own
    policy, reference = nn.Linear(3, 2).double(), nn.Linear(3, 2).double()
    ours = [p.detach().clone() for p in reference.parameters()]
    callback = SyncRefModelCallback(ref_model=reference, accelerator=None)
    args = types.SimpleNamespace(ref_model_sync_steps=3, ref_model_mixup_alpha=0.6)
    for step in range(1, 8):
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.1 * step)
        callback.on_step_end(args, types.SimpleNamespace(global_step=step), None, model=policy)
        if sync_due(step, 3):
            ours = mix_reference(ours, list(policy.parameters()), 0.6)
    for theirs, mine in zip(reference.parameters(), ours):
        torch.testing.assert_close(mine, theirs.detach(), rtol=0, atol=1e-15)


def test_adaptive_entropy_coefficient_and_bonus_are_trls(folder):
    """TRL's `_compute_loss` with use_adaptive_entropy, one optimizer step per call: its `entropy_coef` after each
    step is `next_entropy_coef`, and the bonus it subtracts is `applied_entropy_coef` x the mean live-token entropy
    (nothing at the first step: no entropy measured yet). Entropies below, at and above the target 0.5. Mutant tried:
    applying the coefficient after its update (TRL applies the one from before)."""
    log_probs, old, _, advantages, mask = inputs()
    fields = dict(loss_type="bnpo", epsilon=0.2, beta=0.0, max_completion_length=POS, num_generations=TRIAL,
                  per_device_train_batch_size=TRIAL)
    plain = grpo_trainer(folder, lambda completions, **kwargs: [0.0] * len(completions), **fields)
    trainer = grpo_trainer(folder, lambda completions, **kwargs: [0.0] * len(completions), use_adaptive_entropy=True,
                           entropy_coef=0.1, entropy_target=0.5, entropy_coef_delta=0.05, entropy_coef_max=0.2,
                           **fields)
    for t in (plain, trainer):
        t.model.train()  # the controller updates in train mode only
        t.current_gradient_accumulation_steps = 1
    coef, last = torch.tensor([0.1], dtype=torch.float64), torch.tensor([math.inf], dtype=torch.float64)
    for level in (0.3, 0.5, 0.3, 0.9, 0.9, 0.9):
        entropies = torch.full((SEQS, POS), level, dtype=torch.float64)
        entropies[1, 2] = level + 0.2  # not uniform: the mean is over live tokens
        bonus = (entropies * mask).sum() / mask.sum()
        theirs = grpo_loss(trainer, log_probs, old, None, advantages, mask, entropies=entropies)
        without = grpo_loss(plain, log_probs, old, None, advantages, mask)
        expected = applied_entropy_coef(coef, last, 0.5) * bonus
        torch.testing.assert_close((without - theirs).reshape(1), expected, rtol=0, atol=1e-12)
        coef, last = next_entropy_coef(coef, bonus.reshape(1), 0.5, 0.05, 0.0, 0.2), bonus.reshape(1)
        assert abs(trainer.entropy_coef - coef.item()) < 1e-12
