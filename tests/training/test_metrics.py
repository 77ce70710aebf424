"""Step and epoch metrics in bulk, for fixed- and variable-length responses, against their plain definitions.

The loop's KL diagnostics: `kl_exact` is the exact KL to the reference, and `kl` estimates it.

Step metrics in bulk (lab/training/metrics.py) against their plain definitions, one step and one run at a time:
over live tokens (LIVE_TOKEN_METRICS), and at fixed length from the kept log-softmaxes (FIXED_LENGTH_METRICS).
"""

import numpy as np
import pytest
import torch

from lab.core.kl import k3
from lab.core.losses import ppo_clip_fractions
from lab.exact.enumeration import sequence_kl
from lab.policies import policy_from_state
from lab.policies.factorized import Policy
from lab.training.config import TrainConfig
from lab.training.metrics import FIXED_LENGTH_METRICS, LIVE_TOKEN_METRICS, StepMetricBlock
from lab.training.runs import RunSettings, clip_metrics
from lab.training.train import train
from tasks.sorting import make_task


def test_kl_exact_is_the_exact_sequence_kl_to_the_frozen_reference():
    """After one update, kl_exact equals KL(pi_1 || pi_0) computed by enumeration (lab.exact)."""
    task = make_task()
    config = TrainConfig(epochs=2, steps=1, kl_period=0, delta="centered", lr=0.05)
    records = train(task, config)
    after_one = policy_from_state(train(task, config.replace(epochs=1)).state)
    initial = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(config.seed))
    exact = sequence_kl(after_one, initial, task.prompts, dtype=torch.float64).mean().item()
    assert records.step_metrics["kl_exact"][0, 0] == 0.0  # the reference is the sampling policy itself
    assert exact > 1e-4  # the check below compares something that moved
    np.testing.assert_allclose(records.step_metrics["kl_exact"][0, 1], exact, rtol=1e-4)


def test_kl_estimate_tracks_kl_exact_on_average():
    """k3 on current samples is unbiased (claim 6 in docs/claims.md): over many steps its mean is near kl_exact's.

    One step per epoch, so every estimate uses samples of the current policy; 100 seeds x 10 epochs
    at the lecture's lr keep the policy near the reference, where k3's tail is light. The mean
    difference must lie within 5 standard errors (fixed seeds; far from the reference k3 is
    heavy-tailed and a sample-std z-test would not be valid).
    """
    task = make_task()
    configs = [TrainConfig(epochs=10, steps=1, kl_period=0, delta="centered", seed=s) for s in range(100)]
    records = train(task, configs)
    difference = (records.step_metrics["kl"] - records.step_metrics["kl_exact"])[:, 1:].ravel()
    standard_error = difference.std(ddof=1) / np.sqrt(difference.size)
    assert abs(difference.mean()) < 5 * standard_error + 1e-6
    assert records.step_metrics["kl_exact"][:, 1:].mean() > 10 * standard_error  # not trivially zero


def test_reward_std_uses_the_configured_std_convention():
    """`reward_std` is the std within each group, averaged over prompts, with Bessel's correction
    exactly when `std_unbiased` (the convention `normalized` deltas use). Recomputed here from the
    recorded samples with numpy; the other convention (the mutant) gives a different number, and TRL
    >= 0.27's whole-batch std yet another (docs/metrics.md)."""
    task = make_task()
    for unbiased, ddof in ((True, 1), (False, 0)):
        config = TrainConfig(epochs=4, steps=1, sample_every=1, std_unbiased=unbiased, delta="centered", seed=0)
        records = train(task, config)
        assert len(records.samples) == 4
        for snap in records.samples:
            rewards = snap.rewards[0].astype(np.float64)  # float[batch trial]
            expected = rewards.std(axis=-1, ddof=ddof).mean()
            assert expected > 0.05  # some group's rewards vary (seed 0), so the conventions differ
            np.testing.assert_allclose(records.epoch_metrics["reward_std"][0, snap.epoch], expected, rtol=1e-6)
            mutant = rewards.std(axis=-1, ddof=1 - ddof).mean()
            assert abs(mutant - expected) > 1e-3
            assert abs(rewards.std(ddof=ddof) - expected) > 1e-3  # the whole batch's std is not the group one


def test_block_metrics_are_the_plain_per_step_means_over_live_tokens():
    g = torch.Generator().manual_seed(0)
    runs, batch, trial, pos, vocab, steps, epochs = 2, 3, 4, 5, 6, 2, 2
    eps = torch.tensor([0.1, 0.2])
    block, plain = StepMetricBlock(steps, epochs, LIVE_TOKEN_METRICS), []
    for epoch in range(epochs):
        mask = torch.rand(runs, batch, trial, pos, generator=g) < 0.7
        mask[..., 0] = True
        deltas = torch.randn(runs, batch, trial, generator=g)
        zero = lambda t: torch.where(mask, t, torch.zeros(()))  # noqa: E731
        old, ref = (zero(-torch.rand(runs, batch, trial, pos, generator=g)) for _ in range(2))
        for step in range(steps):
            log_softmax = torch.log_softmax(torch.randn(runs, batch, trial, pos, vocab, generator=g), -1)
            log_probs = zero(old + 0.3 * torch.randn(old.shape, generator=g))
            loss = torch.randn(runs, generator=g)
            # each position's entropy as the fused log-probs give it; padding holds junk the block must ignore
            token_entropy = torch.where(mask, -(log_softmax.exp() * log_softmax).sum(-1), torch.tensor(1e6))
            block.add_step(step, log_probs, token_entropy, loss=loss)
            for r in range(runs):
                live = mask[r]
                rho = (log_probs[r] - old[r]).exp()[live]
                side = deltas[r].unsqueeze(-1).expand(batch, trial, pos)[live]
                low = ((rho < 1 - eps[r]) & (side < 0)).float().mean()
                high = ((rho > 1 + eps[r]) & (side > 0)).float().mean()
                entropy = -(log_softmax[r].exp() * log_softmax[r]).sum(-1)[live].mean()
                plain.append(dict(kl=k3(log_probs[r], ref[r])[live].sum() / (batch * trial), ratio_mean=rho.mean(),
                                  ratio_max=rho.max(), clip_low_fraction=low, clip_high_fraction=high,
                                  clip_fraction=low + high, entropy=entropy, loss=loss[r]))
        block.end_epoch(old, ref, None, mask, deltas, None)  # the responses: read only at fixed length
    values = block.flush(lambda ratio, side, mask: ppo_clip_fractions(ratio, side, mask, eps))  # [(epoch step) run]
    for i, expected in enumerate(plain):
        epoch_step, r = divmod(i, runs)
        for name, value in expected.items():
            torch.testing.assert_close(values[name][epoch_step, r], value, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("given", [True, False])
def test_fixed_length_block_metrics_are_the_plain_per_step_means(given):
    """FIXED_LENGTH_METRICS against the plain definitions with explicit log-probs: the old log-probs are the
    first step's, the reference's come from its log-softmax and the epoch's responses, and the groups' log-probs
    are the step's own (`given`) or, where a step hands none (a DPO step's forward pass covered only its pairs),
    gathers from its log-softmaxes. The old and reference log-probs handed to the block are junk it must not
    read."""
    g = torch.Generator().manual_seed(1)
    runs, batch, trial, pos, vocab, steps, epochs = 2, 3, 4, 3, 5, 3, 2
    eps = torch.tensor([0.1, 0.2])
    block, plain = StepMetricBlock(steps, epochs, FIXED_LENGTH_METRICS), []
    for epoch in range(epochs):
        responses = torch.randint(vocab, (runs, batch, trial, pos), generator=g)
        deltas = torch.randn(runs, batch, trial, generator=g)
        ref_ls = torch.log_softmax(torch.randn(runs, batch, pos, vocab, generator=g), -1)
        ref = ref_ls.unsqueeze(2).expand(-1, -1, trial, -1, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
        for step in range(steps):
            ls = torch.log_softmax(torch.randn(runs, batch, pos, vocab, generator=g), -1)
            log_probs = ls.unsqueeze(2).expand(-1, -1, trial, -1, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
            if step == 0:  # the sampling policy's
                old = log_probs
            block.add_step(step, log_probs if given else None, ls, loss=torch.zeros(runs))
            for r in range(runs):
                rho = (log_probs[r] - old[r]).exp()
                side = deltas[r].unsqueeze(-1).expand(batch, trial, pos)
                low = ((rho < 1 - eps[r]) & (side < 0)).float().mean()
                high = ((rho > 1 + eps[r]) & (side > 0)).float().mean()
                p = ls[r].exp()
                plain.append(dict(kl=k3(log_probs[r], ref[r]).sum(-1).mean(), ratio_mean=rho.mean(),
                                  ratio_max=rho.max(), clip_low_fraction=low, clip_high_fraction=high,
                                  kl_exact=(p * (ls[r] - ref_ls[r])).sum((-2, -1)).mean(),
                                  entropy=-(p * ls[r]).sum(-1).mean()))
        block.end_epoch(torch.full_like(ref, float("nan")), torch.full_like(ref, float("nan")), ref_ls, None,
                        deltas, responses)
    values = block.flush(lambda ratio, side, mask: ppo_clip_fractions(ratio, side, mask, eps))  # [(epoch step) run]
    assert float(values["ratio_max"].max()) > 1.5 and float(values["clip_fraction"].max()) > 0.2  # not all at 1
    for i, expected in enumerate(plain):
        epoch_step, r = divmod(i, runs)
        for name, value in expected.items():
            torch.testing.assert_close(values[name][epoch_step, r], value, rtol=1e-5, atol=1e-6, msg=name)


def test_each_run_reports_its_own_losss_clip_metrics_in_a_mixed_batch():
    """`clip_metrics` groups a batch's runs by loss and calls each loss's entry (`Loss.clip_metrics`) on its runs
    only: in a batch of naive and clipped runs with different eps, every run's fractions are those of PPO's function
    on that run alone. Mutant: computing every run with the first run's eps makes the clipped run's fractions
    differ."""
    g = torch.Generator().manual_seed(2)
    configs = [TrainConfig(loss="naive", clip_eps=0.05), TrainConfig(loss="clipped", clip_eps=0.3),
               TrainConfig(loss="naive", clip_eps=0.2)]
    settings = RunSettings.of(configs, torch.device("cpu"))
    assert len(settings.loss_kinds.groups) == 2  # the gather path
    ratio = (0.4 * torch.randn(2, 3, 3, 4, 5, 3, generator=g)).exp()  # float[step epoch run batch trial pos]
    side = torch.randn(3, 3, 4, 5, 1, generator=g)
    low, high = clip_metrics(settings, ratio, side, None)
    for r, config in enumerate(configs):
        alone = ppo_clip_fractions(ratio[:, :, r], side[:, r], None, config.clip_eps)
        torch.testing.assert_close((low[:, :, r], high[:, :, r]), alone, rtol=0, atol=0)
    mutant = ppo_clip_fractions(ratio, side, None, 0.05)
    assert not torch.equal(mutant[0][:, :, 1] + mutant[1][:, :, 1], low[:, :, 1] + high[:, :, 1])


def test_the_glossary_page_names_every_column_the_records_define():
    """docs/metrics.md says it lists every column of metrics.csv; each name of lab.training.records' glossaries is in
    the first cell of one of its table rows (eleven settings' columns were missing)."""
    import re
    from pathlib import Path

    import lab.training.records as records

    page = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    listed = {name for line in page.splitlines() if line.startswith("| `")
              for name in re.findall(r"`([a-z_0-9<>]+)`", line.split("|")[1])}
    defined = {name for key, value in vars(records).items() if key.isupper() and isinstance(value, dict)
               for name in value}
    assert defined - listed == set()
