"""What the training loop does differently per policy kind: one class per kind, one table (`KINDS`).

    factorised:      pi(y | x) = prod_q p_q(y_q | x)             every position live (no mask), length L
    autoregressive:  pi(y | x) = prod_{q < |y|} p(y_q | x, y_<q)  live up to the first EOS, at most max_length

The loop (`lab.training.train`) is one body for both; it asks its kind for the things that truly
differ: how responses are drawn (`sample`, `live_tokens`), the fused log-prob node (`log_probs`:
`lab.policies.fused` or `lab.policies.ar_fused`), the exact per-epoch metrics (`start_epoch`,
`exploration`, and `exact_distribution` for the distance to pi*: `lab.exact.distributions`) and which
step metrics the node's second output feeds (`step_metrics`, `lab.training.metrics`). The factorised
kind keeps each epoch's sampling logits: it samples from them, checks them for divergence and takes
its greedy responses, exact exploration and exact distribution from them.
"""

from __future__ import annotations

import torch
from torch import Tensor

import lab.policies as P
from lab.exact import varlen
from lab.exact.ar_exploration import SamplingPolicyMetrics
from lab.exact.distributions import Factorized as FactorizedDistribution, Table
from lab.exact.exploration import entropy_bonus, epoch_exploration, is_exact
from lab.policies.ar_fused import ar_log_probs
from lab.policies.factorized import PolicyStack, policy_logits
from lab.policies.fused import policy_log_probs
from lab.policies.interface import PolicyKind
from lab.policies.sampling import SAMPLERS, greedy_responses
from lab.training.config import TrainConfig
from lab.training.divergence import DivergenceGuard
from lab.training.lengths import eos_targets, resolve_max_length
from lab.training.metrics import FIXED_LENGTH_METRICS, LIVE_TOKEN_METRICS, BlockMetrics
from lab.training.runs import RunGroups
from lab.training.tempering import (TemperedStack, TemperedView, tempered, tempered_module,  # noqa: F401
                                     temperature_scale)
from tasks import Task, best_reward

def start_from(policy, folder: str | None) -> None:
    """Every run's parameters set to a finished run's policy.pt (`--init-from`; the same start for every seed, each
    seed still sampling with its own generator). The stack is first built as usual, so each run's generator has made
    the same draws as from a random start. The command checked the folder and the policy's shape before."""
    if folder is None:
        return
    state = torch.load(f"{folder}/policy.pt", map_location="cpu", weights_only=True)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            parameter.copy_(state[name].to(parameter).expand_as(parameter))


class Factorized(TemperedStack):
    """The lecture's policy (`lab.policies.factorized`): responses of exactly the task's length."""

    step_metrics: BlockMetrics = FIXED_LENGTH_METRICS
    eos = None

    def __init__(self, task: Task, configs: list[TrainConfig], generators: list[torch.Generator],
                 reward_groups: RunGroups, device: torch.device) -> None:
        shared = configs[0]
        self.task, self.configs, self.reward_groups, self.device = task, configs, reward_groups, device
        self.group_size, self.generators = shared.group_size, generators  # each run's, for `sample_with`
        self.rewards = {c.reward: task.reward_fn(c.reward) for c in configs}  # unknown names fail here
        self.prompts = task.prompts.to(device)  # int[batch pos]
        self.max_length = task.response_length
        self.entries = task.response_length  # per response and step, to size the metric blocks
        self.policy = PolicyStack(task.vocab_size, self.prompts.shape[1], task.response_length, shared.dim,
                                  generators, [c.init_scale for c in configs], shared.dtype.torch)
        start_from(self.policy, shared.init_from)
        sampler_groups = RunGroups([c.sampler for c in configs], device)
        # each sampler draws for its own runs, each run from its own generator (lab.policies.sampling)
        run_generators = {s: [generators[i] for i in idx.tolist()] for s, idx in sampler_groups.groups}
        self.draw = lambda logits: sampler_groups.apply(  # noqa: E731
            lambda s, lg: SAMPLERS[s](lg, self.group_size, run_generators[s]), logits)
        self.exact = is_exact(task.vocab_size, task.response_length)
        self.epoch_logits: list[Tensor] = []  # each epoch's sampling policy, for the exact exploration metrics
        self.scale = temperature_scale(configs, device)
        with torch.no_grad():
            self.logits = self.sampling_logits()  # float[run batch pos vocab]; later: each epoch's end

    def sampling_logits(self) -> Tensor:
        """logits / T of every run on the training prompts (the plain forward pass when every T is 1)."""
        if self.scale is None:
            return self.policy(self.prompts)
        return policy_logits(*tempered(list(self.policy.parameters()), self.scale), self.prompts)

    def targets(self, prompts: Tensor) -> Tensor:
        return self.task.targets(prompts)

    def optimum(self, prompts: Tensor, targets: Tensor) -> Tensor:
        return torch.stack([self.task.optimum(c.reward, prompts) for c in self.configs]).float()

    def start_epoch(self, fresh_reference: bool) -> dict[str, Tensor]:
        """Exact metrics measured at the epoch's first step: none (they come from the step metrics)."""
        self.epoch_logits.append(self.logits)
        return {}

    def sample(self) -> Tensor:
        return self.draw(self.logits)  # int[run batch trial pos]

    def sample_with(self, parameters: list[Tensor], runs: Tensor) -> Tensor:
        """The given runs' responses, each from its own generator, by the policy at `parameters` float[run ...]."""
        scale = None if self.scale is None else self.scale.index_select(0, runs)
        logits = policy_logits(*tempered([p.index_select(0, runs) for p in parameters], scale), self.prompts)
        return torch.cat([SAMPLERS[self.configs[r].sampler](logits[i:i + 1], self.group_size, [self.generators[r]])
                          for i, r in enumerate(runs.tolist())])

    def live_tokens(self, responses: Tensor) -> None:
        return None  # every position is live

    def log_probs(self, parameters: list[Tensor], responses: Tensor, mask: None) -> tuple[Tensor, Tensor]:
        """float[run batch trial pos] and the log-softmaxes float[run batch pos vocab], through one node."""
        return policy_log_probs(*tempered(parameters, self.scale), self.prompts, responses)

    def argmax_tokens(self, aux: Tensor, responses: Tensor) -> Tensor:
        """Each position's most likely token, int[run batch trial pos], from a step's log-softmaxes (`aux`): the
        factorised policy's positions do not depend on the response."""
        return aux.argmax(dim=-1).unsqueeze(-2).expand_as(responses)

    def token_entropies(self, aux: Tensor, responses: Tensor) -> Tensor:
        """Each token's entropy: its position's, from the step's log-softmaxes, float[run batch trial pos]."""
        return -(aux.exp() * aux).sum(dim=-1).unsqueeze(-2).expand_as(responses)

    def entropy_bonus(self, parameters: list[Tensor], runs: Tensor) -> Tensor:
        """The exact mean entropy of the given runs' policies on the prompts, differentiable: float[runs]."""
        chosen = None if self.scale is None else self.scale.index_select(0, runs)
        return entropy_bonus(policy_logits(*tempered([p.index_select(0, runs) for p in parameters], chosen),
                                           self.prompts))

    def end_epoch(self, guard: DivergenceGuard, epoch: int, losses: list[Tensor], parameters: list[Tensor]) -> None:
        with torch.no_grad():
            self.logits = self.sampling_logits()  # the next epoch's sampling logits: unchanged until then
            if guard.check(epoch, losses, self.logits, parameters):  # a diverged run is back at its epoch start
                self.logits = self.sampling_logits()

    def exact_distribution(self) -> FactorizedDistribution:
        """The policy the loop samples from, over all its responses (lab.exact.distributions), in float64: the
        softmax of its logits at each run's temperature (`self.logits`, at hand after `end_epoch`)."""
        return FactorizedDistribution(torch.log_softmax(self.logits.to(torch.float64), dim=-1))  # [run batch pos vocab]

    def greedy(self, prompts: Tensor) -> Tensor:
        with torch.no_grad():  # on the training prompts, the epoch's end logits (end_epoch) are at hand
            return greedy_responses(self.logits if prompts is self.prompts else self.policy(prompts))

    def exploration(self) -> dict[str, Tensor]:
        """Exact P(optimal) and P(no signal) of every epoch's sampling policy (lab.exact.exploration)."""
        prompts, configs = self.prompts, self.configs
        mc_generators = None if self.exact else [torch.Generator(self.device).manual_seed(c.seed) for c in configs]
        explored = self.reward_groups.apply(
            lambda name, lg, runs_of: torch.stack(list(epoch_exploration(
                lg, prompts, self.task.reward_fn(name), self.task.optimum(name, prompts).to(self.device),
                self.group_size, None if self.exact else [mc_generators[r] for r in runs_of.tolist()]).values()),
                dim=-1),
            torch.stack(self.epoch_logits, dim=1), torch.arange(len(configs), device=self.device))  # float[run epoch 2]
        return dict(zip(("optimal_prob", "zero_std_prob"), explored.unbind(-1)))


class Autoregressive(TemperedStack):
    """The autoregressive policy (`lab.policies.autoregressive`): responses end at EOS or at max_length."""

    step_metrics: BlockMetrics = LIVE_TOKEN_METRICS

    def __init__(self, task: Task, configs: list[TrainConfig], generators: list[torch.Generator],
                 reward_groups: RunGroups, device: torch.device) -> None:
        shared = configs[0]
        self.configs, self.generators, self.group_size = configs, generators, shared.group_size
        self.prompts = task.prompts.to(device)  # int[batch pos]
        self.max_length = resolve_max_length(shared, self.prompts.shape[1])
        self.policy = P.make_stack(shared.policy, task.vocab_size, self.prompts.shape[1], self.max_length,
                                   shared.dim, generators, [c.init_scale for c in configs],
                                   shared.dtype.torch)
        start_from(self.policy, shared.init_from)
        self.eos = P.ops_of(self.policy).eos(self.policy)
        self.entries = self.max_length * (self.eos + 1)  # per response and step, to size the metric blocks
        self.rewards = {c.reward: task.variable_length_reward(c.reward, self.eos) for c in configs}  # unknown: fail
        self.task = task
        self.exact_metrics = SamplingPolicyMetrics(self.prompts, self.targets(self.prompts), self.rewards,
                                                   reward_groups, shared.group_size, task.vocab_size, self.max_length)
        self.exact = self.exact_metrics.exact
        self.scale = temperature_scale(configs, device)

    def sampling_policy(self):
        """The policy stack, or a view of its parameters at each run's temperature."""
        return self.policy if self.scale is None else TemperedView(self.policy, self.scale)

    def targets(self, prompts: Tensor) -> Tensor:
        return eos_targets(self.task.targets(prompts), self.eos, self.max_length)  # sorted(x), then EOS

    def optimum(self, prompts: Tensor, targets: Tensor) -> Tensor:
        return torch.stack([best_reward(self.rewards[c.reward], prompts, targets) for c in self.configs]).float()

    def start_epoch(self, fresh_reference: bool) -> dict[str, Tensor]:
        """`kl_exact` at the epoch's first step only, from the prefix tree that also gives the exploration
        metrics; later steps leave it empty (the tree costs about three training steps at 500 runs)."""
        with torch.no_grad():
            return dict(kl_exact=self.exact_metrics.epoch(self.sampling_policy(), fresh_reference))

    def sample(self) -> Tensor:
        if self.scale is None:
            return P.sample(self.policy, self.prompts, self.group_size, self.generators)  # int[run batch trial pos]
        with torch.no_grad():
            return P.ops_of(self.policy).sample(self.sampling_policy().params, self.prompts, self.group_size,
                                                self.generators)

    def sample_with(self, parameters: list[Tensor], runs: Tensor) -> Tensor:
        names = [name for name, _ in self.policy.named_parameters()]  # as the factorised kind's
        chosen = tempered([p.index_select(0, runs) for p in parameters],
                          None if self.scale is None else self.scale.index_select(0, runs))
        return P.ops_of(self.policy).sample(dict(zip(names, chosen)), self.prompts, self.group_size,
                                            [self.generators[r] for r in runs.tolist()])

    def live_tokens(self, responses: Tensor) -> Tensor:
        return P.response_mask(self.policy, responses)  # bool[run batch trial pos]

    def log_probs(self, parameters: list[Tensor], responses: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """float[run batch trial pos] (0 on padding) and each position's entropy, through one node."""
        return ar_log_probs(*tempered(parameters, self.scale), self.prompts, responses, mask)

    def argmax_tokens(self, aux: Tensor, responses: Tensor) -> Tensor:
        """Each position's most likely token given the response's prefix, int[run batch trial pos] (a forward pass
        of its own: the fused node's second output is the entropy)."""
        with torch.no_grad():
            return P.token_logits(self.policy, self.prompts, responses).argmax(dim=-1)

    def token_entropies(self, aux: Tensor, responses: Tensor) -> Tensor:
        return aux.detach()  # the step's own next-token entropies given each prefix, float[run batch trial pos]

    def entropy_bonus(self, parameters: list[Tensor], runs: Tensor) -> Tensor:
        raise ValueError("the autoregressive policy has no entropy bonus (TrainConfig rejects one)")

    def end_epoch(self, guard: DivergenceGuard, epoch: int, losses: list[Tensor], parameters: list[Tensor]) -> None:
        with torch.no_grad():
            guard.check(epoch, losses, None, parameters)  # a diverged run goes back to its epoch start

    def exact_distribution(self) -> Table:
        """The policy over all its EOS-ended responses (lab.exact.distributions), in float64, at each run's
        temperature: log pi(y | x) of every response by lab.exact.varlen, float[run batch n]."""
        with torch.no_grad():
            return Table(varlen.all_log_probs(self.tempered_policy(), self.prompts, torch.float64))

    def greedy(self, prompts: Tensor) -> Tensor:
        return P.greedy(self.policy, prompts)

    def exploration(self) -> dict[str, Tensor]:
        return self.exact_metrics.exploration()


Kind = Factorized | Autoregressive

KINDS: dict[PolicyKind, type[Kind]] = {PolicyKind.factorized: Factorized, PolicyKind.autoregressive: Autoregressive}
"""The one dispatch table: policy kind -> its side of the training loop."""
