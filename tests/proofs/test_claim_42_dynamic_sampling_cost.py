"""Claim 42 (docs/claims.md): dynamic sampling's cost and the batch it keeps, in closed form.

With q = sum_v P(R = v)^G the chance a group of G has no signal and a cap of N draws per prompt, the groups drawn
per prompt are S_N = sum_{k<N} q^k in expectation, the kept group is flat with probability q^N, and one kept
response has reward v with probability (p_v - p_v^G) S_N + p_v^G q^(N-1) (lab.exact.dynamic_sampling; DAPO,
arXiv:2503.14476, section 3.2). Checked against the definition: every sequence of draws enumerated, the first group
with signal kept, the N-th kept whatever it holds.
"""

import itertools
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.exact.dynamic_sampling import (expected_draws, flat_kept_probability, kept_value_probs,
                                        no_signal_probability, value_probs)


def enumerated(probs, rewards, group_size, cap, extra_term=0):
    """(P(kept = g) per group, E[draws]) by every draw sequence; `extra_term` = 1 is the mutant that lets the
    sampler draw once more than its cap."""
    groups = list(itertools.product(range(len(probs)), repeat=group_size))
    p = {g: math.prod(probs[i] for i in g) for g in groups}
    signal = {g: len({rewards[i] for i in g}) > 1 for g in groups}
    cap = cap + extra_term
    kept, cost = {g: 0.0 for g in groups}, 0.0
    for draws in range(1, cap + 1):
        for sequence in itertools.product(groups, repeat=draws):
            if any(signal[g] for g in sequence[:-1]) or (draws < cap and not signal[sequence[-1]]):
                continue
            weight = math.prod(p[g] for g in sequence)
            kept[sequence[-1]] += weight
            cost += draws * weight
    return kept, cost, signal


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), group_size=st.integers(2, 3), cap=st.integers(1, 3))
def test_claim_42_dynamic_sampling_cost_and_kept_batch_in_closed_form(seed, group_size, cap):
    """Random response distributions over 3 responses with rewards in {0, 1, 2}: the closed forms equal the
    enumeration to 1e-12. Mutant: a sampler allowed one draw past its cap (S_{N+1}) fails wherever q > 0."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(3, generator=g, dtype=torch.float64) * 2, -1)
    rewards = torch.randint(0, 3, (3,), generator=g).double()
    kept, cost, signal = enumerated(probs.tolist(), rewards.tolist(), group_size, cap)
    values, p_v = value_probs(probs, rewards)
    q = no_signal_probability(p_v, group_size)
    assert abs(expected_draws(q, cap).item() - cost) < 1e-12
    assert abs(flat_kept_probability(q, cap).item() - sum(w for h, w in kept.items() if not signal[h])) < 1e-12
    law = [sum(w * sum(rewards[i].item() == v for i in h) / group_size for h, w in kept.items())
           for v in values.tolist()]
    torch.testing.assert_close(kept_value_probs(p_v, group_size, cap), torch.tensor(law, dtype=torch.float64),
                               rtol=0, atol=1e-12)
    if q > 1e-6:
        assert abs(enumerated(probs.tolist(), rewards.tolist(), group_size, cap, extra_term=1)[1] - cost) > 1e-9
