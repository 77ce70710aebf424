"""Reading a folder the lab wrote: the path, the mark, then each file, checked like every path the lab writes.

    read FOLDER  <=>  every name on the path fits NAME_MAX and the path PATH_MAX (`lab.files.writable`),
                      FOLDER exists and is a folder,
                      FOLDER/.lab-output is a file (no link), valid JSON, names the lab and the COMMAND expected,
                      lists only plain names inside FOLDER (no `/`, no `..`: `marker_problem`),
                      and every file it lists is there, a file (no link), with the sha256 it lists
    then         each file parsed defensively: JSON of at most `JSON_BYTES`, nested at most `JSON_DEPTH` deep
                 (`read_json`); the readers of each kind check fields, ranges, shapes and finiteness

A mark proves who wrote a folder, not that its content is sound (a script can rewrite a mark to match edited
files), so the readers (`lab.files.run_folder.read_run`, `lab.files.reward_model_folder.read_reward_model`)
check the content too. Every problem is a `ValueError` of one line naming the option, the file and what is
allowed, before any training: the command ends with exit code 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lab.files.output_folders import MARKER, marker_problem, read_marker, sha256
from lab.files.writable import name_max, nearest_existing, path_max

JSON_BYTES = 256 << 20
"""The largest JSON file the lab reads back (a config.json of 30,000-token prompts is under a megabyte)."""
JSON_DEPTH = 32
"""The deepest nesting the lab's own JSON files have is 4 (`"task"` -> `"prompts"` -> a prompt)."""


def shown(path) -> str:
    """A path as a message shows it: whole up to 80 characters, else its start."""
    text = str(path)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(os.fsencode(text))} bytes)"


def named(option: str, path) -> str:
    """`--init-from runs/a`, `--reward learned:runs/rm`: how the command line named a folder, for messages."""
    option = option.rstrip()
    return f"{option}{shown(path)}" if option.endswith(":") else f"{option} {shown(path)}"


def check_path_fits(path, option: str) -> None:
    """A `ValueError` when a name on `path` is longer than the file system allows, or the path itself is:
    asked before any other look at the path (the system answers a look at such a name with an error)."""
    absolute = Path(os.path.abspath(path))
    existing = nearest_existing(absolute)
    longest = path_max(existing)
    if len(os.fsencode(absolute)) >= longest:
        raise ValueError(f"{named(option, path)}: the path is {len(os.fsencode(absolute))} bytes long, more than the "
                         f"{longest - 1} this file system allows")
    limit = name_max(existing)
    for name in Path(path).parts:
        if len(os.fsencode(name)) > limit:
            raise ValueError(f"{named(option, path)}: the name {name[:20]}... is {len(os.fsencode(name))} bytes "
                             f"long, more than the {limit} this file system allows")


def check_folder(path, option: str, what: str) -> Path:
    """`path` as a folder that exists (`what` names the kind the option wants, for the message)."""
    check_path_fits(path, option)
    folder = Path(path)
    if not folder.exists():
        raise ValueError(f"{named(option, path)}: no such {what}")
    if not folder.is_dir():
        raise ValueError(f"{named(option, path)}: not a folder")
    return folder


def check_marked(folder: Path, option: str, command: str) -> dict:
    """The folder's mark, after checking it is sound and vouches for every file it lists (module docstring)."""
    where = named(option, folder)
    if not os.path.lexists(folder / MARKER):
        raise ValueError(f"{where}: no {MARKER} mark in it: not a folder written by lab {command}")
    problem = marker_problem(folder)
    if problem is not None:
        raise ValueError(f"{where}: {problem}, so it is not a folder the lab wrote")
    marker = read_marker(folder)
    if marker.get("command") != command:
        raise ValueError(f"{where}: written by lab {str(marker.get('command'))[:40]}, not lab {command}")
    for name, digest in marker["files"].items():
        path = folder / name
        if not os.path.lexists(path):
            raise ValueError(f"{where}: its {name} is missing, though {MARKER} lists it; put the file back, or "
                             f"run lab {command} again")
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"{where}: its {name} is a link or not a file; {MARKER} vouches for files the lab wrote")
        if sha256(path) != digest:
            raise ValueError(f"{where}: its {name} is not the file lab {command} wrote (its sha256 differs from "
                             f"{MARKER}'s); put the file back, or run lab {command} again")
    return marker


def check_unmarked_files(folder: Path, option: str, names) -> None:
    """In a folder without a mark: each of `names` that is there must be a plain file (no link, no folder)."""
    for name in names:
        path = folder / name
        if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):
            raise ValueError(f"{named(option, folder)}: its {name} is a link or not a file")


def read_json(path: Path, where: str, required: bool = True):
    """`path` parsed as JSON, of at most `JSON_BYTES` and nested at most `JSON_DEPTH` deep; None when it is missing
    and not `required`; a `ValueError` naming the file otherwise."""
    try:
        if os.path.getsize(path) > JSON_BYTES:
            raise ValueError(f"{where}: its {path.name} is larger than {JSON_BYTES >> 20} MB, which no file the lab "
                             "writes is")
        data = json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        if not required:
            return None
        raise ValueError(f"{where}: no {path.name} in it") from None
    except OSError as e:
        raise ValueError(f"{where}: its {path.name} cannot be read ({e.strerror})") from None
    except RecursionError:
        raise ValueError(f"{where}: its {path.name} is nested deeper than the {JSON_DEPTH} levels allowed") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors; so is ours above
        if str(e).startswith(where):
            raise
        raise ValueError(f"{where}: its {path.name} is not valid JSON ({str(e)[:60]})") from None
    if depth(data) > JSON_DEPTH:
        raise ValueError(f"{where}: its {path.name} is nested deeper than the {JSON_DEPTH} levels allowed")
    return data


def depth(value) -> int:
    """How deep lists and objects nest in `value` (0 for a number or a string, 1 for `[1, 2]`), without recursion."""
    deepest, stack = 0, [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > JSON_DEPTH:
            return level
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
