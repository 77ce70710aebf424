"""`lab.exact.stuck`: stuck endings of runs, and which of them one token would improve (RESULTS.md's local optima)."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.training.config import TrainConfig
from lab.training.records import Records
from lab.experiments.sweep import final_endings
from tasks.sorting import REFERENCES, lecture_prompts

PROMPTS = lecture_prompts().numpy()  # [[1,0,2],[3,2,4],[1,2,3]]
VOCAB = 5


def records_with(greedy, reward="inclusion-ordering") -> Records:
    """Records holding only what `final_endings` reads: configs, prompts, optimum, the embedding, greedy responses."""
    greedy = np.asarray(greedy)
    runs = greedy.shape[0]
    optimum = np.array([[REFERENCES[reward](p.tolist(), sorted(p.tolist())) for p in PROMPTS]] * runs)
    return Records(configs=[TrainConfig(reward=reward, seed=r) for r in range(runs)], prompts=PROMPTS,
                   optimum=optimum, step_metrics={}, epoch_metrics={},
                   state={"embedding": torch.zeros(runs, VOCAB, 2)}, greedy_responses=greedy)


def plain_endings(greedy, reward):
    """The definition written as loops over every single-token change, with the plain-Python rewards."""
    score = REFERENCES[reward]
    stuck, improvable = [], []
    for run in greedy:
        stuck.append([]), improvable.append([])
        for prompt, response in zip(PROMPTS.tolist(), run):
            own, best = score(prompt, response), score(prompt, sorted(prompt))
            changes = (score(prompt, response[:q] + [v] + response[q + 1:])
                       for q, v in itertools.product(range(len(response)), range(VOCAB)))
            stuck[-1].append(own < best)
            improvable[-1].append(own < best and max(changes) > own)
    return np.array(stuck), np.array(improvable)


def test_a_flat_local_optimum_an_improvable_ending_and_a_solved_prompt():
    """For [1,0,2], [1,2,2] scores 4 of 5 and no single change scores 5 (the sorted [0,1,2] is two
    changes away): a local optimum. [0,1,1] also scores 4, but setting its last token to 2 gives 5."""
    endings = final_endings(records_with([[[1, 2, 2], [2, 3, 4], [1, 2, 3]],
                                          [[0, 1, 1], [2, 3, 4], [1, 2, 3]]]), [0, 1])
    assert endings.stuck.tolist() == [[True, False, False], [True, False, False]]
    assert endings.improvable.tolist() == [[False, False, False], [True, False, False]]
    assert endings.local_optimum.tolist() == [[True, False, False], [False, False, False]]
    assert endings.sorted_share.tolist() == pytest.approx([2 / 3, 2 / 3])
    assert endings.local_optimum_share().tolist() == [1.0, 0.0]


@pytest.mark.parametrize("reward", sorted(REFERENCES))
@given(greedy=st.lists(st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=3, max_size=3),
                                min_size=3, max_size=3), min_size=1, max_size=4))
def test_the_batched_judgement_equals_the_plain_loops(reward, greedy):
    """stuck and improvable equal their definition computed response by response, for every reward."""
    endings = final_endings(records_with(greedy, reward), list(range(len(greedy))))
    stuck, improvable = plain_endings(greedy, reward)
    assert endings.stuck.tolist() == stuck.tolist()
    assert endings.improvable.tolist() == improvable.tolist()


def test_distance_has_no_local_optimum_but_the_sorted_response():
    """A sum over positions: every wrong response is improved by fixing one position (mutant check:
    the same responses are local optima under inclusion-ordering, so the judgement depends on the reward)."""
    greedy = [[[1, 2, 2], [2, 3, 3], [1, 2, 2]]]
    assert not final_endings(records_with(greedy, "distance"), [0]).local_optimum.any()
    assert final_endings(records_with(greedy, "inclusion-ordering"), [0]).local_optimum.any()


def test_runs_with_different_rewards_are_refused():
    records = records_with([[[0, 1, 2], [2, 3, 4], [1, 2, 3]]] * 2)
    records.configs[1] = TrainConfig(reward="distance")
    with pytest.raises(ValueError, match="different rewards"):
        final_endings(records, [0, 1])
