"""The package's layers run one way, and no two modules import each other, directly or through others.

    tasks, lab.core  <-  lab.policies  <-  lab.exact  <-  lab.training  <-  lab.files, lab.figures
                     <-  lab.experiments  <-  lab.cli

A module may import from its own layer or a layer to its left, never from one to its right
(docs/architecture.md). Every import counts, also one inside a function: a lazy import is still
a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = {
    "tasks": 0, "lab.core": 0,
    "lab.policies": 1,
    "lab.exact": 2,
    "lab.training": 3,
    "lab.files": 4, "lab.figures": 4,
    "lab.experiments": 5,
    "lab.bridge": 5,  # TRL's trainers on the task (imports transformers and trl only when used)
    "lab.exercises": 6,  # the lessons' exercise checks: imports nothing of the lab
    "lab.cli": 6,
    "lab.__main__": 7, "lab": 7,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    paths = [*ROOT.glob("lab/**/*.py"), *ROOT.glob("tasks/**/*.py")]
    return {module_name(p): p for p in paths}


def layer(module: str) -> int:
    """The layer of the longest matching prefix in LAYERS."""
    best = max((prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")), key=len)
    return LAYERS[best]


def imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `module` imports (`from X import sub` counts as both X and its submodule X.sub)."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from X import sub` names X as well as X.sub: it reads the name from X's namespace
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import lab.core.kl` names lab.core.kl
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_from_a_layer_above_its_own():
    """Every import points down the layers or sideways, never up (the arrow is named on failure)."""
    upward = [f"{source} -> {target}" for source, targets in sorted(import_graph().items()) for target in sorted(targets)
              if layer(target) > layer(source)]
    assert upward == [], "upward imports:\n" + "\n".join(upward)


def test_no_two_modules_import_each_other_directly_or_through_others():
    """The import graph has no circle."""
    assert cycles(import_graph()) == []


def test_the_checks_see_an_upward_import_and_a_circle():
    """The two checks above could fail: an upward arrow and a two-module circle are found."""
    graph = {"lab.core.deltas": {"lab.training.config"}, "lab.training.config": {"lab.core.deltas"}}
    assert [s for s, ts in graph.items() for t in ts if layer(t) > layer(s)] == ["lab.core.deltas"]
    assert cycles(graph) == [["lab.core.deltas", "lab.training.config"]]
    real = import_graph()
    assert "lab.core.modes" in real["lab.training.config"]  # the real graph is read
    assert "lab.core.deltas" in real["lab.cli.diagnose_command"]  # lazy imports included (inside `diagnose`)
    assert "lab.cli.commands" in real["lab.cli.main"]
    assert cycles({"lab.exact": {"lab.exact.voting"}, "lab.exact.voting": {"lab.exact", "lab.exact.enumeration"},
                   "lab.exact.enumeration": set()}) == [["lab.exact", "lab.exact.voting"]]  # `from lab.exact import x`


def test_there_is_no_second_package_and_no_import_finder():
    """The console entry point lives in lab.cli; `lab` installs no import hook for old module names."""
    assert not (ROOT / "lab_console").exists()
    assert "meta_path" not in (ROOT / "lab" / "__init__.py").read_text()


def test_a_tables_functions_exist_and_live_in_a_layer_its_module_may_import():
    """A table of modes (`lab.core.choices.Table`: `DeltaMode`, `TrainingLoss`) names each entry's functions by
    `Ref` ("module:function", imported on first call so that the table loads without torch). The import graph
    above cannot see those names, so each is held to the same rule here: it resolves to a function, in a module
    of the table's own layer or one to its left."""
    import dataclasses

    import lab.core.modes as modes
    from lab.core.choices import Ref, Table

    tables = [v for v in vars(modes).values() if isinstance(v, type) and issubclass(v, Table) and v is not Table]
    assert {t.__name__ for t in tables} >= {"DeltaMode", "TrainingLoss"}
    for table in tables:
        for member in table:
            refs = [v for f in dataclasses.fields(member.entry) for v in [getattr(member.entry, f.name)]
                    if isinstance(v, Ref)]
            assert refs or table.__name__ == "TrainingLoss", member  # a loss of another method has none
            for ref in refs:
                target = ref.path.partition(":")[0]
                assert target in project_modules() and layer(target) <= layer(modes.__name__), (member, ref)
                assert callable(ref.resolve()), (member, ref)


# Sizes a reader can hold (issue 36): docs/conventions.md's limits, enforced.

MODULE_LINES, FUNCTION_LINES = 300, 80
ONE_SIGNATURE = "one signature because Typer reads a command's options off its parameters"
"""What a command's docstring says where its options make it longer than FUNCTION_LINES."""


def library_files() -> list[Path]:
    return sorted([*ROOT.glob("lab/**/*.py"), *ROOT.glob("tasks/**/*.py")])


def long_functions(path: Path, limit: int = FUNCTION_LINES) -> list[str]:
    """`name (lines)` for each function of `path` past `limit` lines, except a Typer command (`@app.command`) whose
    docstring says that its options are one signature."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        command = any("app.command" in ast.unparse(d) for d in node.decorator_list)
        if lines > limit and not (command and ONE_SIGNATURE in (ast.get_docstring(node) or "")):
            found.append(f"{node.name} ({lines} lines)")
    return found


def test_no_module_is_past_300_lines():
    """Every module of lab/ and tasks/ fits in 300 lines (mutant tried: a limit of 250 names several modules)."""
    long = [f"{p.relative_to(ROOT)} ({n})" for p in library_files() if (n := len(p.read_text().splitlines())) >
            MODULE_LINES]
    assert long == [], "modules past 300 lines:\n" + "\n".join(long)


def test_no_function_is_past_80_lines_except_a_commands_one_signature():
    """Every function fits in 80 lines, except a command whose options Typer reads off one signature, which says so
    in its docstring (mutant tried: the exception dropped, the five commands `lab run`, `sweep`, `diagnose`,
    `reward-model` and `trl` are named)."""
    long = [f"{path.relative_to(ROOT)}:{entry}" for path in library_files() for entry in long_functions(path)]
    assert long == [], "functions past 80 lines:\n" + "\n".join(long)


def test_the_size_checks_see_a_long_function_and_let_a_command_say_why(tmp_path):
    """The check above could fail: a plain 81-line function is named; the same as a command is named unless its
    docstring gives the reason."""
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    files = {"plain": "def f():\n", "said": f'@app.command()\ndef f():\n    """{ONE_SIGNATURE}."""\n',
             "silent": '@app.command()\ndef f():\n    """A command."""\n'}
    for name, head in files.items():
        (tmp_path / f"{name}.py").write_text(head + body + "\n")
    assert long_functions(tmp_path / "plain.py") == ["f (81 lines)"]
    assert long_functions(tmp_path / "said.py") == [] and long_functions(tmp_path / "silent.py") == ["f (82 lines)"]


def unused_names() -> list[str]:
    """Module-level names of lab/ and tasks/ that nothing names again (in lab/, tasks/, tests/, the lessons, docs/ or
    README.md). A function registered by a decorator (`@reward("name")`, `@app.command()`) is used by it."""
    import re
    from collections import Counter

    texts = {p: p.read_text() for p in [*library_files(), *ROOT.glob("tests/**/*.py"), *ROOT.glob("notebooks/*.py"),
                                       *ROOT.glob("docs/**/*.md"), ROOT / "README.md"]}
    words = Counter(word for text in texts.values() for word in re.findall(r"\w+", text))  # a name as a whole word
    found = []
    for path in library_files():
        for node in ast.parse(texts[path]).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [] if node.decorator_list else [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{name}" for name in names
                      if not name.startswith("__") and words[name] <= 1]
    return found


def test_no_module_level_name_is_unused():
    """No module keeps a name nobody reads (issue 36 found six; mutant tried: `UNUSED_PROBE = 1` added to
    lab/core/modes.py is named)."""
    assert unused_names() == []


def task_imports(graph: dict[str, set[str]], files: set[str]) -> list[str]:
    """`lab.X -> tasks.NAME` for each lab module that imports a task file."""
    return [f"{source} -> {target}" for source, targets in sorted(graph.items()) if source.startswith("lab")
            for target in sorted(targets & files)]


def test_no_module_of_lab_imports_a_task_file():
    """The lab reaches a task only through the `Task` that `tasks.catalog` loads by name (issue 36: `grep -rn
    tasks.sorting lab/` finds nothing); a lab module importing `tasks.sorting` (the mutant tried) is named."""
    from tasks.catalog import task_names

    files = {f"tasks.{name}" for name in task_names()}
    assert task_imports(import_graph(), files) == []
    assert task_imports({"lab.core.x": {"tasks.sorting", "tasks"}, "tasks.y": {"tasks.sorting"}}, files) == \
        ["lab.core.x -> tasks.sorting"]
