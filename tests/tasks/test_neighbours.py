"""`tasks.neighbour_rewards`: the reward landscape one token away from a response (lesson 4's stuck runs)."""

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tasks import neighbour_rewards
from tasks.sorting import REFERENCES, REWARDS

VOCAB = 5


def changed(response: list[int], position: int, token: int) -> list[int]:
    return [token if q == position else y for q, y in enumerate(response)]


@pytest.mark.parametrize("name", sorted(REWARDS))
@given(data=st.data())
def test_every_entry_is_the_reward_of_that_single_change(name, data):
    """out[b, q, v] equals the plain-Python reward of the response with position q set to v."""
    length = data.draw(st.integers(1, 4), label="length")
    batch = data.draw(st.integers(1, 3), label="batch")
    tokens = st.lists(st.integers(0, VOCAB - 1), min_size=length, max_size=length)
    prompts = data.draw(st.lists(tokens, min_size=batch, max_size=batch), label="prompts")
    responses = data.draw(st.lists(tokens, min_size=batch, max_size=batch), label="responses")
    out = neighbour_rewards(REWARDS[name], torch.tensor(prompts), torch.tensor(responses), VOCAB)
    assert out.shape == (batch, length, VOCAB)
    for b, q, v in itertools.product(range(batch), range(length), range(VOCAB)):
        assert out[b, q, v].item() == REFERENCES[name](prompts[b], changed(responses[b], q, v))


def test_leading_axes_are_kept_and_unchanged_entries_give_the_response_reward():
    """A run axis passes through; setting a position to its own token gives R(x, y) itself."""
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4], [1, 2, 3]])
    responses = torch.randint(VOCAB, (4, 3, 3), generator=torch.Generator().manual_seed(0))  # int[run batch pos]
    out = neighbour_rewards(REWARDS["inclusion-ordering"], prompts, responses, VOCAB)
    assert out.shape == (4, 3, 3, VOCAB)
    own = out.gather(-1, responses.unsqueeze(-1)).squeeze(-1)  # float[run batch pos]
    expected = REWARDS["inclusion-ordering"](prompts, responses.unsqueeze(-2)).squeeze(-1)  # float[run batch]
    assert torch.equal(own, expected.unsqueeze(-1).expand_as(own))


def test_distance_reward_has_no_local_optimum_but_the_sorted_response():
    """The distance reward is a sum over positions, so any unsorted response has an improving single change."""
    prompt = torch.tensor([[3, 1, 2]])
    for response in itertools.product(range(VOCAB), repeat=3):
        out = neighbour_rewards(REWARDS["distance"], prompt, torch.tensor([response]), VOCAB)
        own = REFERENCES["distance"]([3, 1, 2], list(response))
        assert (out.max().item() > own) == (list(response) != [1, 2, 3])


def test_inclusion_ordering_has_a_local_optimum_below_the_optimum():
    """[1,2,2] for prompt [1,0,2] scores 4 of 5 and no single change beats it (the sorted [0,1,2] is two changes away)."""
    out = neighbour_rewards(REWARDS["inclusion-ordering"], torch.tensor([[1, 0, 2]]), torch.tensor([[1, 2, 2]]), VOCAB)
    assert REFERENCES["inclusion-ordering"]([1, 0, 2], [1, 2, 2]) == 4.0
    assert out.max().item() == 4.0
