"""The sorting task's rewards, optimum and prompts (the CS336 lecture 17 notes), at fixed and variable length.

Hand-computed values come from the definitions (the CS336 lecture 17 notes; tasks/sorting.py):
    distance            R = sum_q [y_q == sorted(x)_q]                  max n
    inclusion-ordering  R = sum_j [x_j in y] + sum_q [y_q <= y_{q+1}]   max 2n - 1
    blended             R = distance + 1/2 * sum_q [y_q <= y_{q+1}]
"""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tasks import sorting
from tasks.prompts import random_prompts
from tasks.sorting import (REFERENCES, REWARDS, VARIABLE_LENGTH, VARIABLE_LENGTH_REFERENCES, make_task,
                           task_from_spec, variable_length_reward)

LECTURE_PROMPT = [3, 1, 0, 2]
HIGH, MIDDLE, LOW = [0, 1, 2, 3], [0, 3, 1, 2], [7, 2, 2, 5]  # 7 lies outside a vocab of 5


def score(name: str, prompt: list[int], responses: list[list[int]]) -> list[float]:
    """The vectorized reward of several responses to one prompt (a batch of one)."""
    return REWARDS[name](torch.tensor([prompt]), torch.tensor([responses]))[0].tolist()


# Hand-computed for prompt [3,1,0,2], sorted [0,1,2,3]:
#   distance:   [0,1,2,3] all 4 match; [0,3,1,2] only the 0; [7,2,2,5] only the 2 at position 2.
#   inclusion:  [0,1,2,3] and [0,3,1,2] hold all 4 prompt tokens, [7,2,2,5] only the 2;
#   ordering:   3, 2 (0<=3, 1<=2) and 2 (2<=2, 2<=5) non-decreasing adjacent pairs.
LECTURE_VALUES = {
    "distance": [4.0, 1.0, 1.0],
    "inclusion-ordering": [7.0, 6.0, 3.0],
    "blended": [4.0 + 1.5, 1.0 + 1.0, 1.0 + 1.0],
    "exact-match": [1.0, 0.0, 0.0],  # only [0,1,2,3] is sorted([3,1,0,2])
}


@pytest.mark.parametrize("name", sorted(LECTURE_VALUES))
def test_lecture_examples_have_the_hand_computed_rewards(name):
    """The CS336 lecture 17 notes' examples: for prompt [3,1,0,2], [0,1,2,3] scores high, [0,3,1,2]
    middle, [7,2,2,5] low."""
    values = score(name, LECTURE_PROMPT, [HIGH, MIDDLE, LOW])
    assert values == LECTURE_VALUES[name]
    assert values == [REFERENCES[name](LECTURE_PROMPT, y) for y in (HIGH, MIDDLE, LOW)]
    high, middle, low = values
    assert high > middle >= low or name == "exact-match"  # no partial credit: middle = low = 0
    if name == "inclusion-ordering":
        assert middle > low  # strictly ordered under the second reward


def test_inclusion_ordering_gives_the_middle_example_more_partial_credit():
    """The CS336 lecture 17 notes: relative to its maximum, inclusion-ordering credits [0,3,1,2] more than distance."""
    n = len(LECTURE_PROMPT)
    distance = score("distance", LECTURE_PROMPT, [MIDDLE])[0] / n  # 1/4
    inclusion = score("inclusion-ordering", LECTURE_PROMPT, [MIDDLE])[0] / (2 * n - 1)  # 6/7
    assert distance == pytest.approx(1 / 4) and inclusion == pytest.approx(6 / 7)
    assert inclusion > distance


def test_duplicated_prompt_tokens_are_counted_again():
    """Inclusion counts over the prompt's tokens, so a repeated token counts twice."""
    prompt = [2, 2, 0, 1]
    # [0,1,2,3]: both 2s, the 0 and the 1 are present (4) + 3 ordered pairs = 7
    # [2,0,0,0]: both 2s and the 0 are present (3) + 2 ordered pairs (0<=0 twice) = 5
    # [3,3,3,3]: no prompt token (0) + 3 ordered pairs = 3
    assert score("inclusion-ordering", prompt, [[0, 1, 2, 3], [2, 0, 0, 0], [3, 3, 3, 3]]) == [7.0, 5.0, 3.0]
    # distance against sorted [0,1,2,2]: [0,1,2,3] matches 3 positions, [2,0,0,0] none
    assert score("distance", prompt, [[0, 1, 2, 3], [2, 0, 0, 0]]) == [3.0, 0.0]


def test_rewards_keep_a_leading_run_axis():
    """Rewards map int[batch pos] x int[run batch trial pos] -> float[run batch trial]."""
    prompts = torch.tensor([LECTURE_PROMPT, [2, 2, 0, 1]])
    responses = torch.tensor([HIGH, MIDDLE, LOW]).expand(2, 2, 3, 4)  # run batch trial pos
    for name, fn in REWARDS.items():
        out = fn(prompts, responses)
        assert out.shape == (2, 2, 3) and out.dtype.is_floating_point
        assert out[0, 0].tolist() == LECTURE_VALUES[name]


@st.composite
def prompts_and_responses(draw):
    """prompts int[batch pos] and responses int[*lead batch trial pos], lead = () or (run,).

    Response tokens may exceed the vocabulary (like the lecture's 7): rewards must not care.
    """
    vocab = draw(st.integers(1, 6))
    length = draw(st.integers(1, 5))
    batch, trial = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    lead = draw(st.sampled_from([(), (1,), (2,), (3,)]))
    prompts = draw(arrays(np.int64, (batch, length), elements=st.integers(0, vocab - 1)))
    responses = draw(arrays(np.int64, (*lead, batch, trial, length), elements=st.integers(0, vocab + 2)))
    return prompts, responses


@pytest.mark.parametrize("name", sorted(REWARDS))
@given(data=prompts_and_responses())
def test_vectorized_reward_agrees_with_its_plain_python_reference(name, data):
    """Each tensor reward equals its list definition on every (prompt, response)."""
    prompts, responses = data
    assert set(REWARDS) == set(REFERENCES)
    out = REWARDS[name](torch.from_numpy(prompts), torch.from_numpy(responses))
    assert out.shape == responses.shape[:-1]
    flat_responses = responses.reshape(-1, *responses.shape[-3:])
    flat_out = out.reshape(-1, *out.shape[-2:])
    for run_responses, run_out in zip(flat_responses, flat_out):
        for b, prompt in enumerate(prompts.tolist()):
            for t, response in enumerate(run_responses[b].tolist()):
                assert run_out[b, t].item() == REFERENCES[name](prompt, response)


@pytest.mark.parametrize("vocab, length", [(3, 3), (4, 2), (2, 4), (5, 1)])
@pytest.mark.parametrize("name", sorted(REWARDS))
def test_optimum_is_the_true_maximum_over_all_responses(name, vocab, length):
    """The task's optimum per prompt equals the max over every response (enumerated)."""
    space = torch.tensor(list(itertools.product(range(vocab), repeat=length)))  # all prompts = all responses
    task = make_task(space, vocab)
    all_rewards = REWARDS[name](space, space.expand(len(space), *space.shape))  # float[batch trial]
    best = all_rewards.amax(dim=-1)
    assert torch.equal(task.optimum(name), best)
    for prompt, value in zip(space.tolist(), best.tolist()):  # and by the list definition
        assert value == max(REFERENCES[name](prompt, list(y)) for y in space.tolist())


def test_lecture_task_defaults():
    """docs/task.md: the lecture's prompts [[1,0,2],[3,2,4],[1,2,3]], vocab 0..4, both lengths 3, max 5."""
    task = make_task()
    assert task.prompts.tolist() == [[1, 0, 2], [3, 2, 4], [1, 2, 3]]
    assert task.vocab_size == 5 and task.response_length == 3 and task.eval_prompts is None
    assert task.optimum("inclusion-ordering").tolist() == [5.0, 5.0, 5.0]
    assert task.optimum("distance").tolist() == [3.0, 3.0, 3.0]
    assert task.targets(task.prompts).tolist() == [[0, 1, 2], [2, 3, 4], [1, 2, 3]]


@given(count=st.integers(1, 20), length=st.integers(1, 4), vocab=st.integers(2, 5),
       excluded=st.integers(0, 10), seed=st.integers(0, 2**31))
def test_random_prompts_are_distinct_and_disjoint_from_excluded_ones(count, length, vocab, excluded, seed):
    """N random prompts are distinct, in the vocabulary, and avoid the excluded prompts."""
    space = vocab ** length
    excluded = min(excluded, space - 1)
    count = min(count, space - excluded)
    exclude = random_prompts(excluded, length, vocab, torch.Generator().manual_seed(seed + 1)) if excluded else None
    prompts = random_prompts(count, length, vocab, torch.Generator().manual_seed(seed), exclude=exclude)
    assert prompts.shape == (count, length) and prompts.dtype == torch.long
    assert int(prompts.min()) >= 0 and int(prompts.max()) < vocab
    rows = {tuple(r) for r in prompts.tolist()}
    assert len(rows) == count
    if exclude is not None:
        assert rows.isdisjoint(tuple(r) for r in exclude.tolist())
    again = random_prompts(count, length, vocab, torch.Generator().manual_seed(seed), exclude=exclude)
    assert torch.equal(prompts, again)  # the seed alone decides


def test_random_prompts_refuse_more_than_the_space_holds():
    with pytest.raises(ValueError, match="prompt count must be at most 4,.* got 5"):
        random_prompts(5, 2, 2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="held-out prompts must be at most 1,"):
        random_prompts(2, 1, 2, torch.Generator().manual_seed(0), exclude=torch.tensor([[0]]), what="held-out prompts")


def test_the_prompt_space_is_counted_without_a_power_of_the_users_length():
    """`--prompt-length 99999999999` used to compute 5**99999999999 (a hang); the count stops past the cap."""
    from tasks.prompts import space_at_most
    assert [space_at_most(5, n, 200) for n in (0, 1, 3, 4)] == [1, 5, 125, 201]
    assert space_at_most(5, 99_999_999_999, 10) == 11 and space_at_most(1, 99_999_999_999, 10) == 1
    assert space_at_most(2, 10, 2**20) == 1024


def test_task_from_spec_heldout_prompts_are_disjoint_from_training_prompts():
    """Held-out prompts share the length and never coincide with a training prompt."""
    task = task_from_spec("random", vocab_size=3, count=6, length=2, heldout=3, prompt_seed=4)
    assert task.prompts.shape == (6, 2) and task.eval_prompts.shape == (3, 2)
    train_rows = {tuple(r) for r in task.prompts.tolist()}
    assert train_rows.isdisjoint(tuple(r) for r in task.eval_prompts.tolist())
    own = task_from_spec("[[3,1,0,2],[2,2,0,1]]", vocab_size=4)
    assert own.prompts.tolist() == [[3, 1, 0, 2], [2, 2, 0, 1]] and own.response_length == 4


@pytest.mark.parametrize("spec, vocab, message", [
    ("[[5,1,0]]", 5, "must lie in 0..4"),
    ("[[-1,1,0]]", 5, "must lie in 0..4"),
    ("[[1,2],[1]]", 5, "different lengths"),
    ("[[1,2", 5, "cannot read prompts"),
    ("banana", 5, "cannot read prompts"),
    ("[]", 5, "not a list of non-empty integer lists"),
    ("[[]]", 5, "not a list of non-empty integer lists"),
    ("[[1.5,2]]", 5, "not a list of non-empty integer lists"),
    ("[[true,1]]", 5, "not a list of non-empty integer lists"),
    ("[1,2]", 5, "not a list of non-empty integer lists"),
    ("lecture", 4, "must lie in 0..3"),  # the lecture's 4 is outside vocab 4
    ("lecture", 0, "vocab size must be a positive integer"),
])
def test_bad_prompts_are_rejected_with_a_clear_message(spec, vocab, message):
    """Tokens outside the vocabulary, mismatched lengths, unparseable text."""
    with pytest.raises(ValueError, match=message):
        task_from_spec(spec, vocab_size=vocab)


def test_bad_task_arguments_are_rejected():
    with pytest.raises(ValueError, match="prompt count"):
        task_from_spec("random", count=0)
    with pytest.raises(ValueError, match="prompt length"):
        task_from_spec("random", length=0)
    with pytest.raises(ValueError, match="held-out"):
        task_from_spec("lecture", heldout=-1)
    with pytest.raises(ValueError, match="held-out prompts have length 2"):
        make_task([[1, 0, 2]], 5, eval_prompts=[[1, 0]])
    with pytest.raises(ValueError, match="must lie in"):
        make_task([[1, 0, 2]], 5, eval_prompts=[[1, 0, 9]])
    with pytest.raises(ValueError, match="prompt length 3 != response length 2"):
        sorting.distance_reward(torch.tensor([[1, 0, 2]]), torch.tensor([[[0, 1]]]))
    with pytest.raises(ValueError, match="choose one of: distance, inclusion-ordering, blended"):
        make_task().reward_fn("nope")


# Variable-length responses (tasks/sorting.py docstring). A response ends at its first EOS
# (id = vocab size); its first n content tokens are scored as at fixed length with missing positions
# wrong, and every extra content token costs 1.

VOCAB = 4
EOS = VOCAB
"""The variable-length tests: a vocabulary of 4 content tokens, and EOS the next id."""


def varlen_score(name: str, prompt: list[int], responses: list[list[int]]) -> list[float]:
    """The variable-length reward of several responses (ending at their first EOS) to one prompt."""
    return variable_length_reward(name, EOS)(torch.tensor([prompt]), torch.tensor([responses]))[0].tolist()


def test_every_registered_reward_has_a_variable_length_version_and_reference():
    assert set(VARIABLE_LENGTH) == set(REWARDS) == set(VARIABLE_LENGTH_REFERENCES)


# Hand-computed for prompt [2,0,1] (sorted [0,1,2]), responses padded with EOS to 5 positions:
#   [0,1,2,E,E]  content [0,1,2]: distance 3; inclusion 3 + ordering 2 = 5; blended 3 + 1
#   [0,1,E,E,E]  content [0,1] (position 2 missing): distance 2; inclusion 2 + ordering 1 = 3; blended 2.5
#   [0,1,2,3,E]  one extra token: distance 3 - 1; inclusion 3 + 2 - 1 = 4; blended 2 + 1
#   [0,1,2,2,2]  truncated at the cap (no EOS): two extra tokens: 3 - 2; 5 - 2; 1 + 1
#   [E,E,E,E,E]  the empty response: 0; 0; 0
VARLEN_RESPONSES = [[0, 1, 2, EOS, EOS], [0, 1, EOS, EOS, EOS], [0, 1, 2, 3, EOS], [0, 1, 2, 2, 2], [EOS] * 5]
VARLEN_HAND = {
    "distance": [3.0, 2.0, 2.0, 1.0, 0.0],
    "inclusion-ordering": [5.0, 3.0, 4.0, 3.0, 0.0],
    "blended": [4.0, 2.5, 3.0, 2.0, 0.0],
    "exact-match": [1.0, 0.0, 0.0, 0.0, 0.0],  # only sorted(x) + EOS: short, long and truncated score 0
}


@pytest.mark.parametrize("name", sorted(VARLEN_HAND))
def test_hand_computed_variable_length_rewards(name):
    assert varlen_score(name, [2, 0, 1], VARLEN_RESPONSES) == VARLEN_HAND[name]
    assert [VARIABLE_LENGTH_REFERENCES[name]([2, 0, 1], y, EOS) for y in VARLEN_RESPONSES] == VARLEN_HAND[name]


@st.composite
def prompt_and_varlen_responses(draw):
    n = draw(st.integers(1, 4))
    length = draw(st.integers(1, 6))
    prompt = draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n))
    responses = draw(st.lists(st.lists(st.integers(0, EOS), min_size=length, max_size=length), min_size=1,
                              max_size=5))
    return prompt, responses


@pytest.mark.parametrize("name", sorted(VARIABLE_LENGTH))
@given(case=prompt_and_varlen_responses())
def test_vectorized_variable_length_rewards_agree_with_the_plain_python_reference(name, case):
    """Whatever follows the first EOS is ignored, so responses are drawn with arbitrary tokens there."""
    prompt, responses = case
    expected = [VARIABLE_LENGTH_REFERENCES[name](prompt, y, EOS) for y in responses]
    assert varlen_score(name, prompt, responses) == expected


@pytest.mark.parametrize("name", sorted(VARIABLE_LENGTH))
@given(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=4), data=st.data())
def test_n_content_tokens_score_as_at_fixed_length(name, prompt, data):
    content = data.draw(st.lists(st.integers(0, VOCAB - 1), min_size=len(prompt), max_size=len(prompt)))
    assert varlen_score(name, prompt, [content + [EOS, EOS]]) == [REFERENCES[name](prompt, content)]
    assert varlen_score(name, prompt, [content]) == [REFERENCES[name](prompt, content)]  # truncated at cap n


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
    values = varlen_score(name, prompt, everything)
    assert max(values) == fixed_optimum == varlen_score(name, prompt, [best])[0]
    if name == "distance":
        assert [y for y, v in zip(everything, values) if v == fixed_optimum] == [best]
    for content in itertools.product(range(VOCAB), repeat=len(prompt)):
        shorter = list(content) + [EOS] * (cap - len(prompt))
        longer = list(content) + [content[-1]] + [EOS] * (cap - len(prompt) - 1)
        assert varlen_score(name, prompt, [longer])[0] <= varlen_score(name, prompt, [shorter])[0]
