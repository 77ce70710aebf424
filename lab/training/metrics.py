"""The training loop's diagnostics, computed in bulk (definitions in `lab.training.records`).

    loss      = the loss the step minimised, as the step computed it (surrogate + beta * KL term - bonus)
    kl        = mean over (batch, trial) of sum over pos of k3(l, l_ref)       (an estimate)
    kl_exact  = mean over batch of sum over pos of sum_v p(v) (log p(v) - log p_ref(v))
    ratio     = exp(l - l_old);  clip fractions by side;  entropy = -sum_v p log p

For the autoregressive policy, with the live-token mask m (EOS included, padding 0) and l, l_old,
l_ref 0 on padding, every token metric is a mean over live tokens (ratio_mean = sum m rho / sum m,
ratio_max over live tokens, clip fractions and the entropy of each live position's next-token
distribution given the sampled prefix), `kl` is the same sum (k3(0, 0) = 0 on padding), and
`kl_exact` is the value the loop recorded.

The loop keeps each step's log-probs and computes these for a block of epochs
at once: a few dozen large kernels instead of a dozen small ones per step, no host sync.
Only speed depends on the block size; the numbers are the same. What each policy kind keeps and
computes is one `BlockMetrics` (`FIXED_LENGTH_METRICS`, `LIVE_TOKEN_METRICS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from lab.exact.enumeration import exact_kl
from lab.core.kl import kl_estimate
from lab.policies.sampling import entropy_from_log_softmax

TOKEN_AXES = (-3, -2, -1)  # batch trial pos

METRIC_BLOCK_TOKENS = 2**22
"""Epochs are grouped into blocks of about this many tokens (steps x runs x batch x trial x pos):
all epochs of a short run in one block, while a large sweep's blocks stay near a hundred MB (at 1000
runs, 2**22 trains about 8% faster than 2**20: fewer, larger kernels)."""


def block_epochs(epochs: int, tokens_per_epoch: int) -> int:
    """How many epochs one metric block holds."""
    return max(1, min(epochs, METRIC_BLOCK_TOKENS // tokens_per_epoch))


ClipMetrics = Callable[[Tensor, Tensor, Tensor | None], tuple[Tensor, Tensor]]
"""(ratio float[step epoch run batch trial pos], side float[epoch run batch trial 1 or pos], mask or None) -> each
run's (low, high) clip fractions float[step epoch run], by its loss's entry (`lab.training.runs.clip_metrics`)."""


def step_metrics(log_probs: Tensor, old_log_probs: Tensor, ref_log_probs: Tensor, log_softmax: Tensor,
                 ref_log_softmax: Tensor, deltas: Tensor, clip: ClipMetrics) -> dict[str, Tensor]:
    """Every computed step metric of a block of epochs at fixed length, each float[step epoch run].

    log_probs float[step epoch run batch trial pos] (each measured before its step's update),
    log_softmax float[step epoch run batch pos vocab]; the epochs' old_log_probs, ref_log_probs
    float[epoch run batch trial pos], ref_log_softmax float[epoch run batch pos vocab] and deltas
    float[epoch run batch trial] (or float[epoch run batch trial pos]: GAE's advantages, one per token).
    `clip`: each run's clip fractions by its loss (NaN where its loss has none: DPO, SFT).
    """
    kl = kl_estimate(log_probs, ref_log_probs)  # k3
    # a KL is >= 0; float rounding can leave -1e-8 where the policies agree
    kl_exact = exact_kl(log_softmax, ref_log_softmax).sum(dim=-1).mean(dim=-1).clamp_min(0)  # float[step epoch run]
    rho = (log_probs - old_log_probs).exp_()  # lab.core.losses.ratios
    low, high = clip(rho, deltas if deltas.dim() == old_log_probs.dim() else deltas.unsqueeze(-1), None)
    entropy = entropy_from_log_softmax(log_softmax).mean(dim=(-2, -1))
    return dict(kl=kl, kl_exact=kl_exact, ratio_mean=rho.mean(dim=(-3, -2, -1)), ratio_max=rho.amax(dim=(-3, -2, -1)),
                clip_fraction=low + high, clip_low_fraction=low, clip_high_fraction=high, entropy=entropy)


def live_step_metrics(log_probs: Tensor, entropy: Tensor, old: Tensor, ref: Tensor, mask: Tensor,
                      deltas: Tensor, clip: ClipMetrics) -> dict[str, Tensor]:
    """Token metrics over live tokens, float[step epoch run], from log_probs and each position's entropy
    float[step epoch run batch trial pos] (`lab.policies.ar_fused.ar_log_probs`), and the epochs' old, ref
    float[epoch run batch trial pos], mask bool[epoch run batch trial pos], deltas float[epoch run batch trial]
    (or one per token, float[epoch run batch trial pos])."""
    live = mask.to(log_probs.dtype)
    tokens = live.sum(dim=TOKEN_AXES)
    ratio = (log_probs - old).exp()  # padding: exp(0 - 0) = 1
    rho = ratio * live  # counted as 0
    kl = kl_estimate(log_probs, ref)  # k3(0, 0) = 0 on padding
    low, high = clip(ratio, deltas if deltas.dim() == old.dim() else deltas.unsqueeze(-1), mask)
    entropy = entropy * live
    return dict(kl=kl,
                ratio_mean=rho.sum(dim=TOKEN_AXES) / tokens, ratio_max=rho.amax(dim=TOKEN_AXES),
                clip_fraction=low + high, clip_low_fraction=low, clip_high_fraction=high,
                entropy=entropy.sum(dim=TOKEN_AXES) / tokens)


class BlockMetrics(NamedTuple):
    """What a policy kind keeps of each step and epoch, and the metrics it computes from them."""

    keep_step: Callable[[Tensor | None, Tensor], dict[str, Tensor]]
    """(log_probs on the groups or None, the fused node's second output) -> tensors to keep"""
    keep_epoch: Callable[..., dict[str, Tensor]]
    """(old_log_probs, ref_log_probs, the reference's second output, mask or None, deltas, responses) -> tensors
    to keep"""
    compute: Callable[[dict[str, Tensor], dict[str, Tensor], ClipMetrics], dict[str, Tensor]]
    """(kept per step float[step epoch ...], kept per epoch float[epoch ...], clip) -> float[step epoch run]"""
    from_log_softmax: bool
    """True: the groups' log-probs can be read off the kept log-softmaxes, so the step's forward pass need only
    cover what its loss reads (a DPO batch: its pairs; the step hands None for the groups' log-probs); False:
    the forward pass must cover the groups"""


def _fixed_length_metrics(step: dict[str, Tensor], epoch: dict[str, Tensor], clip: ClipMetrics):
    # the old log-probs are the first step's (its policy is the sampling policy); without the step's own
    # log-probs (a DPO step's forward pass covered its pairs), the groups' are gathers from the log-softmaxes,
    # equal to the fused node's own gather; the reference's always come from its log-softmax
    index = epoch["responses"]  # int[epoch run batch pos trial], the fused path's memory order (pos before trial)
    log_probs = step.get("log_probs")  # float[step epoch run batch pos trial]
    if log_probs is None:
        log_probs = step["log_softmax"].gather(-1, index.expand(step["log_softmax"].shape[0], *index.shape))
    ref = epoch["ref_log_softmax"].gather(-1, index)  # float[epoch run batch pos trial]
    return step_metrics(log_probs.mT, log_probs[0].mT, ref.mT, step["log_softmax"], epoch["ref_log_softmax"],
                        epoch["deltas"], clip)


FIXED_LENGTH_METRICS = BlockMetrics(
    # log-probs are kept in the fused path's memory order (pos before trial) and viewed back as
    # [... trial pos] when the metrics are computed: every token-sized operation is then contiguous
    keep_step=lambda log_probs, log_softmax: (dict(log_softmax=log_softmax) if log_probs is None else
                                              dict(log_probs=log_probs.mT, log_softmax=log_softmax)),
    keep_epoch=lambda old, ref, ref_log_softmax, mask, deltas, responses: dict(
        ref_log_softmax=ref_log_softmax, deltas=deltas, responses=responses.mT),
    compute=_fixed_length_metrics,
    from_log_softmax=True,
)
"""The factorised policy: every position live; entropy and `kl_exact` from the whole log-softmaxes, the groups'
log-probs from the steps (or, where a step's forward pass covered only DPO's pairs, from the log-softmaxes)."""

LIVE_TOKEN_METRICS = BlockMetrics(
    keep_step=lambda log_probs, entropy: dict(log_probs=log_probs, entropy=entropy),
    keep_epoch=lambda old, ref, ref_entropy, mask, deltas, responses: dict(
        old=old, ref=ref, mask=mask, deltas=deltas),
    compute=lambda step, epoch, clip: live_step_metrics(
        step["log_probs"], step["entropy"], epoch["old"], epoch["ref"], epoch["mask"], epoch["deltas"], clip),
    from_log_softmax=False,
)
"""The autoregressive policy: means over live tokens, each position's entropy from the fused node; its
`kl_exact` is recorded by the loop (`lab.training.kinds.Autoregressive.start_epoch`)."""


class StepMetricBlock:
    """Collects a block of epochs' per-step tensors, then computes their metrics in one go.

        block.add_step(step, log_probs, aux, loss=..., pg_loss=...)   every optimizer step (recorded: float[run])
        block.end_epoch(old_log_probs, ref_log_probs, ref_aux, mask, deltas, responses)
        if block.full or last epoch:  values = block.flush(clip)   # float[(epoch step) run] each

    `aux` is the fused log-prob node's second output; `metrics` (one per policy kind) says what is kept.
    """

    def __init__(self, steps: int, epochs: int, metrics: BlockMetrics) -> None:
        self.steps, self.epochs, self.metrics = steps, epochs, metrics
        self._clear()

    def _clear(self) -> None:
        # per step index, one entry per epoch, so that stacking puts the step axis outermost
        self.per_step: list[list[tuple[dict[str, Tensor], dict[str, Tensor]]]] = [[] for _ in range(self.steps)]
        self.per_epoch: list[dict[str, Tensor]] = []

    def add_step(self, step: int, log_probs: Tensor | None, aux: Tensor, **recorded: Tensor) -> None:
        """log_probs: the step's on the groups, or None where `from_log_softmax` and the pass covered others."""
        self.per_step[step].append((recorded, self.metrics.keep_step(None if log_probs is None else log_probs.detach(),
                                                                     aux.detach())))

    def end_epoch(self, old_log_probs: Tensor, ref_log_probs: Tensor, ref_aux: Tensor, mask: Tensor | None,
                  deltas: Tensor, responses: Tensor) -> None:
        """The epoch's tensors on its groups (responses int[run batch trial pos]); the log-probs are those of
        the step's forward pass (the groups', or a DPO batch's pairs where `from_log_softmax`)."""
        self.per_epoch.append(self.metrics.keep_epoch(old_log_probs, ref_log_probs, ref_aux, mask, deltas,
                                                      responses))

    @property
    def full(self) -> bool:
        return len(self.per_epoch) == self.epochs

    @torch.no_grad()
    def flush(self, clip: ClipMetrics) -> dict[str, Tensor]:
        """The collected epochs' step metrics, float[(epoch step) run] each; then start a new block. `clip`: each
        run's clip fractions by its loss (NaN where none apply: DPO, SFT)."""
        epochs = len(self.per_epoch)

        def by_step(part: int, name: str) -> Tensor:  # float[step epoch ...]
            return torch.stack([d[part][name] for ds in self.per_step for d in ds]).unflatten(0, (self.steps, epochs))

        recorded, kept = self.per_step[0][0]
        per_epoch = {name: torch.stack([d[name] for d in self.per_epoch]) for name in self.per_epoch[0]}
        values = {name: by_step(0, name) for name in recorded}
        values.update(self.metrics.compute({name: by_step(1, name) for name in kept}, per_epoch, clip))
        self._clear()
        return {name: value.transpose(0, 1).flatten(0, 1) for name, value in values.items()}


def sample_metrics(rewards: Tensor, optimum: Tensor, correction: int) -> dict[str, Tensor]:
    """The sampled groups' metrics from rewards float[run epoch batch trial]: float[run epoch] each."""
    spread = rewards.std(dim=-1, correction=correction)  # float[run epoch batch]
    return dict(mean_reward=rewards.mean(dim=(-2, -1)),
                reward_fraction=(rewards / optimum[:, None, :, None]).mean(dim=(-2, -1)),
                reward_std=spread.mean(-1),
                zero_std_fraction=(rewards.amax(-1) == rewards.amin(-1)).float().mean(-1))


def greedy_metrics(rewards: Tensor, correct: Tensor, optimum: Tensor):
    """Reward, fraction of optimum and exact accuracy of argmax responses, three float[run epoch].

    rewards float[run epoch batch] of the greedy responses; correct bool[run epoch batch], whether each is a correct
    answer (the task's target, `lab.training.groups.correct`); optimum float[run batch].
    """
    return rewards.mean(-1), (rewards / optimum.unsqueeze(-2)).mean(-1), correct.float().mean(-1)


def greedy_log(score, training: tuple[Tensor, Tensor, Tensor], greedy: list[Tensor],
               heldout: tuple[Tensor, Tensor, Tensor] | None, heldout_greedy: list[Tensor],
               correct) -> dict[str, Tensor]:
    """Both loops' greedy epoch metrics, float[run epoch] each: greedy_reward, greedy_fraction and
    greedy_accuracy on the training prompts, heldout_greedy_reward and heldout_greedy_accuracy on
    the held-out ones (NaN without them). `training` and `heldout` are (prompts int[batch pos],
    targets int[batch pos], optimum float[run batch]); `greedy` the epochs' argmax responses
    int[run batch pos]; score(prompts, responses int[run epoch batch pos]) -> float[run epoch batch]; correct(prompts,
    responses, targets) -> bool[run epoch batch]."""
    prompts, targets, optimum = training
    responses = torch.stack(greedy, dim=1)  # int[run epoch batch pos]
    log = dict(zip(("greedy_reward", "greedy_fraction", "greedy_accuracy"),
                   greedy_metrics(score(prompts, responses), correct(prompts, responses, targets), optimum)))
    if heldout is None:
        nan = torch.full(responses.shape[:2], float("nan"), device=responses.device)
        log["heldout_greedy_reward"], log["heldout_greedy_accuracy"] = nan, nan
    else:
        prompts, targets, optimum = heldout
        held = torch.stack(heldout_greedy, dim=1)
        reward, _, accuracy = greedy_metrics(score(prompts, held), correct(prompts, held, targets), optimum)
        log["heldout_greedy_reward"], log["heldout_greedy_accuracy"] = reward, accuracy
    return log
