"""PPO's critic beside the policy, for the runs with `--delta gae` (docs/task.md, "A learned critic").

Each such run has a critic V_psi of its policy's family (`lab.policies.critic`) with its own Adam
(`RunAdam`, learning rate `critic_lr`). Every epoch, on the sampled responses:

    V_old  = V_psi(s_t)                                  frozen: the targets are made from it
    A, R_t = GAE(lambda) with gamma = 1 (`lab.core.gae`)  the terminal reward on the last live token
    A     <- masked_whiten(A) over the run's tokens       only with `whiten_advantages`
    every optimizer step:  loss_V = verl's clipped value loss (V_psi, V_old, R_t, cliprange_value)

The policy's loss takes A per token (`lab.core.losses.compute_loss(per_token=True)`); in the first
`critic_warmup` epochs only the critic trains. The factorised policy chooses every token from the
prompt alone, so its one state is the prompt: GAE runs on one step, A = R - V(x) on every token and
R_t = R, whatever lambda (lambda matters only for the autoregressive policy, whose states are the
prefixes and whose value after EOS is 0).

Metrics (verl's names, glossary `lab.training.records.CRITIC_STEP_METRICS`, `CRITIC_EPOCH_METRICS`):
vf_loss and vf_clipfrac every step; values_mean, vf_explained_var and the exact value_error_exact
(E_{s~pi}[(V_psi(s) - V^pi(s))^2] for the critic that made V_old and the epoch's sampling policy,
`lab.exact.critic_error`) with its split by position, every epoch. Runs without a critic get NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.core.gae import explained_variance, gae_advantages, masked_whiten, terminal_rewards, value_loss
from lab.exact import critic_error
from lab.exact import values as exact_values
from lab.policies.critic import Critic, parameter_count
from lab.training.config import TrainConfig
from lab.training.optim import RunAdam

CRITIC_SEED_OFFSET = 1_000_003
"""The critic of a run with seed s is drawn from a generator seeded s + this (mod 2**64): its own
stream, so the policy's initialisation and samples are those of the same seed without a critic."""


def critic_runs(configs: list[TrainConfig]) -> list[int]:
    """The runs with a learned critic (`--delta gae`)."""
    return [r for r, c in enumerate(configs) if c.delta.value == "gae"]


class CriticRuns:
    """The critics of a batch's gae runs (`runs`), as one stack with a leading run axis."""

    def __init__(self, kind, configs: list[TrainConfig], runs: list[int], device: torch.device) -> None:
        own = [configs[r] for r in runs]
        shared = configs[0]
        self.kind, self.device = kind, device
        self.runs = torch.tensor(runs, device=device, dtype=torch.long)
        generators = [torch.Generator(device).manual_seed((c.seed + CRITIC_SEED_OFFSET) % 2**64) for c in own]
        self.critic = Critic(shared.policy, kind.policy.vocab_size, kind.prompts.shape[1], kind.max_length,
                             shared.dim, generators, shared.dtype.torch).to(device)
        self.parameters = [p for _, p in self.critic.named_parameters()]

        def per_run(values: list[float]) -> Tensor:
            return torch.tensor(values, device=device, dtype=shared.dtype.torch)

        self.optimizer = RunAdam(self.parameters, per_run([c.critic_lr or c.lr for c in own]),
                                 shared.adam_betas, shared.adam_eps)
        self.lam, self.clip = per_run([c.gae_lambda for c in own]), per_run([c.cliprange_value for c in own])
        self.whiten = torch.tensor([c.whiten_advantages for c in own], device=device)
        self.tables = torch.stack([exact_values.reward_table(kind.policy, kind.prompts, kind.rewards[configs[r].reward])
                                   for r in range(len(configs))]) if kind.exact else None  # float[run batch n]
        self.step_log: dict[str, list[Tensor]] = {"vf_loss": [], "vf_clipfrac": []}
        self.epoch_log: dict[str, list[Tensor]] = {"values_mean": [], "vf_explained_var": [], "value_error_exact": []}
        self.by_position: list[Tensor] = []

    @property
    def parameter_count(self) -> int:
        """Free parameters of one run's critic (and of one run's policy: `policy_parameter_count`)."""
        return self.critic.parameter_count

    @torch.no_grad()
    def advantages(self, responses: Tensor, mask: Tensor | None, rewards: Tensor) -> Tensor:
        """The epoch's advantages of the critic runs, float[critic-run batch trial pos]; keeps V_old, the
        targets and the responses for the steps, and records the epoch's metrics."""
        responses, rewards = responses[self.runs], rewards[self.runs].to(self.parameters[0].dtype)
        live = torch.ones_like(responses, dtype=torch.bool) if mask is None else mask[self.runs]
        old = self.critic(self.kind.prompts, responses)  # float[run batch trial pos]
        if mask is None:  # one state, the prompt: a one-step GAE, broadcast to every token
            one, targets = gae_advantages(rewards.unsqueeze(-1), old[..., :1], live[..., :1], self.lam)
            advantages, targets = one.expand_as(old), targets.expand_as(old)
        else:
            advantages, targets = gae_advantages(terminal_rewards(rewards, live), old, live, self.lam)
        if bool(self.whiten.any()):
            white = self.whiten.view(-1, 1, 1, 1)
            advantages = torch.where(white, masked_whiten(advantages, live), advantages)
        # the steps' value loss: with one state per response (factorised), one position carries all of it
        keep = slice(0, 1) if mask is None else slice(None)
        self.responses, self.live = responses[..., keep], live[..., keep]
        self.old, self.targets = old[..., keep], targets[..., keep]
        self.epoch_log["values_mean"].append((old * live).sum((-3, -2, -1)) / live.sum((-3, -2, -1)))
        self.epoch_log["vf_explained_var"].append(explained_variance(targets, old, live))
        self._exact_error()
        return advantages

    def _exact_error(self) -> None:
        """value_error_exact of the critic that made V_old, against V^pi of the sampling policy."""
        length, runs = self.kind.max_length, len(self.runs)
        if self.tables is None:
            nan = torch.full((runs,), float("nan"), device=self.device)
            self.epoch_log["value_error_exact"].append(nan)
            self.by_position.append(nan.unsqueeze(-1).expand(runs, length))
            return
        policy, prompts = self.kind.tempered_policy(), self.kind.prompts  # the sampling policy, at its T
        tables = critic_error.critic_state_values(self.critic, policy, prompts)
        if self.kind.eos is None:
            visits, truth = None, exact_values.state_values(policy, prompts, self.tables)[self.runs]
        else:  # the prefix tree once, for V^pi and the visits
            levels = exact_values.tree_levels(policy, prompts)
            truth = [t[self.runs] for t in exact_values.state_values(policy, prompts, self.tables, levels=levels)]
            visits = [v[self.runs] for v in exact_values.visit_probs(policy, prompts, levels=levels)]
        error = critic_error.value_error_exact(policy, prompts, None, tables, truth=truth, visits=visits)
        self.epoch_log["value_error_exact"].append(error.total.float())
        self.by_position.append(error.by_position.float())

    def step(self) -> None:
        """One Adam step of every critic on its value loss; records vf_loss and vf_clipfrac float[critic-run]."""
        loss, clipfrac = value_loss(self.critic(self.kind.prompts, self.responses), self.old, self.targets,
                                    self.live, self.clip)
        self.optimizer.zero_grad()
        loss.sum().backward()
        self.optimizer.step()
        self.step_log["vf_loss"].append(loss.detach())
        self.step_log["vf_clipfrac"].append(clipfrac)

    def final_state(self) -> dict:
        """The `Records` fields of the critics: their final parameters (cpu) and their runs."""
        return dict(critic_state={name: p.detach().cpu().clone() for name, p in self.critic.named_parameters()},
                    critic_runs=self.runs.tolist())

    def metrics(self, num_runs: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """(step metrics float[run step], epoch metrics float[run epoch]), NaN for the runs without a critic;
        the split by position as value_error_exact_<t>."""
        def spread(per_time: list[Tensor]) -> Tensor:  # float[critic-run time] -> float[run time]
            values = torch.stack(per_time, dim=1).float()
            out = torch.full((num_runs, values.shape[1]), float("nan"), device=values.device)
            return out.index_copy(0, self.runs, values)

        steps = {name: spread(values) for name, values in self.step_log.items()}
        epochs = {name: spread(values) for name, values in self.epoch_log.items()}
        positions = torch.stack(self.by_position, dim=1)  # float[critic-run epoch pos]
        for t in range(positions.shape[-1]):
            epochs[f"value_error_exact_{t}"] = spread(list(positions[..., t].unbind(1)))
        return steps, epochs


def policy_parameter_count(policy) -> int:
    """Free parameters of one run's policy, reported beside its critic's."""
    return parameter_count(dict(policy.named_parameters()), runs=True)
