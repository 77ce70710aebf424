"""notebooks/README.md's commands, run as written, from the repository's root, in a copy of it.

    every ```bash line (comments dropped) runs with the copy as its working folder and `.venv` the
    environment running pytest; `jupyter lab` must start its server (without a browser, on a free
    port; stopped once it serves),
    every other command must exit 0
    the copy's lessons are byte-identical afterwards: on a lesson in sync, the editing loop changes nothing

The commands include one lesson's checks (it executes that lesson), so this is `slow`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "notebooks" / "README.md"
SERVER_START_S = 90
"""How long JupyterLab may take to start serving on a busy 2-core machine."""


def command_lines(text: str) -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    lines = [line.split(" #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serves(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Start `jupyter lab` without a browser and return the first address it announces (then stop it).
    As root (CI) it needs `--allow-root`, which the page mentions."""
    root = ["--allow-root"] if os.geteuid() == 0 else []
    server = subprocess.Popen([*args, "--no-browser", f"--port={free_port()}", "--ip=127.0.0.1", *root], cwd=cwd,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + SERVER_START_S
        for line in server.stderr:
            match = re.search(r"http://127\.0\.0\.1:\d+/lab\S*", line)
            if match or time.monotonic() > deadline:
                return match.group(0) if match else ""
        return ""
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_commands_are_found():
    lines = command_lines(PAGE.read_text())
    assert lines[0] == ".venv/bin/jupyter lab notebooks/"
    assert any("jupytext --sync" in line for line in lines) and any("pytest" in line for line in lines)


@pytest.mark.slow
def test_the_notebooks_readme_commands_run_as_written(tmp_path):
    copy = tmp_path / "clone"
    copy.mkdir()
    for name in ("notebooks", "tests"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    (copy / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "OMP_NUM_THREADS": "1"}
    for line in command_lines(PAGE.read_text()):
        args = shlex.split(line)
        if args[:2] == [".venv/bin/jupyter", "lab"]:
            assert serves(args, copy, env), f"{line}: JupyterLab did not start serving"
            continue
        result = subprocess.run(args, cwd=copy, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{line}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    for lesson in sorted((ROOT / "notebooks").iterdir()):
        if lesson.is_file():
            assert (copy / "notebooks" / lesson.name).read_bytes() == lesson.read_bytes(), lesson.name
