"""RESULTS.md's temperature section and batch-effect note (lab.experiments.temperature_section, controls)."""

import numpy as np

from lab.experiments.controls import LR_CONTROL, batch_effect_lines, lr_configs
from lab.experiments.temperature_section import SETTINGS, temperature_lines
from lab.training.config import TrainConfig
from lab.training.records import Records

SEEDS, EPOCHS, STEPS = 10, 4, 2


def made_up(solved_per_setting):
    configs = [TrainConfig(epochs=EPOCHS, steps=STEPS, seed=s, delta="centered", loss="clipped", **overrides)
               for overrides in SETTINGS for s in range(SEEDS)]
    groups = [list(range(i * SEEDS, (i + 1) * SEEDS)) for i in range(len(SETTINGS))]
    greedy = np.zeros((len(configs), EPOCHS), dtype=np.float32)
    for runs, solved in zip(groups, solved_per_setting):
        greedy[runs[:solved], -1] = 1.0
    entropy = np.full((len(configs), EPOCHS * STEPS), 0.5, dtype=np.float32)
    entropy[groups[0]] = entropy[groups[-1]] = 1.6  # init 0.1 at T = 1 and init 1 at T = 100 start alike
    metrics = {"greedy_fraction": greedy, "mean_reward": greedy * 5}
    return Records(configs, np.zeros((3, 3)), np.ones((len(configs), 3)), {"entropy": entropy}, metrics), groups


def test_the_section_reads_success_and_the_verdict_from_the_intervals():
    records, groups = made_up([10, 0, 0, 3, 9])
    text = "\n".join(temperature_lines(records, SETTINGS, groups))
    assert "| 1 | 100 | 1.600 [1.600, 1.600] |" in text and "T = 100 (90% [60%, 98%]" in text
    assert "do not overlap" in text
    records, groups = made_up([10, 1, 2, 2, 2])
    assert "No temperature tried sorts reliably more often" in "\n".join(temperature_lines(records, SETTINGS, groups))


def test_lr_control_scales_epochs_and_the_batch_note_counts_moved_runs():
    configs = lr_configs(2, TrainConfig(epochs=7))
    assert [(c.init_scale, c.lr, c.epochs) for c in configs[::2]] == [(s, lr, t * 7) for s, lr, t in LR_CONTROL]
    text = " ".join(batch_effect_lines({"runs": 80, "moved": 12, "largest": 0.1, "per_setting": [(0.03, 4.055, 4.037)]}))
    assert "68 of them; 12 moved, by at most 0.100" in text and "4.055 in the reproduction's batch, 4.037 alone" in text
