"""`lab --help`, `lab --version` and every command's `--help` answer without loading torch.

What is measured is the import graph, not the time (a busy machine makes times meaningless): the help runs
through the console entry point (`lab.cli.main.main`) in a fresh process, and afterwards `torch` must not be in
`sys.modules`. A command module that imports torch (or a module that does) at its top fails here.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    import typer
    from lab.cli.main import main

    def answer(argv):
        sys.argv = ["lab", *argv]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                main()
                code = 0
            except SystemExit as e:
                code = e.code
        return {"argv": argv, "code": code, "output": out.getvalue(), "torch": "torch" in sys.modules}

    answers = [answer(["--help"]), answer(["--version"]), answer([])]
    from lab.cli.commands import app
    group = typer.main.get_command(app)
    answers += [answer([name, "--help"]) for name in group.list_commands(None)]
    print(json.dumps(answers))
""")


def help_answers() -> list[dict]:
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_help_version_and_every_commands_help_load_no_torch():
    """Each answer is the real one (exit 0, a usage or a version line), and torch is still not loaded after it:
    the options' choices and defaults come from torch-free modules (`lab.core.modes`, `lab.training.config`,
    `tasks.catalog`, which reads the task files without importing them) and each command loads torch as its first instruction (`load_torch`)."""
    answers = help_answers()
    commands = [a["argv"][0] for a in answers[3:]]
    assert {"run", "sweep", "diagnose", "reproduce", "bench", "trl", "trl-compare"} <= set(commands)
    for answer in answers:
        assert answer["code"] == 0, answer
        usage = " ".join(["Usage: lab", *answer["argv"][:-1]]) if answer["argv"][-1:] == ["--help"] else "Usage: lab"
        assert usage in answer["output"] or answer["output"].startswith("lab (grpo-sorting-lab) "), answer
        assert not answer["torch"], f"lab {' '.join(answer['argv'])} loaded torch"
