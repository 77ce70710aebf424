"""A finished run's policy as the start of another (`--init-from`) or as the source of SFT's demonstrations
(`--demos-from`): the folder checked before any training.

    RUN/.lab-output  the lab's mark: the folder was written by `lab run`, and its files are as it wrote them
    RUN/summary.json "status": "ok" (a diverged run has no final policy)
    RUN/policy.pt    a policy of the kind and shape the settings ask for: each mismatch one line
                     (--policy, --vocab-size, --dim, --prompt-length, --max-length)

`start_sha256` checks the folder and returns the sha256 of its policy.pt (recorded in config.json, so a run
says which policy it started from); `start_mismatches` lists what does not fit the settings. Both raise or
return before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.files.output_folders import MARKER, read_marker, sha256
from lab.files.run_folder import check_unchanged


def start_sha256(folder: str | Path, option: str = "--init-from") -> str:
    """The sha256 of a lab run folder's policy.pt, after checking the folder (a `ValueError` naming the problem)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{option} {folder}: no such run folder")
    if not (folder / MARKER).is_file():
        raise ValueError(f"{option} {folder}: no {MARKER} mark in it: not a folder written by lab run")
    check_unchanged(folder, option)
    command = (read_marker(folder) or {}).get("command")
    if command != "run":
        raise ValueError(f"{option} {folder}: written by lab {command}, not lab run (a sweep keeps no policy; train "
                         "the start with lab run)")
    try:
        status = json.loads((folder / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        status = None
    if status != "ok":
        raise ValueError(f"{option} {folder}: its summary.json does not say \"status\": \"ok\" (a diverged or "
                         "unfinished run has no final policy)")
    if not (folder / "policy.pt").is_file():
        raise ValueError(f"{option} {folder}: no policy.pt in it")
    return sha256(folder / "policy.pt")


def start_mismatches(folder: str | Path, config, task, option: str = "--init-from") -> list[str]:
    """One line per way the folder's policy does not fit the settings (none: it fits)."""
    import torch

    from lab.policies import make_policy, policy_from_state
    from lab.training.lengths import resolve_max_length

    path = Path(folder) / "policy.pt"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        start = policy_from_state({name: value.unsqueeze(0) for name, value in state.items()})
    except Exception as e:  # a damaged or foreign file: say which, not how torch failed
        return [f"{path}: cannot read policy.pt ({type(e).__name__})"]
    kind = "autoregressive" if "previous" in state else "factorized"
    if kind != config.policy.value:
        return [f"{option} {folder}: its policy is {kind}, these settings train the {config.policy.value} policy "
                "(--policy)"]
    prompt_length = task.prompts.shape[1]
    length = task.response_length if kind == "factorized" else resolve_max_length(config, prompt_length)
    wanted = make_policy(kind, task.vocab_size, prompt_length, length, config.dim)
    lines = []
    for words, option_name, have, need in (
            ("vocabulary size", "--vocab-size", start.vocab_size, wanted.vocab_size),
            ("prompt length", "--prompt-length / --prompts", start.prompt_length, wanted.prompt_length),
            ("response length" if kind == "factorized" else "max length", "--max-length", start.response_length,
             wanted.response_length),
            ("width", "--dim", state["embedding"].shape[-1], config.dim)):
        if have != need:
            lines.append(f"{option} {folder}: its policy has {words} {have}, these settings need {need} "
                         f"({option_name})")
    return lines
