"""TRL's trainers built on the tiny transformer, for calling TRL's own loss and advantage code.

TRL's losses are methods of its trainers (`GRPOTrainer._compute_loss`, `DPOTrainer._compute_loss`),
not free functions, so each parity test builds a trainer on `lab.bridge.tiny_lm`'s model (saved to a
temporary folder: TRL builds its reference model from the policy's path) and feeds the method
inputs the test chose. Where the method would run the model, the test hands it the log-probs it
chose instead, so TRL's formula and the lab's see the same numbers.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

trl = pytest.importorskip("trl", reason="the TRL extra is not installed (pip install -e '.[trl]')")

from lab.bridge.tiny_lm import TinyLM, build_tokenizer, save_pretrained, words  # noqa: E402

TINY = TinyLM()
PROMPTS = [[1, 0, 2], [3, 2, 4], [1, 2, 3]]


def model_folder(tmp_path_factory) -> Path:
    return save_pretrained(TINY, tmp_path_factory.mktemp("tiny_lm"))


def quiet_args(config_class, out: Path, **fields):
    """A TRL config that trains on the CPU in float32 (TRL 1.16 defaults to bf16 autocast) and logs nowhere."""
    return config_class(output_dir=str(out), report_to=[], use_cpu=True, save_strategy="no", bf16=False, **fields)


def grpo_trainer(folder: Path, reward_func, **fields):
    from datasets import Dataset

    args = quiet_args(trl.GRPOConfig, folder / "out", **fields)
    data = Dataset.from_dict({"prompt": [words(p) for p in PROMPTS]})
    trainer = trl.GRPOTrainer(model=str(folder), reward_funcs=reward_func, args=args, train_dataset=data,
                              processing_class=build_tokenizer(TINY))
    trainer.model.eval()  # eval: TRL divides by no gradient-accumulation count
    return trainer


def grpo_loss(trainer, log_probs, old_log_probs, ref_log_probs, advantages, mask, entropies=None, **extra):
    """TRL's GRPO loss on the given per-token log-probs float[seq pos] (requires grad): the model's
    forward pass is replaced by them, everything after it is TRL's code. `entropies` float[seq pos] (default 0)
    stand for the model's per-token entropies; `extra` are further inputs (importance_sampling_ratio, ...)."""
    seqs, length = log_probs.shape
    entropies = torch.zeros_like(log_probs) if entropies is None else entropies
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (log_probs, entropies, None)
    inputs = dict(
        prompt_ids=torch.zeros(seqs, 1, dtype=torch.long), prompt_mask=torch.ones(seqs, 1, dtype=torch.long),
        completion_ids=torch.zeros(seqs, length, dtype=torch.long), completion_mask=mask.long(),
        advantages=advantages, old_per_token_logps=old_log_probs, ref_per_token_logps=ref_log_probs,
        num_items_in_batch=mask.sum(), **extra,
    )
    return trainer._compute_loss(trainer.model, inputs)


def dpo_trainer(folder: Path, **fields):
    from datasets import Dataset

    args = quiet_args(trl.DPOConfig, folder / "dpo_out", **fields)
    data = Dataset.from_dict({"prompt": [words(p) for p in PROMPTS],
                              "chosen": [words(sorted(p)) for p in PROMPTS],
                              "rejected": [words(sorted(p, reverse=True)) for p in PROMPTS]})
    trainer = trl.DPOTrainer(model=str(folder), args=args, train_dataset=data, processing_class=build_tokenizer(TINY))
    trainer.model.eval()
    trainer.precompute_ref_logps = True  # the reference log-probs come with the inputs (the test's own)
    return trainer


def dpo_loss(trainer, token_log_probs, ref_sums, completion_mask):
    """TRL's DPO loss for per-token log-probs float[2P pos] (chosen rows first, then rejected), the
    reference's sequence log-probs float[2P] and the completion mask int[2P pos+1] (TRL shifts it)."""
    pairs = token_log_probs.shape[0] // 2
    shifted = completion_mask[:, 1:].to(token_log_probs.dtype)

    def model(**kwargs):  # what TRL reads of a forward pass; the metrics' fields are zeros
        zeros = torch.zeros_like(token_log_probs)
        return types.SimpleNamespace(log_probs=token_log_probs * shifted, entropy=zeros, mean_logits=zeros,
                                     log_sum_sq_probs=zeros, is_top1=zeros.bool())

    inputs = dict(input_ids=torch.zeros_like(completion_mask), attention_mask=torch.ones_like(completion_mask),
                  completion_mask=completion_mask, ref_chosen_logps=ref_sums[:pairs],
                  ref_rejected_logps=ref_sums[pairs:])
    return trainer._compute_loss(model, inputs, return_outputs=False)
