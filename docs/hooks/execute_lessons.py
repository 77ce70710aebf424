"""Execute every lesson once into build/executed/notebooks/ (ignored by git), for the documentation site to show.

    python docs/hooks/execute_lessons.py          every lesson whose .ipynb or .py is newer than its executed copy
    python docs/hooks/execute_lessons.py --all    every lesson

The lessons' committed notebooks carry no outputs; the site (docs/hooks/site.py) shows these executed copies, so
`mkdocs build` and `mkdocs serve` never run a lesson themselves: a build takes seconds, and `mkdocs serve` does
not re-run twelve lessons on every change. Each lesson runs in a fresh kernel from notebooks/, as Jupyter would
run it; an error stops with the lesson's name and exit code 1.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "build" / "executed" / "notebooks"
"""Where the executed copies go: the site reads `notebooks/NN.ipynb` with build/executed/ as its source folder."""
TIMEOUT_S = 600
"""The longest a lesson's cell may run (on a busy 2-core machine a lesson takes under a minute)."""


def lessons() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def stale(lesson: Path) -> bool:
    executed = EXECUTED / lesson.name
    sources = (lesson, lesson.with_suffix(".py"))
    return not executed.exists() or any(s.exists() and s.stat().st_mtime > executed.stat().st_mtime for s in sources)


def execute(lesson: Path) -> None:
    notebook = nbformat.read(lesson, as_version=4)
    NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    partial = EXECUTED / f".{lesson.name}.partial"
    nbformat.write(notebook, partial)
    partial.replace(EXECUTED / lesson.name)  # a copy is whole or absent


def main(argv: list[str]) -> int:
    todo = lessons() if "--all" in argv else [lesson for lesson in lessons() if stale(lesson)]
    for lesson in todo:
        start = time.perf_counter()
        try:
            execute(lesson)
        except Exception as error:  # noqa: BLE001 - one line naming the lesson, then exit 1
            print(f"{lesson.name}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
                  file=sys.stderr)
            return 1
        print(f"{lesson.name}: executed in {time.perf_counter() - start:.0f} s")
    print(f"{len(todo)} of {len(lessons())} lessons executed into {EXECUTED.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
