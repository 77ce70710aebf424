"""The student README: short, every link alive, and every output it quotes what the lab prints today.

    length  = at most MAX_LINES lines (the details live in docs/)
    links   = every relative link [text](path) and image names an existing file
    outputs = each ```text block quotes the summary line of the `lab run` in the ```bash block above it;
              the test runs that command and compares everything before the seconds

A number in the README is either checked here (the quoted outputs), in tests/lessons (the lessons it
links), or not there.
"""

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from lab.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 170
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SUMMARY_HEAD = re.compile(r"^final mean reward .*? prompts sorted\)", re.MULTILINE)
"""The part of `lab run`'s summary line that does not depend on the machine (the seconds follow it)."""


def dead_links(text: str) -> list[str]:
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not (ROOT / t).exists()]


def quoted_runs(text: str) -> list[tuple[list[str], str]]:
    """(the arguments of the last `lab run` in the bash block before each text block, the quoted summary)."""
    pairs, command = [], None
    for kind, body in BLOCK.findall(text):
        runs = [line.split("lab ", 1)[1] for line in body.splitlines() if re.search(r"\blab run\b", line)]
        if kind == "bash" and runs:
            command = shlex.split(runs[-1].split("#")[0])
        elif kind == "text":
            pairs.append((command, SUMMARY_HEAD.search(body).group(0)))
    return pairs


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= MAX_LINES


def test_every_readme_link_names_an_existing_file():
    text = README.read_text()
    assert LINK.findall(text), "no links found: the pattern is wrong"
    assert dead_links(text) == []
    assert dead_links(text + "\n[gone](docs/gone.md)\n") == ["docs/gone.md"]


def test_the_outputs_the_readme_quotes_are_what_the_lab_prints(tmp_path):
    """The main job's summary (0/3 sorted at the lecture's initialisation) and the one-flag run that sorts."""
    pairs = quoted_runs(README.read_text())
    assert [args for args, _ in pairs] == [["run", "--delta", "centered", "--loss", "clipped"],
                                           ["run", "--delta", "centered", "--loss", "clipped", "--init-scale", "0.1"]]
    for number, (args, quoted) in enumerate(pairs):
        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / str(number))])
        assert result.exit_code == 0, result.output
        assert SUMMARY_HEAD.search(result.output).group(0) == quoted, result.output


def test_the_pictures_caption_says_what_its_command_gives(tmp_path):
    """The caption's sweep, run again: at the lecture's initialisation no seed sorts every prompt, at a ten
    times smaller one every seed does (the picture is that sweep's curves.png)."""
    caption = re.search(r"Made with `lab (sweep [^`]+)`", README.read_text()).group(1)
    result = CliRunner().invoke(app, [*shlex.split(caption), "--out", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    rows = {re.search(r"init_scale=[\d.]+", line).group(0): line for line in result.output.splitlines()
            if "init_scale=" in line}
    assert set(rows) == {"init_scale=1.0", "init_scale=0.1"}
    assert " 0% [" in rows["init_scale=1.0"] and " 100% [" in rows["init_scale=0.1"]
    assert (ROOT / "figures" / "learning_curves.png").is_file()


def _closure(names: list[str]) -> set[str]:
    """The distributions `names` need, transitively (extras and environment markers left out)."""
    import importlib.metadata as md

    seen, todo = set(), [re.split(r"[\s<>=!~;\[(]", n, 1)[0].lower().replace("_", "-") for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        todo += [re.split(r"[\s<>=!~;\[(]", r, 1)[0].lower().replace("_", "-") for r in requires if "extra ==" not in r]
    return seen


def test_what_trl_adds_to_the_install_is_what_the_readme_says():
    """The README's 'about N MB' for the trl extra: the size of the distributions it brings that nothing else of
    the install needs, within 35%."""
    import importlib.metadata as md
    import os
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    others = _closure([*extras["dependencies"], *(r for k, rs in extras["optional-dependencies"].items()
                                                  if k != "trl" for r in rs)])
    added = _closure(extras["optional-dependencies"]["trl"]) - others
    size = sum(os.path.getsize(d.locate_file(f)) for name in added for d in [md.distribution(name)]
               for f in d.files or [] if os.path.exists(d.locate_file(f))) / 1e6
    stated = int(re.search(r"about (\d+) MB", README.read_text()).group(1))
    assert abs(size - stated) <= 0.35 * stated, f"the trl extra adds {size:.0f} MB, the README says {stated}"
