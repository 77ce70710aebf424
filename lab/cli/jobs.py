"""What `lab run` and `lab sweep` share: from options to a checked job, then train, write and report.

    options -> configs + prompt options -> Job(task, device, folder)     every check before any training
    train (progress) -> the folder written whole (RunFolder) -> divergence reported (exit 3) or a summary

Everything that can be known before training is checked here, so a mistake costs seconds and
ends as one line with exit code 2: the device, the memory the runs need (before random prompts
are drawn, and again with the real prompts), an autoregressive cap too short for the task, and
the output folder (a name the file system takes, a folder we may write, free or the lab's own).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import typer

from lab.cli.application import USER_ERRORS, fail, output_folder, writing
from lab.cli import task_options
from lab.cli.options import cli_message, hashed_name_note
from lab.cli.task_options import make_task, train_reward
from lab.files.output_folders import RunFolder
from lab.policies.interface import PolicyKind
from lab.training.config import OPTION_FIELDS, ConfigError, Device, TrainConfig, resolve_device
from lab.training.divergence import DIVERGED_EXIT_CODE
from lab.training.lengths import resolve_max_length
from lab.training.limits import check_memory
from lab.training.records import Records
from tasks import LEARNED, Task
from tasks.catalog import DEFAULT_TASK


@dataclass(frozen=True)
class Job:
    """A checked job: the task its prompts describe, the device, and the folder it will write."""

    points: list[TrainConfig]
    """one config per setting (a run has one; a sweep one per grid point, before seeds multiply it)"""
    task: Task
    device: torch.device
    folder: RunFolder
    prompt_options: dict


def prompt_options(*given) -> dict:
    """The prompt options as `make_task` takes them and config.json records them
    (`lab.cli.task_options.prompt_options`); an unknown --task is one line and exit 2."""
    try:
        return task_options.prompt_options(*given)
    except USER_ERRORS as e:
        fail(cli_message(str(e)))


def check_fits(config: TrainConfig, task: Task) -> None:
    """An autoregressive cap too short for sorted(prompt) + EOS is a user error (one line, exit 2)."""
    if config.policy is not PolicyKind.factorized:
        resolve_max_length(config, task.prompts.shape[1])


def prepare(command: str, build: Callable[[], tuple[list[TrainConfig], int, Callable[[], str]]], options: dict,
            device: Device, out: Path | None, force: bool, quiet: bool, what: str = "this run") -> Job:
    """Check everything before training; a mistake ends the command with one line and exit code 2.

    `build()` makes the configs (one per grid point), the number of seeds each is trained with, and
    the default folder name; it runs inside the same check, so its `ConfigError`s are one line too.
    """
    try:
        points, seeds, default_name = build()
        torch_device = resolve_device(device)
        sizes = (options["vocab_size"], options["num_prompts"], options["prompt_length"])
        if options["prompts"] == "random":  # before drawing them
            check_memory(points, *sizes, options["heldout"], torch_device, what, seeds)
        task = make_task(**options)
        check_fits(points[0], task)
        check_starts(points, task)
        task = with_reward_models(task, points, torch_device)
        check_thresholds(points, task)
        check_memory(points, options["vocab_size"], *task.prompts.shape, options["heldout"], torch_device, what, seeds)
        check_not_read(out or Path("runs") / default_name(), points)
        folder = output_folder(out or Path("runs") / default_name(), force, command)
        note = None if out or quiet else hashed_name_note(folder.out.name)
    except USER_ERRORS as e:
        fail(cli_message(str(e)))
    if note:
        typer.echo(note, err=True)
    return Job(points, task, torch_device, folder, options)


def folders_read(config: TrainConfig) -> list[tuple[str, str]]:
    """(option, folder) for every folder a config reads: its start, its demonstrations, its pairs, its reward model."""
    learned = config.reward[len(LEARNED):] if config.reward.startswith(LEARNED) else None
    return [(option, path) for option, path in (("--init-from", config.init_from), ("--demos-from", config.demos_from),
                                                ("--pairs-from", config.pairs_from), ("--reward learned:", learned))
            if path is not None]


def check_not_read(out: Path, points: Sequence[TrainConfig]) -> None:
    """`--out` is none of the folders the job reads: `--init-from X --out X --force` would replace the run it starts
    from, and the new config.json's rerun line would then start from the new policy."""
    for option, path in (pair for config in points for pair in folders_read(config)):
        if os.path.realpath(out) == os.path.realpath(path):
            raise ConfigError(f"--out {out} is the folder {option.rstrip(':')} reads; the lab does not replace what it "
                              "reads (the new run could not be reproduced from it): choose another --out")


def check_thresholds(points: Sequence[TrainConfig], task: Task) -> None:
    """Expert iteration keeps the samples whose reward reaches `--reward-threshold`: one above every prompt's best
    reward keeps none, and the run would train on nothing without a word."""
    from tasks import OPTIMAL_TOLERANCE

    for config in points:
        if config.reward_threshold is not None:
            best = float(task.optimum(config.reward).max())
            if config.reward_threshold > best + OPTIMAL_TOLERANCE:
                raise ConfigError(f"--reward-threshold {config.reward_threshold:g} is above the best reward any "
                                  f"response gets ({best:g} under {config.reward[:40]}), so expert iteration would "
                                  "keep no sample; choose a threshold of at most that")


def config_from_options(given: dict) -> TrainConfig:
    """The `TrainConfig` of a command's options by name: each option that is a config field (`OPTION_FIELDS`) goes
    to its field, the reward checked (`train_reward`), `--pairs-from`'s and `--init-from`'s settings read."""
    folders = ("pairs", "pairs_per_prompt", "preference", "pairs_from", "init_from")
    fields = {name: given[name] for name in OPTION_FIELDS if name in given and name not in folders}
    if fields.get("kl_estimator", "") is None:  # not named: the placement's own (k1 in the reward, claim 35)
        from lab.training.config_checks import default_estimator

        fields["kl_estimator"] = default_estimator(fields["kl_in"], fields["loss"])
    return TrainConfig(**{**fields, "reward": train_reward(fields["reward"], given.get("task", DEFAULT_TASK))},
                       **pairs_from_settings(given["pairs_from"], given["pairs"], given["pairs_per_prompt"],
                                             given["preference"]),
                       **start_settings(given["init_from"]))


def start_settings(init_from: str | None) -> dict:
    """`--init-from`'s config fields: the folder, and the sha256 of the policy.pt it holds (the folder checked)."""
    from lab.files.start_folder import start_sha256

    return {} if init_from is None else dict(init_from=init_from, init_sha256=start_sha256(init_from))


def reward_settings(configs: Sequence[TrainConfig]) -> list[TrainConfig]:
    """The configs with what they read of a reward-model folder recorded, the folder checked: the sha256 of a learned
    reward's model.pt (`reward_sha256`); for `--pairs-from`, its pairs.csv's (`pairs_sha256`) and its number of
    pairs per prompt."""
    from lab.files.reward_model_folder import read_reward_model

    read = {}  # each folder checked once, however many seeds name it

    def folder(path: str, option: str):
        if (path, option) not in read:
            read[path, option] = read_reward_model(path, option)
        return read[path, option]

    def recorded(config: TrainConfig) -> TrainConfig:
        if config.reward.startswith(LEARNED):
            config = config.replace(reward_sha256=folder(config.reward[len(LEARNED):], "--reward").sha256)
        if config.pairs_from is not None:
            found = folder(config.pairs_from, "--pairs-from")
            config = config.replace(pairs_sha256=found.file_sha256("pairs.csv"),
                                    pairs_per_prompt=found.config["reward_model"]["pairs_per_prompt"])
        return config

    return [recorded(c) for c in configs]


def pairs_from_settings(pairs_from: str | None, pairs, pairs_per_prompt: int | None, preference) -> dict:
    """`--pairs-from`'s config fields: offline pairs, the folder; its pairs are judged and counted already."""
    if pairs_from is None:
        return dict(pairs=pairs, pairs_per_prompt=pairs_per_prompt, preference=preference)
    for option, value in (("--pairs-per-prompt", pairs_per_prompt), ("--preference", preference)):
        if value is not None:
            raise ConfigError(f"{option} does not apply with --pairs-from: the folder's pairs are counted and judged "
                              "already")
    if pairs not in (None, "offline"):
        raise ConfigError("--pairs-from applies to --pairs offline only (its pairs are a fixed set)")
    return dict(pairs="offline", pairs_from=pairs_from)


def with_reward_models(task: Task, points: Sequence[TrainConfig], device: torch.device) -> Task:
    """The task with each learned reward of the points added to its rewards (`--reward learned:PATH`), after
    checking that each folder's model fits the task and the policy: a `ConfigError`, one line per mismatch."""
    from lab.files.reward_model_folder import load_learned_reward, read_reward_model, reward_model_mismatches

    learned, lines = {}, []
    for config in points:
        if config.reward.startswith(LEARNED) and config.reward not in learned:
            found = read_reward_model(config.reward[len(LEARNED):])
            problems = reward_model_mismatches(found, config, task)
            lines += problems
            learned[config.reward] = None if problems else load_learned_reward(found, device)
        if config.pairs_from is not None:
            lines += reward_model_mismatches(read_reward_model(config.pairs_from, "--pairs-from"), config, task)
    if lines:
        raise ConfigError("\n".join(dict.fromkeys(lines)))
    return replace(task, rewards={**task.rewards, **learned}) if learned else task


def check_starts(points: Sequence[TrainConfig], task) -> None:
    """The policies of --init-from and --demos-from fit the settings: a `ConfigError`, one line per mismatch."""
    from lab.files.start_folder import start_mismatches, start_sha256

    lines = []
    for config in points:
        if config.init_from is not None:
            lines += start_mismatches(config.init_from, config, task)
        if config.demos_from is not None:
            start_sha256(config.demos_from, "--demos-from")
            lines += start_mismatches(config.demos_from, config, task, "--demos-from")
    if lines:
        raise ConfigError("\n".join(dict.fromkeys(lines)))


def write_folder(job: Job, write: Callable[[Path], None]) -> None:
    """Write the job's folder whole: `write(tmp)` fills a temporary folder, renamed into place when done."""
    with writing(job.folder.out), job.folder as tmp:
        write(tmp)


def config_header(command: str, job: Job) -> dict:
    """The part of config.json every command writes: the command, the task, the device, the versions."""
    task = job.task
    return {"command": command,
            "task": {"name": task.name, "prompts": task.prompts.tolist(), "vocab_size": task.vocab_size,
                     "eval_prompts": None if task.eval_prompts is None else task.eval_prompts.tolist()},
            "device": str(job.device), "torch": torch.__version__, "prompt_options": job.prompt_options}


def report_divergence(command: str, records: Records, configs: Sequence[TrainConfig], out: Path) -> None:
    """Say which runs diverged (also when quiet: a result the user must not miss); exit 3 when all did.

    A run's records up to the step where it diverged are written; a sweep leaves diverged runs out
    of its means and counts them per setting in summary.csv.
    """
    diverged = [(run, d) for run, d in enumerate(records.divergence) if d is not None]
    if not diverged:
        return
    run, first = diverged[0]
    config = configs[run]
    message = first.message(config)
    if command == "run":
        typer.echo(f"Error: {message}; the records up to that step are in {out} "
                   "(summary.json \"status\": \"diverged\")", err=True)
    else:
        every = len(diverged) == len(configs)
        count = f"Error: all {len(configs)} runs diverged" if every else \
            f"Warning: {len(diverged)} of {len(configs)} runs diverged (left out of the means)"
        typer.echo(f"{count}; counts per setting in summary.csv; the first (seed {config.seed}): {message}", err=True)
    if len(diverged) == len(configs):
        raise typer.Exit(DIVERGED_EXIT_CODE)
