"""GRPO's descendants in the training loop (issue 37): every option trains with both policies, a run of a mixed batch
is the same run alone, and each token mask acts on exactly the tokens it names.

The formulas are checked in tests/core/test_descendants.py and test_losses.py, against TRL in tests/bridge.
"""

import numpy as np
import pytest
import torch

from lab.core.losses import compute_loss
from lab.core.token_masks import top_entropy_gate, untruncated
from lab.training.config import ConfigError, TrainConfig
from lab.training.train import train
from tasks.sorting import make_task
from tests.training.test_batched import assert_same_run

SHORT = dict(epochs=3, steps=3, seed=0, delta="centered", lr=0.05)  # a large lr: ratios leave the clip band
OPTIONS = {
    "clip-higher": dict(loss="clipped", clip_eps=0.01, epsilon_high=0.5),
    "two-sided": dict(loss="clipped", clip_eps=0.01, clip_delta=1.005),
    "gspo": dict(loss="clipped", clip_eps=0.2, importance_sampling_level="sequence"),
    "cispo": dict(loss="cispo", epsilon_high=1.2),
    "sapo": dict(loss="sapo", sapo_temperature_pos=2.0),
    "luspo": dict(loss="luspo", clip_eps=0.2, loss_agg="seq-mean-token-sum"),
    "vespo": dict(loss="vespo"),
    "top-entropy": dict(loss="clipped", top_entropy_quantile=0.2),
    "batch-std": dict(delta="batch", loss="clipped"),
}


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_every_descendant_trains_with_both_policies(name, policy):
    """A short run of each option keeps every step metric finite, and the same run with PPO's clip and nothing else
    of the option (the same clip_eps) ends elsewhere, so the option acts."""
    task = make_task()
    config = TrainConfig(**{**SHORT, "policy": policy, **OPTIONS[name]})
    records = train(task, config)
    for metric in ("loss", "pg_loss", "ratio_mean"):
        assert np.isfinite(records.step_metrics[metric]).all(), metric
    plain = dict(loss="clipped", clip_eps=OPTIONS[name].get("clip_eps", 0.01))
    other = train(task, TrainConfig(**{**SHORT, "policy": policy, **plain}))
    assert any(not torch.equal(records.state[k], other.state[k]) for k in records.state)


def test_a_descendant_run_is_the_same_alone_or_inside_a_mixed_batch():
    """Runs of every descendant trained together equal each trained alone (each run's settings are its own:
    per-run tensors and groups by loss, aggregation and ratio level)."""
    task = make_task()
    configs = [TrainConfig(**{**SHORT, "epochs": 4, "seed": i, **options}) for i, options in
               enumerate(OPTIONS.values())]
    batched = train(task, configs)
    for run, config in enumerate(configs):
        assert_same_run(train(task, config), batched, run)


def test_truncated_responses_leave_the_loss_of_an_autoregressive_run():
    """`--mask-truncated-completions` with a cap of 4 tokens: the loss of a step equals the clipped loss over the
    untruncated responses' tokens only (`lab.core.token_masks.untruncated`), recomputed here from the run's own
    first-step samples; and it differs from the run without the mask. Mutant tried: the loop without the mask
    leaves the first step's loss at the unmasked value and fails."""
    task = make_task()
    base = TrainConfig(epochs=1, steps=1, seed=0, delta="centered", loss="clipped", policy="autoregressive",
                       max_length=4, sample_every=1)
    masked = train(task, base.replace(mask_truncated_completions=True))
    plain = train(task, base)
    sample = masked.samples[0]
    responses, deltas = torch.as_tensor(sample.responses[0]), torch.as_tensor(sample.deltas[0])
    eos = masked.eos
    ended = (responses == eos).long().cumsum(dim=-1)  # EOS so far, the position's own included
    mask = (ended == 0) | ((ended == 1) & (responses == eos))  # live: before the first EOS, and that EOS
    kept = untruncated(responses, mask, eos)
    assert 0 < kept.any(dim=-1).sum() < kept.shape[0] * kept.shape[1]  # some responses truncated, some not
    # at the first step the ratio is 1: the clipped loss is -sum(d over kept tokens) / kept tokens
    token_deltas = deltas.unsqueeze(-1).expand_as(responses).double()
    expected = -(token_deltas * kept).sum() / kept.sum()
    assert masked.step_metrics["pg_loss"][0, 0] == pytest.approx(expected.item(), rel=1e-5, abs=1e-6)
    unmasked = -(token_deltas * mask).sum() / mask.sum()
    assert plain.step_metrics["pg_loss"][0, 0] == pytest.approx(unmasked.item(), rel=1e-5, abs=1e-6)
    assert expected.item() != pytest.approx(unmasked.item())


def test_top_entropy_quantile_one_is_the_plain_loss_bit_for_bit():
    """rho = 1 keeps every token: the run is the default run, bit for bit (it is also left out of config.json)."""
    task = make_task()
    config = TrainConfig(**SHORT, loss="clipped")
    assert config.replace(top_entropy_quantile=1.0).to_dict() == config.to_dict()
    a, b = train(task, config), train(task, config.replace(top_entropy_quantile=1.0))
    for name in a.state:
        assert torch.equal(a.state[name], b.state[name])


def test_the_factorised_gate_is_over_every_token_of_the_batch():
    """The factorised policy's token entropy is its position's: H(pi(. | x, pos)), the same for every response of a
    prompt; the gate of rho = 1/3 on 3 prompts x 3 positions keeps the positions whose entropy reaches the
    2/3-quantile over all live tokens (G copies each). Checked on the gate function with G = 2 copies."""
    entropies = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]).unsqueeze(1).expand(3, 2, 3)
    gate = top_entropy_gate(entropies, None, 1 / 3)
    assert sorted(set(entropies[gate].tolist())) == [7.0, 8.0, 9.0]
    log_probs = torch.zeros(3, 2, 3, requires_grad=True)
    compute_loss(log_probs, torch.ones(3, 2), "naive", gate=gate).backward()
    assert torch.equal(log_probs.grad, torch.where(gate, -1 / 18, 0.0))  # 1 / (all 18 tokens), not 1 / 6 kept


@pytest.mark.parametrize("settings, message", [
    (dict(loss="luspo"), "--loss luspo is GSPO's loss summed over each response's tokens: it needs --loss-agg "
                         "seq-mean-token-sum"),
    (dict(loss="naive", epsilon_high=0.3), "--epsilon-high applies to --loss clipped or cispo or luspo only"),
    (dict(loss="clipped", clip_delta=0.9), "--clip-delta must be > 1 and finite"),
    (dict(loss="sapo", sapo_temperature_neg=0.0), "--sapo-temperature-neg must be > 0 and finite"),
    (dict(loss="clipped", vespo_k_pos=1.0), "--vespo-k-pos applies to --loss vespo only"),
    (dict(loss="clipped", top_entropy_quantile=1.5), r"--top-entropy-quantile must lie in \[0, 1\]"),
    (dict(loss="dpo", kl=0.1, top_entropy_quantile=0.5), "--top-entropy-quantile applies to the policy-gradient"),
    (dict(mask_truncated_completions=True), "--mask-truncated-completions applies to the autoregressive policy"),
    (dict(loss="naive", importance_sampling_level="sequence"), "--importance-sampling-level applies to --loss "
                                                               "unclipped or clipped"),
    (dict(importance_sampling_level="tokens"), "unknown importance_sampling_level 'tokens'; choose one of: token, "
                                               "sequence"),
])
def test_each_bad_descendant_setting_is_one_line_naming_what_is_allowed(settings, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**settings)


def test_each_descendant_takes_trls_defaults_and_writes_them():
    """CISPO's cap defaults to TRL's recommended 5, SAPO's temperatures to 1 and 1.05, VESPO's (k, lambda) to (2, 3)
    and (3, 2); other losses leave them None, out of config.json."""
    assert TrainConfig(loss="cispo").epsilon_high == 5.0
    sapo = TrainConfig(loss="sapo")
    assert (sapo.sapo_temperature_pos, sapo.sapo_temperature_neg) == (1.0, 1.05)
    vespo = TrainConfig(loss="vespo")
    assert (vespo.vespo_k_pos, vespo.vespo_lambda_pos, vespo.vespo_k_neg, vespo.vespo_lambda_neg) == (2, 3, 3, 2)
    written = TrainConfig(loss="clipped").to_dict()
    assert not {"epsilon_high", "sapo_temperature_pos", "vespo_k_pos", "importance_sampling_level",
                "top_entropy_quantile", "mask_truncated_completions", "clip_delta"} & set(written)


def test_the_top_entropy_gate_composes_with_a_stale_samplers_importance_weights():
    """Issue 38's corrections (a stale sampler's truncated importance weights) and the top-entropy gate multiply
    into the per-token loss together, as TRL multiplies its masks and weights: with both, the run differs from the
    run with the corrections alone, and from the run with the gate alone. Mutant tried: the merge that let the
    corrections' gate replace the entropy gate (--top-entropy-quantile then trained as PPO) fails the first."""
    task = make_task()
    base = TrainConfig(**SHORT, loss="clipped", staleness=2, importance_sampling_correction="token-truncate")
    both = train(task, base.replace(top_entropy_quantile=0.2))
    corrections_only = train(task, base)
    gate_only = train(task, TrainConfig(**SHORT, loss="clipped", top_entropy_quantile=0.2))
    for other in (corrections_only, gate_only):
        assert any(not torch.equal(both.state[k], other.state[k]) for k in both.state)
