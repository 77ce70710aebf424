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

from lab.files.output_folders import MARKER, marker_problem, read_marker, sha256

COMMAND = "reward-model"
MODEL_FILE = "model.pt"
READ_FILES = ("config.json", MODEL_FILE, "summary.json", "metrics.csv", "pairs.csv")
"""Every file of the folder: each must be as the lab wrote it (the mark's sha256), or the folder is refused."""


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


def _field(config: dict, where: str, *keys, kind=(int,)):
    value = config
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    if value is None and None in kind:
        return None
    if not isinstance(value, tuple(k for k in kind if k is not None)) or isinstance(value, bool):
        raise ValueError(f"{where}: its config.json has no valid "
                         + ".".join(f'"{k}"' for k in keys))
    return value


def read_reward_model(folder: str | Path, option: str = "--reward") -> RewardModelFolder:
    """The folder checked as the module docstring says (a `ValueError` naming the first problem); `option`: the
    command-line option that named it (`--reward`, as learned:PATH, or `--pairs-from`)."""
    folder = Path(folder)
    prefix = "--reward learned:" if option == "--reward" else f"{option} "
    where = f"{prefix}{folder}"
    if not folder.is_dir():
        raise ValueError(f"{where}: no such folder (train one with lab reward-model)")
    if not (folder / MARKER).is_file():
        raise ValueError(f"{where}: no {MARKER} mark in it: not a folder written by lab reward-model")
    problem = marker_problem(folder)
    if problem is not None:
        raise ValueError(f"{where}: {problem}")
    marker = read_marker(folder)
    if marker.get("command") != COMMAND:
        raise ValueError(f"{where}: written by lab {marker.get('command')}, not lab reward-model")
    for name in READ_FILES:  # read only as the lab wrote them
        path = folder / name
        if path.is_file() and (name not in marker["files"] or sha256(path) != marker["files"][name]):
            raise ValueError(f"{where}: its {name} is not the file lab reward-model wrote (its sha256 differs from "
                             f"{MARKER}'s); put the file back, or fit the model again")
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        raise ValueError(f"{where}: its config.json cannot be read as JSON") from None
    if not isinstance(config, dict):
        raise ValueError(f"{where}: its config.json is not a JSON object")
    for keys, kind in ((("task", "vocab_size"), (int,)), (("task", "prompts"), (list,)),
                       (("response_space", "response_length"), (int,)), (("response_space", "eos"), (int, None)),
                       (("response_space", "policy"), (str,)), (("gold_reward",), (str,)),
                       (("reward_model", "size"), (str,)), (("reward_model", "pairs_per_prompt"), (int,))):
        _field(config, where, *keys, kind=kind)
    if not (folder / MODEL_FILE).is_file():
        raise ValueError(f"{where}: no {MODEL_FILE} in it")
    if not (folder / "pairs.csv").is_file():
        raise ValueError(f"{where}: no pairs.csv in it")
    return RewardModelFolder(folder, config, sha256(folder / MODEL_FILE), prefix)


def load_learned_reward(found: RewardModelFolder, device=None):
    """The folder's model as a `LearnedReward` (its gold reward for the folder's response space beside it)."""
    import torch

    from lab.exact.enumeration import all_responses
    from lab.exact.varlen import varlen_responses
    from lab.training.learned_reward import LearnedReward
    from lab.training.reward_model import SIZES, RewardMLP
    from tasks.catalog import make_named_task
    from tasks.catalog import DEFAULT_TASK

    config, where = found.config, found.where
    vocab, length, eos = config["task"]["vocab_size"], config["response_space"]["response_length"], \
        config["response_space"]["eos"]
    size, gold_name = config["reward_model"]["size"], config["gold_reward"]
    try:  # the task the folder was fitted on (its rewards do not depend on its prompts)
        task = make_named_task(config["task"].get("name", DEFAULT_TASK))
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{where}: its config.json names a task there is no file for in tasks/") from None
    if size not in SIZES or gold_name not in task.rewards or eos not in (None, vocab):
        raise ValueError(f"{where}: its config.json names an unknown size, gold reward or EOS token")
    prompt_length = len(config["task"]["prompts"][0]) if config["task"]["prompts"] else 0
    model = RewardMLP(vocab, prompt_length, length, SIZES[size], torch.Generator().manual_seed(0)).double()
    try:
        state = torch.load(found.path / MODEL_FILE, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except Exception as e:  # a damaged or foreign file: say which, not how torch failed
        raise ValueError(f"{where}: cannot read {MODEL_FILE} as the model its config.json describes "
                         f"({type(e).__name__})") from None
    if not all(torch.isfinite(p).all() for p in model.parameters()):
        raise ValueError(f"{where}: its {MODEL_FILE} holds inf or NaN")
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
