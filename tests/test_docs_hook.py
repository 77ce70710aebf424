"""The documentation site's hook (docs/hooks/site.py), without building the site.

    the nav's Lessons section lists every notebooks/NN_*.ipynb, in order (a new lesson needs no edit)
    the command reference is generated from the click command: every command, every option of each
    a link is rewritten from its page's real place to where its target is on the site
"""

import importlib.util
from pathlib import Path

import click
import typer

from lab.cli import app

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("site_hook", ROOT / "docs" / "hooks" / "site.py")
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)


def test_the_lessons_section_lists_every_lesson_in_order():
    config = {"nav": [{"Home": "README.md"}, {"Lessons": hook.LESSONS}]}
    lessons = hook.on_config(config)["nav"][1]["Lessons"]
    found = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [next(iter(entry.values())) for entry in lessons] == ["notebooks/README.md",
                                                                 *(f"notebooks/{name}" for name in found)]
    assert next(iter(lessons[1])) == "1. Policy gradient and baselines"


def test_the_command_reference_has_every_command_and_option():
    text = hook.cli_reference()
    root = typer.main.get_command(app)
    context = click.Context(root, info_name="lab")
    for name in root.list_commands(context):
        assert f"## lab {name}\n" in text
        command = root.get_command(context, name)
        for param in command.params:
            for option in getattr(param, "opts", []):
                assert f"`{option}" in text or f", {option}" in text or f"/{option}" in text, (name, option)


def test_links_are_rewritten_from_the_pages_real_place():
    hook.REAL.clear()
    hook.REAL.update({"README.md": ROOT / "README.md", "claims.md": ROOT / "docs" / "claims.md",
                      "notebooks/01_policy_gradient_and_baselines.ipynb":
                          ROOT / "notebooks" / "01_policy_gradient_and_baselines.ipynb"})

    class Page:
        class file:
            src_uri = "README.md"

    markdown = "[c](docs/claims.md#claim-3) [l](notebooks/01_policy_gradient_and_baselines.ipynb) [w](https://x.org)"
    assert hook.on_page_markdown(markdown, Page, {}, None) == (
        "[c](claims.md#claim-3) [l](notebooks/01_policy_gradient_and_baselines.ipynb) [w](https://x.org)")
