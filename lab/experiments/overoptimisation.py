"""Reward-model over-optimisation, measured exactly against the gold reward (Gao, Schulman and Hilton 2023).

Per seed k: the initial policy pi_0 (the lecture's factorised policy at `init_scale`), a proxy reward
model fitted on preference pairs drawn from pi_0 (`lab.training.reward_model`, one per size and number of
pairs), then two ways to optimise the proxy, each seen through the gold (true) reward exactly:

    best-of-n   p_n from pi_0 ranked by the proxy (`lab.exact.best_of_n`), n = 1, 2, 4, ...
    the optimum pi*_beta = pi_0 exp(r_phi / beta) / Z of the proxy's KL-regularised objective (where GRPO with
                k1 in the reward converges, claim 14), for a grid of beta: exact, no sampling
    GRPO        the lab's loop with the proxy as its reward (centered deltas, clipped loss) at each KL
                weight, its policy at checkpoint epochs (a run of e epochs is the first e epochs of a
                longer one with the same seed)

For every point: gold = E_pi[R], proxy = E_pi[r_phi], KL = KL(pi || pi_0) (sums over all responses,
averaged over prompts) and d = sqrt(KL). Gao et al.'s forms, fitted by least squares through the origin:

    best-of-n   gold(d) - gold(0) = d (alpha - beta d)          peak at d* = alpha / (2 beta)
    RL          gold(d) - gold(0) = d (alpha - beta log d)      peak at d* = exp(alpha / beta - 1)

each reported with its RMS residual beside that of the best straight line through the origin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from lab.exact import varlen
from lab.exact.best_of_n import best_of_n_kl, best_of_n_probs, expectation
from lab.exact.optimum import kl_regularized_optimum
from lab.policies import make_policy, policy_from_state
from lab.training.config import TrainConfig
from lab.training.reward_model import RewardModelConfig, train_reward_model
from lab.training.train import train
from tasks import Task


@dataclass(frozen=True)
class Overoptimisation:
    """The experiment's settings."""

    reward: str = "inclusion-ordering"
    init_scale: float = 0.1
    proxies: tuple = (("small", 16), ("small", 256), ("large", 256))
    """(reward-model size, pairs per prompt) of each proxy"""
    best_of: tuple = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
    kl_weights: tuple = (0.0, 0.05, 0.5)
    betas: tuple = (100.0, 10.0, 3.0, 1.0, 0.3, 0.1, 0.03, 0.01)
    """KL weights of the exact optimum path, from near pi_0 to near the proxy's argmax"""
    epochs: int = 100
    checkpoints: tuple = (10, 20, 40, 70, 100)
    rm_steps: int = 300


OVEROPTIMISATION = Overoptimisation()


@dataclass
class Curve:
    """Points of one optimisation path: gold, proxy and d per point, float[point]."""

    gold: np.ndarray
    proxy: np.ndarray
    d: np.ndarray


def path_point(probs, base_probs, gold, proxy) -> tuple[float, float, float]:
    kl = (probs * (probs.clamp(min=1e-300).log() - base_probs.log())).sum(-1)
    return float(expectation(probs, gold).mean()), float(expectation(probs, proxy).mean()), float(kl.mean().clamp(min=0).sqrt())


def proxy_function(model):
    """The reward model as a task reward: (prompts int[batch pos], responses int[... batch trial pos]) -> float[...]."""
    def score(prompts, responses):
        with torch.no_grad():
            return model(prompts.unsqueeze(-2), responses).float()
    return score


def best_of_n_curve(base_probs, gold, proxy, ns) -> Curve:
    points = [path_point(best_of_n_probs(base_probs, proxy, n), base_probs, gold, proxy) for n in ns]
    return Curve(*map(np.array, zip(*points)))


def optimum_curve(base_probs, gold, proxy, betas) -> Curve:
    """The path of pi*_beta over the betas (module docstring)."""
    points = [path_point(kl_regularized_optimum(base_probs, proxy, beta), base_probs, gold, proxy) for beta in betas]
    return Curve(*map(np.array, zip(*points)))


def bon_kl_gap(base_probs, proxy, ns) -> list[tuple[int, float, float]]:
    """(n, exact KL, log n - (n-1)/n) per n, averaged over prompts."""
    return [(n, float(best_of_n_kl(base_probs, proxy, n).mean()), math.log(n) - (n - 1) / n) for n in ns]


def rl_curves(task: Task, proxies: dict[int, object], base: dict[int, torch.Tensor], gold: torch.Tensor,
              scores: dict[int, torch.Tensor], experiment: Overoptimisation, kl: float) -> dict[int, Curve]:
    """GRPO against each seed's proxy at one KL weight: {seed: Curve over the checkpoints}."""
    rewards = dict(task.rewards) | {f"proxy-{seed}": proxy_function(m) for seed, m in proxies.items()}
    proxied = replace(task, rewards=rewards)
    points = {seed: [] for seed in proxies}
    for epochs in experiment.checkpoints:
        configs = [TrainConfig(epochs=epochs, seed=seed, reward=f"proxy-{seed}", delta="centered", loss="clipped",
                               init_scale=experiment.init_scale, kl=kl) for seed in proxies]
        records = train(proxied, configs)
        for run, seed in enumerate(proxies):
            with torch.no_grad():
                probs = varlen.all_probs(policy_from_state(records.state, run), task.prompts, torch.float64)
            points[seed].append(path_point(probs, base[seed], gold, scores[seed]))
    return {seed: Curve(*map(np.array, zip(*[(gold0, proxy0, 0.0)] + p)))
            for seed, p in points.items()
            for gold0, proxy0, _ in [path_point(base[seed], base[seed], gold, scores[seed])]}


def run_overoptimisation(task: Task, seeds: int, experiment: Overoptimisation = OVEROPTIMISATION, progress=None):
    """{(size, pairs): {"bon" and "optimum": {seed: Curve}, "rl": {kl: {seed: Curve}}, "rm": {seed: metrics}}}."""
    results, total = {}, len(experiment.proxies) * (1 + len(experiment.kl_weights))
    done = 0
    for size, pairs in experiment.proxies:
        models, base, scores, metrics, bon, optimum = {}, {}, {}, {}, {}, {}
        for seed in range(seeds):
            policy = make_policy("factorized", task.vocab_size, task.prompts.shape[1], task.response_length, 10,
                                 torch.Generator().manual_seed(seed), experiment.init_scale)
            config = RewardModelConfig(size=size, pairs_per_prompt=pairs, steps=experiment.rm_steps, seed=seed)
            models[seed], metrics[seed], _ = train_reward_model(policy, task.prompts, experiment.reward, config)
            with torch.no_grad():
                base[seed] = varlen.all_probs(policy, task.prompts, torch.float64)
                scores[seed] = models[seed](task.prompts.unsqueeze(1), varlen.enumerate_responses(policy).unsqueeze(0))
            gold = varlen.reward_table(policy, task.prompts, experiment.reward).double()
            bon[seed] = best_of_n_curve(base[seed], gold, scores[seed], experiment.best_of)
            optimum[seed] = optimum_curve(base[seed], gold, scores[seed], experiment.betas)
        done += 1
        progress and progress(done, total)
        rl = {}
        for kl in experiment.kl_weights:
            rl[kl] = rl_curves(task, models, base, gold, scores, experiment, kl)
            done += 1
            progress and progress(done, total)
        results[(size, pairs)] = {"bon": bon, "optimum": optimum, "rl": rl, "rm": metrics,
                                  "kl_gap": bon_kl_gap(base[0], scores[0], experiment.best_of)}
    return results


def fit_gao(d: np.ndarray, gain: np.ndarray, form: str) -> dict[str, float]:
    """Least squares of gain = d (alpha - beta f(d)), f = d (best-of-n) or log d (RL), through the origin;
    alpha, beta, the peak d*, and the RMS residuals of this fit and of the best line gain = a d."""
    keep = d > 0
    d, gain = d[keep], gain[keep]
    second = d * d if form == "bon" else d * np.log(d)
    design = np.stack([d, -second], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, gain, rcond=None)
    line = float(np.dot(d, gain) / np.dot(d, d))
    peak = alpha / (2 * beta) if form == "bon" else math.exp(alpha / beta - 1)
    return {"alpha": float(alpha), "beta": float(beta), "peak_d": float(peak) if beta > 0 else math.inf,
            "rms": float(np.sqrt(np.mean((design @ [alpha, beta] - gain) ** 2))),
            "line_rms": float(np.sqrt(np.mean((line * d - gain) ** 2)))}
