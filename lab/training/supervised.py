"""SFT and expert iteration inside the training loop: supervised steps on a set of responses (`lab.core.sft`).

    sft                D = G demonstrations per prompt, one fixed set drawn before training (`demonstrations`)
    expert iteration   D = the epoch's own groups, y ~ pi_theta, each weighted 1 if the filter keeps it, else 0
    loss_r           = -sum m w l / sum m w  over run r's D         (token mean over completion tokens, TRL's SFT)

Both are entries of the method table (`lab.training.methods.METHODS`); their reference is frozen at the initial
policy, so `kl_exact` is the exact KL to the policy the run started from. Step metrics (measured before each
step's update, `lab.training.records.SUPERVISED_STEP_METRICS`): the trained responses' mean sequence log-prob and
token accuracy. Epoch metrics: the samples drawn from the policy to train on, kept, and trained on (response x
step), each counted from the start, and, on enumerable spaces, the exact expected reward and KL to the initial
policy (`lab.training.optimum.ProgressTracker`). Every method samples the epoch's groups from pi_theta, so samples.txt
and the sample metrics show what the policy itself answers; SFT trains on its demonstrations, not on them.
"""

from __future__ import annotations

import torch
from torch import Tensor

import lab.policies as P
from lab.core.modes import Filter
from lab.core.sft import at_least, group_best
from lab.core.modes import Demos
from lab.training.config import TrainConfig
from lab.training.epoch_tokens import EpochTokens
from lab.training.preference_pairs import pair_generators
from lab.training.runs import RunGroups


def demonstrations(kind, configs: list[TrainConfig], generators: list[torch.Generator]) -> Tensor:
    """SFT's fixed set, int[run batch G pos]: the task's target sorted(x) (then EOS) G times per prompt, each token
    of its content replaced at rate `demo_noise` by a uniform draw from the vocabulary (`noisy`; one draw set per
    run, from its own generator), or G samples per prompt from the policy of `demos_from` (`policy`)."""
    shared = configs[0]
    runs, group = len(configs), shared.group_size
    if shared.demos is Demos.policy:
        source = P.load_policy(f"{shared.demos_from}/policy.pt").to(kind.prompts.device)
        drawn = [P.sample(source, kind.prompts, group, g) for g in generators]  # int[batch G pos] each
        return torch.stack(drawn)
    targets = kind.targets(kind.prompts)  # int[batch pos]
    demos = targets.unsqueeze(-2).expand(runs, *targets.shape[:1], group, targets.shape[-1]).clone()
    if shared.demos is Demos.noisy:
        content = kind.prompts.shape[1]  # sorted(x) has the prompt's length; EOS and padding stay
        for r, g in enumerate(generators):
            shape = (*demos.shape[1:-1], content)
            swap = torch.rand(shape, generator=g, device=g.device) < shared.demo_noise
            tokens = torch.randint(kind.task.vocab_size, shape, generator=g, device=g.device)
            demos[r, ..., :content] = torch.where(swap.to(demos.device), tokens.to(demos), demos[r, ..., :content])
    return demos


class Supervised:
    """What SFT and expert iteration share: the NLL of a weighted set of responses, its metrics and counts."""

    tracks_optimum = False
    tracks_progress = True

    def __init__(self, configs: list[TrainConfig], generators: list[torch.Generator], device: torch.device) -> None:
        self.steps, self.configs, self.generators = configs[0].steps, configs, generators
        self.responses = self.mask = self.weights = None  # the epoch's trained responses, live tokens, 0/1 weights
        self.tokens: EpochTokens | None = None  # the epoch's token weights and counts, built at its first step
        self.step_log: dict[str, list[Tensor]] = {}
        self.epoch_log: dict[str, list[Tensor]] = {}
        self.counts = torch.zeros(3, len(configs), device=device)  # drawn, kept, trained: from the start
        self.epoch_values: dict[str, list[Tensor]] = {"demo_logps": [], "token_hits": []}

    def reference_period(self, kl_period: int) -> int:
        return 0  # the initial policy: kl_exact is the KL to where the run started

    def sample_marks(self) -> None:
        return None

    def forward_responses(self, kind, groups) -> tuple[Tensor, Tensor | None, bool]:
        """The groups, when they are what the steps train on or where the kind needs their pass for its step
        metrics (the autoregressive policy); else (the factorised policy's SFT) the demonstrations alone."""
        if self.responses is groups.responses or not kind.step_metrics.from_log_softmax:
            return groups.responses, groups.mask, True
        return self.responses, self.mask, False

    def step_loss(self, loop, epoch, step: int, log_probs: Tensor, aux: Tensor, old_log_probs: Tensor,
                  ref_log_probs: Tensor, on_groups: bool) -> tuple[Tensor, Tensor]:
        """The NLL of the trained responses, float[run] (twice: it is also the step's `pg_loss`)."""
        kind = loop.kind
        if on_groups and self.responses is not epoch.groups.responses:  # the demonstrations' own pass
            log_probs, aux = kind.log_probs(loop.parameters, self.responses, self.mask)
        per_position = kind.step_metrics.from_log_softmax  # aux: the positions' log-softmaxes
        if step == 0:
            self.tokens = EpochTokens.of(log_probs, self.mask, self.weights, self.responses,
                                         aux.detach() if per_position else None)
        tokens = self.tokens
        loss = tokens.nll(log_probs)
        with torch.no_grad():
            sequences = tokens.mean_log_prob(log_probs.detach())
            self.epoch_values["demo_logps"].append(sequences)  # NaN where nothing is kept
            # the factorised policy's argmax is in the step's log-softmaxes; the autoregressive one's takes a forward
            # pass of its own (a quarter of an expert-iteration step), so it is measured at each epoch's first step
            if per_position:
                hits = tokens.position_hits(aux.detach())
            elif step == 0:
                hits = tokens.hits(kind.argmax_tokens(aux.detach(), self.responses), self.responses)
            else:
                hits = torch.full_like(sequences, float("nan"))
            self.epoch_values["token_hits"].append(hits)
        return loss, loss

    def end_epoch(self, settings) -> None:
        """The epoch's step metrics (float[step run] each) and its counts (float[run] each, from the start)."""
        logps, hits = (torch.stack(self.epoch_values[name]) for name in ("demo_logps", "token_hits"))
        for name, values in (("demo_logps", logps), ("token_accuracy", self.tokens.accuracy(hits))):
            self.step_log.setdefault(name, []).append(values)
        for values in self.epoch_values.values():
            values.clear()
        for name, values in zip(("samples_drawn", "samples_kept", "samples_trained"), self.counts.clone()):
            self.epoch_log.setdefault(name, []).append(values)

    def take_groups(self, groups) -> None:
        pass


class SFT(Supervised):
    """`--loss sft`: steps on one fixed set of demonstrations (`demonstrations`), drawn before the first epoch."""

    @classmethod
    def of(cls, configs, kind, settings, generators, device) -> SFT:
        return cls(configs, pair_generators(generators, device), device)

    def start_epoch(self, epoch, kind, shared: TrainConfig) -> None:
        if epoch.index == 0:
            self.responses = demonstrations(kind, self.configs, self.generators)
            self.mask = kind.live_tokens(self.responses)
            self.counts[1] += self.responses[0, ..., 0].numel()  # the demonstrations: kept once, none drawn
        self.counts[2] += self.responses[0, ..., 0].numel() * self.steps


class ExpertIteration(Supervised):
    """`--loss expert-iteration`: steps on the epoch's own samples that pass the filter (CS336 assignment 5)."""

    def __init__(self, configs, generators, device, filters: RunGroups, thresholds: Tensor) -> None:
        super().__init__(configs, generators, device)
        self.filters, self.thresholds = filters, thresholds

    @classmethod
    def of(cls, configs, kind, settings, generators, device) -> ExpertIteration:
        thresholds = torch.tensor([0.0 if c.reward_threshold is None else c.reward_threshold for c in configs],
                                  device=device)
        return cls(configs, generators, device, RunGroups([c.ei_filter for c in configs], device), thresholds)

    def start_epoch(self, epoch, kind, shared: TrainConfig) -> None:
        pass

    def take_groups(self, groups) -> None:
        """Keep each run's responses its filter accepts: float[run batch trial] weights."""
        self.responses, self.mask = groups.responses, groups.mask
        self.weights = self.filters.apply(
            lambda name, r, tau: group_best(r) if name is Filter.group_best else at_least(r, tau),
            groups.rewards, self.thresholds)
        kept = self.weights.sum(dim=(-2, -1))
        self.counts += torch.stack([torch.full_like(kept, self.weights[0].numel()), kept, kept * self.steps])
