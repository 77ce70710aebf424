"""DPO on the sorting task by TRL's `DPOTrainer` (offline) or `OnlineDPOTrainer`, seen through the exact lens.

The lab's offline pairs (`lab.training.preference_pairs`): before training, 2N responses per prompt
drawn from pi_ref (the initial model; here drawn exactly from its enumerated distribution with a
`torch.Generator`), paired (y_i, y_N+i) and judged by the true reward: argmax (the higher reward wins,
ties dropped) or Bradley-Terry (the first wins with probability sigmoid(r_1 - r_2)). Every epoch takes
`steps` optimizer steps on the whole fixed set (one batch). TRL's reference model is the initial model.

Online (`pairs="online"`, TRL's experimental `OnlineDPOTrainer`): every step samples two completions
per prompt from the current policy and the higher reward wins. Unlike the lab's online pairs (the
group's highest against its lowest, none from a group of equal rewards), TRL keeps a tied pair with
the first completion as the winner, and its online IPO sums log-ratios (its offline IPO averages them).

Besides `lab.bridge.exact_lm`'s metrics, every epoch records the exact distance to the optimum of
J_beta with pi_ref = the initial model (`lab.exact.optimum`): kl_to_optimum = KL(pi || pi*), pi* =
pi_ref exp(r / beta) / Z. TRL appends EOS to every completion; a response truncated at the cap has
none, and the sequence cap (`max_length` = prompt + cap, keep_start) cuts the appended one off again,
so TRL trains on exactly the enumerated responses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from lab.bridge.exact_lm import all_responses, exact_metrics, response_log_probs, reward_table
from lab.bridge.lens_run import lab_trainer_args, run_with_lens
from lab.bridge.tiny_lm import TinyLM, build_model, build_tokenizer, words
from lab.bridge.trl_grpo import reward_function
from lab.core.dpo import preference_probability
from lab.exact.optimum import kl_divergence, kl_regularized_optimum
from lab.policies.ar_model import response_mask
from tasks import Task

DPO_NAMES = {
    "rewards/chosen": "chosen_rewards", "rewards/rejected": "rejected_rewards",
    "rewards/accuracies": "reward_accuracy", "rewards/margins": "reward_margin",
    "logps/chosen": "chosen_logps", "logps/rejected": "rejected_logps", "loss": "loss", "grad_norm": "grad_norm",
}
"""TRL's DPO logs -> the lab's names (the records glossary)."""


@dataclass(frozen=True)
class TRLDPO:
    """An offline DPO run by TRL, in the lab's settings (`lab run --loss dpo --pairs offline`)."""

    epochs: int = 30
    steps: int = 1
    pairs_per_prompt: int = 16
    """N: 2N responses per prompt from pi_ref, paired (y_i, y_N+i)"""
    beta: float = 0.1
    """DPO's beta (the lab's --kl)"""
    dpo_loss: str = "sigmoid"
    """TRL loss_type; its "ipo" divides each log-ratio by the completion's length (docs/trl.md)"""
    preference: str = "argmax"
    """offline pairs: argmax (ties dropped) or bradley-terry; online pairs are judged by TRL (argmax, ties kept)"""
    pairs: str = "offline"
    """offline: DPOTrainer on a fixed set from pi_ref; online: OnlineDPOTrainer, two fresh samples per prompt"""
    lr: float = 1e-3
    reward: str = "inclusion-ordering"
    max_length: int | None = None
    seed: int = 5
    model: TinyLM = field(default_factory=TinyLM)

    def cap(self, task: Task) -> int:
        return task.prompts.shape[1] + 1 if self.max_length is None else self.max_length

    def dpo_config(self, task: Task, pairs: int, output_dir: Path):
        from trl import DPOConfig

        return DPOConfig(
            **lab_trainer_args(output_dir, self.seed, self.lr, self.steps, self.epochs * self.steps, pairs),
            beta=self.beta, loss_type=[self.dpo_loss], max_length=task.prompts.shape[1] + self.cap(task),
            truncation_mode="keep_start",
        )


    def online_config(self, task: Task, output_dir: Path):
        from trl.experimental.online_dpo import OnlineDPOConfig

        cap = self.cap(task)
        return OnlineDPOConfig(
            **lab_trainer_args(output_dir, self.seed, self.lr, 1, self.epochs, task.prompts.shape[0]),
            beta=[self.beta], loss_type=self.dpo_loss, max_new_tokens=cap, max_length=task.prompts.shape[1] + cap,
            temperature=1.0, top_p=1.0, top_k=0,
        )


def offline_pairs(task: Task, run: TRLDPO, responses: torch.Tensor, rewards: torch.Tensor) -> list[dict]:
    """The fixed set as TRL's rows {prompt, chosen, rejected} (texts; TRL appends EOS), ties dropped under argmax."""
    generator = torch.Generator().manual_seed(run.seed)
    with torch.no_grad():
        probs = response_log_probs(build_model(run.model).eval(), task.prompts, responses, task.vocab_size).exp()
    n = run.pairs_per_prompt
    drawn = torch.multinomial(probs, 2 * n, replacement=True, generator=generator)  # int[batch 2N] response ids
    first, second = drawn[:, :n], drawn[:, n:]
    p_first, keep = preference_probability(rewards.gather(1, first), rewards.gather(1, second), run.preference)
    first_wins = torch.rand(p_first.shape, generator=generator, dtype=p_first.dtype) < p_first
    live = response_mask(responses, task.vocab_size)
    rows = []
    for b, prompt in enumerate(task.prompts):
        for k in range(n):
            if not keep[b, k]:
                continue
            winner, loser = (first, second) if first_wins[b, k] else (second, first)
            chosen, rejected = (responses[i[b, k]][live[i[b, k]]] for i in (winner, loser))
            # content then a space: TRL's appended "<eos>" is then a word of its own
            rows.append({"prompt": words(prompt), "chosen": " " + words(chosen[chosen != task.vocab_size]) + " ",
                         "rejected": " " + words(rejected[rejected != task.vocab_size]) + " "})
    return rows


def train_trl_dpo(task: Task, run: TRLDPO, scratch: Path | None = None,
                  progress=None) -> tuple[list[dict], dict, dict]:
    """Train; one record per epoch (epoch 0 = before training), TRL's config, the final weights."""
    from datasets import Dataset
    from trl import DPOTrainer

    cap = run.cap(task)
    responses = all_responses(task.vocab_size, cap)
    rewards = reward_table(task.prompts, responses, task.variable_length_reward(run.reward, task.vocab_size))
    online = run.pairs == "online"
    rows = [{"prompt": words(p)} for p in task.prompts] if online else offline_pairs(task, run, responses, rewards)

    def metrics(log_probs, initial):
        star = kl_regularized_optimum(initial.exp(), rewards, run.beta)
        offline = {} if online else {"pairs": len(rows)}
        return {**exact_metrics(log_probs, initial, rewards),
                "kl_to_optimum": float(kl_divergence(log_probs.exp(), star).mean()), **offline}

    def make_trainer(model_folder: Path, output_dir: Path, callbacks: list):
        data = Dataset.from_list(rows)
        if online:
            from trl.experimental.online_dpo import OnlineDPOTrainer

            return OnlineDPOTrainer(model=str(model_folder), reward_funcs=reward_function(task, run.reward, cap),
                                    args=run.online_config(task, output_dir), train_dataset=data,
                                    processing_class=build_tokenizer(run.model), callbacks=callbacks)
        return DPOTrainer(model=str(model_folder), args=run.dpo_config(task, len(rows), output_dir),
                          train_dataset=data, processing_class=build_tokenizer(run.model), callbacks=callbacks)

    return run_with_lens(run.model, make_trainer, task.prompts, responses, 1.0, 1 if online else run.steps,
                         metrics, DPO_NAMES, scratch, progress)
