"""Exploration settings and metrics: init_scale, entropy_coef, optimal_prob, zero_std_prob.

The exact metrics are checked against a plain enumeration (itertools over every response, the
reward's plain-Python reference) of the very policy that sampled each epoch; the Monte Carlo
fallback against the exact values with stated tolerances at fixed seeds.
"""

import csv
import io
import itertools
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

import lab.exact.exploration
from lab.cli.commands import app
from lab.training.config import ConfigError, TrainConfig
from lab.exact.enumeration import ExactLimits
from lab.exact.exploration import entropy_bonus, epoch_exploration, exact_exploration, response_probs
from lab.policies.factorized import Policy, PolicyStack, policy_logits
from lab.training.records import EPOCH_METRICS
from lab.files.run_text import metrics_csv
from lab.policies.sampling import entropy, log_softmax
from lab.training.train import train
from tasks.sorting import REFERENCES, make_task

SHORT = dict(epochs=4, steps=2)


def plain_metrics(policy: Policy, prompts: list[list[int]], reward: str, group_size: int) -> tuple[float, float]:
    """optimal_prob and zero_std_prob by looping over every response of every prompt (plain Python)."""
    reference = REFERENCES[reward]
    with torch.no_grad():
        probs = torch.softmax(policy(torch.tensor(prompts)).double(), dim=-1)  # float[batch pos vocab]
    optimal, zero = [], []
    for b, prompt in enumerate(prompts):
        best = reference(prompt, sorted(prompt))
        by_value: dict[float, float] = {}
        p_opt = 0.0
        for response in itertools.product(range(policy.vocab_size), repeat=len(prompt)):
            p = math.prod(float(probs[b, q, v]) for q, v in enumerate(response))
            r = reference(prompt, list(response))
            by_value[r] = by_value.get(r, 0.0) + p
            p_opt += p if r >= best else 0.0
        optimal.append(p_opt)
        zero.append(sum(v**group_size for v in by_value.values()))
    return sum(optimal) / len(optimal), sum(zero) / len(zero)


@pytest.mark.parametrize("init_scale, reward", [(1.0, "inclusion-ordering"), (0.1, "inclusion-ordering"),
                                                (0.3, "distance")])
def test_epoch_zero_metrics_equal_a_plain_enumeration_of_the_initial_policy(init_scale, reward):
    """Epoch 0 samples from the initial policy: its optimal_prob and zero_std_prob are that policy's."""
    task = make_task()
    config = TrainConfig(seed=5, init_scale=init_scale, reward=reward, **SHORT)
    records = train(task, config)
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(5), init_scale=init_scale)
    optimal, zero = plain_metrics(policy, task.prompts.tolist(), reward, config.group_size)
    assert records.epoch_metrics["optimal_prob"][0, 0] == pytest.approx(optimal, rel=1e-5, abs=1e-12)
    assert records.epoch_metrics["zero_std_prob"][0, 0] == pytest.approx(zero, rel=1e-5, abs=1e-12)
    assert records.exploration_exact


def test_later_epochs_use_the_policy_that_sampled_them():
    """Epoch e's metrics are those of the policy after e epochs of updates (a run of e epochs' final policy)."""
    task = make_task()
    records = train(task, TrainConfig(seed=1, delta="centered", lr=0.05, **SHORT))
    shorter = train(task, TrainConfig(seed=1, delta="centered", lr=0.05, epochs=2, steps=2))
    policy = Policy(5, 3, 3)
    with torch.no_grad():
        for name, value in shorter.state.items():
            getattr(policy, name).copy_(value[0])
    optimal, zero = plain_metrics(policy, task.prompts.tolist(), "inclusion-ordering", 10)
    assert records.epoch_metrics["optimal_prob"][0, 2] == pytest.approx(optimal, rel=1e-4)
    assert records.epoch_metrics["zero_std_prob"][0, 2] == pytest.approx(zero, rel=1e-4)


def test_the_fast_path_equals_the_response_table():
    """exact_exploration (no V^L table) against response_probs times the indicator columns."""
    generator = torch.Generator().manual_seed(0)
    task = make_task(prompts=[[1, 0, 2, 2], [3, 3, 1, 0]])
    position = log_softmax(torch.randn(2, 3, 2, 4, 5, generator=generator, dtype=torch.float64))
    from lab.exact.enumeration import all_responses

    responses = all_responses(5, 4)
    table = task.reward_fn("inclusion-ordering")(task.prompts, responses.expand(2, *responses.shape)).double()
    optimum = task.optimum("inclusion-ordering").double()
    optimal, zero = exact_exploration(position, table, optimum, 6)
    probs = response_probs(position)  # float[2 3 batch n]
    assert torch.allclose(probs.sum(-1), torch.ones(2, 3, 2, dtype=torch.float64))
    plain_optimal = (probs * (table >= optimum[:, None])).sum(-1)
    plain_zero = sum((probs * (table == v)).sum(-1) ** 6 for v in table.unique())
    torch.testing.assert_close(optimal, plain_optimal, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(zero, plain_zero, rtol=1e-12, atol=1e-15)


def test_zero_std_prob_is_what_zero_std_fraction_estimates():
    """Over many seeds the sampled fraction of all-equal groups averages to the exact probability."""
    task = make_task()
    records = train(task, [TrainConfig(seed=s, epochs=1, steps=1, group_size=3, init_scale=0.5) for s in range(200)])
    sampled = records.epoch_metrics["zero_std_fraction"][:, 0].mean()
    exact = records.epoch_metrics["zero_std_prob"][:, 0].mean()
    # 600 groups, a proportion near 0.1: its standard error is about 0.012
    assert abs(sampled - exact) < 0.04 and exact > 0.01


def test_past_the_enumeration_limit_the_metrics_are_labelled_monte_carlo(monkeypatch):
    """The fallback estimates the exact values (fixed seeds; 1024 samples per prompt and epoch)."""
    task = make_task()
    config = TrainConfig(seed=2, init_scale=0.3, **SHORT)
    exact = train(task, config)
    monkeypatch.setattr(lab.exact.exploration, "LIMITS", ExactLimits(max_responses=100))
    estimated = train(task, config)
    assert exact.exploration_exact and not estimated.exploration_exact
    for name in ("optimal_prob", "zero_std_prob"):
        np.testing.assert_allclose(estimated.epoch_metrics[name], exact.epoch_metrics[name], atol=0.03)
    np.testing.assert_array_equal(estimated.epoch_metrics["mean_reward"], exact.epoch_metrics["mean_reward"])


def test_init_scale_multiplies_the_lecture_embedding_and_one_changes_nothing():
    """Same draws at every scale; only E is scaled; at 1 the run's metrics.csv is byte-identical."""
    base = Policy(5, 3, 3, generator=torch.Generator().manual_seed(7))
    half = Policy(5, 3, 3, generator=torch.Generator().manual_seed(7), init_scale=0.5)
    assert torch.equal(half.embedding, base.embedding * 0.5)
    assert torch.equal(half.encode, base.encode) and torch.equal(half.decode, base.decode)
    stack = PolicyStack(5, 3, 3, 10, [torch.Generator().manual_seed(7)] * 1, [0.5])
    assert torch.equal(stack.embedding[0], half.embedding)
    task = make_task()
    default = metrics_csv(train(task, TrainConfig(seed=3, **SHORT)))
    assert metrics_csv(train(task, TrainConfig(seed=3, init_scale=1.0, entropy_coef=0.0, **SHORT))) == default


def test_a_small_init_scale_starts_near_uniform():
    """Logits are quadratic in E: at 0.1 the mean per-position entropy is close to ln 5."""
    task = make_task()
    lecture = train(task, TrainConfig(seed=5, **SHORT)).step_metrics["entropy"][0, 0]
    flat = train(task, TrainConfig(seed=5, init_scale=0.1, **SHORT)).step_metrics["entropy"][0, 0]
    assert flat > math.log(5) - 0.01 and lecture < 1.0


def test_the_entropy_bonus_is_the_exact_entropy_and_its_gradient():
    """entropy_bonus = mean of -sum p log p over prompts and positions, differentiable by autograd."""
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(0)).double()
    prompts = make_task().prompts
    bonus = entropy_bonus(policy(prompts))
    probs = torch.softmax(policy(prompts), -1)
    assert torch.allclose(bonus, -(probs * probs.log()).sum(-1).mean())
    (grad,) = torch.autograd.grad(bonus, policy.embedding)
    eps = 1e-6
    with torch.no_grad():
        policy.embedding[0, 0] += eps
        up = entropy(policy(prompts)).mean()
        policy.embedding[0, 0] -= 2 * eps
        down = entropy(policy(prompts)).mean()
    assert float(grad[0, 0]) == pytest.approx(float((up - down) / (2 * eps)), rel=1e-6)


def test_the_entropy_bonus_trains_keeps_entropy_higher_and_enters_the_loss():
    """With a bonus, entropy ends higher than without; `loss` = pg_loss + beta kl - coef entropy; a run with
    a bonus is the same alone or batched with runs without one."""
    task = make_task()
    plain = TrainConfig(seed=4, delta="centered", lr=0.01, epochs=10, steps=5)
    bonus = plain.replace(entropy_coef=0.5)
    both = train(task, [plain, bonus])
    alone = train(task, bonus)
    entropy_end = both.step_metrics["entropy"][:, -1]
    assert entropy_end[1] > entropy_end[0] + 0.05
    np.testing.assert_allclose(both.step_metrics["loss"][1],
                               both.step_metrics["pg_loss"][1] - 0.5 * both.step_metrics["entropy"][1], rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(both.step_metrics["loss"][0], both.step_metrics["pg_loss"][0])
    for name, value in alone.state.items():
        torch.testing.assert_close(value[0], both.state[name][1], rtol=1e-4, atol=1e-5)
    unbatched_plain = train(task, plain)
    for name, value in unbatched_plain.state.items():
        torch.testing.assert_close(value[0], both.state[name][0], rtol=1e-4, atol=1e-5)
    live = policy_logits(*(v[1:] for v in (both.state["embedding"], both.state["encode"], both.state["decode"])),
                         task.prompts)
    assert float(entropy_bonus(live)[0]) > 0


@pytest.mark.parametrize("field, value, words", [
    ("init_scale", 0.0, "init_scale must be > 0"), ("init_scale", -1.0, "init_scale must be > 0"),
    ("init_scale", math.nan, "init_scale"), ("init_scale", math.inf, "finite"),
    ("entropy_coef", -0.1, "entropy_coef must be >= 0"), ("entropy_coef", math.nan, "entropy_coef"),
    ("entropy_coef", math.inf, "finite"),
])
def test_bad_exploration_settings_are_refused(field, value, words):
    with pytest.raises(ConfigError, match=words):
        TrainConfig(**{field: value})


@pytest.mark.parametrize("command, args, words", [
    ("run", ["--init-scale", "0"], "--init-scale must be > 0"),
    ("run", ["--entropy-coef", "-1"], "--entropy-coef must be >= 0"),
    ("sweep", ["--init-scale", "1", "--init-scale", "-2"], "--init-scale must be > 0"),
    ("sweep", ["--entropy-coef", "nan"], "--entropy-coef"),
])
def test_bad_exploration_options_exit_2_with_one_line(tmp_path, command, args, words):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [command, "--epochs", "2", "--out", str(out), *args])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and words in lines[0], result.output
    assert not out.exists()


def test_sweep_grid_over_init_scale_and_entropy_coef(tmp_path):
    """Both options repeat to form a grid; summary.csv and the sweep's epoch table carry their columns."""
    out = tmp_path / "s"
    result = CliRunner().invoke(app, ["sweep", "--init-scale", "0.1", "--init-scale", "1", "--entropy-coef", "0",
                                      "--entropy-coef", "0.05", "--epochs", "2", "--steps", "2", "--seeds", "2",
                                      "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    summary = list(csv.DictReader(io.StringIO((out / "summary.csv").read_text())))
    assert [(r["init_scale"], r["entropy_coef"]) for r in summary] == [
        ("0.1", "0.0"), ("0.1", "0.05"), ("1.0", "0.0"), ("1.0", "0.05")]
    epochs = pq.read_table(out / "metrics_epoch.parquet")
    assert {"config_init_scale", "config_entropy_coef", "optimal_prob", "zero_std_prob"} <= set(epochs.column_names)
    single = CliRunner().invoke(app, ["sweep", "--init-scale", "0.5", "--epochs", "2", "--steps", "2", "--seeds",
                                      "1", "--out", str(tmp_path / "one"), "--quiet"])
    assert single.exit_code == 0
    header = (tmp_path / "one" / "summary.csv").read_text().splitlines()[0]
    assert header.startswith("init_scale,")


def test_run_options_reach_the_config_and_the_glossary_lists_the_metrics(tmp_path):
    import json

    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["run", "--init-scale", "0.2", "--entropy-coef", "0.01", "--epochs", "2",
                                      "--steps", "2", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["init_scale"] == 0.2 and config["config"]["entropy_coef"] == 0.01
    assert "--init-scale 0.2" in config["rerun"] and "--entropy-coef 0.01" in config["rerun"]
    assert json.loads((out / "summary.json").read_text())["exploration_exact"] is True
    assert {"optimal_prob", "zero_std_prob"} <= set(EPOCH_METRICS)


def test_epoch_exploration_refuses_a_monte_carlo_estimate_without_generators(monkeypatch):
    monkeypatch.setattr(lab.exact.exploration, "LIMITS", ExactLimits(max_responses=10))
    task = make_task()
    with pytest.raises(ValueError, match="generator"):
        epoch_exploration(torch.zeros(1, 1, 3, 3, 5), task.prompts, task.reward_fn("distance"),
                          task.optimum("distance"), 4)


def test_the_monte_carlo_estimate_is_the_same_in_chunks_of_any_size(monkeypatch):
    """The Monte Carlo exploration is taken a few epochs at a time so that its responses and the reward's pairwise
    comparisons (P^2 per response) stay at tens of MB (`mc_epochs_at_once`); each run's generator draws the epochs'
    samples in order whatever the chunks, so the estimates are bitwise those of one chunk holding every epoch."""
    task = make_task()
    logits = torch.randn(2, 5, 3, 3, 5, generator=torch.Generator().manual_seed(4))  # float[run epoch batch pos vocab]
    args = (logits, task.prompts, task.reward_fn("inclusion-ordering"), task.optimum("inclusion-ordering"), 4)
    monkeypatch.setattr(lab.exact.exploration, "LIMITS", ExactLimits(max_responses=10))

    def estimate(chunk_entries: int) -> dict[str, torch.Tensor]:
        monkeypatch.setattr(lab.exact.exploration, "CHUNK_ENTRIES", chunk_entries)
        return epoch_exploration(*args, [torch.Generator().manual_seed(r) for r in range(2)])

    whole, one_by_one = estimate(10**12), estimate(1)
    assert lab.exact.exploration.mc_epochs_at_once(2, 3, 3, 5, 5) < 5  # the default chunks really split the epochs
    for name in ("optimal_prob", "zero_std_prob"):
        assert torch.equal(whole[name], one_by_one[name]), name


def test_a_monte_carlo_chunk_holds_the_reward_comparisons_within_the_chunk_budget():
    """A chunk of the Monte Carlo estimate counts each response's P x (V + P) entries (its tokens drawn over V
    entries and compared with the prompt's P tokens): at most `CHUNK_ENTRIES` of them, or one epoch where one epoch
    is larger. A 100-token prompt used to take every epoch at once, about 3 GB for one run of 100 epochs."""
    from lab.exact.exploration import CHUNK_ENTRIES, mc_entries, mc_epochs_at_once

    for runs, length in ((1, 8), (1, 100), (50, 20), (500, 8)):
        epochs = mc_epochs_at_once(runs, 3, length, 5, 100)
        per_epoch = mc_entries(runs, 3, length, 5)
        assert epochs == 1 or epochs * per_epoch <= CHUNK_ENTRIES
        assert 1 <= epochs <= 100 and (epochs == 100 or (epochs + 1) * per_epoch > CHUNK_ENTRIES)
    assert mc_epochs_at_once(1, 3, 100, 5, 100) == 1  # 3 x 1024 x 100 x 105 entries: one epoch already
