"""Which policy draws each run's responses, and dynamic sampling's redraws (issue 38).

    mu_r = pi_{theta_{t - K_r}}                    a stale sampler: the parameters of K optimizer steps before
                                                   (the initial ones while fewer were taken)
    mu_r = pi at temperature T_s                   a mismatched sampler: its embedding scaled by sqrt(T / T_s), so
                                                   that the kind's own 1 / sqrt(T) makes its logits logits / T_s
                                                   (both policies' logits are quadratic in E: lab.training.kinds)
    dynamic sampling: a prompt's group without signal is drawn again from mu_r, up to the run's cap
                                                   (lab.core.dynamic_sampling)

Each run draws from its own generator only, so a run samples the same alone or inside a sweep: a redraw round
draws a whole batch for the runs that need one (the groups of its prompts that needed none are discarded unseen,
and not counted: the counts are what a DAPO sampler would generate). A batch where no run uses any of this has no
`SamplerRuns` (`of` returns None) and samples exactly as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch
from torch import Tensor

from lab.core.dynamic_sampling import has_signal, needs_redraw, replace_groups
from lab.training.config import TrainConfig

SAMPLER_EPOCH_LOG = ("groups_drawn", "groups_kept", "groups_discarded")


class SamplerRuns:
    """The batch's samplers: `draw` the epoch's responses, `sampler_parameters` for their log-probs, `after_step`
    keeps the snapshots a stale sampler reads; `epoch_log`: name -> one float[run] per epoch (dynamic sampling)."""

    def __init__(self, configs: list[TrainConfig], parameters: list[Tensor], device: torch.device) -> None:
        self.parameters = parameters  # the live policy parameters, float[run ...] each (updated in place)
        self.lags = torch.tensor([c.staleness for c in configs], device=device)
        depth = max(c.staleness for c in configs)
        self.snapshots = deque([self.snapshot()], maxlen=depth + 1) if depth else None
        ratios = [1.0 if c.sampler_temperature is None else c.temperature / c.sampler_temperature for c in configs]
        self.mismatch = None if all(r == 1.0 for r in ratios) else torch.tensor(ratios, dtype=torch.float64,
                                                                                device=device).sqrt()
        self.caps = torch.tensor([c.max_num_gen_batches if c.dynamic_sampling else 1 for c in configs],
                                 device=device)  # int[run]: 1 = no redraw
        self.dynamic = any(c.dynamic_sampling for c in configs)
        self.epoch_log: dict[str, list[Tensor]] = {name: [] for name in SAMPLER_EPOCH_LOG} if self.dynamic else {}

    @classmethod
    def of(cls, configs: list[TrainConfig], parameters: list[Tensor], device: torch.device) -> SamplerRuns | None:
        used = any(c.staleness or c.sampler_temperature is not None or c.dynamic_sampling for c in configs)
        return cls(configs, parameters, device) if used else None

    @property
    def off_policy(self) -> bool:
        """Some run's sampler is not its trained policy (its responses need the sampler's log-probs)."""
        return self.snapshots is not None or self.mismatch is not None

    def snapshot(self) -> list[Tensor]:
        # a run that diverges mid-epoch is frozen and its later records emptied (lab.training.divergence), but its
        # stale sampler would still draw from these: no NaN may reach a sampler (torch.multinomial refuses it)
        return [torch.nan_to_num(p.detach(), nan=0.0, posinf=0.0, neginf=0.0) for p in self.parameters]

    def after_step(self, epoch=None) -> None:
        if self.snapshots is not None:
            self.snapshots.append(self.snapshot())

    def sampler_parameters(self) -> list[Tensor] | None:
        """mu's parameters, float[run ...] each (None: every run samples from its policy as it is)."""
        if not self.off_policy:
            return None
        if self.snapshots is None:
            chosen = [p.detach() for p in self.parameters]
        else:  # run r's snapshot K_r steps back, or the oldest kept
            back = (len(self.snapshots) - 1 - self.lags).clamp(min=0).tolist()
            chosen = [torch.stack([self.snapshots[k][i][r] for r, k in enumerate(back)])
                      for i in range(len(self.parameters))]
        if self.mismatch is not None:
            embedding = chosen[0]
            chosen = [embedding * self.mismatch.to(embedding.dtype).view(-1, *[1] * (embedding.dim() - 1)),
                      *chosen[1:]]
        return chosen

    def draw(self, kind, rewards_of: Callable[[Tensor], Tensor]) -> tuple[Tensor, list[Tensor] | None]:
        """The epoch's responses int[run batch trial pos] and mu's parameters (None: the policy's own)."""
        chosen = self.sampler_parameters()
        every = torch.arange(len(self.caps), device=self.caps.device)
        responses = kind.sample() if chosen is None else kind.sample_with(chosen, every)
        if not self.dynamic:
            return responses, chosen
        rewards = rewards_of(responses)  # float[run batch trial]
        draws = torch.ones(rewards.shape[:-1], dtype=torch.long, device=rewards.device)  # int[run batch]
        caps = self.caps.unsqueeze(-1)
        live = [p.detach() for p in self.parameters]  # the policy itself, where no run's sampler differs from it
        while True:
            redraw = needs_redraw(rewards, draws, caps)  # bool[run batch]
            runs = redraw.any(dim=-1).nonzero().flatten()
            if not len(runs):
                break
            fresh = responses.index_copy(0, runs, kind.sample_with(live if chosen is None else chosen, runs))
            responses = replace_groups(responses, fresh, redraw)
            rewards = replace_groups(rewards, rewards_of(fresh), redraw)
            draws = draws + redraw
        drawn = draws.sum(dim=-1).float()
        self.epoch_log["groups_drawn"].append(drawn)
        self.epoch_log["groups_kept"].append(has_signal(rewards).sum(dim=-1).float())
        self.epoch_log["groups_discarded"].append(drawn - draws.shape[-1])
        return responses, chosen
