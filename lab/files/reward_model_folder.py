"""A reward-model folder (`lab reward-model`), read back as a task's reward (`--reward learned:PATH`), checked first.

    RM/.lab-output   the lab's mark: written by `lab reward-model`, every file as it wrote it
    RM/config.json   "reward_model" (`RewardModelConfig`), "gold_reward", "response_space" {"policy", "response_length",
                     "eos"}, "task" {"prompts", "vocab_size"}, "parameters"
    RM/model.pt      the `RewardMLP`'s state, float64, of the shape config.json describes

`read_reward_model` raises a `ValueError` naming the folder and what is wrong with it (not a folder, no mark, a file
changed since, another command's folder, a field missing or of the wrong type, a model that does not load or is not
finite); `reward_model_mismatches` lists, one line each, how it does not fit a run's task and policy. Both before any
training, so a bad folder costs one line and exit 2.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lab.files.lab_folders import check_folder, check_marked, read_json, shown
from lab.files.output_folders import sha256

COMMAND = "reward-model"
MODEL_FILE = "model.pt"


@dataclass(frozen=True)
class RewardModelFolder:
    """A checked folder: its config.json, and the sha256 of its model.pt (a run records which model it trained on)."""

    path: Path
    config: dict
    sha256: str
    option: str = "--reward learned:"
    """how the command line named the folder, for messages"""

    @property
    def space(self) -> dict:
        return self.config["response_space"]

    @property
    def where(self) -> str:
        return f"{self.option}{self.path}"

    def file_sha256(self, name: str) -> str:
        """A file's sha256 as the mark lists it (checked equal to the file's own by `read_reward_model`)."""
        return sha256(self.path / name)


def _field(config: dict, where: str, *keys, kind=(int,), low: int | None = None, high: int | None = None):
    value = config
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    if value is None and None in kind:
        return None
    named = ".".join(f'"{k}"' for k in keys)
    if not isinstance(value, tuple(k for k in kind if k is not None)) or isinstance(value, bool):
        raise ValueError(f"{where}: its config.json has no valid {named}")
    if low is not None and not low <= value <= high:
        raise ValueError(f"{where}: its config.json's {named} must be from {low} to {high}, got {shown_count(value)}")
    return value


def shown_count(value: int) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"{text[:8]}... ({len(text)} digits)"


def read_reward_model(folder: str | Path, option: str = "--reward") -> RewardModelFolder:
    """The folder checked as the module docstring says (a `ValueError` naming the first problem); `option`: the
    command-line option that named it (`--reward`, as learned:PATH, or `--pairs-from`). The one reader of a
    reward-model folder: the path and the mark (`lab.files.lab_folders`), config.json's fields and their ranges,
    model.pt (`load_model`) and pairs.csv (`read_pairs`), all before any training."""
    from lab.exact.enumeration import LIMITS
    from lab.training.bounds import capped_power
    from lab.training.limits import space_within
    from lab.training.reward_model import SIZES
    from tasks.catalog import DEFAULT_TASK, task_facts

    prefix = "--reward learned:" if option == "--reward" else f"{option} "
    folder = check_folder(folder, prefix, "folder (train one with lab reward-model)")
    where = f"{prefix}{shown(folder)}"
    check_marked(folder, prefix, COMMAND)
    config = read_json(folder / "config.json", where)
    if not isinstance(config, dict):
        raise ValueError(f"{where}: its config.json is not a JSON object")
    if not isinstance(read_json(folder / "summary.json", where), dict):  # not used, but parsed as every file is
        raise ValueError(f"{where}: its summary.json is not a JSON object")
    vocab = _field(config, where, "task", "vocab_size", low=1, high=2**31 - 1)
    length = _field(config, where, "response_space", "response_length", low=1, high=LIMITS.max_responses)
    eos = _field(config, where, "response_space", "eos", kind=(int, None))
    policy = _field(config, where, "response_space", "policy", kind=(str,))
    _field(config, where, "reward_model", "pairs_per_prompt", low=1, high=10_000)
    task_name = config["task"].get("name", DEFAULT_TASK)  # folders written before tasks had names: sorting's
    try:
        rewards = task_facts(task_name).reward_names if isinstance(task_name, str) else ()
    except ValueError:
        raise ValueError(f"{where}: its config.json names a task there is no file for in tasks/") from None
    if _field(config, where, "gold_reward", kind=(str,)) not in rewards or \
            _field(config, where, "reward_model", "size", kind=(str,)) not in SIZES:
        raise ValueError(f"{where}: its config.json names an unknown \"gold_reward\" or \"reward_model\".\"size\"")
    if (policy, eos) not in (("factorized", None), ("autoregressive", vocab)):
        raise ValueError(f"{where}: its config.json's \"response_space\" must be the factorized policy's (\"eos\" "
                         f"null) or the autoregressive one's (\"eos\" {vocab}, the vocabulary size)")
    cap = LIMITS.max_responses
    if not (capped_power(vocab, length, cap) <= cap if eos is None else space_within(vocab, length, cap)):
        raise ValueError(f"{where}: its config.json's response space has more than the {LIMITS.max_responses} "
                         "responses the lab enumerates")
    prompts = _field(config, where, "task", "prompts", kind=(list,))
    if not prompts or not all(isinstance(row, list) and len(row) == len(prompts[0]) > 0 and all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in row) for row in prompts):
        raise ValueError(f"{where}: its config.json's \"task\".\"prompts\" must be a non-empty list of token lists "
                         f"of one length, tokens in 0..{vocab - 1}")
    found = RewardModelFolder(folder, config, sha256(folder / MODEL_FILE), prefix)
    load_model(found)
    read_folder_pairs(found)
    return found


def read_folder_pairs(found: RewardModelFolder):
    """The folder's pairs.csv as int[batch 2N pos] (`lab.training.preference_pairs.read_pairs`: its header, the
    prompt of each row, the number of rows, each response's length and tokens), a `ValueError` naming the line."""
    from lab.training.preference_pairs import read_pairs

    config, space = found.config, found.config["response_space"]
    top = config["task"]["vocab_size"] - (space["eos"] is None)
    try:
        return read_pairs(found.path, len(config["task"]["prompts"]), config["reward_model"]["pairs_per_prompt"],
                          space["response_length"], top)
    except FileNotFoundError:
        raise ValueError(f"{found.where}: no pairs.csv in it") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{found.where}: its pairs.csv cannot be read ({getattr(e, 'strerror', None) or e})") from None
    except ValueError as e:
        raise ValueError(f"{found.where}: {e}") from None


def load_model(found: RewardModelFolder):
    """The folder's model.pt as the `RewardMLP` its config.json describes: float64, every parameter finite."""
    import torch

    from lab.training.reward_model import SIZES, RewardMLP

    config, where = found.config, found.where
    vocab, length = config["task"]["vocab_size"], config["response_space"]["response_length"]
    prompt_length = len(config["task"]["prompts"][0])
    with torch.device("meta"):  # the shapes, without allocating (config.json's sizes are checked, not yet trusted)
        wanted = RewardMLP(vocab, prompt_length, length, SIZES[config["reward_model"]["size"]], None)
    try:
        state = torch.load(found.path / MODEL_FILE, map_location="cpu", weights_only=True)
        shapes = {name: tuple(value.shape) for name, value in state.items()}
    except Exception as e:  # a damaged or foreign file: say which, not how torch failed
        raise ValueError(f"{where}: cannot read {MODEL_FILE} ({type(e).__name__})") from None
    if shapes != {name: tuple(p.shape) for name, p in wanted.named_parameters()}:
        raise ValueError(f"{where}: its {MODEL_FILE} is not the model its config.json describes (parameters "
                         f"{', '.join(f'{k} {list(v)}' for k, v in list(shapes.items())[:3])})")
    for name, value in state.items():
        if value.dtype != torch.float64:
            raise ValueError(f"{where}: its {MODEL_FILE}'s parameter {name} is {value.dtype}; the lab writes float64")
        if not torch.isfinite(value).all():
            raise ValueError(f"{where}: its {MODEL_FILE}'s parameter {name} holds inf or NaN")
    model = RewardMLP(vocab, prompt_length, length, SIZES[config["reward_model"]["size"]],
                      torch.Generator().manual_seed(0)).double()
    model.load_state_dict(state)
    return model


def load_learned_reward(found: RewardModelFolder, device=None):
    """The folder's model as a `LearnedReward` (its gold reward for the folder's response space beside it)."""
    from lab.exact.enumeration import all_responses
    from lab.exact.varlen import varlen_responses
    from lab.training.learned_reward import LearnedReward
    from tasks.catalog import DEFAULT_TASK, make_named_task

    config = found.config
    vocab, length, eos = config["task"]["vocab_size"], config["response_space"]["response_length"], \
        config["response_space"]["eos"]
    gold_name, where = config["gold_reward"], found.where
    try:  # the task the folder was fitted on (its rewards do not depend on its prompts)
        task = make_named_task(config["task"].get("name", DEFAULT_TASK))
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{where}: its config.json names a task there is no file for in tasks/") from None
    if gold_name not in task.rewards:
        raise ValueError(f"{where}: its config.json names a gold reward its task ({task.name}) does not have")
    model = load_model(found)
    responses = all_responses(vocab, length) if eos is None else varlen_responses(vocab, length)
    gold = task.reward_for(gold_name, eos)
    learned = LearnedReward(model, responses, gold, gold_name)
    return learned if device is None else learned.to(device)


def reward_model_mismatches(found: RewardModelFolder, config, task) -> list[str]:
    """One line per way the folder's model does not fit a run's task and policy (none: it fits)."""
    from lab.training.lengths import resolve_max_length

    where, space = found.where, found.space
    factorized = config.policy.value == "factorized"
    length = task.response_length if factorized else resolve_max_length(config, task.prompts.shape[1])
    lines = []
    if space["policy"] != config.policy.value:
        lines.append(f"{where}: its model scores the {space['policy']} policy's responses, these settings train the "
                     f"{config.policy.value} policy (--policy)")
    elif space["response_length"] != length:
        lines.append(f"{where}: its model scores responses of length {space['response_length']}, these settings "
                     f"have {length} (--max-length, --prompt-length)")
    if found.config["task"]["vocab_size"] != task.vocab_size:
        lines.append(f"{where}: its model has vocabulary size {found.config['task']['vocab_size']}, these settings "
                     f"{task.vocab_size} (--vocab-size)")
    elif found.config["task"]["prompts"] != task.prompts.tolist():
        lines.append(f"{where}: its model was fitted on other prompts than these settings' (--prompts, "
                     "--num-prompts, --prompt-length, --prompt-seed)")
    return lines


def drawing_policy(config, task):
    """The policy the pairs come from: a run's initial policy for these settings (`config`: seed, policy, dim,
    init_scale, max_length), or the policy.pt of `config.init_from` (checked by the command before)."""
    import torch

    from lab.policies import make_policy, policy_from_state
    from lab.training.lengths import resolve_max_length

    if config.init_from is not None:
        state = torch.load(Path(config.init_from) / "policy.pt", map_location="cpu", weights_only=True)
        return policy_from_state({name: value.unsqueeze(0) for name, value in state.items()})
    length = task.response_length if config.policy.value == "factorized" else \
        resolve_max_length(config, task.prompts.shape[1])
    return make_policy(config.policy, task.vocab_size, task.prompts.shape[1], length, config.dim,
                       torch.Generator().manual_seed(config.seed), config.init_scale)


def write_reward_model(tmp: Path, header: dict, policy, model, metrics: dict, fit) -> None:
    """The folder's files into `tmp` (the module docstring's, with metrics.csv, summary.json and pairs.csv)."""
    import torch

    from lab.exact import varlen
    from lab.files.output_folders import write_json_atomic, write_text_atomic
    from lab.policies import ops_of

    responses = varlen.enumerate_responses(policy)
    space = {"policy": header["drawing_policy"]["policy"], "response_length": int(responses.shape[1]),
             "eos": ops_of(policy).eos(policy), "responses": int(responses.shape[0])}
    write_json_atomic(tmp / "config.json", {**header, "reward_model": fit.config,
                                            "gold_reward": header["settings"]["reward"], "response_space": space,
                                            "parameters": metrics["parameters"], "torch": torch.__version__})
    torch.save(model.state_dict(), tmp / MODEL_FILE)
    rows = ["step,loss,accuracy,margin"] + [f"{step},{loss!r},{accuracy!r},{margin!r}" for step, (loss, accuracy, margin)
                                             in enumerate(zip(*fit.history.values()))]
    write_text_atomic(tmp / "metrics.csv", "\n".join(rows) + "\n")
    write_json_atomic(tmp / "summary.json", metrics)
    write_pairs(tmp / "pairs.csv", responses, fit.chosen, fit.rejected)


def write_pairs(path: Path, responses, chosen, rejected) -> None:
    """pairs.csv: one row per pair, `prompt,chosen,rejected`, the responses as space-separated tokens; `chosen` and
    `rejected` int[batch N] index `responses` int[n pos] (`lab.training.preference_pairs.read_pairs` reads it)."""
    from lab.files.output_folders import write_text_atomic

    show = lambda index: " ".join(map(str, responses[index].tolist()))  # noqa: E731
    pairs = ["prompt,chosen,rejected"] + [f"{b},{show(c)},{show(r)}" for b in range(chosen.shape[0])
                                          for c, r in zip(chosen[b].tolist(), rejected[b].tolist())]
    write_text_atomic(path, "\n".join(pairs) + "\n")
