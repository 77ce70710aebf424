"""The length-bias section of RESULTS.md (lab/experiments/length_bias.py): its rule on made-up records."""

import numpy as np
import pytest

from lab.training.config import TrainConfig
from lab.experiments.length_bias import BIASED, LATE_EPOCHS, SETTINGS, UNBIASED, late, length_bias_markdown, length_configs
from lab.training.records import Records

SEEDS, EPOCHS = 4, LATE_EPOCHS + 2


def made_up(wrong_length_of) -> tuple[Records, list[list[int]]]:
    """Records whose incorrect_length is wrong_length_of(setting) + a seed wobble; one correct epoch only."""
    configs, groups = length_configs(SEEDS, TrainConfig(epochs=EPOCHS))
    wrong = np.array([[wrong_length_of(SETTINGS[i // SEEDS]) + 0.01 * (i % SEEDS)] * EPOCHS
                      for i in range(len(configs))], dtype=np.float32)
    right = np.full_like(wrong, np.nan)
    right[:, -1] = 4.0
    right[0] = np.nan  # a run without any correct sample
    metrics = {"incorrect_length": wrong, "correct_length": right, "mean_reward": np.ones_like(wrong),
               "greedy_fraction": np.ones_like(wrong)}
    return Records(configs, np.zeros((3, 3)), np.ones((len(configs), 3)), {}, metrics), groups


@pytest.mark.parametrize("biased, verdict", [(5.0, "holds"), (3.0, "does not hold"), (4.0, "inconclusive")])
def test_the_verdict_follows_the_sign_of_the_welch_interval(biased, verdict):
    records, groups = made_up(lambda s: biased if s["loss_agg"] == BIASED else 4.0)
    if verdict == "inconclusive":  # equal means: the difference interval straddles 0
        records.epoch_metrics["incorrect_length"][::2] += 0.5
        records.epoch_metrics["incorrect_length"][1::2] -= 0.5
    text = "\n".join(length_bias_markdown(records, groups))
    assert text.count(f"**{verdict}**") == 2, text
    assert f"{BIASED} - {UNBIASED}" in text


def test_late_means_skip_empty_epochs_and_runs_without_samples():
    records, _ = made_up(lambda s: 4.0)
    right = late(records, "correct_length")
    assert np.isnan(right[0]) and (right[1:] == 4.0).all()
    assert len(length_configs(3, TrainConfig())[0]) == 3 * len(SETTINGS) == 18
