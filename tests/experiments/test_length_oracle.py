"""lab.experiments.length_oracle and lab.exact.estimators.first_moment against the enumeration they shortcut."""

import numpy as np
import pytest
import torch

from lab.exact import varlen as X
from lab.exact.estimators import delta_moments, first_moment
from lab.exact.prefix_tree import prefix_log_softmaxes
from lab.experiments.length_oracle import Oracle, tree_log_probs
from lab.training.config import TrainConfig
from tasks.sorting import make_task

TASK = make_task([[0], [1]], vocab_size=2)


def configs(**overrides):
    base = dict(policy="autoregressive", reward="exact-match", max_length=4, group_size=4, seed=3, epochs=2, steps=2)
    return [TrainConfig(**{**base, "loss_agg": agg, **overrides})
            for agg in ("seq-mean-token-mean", "seq-mean-token-sum-norm")]


@pytest.mark.parametrize("mode", ["raw", "centered", "loo", "normalized", "max"])
def test_first_moment_is_delta_moments_first(mode):
    probs = torch.softmax(torch.randn(2, 9, generator=torch.Generator().manual_seed(1), dtype=torch.float64), -1)
    rewards = torch.randint(0, 3, (2, 9), generator=torch.Generator().manual_seed(2)).double()
    torch.testing.assert_close(first_moment(probs, rewards, mode, 4), delta_moments(probs, rewards, mode, 4).first)


def test_tree_log_probs_are_the_enumerated_log_probs_and_the_slopes_are_those_of_the_score_matrix():
    oracle = Oracle(TASK, configs(delta="centered"))
    policy = oracle.stack.unstack(0).double()
    torch.testing.assert_close(oracle.log_probs()[0], X.all_log_probs(policy, TASK.prompts, torch.float64))
    levels = prefix_log_softmaxes(dict(policy.named_parameters()), TASK.prompts)
    torch.testing.assert_close(tree_log_probs(levels).exp().sum(-1), torch.ones(2, dtype=torch.float64))
    # slope = (grad f . u) / (grad J . u), here from the score matrix and the lab's exact expected update
    scores, probs = X.score_matrix(policy, TASK.prompts), X.all_probs(policy, TASK.prompts).detach()
    size, right = X.lengths(policy).double(), X.reward_table(policy, TASK.prompts, "exact-match").double()
    wrong = 1 - right
    p_wrong = (probs * wrong).sum()
    mean_wrong = (probs * wrong * size).sum() / p_wrong
    grads = [X.expectation_gradient(scores, probs, t).mean(0) for t in (wrong * size, wrong, right)]
    grad_f = (grads[0] - mean_wrong * grads[1]) / (p_wrong / 2)  # f pools both prompts: divide by their mean mass
    expected = []
    for agg in ("seq-mean-token-mean", "seq-mean-token-sum-norm"):
        u = X.expected_update(policy, TASK.prompts, "exact-match", "centered", agg, 4).mean(0)
        expected.append(float(grad_f @ u / (grads[2] @ u)))
    np.testing.assert_allclose(oracle.slopes(), expected, rtol=1e-9)


def test_the_flow_moves_lengths_and_starts_at_the_initial_policy():
    oracle = Oracle(TASK, configs(delta="centered", init_scale=0.1))
    start = oracle.wrong_length(oracle.log_probs().exp()).detach().numpy()
    flow = oracle.flow()
    assert flow.shape == (2, 3)
    np.testing.assert_allclose(flow[:, 0], start)
    assert (flow[:, -1] != flow[:, 0]).all()
