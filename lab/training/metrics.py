"""The training loop's diagnostics, computed in bulk (definitions in `lab.training.records`).

    loss      = the loss the step minimised, as the step computed it (surrogate + beta * KL term - bonus)
    kl        = mean over (batch, trial) of sum over pos of k3(l, l_ref)       (an estimate)
    kl_exact  = mean over batch of sum over pos of sum_v p(v) (log p(v) - log p_ref(v))
    ratio     = exp(l - l_old);  clip fractions by side;  entropy = -sum_v p log p

The loop keeps each step's log-probs and computes these for a block of epochs
at once: a few dozen large kernels instead of a dozen small ones per step.
Only speed depends on the block size; the numbers are the same.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.exact.enumeration import exact_kl
from lab.core.kl import kl_estimate
from lab.core.losses import clip_fractions_from_ratios
from lab.policies.sampling import entropy_from_log_softmax

METRIC_BLOCK_TOKENS = 2**22
"""Epochs are grouped into blocks of about this many tokens (steps x runs x batch x trial x pos):
all epochs of a short run in one block, while a large sweep's blocks stay near a hundred MB (at 1000
runs, 2**22 trains about 8% faster than 2**20: fewer, larger kernels)."""


def block_epochs(epochs: int, tokens_per_epoch: int) -> int:
    """How many epochs one metric block holds."""
    return max(1, min(epochs, METRIC_BLOCK_TOKENS // tokens_per_epoch))


def step_metrics(log_probs: Tensor, old_log_probs: Tensor, ref_log_probs: Tensor, log_softmax: Tensor,
                 ref_log_softmax: Tensor, pg_loss: Tensor, loss: Tensor, deltas: Tensor,
                 clip_eps: Tensor) -> dict[str, Tensor]:
    """Every step metric of a block of epochs, each float[step epoch run].

    log_probs float[step epoch run batch trial pos] (each measured before its step's update),
    log_softmax float[step epoch run batch pos vocab], pg_loss and loss float[step epoch run] (the
    loss as the step computed it: under seq-mean-token-sum its KL term is C times `kl`, and an
    entropy bonus is in it); the epochs' old_log_probs, ref_log_probs float[epoch run batch trial pos],
    ref_log_softmax float[epoch run batch pos vocab] and deltas float[epoch run batch trial].
    """
    kl = kl_estimate(log_probs, ref_log_probs)  # k3
    # a KL is >= 0; float rounding can leave -1e-8 where the policies agree
    kl_exact = exact_kl(log_softmax, ref_log_softmax).sum(dim=-1).mean(dim=-1).clamp_min(0)  # float[step epoch run]
    rho = (log_probs - old_log_probs).exp_()  # lab.core.losses.ratios
    low, high = clip_fractions_from_ratios(rho, deltas, clip_eps)
    entropy = entropy_from_log_softmax(log_softmax).mean(dim=(-2, -1))
    return dict(loss=loss, pg_loss=pg_loss, kl=kl, kl_exact=kl_exact,
                ratio_mean=rho.mean(dim=(-3, -2, -1)), ratio_max=rho.amax(dim=(-3, -2, -1)),
                clip_fraction=low + high, clip_low_fraction=low, clip_high_fraction=high,
                entropy=entropy)


class StepMetricBlock:
    """Collects a block of epochs' per-step tensors, then computes their metrics in one go.

        block.add_step(step, log_probs, log_softmax, pg_loss, loss)   every optimizer step
        block.end_epoch(old_log_probs, ref_log_probs, ref_log_softmax, deltas)
        if block.full or last epoch:  values = block.flush(clip_eps)   # float[(epoch step) run]
    """

    def __init__(self, steps: int, epochs: int) -> None:
        self.steps, self.epochs = steps, epochs
        self._clear()

    def _clear(self) -> None:
        # per step index, one entry per epoch, so that stacking puts the step axis outermost
        self.log_probs, self.log_softmax, self.pg_loss, self.loss = ([[] for _ in range(self.steps)] for _ in range(4))
        self.old, self.ref, self.ref_log_softmax, self.deltas = [], [], [], []

    def add_step(self, step: int, log_probs: Tensor, log_softmax: Tensor, pg_loss: Tensor, loss: Tensor) -> None:
        # log-probs are kept in the fused path's memory order (pos before trial) and viewed back as
        # [... trial pos] when the metrics are computed: every token-sized operation is then contiguous
        self.log_probs[step].append(log_probs.detach().mT)
        self.log_softmax[step].append(log_softmax.detach())
        self.pg_loss[step].append(pg_loss.detach())
        self.loss[step].append(loss.detach())

    def end_epoch(self, old_log_probs: Tensor, ref_log_probs: Tensor, ref_log_softmax: Tensor,
                  deltas: Tensor) -> None:
        self.old.append(old_log_probs.mT)
        self.ref.append(ref_log_probs.mT)
        self.ref_log_softmax.append(ref_log_softmax)
        self.deltas.append(deltas)

    @property
    def full(self) -> bool:
        return len(self.deltas) == self.epochs

    @torch.no_grad()
    def flush(self, clip_eps: Tensor) -> dict[str, Tensor]:
        """The collected epochs' step metrics, float[(epoch step) run] each; then start a new block."""
        epochs = len(self.deltas)

        def by_step(per_step: list[list[Tensor]]) -> Tensor:  # float[step epoch ...]
            return torch.stack([t for ts in per_step for t in ts]).unflatten(0, (self.steps, epochs))

        values = step_metrics(by_step(self.log_probs).mT, torch.stack(self.old).mT, torch.stack(self.ref).mT,
                              by_step(self.log_softmax), torch.stack(self.ref_log_softmax),
                              by_step(self.pg_loss), by_step(self.loss), torch.stack(self.deltas), clip_eps)
        self._clear()
        return {name: value.transpose(0, 1).flatten(0, 1) for name, value in values.items()}


def sample_metrics(rewards: Tensor, optimum: Tensor, correction: int) -> dict[str, Tensor]:
    """The sampled groups' metrics from rewards float[run epoch batch trial]: float[run epoch] each."""
    spread = rewards.std(dim=-1, correction=correction)  # float[run epoch batch]
    return dict(mean_reward=rewards.mean(dim=(-2, -1)),
                reward_fraction=(rewards / optimum[:, None, :, None]).mean(dim=(-2, -1)),
                reward_std=spread.mean(-1),
                zero_std_fraction=(rewards.amax(-1) == rewards.amin(-1)).float().mean(-1))


def greedy_metrics(rewards: Tensor, greedy: Tensor, targets: Tensor, optimum: Tensor):
    """Reward, fraction of optimum and exact accuracy of argmax responses, three float[run epoch].

    rewards float[run epoch batch] of the greedy responses int[run epoch batch pos];
    targets int[batch pos]; optimum float[run batch].
    """
    exact = (greedy == targets).all(dim=-1).float()  # float[run epoch batch]
    return rewards.mean(-1), (rewards / optimum.unsqueeze(-2)).mean(-1), exact.mean(-1)


def greedy_log(score, training: tuple[Tensor, Tensor, Tensor], greedy: list[Tensor],
               heldout: tuple[Tensor, Tensor, Tensor] | None, heldout_greedy: list[Tensor]) -> dict[str, Tensor]:
    """Both loops' greedy epoch metrics, float[run epoch] each: greedy_reward, greedy_fraction and
    greedy_accuracy on the training prompts, heldout_greedy_reward and heldout_greedy_accuracy on
    the held-out ones (NaN without them). `training` and `heldout` are (prompts int[batch pos],
    targets int[batch pos], optimum float[run batch]); `greedy` the epochs' argmax responses
    int[run batch pos]; score(prompts, responses int[run epoch batch pos]) -> float[run epoch batch]."""
    prompts, targets, optimum = training
    responses = torch.stack(greedy, dim=1)  # int[run epoch batch pos]
    log = dict(zip(("greedy_reward", "greedy_fraction", "greedy_accuracy"),
                   greedy_metrics(score(prompts, responses), responses, targets, optimum)))
    if heldout is None:
        nan = torch.full(responses.shape[:2], float("nan"), device=responses.device)
        log["heldout_greedy_reward"], log["heldout_greedy_accuracy"] = nan, nan
    else:
        prompts, targets, optimum = heldout
        held = torch.stack(heldout_greedy, dim=1)
        reward, _, accuracy = greedy_metrics(score(prompts, held), held, targets, optimum)
        log["heldout_greedy_reward"], log["heldout_greedy_accuracy"] = reward, accuracy
    return log
