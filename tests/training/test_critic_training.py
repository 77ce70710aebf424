"""`--delta gae` on the training loop (lab/training/critic.py): the critic trains beside
the policy, its metrics are written, a run is the same alone or beside others in a batch, the options are
checked before any training (one line, exit 2)."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.training.config import TrainConfig
from lab.training.critic import CriticRuns
from lab.training.kinds import KINDS
from lab.training.records import CRITIC_EPOCH_METRICS, CRITIC_STEP_METRICS
from lab.training.runs import RunGroups
from lab.training.train import train
from tasks.sorting import make_task

SHORT = dict(epochs=4, steps=3)
CRITIC_COLUMNS = [*[m for m in CRITIC_EPOCH_METRICS if "<" not in m], *CRITIC_STEP_METRICS]


STEP_RTOL, STEP_ATOL = 1e-4, 1e-5  # a batched matmul may sum in another order (tests/training/test_batched.py)
SAMPLED = ("mean_reward", "reward_fraction", "reward_std", "zero_std_fraction", "response_length")


def same(a: dict, b: dict, run_a: int, run_b: int) -> None:
    """The samples' metrics equal; what the parameters give (through matmuls) equal to STEP_RTOL."""
    for name in a:
        if name in SAMPLED:
            np.testing.assert_array_equal(a[name][run_a], b[name][run_b], err_msg=name)
        else:
            np.testing.assert_allclose(a[name][run_a], b[name][run_b], rtol=STEP_RTOL, atol=STEP_ATOL, err_msg=name)


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_lab_run_with_gae_at_group_size_one_writes_the_critic_metrics(policy, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", "--delta", "gae", "--group-size", "1", "--policy", policy,
                                      "--epochs", "3", "--steps", "2", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert set(CRITIC_COLUMNS) <= set(header) and "value_error_exact_0" in header
    assert (policy == "autoregressive") == ("value_error_exact_4" in header)  # one per position up to the cap
    config = json.loads((out / "config.json").read_text())
    assert config["parameters"]["critic"] > 0 and config["parameters"]["policy"] > 0
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    first = dict(zip(header, rows[0].split(",")))
    assert float(first["values_mean"]) == 0.0  # the critic starts at V = 0
    assert float(first["value_error_exact"]) > 0


@pytest.mark.parametrize("args, message", [
    (["--delta", "gae", "--gae-lambda", "1.5"], "--gae-lambda must lie in [0, 1]"),
    (["--delta", "gae", "--gae-lambda", "-0.1"], "--gae-lambda must lie in [0, 1]"),
    (["--delta", "gae", "--critic-lr", "0"], "--critic-lr must be > 0"),
    (["--delta", "gae", "--cliprange-value", "0"], "--cliprange-value must be > 0"),
    (["--delta", "gae", "--critic-warmup", "3"], "--critic-warmup must be an integer from 0 to epochs - 1"),
    (["--gae-lambda", "0.5"], "--gae-lambda applies to the learned critic only; add --delta gae"),
    (["--delta", "centered", "--group-size", "1"], "needs --group-size >= 2"),
])
def test_bad_critic_options_are_one_line_and_exit_2(args, message, tmp_path):
    result = CliRunner().invoke(app, ["run", *args, "--epochs", "3", "--out", str(tmp_path / "x"), "--quiet"])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_sweep_over_centered_and_gae_runs_and_lists_lambda(tmp_path):
    out = tmp_path / "sweep"
    result = CliRunner().invoke(app, ["sweep", "--delta", "centered", "--delta", "gae", "--gae-lambda", "0",
                                      "--gae-lambda", "1", "--group-size", "2", "--seeds", "2", "--epochs", "2",
                                      "--steps", "2", "--format", "csv", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    summary = (out / "summary.csv").read_text().splitlines()
    assert len(summary) == 1 + 3  # centered once, gae at two lambdas
    header = (out / "metrics_epoch.csv").read_text().splitlines()[0]
    assert "config_gae_lambda" in header and "value_error_exact" in header
    assert json.loads((out / "config.json").read_text())["parameters"]["critic"] > 0


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_a_run_is_the_same_alone_and_beside_others(policy):
    """Batching changes nothing: a gae run beside a centered one and another gae run equals itself alone,
    and the centered run equals itself alone (its records carry NaN critic metrics)."""
    task = make_task()
    gae = TrainConfig(**SHORT, policy=policy, delta="gae", group_size=2, gae_lambda=0.5, seed=3)
    centered = TrainConfig(**SHORT, policy=policy, delta="centered", group_size=2, seed=4)
    together = train(task, [centered, gae, gae.replace(seed=7, critic_lr=0.01)])
    alone, plain = train(task, gae), train(task, centered)
    same(alone.step_metrics, together.step_metrics, 0, 1)
    same(alone.epoch_metrics, together.epoch_metrics, 0, 1)
    same(plain.step_metrics, together.step_metrics, 0, 0)
    assert np.isnan(together.epoch_metrics["value_error_exact"][0]).all()
    assert "vf_loss" not in plain.step_metrics  # no critic: no critic columns


def test_the_factorised_policy_has_one_state_so_lambda_changes_nothing():
    task = make_task()
    runs = [TrainConfig(**SHORT, delta="gae", group_size=2, gae_lambda=lam) for lam in (0.0, 1.0)]
    records = train(task, runs)
    same({k: records.step_metrics[k][[0]] for k in records.step_metrics},
         {k: records.step_metrics[k][[1]] for k in records.step_metrics}, 0, 0)


def test_critic_warmup_epochs_leave_the_policy_alone_and_train_the_critic():
    records = train(make_task(), TrainConfig(epochs=3, steps=4, delta="gae", group_size=2, critic_warmup=2))
    entropy, vf_loss = records.step_metrics["entropy"][0], records.step_metrics["vf_loss"][0]
    assert np.all(entropy[:8] == entropy[0])  # two warm-up epochs: the policy never moved
    assert entropy[9] != entropy[0]  # the third epoch trains it
    assert vf_loss[3] < vf_loss[0]  # the critic learns from the first epoch on


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_advantages_are_gae_of_the_critic_and_whitening_is_per_run(policy):
    task = make_task()
    configs = [TrainConfig(**SHORT, policy=policy, delta="gae", group_size=3, gae_lambda=0.7, seed=s,
                           whiten_advantages=s == 1) for s in range(2)]
    generators = [torch.Generator().manual_seed(c.seed) for c in configs]
    kind = KINDS[configs[0].policy](task, configs, generators, RunGroups([c.reward for c in configs], "cpu"), "cpu")
    critic = CriticRuns(kind, configs, [0, 1], torch.device("cpu"))
    with torch.no_grad():
        for p in critic.parameters:
            p.normal_(generator=torch.Generator().manual_seed(0))
    responses = kind.sample()
    mask = kind.live_tokens(responses)
    rewards = torch.stack([kind.rewards[c.reward](kind.prompts, responses[r]) for r, c in enumerate(configs)])
    advantages = critic.advantages(responses, mask, rewards)
    live = torch.ones_like(responses, dtype=torch.bool) if mask is None else mask
    values = critic.old  # the factorised critic keeps one position: its one state, the prompt
    if policy == "factorized":  # R - V(x) on every token
        assert values.shape[-1] == 1
        torch.testing.assert_close(advantages[0], (rewards[0].unsqueeze(-1) - values[0]).expand_as(advantages[0]))
    else:  # the definition, token by token, lambda = 0.7
        for b, t in ((0, 0), (1, 2), (2, 1)):
            n = int(live[0, b, t].sum())
            v = values[0, b, t, :n].tolist() + [0.0]
            deltas = [(float(rewards[0, b, t]) if k == n - 1 else 0.0) + v[k + 1] - v[k] for k in range(n)]
            want = [sum(0.7 ** l * deltas[k + l] for l in range(n - k)) for k in range(n)]
            torch.testing.assert_close(advantages[0, b, t, :n], torch.tensor(want), rtol=1e-5, atol=1e-5)
    whitened = advantages[1][live[1]]
    assert abs(float(whitened.mean())) < 1e-5 and abs(float(whitened.std()) - 1) < 1e-3
