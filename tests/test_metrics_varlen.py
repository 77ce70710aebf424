"""Step metrics of variable-length training in bulk (lab/training/metrics.py, LIVE_TOKEN_METRICS) against their plain
definitions over live tokens, one step and one run at a time."""

import torch

from lab.core.kl import k3
from lab.training.metrics import LIVE_TOKEN_METRICS, StepMetricBlock


def test_block_metrics_are_the_plain_per_step_means_over_live_tokens():
    g = torch.Generator().manual_seed(0)
    runs, batch, trial, pos, vocab, steps, epochs = 2, 3, 4, 5, 6, 2, 2
    eps = torch.tensor([0.1, 0.2])
    block, plain = StepMetricBlock(steps, epochs, LIVE_TOKEN_METRICS), []
    for epoch in range(epochs):
        mask = torch.rand(runs, batch, trial, pos, generator=g) < 0.7
        mask[..., 0] = True
        deltas = torch.randn(runs, batch, trial, generator=g)
        zero = lambda t: torch.where(mask, t, torch.zeros(()))  # noqa: E731
        old, ref = (zero(-torch.rand(runs, batch, trial, pos, generator=g)) for _ in range(2))
        for step in range(steps):
            log_softmax = torch.log_softmax(torch.randn(runs, batch, trial, pos, vocab, generator=g), -1)
            log_probs = zero(old + 0.3 * torch.randn(old.shape, generator=g))
            loss = torch.randn(runs, generator=g)
            # each position's entropy as the fused log-probs give it; padding holds junk the block must ignore
            token_entropy = torch.where(mask, -(log_softmax.exp() * log_softmax).sum(-1), torch.tensor(1e6))
            block.add_step(step, log_probs, token_entropy, loss=loss)
            for r in range(runs):
                live = mask[r]
                rho = (log_probs[r] - old[r]).exp()[live]
                side = deltas[r].unsqueeze(-1).expand(batch, trial, pos)[live]
                low = ((rho < 1 - eps[r]) & (side < 0)).float().mean()
                high = ((rho > 1 + eps[r]) & (side > 0)).float().mean()
                entropy = -(log_softmax[r].exp() * log_softmax[r]).sum(-1)[live].mean()
                plain.append(dict(kl=k3(log_probs[r], ref[r])[live].sum() / (batch * trial), ratio_mean=rho.mean(),
                                  ratio_max=rho.max(), clip_low_fraction=low, clip_high_fraction=high,
                                  clip_fraction=low + high, entropy=entropy, loss=loss[r]))
        block.end_epoch(old, ref, None, mask, deltas)
    values = block.flush(eps)  # float[(epoch step) run]
    for i, expected in enumerate(plain):
        epoch_step, r = divmod(i, runs)
        for name, value in expected.items():
            torch.testing.assert_close(values[name][epoch_step, r], value, rtol=1e-5, atol=1e-6, msg=name)
