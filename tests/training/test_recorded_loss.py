"""The `loss` step metric is the loss the step minimised (surrogate + beta * the KL term as
aggregated), for every loss aggregation and both policies: recomputed here from the saved
parameters and samples. The old formula (pg_loss + beta * kl) is C times off under
seq-mean-token-sum, and the test tells the two apart."""

import numpy as np
import pytest
import torch

import lab.policies as P
from lab.core.aggregation import LossAgg, kl_term
from lab.training.config import TrainConfig
from lab.core.kl import k3
from lab.core.losses import compute_loss
from lab.training.train import train
from tasks.sorting import make_task


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
@pytest.mark.parametrize("agg", [m.value for m in LossAgg])
def test_the_recorded_loss_is_the_minimised_loss(policy, agg):
    config = TrainConfig(epochs=1, steps=2, policy=policy, loss_agg=agg, loss="clipped", kl=0.5,
                         delta="centered", lr=0.05, seed=3)
    task = make_task()
    two, one = train(task, config), train(task, config.replace(steps=1))  # `one` ends where step 2 starts
    length = 3 if policy == "factorized" else 5
    start = P.make_policy(policy, 5, 3, length, 10, torch.Generator().manual_seed(config.seed)).double()
    after_one = P.policy_from_state(one.state).double()
    prompts = torch.as_tensor(two.prompts)
    responses = torch.as_tensor(two.samples[0].responses[0])  # int[batch trial pos]
    deltas = torch.as_tensor(two.samples[0].deltas[0]).double()
    mask = P.response_mask(start, responses)
    with torch.no_grad():
        old = P.token_log_probs(start, prompts, responses)  # also the reference: frozen at epoch 0
        log_probs = P.token_log_probs(after_one, prompts, responses)
        pg = compute_loss(log_probs, deltas, "clipped", old, config.clip_eps, agg, mask, length)
        kl_penalty = kl_term(k3(log_probs, old), agg, mask, length)
    recorded = two.step_metrics["loss"][0, 1]
    np.testing.assert_allclose(two.step_metrics["pg_loss"][0, 1], pg.item(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(recorded, (pg + config.kl * kl_penalty).item(), rtol=1e-4, atol=1e-6)
    assert kl_penalty > 1e-3  # the KL term is not negligible, so a wrong scale would show
    if policy == "factorized" and agg == LossAgg.seq_mean_token_sum.value:  # the mutant: the old metric
        old_formula = two.step_metrics["pg_loss"][0, 1] + config.kl * two.step_metrics["kl"][0, 1]
        assert abs(recorded - old_formula) > 1e-2 * abs(recorded - two.step_metrics["pg_loss"][0, 1])
