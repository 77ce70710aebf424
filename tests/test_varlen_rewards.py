"""The sorting rewards on variable-length responses (issue 9 point 2; tasks/sorting.py docstring).

A response ends at its first EOS (id = vocab size); its first n content tokens are scored as at
fixed length with missing positions wrong, and every extra content token costs 1.
"""

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tasks.sorting import (REFERENCES, REWARDS, VARIABLE_LENGTH, VARIABLE_LENGTH_REFERENCES, make_task,
                           variable_length_reward)

VOCAB = 4
EOS = VOCAB


def score(name: str, prompt: list[int], responses: list[list[int]]) -> list[float]:
    return variable_length_reward(name, EOS)(torch.tensor([prompt]), torch.tensor([responses]))[0].tolist()


def test_every_registered_reward_has_a_variable_length_version_and_reference():
    assert set(VARIABLE_LENGTH) == set(REWARDS) == set(VARIABLE_LENGTH_REFERENCES)


# Hand-computed for prompt [2,0,1] (sorted [0,1,2]), responses padded with EOS to 5 positions:
#   [0,1,2,E,E]  content [0,1,2]: distance 3; inclusion 3 + ordering 2 = 5; blended 3 + 1
#   [0,1,E,E,E]  content [0,1] (position 2 missing): distance 2; inclusion 2 + ordering 1 = 3; blended 2.5
#   [0,1,2,3,E]  one extra token: distance 3 - 1; inclusion 3 + 2 - 1 = 4; blended 2 + 1
#   [0,1,2,2,2]  truncated at the cap (no EOS): two extra tokens: 3 - 2; 5 - 2; 1 + 1
#   [E,E,E,E,E]  the empty response: 0; 0; 0
RESPONSES = [[0, 1, 2, EOS, EOS], [0, 1, EOS, EOS, EOS], [0, 1, 2, 3, EOS], [0, 1, 2, 2, 2], [EOS] * 5]
HAND = {
    "distance": [3.0, 2.0, 2.0, 1.0, 0.0],
    "inclusion-ordering": [5.0, 3.0, 4.0, 3.0, 0.0],
    "blended": [4.0, 2.5, 3.0, 2.0, 0.0],
    "exact-match": [1.0, 0.0, 0.0, 0.0, 0.0],  # only sorted(x) + EOS: short, long and truncated score 0
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_computed_variable_length_rewards(name):
    assert score(name, [2, 0, 1], RESPONSES) == HAND[name]
    assert [VARIABLE_LENGTH_REFERENCES[name]([2, 0, 1], y, EOS) for y in RESPONSES] == HAND[name]


@st.composite
def prompt_and_responses(draw):
    n = draw(st.integers(1, 4))
    length = draw(st.integers(1, 6))
    prompt = draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n))
    responses = draw(st.lists(st.lists(st.integers(0, EOS), min_size=length, max_size=length), min_size=1,
                              max_size=5))
    return prompt, responses


@pytest.mark.parametrize("name", sorted(VARIABLE_LENGTH))
@given(case=prompt_and_responses())
def test_vectorized_variable_length_rewards_agree_with_the_plain_python_reference(name, case):
    """Whatever follows the first EOS is ignored, so responses are drawn with arbitrary tokens there."""
    prompt, responses = case
    expected = [VARIABLE_LENGTH_REFERENCES[name](prompt, y, EOS) for y in responses]
    assert score(name, prompt, responses) == expected


@pytest.mark.parametrize("name", sorted(VARIABLE_LENGTH))
@given(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=4), data=st.data())
def test_n_content_tokens_score_as_at_fixed_length(name, prompt, data):
    content = data.draw(st.lists(st.integers(0, VOCAB - 1), min_size=len(prompt), max_size=len(prompt)))
    assert score(name, prompt, [content + [EOS, EOS]]) == [REFERENCES[name](prompt, content)]
    assert score(name, prompt, [content]) == [REFERENCES[name](prompt, content)]  # truncated at cap n


@pytest.mark.parametrize("name", sorted(VARIABLE_LENGTH))
@pytest.mark.parametrize("prompt", [[2, 0, 1], [1, 1, 0], [3, 0]])
def test_the_optimum_is_sorted_prompt_then_eos_and_length_earns_nothing(name, prompt):
    """Every response up to the cap n + 2 is scored: none beats sorted(x) + EOS, whose value is the
    fixed-length optimum; for distance it is the only optimum; appending tokens never raises a reward."""
    cap = len(prompt) + 2
    fixed_optimum = float(make_task([prompt], VOCAB).optimum(name)[0])
    best = sorted(prompt) + [EOS] * (cap - len(prompt))
    everything = [list(y) for y in itertools.product(range(VOCAB + 1), repeat=cap)
                  if EOS not in y or all(t == EOS for t in y[y.index(EOS):])]  # EOS padding after EOS
    values = score(name, prompt, everything)
    assert max(values) == fixed_optimum == score(name, prompt, [best])[0]
    if name == "distance":
        assert [y for y, v in zip(everything, values) if v == fixed_optimum] == [best]
    for content in itertools.product(range(VOCAB), repeat=len(prompt)):
        shorter = list(content) + [EOS] * (cap - len(prompt))
        longer = list(content) + [content[-1]] + [EOS] * (cap - len(prompt) - 1)
        assert score(name, prompt, [longer])[0] <= score(name, prompt, [shorter])[0]
