"""`lab reward-model` under the bounds of run and sweep, and long prompts inside the memory estimate (issue 34).

    reward-model: counts bounded before any arithmetic (`check_counts`), the response space enumerable
                  (V^L <= 4096, counted without the power), the drawing policy and the pairs within memory, the
                  drawing policy's probabilities finite
    run, sweep:   the estimate holds the Monte Carlo exploration's P x P reward comparisons of every sample
                  (`lab.training.limits.estimate`), so a 8,000- or 30,000-token prompt is refused before allocating

Each refusal is one `Error:` line, exit 2, nothing written. Mutants tried: `check_counts` left out of reward-model
(OverflowError for --dim 10**310 with --out), `check_enumerable` left out (the ValueError of the enumeration as a
traceback), `check_finite` left out ("invalid multinomial distribution"), the estimate's exploration term left out
(the 8,000-token run started training): each fails a case here.
"""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.exact.exploration import MC_SAMPLES
from lab.training.config import TrainConfig
from lab.training.limits import estimate
from tests.cli.cli_tools import one_line

BIG = "1" + "0" * 310
LONG_LIST = "[[" + ",".join(["1"] * 30_000) + "]]"


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def lab(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("args, fragment", [
    (["--dim", BIG], "--dim"),
    (["--vocab-size", BIG], "--vocab-size"),
    (["--policy", "autoregressive", "--max-length", BIG], "--max-length"),
    (["--prompts", "random", "--prompt-length", BIG], "--prompt-length"),
    (["--dim", "99999999999"], "--dim"),
    (["--init-scale", "1e300"], "not finite numbers"),
    (["--prompts", "random", "--prompt-length", "6"], "4096"),
    (["--prompts", "random", "--vocab-size", "10", "--prompt-length", "4"], "4096"),
    (["--policy", "autoregressive", "--prompts", "[[1,2,3,4,0]]"], "4096"),
    (["--prompts", "random", "--prompt-length", "100000"], "4096"),
    (["--prompts", LONG_LIST], "4096"),
    (["--prompts", "random", "--num-prompts", "100000", "--prompt-length", "2", "--vocab-size", "2",
      "--pairs-per-prompt", "10000"], "pairs"),
], ids=["dim-310-digits", "vocab-310-digits", "max-length-310-digits", "prompt-length-310-digits", "dim-1e11",
        "init-scale-1e300", "prompt-length-6", "vocab-10-length-4", "autoregressive-5-tokens", "prompt-length-1e5",
        "prompt-of-30000-tokens", "pairs-past-memory"])
def test_reward_model_refuses_what_it_cannot_compute_with_one_line(args, fragment):
    """Each used to end in a traceback (OverflowError, "invalid multinomial distribution", "Exceeds the limit (4300
    digits)", "exact enumeration needs vocab^length <= 4096", an allocator error)."""
    one_line(lab("reward-model", *args, "--quiet", "--out", "rm"), 2, fragment)
    assert os.listdir() == []


@pytest.mark.parametrize("command", [["run"], ["sweep", "--seeds", "2"]])
@pytest.mark.parametrize("prompts", [["--prompts", "random", "--prompt-length", "8000"], ["--prompts", LONG_LIST]],
                         ids=["random-8000", "list-30000"])
def test_a_long_prompt_is_refused_by_the_memory_estimate_before_training(command, prompts):
    """`--prompt-length 8000` used to allocate 393 GB after 12 s (a traceback), a 30,000-token list 1.8 TB after 55 s."""
    one_line(lab(*command, *prompts, "--quiet"), 2, "needs about", "of memory")
    assert os.listdir() == []


def test_the_estimate_holds_the_monte_carlo_explorations_reward_comparisons():
    """Past V^P > 4096 the exploration metrics sample MC_SAMPLES responses a prompt and the reward compares each of
    their P tokens with each of the prompt's P (`tasks.sorting.inclusion_ordering_reward`): the estimate holds at
    least those R * B * MC_SAMPLES * P * P booleans, for one epoch at least, and below the cap it adds nothing of P^2."""
    config = TrainConfig(epochs=2, steps=1)
    for length in (6, 100, 1000):
        assert estimate([config], 5, 3, length)["device"] >= 3 * MC_SAMPLES * length * length
    small = estimate([config], 5, 3, 5)["device"]  # 5^5 = 3125 responses: exact, no sampling
    assert small < 3 * MC_SAMPLES * 5 * 5
