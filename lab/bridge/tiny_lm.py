"""A tiny causal transformer over the sorting task's tokens, built in code (no download).

Tokens: the task's values 0..V-1 as the words "0".."V-1", then EOS (id V, also the padding token),
so that a response of token ids y_1..y_n is the text "y_1 ... y_n" and token id = the lab's id.
A prompt x is the text "x_1 ... x_n"; the model continues it with a response ending in EOS. The
model's vocabulary is exactly the autoregressive policy's (V values + EOS): whatever TRL samples is
a response `lab.exact.varlen` enumerates, so the exact metrics see the whole distribution.

The model is a `LlamaForCausalLM` of `TinyLM.layers` layers of width `TinyLM.width`, randomly
initialised from `TinyLM.seed` inside `torch.random.fork_rng` (transformers initialises from torch's
global generator; forking it leaves the caller's state as it was).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub: models and tokenizers are made in code
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@dataclass(frozen=True)
class TinyLM:
    """The transformer's size. Defaults: 2 layers of width 32 (about 25k parameters at V = 5)."""

    vocab_size: int = 5
    """task values 0..V-1 (the lab's `--vocab-size`); the model's vocabulary adds EOS"""
    layers: int = 2
    """decoder layers (transformers' `num_hidden_layers`)"""
    width: int = 32
    """hidden size; the MLP is 2x wide"""
    heads: int = 4
    """attention heads (width must be a multiple)"""
    max_positions: int = 16
    """prompt + response + EOS must fit (transformers' `max_position_embeddings`)"""
    seed: int = 0
    """the initialisation's seed"""

    @property
    def eos_id(self) -> int:
        """EOS is the lab's EOS id (V); it pads too (a separate padding token could be sampled)."""
        return self.vocab_size


def words(tokens: list[int] | torch.Tensor) -> str:
    """Token ids -> the text the tokenizer reads back as the same ids ("1 0 2")."""
    return " ".join(str(int(t)) for t in tokens)


def build_tokenizer(spec: TinyLM):
    """A word-level tokenizer: "0".."V-1" -> 0..V-1, "<eos>" -> V (also padding); no BOS, left padding."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {str(v): v for v in range(spec.vocab_size)} | {"<eos>": spec.eos_id}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<eos>", padding_side="left")


def build_model(spec: TinyLM):
    """The randomly initialised causal LM (float32; its dropout is 0)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=spec.vocab_size + 1, hidden_size=spec.width, intermediate_size=2 * spec.width,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
        max_position_embeddings=spec.max_positions, bos_token_id=None, eos_token_id=spec.eos_id,
        pad_token_id=spec.eos_id, tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)  # inside the fork: the caller's global generator is untouched
        return LlamaForCausalLM(config)


def save_pretrained(spec: TinyLM, folder: Path) -> Path:
    """Write the model and tokenizer where TRL can load them by path (it builds its reference model so)."""
    build_model(spec).save_pretrained(folder)
    build_tokenizer(spec).save_pretrained(folder)
    return folder
