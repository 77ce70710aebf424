"""Training on variable-length responses (the length metrics; lab/training/train.py, kinds.py).

The factorised default is pinned (tests/test_pinned_outputs.py's files and rule); the autoregressive policy trains under every loss
aggregation, batches like the factorised one, and writes its lengths.
"""

import csv
import io
import math
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from lab.core.aggregation import LossAgg
from lab.cli.commands import app
from lab.training.config import ConfigError, TrainConfig
from lab.training.lengths import EMPTY_WHEN_NONE, length_metrics
from lab.policies.autoregressive import AutoregressivePolicy
from lab.policies import load_policy
from lab.files.run_text import metrics_csv, response_text
from lab.training.train import train
from tasks.sorting import make_task

PINNED_COLUMNS = ["epoch", "step", "mean_reward", "reward_std", "greedy_reward", "greedy_accuracy", "loss", "pg_loss",
                  "kl", "kl_exact", "ratio_mean", "ratio_max", "clip_fraction", "entropy"]
PINNED_RUNS = {
    "train-lecture": [TrainConfig(epochs=4, dtype="float64")],
    "train-centered-clipped-kl": [TrainConfig(epochs=4, delta="centered", loss="clipped", kl=0.05, seed=s,
                                              dtype="float64") for s in (0, 1)],
}
"""These metrics.csv columns of the lecture's settings (4 epochs; the second: seeds 0 and 1 batched, centered,
clipped, beta 0.05), in tests/data/pinned/, in float64 so that they hold on every CPU (tests/test_pinned_outputs.py)."""


def pinned_columns(configs) -> str:
    rows = list(csv.DictReader(io.StringIO(metrics_csv(train(make_task(), configs)))))
    return "".join(",".join(row[c] for c in PINNED_COLUMNS) + "\n" for row in [dict(zip(PINNED_COLUMNS,
                                                                                     PINNED_COLUMNS))] + rows)


@pytest.mark.crosspath
@pytest.mark.parametrize("name", sorted(PINNED_RUNS))
def test_the_factorised_default_is_what_it_was(name, tmp_path):
    """The factorised policy's metrics are the pinned ones, within the pinned outputs' tolerance of float32's rounding
    of float64 values (tests/test_pinned_outputs.py says why)."""
    from tests.test_pinned_outputs import PINNED, difference

    got = tmp_path / f"{name}.csv"
    got.write_text(pinned_columns(PINNED_RUNS[name]))
    if os.environ.get("LAB_REPIN") == "1":
        (PINNED / f"{name}.csv").write_bytes(got.read_bytes())
    assert difference(got, PINNED / f"{name}.csv") is None


SMALL = TrainConfig(epochs=3, steps=2, policy="autoregressive", delta="centered", kl=0.05, kl_period=2)


@pytest.mark.parametrize("agg", [m.value for m in LossAgg])
def test_the_autoregressive_policy_trains_under_every_aggregation(agg):
    config = SMALL.replace(loss_agg=agg, loss="clipped")
    records = train(make_task(), config)
    start = AutoregressivePolicy(5, 3, 5, 10, generator=torch.Generator().manual_seed(config.seed))
    for name, p in start.named_parameters():
        assert not torch.equal(records.state[name][0], p.detach()), name
    assert records.eos == 5 and records.greedy_responses.shape == (1, 3, 5)
    for name, values in records.step_metrics.items():
        assert name == "kl_exact" or np.isfinite(values).all(), name
    for name, values in records.epoch_metrics.items():
        assert name in EMPTY_WHEN_NONE | {"heldout_greedy_reward", "heldout_greedy_accuracy"} or \
            np.isfinite(values).all(), name
    lengths = records.epoch_metrics["response_length"]
    assert ((lengths >= 1) & (lengths <= 5)).all()
    assert (records.step_metrics["kl"] >= 0).all()


def test_a_seeds_autoregressive_run_is_the_same_alone_or_in_a_sweep():
    a, b = SMALL.replace(seed=3), SMALL.replace(seed=4, loss_agg="seq-mean-token-mean")
    together, alone = train(make_task(), [a, b]), train(make_task(), a)
    for name in alone.step_metrics:
        np.testing.assert_allclose(together.step_metrics[name][0], alone.step_metrics[name][0], rtol=1e-5, atol=1e-6)
    for name in alone.state:
        torch.testing.assert_close(together.state[name][0], alone.state[name][0], rtol=1e-5, atol=1e-6)


def test_length_metrics_split_by_correctness_and_are_empty_without_such_samples():
    lengths = torch.tensor([[[[2, 4]], [[3, 3]]]])  # run epoch batch trial
    correct = torch.tensor([[[[True, False]], [[False, False]]]])
    values = length_metrics(lengths, correct)
    assert values["response_length"].tolist() == [[3.0, 3.0]]
    assert values["correct_length"][0, 0] == 2 and math.isnan(values["correct_length"][0, 1])
    assert values["incorrect_length"].tolist() == [[4.0, 3.0]]


def test_a_factorised_run_has_the_prompt_length_and_rejects_a_cap():
    records = train(make_task(), TrainConfig(epochs=2, steps=1))
    assert (records.epoch_metrics["response_length"] == 3).all()
    with pytest.raises(ConfigError, match="autoregressive policy only"):
        TrainConfig(max_length=4)


def test_responses_are_shown_up_to_eos():
    assert response_text([0, 1, 2], None) == "[0, 1, 2]"
    assert response_text([0, 5, 5, 5], 5) == "[0, <eos>]"
    assert response_text([0, 1, 2, 3], 5) == "[0, 1, 2, 3]"  # truncated at the cap


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_lab_run_autoregressive_writes_lengths_eos_and_its_policy(tmp_path):
    out = tmp_path / "ar"
    result = invoke("run", "--policy", "autoregressive", "--loss-agg", "seq-mean-token-sum-norm", "--max-length", "4",
                    "--epochs", "2", "--steps", "1", "--quiet", "--device", "cpu", "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO((out / "metrics.csv").read_text())))
    assert all(1 <= float(row["response_length"]) <= 4 for row in rows)
    assert "<eos>" in (out / "samples.txt").read_text()
    assert isinstance(load_policy(out / "policy.pt"), AutoregressivePolicy)


@pytest.mark.parametrize("args, allowed", [
    (("--policy", "transformer"), "--policy transformer is not a choice; choose one of: factorized, autoregressive"),
    (("--loss-agg", "sum"), "choose one of: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm"),
    (("--max-length", "4"), "add --policy autoregressive"),
    (("--policy", "autoregressive", "--max-length", "3"), "use --max-length 4 or more"),
])
def test_bad_policy_options_exit_2_with_the_choices(tmp_path, args, allowed):
    result = invoke("run", *args, "--out", str(tmp_path / "x"), "--quiet")
    assert result.exit_code == 2
    assert allowed in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()


def test_an_autoregressive_sweep_over_two_aggregations_runs(tmp_path):
    out = tmp_path / "sweep"
    result = invoke("sweep", "--policy", "autoregressive", "--loss-agg", "token-mean", "--loss-agg",
                    "seq-mean-token-mean", "--seeds", "2", "--epochs", "2", "--steps", "1", "--quiet",
                    "--device", "cpu", "--out", str(out))
    assert result.exit_code == 0, result.output
    epochs = pq.read_table(out / "metrics_epoch.parquet").to_pydict()
    assert set(epochs["config_loss_agg"]) == {"token-mean", "seq-mean-token-mean"}
    assert all(length is not None and length > 0 for length in epochs["response_length"])


def test_diagnose_says_it_analyses_the_factorised_policy_only(tmp_path):
    out = tmp_path / "ar"
    assert invoke("run", "--policy", "autoregressive", "--epochs", "1", "--steps", "1", "--quiet", "--device", "cpu",
                  "--out", str(out)).exit_code == 0
    result = invoke("diagnose", "--from-run", str(out), "--group-size", "2")
    assert result.exit_code == 2 and "an autoregressive run" in result.output


def test_the_autoregressive_policy_refuses_the_multinomial_sampler():
    with pytest.raises(ConfigError, match="factorised policy only"):
        TrainConfig(policy="autoregressive", sampler="multinomial")


def test_autoregressive_kl_exact_is_the_exact_sequence_kl_at_each_epochs_first_step():
    """At an epoch's first step kl_exact is KL(pi_theta || pi_ref) over whole responses
    (lab.exact.varlen.sequence_kl, by enumeration); at the other steps it is empty, as documented."""
    from lab.exact.varlen import sequence_kl
    from lab.policies import make_policy, policy_from_state

    config = SMALL.replace(epochs=2, kl_period=0, lr=0.05, seed=2)
    task = make_task()
    two, one = train(task, config), train(task, config.replace(epochs=1))
    start = make_policy("autoregressive", 5, 3, 5, 10, torch.Generator().manual_seed(config.seed)).double()
    exact = sequence_kl(policy_from_state(one.state).double(), start, task.prompts).mean().item()
    logged = two.step_metrics["kl_exact"][0]
    assert logged[0] == 0 and np.isnan(logged[[1, 3]]).all()
    assert exact > 1e-3
    np.testing.assert_allclose(logged[2], exact, rtol=1e-4)
