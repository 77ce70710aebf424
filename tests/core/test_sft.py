"""lab.core.sft: the NLL averaged over completion tokens (TRL's SFTTrainer), expert iteration's filters."""

import torch

from lab.core.sft import at_least, group_best, position_counts, position_hits, sft_loss, token_accuracy, token_hits


def test_the_sft_loss_is_the_mean_over_every_live_token_of_the_batch_not_a_mean_of_sequence_means():
    log_probs = torch.tensor([[[[-1.0, -2.0, -3.0], [-4.0, 0.0, 0.0]]]])  # [run batch trial pos]
    mask = torch.tensor([[[[True, True, True], [True, False, False]]]])
    # four live tokens: (1 + 2 + 3 + 4) / 4; a mean of sequence means would give (2 + 4) / 2 = 3, a sum 10
    assert torch.equal(sft_loss(log_probs, mask), torch.tensor([2.5]))
    assert torch.equal(sft_loss(log_probs, None), torch.tensor([10.0 / 6]))


def test_weights_leave_out_whole_responses_and_a_run_with_none_has_loss_zero():
    log_probs = torch.tensor([[[[-1.0, -1.0], [-3.0, -5.0]]], [[[-2.0, -2.0], [-2.0, -2.0]]]])  # two runs
    weights = torch.tensor([[[0.0, 1.0]], [[0.0, 0.0]]])
    assert torch.equal(sft_loss(log_probs, None, weights), torch.tensor([4.0, 0.0]))


def test_group_best_keeps_every_tie_at_the_top_and_nothing_from_a_constant_group():
    rewards = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    assert torch.equal(group_best(rewards), torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))


def test_the_threshold_filter_is_per_run_and_inclusive():
    rewards = torch.tensor([[[1.0, 3.0]], [[1.0, 3.0]]])  # [run batch trial]
    assert torch.equal(at_least(rewards, torch.tensor([3.0, 1.0])), torch.tensor([[[0.0, 1.0]], [[1.0, 1.0]]]))


def test_token_accuracy_counts_the_live_tokens_of_the_kept_responses():
    responses = torch.tensor([[[[1, 2, 3], [1, 1, 1]]]])
    predicted = torch.tensor([[[[1, 0, 3], [0, 0, 0]]]])
    mask = torch.tensor([[[[True, True, False], [True, True, True]]]])
    assert torch.equal(token_accuracy(predicted, responses, mask), torch.tensor([1 / 5]))
    assert torch.equal(token_accuracy(predicted, responses, mask, torch.tensor([[[1.0, 0.0]]])), torch.tensor([0.5]))
    assert token_accuracy(predicted, responses, mask, torch.zeros(1, 1, 2)).isnan().all()


def test_position_hits_count_what_token_hits_count_with_ties_taken_at_the_first_maximum():
    """The factorised policy's token hits from per-position token counts equal the per-token comparison with argmax's
    predictions, also where a position's maximum is tied (argmax takes the first) or NaN."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 3, (4, 3, 2, 5), generator=g).float()  # [run batch pos vocab]: many ties
    scores[0, 0, 0, 2] = float("nan")
    responses = torch.randint(0, 5, (4, 3, 6, 2), generator=g)  # [run batch trial pos]
    live = torch.randint(0, 2, (4, 3, 6, 1), generator=g).float().expand(-1, -1, -1, 2)
    predicted = scores.argmax(dim=-1).unsqueeze(-2).expand_as(responses)
    assert torch.equal(position_hits(position_counts(responses, live, 5), scores),
                       token_hits(predicted, responses, live))
