"""lab.training.objective: the objective a KL'd run ascends and its beta', checked against the exact expected update.

Claim 14 (docs/claims.md) gives the objectives; here the lab's per-config numbers are held to the exact flow's
fixed points (lab.exact.expected_update) and the delta modes' group scales to an enumeration of every group.
"""

import itertools

import pytest
import torch

from lab.core.deltas import compute_deltas
from lab.core.modes import DeltaMode
from lab.exact.expected_update import Method, Problem, natural_update
from lab.exact.optimum import log_optimum
from lab.exact.reverse_kl import reverse_optimum
from lab.training.config import TrainConfig
from lab.training.objective import objective

REWARDS = torch.tensor([[0.0, 1.0, 2.5]], dtype=torch.float64)


def _expected_update(probs: torch.Tensor, mode: DeltaMode, group_size: int) -> torch.Tensor:
    """E[(1/G) sum_i d_i grad_logits log pi(y_i)] over every group of G draws from pi (3 responses), exactly."""
    total = torch.zeros(3, dtype=torch.float64)
    for group in itertools.product(range(3), repeat=group_size):
        chance = torch.prod(probs[list(group)])
        deltas = compute_deltas(REWARDS[0, list(group)], mode, 1e-5, True)
        scores = torch.eye(3, dtype=torch.float64)[list(group)] - probs  # grad log pi(y) in the logits
        total += chance * (deltas.unsqueeze(-1) * scores).mean(0)
    return total


@pytest.mark.parametrize("mode", list(DeltaMode)[:5])
def test_each_delta_modes_scale_is_its_expected_updates_multiple_of_grad_j(mode):
    """Enumerating every group of G = 3 from two policies: raw and leave-one-out deltas' expected update is grad J,
    centered's (G-1)/G grad J (the `scale` entries beta' divides by); normalized and max deltas have no constant
    multiple (their entry's scale is None). Mutant: centered's scale 1 fails."""
    ratios = []
    for logits in ([0.2, -0.4, 0.1], [1.5, 0.3, -1.0]):
        probs = torch.softmax(torch.tensor(logits, dtype=torch.float64), -1)
        grad_j = probs * (REWARDS[0] - (probs * REWARDS[0]).sum())
        update = _expected_update(probs, mode, 3)
        ratios.append(float(update @ grad_j / (grad_j @ grad_j)))
        if mode.entry.scale is not None:
            assert torch.allclose(update, mode.entry.scale(3) * grad_j, atol=1e-12)
    if mode.entry.scale is None:
        assert abs(ratios[0] - ratios[1]) > 1e-3


@pytest.mark.parametrize("estimator, placement, closed_form", [
    ("k2", "loss", "pi*"), ("k3", "loss", "pi'"), ("k1", "reward", "pi*")])
@pytest.mark.parametrize("group_size, horizon", [(10, 3), (4, 5)])
def test_the_beta_prime_a_run_names_is_where_its_exact_expected_update_vanishes(estimator, placement, closed_form,
                                                                                group_size, horizon):
    """For centered deltas at G and C: the exact expected update of `lab.exact.expected_update` is zero at the
    closed-form optimum (pi*, or pi' for k3 in the loss) at the beta' `objective(...)` names: beta C G / (G-1) in
    the loss, beta in the reward. Mutant: beta' = beta C (no G / (G-1)) leaves an update of order beta / G."""
    config = TrainConfig(delta="centered", kl=0.05, group_size=group_size, kl_estimator=estimator, kl_in=placement)
    beta_prime = objective(config, horizon).beta_prime
    ref = torch.log_softmax(torch.tensor([[0.3, -0.2, 0.4]], dtype=torch.float64), -1)
    target = (log_optimum(ref, REWARDS, beta_prime) if closed_form == "pi*" else
              reverse_optimum(ref.exp(), REWARDS, beta_prime).log())
    update = natural_update(Method(estimator=estimator, placement=placement), target,
                            Problem(ref, REWARDS, 0.05, group_size, horizon))
    assert float(update.abs().max()) < 1e-12


def test_settings_without_a_constant_scale_or_penalty_name_no_beta_prime():
    """normalized deltas and k1 in the loss have no beta' (no constant s; no expected penalty gradient); runs
    without a KL weight, SFT and expert iteration have no objective here; DPO names its beta and pi_0; only k3 in
    the reward is unbounded."""
    assert objective(TrainConfig(delta="normalized", kl=0.1), 3).beta_prime is None
    assert objective(TrainConfig(kl=0.1, kl_estimator="k1"), 3).beta_prime is None
    assert objective(TrainConfig(kl=0.0), 3) is None and objective(TrainConfig(loss="sft"), 3) is None
    dpo = objective(TrainConfig(loss="dpo", kl=0.1, delta="centered"), 3)
    assert dpo.beta_prime == 0.1 and dpo.reference == "pi_0 (frozen)" and not dpo.bounded  # argmax: no optimum
    assert objective(TrainConfig(kl=0.1, kl_period=0), 3).reference == "pi_0 (frozen)"
    bounded = {(e, p): objective(TrainConfig(kl=0.1, kl_estimator=e, kl_in=p), 3).bounded
               for e in ("k1", "k2", "k3") for p in ("loss", "reward")}
    assert [k for k, b in bounded.items() if not b] == [("k3", "reward")]


def test_only_k3_in_the_reward_warns_and_ipo_names_its_finite_minimiser(tmp_path, monkeypatch):
    """The unbounded-objective warning (claim 35) is k3 in the reward's alone: DPO under argmax preferences has no
    optimum either (claim 28), but its own line says so, and `lab run --loss dpo` used to print the k3 warning too.
    IPO's loss, a convex quadratic, has one finite minimiser that is not pi*_beta (claim 28), at any preference."""
    from typer.testing import CliRunner

    from lab.cli.commands import app

    k3 = objective(TrainConfig(kl=0.1, kl_estimator="k3", kl_in="reward"), 3)
    dpo = objective(TrainConfig(loss="dpo", kl=0.1, delta="centered"), 3)
    assert k3.warning is not None and "k3" in k3.warning and dpo.warning is None
    assert all(objective(TrainConfig(kl=0.1, kl_estimator=e, kl_in=p), 3).warning is None
               for e in ("k1", "k2", "k3") for p in ("loss", "reward") if (e, p) != ("k3", "reward"))
    for preference in ("argmax", "bradley-terry"):
        ipo = objective(TrainConfig(loss="dpo", dpo_loss="ipo", kl=0.1, preference=preference), 3)
        assert ipo.bounded and ipo.warning is None and ipo.line().startswith("IPO: ") and "finite minimiser" in ipo.text
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", "--loss", "dpo", "--kl", "0.1", "--epochs", "1", "--steps", "1",
                                      "--out", "dpo-run"])
    assert result.exit_code == 0, result.output
    assert "k3" not in result.output and "no finite optimum" in result.output


def test_a_synced_reference_is_named_as_mixed_toward_the_policy():
    """`--sync-ref-model` moves the reference every tau steps (TR-DPO); the objective line said "pi_0 (frozen)"."""
    synced = objective(TrainConfig(kl=0.1, kl_period=0, sync_ref_model=True, ref_model_sync_steps=2,
                                   ref_model_mixup_alpha=0.6), 3)
    assert synced.reference == "mixed toward the policy every 2 steps (alpha 0.6)"
    assert objective(TrainConfig(kl=0.1, kl_period=0), 3).reference == "pi_0 (frozen)"
    assert objective(TrainConfig(kl=0.1, kl_period=5), 3).reference == "refreshed every 5 epochs"

