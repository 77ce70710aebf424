"""The task options: `--task` (a file of tasks/), its `--reward`s and its prompts, without torch.

    --task NAME     tasks/NAME.py, one of `tasks.catalog.task_names()` (a file dropped there is one more choice)
    --reward R      one of that file's REWARD_NAMES (None: its DEFAULT_REWARD); `lab run`/`sweep`: or learned:PATH
    --prompts ...   the task's own prompts ('lecture'), random ones, or a JSON list (`tasks.prompts.task_from_spec`)

The choices are read off each task file's literals (`tasks.catalog.task_facts`), so `lab --help` loads no torch; the
task itself is imported only by the command that trains (`make_task`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated

import typer

from lab.training.settings import option
from tasks import LEARNED
from tasks.catalog import DEFAULT_TASK, check_task_name, task_facts, task_names

TASKS = task_names()
"""Every task file in tasks/ (`tasks.catalog`): the `--task` choices."""
LECTURE_VOCAB_SIZE = task_facts(DEFAULT_TASK).vocab_size
REWARD_NAMES = {name: task_facts(name).reward_names for name in (DEFAULT_TASK, *sorted(set(TASKS) - {DEFAULT_TASK}))}
"""Each task's rewards, in its order (its file's REWARD_NAMES)."""
REWARD_CHOICES = tuple(dict.fromkeys(r for names in REWARD_NAMES.values() for r in names))
"""Every reward some task registers (a task checks its own: `task_reward`)."""
TRAIN_REWARDS = (*REWARD_CHOICES, f"{LEARNED}PATH")
"""What `lab run` and `lab sweep` train against: a task's reward, or a reward model's score (`lab reward-model`)."""
DEFAULT_REWARD = task_facts(DEFAULT_TASK).default_reward
"""The lecture's task's default reward: what `--help` shows as `--reward`'s default (another task's is its own)."""
REWARDS_HELP = "; ".join(f"{name}: {', '.join(names)} (default {task_facts(name).default_reward})"
                         for name, names in REWARD_NAMES.items())


def task_choice(value: str) -> str:
    """A `--task`, checked: the name of a task file in tasks/."""
    try:
        return check_task_name(value)
    except ValueError:
        raise ValueError(f"--task {value} is not a choice; choose one of: {', '.join(task_names())} (a file "
                         "tasks/NAME.py that defines make_task)") from None


def task_reward(value: str | None, task: str = DEFAULT_TASK, learned: bool = False) -> str:
    """A `--reward` checked against the task's rewards (`learned`: or `learned:` and a folder); None is the task's
    default reward."""
    facts = task_facts(task_choice(task))
    if value is None:
        return facts.default_reward
    if value in facts.reward_names or (learned and value.startswith(LEARNED) and len(value) > len(LEARNED)):
        return value
    choices = (*facts.reward_names, f"{LEARNED}PATH") if learned else facts.reward_names
    where = "" if task == DEFAULT_TASK else f" of --task {task}"
    raise ValueError(f"--reward {value} is not a choice{where}; choose one of: {', '.join(choices)}"
                     + (" (a folder written by lab reward-model)" if learned else ""))


def train_reward(value: str | None, task: str = DEFAULT_TASK) -> str:
    """A `--reward` of `lab run` or `lab sweep`, checked: a name the task registers, or `learned:` and a folder."""
    return task_reward(value, task, learned=True)



# The task and its prompts (`lab run`, `sweep`, `diagnose`, `reward-model`, `trl`)
TaskOpt = Annotated[str, typer.Option("--task", metavar="[" + "|".join(TASKS) + "]",
                                      help="the task: the file tasks/NAME.py (its prompts, rewards and optimum)")]
RewardOpt = Annotated[str | None, typer.Option("--reward", metavar="[" + "|".join(REWARD_CHOICES) + "]",
                                               help=f"reward function of the task ({REWARDS_HELP})",
                                               show_default=DEFAULT_REWARD)]
TrainRewardOpt = Annotated[str | None, typer.Option("--reward", metavar="[" + "|".join(TRAIN_REWARDS) + "]",
                                                    help=f"reward function of the task ({REWARDS_HELP}), or "
                                                         "learned:PATH, the score of the reward model lab reward-model "
                                                         "wrote at PATH (the proxy trains the run; the gold reward is "
                                                         "recorded beside it, exactly)", show_default=DEFAULT_REWARD)]

PromptsOpt = Annotated[str, typer.Option(help="'lecture', 'random' (see --num-prompts, --prompt-length), "
                                              "or a JSON list such as '[[3,1,0,2],[2,2,0,1]]'")]
NumPromptsOpt = Annotated[int, typer.Option(help="how many prompts --prompts random draws")]
PromptLengthOpt = Annotated[int, typer.Option(help="length of the prompts --prompts random draws")]
VocabOpt = Annotated[int | None, typer.Option(help="vocabulary size: tokens are 0..vocab-1 [default: the task's; "
                                                   f"sorting: {LECTURE_VOCAB_SIZE}]", show_default=False)]
HeldoutOpt = Annotated[int, typer.Option(help="random held-out prompts evaluated greedily, never trained on")]
PromptSeedOpt = Annotated[int, typer.Option(help="seed for random and held-out prompts")]


def make_task(prompts: str, vocab_size: int | None, num_prompts: int, prompt_length: int, heldout: int,
              prompt_seed: int, task: str = DEFAULT_TASK):
    """The task the prompt options describe (`tasks.prompts.task_from_spec`; `vocab_size` None: the task's own)."""
    from tasks.prompts import task_from_spec  # here: it loads torch, which `lab --help` does without

    return task_from_spec(prompts, vocab_size, num_prompts, prompt_length, heldout, prompt_seed, task_choice(task))


PROMPT_DEFAULTS = dict(prompts="lecture", vocab_size=LECTURE_VOCAB_SIZE, num_prompts=3, prompt_length=3,
                       heldout=0, prompt_seed=0)
"""The prompt options' defaults (the lecture's prompts), shared by run, sweep and diagnose."""


def prompt_options(prompts: str, vocab_size: int | None, num_prompts: int, prompt_length: int, heldout: int,
                   prompt_seed: int, task: str = DEFAULT_TASK) -> dict:
    """The prompt options as `make_task` takes them and config.json records them: `vocab_size` None is the task's
    own; the task named only where it is not the lecture's (so a sorting run's files read as before tasks were
    files)."""
    vocab_size = task_facts(task_choice(task)).vocab_size if vocab_size is None else vocab_size
    return dict(prompts=prompts, vocab_size=vocab_size, num_prompts=num_prompts, prompt_length=prompt_length,
                heldout=heldout, prompt_seed=prompt_seed, **({} if task == DEFAULT_TASK else {"task": task}))


def canonical_prompts(spec: str) -> str:
    """A JSON prompt list as compact JSON (`[[1, 0, 2]]` and `[[1,0,2]]` alike); 'lecture', 'random' as they are."""
    try:
        return json.dumps(json.loads(spec), separators=(",", ":"))
    except (ValueError, RecursionError):
        return spec


def prompts_label(options: dict) -> str:
    """The part of a default folder name that tells the prompt options apart ('' for the defaults).

    'random3x4' (count x length), 'prompts<hash>' for a JSON list (hashed by the prompts it names,
    not its spelling), then 'vocab-size7', 'heldout10', 'prompt-seed2' where they differ from the defaults
    (options as typed, as `lab.training.settings.name_parts`), so different experiments never share a name.
    """
    task = options.get("task", DEFAULT_TASK)
    options = {**PROMPT_DEFAULTS, "vocab_size": task_facts(task).vocab_size, **options}
    spec, parts = options["prompts"], [] if task == DEFAULT_TASK else [task]
    if spec == "random":
        parts.append(f"random{options['num_prompts']}x{options['prompt_length']}")
    elif spec != "lecture":
        parts.append("prompts" + hashlib.sha256(canonical_prompts(spec).encode()).hexdigest()[:8])
    defaults = {**PROMPT_DEFAULTS, "vocab_size": task_facts(task).vocab_size}
    for name in ("vocab_size", "heldout", "prompt_seed"):
        if options[name] != defaults[name]:
            parts.append(f"{option(name)}{options[name]}")
    return "-".join(parts)
