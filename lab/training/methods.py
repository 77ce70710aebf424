"""What a training method does inside the loop: one entry per method, one table (`METHODS`).

    method                  trains on                         loss (per run)                        logs (besides
                                                                                                    STEP_METRICS)
    policy gradient (GRPO)  the epoch's groups, y ~ pi_theta   agg(surrogate(l, d, l_old)) + beta KL  -
    dpo                     preference pairs of the groups,    DPO's loss on the pairs               DPO_STEP_METRICS,
                            or one offline set from pi_ref                                           OPTIMUM_METRICS
    sft                     fixed demonstrations               -sum m l / sum m (token mean NLL)     METHOD_STEP_METRICS
                                                                                                    the counts
    expert iteration        the groups' responses that pass    the same NLL on the kept responses    as SFT
                            a filter (best, or r >= tau)

Every method samples the epoch's groups from pi_theta (the sample metrics and samples.txt come from them).
The loop (`lab.training.train`) reads the same for every method: it asks the method for the reference's
refresh period, hands it each epoch's groups, asks which responses a step's forward pass covers and the
step's loss, and adds what the method logged to the records. An epoch's state is one `Epoch`; what stays
fixed over the epochs is one `Loop`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from lab.core.aggregation import kl_term
from lab.core.kl import ESTIMATORS
from lab.core.losses import compute_loss
from lab.core.modes import Method
from lab.core.token_masks import top_entropy_gate, untruncated
from lab.training.dpo import DPOSetup
from lab.training.supervised import ExpertIteration, SFT


@dataclass
class Epoch:
    """One epoch's state, as the loop and its method see it."""

    index: int
    reference: list[Tensor]
    """the reference policy's parameters, float[run ...] each"""
    fresh_reference: bool
    """the reference was frozen at this epoch's start: it is the sampling policy"""
    groups: object = None
    """the epoch's `lab.training.groups.Groups`"""
    first_step: dict = field(default_factory=dict)
    """exact metrics of the sampling policy, recorded on the epoch's first step (`Kind.start_epoch`)"""
    train_policy: bool = True
    """False in a critic warm-up: the steps train the critic alone"""


@dataclass
class Loop:
    """What stays fixed over a training call's epochs."""

    kind: object
    """the policy kind's side of the loop (`lab.training.kinds`)"""
    method: object
    """the method's side (`METHODS`)"""
    parameters: list[Tensor]
    settings: object
    """`lab.training.runs.RunSettings`"""
    optimizer: object
    guard: object
    block: object
    """`lab.training.metrics.StepMetricBlock`"""
    critic: object = None
    clip: object = None
    """`lab.training.clipping.GradClip`, where some run clips its gradient's norm"""
    after_step: list = field(default_factory=list)
    """called with the epoch after each optimizer step: a stale sampler's snapshots, a synced reference, adaptive
    entropy control (issue 38; empty without them)"""


class PolicyGradient:
    """GRPO and its relatives (the `--loss`es whose entry's method is policy-gradient): the surrogate on the groups'
    deltas."""

    tracks_optimum = False
    tracks_progress = False
    step_log: dict = {}
    epoch_log: dict = {}

    @classmethod
    def of(cls, configs, kind, settings, generators, device) -> PolicyGradient:
        return cls()

    def reference_period(self, kl_period: int) -> int:
        return kl_period

    def start_epoch(self, epoch: Epoch, kind, shared) -> None:
        pass

    def take_groups(self, groups) -> None:
        pass

    def sample_marks(self) -> Tensor | None:
        return None

    def forward_responses(self, kind, groups) -> tuple[Tensor, Tensor | None, bool]:
        return groups.responses, groups.mask, True

    def step_loss(self, loop: Loop, epoch: Epoch, step: int, log_probs: Tensor, aux: Tensor, old_log_probs: Tensor,
                  ref_log_probs: Tensor, on_groups: bool) -> tuple[Tensor, Tensor]:
        return step_loss(loop.kind, loop.parameters, loop.settings, epoch.groups, log_probs, old_log_probs,
                         ref_log_probs, aux)

    def end_epoch(self, settings) -> None:
        pass


def loss_mask_and_gate(kind, settings, groups, aux: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """The mask the loss and its KL term aggregate over (the live tokens, less the truncated responses of the runs
    that mask them) and the top-entropy gate (None: no run has one), bool[run batch trial pos] each
    (`lab.core.token_masks`)."""
    mask = groups.mask
    if settings.truncation_runs is not None:
        cut = untruncated(groups.responses, mask, kind.eos)
        mask = torch.where(settings.truncation_runs.reshape(-1, 1, 1, 1), cut, mask)
    if settings.top_entropy_quantile is None:
        return mask, None
    with torch.no_grad():
        entropies = kind.token_entropies(aux, groups.responses)  # float[run batch trial pos], the current policy's
        return mask, top_entropy_gate(entropies, mask, settings.top_entropy_quantile.to(entropies.dtype))


def step_loss(kind, parameters: list[Tensor], settings, groups, log_probs: Tensor, old_log_probs: Tensor,
              ref_log_probs: Tensor, aux: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The surrogate and the minimised loss (+ beta * the KL term - c_H * the entropy bonus), float[run] each."""
    horizon, s = kind.max_length, settings  # horizon: C of the aggregations, the cap
    mask, entropy_gate = loss_mask_and_gate(kind, settings, groups, aux)
    per_token = groups.token_deltas is not None  # some run's critic gives one advantage per token
    names = list(s.loss_settings)  # what the runs' losses read (their entries' settings), float[run] each
    # importance weights x off-policy mask where some run asks for them (lab.training.corrections), else None;
    # times the top-entropy gate, as TRL multiplies its masks and weights into the per-token loss
    corrections = None if s.corrections is None else s.corrections.gate(groups, log_probs, old_log_probs)
    gate = entropy_gate if corrections is None else corrections if entropy_gate is None else corrections * entropy_gate
    pg_loss = s.loss_groups.apply(
        lambda key, lp, d, old, m, g, *values: compute_loss(
            lp, d, key[0], old, agg=key[1], mask=m, horizon=horizon, per_token=per_token, gate=g,
            importance_sampling_level=key[2], **dict(zip(names, values))),
        log_probs, groups.deltas if groups.token_deltas is None else groups.token_deltas, old_log_probs, mask, gate,
        *(s.loss_settings[name] for name in names))
    return pg_loss, with_penalties(kind, parameters, settings, pg_loss, log_probs, ref_log_probs, mask)


def with_penalties(kind, parameters: list[Tensor], s, loss: Tensor, log_probs: Tensor, ref_log_probs: Tensor,
                   mask: Tensor | None) -> Tensor:
    """loss + beta * the KL term on the runs with beta > 0 - c_H * the entropy bonus on those with c_H > 0."""
    horizon = kind.max_length
    group_kl_term = lambda key, lp, ref, m: kl_term(ESTIMATORS[key[1]](lp, ref), key[0], m, horizon)  # noqa: E731
    # beta = 0 everywhere adds exactly nothing to the gradient: leave the KL out of the graph
    if not s.any_kl:
        pass
    elif s.kl_runs is None:
        loss = loss + s.beta * s.kl_agg_groups.apply(group_kl_term, log_probs, ref_log_probs, mask)
    else:
        runs = s.kl_runs
        loss = loss.index_add(0, runs, s.beta[runs] * s.kl_agg_groups.apply(
            group_kl_term, log_probs[runs], ref_log_probs[runs], None if mask is None else mask[runs]))
    if len(s.bonus_runs):  # - c_H * the exact mean entropy, on the bonus runs only
        bonus = kind.entropy_bonus(parameters, s.bonus_runs)
        coef = s.entropy_coef[s.bonus_runs] if s.entropy_control is None else s.entropy_control.coefficients(bonus)
        loss = loss.index_add(0, s.bonus_runs, -coef * bonus)
    return loss


METHODS: dict[Method, type] = {Method.policy_gradient: PolicyGradient, Method.dpo: DPOSetup, Method.sft: SFT,
                               Method.expert_iteration: ExpertIteration}
"""The one dispatch table: method (`TrainConfig.method`, from `--loss`) -> its side of the training loop."""
