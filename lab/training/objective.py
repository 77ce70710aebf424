"""What a KL'd run ascends, and at which beta' (claims 14, 26, 28, 35).

    s = the delta mode's group scale (raw, loo: 1; centered: (G-1)/G), C = the response length
    in the loss (the policy-gradient term aggregated as the KL term, which is C times it: lab.core.aggregation):
        k3   E[R] - beta' KL(pi_ref || pi)                            beta' = beta C / s
        k2   E[R] - beta' KL(pi || pi_ref)   (J_beta')                beta' = beta C / s
        k1   E[R]                            (k1's expected gradient is 0: no penalty acts)
    in the reward (s multiplies the penalised reward, both terms):
        k1   E[R] - beta' KL(pi || pi_ref)   (J_beta')                beta' = beta
        k2   E[R] - beta' E[sum_t (k2 - k1)]                          beta' = beta
        k3   E[R] - beta' (KL(pi || pi_ref) - KL(pi_ref || pi))       beta' = beta: unbounded above, no maximum
    DPO (--loss dpo): pi*_beta, J_beta's optimum, is its stationary point under Bradley-Terry preferences (claim 28), none
        under argmax preferences; IPO (--dpo-loss ipo) a convex quadratic: one finite minimiser, not pi*_beta; the
        reference is pi_0, frozen

normalized, max and gae deltas have no constant s, and the autoregressive policy no constant C: no beta' then.
A reference refreshed every kl_period epochs moves, so the objective is the one of each period.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.core.modes import DPOLoss, KLEstimator, KLPlacement, PolicyKind, Preference, TrainingLoss

OBJECTIVES = {
    (KLEstimator.k3, KLPlacement.loss): ("E[R] - beta' KL(pi_ref || pi)", True),
    (KLEstimator.k2, KLPlacement.loss): ("J_beta' = E[R] - beta' KL(pi || pi_ref)", True),
    (KLEstimator.k1, KLPlacement.loss): ("E[R] (k1 in the loss has zero expected gradient: no penalty acts)", True),
    (KLEstimator.k1, KLPlacement.reward): ("J_beta' = E[R] - beta' KL(pi || pi_ref)", True),
    (KLEstimator.k2, KLPlacement.reward): ("E[R] - beta' E[sum_t (k2 - k1)]", True),
    (KLEstimator.k3, KLPlacement.reward): ("E[R] - beta' (KL(pi || pi_ref) - KL(pi_ref || pi)), unbounded above: "
                                           "no maximum, no fixed point (claim 35)", False),
}
"""(estimator, placement) -> (the objective the expected update ascends, whether it has a maximum): claim 14."""


@dataclass(frozen=True)
class Objective:
    """What one run ascends: `text`, its beta' (None where none exists), its reference, and whether it is bounded."""

    text: str
    beta_prime: float | None
    reference: str
    bounded: bool
    warns: bool = False
    """a policy-gradient objective unbounded above (k3 in the reward), which `lab run` and `lab sweep` warn of before
    training; DPO under argmax preferences has no optimum either, but its own line says so"""

    @property
    def warning(self) -> str | None:
        """The line printed before training where `warns`, else None."""
        return unbounded_warning() if self.warns else None

    def line(self) -> str:
        """One line for a summary or a RESULTS.md row."""
        beta = "no constant beta'" if self.beta_prime is None else f"beta' = {self.beta_prime:.4g}"
        ascends = "" if self.text.startswith(("DPO", "IPO")) else "ascends "  # what DPO has, not an objective
        return f"{ascends}{self.text}, {beta}, reference {self.reference}"

    def to_dict(self) -> dict:
        return {"objective": self.text, "beta_prime": self.beta_prime, "reference": self.reference,
                "bounded": self.bounded}


def reference_text(kl_period: int) -> str:
    return "pi_0 (frozen)" if kl_period == 0 else f"refreshed every {kl_period} epochs"


def reference_of(config) -> str:
    """The reference of a policy-gradient run: frozen, refreshed every kl_period epochs, or mixed toward the policy
    (`--sync-ref-model`, TR-DPO's phi_ref <- alpha phi + (1 - alpha) phi_ref every tau steps)."""
    if config.sync_ref_model:
        return (f"mixed toward the policy every {config.ref_model_sync_steps} steps "
                f"(alpha {config.ref_model_mixup_alpha:g})")
    return reference_text(config.kl_period)


def effective_beta(config, horizon: int) -> float | None:
    """beta' of a policy-gradient run with beta = config.kl > 0 (module docstring); None where none exists."""
    if config.kl_in is KLPlacement.reward:
        return float(config.kl)
    if config.kl_estimator is KLEstimator.k1:  # no expected penalty gradient in the loss: no beta' to speak of
        return None
    scale = config.delta.entry.scale
    if scale is None or config.policy is not PolicyKind.factorized:
        return None
    return float(config.kl) * horizon / scale(config.group_size)


def objective(config, horizon: int) -> Objective | None:
    """What `config` ascends at response length `horizon` (C), or None for a run without a KL weight (beta = 0)
    and for SFT and expert iteration (no penalty)."""
    if not config.kl > 0 or config.loss in (TrainingLoss.sft, TrainingLoss.expert_iteration):
        return None
    if config.loss is TrainingLoss.dpo:
        if config.dpo_loss is DPOLoss.ipo:
            text = "IPO: a convex quadratic in the logits, one finite minimiser, not pi*_beta' (claim 28)"
            return Objective(text, float(config.kl), reference_text(0), True)
        bt = config.preference is Preference.bradley_terry
        text = ("DPO: its stationary point is pi*_beta' = pi_0 exp(R / beta') / Z (claim 28)" if bt else
                "DPO under argmax preferences: no finite optimum, the winners' margins grow without bound (claim 28)")
        return Objective(text, float(config.kl), reference_text(0), bt)
    text, bounded = OBJECTIVES[config.kl_estimator, config.kl_in]
    return Objective(text, effective_beta(config, horizon), reference_of(config), bounded, warns=not bounded)


def unbounded_warning() -> str:
    """The one line `lab run` and `lab sweep` print when a run's objective has no maximum (k3 in the reward)."""
    return ("warning: --kl-in reward with --kl-estimator k3 ascends E[R] - beta (KL(pi || pi_ref) - KL(pi_ref || pi)), "
            "which is unbounded above: no fixed point (claim 35, docs/claims.md); use k1 (the reward's default, "
            "verl's) or k2")
