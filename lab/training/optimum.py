"""The exact distance of every run's policy to the KL-regularised optimum, after each epoch of the loop.

    J_beta(pi)        = E_pi[r] - beta KL(pi || pi_ref)                     (the objective DPO maximises, and
    pi*               = pi_ref exp(r / beta) / Z,   J_beta(pi*) = beta log Z   GRPO with k1 in the reward or k2 in
    KL(pi || pi*)     = (J_beta(pi*) - J_beta(pi)) / beta                    the loss; with k3 in the loss GRPO
                                                                            ascends another, claim 14)

Recorded for every DPO run and for runs with `optimum_metrics` (lab.training.records.OPTIMUM_METRICS), from the
kind's exact distribution over every response (lab.exact.distributions; lab.exact.optimum's formulas, which
tests/training/test_dpo_train.py checks the records against).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.exact import varlen


class ProgressTracker:
    """Exact E_theta[r] and KL(pi_theta || pi_0) of every run after each epoch, means over prompts, pi_0 the
    policy the run started from; from the kind's exact distribution (lab.exact.distributions), all runs at once.
    Recorded for the supervised methods (SFT, expert iteration: `reward_exact`, `kl_initial_exact`) on the factorised
    policy: the autoregressive one's distribution over every EOS-ended response (3906 per prompt on the lecture's toy)
    took six times as long per epoch as the training itself (cProfile, 50 runs); its runs have `kl_exact`, the exact
    KL to their reference, which for these methods is the initial policy."""

    def __init__(self, kind, reward_names: list[str]) -> None:
        with torch.no_grad():
            self.reference = kind.exact_distribution()
            log_ref = self.reference.log_probs()  # float[run batch n]
            tables = {name: varlen.reward_table(kind.policy, kind.prompts, kind.rewards[name]).to(log_ref)
                      for name in dict.fromkeys(reward_names)}
            self.rewards = torch.stack([tables[name] for name in reward_names])  # float[run batch n]
        self.log: dict[str, list[Tensor]] = {}  # name -> one float[run] per epoch

    def record(self, kind) -> None:
        """Measure the kind's policy after an epoch's steps and keep the values for `epoch_metrics`."""
        for name, values in self.measure(kind.exact_distribution()).items():
            self.log.setdefault(name, []).append(values)

    def epoch_metrics(self) -> dict[str, Tensor]:
        """name -> float[run epoch], every recorded epoch."""
        return {name: torch.stack(values, dim=1) for name, values in self.log.items()}

    def measure(self, policy) -> dict[str, Tensor]:
        """float[run] each, for a policy's exact distribution (the kind's, as `reference`)."""
        with torch.no_grad():
            values = torch.stack([policy.expectation(self.rewards), policy.kl(self.reference)]).mean(-1)
            return dict(zip(("reward_exact", "kl_initial_exact"), values.float().unbind()))


class OptimumTracker(ProgressTracker):
    """Exact KL(pi_theta || pi*), J_beta(pi_theta) and J_beta(pi*) - J_beta(pi_theta) of every run, means over
    prompts, NaN for a run with beta = 0; from the kind's exact distribution (lab.exact.distributions), all runs
    at once. J_beta(pi*) = beta log Z comes once, from the initial policy's table (lab.exact.optimum):

        J_beta(pi_theta) = E_theta[r] - beta KL(pi_theta || pi_ref)
        KL(pi_theta || pi*) = KL(pi_theta || pi_ref) - E_theta[r] / beta + log Z     (log pi* = log pi_ref + r / beta
                            = (J_beta(pi*) - J_beta(pi_theta)) / beta                  - log Z, summed under pi_theta)
    """

    def __init__(self, kind, reward_names: list[str], betas: list[float], progress: bool = False) -> None:
        """`progress`: record `ProgressTracker`'s metrics too (for runs with `optimum_metrics`, not DPO's own)."""
        super().__init__(kind, reward_names)
        self.progress = progress
        with torch.no_grad():
            log_ref = self.reference.log_probs()  # float[run batch n]
            beta = torch.tensor(betas, dtype=torch.float64, device=log_ref.device)
            self.off = beta <= 0
            self.beta = torch.where(self.off, torch.ones_like(beta), beta).unsqueeze(-1)  # float[run 1]
            self.best = self.beta * torch.logsumexp(log_ref + self.rewards / self.beta.unsqueeze(-1), dim=-1)

    def measure(self, policy) -> dict[str, Tensor]:
        """float[run] each, for a policy's exact distribution (the kind's, as `reference`)."""
        with torch.no_grad():
            objective = policy.expectation(self.rewards) - self.beta * policy.kl(self.reference)  # float[run batch]
            gap = self.best - objective
            values = torch.stack([gap / self.beta, objective, gap]).mean(-1)  # float[3 run]
            values = values.masked_fill(self.off, float("nan")).float()
            measured = dict(zip(("kl_to_optimum", "objective_exact", "objective_gap"), values.unbind()))
        return {**measured, **super().measure(policy)} if self.progress else measured


class ProxyTracker(ProgressTracker):
    """A batch with a learned reward (`--reward learned:PATH`): the proxy r_phi that trains each run, and the gold
    reward R it stands for, both exactly, after each epoch's steps; means over prompts (Gao et al. 2023's axes):

        gold_reward_exact = E_theta[R]      proxy_reward_exact = E_theta[r_phi]
        kl_initial_exact  = KL(pi_theta || pi_0)      d = sqrt(kl_initial_exact)

    A run of a true reward in the same batch has gold = proxy. Both policies: the autoregressive one's exact
    distribution is its EOS-ended responses (lab.exact.distributions), as its reward model's own space."""

    def __init__(self, kind, reward_names: list[str]) -> None:
        super().__init__(kind, reward_names)
        with torch.no_grad():
            gold = {name: getattr(kind.rewards[name], "gold", kind.rewards[name]) for name in dict.fromkeys(reward_names)}
            tables = {name: varlen.reward_table(kind.policy, kind.prompts, fn).to(self.rewards) for name, fn in gold.items()}
            self.gold = torch.stack([tables[name] for name in reward_names])  # float[run batch n]

    def measure(self, policy) -> dict[str, Tensor]:
        with torch.no_grad():
            values = torch.stack([policy.expectation(self.gold), policy.expectation(self.rewards),
                                  policy.kl(self.reference)]).mean(-1)  # float[3 run]
            gold, proxy, kl = values.unbind()
            return {"gold_reward_exact": gold.float(), "proxy_reward_exact": proxy.float(),
                    "kl_initial_exact": kl.float(), "d": kl.clamp(min=0).sqrt().float()}
