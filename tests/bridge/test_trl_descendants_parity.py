"""GRPO's descendants against TRL's own code (TRL 1.16.0, `GRPOTrainer._compute_loss`, issue 37).

Mapping (TRL's GRPOConfig -> the lab), each loss and gradient checked to 1e-12 in float64 at ratios away from 1
(old log-probs up to about 1 nat off, several inner steps' worth), with the clip active and responses of different
lengths:
    epsilon_high=e                          -> --epsilon-high e (clipped; cispo: the cap)
    delta=c                                 -> --clip-delta c
    importance_sampling_level="sequence"    -> --importance-sampling-level sequence
    loss_type="cispo"                       -> --loss cispo --loss-agg token-mean
    loss_type="sapo" (sapo_temperature_*)   -> --loss sapo --loss-agg seq-mean-token-mean
    loss_type="luspo", sequence level       -> --loss luspo --loss-agg seq-mean-token-sum
    loss_type="vespo" (vespo_*)             -> --loss vespo --loss-agg token-mean
    top_entropy_quantile=rho                -> --top-entropy-quantile rho (the gate from the same entropies)
    scale_rewards="batch"                   -> --delta batch (std_eps 1e-4)
    mask_truncated_completions=True         -> --mask-truncated-completions (the completion mask TRL builds)
Each case's mutant (a hand change that fails it) is named in its test's docstring.
"""

from __future__ import annotations

import pytest
import torch

from tests.bridge.trl_tools import grpo_loss, grpo_trainer, model_folder

from lab.core.aggregation import kl_term
from lab.core.deltas import compute_deltas
from lab.core.kl import k3
from lab.core.losses import compute_loss
from lab.core.token_masks import top_entropy_gate, untruncated

BATCH, TRIAL, POS = 2, 3, 4
SHAPE = (BATCH, TRIAL, POS)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory)


def inputs():
    """log-probs, old and reference ones float[seq pos], advantages float[seq], a mask with two short responses and
    entropies (float32 values, as TRL's quantile reads them), all float64. The old log-probs are up to about 1 nat
    off: most ratios lie outside [0.8, 1.2]."""
    g = torch.Generator().manual_seed(0)
    shape = (BATCH * TRIAL, POS)
    log_probs = torch.randn(shape, generator=g, dtype=torch.float64) * 0.3 - 1.0
    old = log_probs + torch.randn(shape, generator=g, dtype=torch.float64) * 0.3
    ref = log_probs + torch.randn(shape, generator=g, dtype=torch.float64) * 0.3
    advantages = torch.randn(BATCH * TRIAL, generator=g, dtype=torch.float64)
    advantages[3] = -advantages[3].abs()  # a negative response with a ratio of 1.7: the two-sided cap acts
    mask = torch.ones(shape, dtype=torch.bool)
    mask[0, 3:] = False
    mask[4, 1:] = False
    entropies = torch.rand(shape, generator=g).double()  # float32 values: TRL's quantile is taken in float32
    return log_probs, old, ref, advantages, mask, entropies


def f32(value: float) -> float:
    """value rounded to float32: TRL makes SAPO's temperatures by torch.where on Python floats, a float32 tensor."""
    return torch.tensor(value, dtype=torch.float32).item()


CASES = {  # name -> (TRL's fields, the lab's compute_loss settings)
    "clip-higher": (dict(loss_type="bnpo", epsilon=0.2, epsilon_high=0.5),
                    dict(mode="clipped", agg="token-mean", clip_eps=0.2, epsilon_high=0.5)),
    "clip-higher-grpo": (dict(loss_type="grpo", epsilon=0.1, epsilon_high=0.4),
                         dict(mode="clipped", agg="seq-mean-token-mean", clip_eps=0.1, epsilon_high=0.4)),
    "two-sided": (dict(loss_type="dapo", epsilon=0.2, delta=1.3),
                  dict(mode="clipped", agg="token-mean", clip_eps=0.2, clip_delta=1.3)),
    "gspo": (dict(loss_type="grpo", epsilon=0.2, importance_sampling_level="sequence"),
             dict(mode="clipped", agg="seq-mean-token-mean", clip_eps=0.2, importance_sampling_level="sequence")),
    "cispo": (dict(loss_type="cispo", epsilon_high=1.3),
              dict(mode="cispo", agg="token-mean", epsilon_high=1.3)),
    "cispo-sequence": (dict(loss_type="cispo", epsilon_high=1.1, importance_sampling_level="sequence"),
                       dict(mode="cispo", agg="token-mean", epsilon_high=1.1, importance_sampling_level="sequence")),
    "sapo": (dict(loss_type="sapo", sapo_temperature_pos=2.0, sapo_temperature_neg=0.7),
             dict(mode="sapo", agg="seq-mean-token-mean", sapo_temperature_pos=2.0, sapo_temperature_neg=f32(0.7))),
    "sapo-defaults": (dict(loss_type="sapo"), dict(mode="sapo", agg="seq-mean-token-mean",
                                                   sapo_temperature_neg=f32(1.05))),
    "luspo": (dict(loss_type="luspo", epsilon=0.2, epsilon_high=0.3, importance_sampling_level="sequence"),
              dict(mode="luspo", agg="seq-mean-token-sum", clip_eps=0.2, epsilon_high=0.3)),
    "vespo": (dict(loss_type="vespo"), dict(mode="vespo", agg="token-mean")),
    "vespo-shaped": (dict(loss_type="vespo", vespo_k_pos=1.0, vespo_lambda_pos=0.5, vespo_k_neg=4.0,
                          vespo_lambda_neg=5.0),
                     dict(mode="vespo", agg="token-mean", vespo_k_pos=1.0, vespo_lambda_pos=0.5, vespo_k_neg=4.0,
                          vespo_lambda_neg=5.0)),
}


def lab_loss(log_probs, old, ref, advantages, mask, settings: dict, beta: float = 0.0, gate=None):
    settings = dict(settings)
    mode, agg = settings.pop("mode"), settings.pop("agg")
    loss = compute_loss(log_probs.reshape(SHAPE), advantages.reshape(BATCH, TRIAL), mode, old.reshape(SHAPE),
                        agg=agg, mask=mask.reshape(SHAPE), horizon=POS, gate=gate, **settings)
    if beta:
        loss = loss + beta * kl_term(k3(log_probs.reshape(SHAPE), ref.reshape(SHAPE)), agg, mask.reshape(SHAPE), POS)
    return loss


def both(folder, trl_fields: dict, lab_settings: dict, beta: float = 0.0, quantile: float | None = None):
    """(TRL's loss, its gradient, the lab's loss, its gradient) on the same inputs."""
    log_probs, old, ref, advantages, mask, entropies = inputs()
    extra = {} if quantile is None else dict(top_entropy_quantile=quantile)
    trainer = grpo_trainer(folder, lambda completions, **kwargs: [0.0] * len(completions), beta=beta * POS,
                           max_completion_length=POS, use_bias_correction_kl=False, num_generations=TRIAL,
                           per_device_train_batch_size=TRIAL, **trl_fields, **extra)
    theirs_input = log_probs.clone().requires_grad_(True)
    theirs = grpo_loss(trainer, theirs_input, old, ref, advantages, mask, entropies)
    theirs.backward()
    gate = None if quantile is None else top_entropy_gate(entropies.reshape(SHAPE), mask.reshape(SHAPE), quantile)
    ours_input = log_probs.clone().requires_grad_(True)
    ours = lab_loss(ours_input, old, ref, advantages, mask, lab_settings, beta, gate)
    ours.backward()
    return theirs, theirs_input.grad, ours, ours_input.grad


@pytest.mark.parametrize("beta", [0.0, 0.05], ids=["no-kl", "kl"])
@pytest.mark.parametrize("name", list(CASES))
def test_each_descendant_matches_trls_compute_loss(folder, name, beta):
    """The lab's loss for each TRL setting has TRL's value and gradient, with and without TRL's per-token k3
    (beta_TRL = max length x beta_lab, no bias correction). Mutants tried, each failing its case: clip-higher's
    eps_high on the lower bound too; the two-sided cap on the clipped term; GSPO's mean over every position
    (padding included); CISPO's weight without stop-gradient; SAPO's temperatures swapped; LUSPO's sequence
    ratio as the token's; VESPO's log w as the mean log-ratio (GSPO's) instead of the sum."""
    theirs, their_grad, ours, our_grad = both(folder, *CASES[name], beta=beta)
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert torch.allclose(our_grad, their_grad, rtol=0, atol=1e-12)
    assert our_grad.abs().sum() > 0


def test_the_cases_exercise_what_they_test(folder):
    """The inputs really clip (ratios outside [0.8, 1.2] and above the caps), and each setting changes TRL's own
    gradient from the plain one (so a lab that ignored it would fail the parity above)."""
    log_probs, old, _, _, mask, _ = inputs()
    ratio = (log_probs - old).exp()[mask]
    assert ((ratio < 0.8) | (ratio > 1.2)).float().mean() > 0.2 and (ratio > 1.3).any()
    plain = both(folder, dict(loss_type="bnpo", epsilon=0.2), dict(mode="clipped", agg="token-mean", clip_eps=0.2))
    for name in ("clip-higher", "two-sided", "cispo"):
        assert not torch.allclose(both(folder, *CASES[name])[1], plain[1], atol=1e-9), name


@pytest.mark.parametrize("quantile", [0.2, 0.5])
def test_top_entropy_quantile_matches_trls_entropy_mask(folder, quantile):
    """`--top-entropy-quantile` is TRL's `top_entropy_quantile`: the same tokens keep their gradient (TRL's
    `get_high_entropy_mask`, the lab's `top_entropy_gate` on the same entropies), the loss's denominators unchanged.
    Mutant tried: the gate as the aggregation's mask (denominators over the kept tokens) fails."""
    theirs, their_grad, ours, our_grad = both(folder, dict(loss_type="dapo", epsilon=0.2),
                                              dict(mode="clipped", agg="token-mean", clip_eps=0.2), quantile=quantile)
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert torch.allclose(our_grad, their_grad, rtol=0, atol=1e-12)
    kept = (their_grad != 0).sum().item()
    assert 0 < kept < inputs()[4].sum().item()  # some live tokens were gated


REWARDS = torch.tensor([[1.0, 0.0, 2.0, 0.5], [3.0, 3.0, 3.0, 3.0], [0.0, 1.0, 0.0, 0.0]])


def test_delta_batch_matches_trls_scale_rewards_batch(folder):
    """`--delta batch` is TRL's scale_rewards="batch" (PPO-Lite, arXiv 2508.08221): the group's mean over the whole
    batch's std (Bessel-corrected, std_eps 1e-4), from TRL's own `_generate_and_score_completions`; float32, hence
    1e-6. Mutant tried: the group's std (`--delta normalized`) fails."""
    prompts, group = REWARDS.shape
    trainer = grpo_trainer(folder, lambda completions, **kwargs: REWARDS.flatten().tolist(), beta=0.0,
                           scale_rewards="batch", num_generations=group, max_completion_length=3,
                           per_device_train_batch_size=prompts * group, generation_batch_size=prompts * group)
    rows = [{"prompt": row["prompt"]} for row in trainer.train_dataset for _ in range(group)]
    advantages = trainer._generate_and_score_completions(rows)["advantages"].reshape(prompts, group)
    deltas = compute_deltas(REWARDS.double(), "batch", std_eps=1e-4)
    assert torch.allclose(advantages.double(), deltas, rtol=0, atol=1e-6)
    assert not torch.allclose(deltas, compute_deltas(REWARDS.double(), "normalized", std_eps=1e-4), atol=1e-3)


def test_mask_truncated_completions_matches_trls_completion_mask(folder):
    """`--mask-truncated-completions` is TRL's: from TRL's own sampling of 12 completions capped at 2 tokens, the
    completion mask TRL returns equals the lab's `untruncated` of TRL's mask without the option (the same
    completions: the same seed). Some completions end with EOS, some are cut. Mutant tried: `untruncated` keeping a
    response whose last live token is not EOS fails."""
    prompts, group = REWARDS.shape

    def outputs(masked: bool):
        torch.manual_seed(0)  # TRL samples from torch's global generator: the same completions both times
        trainer = grpo_trainer(folder, lambda completions, **kwargs: [0.0] * len(completions), beta=0.0,
                               num_generations=group, max_completion_length=2, mask_truncated_completions=masked,
                               per_device_train_batch_size=prompts * group, generation_batch_size=prompts * group)
        rows = [{"prompt": row["prompt"]} for row in trainer.train_dataset for _ in range(group)]
        with torch.random.fork_rng():
            torch.manual_seed(1)
            out = trainer._generate_and_score_completions(rows)
        return out, trainer.eos_token_id if hasattr(trainer, "eos_token_id") else trainer.processing_class.eos_token_id

    plain, eos = outputs(False)
    masked, _ = outputs(True)
    assert torch.equal(plain["completion_ids"], masked["completion_ids"])
    ids, mask = plain["completion_ids"], plain["completion_mask"].bool()
    ours = untruncated(ids, mask, eos)
    assert torch.equal(ours, masked["completion_mask"].bool())
    cut = mask.any(dim=-1) & ~ours.any(dim=-1)
    assert 0 < cut.sum() < len(cut)


@pytest.mark.parametrize("settings, expected", [
    (dict(), dict(loss_type="bnpo", epsilon_high=None, delta=None, scale_rewards="none")),
    (dict(loss="cispo"), dict(loss_type="cispo", epsilon_high=5.0)),
    (dict(loss="sapo", loss_agg="seq-mean-token-mean", sapo_temperature_neg=2.0),
     dict(loss_type="sapo", sapo_temperature_neg=2.0, sapo_temperature_pos=1.0)),
    (dict(loss="luspo", loss_agg="seq-mean-token-sum"), dict(loss_type="luspo", importance_sampling_level="sequence")),
    (dict(loss="vespo", vespo_k_neg=1.5), dict(loss_type="vespo", vespo_k_neg=1.5)),
    (dict(epsilon_high=0.28, clip_delta=2.0, importance_sampling_level="sequence", top_entropy_quantile=0.2,
          mask_truncated_completions=True, delta="batch"),
     dict(loss_type="bnpo", epsilon_high=0.28, delta=2.0, importance_sampling_level="sequence",
          top_entropy_quantile=0.2, mask_truncated_completions=True, scale_rewards="batch")),
])
def test_lab_trl_builds_trls_config_for_every_loss_type_and_setting(tmp_path, settings, expected):
    """`lab trl`'s run (`lab.bridge.trl_grpo.TRLGRPO`) gives TRL's GRPOConfig each descendant's loss_type and
    setting under TRL's field name (clip_delta -> delta, --delta batch -> scale_rewards), TRL's defaults elsewhere."""
    from lab.bridge.trl_grpo import TRLGRPO
    from tasks.sorting import make_task

    task = make_task()
    run = TRLGRPO(**settings)
    run.check(task)
    config = run.grpo_config(task, tmp_path)
    assert {name: getattr(config, name) for name in expected} == expected


@pytest.mark.parametrize("args, message", [
    (["--loss", "sapo", "--loss-agg", "token-mean"], "TRL's loss_type=sapo aggregates as --loss-agg "
                                                     "seq-mean-token-mean, not token-mean"),
    (["--loss", "clipped", "--sapo-temperature-pos", "2"], "--sapo-temperature-pos applies to --loss sapo only"),
    (["--clip-delta", "0.5"], "--clip-delta must be a finite number > 1, got 0.5"),
    (["--loss", "dpo", "--kl", "0.1", "--top-entropy-quantile", "0.5"], "--top-entropy-quantile applies to --loss "
                                                                       "clipped"),
])
def test_lab_trl_refuses_a_descendant_setting_that_does_not_apply_in_one_line(tmp_path, args, message):
    from typer.testing import CliRunner

    from lab.cli.commands import app

    result = CliRunner().invoke(app, ["trl", *args, "--epochs", "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()) and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
