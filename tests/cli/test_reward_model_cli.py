"""`lab reward-model` and `--reward learned:PATH`: a reward model fitted from the CLI, then trained against.

    lab reward-model -> RM/ (config.json, model.pt, metrics.csv, summary.json, pairs.csv, the mark)
    lab run / lab sweep --reward learned:RM -> the proxy's scores train the run; gold_reward_exact,
        proxy_reward_exact, kl_initial_exact and d = sqrt(KL) recorded every epoch, exactly
A damaged folder, another command's folder or a model that does not fit the run is refused with one line, exit 2,
before anything is written.
"""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.exact import varlen
from lab.files.output_folders import write_marker
from lab.files.reward_model_folder import load_learned_reward, read_reward_model
from lab.files.tables import read_table
from lab.policies import make_policy, policy_from_state
from lab.training.reward_model import exact_measures
from tests.cli.cli_tools import one_line

FIT = ["--init-scale", "0.1", "--size", "small", "--pairs-per-prompt", "32", "--steps", "150", "--quiet"]
SHORT = ["--init-scale", "0.1", "--epochs", "6", "--steps", "2", "--delta", "centered", "--loss", "clipped",
         "--quiet", "--device", "cpu"]


def lab(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A reward model of each policy's response space."""
    folder = tmp_path_factory.mktemp("reward-models")
    for policy in ("factorized", "autoregressive"):
        result = lab("reward-model", *FIT, "--policy", policy, "--out", folder / policy)
        assert result.exit_code == 0, result.output
    return folder


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_the_folder_holds_the_model_its_config_its_metrics_and_the_mark(models):
    rm = models / "factorized"
    assert sorted(p.name for p in rm.iterdir()) == [".lab-output", "config.json", "metrics.csv", "model.pt",
                                                    "pairs.csv", "summary.json"]
    config, summary = json.loads((rm / "config.json").read_text()), json.loads((rm / "summary.json").read_text())
    assert config["command"] == "reward-model" and config["gold_reward"] == "inclusion-ordering"
    assert config["response_space"] == {"policy": "factorized", "response_length": 3, "eos": None, "responses": 125}
    assert config["parameters"] == summary["parameters"] == 140 and summary["pairs"] == 3 * 32
    steps = rows(rm / "metrics.csv")
    assert len(steps) == 150 and list(steps[0]) == ["step", "loss", "accuracy", "margin"]
    assert float(steps[-1]["loss"]) < float(steps[0]["loss"])  # the fit went down
    assert len(rows(rm / "pairs.csv")) == 3 * 32


def test_the_model_read_back_scores_as_its_summary_says(models):
    """The exact preference accuracy and correlation recomputed from model.pt and the drawing policy: the same."""
    rm = models / "factorized"
    learned = load_learned_reward(read_reward_model(rm))
    summary = json.loads((rm / "summary.json").read_text())
    pi_0 = make_policy("factorized", 5, 3, 3, 10, torch.Generator().manual_seed(5), 0.1)  # seed 5: lab's default
    prompts = torch.tensor(json.loads((rm / "config.json").read_text())["task"]["prompts"])
    with torch.no_grad():
        probs = varlen.all_probs(pi_0, prompts, torch.float64)
        scores = learned.model(prompts.unsqueeze(1), learned.responses.unsqueeze(0))
    gold = varlen.reward_table(pi_0, prompts, "inclusion-ordering").double()
    measured = exact_measures(scores, probs, gold)
    for name in ("preference_accuracy", "reward_correlation"):
        assert measured[name] == pytest.approx(summary[name], abs=1e-12)


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_a_run_against_a_learned_reward_records_gold_proxy_kl_and_d_exactly(tmp_path, models, policy):
    """The last epoch's gold_reward_exact, proxy_reward_exact, kl_initial_exact and d, recomputed from the run's
    policy.pt and its initial policy by enumerating every response: equal to float32 precision."""
    out = tmp_path / "run"
    result = lab("run", *SHORT, "--policy", policy, "--reward", f"learned:{models / policy}", "--out", out)
    assert result.exit_code == 0, result.output
    last = rows(out / "metrics.csv")[-1]
    learned = load_learned_reward(read_reward_model(models / policy))
    prompts = torch.tensor(json.loads((out / "config.json").read_text())["task"]["prompts"])
    state = torch.load(out / "policy.pt", weights_only=True)
    final = policy_from_state({name: value.unsqueeze(0) for name, value in state.items()})
    start = make_policy(policy, 5, 3, final.response_length, 10, torch.Generator().manual_seed(5), 0.1)
    with torch.no_grad():
        probs = varlen.all_probs(final, prompts, torch.float64)
        base = varlen.all_probs(start, prompts, torch.float64)
    expect = {"gold_reward_exact": (probs * varlen.reward_table(final, prompts, learned.gold)).sum(-1).mean(),
              "proxy_reward_exact": (probs * varlen.reward_table(final, prompts, learned)).sum(-1).mean(),
              "kl_initial_exact": (probs * (probs.log() - base.log())).sum(-1).mean()}
    expect["d"] = expect["kl_initial_exact"].sqrt()
    for name, value in expect.items():
        assert float(last[name]) == pytest.approx(float(value), rel=1e-4, abs=1e-6), name
    assert float(last["gold_reward_exact"]) != pytest.approx(float(last["proxy_reward_exact"]), abs=1e-3)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_gold_reward_exact"] == pytest.approx(float(last["gold_reward_exact"]))


def test_the_samples_that_train_the_run_are_scored_by_the_proxy(tmp_path, models):
    """samples.txt's rewards are the reward model's scores of the sampled responses, not the true reward's."""
    out = tmp_path / "run"
    assert lab("run", *SHORT, "--reward", f"learned:{models / 'factorized'}", "--out", out).exit_code == 0
    learned = load_learned_reward(read_reward_model(models / "factorized"))
    first = (out / "samples.txt").read_text().split("== epoch")[1]
    checked, prompt = 0, None
    for line in first.splitlines():
        words = line.split()
        if line.startswith("prompt"):
            prompt = torch.tensor([json.loads(line[len("prompt"):line.index("]") + 1])])
        elif words[:1] == ["response"]:
            response = torch.tensor([[json.loads(line[line.index("["):line.index("]") + 1])]])
            reward = float(words[words.index("reward") + 1])
            assert reward == pytest.approx(float(learned(prompt, response)), abs=1e-5)
            checked += 1
    assert checked > 0, first


def test_a_sweep_trains_the_true_and_the_learned_reward_side_by_side(tmp_path, models):
    """Gold equals proxy for the true reward's runs and differs for the learned one's; both seeds of each."""
    out = tmp_path / "sweep"
    rm = models / "factorized"
    result = lab("sweep", *SHORT, "--reward", "inclusion-ordering", "--reward", f"learned:{rm}", "--seeds", 2,
                 "--out", out)
    assert result.exit_code == 0, result.output
    table = read_table(out / "metrics_epoch.parquet")
    for reward, same in (("inclusion-ordering", True), (f"learned:{rm}", False)):
        rows = table["config_reward"] == reward
        assert rows.sum() == 2 * 6
        gap = np.abs(table["gold_reward_exact"][rows] - table["proxy_reward_exact"][rows]).max()
        assert (gap < 1e-6) == same
        assert np.allclose(table["d"][rows] ** 2, table["kl_initial_exact"][rows], atol=1e-6)
    summary = {row["reward"]: row for row in csv.DictReader(open(out / "summary.csv"))}
    last = table["epoch"] == 5
    for reward, row in summary.items():  # summary.csv's exact gold: the mean of the seeds' last epochs
        gold = table["gold_reward_exact"][last & (table["config_reward"] == reward)]
        assert float(row["final_gold_reward_exact"]) == pytest.approx(gold.mean(), rel=1e-5)


def test_default_names_show_the_folder_by_its_own_name(tmp_path, models, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert lab("run", *SHORT, "--reward", f"learned:{models / 'factorized'}").exit_code == 0
    (name,) = [p.name for p in (tmp_path / "runs").iterdir()]
    assert name.startswith("centered-clipped-learned-factorized-") and ":" not in name and "/" not in name


def damaged(models, tmp_path, how: str):
    """A copy of the factorised model's folder, broken in one way."""
    import shutil

    rm = tmp_path / "rm"
    shutil.copytree(models / "factorized", rm)
    if how == "edited":
        (rm / "summary.json").write_text("{}")
    elif how == "unmarked":
        (rm / ".lab-output").unlink()
    elif how == "garbage-model":  # a marked folder whose model.pt is not the model: the mark re-made to match
        (rm / "model.pt").write_bytes(b"not a model")
        write_marker(rm, "reward-model", [p.name for p in rm.iterdir() if p.name != ".lab-output"])
    elif how == "nan-model":
        state = torch.load(rm / "model.pt", weights_only=True)
        state["out"][0] = math.nan
        torch.save(state, rm / "model.pt")
        write_marker(rm, "reward-model", [p.name for p in rm.iterdir() if p.name != ".lab-output"])
    return rm


@pytest.mark.parametrize("how, fragment", [("edited", "its summary.json is not the file"), ("unmarked", "not a folder written by lab "
                                           "reward-model"), ("garbage-model", "cannot read model.pt"),
                                           ("nan-model", "inf or NaN")])
def test_a_damaged_folder_is_refused_with_one_line_and_nothing_written(tmp_path, models, monkeypatch, how, fragment):
    rm = damaged(models, tmp_path, how)
    monkeypatch.chdir(tmp_path)
    for command in ("run", "sweep"):
        one_line(lab(command, *SHORT, "--reward", f"learned:{rm}"), 2, f"learned:{rm}", fragment)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--policy", "autoregressive"], "(--policy)"),
    (["--prompts", "[[3,1,0],[2,2,1]]"], "other prompts"),
    (["--vocab-size", "6"], "vocabulary size 5"),
])
def test_a_model_that_does_not_fit_the_run_is_refused(tmp_path, models, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)
    one_line(lab("run", *SHORT, *args, "--reward", f"learned:{models / 'factorized'}"), 2, fragment)
    one_line(lab("run", *SHORT, "--policy", "autoregressive", "--max-length", "6", "--reward",
                 f"learned:{models / 'autoregressive'}"), 2, "length 5")
    assert not (tmp_path / "runs").exists()


def test_another_commands_folder_is_not_a_reward_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert lab("run", "--epochs", "1", "--quiet", "--out", "made").exit_code == 0
    one_line(lab("run", *SHORT, "--reward", "learned:made", "--out", "other"), 2, "written by lab run")
    one_line(lab("run", *SHORT, "--reward", "learned:", "--out", "other"), 2, "learned:PATH")


@pytest.mark.parametrize("args, fragment", [
    (["--label-noise", "0.1"], "--label-noise applies to --preference argmax only"),
    (["--preference", "argmax", "--preference-temperature", "2"], "applies to --preference bradley-terry only"),
    (["--pairs-per-prompt", "0"], "--pairs-per-prompt must be"),
    (["--lr", "nan"], "--lr must be"),
    (["--preference", "argmax", "--label-noise", "0.7"], "--label-noise must be in [0, 0.5]"),
    (["--margin", "inf"], "--margin must be"),
    (["--from-run", "nowhere"], "--from-run nowhere"),
])
def test_bad_reward_model_options_are_one_line(tmp_path, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)
    one_line(lab("reward-model", "--quiet", *args), 2, fragment)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_dpo_with_pairs_from_trains_on_the_reward_models_own_pairs(tmp_path, models, policy):
    """`--pairs-from RM`: the first step's chosen_logps and rejected_logps (TRL `logps/chosen`, `logps/rejected`) are
    the initial policy's sequence log-probs of pairs.csv's chosen and rejected responses, over the pairs of two
    different responses; config.json records the folder, the sha256 of its pairs.csv and its N."""
    rm, out = models / policy, tmp_path / "dpo"
    result = lab("run", "--loss", "dpo", "--kl", "0.1", "--init-scale", "0.1", "--epochs", "1", "--steps", "1",
                 "--policy", policy, "--pairs-from", rm, "--quiet", "--out", out)
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["pairs_from"] == str(rm) and config["pairs_per_prompt"] == 32 and len(config["pairs_sha256"]) == 64
    first = rows(out / "metrics.csv")[0]
    prompts = torch.tensor(json.loads((rm / "config.json").read_text())["task"]["prompts"])
    length = json.loads((rm / "config.json").read_text())["response_space"]["response_length"]
    pi_0 = make_policy(policy, 5, 3, length, 10, torch.Generator().manual_seed(5), 0.1)
    responses = varlen.enumerate_responses(pi_0)
    with torch.no_grad():
        log_probs = varlen.all_log_probs(pi_0, prompts)  # float[batch n]
    index = {tuple(r): i for i, r in enumerate(responses.tolist())}
    chosen, rejected = [], []
    for row in rows(rm / "pairs.csv"):
        c, r = (tuple(int(t) for t in row[k].split()) for k in ("chosen", "rejected"))
        if c != r:
            chosen.append(float(log_probs[int(row["prompt"]), index[c]]))
            rejected.append(float(log_probs[int(row["prompt"]), index[r]]))
    assert float(first["chosen_logps"]) == pytest.approx(np.mean(chosen), abs=1e-4)
    assert float(first["rejected_logps"]) == pytest.approx(np.mean(rejected), abs=1e-4)


def test_pairs_from_is_refused_where_it_does_not_apply(tmp_path, models, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rm = models / "factorized"
    one_line(lab("run", "--pairs-from", rm), 2, "--pairs-from applies to --loss dpo only")
    one_line(lab("run", "--loss", "dpo", "--kl", "0.1", "--pairs", "online", "--pairs-from", rm), 2, "--pairs offline")
    one_line(lab("run", "--loss", "dpo", "--kl", "0.1", "--pairs-per-prompt", "4", "--pairs-from", rm), 2,
             "--pairs-per-prompt does not apply")
    one_line(lab("run", "--loss", "dpo", "--kl", "0.1", "--policy", "autoregressive", "--pairs-from", rm), 2,
             "--pairs-from", "(--policy)")
    assert not (tmp_path / "runs").exists()


def test_diagnose_asks_for_a_task_reward_for_a_run_trained_against_a_reward_model(tmp_path, models, monkeypatch):
    """`lab diagnose --from-run` of such a run: one line asking for --reward (the exact diagnosis needs a task
    reward); with it, the diagnosis runs on the run's policy."""
    monkeypatch.chdir(tmp_path)
    assert lab("run", *SHORT, "--reward", f"learned:{models / 'factorized'}", "--out", "run").exit_code == 0
    one_line(lab("diagnose", "--from-run", "run", "--group-size", "2", "--out", "d.png"), 2, "add --reward")
    assert lab("diagnose", "--from-run", "run", "--group-size", "2", "--reward", "distance", "--out",
               "d.png").exit_code == 0


def test_pairs_can_be_drawn_from_a_finished_runs_policy(tmp_path, monkeypatch):
    """`--from-run RUN` (as `lab diagnose --from-run`): the pairs come from RUN's final policy, recorded with its
    sha256; a sharper policy than the initial one draws more pairs of one response twice."""
    monkeypatch.chdir(tmp_path)
    assert lab("run", "--loss", "sft", "--epochs", "8", "--lr", "0.01", "--quiet", "--out", "sft").exit_code == 0
    for name, extra in (("from-sft", ["--from-run", "sft"]), ("from-init", [])):
        assert lab("reward-model", "--size", "small", "--pairs-per-prompt", "64", "--steps", "1", "--quiet",
                   *extra, "--out", name).exit_code == 0
    config = json.loads(open("from-sft/config.json").read())["drawing_policy"]
    assert config["init_from"] == "sft" and len(config["init_sha256"]) == 64

    def repeated(name):
        return sum(row["chosen"] == row["rejected"] for row in rows(f"{name}/pairs.csv"))
    assert repeated("from-sft") > repeated("from-init")
