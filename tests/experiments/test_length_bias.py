"""The length-bias section of RESULTS.md (lab/experiments/length_bias.py): its paired rule on made-up records."""

import numpy as np
import pytest

from lab.experiments.length_bias import (DR_GRPO, LECTURE, SETTINGS, late, length_bias_markdown, length_configs,
                                         predicted_sign, verdict, window)
from lab.training.config import TrainConfig
from lab.training.records import Records

SEEDS, EPOCHS = 6, 14


def made_up(shift: float, seed_wobble: float = 1.0):
    """Records per task whose 1/|o| runs' incorrect_length = the C runs' + shift, both with a large shared seed effect
    (so only a paired test can see a small shift); slopes at init all `shift`'s sign."""
    configs, pairs = length_configs(SEEDS, TrainConfig(epochs=EPOCHS))
    records, slopes, flows = {}, {}, {}
    for name, runs in configs.items():
        wrong = np.zeros((len(runs), EPOCHS), dtype=np.float32)
        for biased, unbiased in (p for p, s in zip(pairs, SETTINGS) if s.task == name):
            for seed, (b, u) in enumerate(zip(biased, unbiased)):
                wrong[u] = 3.0 + seed_wobble * seed
                wrong[b] = wrong[u] + shift + 0.01 * (seed % 2)
        wrong[0, :3] = np.nan  # epochs without wrong samples are skipped
        metrics = {"incorrect_length": wrong}
        records[name] = Records(runs, np.zeros((2, 1)), np.ones((len(runs), 2)), {}, metrics)
        slopes[name] = np.array([np.sign(shift) if c.loss_agg == "seq-mean-token-mean" else 0.0 for c in runs])
        flows[name] = np.full((len(runs), EPOCHS + 1), np.nan)
    return records, pairs, slopes, flows


@pytest.mark.parametrize("shift, words", [(0.1, "lengthens, as predicted"), (-0.1, "shortens, as predicted")])
def test_the_verdict_is_the_paired_interval_against_the_exact_prediction(shift, words):
    text = "\n".join(length_bias_markdown(*made_up(shift)))
    assert text.count(f"**{words}**") == len(SETTINGS), text
    assert "6 of 6" in text or "0 of 6" in text


def test_a_shift_hidden_in_seed_scatter_is_seen_only_because_runs_are_paired():
    records, pairs, *_ = made_up(0.05, seed_wobble=2.0)
    whole = window(records[LECTURE], "incorrect_length", slice(None))
    biased, unbiased = pairs[0]
    from lab.experiments.intervals import difference_interval, paired_interval

    assert paired_interval(whole[biased], whole[unbiased]).low > 0
    assert difference_interval(whole[biased], whole[unbiased]).low < 0  # Welch cannot see it


def test_prediction_needs_agreement_and_against_is_reported():
    assert predicted_sign(np.array([1.0] * 9 + [-1.0])) == 1
    assert predicted_sign(np.array([1.0] * 8 + [-1.0] * 2)) == 0
    assert verdict(0.1, 0.3, -1) == "lengthens, against the prediction"
    assert verdict(-0.1, 0.3, 1) == "no difference seen"
    # a straddling interval from a design that could not see a quarter of a token says so (issue 35)
    assert verdict(-0.1, 0.3, 1, detectable=0.5) == "no difference seen, underpowered"
    assert verdict(0.1, 0.3, 1, detectable=0.5) == "lengthens, as predicted"


def test_configs_pair_seeds_and_cover_both_tasks():
    configs, pairs = length_configs(3, TrainConfig())
    assert set(configs) == {LECTURE, DR_GRPO}
    for setting, (biased, unbiased) in zip(SETTINGS, pairs):
        runs = configs[setting.task]
        assert [runs[i].seed for i in biased] == [runs[i].seed for i in unbiased] == [0, 1, 2]
        assert {runs[i].loss_agg.value for i in biased} == {"seq-mean-token-mean"}
        assert {runs[i].loss_agg.value for i in unbiased} == {"seq-mean-token-sum-norm"}
    assert configs[DR_GRPO][0].reward == "exact-match" and configs[DR_GRPO][0].max_length == 6


def test_late_skips_empty_epochs():
    records, *_ = made_up(0.1)
    assert not np.isnan(late(records[LECTURE], "incorrect_length")).any()
