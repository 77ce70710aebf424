"""The lecture's own run: `--sampler multinomial --seed 5` reproduces its committed logs.

The CS336 lecture-17 script seeds torch's global RNG with 5, initialises its model
(embedding, encode, decode) and samples every epoch with `torch.multinomial`; its
logs of the three naive-loss experiments are extracted in
tests/data/lecture_seed5_naive.json (source and format: tests/data/README.md).
The lab draws the same stream from the run's own generator. Tolerance: a logged
value has 3 printed decimals, so |lab - log| <= 0.0005 plus FLOAT_SLACK, the
float32 difference between the lab's loss and the script's unrounded one (the
lab sums in another order: fused log-probs, its own Adam; measured at most 1.6e-6
over the 3000 steps). Samples, and so mean rewards, must be identical.
"""

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.training.config import ConfigError, TrainConfig
from lab.core.deltas import compute_deltas
from lab.core.losses import compute_loss
from lab.policies.factorized import Policy, init_parameters
from lab.files.run_text import format_value
from lab.policies.sampling import response_log_probs, sample_responses
from lab.policies.sampling import SAMPLERS, Sampler, draw, sample_multinomial
from lab.training.simple_loop import simple_train
from lab.files.tables import read_table
from lab.training.train import train
from tasks.sorting import make_task

LOGS = json.loads((Path(__file__).parents[1] / "data" / "lecture_seed5_naive.json").read_text())["runs"]
MODES = ("raw", "centered", "normalized")
PRINTED = 0.0005
"""half a unit of the logs' third decimal"""
FLOAT_SLACK = 1e-5
"""float32 difference between the lab's and the script's unrounded values"""
LECTURE_RUN = TrainConfig(seed=5, sampler="multinomial")


def assert_matches_log(loss, mean_reward, log, what: str) -> None:
    """loss float[step], mean_reward float[step] (the epoch's, on each step) against the first steps of a log."""
    expected_loss, expected_reward = np.array(log["loss"][:len(loss)]), np.array(log["mean_reward"][:len(loss)])
    assert len(loss) == len(mean_reward) == len(expected_loss)
    for name, got, expected in (("loss", loss, expected_loss), ("mean reward", mean_reward, expected_reward)):
        error = np.abs(np.asarray(got, dtype=np.float64) - expected)
        worst = int(error.argmax())
        assert error[worst] <= PRINTED + FLOAT_SLACK, (
            f"{what}: {name} at epoch {worst // 10}, step {worst % 10} is {got[worst]:.6f}, the log says "
            f"{expected[worst]:.3f}")


def logged_responses(log, epoch: int) -> np.ndarray:
    """int[batch trial pos] the script printed at step 0 of `epoch`."""
    tokens = [[int(c) for c in response] for response in log["responses"][epoch].split()]
    return np.array(tokens).reshape(3, 10, 3)


@pytest.fixture(scope="module")
def lecture_runs():
    """The three lecture runs trained together, with an inverse-CDF run between them, every epoch's samples kept."""
    configs = [LECTURE_RUN.replace(delta=MODES[0], sample_every=1), TrainConfig(seed=5, sample_every=1),
               *(LECTURE_RUN.replace(delta=mode, sample_every=1) for mode in MODES[1:])]
    return train(make_task(), configs), [0, 2, 3]


@pytest.mark.parametrize("mode", MODES)
def test_lab_run_multinomial_seed_5_reproduces_the_lectures_logged_loss_and_reward_at_every_step(tmp_path, mode):
    """`lab run --sampler multinomial --seed 5 --delta <mode>` at the lecture's defaults (naive loss) gives, on
    every one of the 1000 steps, the loss and mean reward the lecture's script printed (to its 3 decimals)."""
    out = tmp_path / mode
    result = CliRunner().invoke(app, ["run", "--sampler", "multinomial", "--seed", "5", "--delta", mode,
                                      "--device", "cpu", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO((out / "metrics.csv").read_text())))
    assert len(rows) == len(LOGS[mode]["loss"]) == 1000
    assert_matches_log([float(r["loss"]) for r in rows], [float(r["mean_reward"]) for r in rows], LOGS[mode],
                       f"lab run --delta {mode}")
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["sampler"] == "multinomial" and "--sampler multinomial" in config["rerun"]


@pytest.mark.parametrize("mode", MODES)
def test_inside_a_sweep_the_lecture_runs_draw_every_epochs_logged_responses(lecture_runs, mode):
    """Trained together (and beside a run of the lab's own sampler), each lecture run draws exactly the
    responses the script printed in every one of its 100 epochs, and matches the logged losses and rewards."""
    records, runs = lecture_runs
    run = runs[MODES.index(mode)]
    for epoch, snap in enumerate(records.samples):
        assert snap.epoch == epoch
        np.testing.assert_array_equal(snap.responses[run], logged_responses(LOGS[mode], epoch),
                                      err_msg=f"{mode}, epoch {epoch}")
    assert_matches_log(records.step_metrics["loss"][run], np.repeat(records.epoch_metrics["mean_reward"][run], 10),
                       LOGS[mode], f"{mode} inside a sweep")


@pytest.mark.parametrize("mode", MODES)
def test_the_plain_loop_with_the_lectures_draw_is_the_lectures_run_too(mode):
    """`lab.training.simple_loop.simple_train` honours `sampler`: with the lecture's draw and seed 5 it samples every
    epoch's logged responses and reproduces every logged loss and mean reward."""
    run = simple_train(make_task(), LECTURE_RUN.replace(delta=mode))
    for epoch in range(100):
        np.testing.assert_array_equal(run.responses[epoch].numpy(), logged_responses(LOGS[mode], epoch))
    assert_matches_log(run.losses.flatten().numpy(), run.rewards.mean(dim=(1, 2)).repeat_interleave(10).numpy(),
                       LOGS[mode], f"simple_train, {mode}")


def test_a_different_seed_or_the_labs_sampler_is_not_the_lectures_run(lecture_runs):
    """Mutants: the lab's inverse-CDF draw with seed 5, and the multinomial draw with seed 6, both miss the log."""
    records, _ = lecture_runs
    first = logged_responses(LOGS["raw"], 0)
    assert not np.array_equal(records.samples[0].responses[1], first)  # run 1: inverse-cdf, seed 5
    other_seed = train(make_task(), LECTURE_RUN.replace(seed=6, epochs=1, steps=1, sample_every=1))
    assert not np.array_equal(other_seed.samples[0].responses[0], first)


def test_the_lab_initialises_the_parameters_in_the_scripts_order():
    """The script builds nn.Embedding (N(0, 1)), then randn encode and decode matrices divided by sqrt(dim), all
    from one stream; the lab draws the same from the run's generator. The lab multiplies by 1/sqrt(dim) where
    the script divides by sqrt(dim): equal up to float32 rounding (one unit in the last place)."""
    generator = torch.Generator().manual_seed(5)
    embedding = torch.nn.init.normal_(torch.empty(5, 10), generator=generator)  # what nn.Embedding's init calls
    encode = torch.randn(3, 10, 10, generator=generator) / math.sqrt(10)
    decode = torch.randn(3, 10, 10, generator=generator) / math.sqrt(10)
    lab = init_parameters(5, 3, 3, 10, torch.Generator().manual_seed(5))
    assert torch.equal(lab["embedding"], embedding)
    torch.testing.assert_close(lab["encode"], encode, rtol=1.2e-7, atol=0)
    torch.testing.assert_close(lab["decode"], decode, rtol=1.2e-7, atol=0)
    # drawn in another order (decode first), the matrices would be different numbers altogether
    swapped = torch.Generator().manual_seed(5)
    torch.randn(5, 10, generator=swapped)
    assert not torch.allclose(torch.randn(3, 10, 10, generator=swapped) / math.sqrt(10), decode)


def test_the_multinomial_draw_is_the_scripts_call_and_a_run_draws_the_same_alone_or_batched():
    """One torch.multinomial over the (batch pos) rows, G per row, reshaped to batch trial pos; in a list of
    generators each run draws from its own, as it would alone."""
    logits = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0))  # float[run batch pos vocab]
    expected = [torch.multinomial(torch.softmax(run.reshape(12, 5), dim=-1), 7, replacement=True,
                                  generator=torch.Generator().manual_seed(seed)).reshape(3, 4, 7).permute(0, 2, 1)
                for seed, run in zip((11, 12), logits)]
    batched = sample_multinomial(logits, 7, [torch.Generator().manual_seed(s) for s in (11, 12)])
    assert batched.shape == (2, 3, 7, 4)
    for run in range(2):
        assert torch.equal(batched[run], expected[run])
        assert torch.equal(sample_multinomial(logits[run], 7, torch.Generator().manual_seed(11 + run)), expected[run])
    with pytest.raises(ValueError, match="3 generators for 2 runs"):
        sample_multinomial(logits, 7, [torch.Generator()] * 3)


@pytest.mark.parametrize("sampler", list(Sampler))
def test_both_samplers_draw_each_position_from_its_softmax(sampler):
    """Both draws sample y_q ~ softmax(logits_q) independently: 40000 draws per (prompt, position) match the
    probabilities within 5 standard errors. A mutant that mixes up trial and position axes fails."""
    logits = 2 * torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1))  # float[batch pos vocab]
    probs = torch.softmax(logits.double(), dim=-1)
    trials = 40_000

    def frequencies(responses):  # int[batch trial pos] -> float[batch pos vocab]
        return torch.nn.functional.one_hot(responses, 5).double().mean(dim=1)

    responses = draw(sampler, logits, trials, torch.Generator().manual_seed(2))
    assert responses.shape == (2, trials, 3)
    bound = 5 * torch.sqrt(probs * (1 - probs) / trials) + 1e-12
    assert ((frequencies(responses) - probs).abs() <= bound).all()
    mixed_up = responses.reshape(2, 3, trials).transpose(1, 2)  # the mutant: a reshape where a transpose belongs
    assert not ((frequencies(mixed_up) - probs).abs() <= bound).all()


def test_the_default_sampler_is_the_labs_and_unknown_ones_are_refused():
    """Every existing run keeps its inverse-CDF draw; a bad sampler name is a ConfigError naming the choices."""
    assert TrainConfig().sampler is Sampler.inverse_cdf and SAMPLERS[Sampler.inverse_cdf] is sample_responses
    with pytest.raises(ConfigError, match="unknown sampler 'gumbel'; choose one of: inverse-cdf, multinomial"):
        TrainConfig(sampler="gumbel")
    assert TrainConfig.from_dict(LECTURE_RUN.to_dict()) == LECTURE_RUN
    for command in ("run", "sweep"):
        result = CliRunner().invoke(app, [command, "--sampler", "gumbel", "--quiet"])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and "--sampler gumbel is not a choice; choose one of: inverse-cdf, multinomial" in lines[0], \
            result.output


def test_lab_sweep_sampler_applies_to_every_run_and_its_seed_5_is_the_lecture_run(tmp_path):
    """`lab sweep --sampler multinomial`: seed 5 of a 6-seed sweep equals `lab run --sampler multinomial --seed 5`
    (short runs: the first two epochs of the logged run)."""
    short = ["--epochs", "2", "--delta", "centered", "--device", "cpu", "--quiet", "--sampler", "multinomial"]
    runner = CliRunner()
    result = runner.invoke(app, ["sweep", *short, "--seeds", "6", "--out", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["run", *short, "--seed", "5", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    steps = read_table(tmp_path / "sweep" / "metrics_step.parquet")
    epochs = read_table(tmp_path / "sweep" / "metrics_epoch.parquet")
    run_rows = list(csv.DictReader(io.StringIO((tmp_path / "run" / "metrics.csv").read_text())))
    assert ([format_value(v) for v in epochs["mean_reward"][epochs["seed"] == 5]]
            == [r["mean_reward"] for r in run_rows if r["inner_step"] == "0"])
    np.testing.assert_allclose(steps["loss"][steps["seed"] == 5], [float(r["loss"]) for r in run_rows],
                               rtol=1e-5, atol=1e-6)
    assert_matches_log([float(r["loss"]) for r in run_rows], [float(r["mean_reward"]) for r in run_rows],
                       LOGS["centered"], "2 epochs")
    assert json.loads((tmp_path / "sweep" / "config.json").read_text())["base"]["sampler"] == "multinomial"


def ratio_bug_cosine(delta: str) -> float:
    """Cosine between the gradients of the script's unclipped loss, -mean((log_probs / old_log_probs) * delta),
    and of the naive loss, at theta = theta_old on the lecture's first batch (seed 5, its multinomial draw)."""
    task, generator = make_task(), torch.Generator().manual_seed(5)
    policy = Policy(task.vocab_size, 3, task.response_length, 10, generator)
    responses = draw("multinomial", policy(task.prompts).detach(), 10, generator)
    deltas = compute_deltas(task.reward_fn("inclusion-ordering")(task.prompts, responses), delta)
    old = response_log_probs(policy(task.prompts), responses).detach()

    def gradient(loss_of) -> torch.Tensor:
        policy.zero_grad()
        loss_of(response_log_probs(policy(task.prompts), responses)).backward()
        return torch.cat([p.grad.flatten() for p in policy.parameters()])

    naive = gradient(lambda lp: compute_loss(lp, deltas, "naive"))
    buggy = gradient(lambda lp: -((lp / old) * deltas.unsqueeze(-1)).mean())
    correct = gradient(lambda lp: compute_loss(lp, deltas, "unclipped", old))
    assert torch.allclose(correct, naive, atol=1e-7)  # exp(lp - old) has the naive gradient at theta_old
    assert torch.equal(old / old, torch.ones_like(old))  # the buggy ratio is 1 there too: the value hides it
    return torch.cosine_similarity(buggy, naive, dim=0).item()


def test_the_lecture_scripts_ratio_log_probs_over_old_log_probs_points_against_the_naive_gradient():
    """docs/lecture.md, the lecture script's defects: its unclipped and clipped losses use log_probs / old_log_probs. At
    theta = theta_old that ratio is 1 but its gradient is grad log_prob / old_log_prob: every token's naive gradient
    with its sign flipped (log-probs are negative) and scaled by 1 / |old log-prob|. On the lecture's first batch
    the cosine with the naive gradient is -0.99 for centered and normalized deltas (-0.41 for raw ones)."""
    cosines = {delta: ratio_bug_cosine(delta) for delta in ("centered", "normalized", "raw")}
    print("cosine(script's ratio gradient, naive gradient):", {k: round(v, 3) for k, v in cosines.items()})
    assert cosines["centered"] == pytest.approx(-0.991, abs=1e-3)
    assert cosines["normalized"] == pytest.approx(-0.991, abs=1e-3)
    assert cosines["raw"] == pytest.approx(-0.411, abs=1e-3)


def test_reproduce_marks_the_lectures_own_run_and_keeps_it_out_of_the_seeds(tmp_path):
    """`lab reproduce`: each setting's 'seed 5, the lecture's draw' run is seed 5 with the multinomial sampler, is
    not among the seeds that make the mean and interval, and is the value RESULTS.md shows in that column."""
    from lab.experiments.reproduce import EXPERIMENTS, LECTURE_SEED, run_reproduction, write_figures

    experiments = EXPERIMENTS[:1]  # the lecture's three experiments
    reproduction = run_reproduction(seeds=2, base=TrainConfig(epochs=3, steps=2), experiments=experiments,
                                    critic=False)
    write_figures(reproduction, tmp_path, experiments)
    table = (tmp_path / "RESULTS.md").read_text().split("## The lecture's three experiments")[1]
    final = reproduction.records.final("mean_reward")
    for i, mode in enumerate(MODES):
        run = reproduction.lecture_runs["lecture_deltas", i]
        config = reproduction.records.configs[run]
        assert (config.seed, config.sampler, config.delta.value) == (LECTURE_SEED, Sampler.multinomial, mode)
        assert run not in reproduction.runs["lecture_deltas", i]
        assert all(reproduction.records.configs[r].sampler is Sampler.inverse_cdf
                   for r in reproduction.runs["lecture_deltas", i])
        assert f"| delta={mode} | " in table and f" | {final[run]:.3f} | " in table.split(f"| delta={mode} | ")[1]
    assert (tmp_path / "lecture_deltas.png").exists()
