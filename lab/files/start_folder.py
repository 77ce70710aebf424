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

from pathlib import Path

from lab.files.output_folders import sha256
from lab.files.run_folder import load_run_policy, read_run


def start_sha256(folder: str | Path, option: str = "--init-from") -> str:
    """The sha256 of a lab run folder's policy.pt, after checking the folder (`read_run`: the path, the mark, every
    file) and its policy (finite, the one its config.json describes): a `ValueError` naming the problem."""
    run = read_run(folder, option)
    if run.summary["status"] != "ok":
        raise ValueError(f"{run.where}: its summary.json does not say \"status\": \"ok\" (a diverged or "
                         "unfinished run has no final policy)")
    load_run_policy(run)
    return sha256(run.path / "policy.pt")


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
            *([] if kind == "factorized" else  # its response length is its prompt length: that line says it
              [("max length", "--max-length", start.response_length, wanted.response_length)]),
            ("width", "--dim", state["embedding"].shape[-1], config.dim)):
        if have != need:
            lines.append(f"{option} {folder}: its policy has {words} {have}, these settings need {need} "
                         f"({option_name})")
    return lines
