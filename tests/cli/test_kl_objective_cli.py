"""`lab run` and `lab sweep` with --kl: the objective each run ascends is named, the reward placement defaults to
k1 (verl's), and k3 in the reward is warned about (claim 35)."""

import json

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app

SHORT = ["--epochs", "2", "--steps", "1"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_a_kl_run_names_its_objective_and_beta_prime(tmp_path):
    """`lab run --delta centered --kl 0.05` on the lecture's prompts (C = 3, G = 10) ascends
    E[R] - beta' KL(pi_ref || pi) at beta' = 0.05 x 3 x 10 / 9 = 0.1667 (claim 14), printed and in summary.json;
    a run without --kl has no objective entry. Mutant: beta' = beta printed fails."""
    result = CliRunner().invoke(app, ["run", *SHORT, "--delta", "centered", "--kl", "0.05", "--out", "a"])
    assert result.exit_code == 0, result.output
    assert "ascends E[R] - beta' KL(pi_ref || pi), beta' = 0.1667, reference refreshed every 10 epochs" in result.output
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["objective"]["beta_prime"] == pytest.approx(0.05 * 3 * 10 / 9)
    assert CliRunner().invoke(app, ["run", *SHORT, "--quiet", "--out", "b"]).exit_code == 0
    assert "objective" not in json.loads((tmp_path / "b" / "summary.json").read_text())


def test_the_reward_placement_defaults_to_k1_and_k3_there_is_warned_about(tmp_path):
    """--kl-in reward without --kl-estimator trains k1 (config.json says so), ascending J_beta at beta itself;
    --kl-estimator k3 with it still trains but prints one warning line naming claim 35, and a sweep crossing k3
    with the reward warns the same; a loss-placement run keeps k3 and warns nothing."""
    runner = CliRunner()  # click 8.2: result.stderr apart, result.output both
    plain = runner.invoke(app, ["run", *SHORT, "--kl", "0.05", "--kl-in", "reward", "--out", "k1"])
    assert plain.exit_code == 0 and plain.stderr == ""
    assert json.loads((tmp_path / "k1" / "config.json").read_text())["config"]["kl_estimator"] == "k1"
    assert "J_beta' = E[R] - beta' KL(pi || pi_ref), beta' = 0.05" in plain.output
    k3 = runner.invoke(app, ["run", *SHORT, "--kl", "0.05", "--kl-in", "reward", "--kl-estimator", "k3", "--out", "k3"])
    assert k3.exit_code == 0 and k3.stderr.count("\n") == 1 and "claim 35" in k3.stderr
    loss = runner.invoke(app, ["run", *SHORT, "--kl", "0.05", "--quiet", "--out", "loss"])
    assert loss.exit_code == 0 and loss.stderr == ""
    assert "kl_estimator" not in json.loads((tmp_path / "loss" / "config.json").read_text())["config"]  # k3
    sweep = runner.invoke(app, ["sweep", *SHORT, "--kl", "0.05", "--kl-in", "reward", "--kl-in", "loss", "--seeds", "1",
                                "--quiet", "--out", "s"])
    assert sweep.exit_code == 0 and sweep.stderr == "", sweep.stderr
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    assert "k1" in json.dumps(config["grid"]) or "k1" in json.dumps(config["base"])
    crossed = runner.invoke(app, ["sweep", *SHORT, "--kl", "0.05", "--kl-in", "reward", "--kl-estimator", "k3",
                                  "--kl-estimator", "k1", "--seeds", "1", "--quiet", "--out", "t"])
    assert crossed.exit_code == 0 and "claim 35" in crossed.stderr
