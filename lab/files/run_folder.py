"""Reading a `lab run` folder back: its final policy and the task it was trained on, or a clear error.

    RUN/policy.pt    -> the policy (`lab.policies.load_policy`)
    RUN/config.json  -> "task": {"name": str, "prompts": [[int, ...], ...], "vocab_size": int, ...}
    RUN/summary.json -> "status": "ok" | "diverged" (a diverged run has no final policy)
    RUN/config.json  -> "config": {"reward": str, ...}   the reward it was trained under (`run_reward`)
    RUN/.lab-output  -> where present, every one of these files must still have the sha256 it lists
                        (a policy.pt dropped in from another run is refused, naming the file)

Every problem (missing file, bad JSON, a missing key, a wrong type, a policy that does not fit the
prompts) is a `ValueError` naming the file and what is wrong: a damaged folder never makes a
command fall back to other prompts.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from tasks import LEARNED


def load_run(folder, need_task: bool = True) -> tuple[nn.Module, dict | None]:
    """A `lab run` folder's final policy (PATH/policy.pt) and its task description from
    PATH/config.json (`{"name", "prompts", "vocab_size", ...}`), so the policy is diagnosed on the
    prompts it was trained on. A damaged or incomplete folder is a `ValueError` naming the file and
    the problem; nothing falls back to other prompts. `need_task=False` (the caller gives the
    prompts) skips config.json."""
    from lab.policies.autoregressive import AutoregressivePolicy
    from lab.policies import load_policy

    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--from-run {folder}: no such run folder")
    check_unchanged(folder)  # before any of its JSON is parsed: a marked folder is read only as the lab wrote it
    summary = _read_json(folder / "summary.json", required=False)
    if isinstance(summary, dict) and summary.get("status") == "diverged":
        raise ValueError(f"{folder / 'summary.json'}: the run diverged, so it has no final policy to diagnose")
    if not (folder / "policy.pt").is_file():
        raise ValueError(f"--from-run {folder}: no policy.pt in it (a folder written by lab run)")
    try:
        policy = load_policy(folder / "policy.pt")
    except Exception as e:  # a damaged or foreign file: say which, not how torch failed
        raise ValueError(f"{folder / 'policy.pt'}: cannot read policy.pt ({type(e).__name__})") from None
    for name, parameter in policy.named_parameters():
        if not torch.isfinite(parameter).all():
            raise ValueError(f"{folder / 'policy.pt'}: its parameter {name} holds NaN or inf values; a diverged "
                             "policy has no gradient to diagnose")
    if isinstance(policy, AutoregressivePolicy):
        raise ValueError(f"--from-run {folder}: an autoregressive run; lab diagnose analyses the factorised policy "
                         "(for variable-length responses use lab.exact.varlen.expected_update from Python)")
    return policy, _run_task(folder / "config.json") if need_task else None


def check_unchanged(folder: Path, option: str = "--from-run") -> None:
    """A folder that carries the lab's marker is read only as lab run wrote it: a file the marker does not
    list, or whose sha256 differs, is a `ValueError` naming it. (A folder without a marker is the
    user's own assembly and is read as it is.) `option`: the command-line option that named the folder."""
    from lab.files.output_folders import MARKER, marker_problem, read_marker, sha256

    if not (folder / MARKER).exists():
        return
    problem = marker_problem(folder)
    if problem is not None:
        raise ValueError(f"{option} {folder}: {problem}")
    listed = read_marker(folder)["files"]
    for name in ("policy.pt", "config.json", "summary.json"):
        path = folder / name
        if not path.is_file():
            continue
        if name not in listed or sha256(path) != listed[name]:
            raise ValueError(f"{path}: not the file lab run wrote into this folder (its sha256 differs from "
                             f"{MARKER}'s); put the run's own file back, or diagnose it from a folder of its own")


def run_reward(folder, rewards) -> str | None:
    """The reward the run was trained under (config.json "config"."reward", one of `rewards`), or None where the
    folder has no config.json; a config.json of the wrong shape is a `ValueError` naming the file and field."""
    path = Path(folder) / "config.json"
    data = _read_json(path, required=False)
    if data is None:
        return None
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: \"config\" must be an object with the run's settings (lab run writes one), "
                         f"got {config!r:.40}")
    reward = config.get("reward")
    if isinstance(reward, str) and reward.startswith(LEARNED):
        raise ValueError(f"{folder} was trained against a reward model ({reward:.60}); the exact diagnosis needs a task "
                         f"reward: add --reward, one of {', '.join(rewards)}")
    if reward not in rewards:
        raise ValueError(f"{path}: \"config\".\"reward\" must be one of {', '.join(rewards)}, got {reward!r:.40}")
    return reward


def _read_json(path: Path, required: bool = True):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        if not required:
            return None
        raise ValueError(f"{path}: missing (lab run writes it; or pass --prompts to say which prompts)") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply)") from None


def _run_task(path: Path) -> dict:
    """config.json's "task", checked: name a string, prompts a non-empty list of int lists, vocab_size an int."""
    data = _read_json(path)
    task = data.get("task") if isinstance(data, dict) else None
    if not isinstance(task, dict):
        raise ValueError(f"{path}: no \"task\" object in it (lab run writes one)")
    checks = {"name": (str, "a string"), "vocab_size": (int, "an integer"), "prompts": (list, "a list")}
    if isinstance(task.get("vocab_size"), int) and not 0 < task["vocab_size"] < 2**31:
        raise ValueError(f"{path}: \"task\".\"vocab_size\" must be from 1 to 2**31 - 1, got {task['vocab_size']!r:.40}")
    for key, (kind, words) in checks.items():
        if key not in task:
            raise ValueError(f"{path}: \"task\" has no \"{key}\"")
        if not isinstance(task[key], kind) or isinstance(task[key], bool):
            raise ValueError(f"{path}: \"task\".\"{key}\" must be {words}, got {task[key]!r:.40}")
    if not task["prompts"] or not all(isinstance(row, list) and row and all(
            isinstance(t, int) and not isinstance(t, bool) for t in row) for row in task["prompts"]):
        raise ValueError(f"{path}: \"task\".\"prompts\" must be a non-empty list of non-empty integer lists")
    return task


def check_policy_fits(policy: nn.Module, task, where: str) -> None:
    """A policy's (vocab, prompt length, response length) must be the task's."""
    shape = (policy.vocab_size, policy.prompt_length, policy.response_length)
    wanted = (task.vocab_size, task.prompts.shape[1], task.response_length)
    if shape != wanted:
        raise ValueError(f"{where}: its policy has (vocab, prompt length, response length) "
                         f"{shape}, the prompts need {wanted}; pass matching --prompts/--vocab-size")
