"""`--ipo-logps token-mean`: TRL's length-normalised IPO in the training loop, beside the summed default.

TRL's DPOTrainer with loss_type="ipo" divides each sequence's summed log-prob, the policy's and the reference's, by
its completion's token count before h (its `concatenated_forward`); Azar et al. state IPO on whole-sequence
log-probs, the lab's default. The recorded loss is recomputed here from the pairs' responses and the two policies,
with the autoregressive policy, whose responses end with EOS at different lengths.
"""

import json

import pytest
import torch
from typer.testing import CliRunner

import lab.policies as P
import lab.training.dpo as training_dpo
from lab.cli.commands import app
from lab.core.dpo import dpo_loss
from lab.training.config import ConfigError, TrainConfig
from lab.training.kinds import KINDS
from lab.training.runs import RunGroups
from lab.training.train import train
from tasks.sorting import make_task

TASK = make_task()


def ipo(**changes) -> TrainConfig:
    return TrainConfig(**{"loss": "dpo", "dpo_loss": "ipo", "kl": 0.5, "epochs": 2, "steps": 1, "lr": 0.01,
                          "policy": "autoregressive", **changes})


def captured_pairs(monkeypatch, pairs: str) -> list:
    """Each call's pairs as (winners int[run batch K pos], losers, keep float[run batch K]), in call order."""
    calls, name = [], f"{pairs}_pairs"
    original = getattr(training_dpo, name)

    def capture(*args):
        made = original(*args)
        if made.index is None:  # offline: the fixed set, winners then losers
            k = made.keep.shape[-1]
            calls.append((made.responses[..., :k, :], made.responses[..., k:, :], made.keep))
        else:  # online: indices into the epoch's groups (the first argument)
            index = made.index.unsqueeze(-1).expand(*made.index.shape, args[0].shape[-1])
            chosen = args[0].gather(-2, index)
            calls.append((chosen[..., :1, :], chosen[..., 1:, :], made.keep))
        return made

    monkeypatch.setattr(training_dpo, name, capture)
    return calls


@pytest.mark.parametrize("pairs", ["online", "offline"])
def test_trls_ipo_in_a_run_is_dpo_loss_on_each_pairs_per_token_log_ratios(pairs, monkeypatch):
    """The second epoch's loss of a `--ipo-logps token-mean` run is the mean over its kept pairs of
    ((log pi(y_w) - log pi_ref(y_w)) / |y_w| - (log pi(y_l) - log pi_ref(y_l)) / |y_l| - 1/(2 beta))^2, written out
    from the pairs' responses, the policy after one epoch and the initial one (TRL's DPOTrainer, loss_type="ipo"),
    on pairs whose lengths differ; a summed run beside it in the same batch keeps the summed form, which differs.
    Online and offline pairs."""
    offline = {"pairs": "offline", "pairs_per_prompt": 6} if pairs == "offline" else {}
    configs = [ipo(seed=1, ipo_logps="token-mean", **offline), ipo(seed=1, **offline)]
    calls = captured_pairs(monkeypatch, pairs)
    records = train(TASK, configs)
    winners, losers, keep = calls[-1]  # the second epoch's pairs (offline: the one fixed set)
    after_one = train(TASK, [c.replace(epochs=1) for c in configs]).state
    start = KINDS[configs[0].policy](TASK, configs, [torch.Generator().manual_seed(c.seed) for c in configs],
                                     RunGroups([c.reward for c in configs], torch.device("cpu")), "cpu")
    initial = {name: p.detach() for name, p in start.policy.named_parameters()}
    for r, config in enumerate(configs):
        policy, reference = P.policy_from_state(after_one, r), P.policy_from_state(initial, r)
        with torch.no_grad():
            logps = [P.sequence_log_probs(m, TASK.prompts, y[r]) for m in (policy, reference) for y in (winners, losers)]
        lengths = [P.response_lengths(policy, y[r]).to(logps[0]) for y in (winners, losers)]
        kept = keep[r].bool()
        normalised = dpo_loss(*logps, config.kl, "ipo", chosen_lengths=lengths[0], rejected_lengths=lengths[1])[0]
        summed = dpo_loss(*logps, config.kl, "ipo")[0]
        recorded = records.step_metrics["loss"][r, 1]
        if config.ipo_logps == "token-mean":
            assert bool((lengths[0] != lengths[1])[kept].any())  # the case where the two forms differ
            assert recorded == pytest.approx(float(normalised[kept].mean()), rel=1e-5)
            assert recorded != pytest.approx(float(summed[kept].mean()), rel=1e-3)
        else:
            assert recorded == pytest.approx(float(summed[kept].mean()), rel=1e-5)


@pytest.mark.crosspath
def test_a_token_mean_run_is_the_same_alone_and_in_a_batch_and_the_default_is_the_sum():
    """A `--ipo-logps token-mean` run trains the same alone and beside summed and sigmoid runs (in float64, on every
    CPU); `sum` given explicitly is the default run bitwise (one batch shape: the same computation), and only token-mean is recorded in config.json."""
    alone = train(TASK, ipo(seed=3, ipo_logps="token-mean", epochs=3, dtype="float64"))
    together = train(TASK, [ipo(seed=3, epochs=3, dtype="float64"),
                            ipo(seed=3, ipo_logps="token-mean", epochs=3, dtype="float64"),
                            ipo(seed=3, dpo_loss="sigmoid", epochs=3, dtype="float64")])
    explicit = train(TASK, ipo(seed=3, ipo_logps="sum", epochs=3, dtype="float64"))
    for name in ("loss", "chosen_logps", "kl_exact"):
        # alone and in a batch: float64, to one float32 step of the stored metric (module tests/training/test_dtype)
        torch.testing.assert_close(torch.as_tensor(alone.step_metrics[name][0]),
                                   torch.as_tensor(together.step_metrics[name][1]), rtol=2.5e-7, atol=1e-12)
        torch.testing.assert_close(torch.as_tensor(explicit.step_metrics[name][0]),
                                   torch.as_tensor(together.step_metrics[name][0]), rtol=0, atol=0)
    assert "ipo_logps" not in ipo(ipo_logps="sum").to_dict() and "ipo_logps" not in ipo(dpo_loss="sigmoid").to_dict()
    assert ipo(ipo_logps="token-mean").to_dict()["ipo_logps"] == "token-mean"
    assert ipo().ipo_logps == "sum" and TrainConfig.from_dict(ipo().to_dict()) == ipo()


@pytest.mark.parametrize("changes, words", [
    (dict(loss="naive", dpo_loss=None, ipo_logps="token-mean"), "--ipo-logps applies to --loss dpo only"),
    (dict(dpo_loss="sigmoid", ipo_logps="token-mean"), "--ipo-logps applies to --dpo-loss ipo only"),
    (dict(ipo_logps="mean"), "token-mean"),
])
def test_ipo_logps_is_refused_where_it_does_not_apply(changes, words):
    with pytest.raises(ConfigError, match=words):
        ipo(**changes)


def test_the_cli_names_records_and_refuses_ipo_logps(tmp_path):
    """`lab run --ipo-logps token-mean` names it in the default folder and config.json; `lab sweep` refuses it
    without an IPO point (exit 2, one line, nothing written) and sweeps it on the IPO points only."""
    runner = CliRunner()
    short = ["--loss", "dpo", "--kl", "0.1", "--epochs", "2", "--steps", "1", "--quiet", "--device", "cpu"]
    result = runner.invoke(app, ["run", *short, "--dpo-loss", "ipo", "--ipo-logps", "token-mean", "--policy",
                                 "autoregressive", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["ipo_logps"] == "token-mean"
    from lab.cli.run_command import default_run_name
    assert "ipo-logpstoken-mean" in default_run_name(ipo(ipo_logps="token-mean"), {})
    assert "ipo-logps" not in default_run_name(ipo(), {})
    bad = runner.invoke(app, ["sweep", *short, "--ipo-logps", "token-mean", "--seeds", "1",
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "--dpo-loss ipo only" in bad.output and len(bad.output.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists()
    result = runner.invoke(app, ["sweep", *short, "--dpo-loss", "ipo", "--dpo-loss", "sigmoid", "--ipo-logps", "sum",
                                 "--ipo-logps", "token-mean", "--seeds", "1", "--format", "csv",
                                 "--out", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    rows = (tmp_path / "sweep" / "summary.csv").read_text().splitlines()
    assert len(rows) == 4 and any(",ipo,token-mean," in row for row in rows) and any(",sigmoid,," in r for r in rows)
