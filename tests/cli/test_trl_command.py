"""`lab trl`: TRL's GRPOTrainer on the task writes a lab run folder whose exact metrics are the model's.

The folder's config.json carries the full GRPOConfig with the lab's settings mapped (docs/trl.md);
metrics.csv's exact columns are the exact lens (`lab.bridge.exact_lm`) on the initial model at epoch
0 and on the saved policy.pt at the last epoch, so a reader can trust them without rerunning TRL.
"""

from __future__ import annotations

import csv
import json

import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("trl", reason="the TRL extra is not installed (pip install -e '.[trl]')")

from tests.cli.cli_tools import one_line  # noqa: E402

from lab.bridge.exact_lm import all_responses, exact_metrics, response_log_probs, reward_table  # noqa: E402
from lab.bridge.tiny_lm import TinyLM, build_model  # noqa: E402
from lab.cli.commands import app  # noqa: E402
from tasks.sorting import lecture_prompts, variable_length_reward  # noqa: E402

ARGS = ["--epochs", "2", "--steps", "2", "--group-size", "4", "--kl", "0.05", "--clip-eps", "0.1",
        "--loss-agg", "seq-mean-token-mean", "--delta", "normalized", "--temperature", "0.9", "--quiet"]


def trl(*args):
    return CliRunner().invoke(app, ["trl", *args])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl") / "run"
    result = trl(*ARGS, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_trl_writes_config_with_the_mapped_grpo_config(folder):
    """config.json holds TRL's full GRPOConfig: G -> num_generations, steps -> num_iterations, clip ->
    epsilon, the lab's beta x max length -> beta, seq-mean-token-mean -> loss_type grpo, normalized ->
    scale_rewards group, the temperature, float32, no gradient clipping, a constant lr."""
    config = json.loads((folder / "config.json").read_text())
    grpo = config["grpo_config"]
    assert (grpo["num_generations"], grpo["num_iterations"], grpo["epsilon"]) == (4, 2, 0.1)
    assert grpo["beta"] == pytest.approx(0.05 * 4) and grpo["use_bias_correction_kl"] is False
    assert (grpo["loss_type"], grpo["scale_rewards"], grpo["temperature"]) == ("grpo", "group", 0.9)
    assert (grpo["bf16"], grpo["max_grad_norm"], grpo["lr_scheduler_type"]) == (False, 0.0, "constant")
    assert grpo["max_steps"] == 4 and grpo["per_device_train_batch_size"] == 3 * 4
    assert config["versions"]["trl"] == "1.16.0" and config["command"] == "trl"
    assert {p.name for p in folder.iterdir()} == {".lab-output", "config.json", "metrics.csv", "policy.pt",
                                                  "curves.png"}


def test_trl_exact_metrics_are_the_lens_on_the_initial_and_final_models(folder):
    """Epoch 0's exact metrics are the initial model's (rebuilt from the seed); the last epoch's are those
    of the saved policy.pt. TRL's logged reward and loss appear under the lab's names."""
    rows = list(csv.DictReader((folder / "metrics.csv").open()))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    assert {"mean_reward", "loss", "zero_std_fraction", "entropy", "response_length"} <= set(rows[1])
    prompts = lecture_prompts()
    responses = all_responses(5, 4)
    rewards = reward_table(prompts, responses, variable_length_reward("inclusion-ordering", 5))
    initial = build_model(TinyLM(seed=5)).eval()
    initial_log_probs = response_log_probs(initial, prompts, responses, 5, 0.9)
    final = build_model(TinyLM(seed=5))
    final.load_state_dict(torch.load(folder / "policy.pt"))
    final_log_probs = response_log_probs(final.eval(), prompts, responses, 5, 0.9)
    for row, log_probs in ((rows[0], initial_log_probs), (rows[-1], final_log_probs)):
        expected = exact_metrics(log_probs, initial_log_probs, rewards)
        for name, value in expected.items():
            assert float(row[name]) == pytest.approx(value, abs=1e-9), name
    assert float(rows[-1]["kl_exact"]) > 0


def test_trl_run_is_determined_by_its_seed(folder, tmp_path):
    """The same settings and seed give a byte-identical metrics.csv."""
    assert trl(*ARGS, "--out", str(tmp_path / "again")).exit_code == 0
    assert (tmp_path / "again" / "metrics.csv").read_bytes() == (folder / "metrics.csv").read_bytes()


@pytest.mark.parametrize(("args", "fragment"), [
    (["--loss-agg", "seq-mean-token-sum"], "--loss-agg"),
    (["--group-size", "1"], "--group-size"),
    (["--lr", "nan"], "--lr"),
    (["--kl", "-1"], "--kl"),
    (["--width", "30"], "--width"),
    (["--max-length", "3"], "--max-length"),
    (["--max-length", "99999999999999999999"], "--max-length"),
    (["--epochs", "0"], "--epochs"),
])
def test_trl_bad_input_is_one_line_exit_2_and_leaves_nothing(tmp_path, args, fragment):
    result = trl(*args, "--out", str(tmp_path / "out"))
    one_line(result, 2, fragment)
    assert not (tmp_path / "out").exists()


def test_trl_existing_folder_needs_force(folder):
    one_line(trl(*ARGS, "--out", str(folder)), 2, "--force")


@pytest.mark.parametrize("pairs", ["offline", "online"])
def test_trl_dpo_writes_its_trainer_config_and_the_distance_to_the_optimum(tmp_path, pairs):
    """--loss dpo trains by DPOTrainer (offline) or OnlineDPOTrainer (online) with DPO's beta = --kl, and
    every epoch records the exact KL to pi* = pi_ref exp(r / beta) / Z, positive and finite."""
    out = tmp_path / "dpo"
    result = trl("--loss", "dpo", "--kl", "0.2", "--pairs", pairs, "--epochs", "2", "--quiet", "--out", str(out))
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    beta = config["dpo_config"]["beta"]
    assert (beta[0] if isinstance(beta, list) else beta) == 0.2 and config["settings"]["pairs"] == pairs
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    assert all(0 < float(r["kl_to_optimum"]) < float("inf") for r in rows)
    assert {"chosen_rewards", "reward_accuracy", "chosen_logps"} <= set(rows[1])


@pytest.mark.parametrize(("args", "fragment"), [
    (["--loss", "dpo"], "--kl"),
    (["--pairs-per-prompt", "4"], "--pairs-per-prompt"),
    (["--loss", "dpo", "--kl", "0.1", "--group-size", "4"], "--group-size"),
    (["--loss", "dpo", "--kl", "0.1", "--pairs", "online", "--steps", "2"], "--steps"),
])
def test_trl_options_of_the_other_trainer_are_one_line_exit_2(tmp_path, args, fragment):
    one_line(trl(*args, "--out", str(tmp_path / "out")), 2, fragment)
    assert not (tmp_path / "out").exists()
