"""GRPO on the sorting task by TRL's `GRPOTrainer`, each epoch seen through the exact lens.

An epoch is the lab's: one group of G responses for every prompt, then `steps` optimizer steps on
that batch. In TRL's terms one generation batch of P x G completions (`per_device_train_batch_size`
= P x G, one step per generation) reused `num_iterations` = steps times. The lab's settings map to
TRL's fields as docs/trl.md tabulates (checked by tests/bridge):

    G -> num_generations     steps -> num_iterations     clip eps -> epsilon     T -> temperature
    beta -> beta x L (TRL weighs the per-token k3, the lab the sequence's sum; no bias correction)
    --loss-agg -> loss_type  (token-mean: bnpo, seq-mean-token-mean: grpo, seq-mean-token-sum-norm: dr_grpo)
    --delta centered -> scale_rewards="none", normalized -> "group", batch -> "batch"
    --loss cispo|sapo|luspo|vespo -> loss_type (each with TRL's own aggregation: `TRL_AGGREGATION`)
    --epsilon-high, --clip-delta (TRL delta), --importance-sampling-level, --top-entropy-quantile,
    --mask-truncated-completions, --sapo-*, --vespo-* -> the GRPOConfig fields of those names
    Adam at a constant lr, no gradient clipping, no weight decay: the lab's optimizer

After every epoch `lab.bridge.exact_lm` enumerates the model's whole response distribution. TRL
draws its samples from torch's global generator and seeds it (`set_seed`); training runs inside
`torch.random.fork_rng`, so the caller's generator state is as it was afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from lab.bridge.exact_lm import all_responses, exact_metrics, reward_table
from lab.bridge.lens_run import lab_trainer_args, run_with_lens
from lab.bridge.tiny_lm import TinyLM, build_tokenizer, words
from lab.core.modes import TRL_AGGREGATION
from tasks import Task

LOSS_TYPES = {"token-mean": "bnpo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
"""--loss-agg -> TRL's loss_type (seq-mean-token-sum has no TRL counterpart)."""
SCALE_REWARDS = {"centered": "none", "normalized": "group", "batch": "batch"}
"""--delta -> TRL's scale_rewards (TRL's std_eps is 1e-4, the lab's default 1e-5)."""
DESCENDANT_FIELDS = ("epsilon_high", "clip_delta", "importance_sampling_level", "top_entropy_quantile",
                     "mask_truncated_completions", "sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos",
                     "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")
"""The settings of issue 37, each a GRPOConfig field of the same name (clip_delta: TRL's `delta`)."""

TRL_NAMES = {
    "reward": "mean_reward", "frac_reward_zero_std": "zero_std_fraction", "entropy": "entropy",
    "clip_ratio/low_mean": "clip_low_fraction", "clip_ratio/high_mean": "clip_high_fraction",
    "completions/mean_length": "response_length", "loss": "loss", "grad_norm": "grad_norm",
}
"""TRL's logged metric -> the lab's name for the same quantity (records glossary). TRL's other logs
keep their names: its `kl` is the mean per-token k3 and its `reward_std` the std over the whole
batch, neither the lab's quantity of that name."""


class TRLSettingError(ValueError):
    """A lab setting TRL's trainer has no counterpart for."""


@dataclass(frozen=True)
class TRLGRPO:
    """A GRPO run by TRL, in the lab's settings (defaults: `lab run`'s, with the autoregressive cap)."""

    epochs: int = 30
    steps: int = 1
    """optimizer steps on each epoch's batch (TRL `num_iterations`)"""
    group_size: int = 10
    """responses per prompt (TRL `num_generations`)"""
    lr: float = 1e-3
    clip_eps: float = 0.2
    """the ratio's clip (TRL `epsilon`)"""
    kl: float = 0.0
    """the lab's beta on the sequence's k3 (TRL `beta` = kl x max length)"""
    delta: str = "centered"
    loss_agg: str = "token-mean"
    temperature: float = 1.0
    reward: str = "inclusion-ordering"
    max_length: int | None = None
    """response cap L, EOS included (default: prompt length + 1)"""
    seed: int = 5
    loss: str = "clipped"
    """clipped (loss_type from --loss-agg), or one of TRL's descendants: cispo, sapo, luspo, vespo"""
    epsilon_high: float | None = None
    """TRL epsilon_high (None: epsilon; cispo: 5, the lab's default cap)"""
    clip_delta: float | None = None
    """TRL delta, the two-sided clip"""
    importance_sampling_level: str = "token"
    top_entropy_quantile: float = 1.0
    mask_truncated_completions: bool = False
    sapo_temperature_pos: float | None = None
    sapo_temperature_neg: float | None = None
    vespo_k_pos: float | None = None
    vespo_lambda_pos: float | None = None
    vespo_k_neg: float | None = None
    vespo_lambda_neg: float | None = None
    model: TinyLM = field(default_factory=TinyLM)

    def cap(self, task: Task) -> int:
        return task.prompts.shape[1] + 1 if self.max_length is None else self.max_length

    def check(self, task: Task) -> None:
        if self.loss != "clipped":
            if self.loss not in TRL_AGGREGATION:
                raise TRLSettingError(f"--loss {self.loss} is no TRL loss_type; choose one of: clipped, "
                                      f"{', '.join(TRL_AGGREGATION)}")
            if self.loss_agg != TRL_AGGREGATION[self.loss]:
                raise TRLSettingError(f"TRL's loss_type={self.loss} aggregates as --loss-agg "
                                      f"{TRL_AGGREGATION[self.loss]}, not {self.loss_agg}")
        elif self.loss_agg not in LOSS_TYPES:
            raise TRLSettingError(f"--loss-agg {self.loss_agg} has no TRL loss_type; choose one of: "
                                  f"{', '.join(LOSS_TYPES)}")
        if self.delta not in SCALE_REWARDS:
            raise TRLSettingError(f"--delta {self.delta} has no TRL scale_rewards; choose one of: "
                                  f"{', '.join(SCALE_REWARDS)}")
        if self.model.vocab_size != task.vocab_size:
            raise TRLSettingError(f"the model's vocabulary ({self.model.vocab_size}) is not the task's "
                                  f"({task.vocab_size})")
        if self.cap(task) < task.prompts.shape[1] + 1:
            raise TRLSettingError(f"--max-length {self.cap(task)} cannot hold the sorted prompt and EOS; use "
                                  f"{task.prompts.shape[1] + 1} or more")

    def grpo_config(self, task: Task, output_dir: Path):
        """TRL's `GRPOConfig` for these settings."""
        from trl import GRPOConfig

        prompts, cap = task.prompts.shape[0], self.cap(task)
        return GRPOConfig(
            **lab_trainer_args(output_dir, self.seed, self.lr, self.steps, self.epochs * self.steps,
                               prompts * self.group_size),
            num_generations=self.group_size, steps_per_generation=1, num_iterations=self.steps,
            max_completion_length=cap, temperature=self.temperature, epsilon=self.clip_eps, beta=self.kl * cap,
            use_bias_correction_kl=False, scale_rewards=SCALE_REWARDS[self.delta], **self.descendant_fields(),
        )

    def descendant_fields(self) -> dict:
        """loss_type and issue 37's GRPOConfig fields, each only where set (TRL's defaults otherwise)."""
        fields = {name: getattr(self, name) for name in DESCENDANT_FIELDS if getattr(self, name) is not None}
        fields["delta"] = fields.pop("clip_delta", None)
        if self.loss == "cispo" and self.epsilon_high is None:
            fields["epsilon_high"] = 5.0  # the lab's default cap (TRL would fall back to epsilon)
        if self.loss == "luspo":
            fields["importance_sampling_level"] = "sequence"  # LUSPO's (TRL: "requires" it)
        return {"loss_type": LOSS_TYPES[self.loss_agg] if self.loss == "clipped" else self.loss, **fields}


def reward_function(task: Task, reward: str, cap: int):
    """TRL's reward callable: completion token ids -> the lab's variable-length reward."""
    score = task.variable_length_reward(reward, task.vocab_size)
    eos = task.vocab_size

    def task_reward(prompts, completion_ids, **kwargs):
        prompt_ids = torch.tensor([[int(t) for t in p.split()] for p in prompts])
        padded = torch.full((len(completion_ids), cap), eos)
        for row, ids in enumerate(completion_ids):
            padded[row, :len(ids)] = torch.tensor(ids[:cap], dtype=torch.long)
        return score(prompt_ids, padded.unsqueeze(1)).squeeze(1).tolist()

    return task_reward


def train_trl(task: Task, run: TRLGRPO, scratch: Path | None = None,
              progress=None) -> tuple[list[dict], dict, dict]:
    """Train; return one record per epoch (epoch 0 = before training), TRL's config, and the final weights."""
    from datasets import Dataset
    from trl import GRPOTrainer

    run.check(task)
    cap = run.cap(task)
    responses = all_responses(task.vocab_size, cap)
    rewards = reward_table(task.prompts, responses, task.variable_length_reward(run.reward, task.vocab_size))

    def make_trainer(model_folder: Path, output_dir: Path, callbacks: list):
        data = Dataset.from_dict({"prompt": [words(p) for p in task.prompts]})
        return GRPOTrainer(model=str(model_folder), reward_funcs=reward_function(task, run.reward, cap),
                           args=run.grpo_config(task, output_dir), train_dataset=data,
                           processing_class=build_tokenizer(run.model), callbacks=callbacks)

    return run_with_lens(run.model, make_trainer, task.prompts, responses, run.temperature, run.steps,
                         lambda log_probs, initial: exact_metrics(log_probs, initial, rewards), TRL_NAMES, scratch,
                         progress)
