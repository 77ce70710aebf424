"""The lesson notebooks: each pair is in sync, each is a real lesson, and each runs top to bottom.

Every `notebooks/NN_name.ipynb` is authored as the jupytext percent script
`notebooks/NN_name.py` (notebooks/README.md says why). These tests check that
(1) every script has its notebook and their cells agree, (2) the committed
notebooks carry no outputs, (3) each has prose and code, (4) the README links
them in order, and (5) each executes without error, within its time budget,
in a kernel pinned to the interpreter running pytest (not whatever `python3`
kernel the machine happens to have registered), and (6) its graded exercises
(lab.exercises) work both ways: run as a student's "Run all" every check says
"not yet solved" and the lesson still runs to the end; then, in the same kernel,
each solution cell's code followed by its check, every check passes. Each lesson
is executed once: the solutions run after the student's run, not in a second
execution of the whole lesson.
"""

from __future__ import annotations

import ast
import json
import textwrap
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import psutil
import pytest
from ipykernel.kernelspec import install as install_kernelspec
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from lab.exercises import EXERCISE_TAG, SOLUTION_TAG, SOLVED_ENV, solution_code

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
SCRIPTS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
LESSONS = tuple(script.stem for script in SCRIPTS)
"""The lessons, in teaching order (their NN_ prefix): a new lesson is picked up by its name alone."""
FIRST_LESSONS = ("01_policy_gradient_and_baselines", "02_grpo_deltas_and_losses", "03_kl_to_a_reference",
                 "04_sorting_experiments", "05_silent_bugs", "06_exploration", "07_length_bias", "08_critic", "09_dpo")
"""The lessons that must stay: five on policy gradients and GRPO, then exploration, length bias, the learned
critic and DPO; later lessons come after them."""

NOTEBOOK_TIMEOUT_S = 60
"""Budget for one whole notebook, its solutions included: it runs top to bottom on a CPU in under a minute."""
KERNEL_NAME = "grpo-lab-test"
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
"""The backend a Jupyter kernel uses by default: figures shown in a cell become its image outputs."""
MIN_MARKDOWN_CELLS = 6
MIN_PROSE_WORDS = 400
MIN_CODE_CELLS = 6
LESSONS_WITH_EXERCISES = tuple(script.stem for script in SCRIPTS)
"""Every lesson has graded exercises, at least MIN_EXERCISES in each."""
MIN_EXERCISES = 2
NOT_YET_SOLVED = "not yet solved"


def cell_sources(notebook) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def test_the_lessons_exist_as_script_and_notebook_pairs():
    """The lessons begin with FIRST_LESSONS, numbered 01, 02, ... without a gap; each is a percent script
    paired with a notebook of the same name."""
    assert LESSONS[:len(FIRST_LESSONS)] == FIRST_LESSONS
    assert [int(name[:2]) for name in LESSONS] == list(range(1, len(LESSONS) + 1))
    assert tuple(p.stem for p in NOTEBOOKS) == LESSONS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_notebook_is_in_sync_with_its_script(script):
    """The .ipynb holds exactly the cells of its .py (edit the .py, then `jupytext --sync`)."""
    notebook_path = script.with_suffix(".ipynb")
    from_script = jupytext.read(script)
    from_notebook = jupytext.read(notebook_path)
    assert cell_sources(from_notebook) == cell_sources(from_script), (
        f"{notebook_path.name} and {script.name} differ; run `jupytext --sync notebooks/{script.name}`")
    assert from_notebook.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_has_no_outputs(path):
    """Outputs are stripped so that diffs show only the lesson (notebooks/README.md)."""
    notebook = nbformat.read(path, as_version=4)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"cell {index} has outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_a_lesson_with_prose_and_code(path):
    """A lesson opens with a title, explains itself in markdown, and has code that calls the lab."""
    notebook = nbformat.read(path, as_version=4)
    markdown = [c.source for c in notebook.cells if c.cell_type == "markdown"]
    code = [c.source for c in notebook.cells if c.cell_type == "code" and c.source.strip()]
    assert notebook.cells[0].cell_type == "markdown" and notebook.cells[0].source.startswith("# ")
    assert len(markdown) >= MIN_MARKDOWN_CELLS, f"only {len(markdown)} markdown cells"
    words = sum(len(re.findall(r"[A-Za-z]{2,}", text)) for text in markdown)
    assert words >= MIN_PROSE_WORDS, f"only {words} words of prose"
    assert len(code) >= MIN_CODE_CELLS, f"only {len(code)} code cells"
    assert any(re.search(r"^\s*(from|import) (lab|tasks)\b", c, re.M) for c in code), "never imports the lab"


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def exercises(notebook) -> list[tuple[int, int, int]]:
    """(exercise, solution, check) cell indices of every exercise, checking their order and form.

    An exercise is a code cell tagged `exercise` holding the placeholder `...`; its solution is the
    next cell tagged `solution`, a markdown cell whose answer sits in a collapsed <details> block;
    the cell right after the solution is the check, a code cell calling `check(`.
    """
    found = []
    for index, cell in enumerate(notebook.cells):
        if EXERCISE_TAG not in tags(cell):
            continue
        assert cell.cell_type == "code" and "..." in cell.source, f"exercise cell {index} has no `...` to fill in"
        solution = next(i for i in range(index + 1, len(notebook.cells)) if SOLUTION_TAG in tags(notebook.cells[i]))
        text = notebook.cells[solution]
        assert text.cell_type == "markdown", f"solution cell {solution} must be markdown (it must not run)"
        assert text.source.lstrip().startswith("<details>") and text.source.rstrip().endswith("</details>"), (
            f"solution cell {solution} is not collapsed in a <details> block")
        solution_code(text.source)  # it holds code
        check = notebook.cells[solution + 1]
        assert check.cell_type == "code" and "check(" in check.source, f"no check cell after solution {solution}"
        found.append((index, solution, solution + 1))
    assert len(found) == sum(SOLUTION_TAG in tags(c) for c in notebook.cells), "a solution without an exercise"
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_have_a_collapsed_solution_and_a_check(path):
    """Each exercise is followed by its hidden solution, then a check against the lab; at least two per lesson."""
    found = exercises(nbformat.read(path, as_version=4))
    if path.stem in LESSONS_WITH_EXERCISES:
        assert len(found) >= MIN_EXERCISES, f"{len(found)} graded exercises, fewer than {MIN_EXERCISES}"


def test_readme_links_the_notebooks_in_order():
    """The README's Lessons section links every lesson, in teaching order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Lessons\n", 1)[1].split("\n## ", 1)[0]
    linked = re.findall(r"\]\(notebooks/(\d\d_[a-z_]+)\.ipynb\)", section)
    assert tuple(linked) == LESSONS


def plotting_environment(config_dir: Path) -> dict[str, str]:
    """The kernel's matplotlib settings, whatever the shell running pytest exported.

    ipykernel selects the inline backend (figures become `image/png` outputs) only when
    `MPLBACKEND` is unset, so an exported `MPLBACKEND=Agg` (common on servers and CI) silently
    turned every figure into nothing. The kernel gets Jupyter's own backend explicitly, and an
    empty private config folder, so that no user's `matplotlibrc` (`MPLCONFIGDIR`, `MATPLOTLIBRC`)
    changes what the lessons draw.
    """
    config_dir.mkdir(parents=True, exist_ok=True)
    return {"MPLBACKEND": INLINE_BACKEND, "MPLCONFIGDIR": str(config_dir), "MATPLOTLIBRC": str(config_dir)}


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory):
    """A kernelspec that launches *this* interpreter, in a private folder searched alone.

    `ipykernel.kernelspec.install` writes `argv = [sys.executable, -m, ipykernel_launcher, ...]`;
    restricting the spec manager to that folder means no user-level or system `python3`
    kernel (possibly another environment) can be picked up instead. Connection files go to a
    private runtime folder too, so a read-only home does not matter.
    """
    prefix = tmp_path_factory.mktemp("kernel")
    install_kernelspec(kernel_name=KERNEL_NAME, prefix=str(prefix), display_name="grpo-lab tests")
    kernels = prefix / "share" / "jupyter" / "kernels"
    spec_file = kernels / KERNEL_NAME / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["env"] = plotting_environment(prefix / "matplotlib")
    spec_file.write_text(json.dumps(spec))
    specs = KernelSpecManager(kernel_dirs=[str(kernels)])
    assert specs.get_kernel_spec(KERNEL_NAME).argv[0] == sys.executable
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_RUNTIME_DIR", str(prefix / "runtime"))
        yield specs


def execute(notebook, kernel_specs, timeout_s: float) -> None:
    """Run every cell in a fresh kernel from `kernel_specs`; the whole run must fit in `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    kernel = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_specs)
    try:
        NotebookClient(
            notebook,
            km=kernel,
            timeout_func=lambda cell: max(1, int(deadline - time.monotonic())),
            resources={"metadata": {"path": str(NOTEBOOK_DIR)}},  # run from notebooks/, as Jupyter would
        ).execute()
    finally:
        # nbclient shuts down only a kernel manager it made itself: one passed in keeps its kernel (about 300 MB
        # each) alive until the test process ends, so a whole run would hold one per lesson
        if kernel.has_kernel:
            kernel.shutdown_kernel(now=True)


def test_the_kernel_is_the_interpreter_running_the_tests(kernel_specs):
    """The notebooks run on sys.executable (this environment's lab and torch), not another Python."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.executable)")])
    execute(notebook, kernel_specs, NOTEBOOK_TIMEOUT_S)
    assert notebook.cells[0].outputs[0]["text"].strip() == sys.executable
    kernels = [p for p in psutil.Process().children(recursive=True) if "ipykernel_launcher" in " ".join(p.cmdline())]
    assert not kernels, "execute() left its kernel running: a whole run would hold one per lesson"


def output_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


def check_call(source: str) -> ast.Call:
    """The `check(...)` call of a check cell."""
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == "check"]
    assert len(calls) == 1, "a check cell makes one check(...) call"
    return calls[0]


def hidden_answers(source: str) -> list[str]:
    """The source of each of the lab's answers a check cell hides from the student's functions (`without=`)."""
    hidden = [k.value for k in check_call(source).keywords if k.arg == "without"]
    return [ast.get_source_segment(source, e) for value in hidden for e in getattr(value, "elts", [value])]


def function_answers(notebook, exercise: int, check: int) -> list[str]:
    """The answers of an exercise that are functions the student writes (defined in the exercise cell)."""
    defined = {node.name for node in ast.parse(notebook.cells[exercise].source).body
               if isinstance(node, ast.FunctionDef)}
    answers = [a.id for a in check_call(notebook.cells[check].source).args[2:] if isinstance(a, ast.Name)]
    return [name for name in answers if name in defined]


UNHIDDEN = {
    "05_silent_bugs": "each answer is a check of a function, and the lab has no function that is that check",
    "10_before_rl/Exercise 3": "the exercise is which policy to give the lab's sequence_log_probs, which it calls",
    "11_reward_models/Exercise 3": "the gap is a line over the lesson's own tables; no lab function computes it",
}
"""Function exercises whose check hides nothing, and why: every other one hides the lab's own answer."""

DELEGATION_REJECTED = "delegation rejected:"


def delegations(notebook, found) -> list[str]:
    """For every function answer and every lab answer its check hides: the solution's code, then the answer
    redefined to only call that lab answer, then the check, which must reject it (a CallsTheLab error)."""
    cells = []
    for exercise, solution, check in found:
        source = notebook.cells[check].source
        for name in function_answers(notebook, exercise, check):
            for hidden in hidden_answers(source):
                cells.append(f"{solution_code(notebook.cells[solution].source)}\n"
                             f"def {name}(*args, **kwargs):  # only calls the lab's own answer\n"
                             f"    return {hidden}(*args, **kwargs)\n\n\n"
                             f"from lab.exercises import WrongAnswer\n"
                             f"try:\n{textwrap.indent(source, '    ')}\n"
                             f"except WrongAnswer as error:\n    print({DELEGATION_REJECTED!r}, {hidden!r}, error)")
    return cells


def with_solutions_after(notebook, found) -> list[tuple[int, int]]:
    """Append to `notebook`, after its last cell, a cell that sets LAB_EXERCISES=solved in the kernel and,
    for each exercise, its solution's code then a copy of its check: what a student does who pastes a
    solution into the cell and reruns it and its check. Returns (original check, appended check) indices.

    Later cells use the lab's functions, never the student's (notebooks/README.md), so running the
    solutions after the lesson, in the same kernel, checks each as a solved lesson would.
    """
    notebook.cells.append(nbformat.v4.new_code_cell(
        f"import os\nos.environ[{SOLVED_ENV!r}] = 'solved'  # an unsolved check is now an error"))
    pairs = []
    for _, solution, check in found:
        notebook.cells.append(nbformat.v4.new_code_cell(solution_code(notebook.cells[solution].source)))
        notebook.cells.append(nbformat.v4.new_code_cell(notebook.cells[check].source))
        pairs.append((check, len(notebook.cells) - 1))
    return pairs


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_function_exercise_hides_the_labs_own_answer_from_the_students_function(path):
    """A function that only calls the lab's answer must fail its check (`lab.exercises.check`'s `without`): every
    exercise whose answer is a function names, in its check, the lab functions it compares with, unless UNHIDDEN
    says why the lab has none. (The delegating answers themselves are run, and must fail, by the lesson test.)"""
    notebook = nbformat.read(path, as_version=4)
    for exercise, _, check in exercises(notebook):
        if not function_answers(notebook, exercise, check):
            continue
        title = ast.literal_eval(check_call(notebook.cells[check].source).args[0])
        exempt = path.stem in UNHIDDEN or f"{path.stem}/{title.split(',')[0].split(':')[0]}" in UNHIDDEN
        assert exempt or hidden_answers(notebook.cells[check].source), (
            f"{title}: its check hides none of the lab's functions (without=...), so `return lab_function(...)` passes")


def run_as_a_student_then_solved(notebook, kernel_specs, monkeypatch, draws: bool = True) -> None:
    """"Run all" on `notebook` as committed, then each solution and its check in the same kernel.

    The student's run executes without error, draws at least one figure (where `draws`), every check
    says "not yet solved" and no solution's code appears in the output. Then, with LAB_EXERCISES=solved
    set in the kernel (an unsolved check is an error), each solution's code runs followed by its
    check, which must print "solved"; last, each function answer redefined to only call a lab answer
    its check hides (`delegations`) must be rejected. The whole, lesson and solutions, must fit in NOTEBOOK_TIMEOUT_S:
    it is enforced as a timeout, each cell may use only what is left of it.
    """
    found = exercises(notebook)
    lesson_cells = len(notebook.cells)
    pairs = with_solutions_after(notebook, found)
    delegating = delegations(notebook, found)
    notebook.cells.extend(nbformat.v4.new_code_cell(cell) for cell in delegating)
    monkeypatch.delenv(SOLVED_ENV, raising=False)  # the kernel inherits the environment: a student's
    execute(notebook, kernel_specs, NOTEBOOK_TIMEOUT_S)

    lesson = notebook.cells[:lesson_cells]
    figures = [o for c in lesson if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert figures or not draws, "the lesson draws no figure"
    printed = "".join(output_text(c) for c in lesson)
    for _, solution, check in found:
        assert NOT_YET_SOLVED in output_text(notebook.cells[check]), f"check cell {check}"
        assert solution_code(notebook.cells[solution].source).strip() not in printed, f"solution {solution} printed"
    for check, rerun in pairs:
        assert re.search(r": solved$", output_text(notebook.cells[rerun]), re.M), (
            f"check cell {check} did not pass with its solution")
    for cell, source in zip(notebook.cells[len(notebook.cells) - len(delegating):], delegating):
        printed = output_text(cell)
        assert DELEGATION_REJECTED in printed and "CallsTheLab" in printed, (
            f"a function that only calls the lab's answer passed its check:\n{source}\n{printed}")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_students_run_all_then_every_solution_in_the_same_kernel(path, kernel_specs, monkeypatch):
    """Each lesson, executed once: a student's "Run all", then its solutions and checks in the same kernel
    (run_as_a_student_then_solved)."""
    start = time.monotonic()
    run_as_a_student_then_solved(nbformat.read(path, as_version=4), kernel_specs, monkeypatch)
    print(f"{path.stem}: {time.monotonic() - start:.1f} s")


def exercise_notebook(exercise: str, solution: str):
    """A one-exercise lesson: an exercise cell, its collapsed solution holding `solution`, and a check."""
    def tagged(cell, tag):
        cell.metadata["tags"] = [tag]
        return cell

    return nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from lab.exercises import check\n\n"
                                  "def test_double(double):\n    assert double(2) == 4"),
        tagged(nbformat.v4.new_code_cell(exercise), EXERCISE_TAG),
        tagged(nbformat.v4.new_markdown_cell(
            f"<details><summary>Solution</summary>\n\n```python\n{solution}\n```\n\n</details>"), SOLUTION_TAG),
        nbformat.v4.new_code_cell('check("double", test_double, double)'),
    ])


UNSOLVED = "def double(x):\n    return ..."
RIGHT = "def double(x):\n    return 2 * x"


def test_the_lesson_harness_passes_a_right_solution_and_catches_wrong_ones(kernel_specs, monkeypatch):
    """The harness on a one-exercise lesson: a right solution passes; a wrong solution, and an exercise
    committed already solved (the student's run does not say "not yet solved"), are both caught."""
    run_as_a_student_then_solved(exercise_notebook(UNSOLVED, RIGHT), kernel_specs, monkeypatch, draws=False)
    with pytest.raises(CellExecutionError, match="WrongAnswer"):
        run_as_a_student_then_solved(exercise_notebook(UNSOLVED, "def double(x):\n    return x + 1"),
                                     kernel_specs, monkeypatch, draws=False)
    with pytest.raises(AssertionError, match="check cell 3"):
        run_as_a_student_then_solved(exercise_notebook(RIGHT + "  # was ...", RIGHT), kernel_specs, monkeypatch,
                                     draws=False)


def test_the_kernel_draws_inline_whatever_plotting_variables_the_shell_exported(kernel_specs, monkeypatch,
                                                                               tmp_path):
    """With MPLBACKEND=Agg and a matplotlibrc choosing Agg exported, a figure still reaches the notebook.

    This used to fail all five lessons with "the lesson draws no figure" on machines that export
    MPLBACKEND=Agg. A figure shown in a cell must come back as an `image/png` output.
    """
    (tmp_path / "matplotlibrc").write_text("backend: Agg\n")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path))
    monkeypatch.setenv("MATPLOTLIBRC", str(tmp_path))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()")])
    execute(notebook, kernel_specs, NOTEBOOK_TIMEOUT_S)
    assert any("image/png" in o.get("data", {}) for o in notebook.cells[0].outputs)


HARNESS_LESSON = "02_grpo_deltas_and_losses"
"""The lesson run end to end under an exported MPLBACKEND: one suffices (the backend is chosen per kernel),
so the quickest to execute."""


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MPLBACKEND") == "Agg", reason="this is the run it starts")
def test_a_lesson_runs_under_an_exported_mplbackend():
    """The whole harness, end to end, in a pytest started with MPLBACKEND=Agg exported: the lesson
    still draws its figures and passes (one lesson suffices: the backend is chosen per kernel, the
    same way for every lesson)."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__)),
         "-k", f"test_a_students_run_all_then_every_solution_in_the_same_kernel and {HARNESS_LESSON}"],
        env=env, capture_output=True, text=True, timeout=4 * NOTEBOOK_TIMEOUT_S, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
