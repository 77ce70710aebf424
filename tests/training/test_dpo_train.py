"""DPO in the training loop (`--loss dpo`): its pairs, its loss at the first step, its metrics, the CLI.

At an epoch's first step of the first epoch the policy is its own reference, so every kept pair has
h = 0: the sigmoid loss is exactly log 2 and the IPO loss (1/(2 beta))^2, and every implicit reward is 0.
"""

import csv
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.training.config import ConfigError, TrainConfig, check_batchable
from lab.training.records import DPO_STEP_METRICS, OPTIMUM_METRICS
from lab.training.train import train
from tasks.sorting import make_task

TASK = make_task()
SHORT = dict(epochs=4, steps=3)


def dpo(**changes) -> TrainConfig:
    return TrainConfig(loss="dpo", **{"kl": 0.1, **SHORT, **changes})


@pytest.mark.parametrize("changes", [{}, {"pairs": "offline", "pairs_per_prompt": 8}, {"preference": "bradley-terry"},
                                     {"dpo_loss": "ipo"}, {"policy": "autoregressive"}])
def test_a_dpo_run_records_trls_metrics_and_starts_at_h_zero(changes):
    records = train(TASK, dpo(**changes))
    steps = records.step_metrics
    assert set(DPO_STEP_METRICS) <= set(steps) and set(OPTIMUM_METRICS) <= set(records.epoch_metrics)
    first_kept = steps["pair_fraction"][0, 0] > 0
    if first_kept:
        expected = 25.0 if changes.get("dpo_loss") == "ipo" else math.log(2.0)  # (1/(2 * 0.1))^2 or log 2
        assert steps["loss"][0, 0] == pytest.approx(expected, rel=1e-6)
        assert steps["chosen_rewards"][0, 0] == 0.0 and steps["rejected_rewards"][0, 0] == 0.0
    kept = steps["pair_fraction"][0] > 0
    assert np.all((steps["reward_accuracy"][0][kept] >= 0) & (steps["reward_accuracy"][0][kept] <= 1))
    margin = steps["chosen_rewards"][0] - steps["rejected_rewards"][0]
    np.testing.assert_allclose(steps["reward_margin"][0][kept], margin[kept], rtol=1e-4, atol=1e-6)
    gap = records.epoch_metrics["objective_gap"][0]
    assert np.all(gap >= -1e-6)  # J_beta(pi*) is the maximum (claim 26); the values: the test against lab.exact below


def test_offline_pairs_are_one_fixed_set():
    steps = train(TASK, dpo(pairs="offline", pairs_per_prompt=8, reward="inclusion-ordering")).step_metrics
    assert len(set(steps["pair_fraction"][0].tolist())) == 1  # the same pairs at every step of every epoch


def test_a_run_is_the_same_alone_and_in_a_batch():
    alone = train(TASK, dpo(seed=3, preference="bradley-terry"))
    together = train(TASK, [dpo(seed=1), dpo(seed=3, preference="bradley-terry", dpo_loss="ipo"),
                            dpo(seed=3, preference="bradley-terry")])
    for name in ("loss", "chosen_logps", "kl_exact"):
        np.testing.assert_array_equal(alone.step_metrics[name][0], together.step_metrics[name][2])


def test_dpo_and_the_other_losses_train_in_separate_batches():
    with pytest.raises(ConfigError, match="must share pairs"):
        check_batchable([dpo(), TrainConfig(**SHORT)])


def test_online_dpo_with_a_small_beta_ends_closer_to_pi_star():
    """The lecture's setting (seed 5, inclusion-ordering reward), beta = 0.05, 100 epochs: KL(pi_theta || pi*)
    after the last epoch is below its value after the first, for each of two seeds."""
    records = train(TASK, [dpo(kl=0.05, epochs=100, steps=10, seed=s) for s in (0, 2)])
    kl = records.epoch_metrics["kl_to_optimum"]
    assert np.all(kl[:, -1] < 0.75 * kl[:, 0])


@pytest.mark.parametrize("args, words", [
    (["--loss", "dpo", "--kl", "0"], "--kl > 0"),
    (["--loss", "dpo", "--kl", "0.1", "--pairs", "sideways"], "online"),
    (["--loss", "dpo", "--kl", "0.1", "--preference", "best"], "bradley-terry"),
    (["--loss", "dpo", "--kl", "0.1", "--dpo-loss", "hinge"], "ipo"),
    (["--pairs", "offline"], "--loss dpo only"),
    (["--loss", "dpo", "--kl", "0.1", "--pairs-per-prompt", "4"], "--pairs offline only"),
    (["--loss", "dpo", "--kl", "0.1", "--delta", "gae"], "--delta gae"),
    (["--loss", "dpo", "--kl", "0.1", "--gae-lambda", "0.5"], "--loss dpo does not use"),
])
def test_bad_dpo_options_exit_2_with_one_line(tmp_path, args, words):
    result = CliRunner().invoke(app, ["run", *args, "--quiet", "--device", "cpu", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert words in result.output
    assert not (tmp_path / "o").exists()


def test_lab_run_writes_the_dpo_columns_and_lab_sweep_runs_both_pair_sources(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["run", "--loss", "dpo", "--kl", "0.1", "--epochs", "3", "--steps", "2", "--quiet",
                                 "--device", "cpu", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert set(DPO_STEP_METRICS) | set(OPTIMUM_METRICS) <= set(header)
    # every value sits under its own name: the gap is beta times the KL to pi*, the DPO loss is its pg_loss
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        assert float(row["objective_gap"]) == pytest.approx(0.1 * float(row["kl_to_optimum"]), rel=1e-5)
        assert row["loss"] == row["pg_loss"] and 0 <= float(row["pair_fraction"]) <= 1
    assert float(rows[0]["loss"]) == pytest.approx(math.log(2.0), rel=1e-6)  # h = 0 at the first step
    result = runner.invoke(app, ["sweep", "--loss", "dpo", "--kl", "0.1", "--pairs", "online", "--pairs", "offline",
                                 "--pairs-per-prompt", "4", "--seeds", "2", "--epochs", "3", "--steps", "2",
                                 "--format", "csv", "--quiet", "--device", "cpu", "--out", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    summary = (tmp_path / "sweep" / "summary.csv").read_text()
    assert ",online," in summary and ",offline," in summary
    assert "kl_to_optimum" in (tmp_path / "sweep" / "metrics_epoch.csv").read_text().splitlines()[0]


def test_each_kinds_exact_distribution_is_the_enumeration_of_the_policy_it_samples_from():
    """The factorised kind's distribution (its sampling logits' log-softmaxes, lab.exact.distributions.Factorized)
    has, response by response, the log-probs lab.exact.varlen enumerates from the parameters, to float32
    rounding of the logits; the autoregressive kind's is that enumeration. At T = 1 and T = 0.7."""
    import torch

    from lab.exact import varlen
    from lab.training.kinds import KINDS
    from lab.training.runs import RunGroups

    for policy in ("factorized", "autoregressive"):
        for temperature in (1.0, 0.7):
            length = {"max_length": 4} if policy == "autoregressive" else {}
            configs = [TrainConfig(policy=policy, seed=s, temperature=temperature, **length) for s in (0, 1)]
            kind = KINDS[configs[0].policy](TASK, configs, [torch.Generator().manual_seed(s) for s in (0, 1)],
                                            RunGroups([c.reward for c in configs], torch.device("cpu")), "cpu")
            fast = kind.exact_distribution().log_probs()
            exact = varlen.all_log_probs(kind.tempered_policy(), kind.prompts, torch.float64).detach()
            assert fast.dtype == torch.float64 and fast.shape == exact.shape
            tolerance = 2e-5 if policy == "factorized" else 0.0  # float32 logits; log-probs down to about -30
            assert float((fast - exact).abs().max()) <= tolerance


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_the_recorded_distance_to_pi_star_is_lab_exacts(policy):
    """The loop's kl_to_optimum, objective_exact and objective_gap after the last epoch against lab.exact.optimum's
    table formulas on the trained and the initial policy, run by run (two betas, one of them a sweep's second run)."""
    import torch

    import lab.exact.optimum as O
    import lab.policies as P
    from lab.training.kinds import KINDS
    from lab.training.runs import RunGroups

    length = {"max_length": 4} if policy == "autoregressive" else {}
    configs = [dpo(seed=s, kl=beta, policy=policy, **length) for s, beta in ((0, 0.1), (1, 0.3))]
    records = train(TASK, configs)
    start = KINDS[configs[0].policy](TASK, configs, [torch.Generator().manual_seed(c.seed) for c in configs],
                                     RunGroups([c.reward for c in configs], torch.device("cpu")), "cpu")
    initial = {name: p.detach() for name, p in start.policy.named_parameters()}  # the stack train() starts from
    for r, config in enumerate(configs):
        policy_r, reference = P.policy_from_state(records.state, r), P.policy_from_state(initial, r)
        expected = dict(kl_to_optimum=O.kl_to_optimum, objective_gap=O.objective_gap,
                        objective_exact=O.policy_objective)
        for name, formula in expected.items():
            value = float(formula(policy_r, reference, TASK.prompts, config.reward, config.kl).detach().mean())
            assert records.epoch_metrics[name][r, -1] == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_a_sweep_of_dpo_and_grpo_keeps_every_metric(tmp_path):
    """Mixed losses train as separate batches; the merged records hold the DPO columns (empty for GRPO runs)."""
    from lab.experiments.sweep import run_sweep

    records = run_sweep(TASK, [TrainConfig(kl=0.1, **SHORT), dpo(), dpo(pairs="offline", pairs_per_prompt=4)])
    assert np.all(np.isnan(records.step_metrics["chosen_rewards"][0]))
    assert not np.all(np.isnan(records.step_metrics["loss"][1:]))
    assert np.all(np.isnan(records.epoch_metrics["kl_to_optimum"][0]))
    assert np.all(np.isfinite(records.epoch_metrics["kl_to_optimum"][1:]))
    result = CliRunner().invoke(app, ["sweep", "--loss", "clipped", "--loss", "dpo", "--kl", "0.1", "--seeds", "1",
                                      "--epochs", "2", "--steps", "1", "--format", "csv", "--quiet", "--device", "cpu",
                                      "--out", str(tmp_path / "mixed")])
    assert result.exit_code == 0, result.output


def test_the_loops_pair_loss_and_metrics_are_dpo_loss_on_the_kept_pairs():
    """lab.training.dpo.pair_loss (the mean over kept pairs) and pair_metrics (an epoch's steps at once, the six
    means in one reduction) against lab.core.dpo.dpo_loss pair by pair and TRL's definitions, for a sigmoid and
    an IPO run with different betas, and a run whose pairs are all dropped (loss 0, metrics NaN); the loop's
    EpochPairLoss is pair_loss bitwise, value and gradient."""
    import torch

    from lab.core.dpo import dpo_loss
    from lab.training.dpo import EpochPairLoss, pair_loss, pair_metrics
    from lab.training.runs import RunGroups

    g = torch.Generator().manual_seed(0)
    steps, runs, batch, k = 2, 3, 4, 3
    logps = -5 * torch.rand(steps, runs, batch, 2 * k, generator=g, dtype=torch.float64)
    ref_logps = -5 * torch.rand(runs, batch, 2 * k, generator=g, dtype=torch.float64)
    keep = (torch.rand(runs, batch, k, generator=g) < 0.6).to(torch.float64)
    keep[2] = 0
    beta, loss_types = torch.tensor([0.1, 0.5, 0.2], dtype=torch.float64), ["sigmoid", "ipo", "sigmoid"]
    groups = RunGroups(loss_types, torch.device("cpu"))
    metrics = pair_metrics(logps, ref_logps, keep, beta)
    for s in range(steps):
        loss = pair_loss(logps[s], ref_logps, keep, groups, beta)
        logps_s = logps[s].clone().requires_grad_()  # the loop's fast path: bitwise the plain one, and its gradient
        fast = EpochPairLoss.of(ref_logps, keep, groups, beta)(logps_s)
        plain_grad = torch.autograd.grad(pair_loss(logps_s, ref_logps, keep, groups, beta).sum(), logps_s)[0]
        assert torch.equal(fast, loss) and torch.equal(torch.autograd.grad(fast.sum(), logps_s)[0], plain_grad)
        for r in range(runs):
            kept = keep[r].bool()
            c, rej, rc, rr = logps[s, r, ..., :k], logps[s, r, ..., k:], ref_logps[r, ..., :k], ref_logps[r, ..., k:]
            losses, chosen_rewards, rejected_rewards = dpo_loss(c, rej, rc, rr, float(beta[r]), loss_types[r])
            if not kept.any():
                assert float(loss[r]) == 0.0 and all(np.isnan(float(v[s, r])) for name, v in metrics.items()
                                                      if name != "pair_fraction")
                continue
            expected = dict(chosen_rewards=chosen_rewards[kept].mean(), rejected_rewards=rejected_rewards[kept].mean(),
                            reward_accuracy=(chosen_rewards > rejected_rewards)[kept].double().mean(),
                            reward_margin=(chosen_rewards - rejected_rewards)[kept].mean(),
                            chosen_logps=c[kept].mean(), rejected_logps=rej[kept].mean(),
                            pair_fraction=kept.double().mean())
            assert float(loss[r]) == pytest.approx(float(losses[kept].mean()), rel=1e-12)
            for name, value in expected.items():
                assert float(metrics[name][s, r]) == pytest.approx(float(value), rel=1e-12, abs=1e-15), name


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_a_dpo_run_records_no_clip_fraction(policy):
    """DPO's loss has no ratio clip and no deltas: its clip fractions are empty, not counted against the deltas
    of a GRPO mode it never uses; its ratios, KL and entropy are recorded as for every loss."""
    steps = train(TASK, [dpo(seed=s, policy=policy) for s in (0, 1)]).step_metrics
    for name in ("clip_fraction", "clip_low_fraction", "clip_high_fraction"):
        assert np.isnan(steps[name]).all(), name
    for name in ("ratio_mean", "kl", "entropy"):
        assert np.isfinite(steps[name]).all(), name
    grpo = train(TASK, TrainConfig(kl=0.1, loss="clipped", **SHORT)).step_metrics
    assert np.isfinite(grpo["clip_fraction"]).all()


@pytest.mark.parametrize("pairs", [{}, {"pairs": "offline", "pairs_per_prompt": 3}, {"temperature": 0.7}])
def test_a_factorised_dpo_step_differentiates_only_its_pairs_and_records_the_same(pairs, monkeypatch):
    """The factorised policy's DPO step runs its forward pass on the pairs only (its step metrics come from
    the kept log-softmaxes): the same records, bitwise, as the path through the groups' forward pass
    (online: the pairs a gather from it; offline: a second pass on the fixed set), also at a temperature.
    That the metrics read off the log-softmaxes are the recorded ones of before is
    tests/training/test_metrics.py's block test and tests/test_pinned_outputs.py's pinned runs."""
    from lab.training.kinds import Factorized
    from lab.training.metrics import FIXED_LENGTH_METRICS

    configs = [dpo(seed=s, **pairs) for s in (0, 1)] + [dpo(seed=2, preference="bradley-terry", dpo_loss="ipo",
                                                              **pairs)]
    fast = train(TASK, configs)
    monkeypatch.setattr(Factorized, "step_metrics", FIXED_LENGTH_METRICS._replace(from_log_softmax=False))
    plain = train(TASK, configs)
    for table in ("step_metrics", "epoch_metrics"):
        for name, values in getattr(plain, table).items():
            np.testing.assert_array_equal(getattr(fast, table)[name], values, err_msg=name)
    assert np.nanmax(fast.step_metrics["reward_margin"]) > 0  # the runs trained: their pairs moved apart


def test_a_dpo_runs_samples_mark_each_groups_pair_instead_of_deltas():
    """samples.txt of a DPO run shows no deltas (DPO uses none): online, each group's pair is marked, the
    chosen response the group's highest reward and the rejected one its lowest (argmax preference), and a
    group whose rewards are all equal has no pair; offline, the groups are not the pairs and nothing is marked."""
    from lab.files.run_text import format_value, response_text, samples_text

    records = train(TASK, dpo(epochs=6, sample_every=1))
    text = samples_text(records)
    assert "delta" not in text
    marked = 0
    for snap in records.samples:
        for b in range(len(records.prompts)):
            rewards, (chosen, rejected) = snap.rewards[0, b], snap.pairs[0, b]
            if rewards.max() == rewards.min():
                assert chosen == rejected == -1
                continue
            assert rewards[chosen] == rewards.max() and rewards[rejected] == rewards.min()
            for t, role in ((chosen, "chosen"), (rejected, "rejected")):  # the text marks that response
                line = (f"  response {response_text(snap.responses[0, b, t].tolist(), None)}  "
                        f"reward {format_value(rewards[t])}  {role}")
                assert line in text.splitlines(), line
            marked += 1
    assert marked > 0 and text.count("  chosen") == text.count("  rejected") == marked
    bradley_terry = train(TASK, dpo(epochs=6, sample_every=1, preference="bradley-terry"))
    for snap in bradley_terry.samples:  # the drawn winner may be the lower reward: the pair is still (hi, lo)
        for rewards, pair in zip(snap.rewards[0], snap.pairs[0]):
            if rewards.max() > rewards.min():
                assert {rewards[pair[0]], rewards[pair[1]]} == {rewards.max(), rewards.min()}
    offline = samples_text(train(TASK, dpo(pairs="offline", pairs_per_prompt=2)))
    assert "delta" not in offline and "chosen" not in offline and "rejected" not in offline
    assert "  delta " in samples_text(train(TASK, TrainConfig(kl=0.1, **SHORT)))  # GRPO keeps its deltas


def test_reward_accuracy_is_zero_where_the_policy_is_the_reference():
    """TRL's reward accuracy counts a pair right only when chosen_rewards > rejected_rewards, strictly: at the
    first step, where pi = pi_ref, every implicit reward is 0 and h = 0, so the accuracy is 0 (not 1, as `>=` would
    give), and it is 1 once the chosen response's log-ratio is above the rejected one's."""
    import torch

    from lab.training.dpo import pair_metrics

    ref_logps = torch.tensor([[[-1.0, -2.0, -3.0, -1.5]]])  # float[run batch 2K], K = 2
    keep, beta = torch.ones(1, 1, 2), torch.tensor([0.5])
    assert float(pair_metrics(ref_logps, ref_logps, keep, beta)["reward_accuracy"][0]) == 0.0
    ahead = ref_logps + torch.tensor([[[0.1, 0.1, 0.0, 0.0]]])
    assert float(pair_metrics(ahead, ref_logps, keep, beta)["reward_accuracy"][0]) == 1.0


def test_a_dpo_run_with_no_pair_to_train_on_says_so(tmp_path, monkeypatch):
    """Under exact-match at the lecture's start every group's rewards are 0: no online pair counts at any step, the
    loss is 0 and nothing trains; the run used to end without a word. A run with pairs prints no such warning."""
    from typer.testing import CliRunner

    from lab.cli.commands import app

    monkeypatch.chdir(tmp_path)
    short = ["--loss", "dpo", "--kl", "0.1", "--epochs", "3", "--steps", "2"]
    idle = CliRunner().invoke(app, ["run", *short, "--reward", "exact-match", "--out", "idle"])
    assert idle.exit_code == 0 and "no DPO pair counted at any step" in idle.output
    trained = CliRunner().invoke(app, ["run", *short, "--out", "trained"])
    assert trained.exit_code == 0 and "no DPO pair" not in trained.output
