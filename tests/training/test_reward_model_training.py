"""lab.training.reward_model: preference data drawn exactly, the exact measures, and a fit that learns."""

import pytest
import torch

from lab.policies import make_policy
from lab.training.reward_model import RewardModelConfig, draw_pairs, exact_measures, train_reward_model
from tasks.sorting import lecture_prompts

PROBS = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
REWARDS = torch.tensor([[0.0, 1.0, 2.0, 2.0], [3.0, 1.0, 0.0, 2.0]], dtype=torch.float64)


def test_exact_measures_of_the_true_reward_and_its_negation():
    """A scorer equal to R (or any increasing function of it) ranks every pair right and correlates 1;
    -R ranks every pair wrong and correlates -1; pairs of equal reward do not count."""
    assert exact_measures(REWARDS, PROBS, REWARDS) == pytest.approx({"preference_accuracy": 1.0,
                                                                     "reward_correlation": 1.0})
    assert exact_measures(2 * REWARDS + 5, PROBS, REWARDS)["preference_accuracy"] == 1.0
    assert exact_measures(-REWARDS, PROBS, REWARDS) == pytest.approx({"preference_accuracy": 0.0,
                                                                      "reward_correlation": -1.0})


def test_exact_accuracy_by_hand():
    """Prompt 0 with scores (0, 1, 2, 1) against rewards (0, 1, 2, 2): the pairs (1, 3) and (3, 1) have unequal
    rewards and equal scores (a tie is not right), and (2, 3) is not counted (equal rewards); the accuracy is
    the pi-weight of the right pairs among the counted ones."""
    scores = torch.tensor([[0.0, 1.0, 2.0, 1.0]], dtype=torch.float64)
    p = PROBS[:1]
    counted = wrong = 0.0
    for a in range(4):
        for b in range(4):
            if REWARDS[0, a] != REWARDS[0, b]:
                w = float(p[0, a] * p[0, b])
                counted += w
                wrong += w * bool(torch.sign(scores[0, a] - scores[0, b]) != torch.sign(REWARDS[0, a] - REWARDS[0, b]))
    expected = 1 - wrong / counted
    assert exact_measures(scores, p, REWARDS[:1])["preference_accuracy"] == pytest.approx(expected, abs=1e-12)
    assert expected < 1


def test_argmax_labels_prefer_the_higher_reward_and_noise_flips_about_that_share():
    """Without noise every chosen response has a reward >= the rejected one's; at noise 0.3 the share of
    pairs with unequal rewards labelled the wrong way is 0.3 within 4 binomial standard errors (fixed seed)."""
    config = RewardModelConfig(preference="argmax", pairs_per_prompt=4000)
    chosen, rejected = draw_pairs(PROBS, REWARDS, config, torch.Generator().manual_seed(1))
    assert bool((REWARDS.gather(1, chosen) >= REWARDS.gather(1, rejected)).all())
    noisy = RewardModelConfig(preference="argmax", pairs_per_prompt=4000, label_noise=0.3)
    chosen, rejected = draw_pairs(PROBS, REWARDS, noisy, torch.Generator().manual_seed(1))
    gap = REWARDS.gather(1, chosen) - REWARDS.gather(1, rejected)
    unequal = gap != 0
    share = float((gap[unequal] < 0).double().mean())
    assert abs(share - 0.3) < 4 * (0.3 * 0.7 / int(unequal.sum())) ** 0.5


def test_fit_learns_the_reward_beyond_its_initialisation():
    """On 256 Bradley-Terry pairs per prompt from the lecture's policy at init scale 0.1, the fitted model's
    exact preference accuracy beats its untrained start and chance (1/2), and its correlation is positive."""
    policy = make_policy("factorized", 5, 3, 3, 10, torch.Generator().manual_seed(5), 0.1)
    config = RewardModelConfig(size="small", pairs_per_prompt=256, steps=300)
    _, trained, _ = train_reward_model(policy, lecture_prompts(), "inclusion-ordering", config)
    _, untrained, _ = train_reward_model(policy, lecture_prompts(), "inclusion-ordering",
                                         RewardModelConfig(size="small", pairs_per_prompt=256, steps=0))
    assert trained["preference_accuracy"] > max(0.5, untrained["preference_accuracy"]) + 0.1
    assert trained["reward_correlation"] > 0.3
    assert trained["parameters"] == 140 and trained["pairs"] == 3 * 256


def test_exact_measures_in_blocks_of_pairs_equal_one_block(monkeypatch):
    """`PAIR_ROWS` only bounds memory: blocks of 7 rows give the one-block values to float64 rounding."""
    import lab.training.reward_model as rm

    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 125, generator=generator, dtype=torch.float64)
    rewards = torch.randint(0, 4, (2, 125), generator=generator).double()
    probs = torch.softmax(torch.randn(2, 125, generator=generator, dtype=torch.float64), -1)
    whole = exact_measures(scores, probs, rewards)
    monkeypatch.setattr(rm, "PAIR_ROWS", 7)
    assert exact_measures(scores, probs, rewards) == pytest.approx(whole, rel=1e-12)
