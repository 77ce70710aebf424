"""Reading a `lab run` folder back (`read_run`, the one reader every command uses): its files checked, then its
policy and the task it was trained on, or a clear error.

    RUN/.lab-output  -> the lab's mark, sound, naming lab run, every file it lists there and unchanged
                        (`lab.files.lab_folders.check_marked`; `lab diagnose` also reads a folder with no mark, as
                        the user assembled it, its content checked all the same)
    RUN/config.json  -> "task": {"name": str, "prompts": [[int, ...], ...], "vocab_size": int, ...}
                        "config": {"reward": str, "policy": str, "dim": int, "max_length": int | null, ...}
    RUN/summary.json -> "status": "ok" | "diverged" (a diverged run has no final policy)
    RUN/policy.pt    -> the policy (`lab.policies.load_policy`): finite, and the policy config.json describes
                        (kind, vocabulary, prompt length, response length, width)

Every problem (missing file, bad or too deep JSON, a missing key, a wrong type, a policy that does not fit) is a
`ValueError` naming the option, the file and what is wrong: a damaged folder never makes a command fall back to
other prompts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lab.files.lab_folders import check_folder, check_marked, check_unmarked_files, named, read_json, shown
from lab.files.output_folders import MARKER
from tasks import LEARNED

READ_FILES = ("config.json", "summary.json", "policy.pt")
STATUSES = ("ok", "diverged")


@dataclass(frozen=True)
class LabRun:
    """A run folder whose mark and JSON files were checked (`read_run`)."""

    path: Path
    option: str
    config: dict | None
    """config.json (None only in a folder without a mark and without one)"""
    summary: dict | None

    @property
    def where(self) -> str:
        return named(self.option, self.path)


def read_run(folder, option: str = "--from-run", marked: bool = True) -> LabRun:
    """The run folder `option` names, checked as the module docstring says; `marked=False` also takes a folder
    without the lab's mark (the user's own assembly: only the files that are there are read, each checked)."""
    folder = check_folder(folder, option, "run folder")
    where = named(option, folder)
    if marked or os.path.lexists(folder / MARKER):
        check_marked(folder, option, "run")
    else:
        check_unmarked_files(folder, option, READ_FILES)
    config = read_json(folder / "config.json", where, required=marked)
    summary = read_json(folder / "summary.json", where, required=marked)
    if summary is not None and not (isinstance(summary, dict) and summary.get("status") in STATUSES):
        raise ValueError(f"{where}: its summary.json must be an object whose \"status\" is \"ok\" or \"diverged\" "
                         "(lab run writes one)")
    if config is not None and not isinstance(config, dict):
        raise ValueError(f"{where}: its config.json must be an object (lab run writes one)")
    if marked and not isinstance(config.get("config"), dict):
        raise ValueError(f"{where}: its config.json has no \"config\" object with the run's settings")
    if marked:
        _run_task(folder / "config.json", config)
    return LabRun(folder, option, config, summary)


def load_run_policy(run: LabRun) -> nn.Module:
    """The run's policy.pt as a policy: readable, every parameter finite, and the policy its config.json describes."""
    from lab.policies import policy_from_state

    path = run.path / "policy.pt"
    if not path.is_file():
        raise ValueError(f"{run.where}: no policy.pt in it (a folder written by lab run holds one)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        policy = policy_from_state({name: value.unsqueeze(0) for name, value in state.items()})
    except Exception as e:  # a damaged or foreign file: say which, not how torch failed
        raise ValueError(f"{run.where}: cannot read policy.pt ({type(e).__name__})") from None
    for name, value in state.items():
        if not torch.is_floating_point(value) or not torch.isfinite(value).all():
            raise ValueError(f"{run.where}: its policy.pt's parameter {name} holds NaN or inf values (or is not a "
                             "float tensor); a diverged policy cannot be read back")
    fits = policy_mismatch(run, policy, state)
    if fits:
        raise ValueError(f"{run.where}: its policy.pt is not a policy of this run: {fits}")
    return policy


def policy_mismatch(run: LabRun, policy: nn.Module, state: dict) -> str | None:
    """How the policy differs from the one the run's config.json describes (None: it fits, or nothing says)."""
    from lab.training.lengths import LENGTH_MARGIN

    settings, task = (run.config or {}).get("config"), (run.config or {}).get("task")
    if not isinstance(settings, dict) or not isinstance(task, dict):
        return None
    prompts = task.get("prompts")
    prompt_length = len(prompts[0]) if isinstance(prompts, list) and prompts and isinstance(prompts[0], list) else None
    kind, width = "autoregressive" if "previous" in state else "factorized", state["embedding"].shape[-1]
    length = prompt_length if kind == "factorized" else settings.get("max_length") or (
        None if prompt_length is None else prompt_length + LENGTH_MARGIN)
    for words, have, need in (("kind", kind, settings.get("policy")), ("width", width, settings.get("dim")),
                              ("vocabulary size", policy.vocab_size, task.get("vocab_size")),
                              ("prompt length", policy.prompt_length, prompt_length),
                              ("response length", policy.response_length, length)):
        if need is not None and have != need:
            return f"its {words} is {have}, its config.json says {str(need)[:40]}"
    return None


def load_run(folder, need_task: bool = True) -> tuple[nn.Module, dict | None]:
    """A `lab run` folder's final policy (PATH/policy.pt) and its task description from
    PATH/config.json (`{"name", "prompts", "vocab_size", ...}`), so the policy is diagnosed on the
    prompts it was trained on. A damaged or incomplete folder is a `ValueError` naming the file and
    the problem; nothing falls back to other prompts. `need_task=False` (the caller gives the
    prompts) skips config.json's task."""
    from lab.policies.autoregressive import AutoregressivePolicy

    run = read_run(folder, "--from-run", marked=False)
    if run.summary is not None and run.summary["status"] == "diverged":
        raise ValueError(f"{run.where}: its summary.json says the run diverged, so it has no final policy to diagnose")
    policy = load_run_policy(run)
    if isinstance(policy, AutoregressivePolicy):
        raise ValueError(f"--from-run {folder}: an autoregressive run; lab diagnose analyses the factorised policy "
                         "(for variable-length responses use lab.exact.varlen.expected_update from Python)")
    if not need_task:
        return policy, None
    if run.config is None:
        raise ValueError(f"{Path(folder) / 'config.json'}: missing (lab run writes it; or pass --prompts to say "
                         "which prompts)")
    return policy, _run_task(Path(folder) / "config.json", run.config)


def run_reward(folder, rewards) -> str | None:
    """The reward the run was trained under (config.json "config"."reward", one of `rewards`), or None where the
    folder has no config.json; a config.json of the wrong shape is a `ValueError` naming the file and field."""
    path = Path(folder) / "config.json"
    data = read_json(path, f"--from-run {shown(folder)}", required=False)
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


def _run_task(path: Path, data) -> dict:
    """config.json's "task", checked: name a string, prompts a non-empty list of int lists, vocab_size an int."""
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
    if any(not 0 <= t < task["vocab_size"] for row in task["prompts"] for t in row):
        raise ValueError(f"{path}: \"task\".\"prompts\" tokens must lie in 0..{task['vocab_size'] - 1}")
    if len({len(row) for row in task["prompts"]}) > 1:
        raise ValueError(f"{path}: \"task\".\"prompts\" must all have one length")
    return task


def check_policy_fits(policy: nn.Module, task, where: str) -> None:
    """A policy's (vocab, prompt length, response length) must be the task's."""
    shape = (policy.vocab_size, policy.prompt_length, policy.response_length)
    wanted = (task.vocab_size, task.prompts.shape[1], task.response_length)
    if shape != wanted:
        raise ValueError(f"{where}: its policy has (vocab, prompt length, response length) "
                         f"{shape}, the prompts need {wanted}; pass matching --prompts/--vocab-size")
