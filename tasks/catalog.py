"""The tasks on disk, found by name without loading torch: `tasks/NAME.py` is a task when it defines `make_task`.

    task_names()      every task file of the `tasks` package, sorted (a file dropped into tasks/ is one of them)
    task_facts(NAME)  its REWARD_NAMES, DEFAULT_REWARD and VOCAB_SIZE, read off the file's text
    load(NAME)        the module `tasks.NAME` (imports torch); make_named_task, default_task: its `Task`

The `lab` command builds `--task`, `--reward` and `--vocab-size` from these, so `lab --help` needs no torch: the three
names are literals at the top of each task file (docs/architecture.md, the task protocol), read with `ast`, never by
importing the file. `load(NAME)` imports it, for a command that trains.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tasks import Task

DEFAULT_TASK = "sorting"
"""The lecture's task: what every command trains on without `--task`."""

FACTS = ("REWARD_NAMES", "DEFAULT_REWARD", "VOCAB_SIZE")
"""The literals a task file states at module level (read without importing it)."""


@dataclass(frozen=True)
class TaskFacts:
    """What the command line needs of a task before torch loads."""

    name: str
    reward_names: tuple[str, ...]
    default_reward: str
    vocab_size: int


def _folders() -> list[Path]:
    import tasks  # the package's own search path: a test may add a folder to it

    return [Path(p) for p in tasks.__path__]


def _file(name: str) -> Path | None:
    for folder in _folders():
        if (folder / f"{name}.py").is_file():
            return folder / f"{name}.py"
    return None


def _defines_make_task(path: Path) -> bool:
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError, OSError):
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == "make_task" for node in tree.body)


def task_names() -> tuple[str, ...]:
    """Every task in the package's folders: a module `NAME.py` (not starting with `_`) that defines `make_task`."""
    names = {p.stem for folder in _folders() for p in folder.glob("*.py")
             if not p.stem.startswith("_") and p.stem.isidentifier() and _defines_make_task(p)}
    return tuple(sorted(names))


def check_task_name(name: str) -> str:
    """`name` when it is a task; else a ValueError naming the tasks there are."""
    if name not in task_names():
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(task_names())} (a file tasks/NAME.py "
                         "that defines make_task)")
    return name


def task_facts(name: str) -> TaskFacts:
    """The task's REWARD_NAMES, DEFAULT_REWARD and VOCAB_SIZE, read off `tasks/NAME.py`'s module-level literals."""
    path = _file(check_task_name(name))
    found = {}
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in FACTS and node.value is not None:
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    raise ValueError(f"tasks/{name}.py: {target.id} must be a literal (it is read without importing "
                                     "the file)") from None
    missing = [fact for fact in FACTS if fact not in found]
    if missing:
        raise ValueError(f"tasks/{name}.py does not state {', '.join(missing)} at module level (the task protocol, "
                         "docs/architecture.md)")
    return TaskFacts(name, tuple(found["REWARD_NAMES"]), found["DEFAULT_REWARD"], int(found["VOCAB_SIZE"]))


def load(name: str) -> ModuleType:
    """The task module `tasks.NAME` (checked against the task files there are: `tasks.catalog.task_names`)."""
    return importlib.import_module(f"tasks.{check_task_name(name)}")


def make_named_task(name: str, prompts=None, vocab_size: int | None = None, eval_prompts=None) -> "Task":
    """The task `name` (its own prompts and vocabulary unless given): `load(name).make_task(...)`."""
    module = load(name)
    vocab_size = module.VOCAB_SIZE if vocab_size is None else vocab_size
    return module.make_task(prompts, vocab_size, eval_prompts)


def default_task() -> "Task":
    """The lecture's task on its own prompts (`tasks.catalog.DEFAULT_TASK`): what a reward given by name alone means
    to the lab's exact functions (`lab.exact.enumeration.reward_table(prompts, "distance", ...)`)."""
    return make_named_task(DEFAULT_TASK)
