"""Direct Preference Optimization as pure functions: the per-pair loss and the preference models.

The KL-regularised objective J_beta(pi) = E_pi[r] - beta KL(pi || pi_ref) is maximised by

    pi*(y | x) = pi_ref(y | x) exp(r(x, y) / beta) / Z(x),     so   r(x, y) = beta log pi*/pi_ref (y) + beta log Z(x)

Under the Bradley-Terry model p(y_w > y_l) = sigmoid(r_w - r_l) the per-prompt beta log Z cancels, and
maximum likelihood over preference pairs becomes a loss on the policy alone. With sequence log-probs
(sums over the response's live tokens) and the log-ratio difference

    h = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))

    sigmoid   loss = -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)     (Rafailov et al. 2023;
                                                                                    eps: conservative label smoothing)
    ipo       loss = (h - 1 / (2 beta))^2                                          (Azar et al. 2023)
    chosen_rewards = beta (log pi(y_w) - log pi_ref(y_w)),   rejected_rewards likewise   (detached, TRL's names)

Sequence log-probs are sums over tokens, the default everywhere in the lab (training, `--dpo-loss ipo`, the
population loss of `lab.exact.pairs`): h is the log-ratio of whole sequences, in which Azar et al. state IPO.
TRL's IPO (`loss_type="ipo"`) divides each sequence's log-prob, the policy's and the reference's, by its token
count first (a per-token mean); `dpo_loss` computes that form when given the lengths (`chosen_lengths`,
`rejected_lengths`), and a run does with `--ipo-logps token-mean` (the default, `sum`, is Azar et al.'s). At a
fixed length L (the factorised policy) it is h / L: the summed loss at beta / L, divided by L^2.

The implicit rewards are TRL's: their difference is beta h, and the pair is "right" (reward accuracy)
when chosen_rewards > rejected_rewards. A preference model decides which response of a drawn pair
(y_1, y_2) wins:

    argmax          y_1 wins if r_1 > r_2, y_2 if r_2 > r_1; a tie gives no pair
    bradley-terry   y_1 wins with probability sigmoid(r_1 - r_2), drawn from the caller's generator

Every function is elementwise over any leading axes (run, batch, pair, ...).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lab.core.choices import parse_choice
from lab.core.modes import DPOLoss, Preference


def parse_dpo_loss(mode: DPOLoss | str) -> DPOLoss:
    return parse_choice(DPOLoss, mode, "DPO loss")


def parse_preference(mode: Preference | str) -> Preference:
    return parse_choice(Preference, mode, "preference model")


def _sigmoid(h: Tensor, beta: float | Tensor, label_smoothing: float) -> Tensor:
    if label_smoothing == 0:  # the same value without a 0 * log sigmoid(-beta h) term (NaN where that is -inf)
        return -F.logsigmoid(beta * h)
    return -F.logsigmoid(beta * h) * (1 - label_smoothing) - F.logsigmoid(-beta * h) * label_smoothing


def _ipo(h: Tensor, beta: float | Tensor, label_smoothing: float) -> Tensor:
    return (h - 1 / (2 * beta)) ** 2


DPO_LOSSES = {
    DPOLoss.sigmoid: _sigmoid,
    DPOLoss.ipo: _ipo,
}
"""The one dispatch table: loss type -> f(h float[...], beta, label_smoothing) -> per-pair loss float[...]."""


def _check(beta: float | Tensor, loss_type: DPOLoss, label_smoothing: float) -> None:
    if not bool(torch.all(torch.as_tensor(beta) > 0)):
        raise ValueError(f"DPO needs beta > 0 (the KL weight of the objective it optimises), got {beta}")
    if not 0.0 <= label_smoothing <= 0.5:
        raise ValueError(f"label_smoothing must lie in [0, 0.5], got {label_smoothing}")
    if loss_type is not DPOLoss.sigmoid and label_smoothing != 0.0:
        raise ValueError(f"label_smoothing applies to the sigmoid loss only, not to {loss_type.value!r}")


def dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float | Tensor,
    loss_type: DPOLoss | str = DPOLoss.sigmoid,
    label_smoothing: float = 0.0,
    chosen_lengths: Tensor | None = None,
    rejected_lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-pair losses and implicit rewards (module docstring), each float[...] like the inputs.

    The four log-prob tensors are sequence log-probs float[...] of the same shape (the reference ones
    are treated as constants); `beta` is a float > 0 or a tensor broadcasting against them (one beta
    per run: float[run 1 ...]). Returns (losses, chosen_rewards, rejected_rewards); the rewards are
    detached, as TRL's. `chosen_lengths`, `rejected_lengths` (token counts float[...], both or neither): each
    sequence's log-ratio divided by its length first, TRL's length-normalised IPO (module docstring); None, the
    default: whole-sequence sums.
    """
    loss_type = parse_dpo_loss(loss_type)
    _check(beta, loss_type, label_smoothing)
    chosen_ratio = chosen_logps - ref_chosen_logps.detach()
    rejected_ratio = rejected_logps - ref_rejected_logps.detach()
    if (chosen_lengths is None) != (rejected_lengths is None):
        raise ValueError("give both chosen_lengths and rejected_lengths (TRL's per-token IPO), or neither")
    if chosen_lengths is not None:
        chosen_ratio, rejected_ratio = chosen_ratio / chosen_lengths, rejected_ratio / rejected_lengths
    losses = DPO_LOSSES[loss_type](chosen_ratio - rejected_ratio, beta, label_smoothing)
    return losses, (beta * chosen_ratio).detach(), (beta * rejected_ratio).detach()


def preference_probability(first_rewards: Tensor, second_rewards: Tensor,
                           preference: Preference | str) -> tuple[Tensor, Tensor]:
    """P(y_1 wins) float[...] and whether the pair is kept bool[...], for rewards float[...] of y_1 and y_2.

    argmax: 1, 0 (kept) or a tie (dropped, probability 1/2 recorded); bradley-terry: sigmoid(r_1 - r_2),
    every pair kept.
    """
    preference = parse_preference(preference)
    difference = first_rewards - second_rewards
    if preference is Preference.bradley_terry:
        return torch.sigmoid(difference), torch.ones_like(difference, dtype=torch.bool)
    return (torch.sign(difference) + 1) / 2, difference != 0


def draw_preferences(first_rewards: Tensor, second_rewards: Tensor, preference: Preference | str,
                     generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Whether y_1 wins bool[...] and whether the pair is kept bool[...].

    argmax draws nothing (the generator is left untouched); bradley-terry draws one uniform per pair
    from `generator` (on its device) and y_1 wins when it falls below sigmoid(r_1 - r_2).
    """
    probability, kept = preference_probability(first_rewards, second_rewards, preference)
    if parse_preference(preference) is Preference.argmax:
        return probability > 0.5, kept
    uniform = torch.rand(probability.shape, generator=generator, dtype=probability.dtype,
                         device=probability.device)
    return uniform < probability, kept
