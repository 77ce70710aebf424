"""docs/architecture.md's list of the files a new task, delta mode, loss or policy changes is true.

For a task, a delta mode and a loss the test makes the extension in a temporary copy of lab/, tasks/ and the tests
that check every mode (issue 36's scratch extensions: `--delta rank`, a CISPO-style surrogate `capped`, a task
`echo`), writing exactly the files the doc's row names, and nothing else; then every command that takes the new choice runs with it
(both policies, the exact diagnosis), `lab run --help` lists it with its help, and the tests that check every delta
mode and every loss against a reference formula (tests/core/test_deltas.py, test_losses.py) pass with the new
one's formula added there. The copy, with its temporary
modules, goes with the test's folder. A policy is too large a scratch extension: for it the test checks that the
tables the row names hold every `PolicyKind` member, and that the modules the row lists as naming a kind are exactly
those that do. Mutants tried: a row naming one file fewer (the set comparison fails), and `--delta` choices written
out by hand in lab/cli/options.py (the new mode is not offered: `lab run --delta rank` exits 2).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.tasks.test_task_plugin import ECHO

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

RANK = '''"""Rank deltas: delta_i = (rank of r_i in its group - (G - 1) / 2) / G."""


def rank(rewards, std_eps, unbiased):
    ranks = rewards.argsort(dim=-1, stable=True).argsort(dim=-1).to(rewards.dtype)  # ties: by position
    return (ranks - (rewards.shape[-1] - 1) / 2) / rewards.shape[-1]
'''
RANK_ENTRY = ('    rank = Delta("rank", "the reward\'s rank in its group, centered", Ref("lab.core.rank:rank"), '
              'needs_group=True)\n')
RANK_REFERENCE = """    if mode == "rank":
        return [(sorted(range(g), key=lambda j: (group[j], j)).index(i) - (g - 1) / 2) / g for i in range(g)]
"""
"""rank's formula on a list, in tests/core/test_deltas.py's `group_formula` (every mode is checked against it)."""
CAPPED = '''"""A CISPO-style surrogate: -sg(min(ratio, 1 + eps)) * delta * log pi (MiniMax-M1, arXiv:2506.13585)."""

from lab.core.losses import as_leading, ratios


def capped(log_probs, token_deltas, old_log_probs, mask, clip_eps):
    weight = ratios(log_probs, old_log_probs).clamp(max=1 + as_leading(clip_eps, log_probs)).detach()
    return -weight * token_deltas * log_probs
'''
CAPPED_ENTRY = ('    capped = Loss("capped", PG, "CISPO-style: -sg(min(ratio, 1 + eps)) x delta x log-prob", '
                'Ref("lab.core.capped:capped"), needs_old=True, clip_metrics=PPO_CLIP, settings=("clip_eps",))\n')
CAPPED_REFERENCE = """        if mode == "capped":
            weight = min(rho, 1 + eps)
            value += -weight * delta * lp / n
            grad[b][t][q] = -weight * delta / n
            continue
"""
"""capped's formula, element by element, in tests/core/test_losses.py's `reference_loss_and_grad`."""
ECHO_TEST = '''import torch
from tasks.echo import REWARDS


def test_echo_scores_the_prompt_itself():
    assert REWARDS["exact-match"](torch.tensor([[1, 2]]), torch.tensor([[[1, 2], [2, 1]]])).tolist() == [[1.0, 0.0]]
'''
SHORT = ["--epochs", "2", "--steps", "2", "--device", "cpu", "--quiet"]
COMMANDS = [
    ["run", "--delta", "rank", *SHORT, "--out", "run-rank"],
    ["run", "--delta", "rank", "--policy", "autoregressive", *SHORT, "--out", "run-rank-ar"],
    ["diagnose", "--delta", "rank", "--group-size", "2", "--out", "rank.png"],
    ["run", "--loss", "capped", "--delta", "centered", "--policy", "autoregressive", *SHORT, "--out", "run-capped-ar"],
    ["run", "--task", "echo", "--policy", "autoregressive", *SHORT, "--out", "run-echo"],
    ["run", "--help"],
]
PROBE = """
import json, sys
import pytest
from typer.testing import CliRunner
from lab.cli.commands import app

out = []
for argv in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, argv)
    out.append({"argv": argv, "code": result.exit_code, "output": result.output})
code = pytest.main(["-q", "-p", "no:randomly", "-p", "no:cacheprovider", *json.loads(sys.argv[2])])
print(json.dumps({"commands": out, "tests": int(code)}))
"""


def doc_rows() -> dict[str, list[str]]:
    """The 'What changes' table: a new <thing> -> the paths its second cell names in backticks."""
    text = DOC.read_text().split("## What changes for a new task, delta mode, loss or policy", 1)[1]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("a new", "---"):
            rows[cells[0]] = re.findall(r"`([\w/.]+\.py)`", cells[1])
    return rows


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*.py") if "__pycache__" not in p.parts}


def test_a_new_delta_mode_loss_and_task_change_the_files_the_doc_names_and_work_everywhere(tmp_path):
    """The scratch extensions touch exactly the doc's files (NAME = rank, capped, echo) and every command runs them."""
    copy = tmp_path / "copy"
    for folder in ("lab", "tasks", "tests/core"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for path in ("tests/__init__.py", "tests/conftest.py", "tests/tasks/__init__.py"):
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, copy / path)
    before = snapshot(copy)
    modes = copy / "lab" / "core" / "modes.py"
    text = modes.read_text()
    text = text.replace('    gae = Delta("gae"', RANK_ENTRY + '    gae = Delta("gae"', 1)
    text = text.replace('    dpo = Loss("dpo"', CAPPED_ENTRY + '    dpo = Loss("dpo"', 1)
    modes.write_text(text)
    for path, marker, reference in (("tests/core/test_deltas.py", "    raise AssertionError(mode)", RANK_REFERENCE),
                                    ("tests/core/test_losses.py", "        raise AssertionError(f\"no reference",
                                     CAPPED_REFERENCE)):
        source = (copy / path).read_text()
        assert marker in source
        (copy / path).write_text(source.replace(marker, reference + marker, 1))
    written = {"lab/core/rank.py": RANK, "lab/core/capped.py": CAPPED, "tasks/echo.py": ECHO,
               "tests/tasks/test_echo.py": ECHO_TEST}
    for path, source in written.items():
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_text(source)
    after = snapshot(copy)
    changed = {p for p in after if before.get(p) != after[p]}

    rows = doc_rows()
    named = {path.replace("NAME", name) for row, name in (("delta mode", "rank"), ("loss", "capped"), ("task", "echo"))
             for path in rows[row]}
    assert changed == named, (changed, named)

    tests = ["tests/core/test_deltas.py", "tests/core/test_losses.py", "tests/tasks/test_echo.py"]
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(COMMANDS), json.dumps(tests)], cwd=copy,
                            capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(copy)})
    assert result.returncode == 0, result.stderr[-2000:]
    probe = json.loads(result.stdout.splitlines()[-1])
    assert probe["tests"] == 0, result.stdout[-3000:]  # the reference tests, rank and capped among every mode
    answers = probe["commands"]
    for answer in answers:
        assert answer["code"] == 0, answer
    help_text = " ".join(answers[-1]["output"].split())
    assert "rank: the reward's rank in its group, centered" in help_text
    assert "capped: CISPO-style: -sg(min(ratio, 1 + eps)) x delta x log-prob" in help_text
    assert json.loads((copy / "run-echo" / "config.json").read_text())["task"]["name"] == "echo"


MEMBERS = ("factorized", "autoregressive")
POLICY_CLASSES = {"AutoregressivePolicy", "AutoregressiveStack", "Policy", "PolicyStack"}


def names_a_kind(path: Path) -> bool:
    """The module branches on a policy kind: `PolicyKind.<member>`, a comparison with a member's name, or an
    isinstance check against a policy class."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "PolicyKind"
                and node.attr in MEMBERS):
            return True
        if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in MEMBERS
                                                 for c in [node.left, *node.comparators]):
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                and len(node.args) == 2 and isinstance(node.args[1], ast.Name) and node.args[1].id in POLICY_CLASSES):
            return True
    return False


def test_a_new_policys_tables_hold_every_kind_and_the_doc_lists_every_module_that_names_one():
    """POLICIES, KINDS and CRITICS (the tables the row names) have one entry per PolicyKind member; the modules of the
    library (not the experiments, the bridge, or a policy's own module, the one that states its `OPS`) that branch on
    a kind are exactly the row's others."""
    from lab.core.modes import PolicyKind
    from lab.policies import POLICIES
    from lab.policies.critic import CRITICS
    from lab.training.kinds import KINDS

    assert set(POLICIES) == set(KINDS) == set(CRITICS) == set(PolicyKind)
    listed = set(doc_rows()["policy"])
    required = {"lab/policies/NAME.py", "lab/policies/__init__.py", "lab/core/modes.py", "lab/training/kinds.py",
                "lab/policies/critic.py", "tests/policies/test_NAME.py"}
    assert required <= listed
    branching = {str(p.relative_to(ROOT)) for p in sorted((ROOT / "lab").rglob("*.py"))
                 if p.relative_to(ROOT).parts[1] not in ("experiments", "bridge")
                 and not (p.parent.name == "policies" and "OPS = PolicyOps(" in p.read_text()) and names_a_kind(p)}
    assert branching | required == listed, (branching | required) ^ listed
