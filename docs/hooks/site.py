"""The documentation site's hook (mkdocs.yml): what lives outside docs/ joins the site, and the command
reference is generated from the command line itself, so neither can drift.

    README.md                  the start page (a README is its folder's index)
    notebooks/README.md        the lessons' page
    notebooks/NN_name.ipynb    its executed copy in build/executed/ (docs/hooks/execute_lessons.py), rendered by
                               mkdocs-jupyter without running it; the nav's Lessons, each lesson found by its name
    figures/RESULTS.md, *.png  the results
    cli.md                     generated: the `lab` click command walked, each command's help, usage, options
    <path>                     any other repository file a page links, at its own path (a folder: a
                               generated page listing its files)

Every relative link of a page is resolved against the page's real place in the repository and rewritten
to where that file is on the site: README.md's `docs/claims.md` and claims.md's `../tests/proofs/x.py` both
resolve, and `mkdocs build --strict` fails on a link to a file that does not exist.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]
LESSONS = "LESSONS"
"""The placeholder of the nav's Lessons section in mkdocs.yml."""
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
SKIPPED = ("__pycache__", ".ipynb_checkpoints")

EXECUTED = ROOT / "build" / "executed" / "notebooks"
"""The lessons' executed copies, which the site shows (`python docs/hooks/execute_lessons.py` writes them)."""

REAL: dict[str, Path] = {}
"""Each page's source in the repository, by its place on the site (src_uri)."""
SITE_FILES: dict = {}
"""The site's files by src_uri, once they are all known."""


def lessons() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def lesson_title(path: Path) -> str:
    number, words = path.stem.split("_", 1)
    return f"{int(number)}. {words.replace('_', ' ').capitalize()}"


def outside_docs() -> list[Path]:
    """The repository's files that the site shows although they are not under docs/."""
    return [ROOT / "README.md", ROOT / "notebooks" / "README.md", *lessons(), ROOT / "figures" / "RESULTS.md",
            *sorted((ROOT / "figures").glob("*.png"))]


def on_config(config):
    """The Lessons section of the nav: the lessons' page, then every lesson in order."""
    for entry in config["nav"]:
        if isinstance(entry, dict) and LESSONS in entry.values():
            key = next(iter(entry))
            entry[key] = [{"About the lessons": "notebooks/README.md"},
                          *({lesson_title(path): f"notebooks/{path.name}"} for path in lessons())]
    return config


def link_targets(text: str, source: Path) -> list[tuple[str, Path]]:
    """(link as written, the repository path it names) for each relative link of a markdown text."""
    found = []
    for _, target, _ in LINK.findall(text):
        path = target.split("#", 1)[0]
        if path and not re.match(r"[a-z][a-z0-9+.-]*:", path) and not path.startswith("/"):
            found.append((target, (source.parent / path).resolve()))
    return found


def listing(folder: Path, uri: str) -> str:
    """A page for a linked folder: its files, each linked."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    items = "\n".join(f"- [{name}]({name})" for name in names)
    return f"# {folder.relative_to(ROOT).as_posix()}/\n\n{items}\n"


def add_source(files, config, path: Path) -> None:
    """Put a repository file on the site at its own path (a folder: a page listing its files)."""
    relative = path.relative_to(ROOT).as_posix()
    if path.is_dir():
        uri = f"{relative}/index.md"
        if uri not in REAL:
            REAL[uri] = path / "index.md"
            files.append(File.generated(config, uri, content=listing(path, uri), inclusion=InclusionLevel.NOT_IN_NAV))
            for child in sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")):
                add_source(files, config, child)
    elif relative not in REAL:
        REAL[relative] = path
        if path.suffix == ".ipynb" and path.parent.name == "notebooks":
            files.append(executed_lesson(config, relative, path))
            return
        # a page the nav does not name (a linked source, such as figures/trl_comparison.md) is on the site, not in
        # the nav, and says so: mkdocs's `omitted_files` check would count it as a page forgotten from the nav
        in_nav = relative in nav_pages(config)
        files.append(File(relative, str(ROOT), config["site_dir"], config["use_directory_urls"],
                          inclusion=InclusionLevel.UNDEFINED if in_nav or not relative.endswith(".md")
                          else InclusionLevel.NOT_IN_NAV))


def executed_lesson(config, relative: str, lesson: Path) -> File:
    """The lesson at its own place on the site, read from its executed copy (the build runs no lesson)."""
    from mkdocs.exceptions import PluginError

    executed = EXECUTED / lesson.name
    sources = [s for s in (lesson, lesson.with_suffix(".py")) if s.exists()]
    if not executed.exists() or any(s.stat().st_mtime > executed.stat().st_mtime for s in sources):
        raise PluginError(f"{relative} has no up-to-date executed copy in build/executed/: run "
                          "`python docs/hooks/execute_lessons.py` first (it executes the lessons that changed)")
    # the same place on the site, read from the copy: build/executed/ is this file's source folder (mkdocs-jupyter
    # wraps the File and reads the path mkdocs derives from src_dir and src_uri, so the path itself cannot be set)
    return File(relative, str(EXECUTED.parent), config["site_dir"], config["use_directory_urls"])


def nav_pages(config) -> set[str]:
    """Every page the nav names (the lessons' section included, once `on_config` has filled it)."""
    found, entries = set(), list(config["nav"] or [])
    while entries:
        entry = entries.pop()
        if isinstance(entry, str):
            found.add(entry)
        elif isinstance(entry, dict):
            entries.extend(entry.values())
        elif isinstance(entry, list):
            entries.extend(entry)
    return found


def site_place(path: Path) -> str | None:
    places = {real: uri for uri, real in REAL.items()}
    return places.get(path) or places.get(path / "index.md")


@event_priority(50)  # before mkdocs-jupyter's on_files, which must see the lessons added here
def on_files(files, config):
    REAL.clear()
    docs = Path(config["docs_dir"]).resolve()
    REAL.update({file.src_uri: docs / file.src_uri for file in files})
    for path in outside_docs():
        add_source(files, config, path)
    REAL["cli.md"] = docs / "cli.md"
    files.append(File.generated(config, "cli.md", content=cli_reference()))
    for uri, source in list(REAL.items()):
        if uri.endswith(".md") and source.is_file():
            for _, path in link_targets(source.read_text(), source):
                if path.exists() and path.is_relative_to(ROOT) and not any(s in path.parts for s in SKIPPED) \
                        and site_place(path) is None:
                    add_source(files, config, path)
    SITE_FILES.clear()
    SITE_FILES.update({file.src_uri: file for file in files})
    return files


def on_page_markdown(markdown, page, config, files):
    """Each relative link rewritten from the page's real place to the site's place of its target."""
    source, here = REAL.get(page.file.src_uri), posixpath.dirname(page.file.src_uri)
    if source is None:
        return markdown

    def rewrite(match):
        target = match.group(2)
        for written, path in link_targets(f"]({target})", source):
            place = site_place(path)
            if place is not None:
                anchor = "#" + written.split("#", 1)[1] if "#" in written else ""
                return f"{match.group(1)}{posixpath.relpath(place, here or '.')}{anchor}{match.group(3)}"
        return match.group(0)
    return LINK.sub(rewrite, markdown)


HREF = re.compile(r'(href=")([^"]+)(")')


def on_post_page(output, page, config):
    """A lesson's links, which mkdocs-jupyter renders without the markdown step above, rewritten the same way."""
    source = REAL.get(page.file.src_uri)
    if source is None or source.suffix != ".ipynb":
        return output

    def rewrite(match):
        for written, path in link_targets(f"]({match.group(2)})", source):
            target = SITE_FILES.get(site_place(path))
            if target is not None:
                anchor = "#" + written.split("#", 1)[1] if "#" in written else ""
                return f"{match.group(1)}{relative_url(target.url, page.url)}{anchor}{match.group(3)}"
        return match.group(0)
    return HREF.sub(rewrite, output)


def relative_url(target: str, page: str) -> str:
    """The address of site URL `target` from a page at URL `page` (both as mkdocs writes them)."""
    relative = posixpath.relpath(target or ".", page or ".")
    return relative + "/" if target.endswith("/") and relative != "." else relative


def cli_reference() -> str:
    """Every `lab` command's help, usage and options, read from the click command typer builds."""
    import click
    import typer

    from lab.cli import app

    root = typer.main.get_command(app)
    context = click.Context(root, info_name="lab")
    lines = ["# Command reference", "",
             "Generated from the `lab` command itself when the site is built; `lab <command> --help` prints the same.",
             ""]
    for name in root.list_commands(context):
        command = root.get_command(context, name)
        sub = click.Context(command, info_name=name, parent=context)
        lines += [f"## lab {name}", "", (command.help or "").replace("\b\n", "").strip(), "",
                  "```text", command.get_usage(sub), "```", "", "| option | meaning |", "| --- | --- |"]
        for param in command.get_params(sub):
            record = param.get_help_record(sub)
            if record:
                names, text = record
                lines.append(f"| `{names}` | {text.replace('|', '&#124;')} |")
        lines.append("")
    return "\n".join(lines)
