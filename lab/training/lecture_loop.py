"""The lecture's training loop, re-created in its own structure: the benchmark's baseline only.

    for epoch:  y ~ pi(.|x) (G per prompt);  r = [R(x, y) for every (x, y)]   (a Python loop)
                d = deltas(r);  repeat S times: l = log pi(y|x);  L = -mean(l * d);  Adam step

It follows the shape of the lecture's script (docs/task.md), written afresh: an
`nn.Module` policy with an `nn.Embedding` and einsum encode/decode, rewards
computed one (prompt, response) pair at a time on Python lists, log-probs
recomputed on every step, `torch.optim.Adam`, one run at a time, and a loss
value read back (`.item()`) on every step as the lecture's logging does. Its
defects are not copied: the reference is a deep copy (the lecture's
`model.clone()` crashes) and nothing prints. `lab bench` times it against
`lab.training.train.train`; nothing else uses it. The loop to read
(and to write, lesson 4) is `lab.training.simple_loop`, which calls the lab's own functions.
"""

from __future__ import annotations

import copy
import math

import torch
from einops import einsum
from torch import nn

from lab.training.config import TrainConfig
from tasks.catalog import default_task


class LectureModel(nn.Module):
    """Embedding, per-position encode and decode matrices, logits through the tied embedding."""

    def __init__(self, vocab_size: int, dim: int, prompt_length: int, response_length: int,
                 generator: torch.Generator) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        with torch.no_grad():  # nn.Embedding's own N(0, 1) init, drawn from the run's generator
            self.embedding.weight.copy_(torch.randn(vocab_size, dim, generator=generator))
        scale = 1 / math.sqrt(dim)
        self.encode_weights = nn.Parameter(torch.randn(prompt_length, dim, dim, generator=generator) * scale)
        self.decode_weights = nn.Parameter(torch.randn(response_length, dim, dim, generator=generator) * scale)

    def forward(self, prompts: torch.Tensor) -> torch.Tensor:
        embeddings = self.embedding(prompts)  # float[batch pos dim]
        encoded = einsum(embeddings, self.encode_weights, "batch pos dim1, pos dim1 dim2 -> batch dim2")
        decoded = einsum(encoded, self.decode_weights, "batch dim1, pos dim1 dim2 -> batch pos dim2")
        return einsum(decoded, self.embedding.weight, "batch pos dim, vocab dim -> batch pos vocab")


def generate_responses(prompts, model, num_responses, generator):
    """int[batch trial pos], sampled with torch.multinomial as the lecture does."""
    logits = model(prompts).detach()  # float[batch pos vocab]
    batch, pos, vocab = logits.shape
    probs = torch.softmax(logits, dim=-1).reshape(batch * pos, vocab)
    flat = torch.multinomial(probs, num_samples=num_responses, replacement=True, generator=generator)
    return flat.reshape(batch, pos, num_responses).permute(0, 2, 1)


def compute_rewards(prompts, responses, reward_fn):
    """float[batch trial]: one Python call per (prompt, response), on lists."""
    rewards = [[reward_fn(prompt, response) for response in group]
               for prompt, group in zip(prompts.tolist(), responses.tolist())]
    return torch.tensor(rewards, dtype=torch.float32)


def compute_deltas(rewards, mode):
    if mode == "raw":
        return rewards
    centered = rewards - rewards.mean(dim=-1, keepdim=True)
    if mode == "centered":
        return centered
    if mode == "normalized":
        return centered / (rewards.std(dim=-1, keepdim=True) + 1e-5)
    raise ValueError(f"the lecture loop knows raw, centered and normalized deltas, not {mode!r}")


def compute_log_probs(prompts, responses, model):
    """float[batch trial pos]: recomputed from the model on every call."""
    log_probs = torch.log_softmax(model(prompts), dim=-1)  # float[batch pos vocab]
    num_responses = responses.shape[1]
    log_probs = log_probs.unsqueeze(1).expand(-1, num_responses, -1, -1)  # float[batch trial pos vocab]
    return log_probs.gather(-1, responses.unsqueeze(-1)).squeeze(-1)


def compute_loss(log_probs, deltas, mode, old_log_probs=None, eps=0.01):
    if mode == "naive":
        return -einsum(log_probs, deltas, "batch trial pos, batch trial -> batch trial pos").mean()
    if mode not in ("unclipped", "clipped"):
        raise ValueError(f"the lecture loop knows the naive, unclipped and clipped losses, not {mode!r}")
    ratios = torch.exp(log_probs - old_log_probs)
    unclipped = einsum(ratios, deltas, "batch trial pos, batch trial -> batch trial pos")
    if mode == "unclipped":
        return -unclipped.mean()
    clipped = einsum(torch.clamp(ratios, 1 - eps, 1 + eps), deltas, "batch trial pos, batch trial -> batch trial pos")
    return -torch.minimum(unclipped, clipped).mean()


def compute_kl_penalty(log_probs, ref_log_probs):
    return (torch.exp(ref_log_probs - log_probs) - (ref_log_probs - log_probs) - 1).sum(dim=-1).mean()


def lecture_train(config: TrainConfig = TrainConfig()) -> list[dict]:
    """One run of the lecture's loop on its prompts; returns the per-step (epoch, step, loss, reward) log."""
    generator = torch.Generator().manual_seed(config.seed)
    task = default_task()  # the lecture's prompts, vocabulary and rewards on lists
    prompts = task.prompts
    model = LectureModel(task.vocab_size, config.dim, prompts.shape[1], prompts.shape[1], generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    reward_fn = task.references[config.reward]
    loss_mode, delta_mode = config.loss.value, config.delta.value
    log = []
    for epoch in range(config.epochs):
        if config.kl > 0 and (epoch == 0 or (config.kl_period > 0 and epoch % config.kl_period == 0)):
            ref_model = copy.deepcopy(model)
        responses = generate_responses(prompts, model, config.group_size, generator)
        rewards = compute_rewards(prompts, responses, reward_fn)
        deltas = compute_deltas(rewards, delta_mode)
        if config.kl > 0:
            with torch.no_grad():
                ref_log_probs = compute_log_probs(prompts, responses, ref_model)
        old_log_probs = None
        if config.loss.entry.needs_old:
            with torch.no_grad():
                old_log_probs = compute_log_probs(prompts, responses, model)
        for step in range(config.steps):
            log_probs = compute_log_probs(prompts, responses, model)
            loss = compute_loss(log_probs, deltas, loss_mode, old_log_probs, config.clip_eps)
            if config.kl > 0:
                loss = loss + config.kl * compute_kl_penalty(log_probs, ref_log_probs)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            log.append({"epoch": epoch, "step": step, "loss": loss.item(), "mean_reward": rewards.mean().item()})
    return log
