"""Reward-model over-optimisation, measured exactly against the gold reward (Gao, Schulman and Hilton 2023).

Per seed k: the initial policy pi_0 (the lecture's factorised policy at `init_scale`), a proxy reward
model fitted on preference pairs drawn from pi_0 (`lab.training.reward_model`, one per size and number of
pairs), then two ways to optimise the proxy, each seen through the gold (true) reward exactly:

    best-of-n   p_n from pi_0 ranked by the proxy (`lab.exact.best_of_n`), n = 1, 2, 4, ...
    the optimum pi*_beta = pi_0 exp(r_phi / beta) / Z of the proxy's KL-regularised objective (where GRPO with
                k1 in the reward converges, claim 14), for a grid of beta: exact, no sampling
    GRPO        the lab's loop with the proxy as its reward (`--reward learned:PATH`: centered deltas, clipped
                loss, k1 in the reward with pi_0 frozen: it ascends J_beta = E[r_phi] - beta KL(pi || pi_0), the
                objective DPO's beta and reference set) at each KL weight, its exact gold, proxy and d every epoch
    peaked      best-of-n again from a peaked pi_0 (init scale `peaked_init`) with its own proxy: a proxy whose
                top responses pi_0 already favours, where best-of-n over-optimises (issue 35)
    DPO         offline DPO on the proxy's own training pairs (`--pairs-from`), at each beta: the same
                preference data, no reward model

For every point: gold = E_pi[R], proxy = E_pi[r_phi], KL = KL(pi || pi_0) (sums over all responses,
averaged over prompts) and d = sqrt(KL). Gao et al.'s forms, fitted by least squares through the origin:

    best-of-n   gold(d) - gold(0) = d (alpha - beta d)          peak at d* = alpha / (2 beta)
    RL          gold(d) - gold(0) = d (alpha - beta log d)      peak at d* = exp(alpha / beta - 1)

each reported with its RMS residual beside that of the best straight line through the origin.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from lab.exact import varlen
from lab.exact.best_of_n import best_of_n_kl, best_of_n_probs, expectation
from lab.exact.enumeration import all_responses
from lab.exact.optimum import kl_regularized_optimum
from lab.experiments.work import batch_work
from lab.files.reward_model_folder import write_pairs
from lab.policies import make_policy
from lab.training.config import TrainConfig
from lab.training.learned_reward import LearnedReward
from lab.training.reward_model import RewardModelConfig, train_reward_model
from lab.training.train import train
from tasks import LEARNED, Task


@dataclass(frozen=True)
class Overoptimisation:
    """The experiment's settings."""

    reward: str = "inclusion-ordering"
    init_scale: float = 0.1
    proxies: tuple = (("small", 16), ("large", 4), ("large", 256))
    """(reward-model size, pairs per prompt) of each proxy: a large model on 4 pairs per prompt overfits them"""
    peaked_init: float = 0.5
    """init scale of the peaked pi_0 of the second best-of-n path"""
    best_of: tuple = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
    kl_weights: tuple = (0.0, 0.05, 0.5)
    dpo_betas: tuple = (0.05, 0.5)
    """DPO's beta on the proxy's own pairs (offline, `--pairs-from`), beside GRPO at the same KL weights"""
    betas: tuple = (100.0, 10.0, 3.0, 1.0, 0.3, 0.1, 0.03, 0.01)
    """KL weights of the exact optimum path, from near pi_0 to near the proxy's argmax"""
    epochs: int = 100
    """GRPO's and DPO's epochs (the lecture's); the points of their curves are every epoch's exact values"""
    steps: int = 10
    """optimizer steps per epoch (the lecture's)"""
    rm_steps: int = 300


OVEROPTIMISATION = Overoptimisation()

RM_STEPS_PER_EPOCH = 3
"""A reproduction's reward-model fits take this many Adam steps per epoch of its runs, up to `rm_steps`."""
RM_FIT_S = 0.3
"""Seconds of one seed's reward-model fit and its exact best-of-n and pi*_beta paths, in `lab.experiments.work`'s
units (measured: 0.19-0.46 s by size and pairs on the 2-core VM, one thread); only progress reads it."""


def for_base(base: TrainConfig, experiment: Overoptimisation = OVEROPTIMISATION) -> Overoptimisation:
    """The experiment at a reproduction's epochs and steps (the lecture's 100 x 10: the experiment as it is), its
    reward models' fits scaled with the epochs (300 Adam steps at 100 epochs), so a short reproduction is short."""
    return replace(experiment, epochs=base.epochs, steps=base.steps,
                   rm_steps=min(experiment.rm_steps, RM_STEPS_PER_EPOCH * base.epochs))


def section_work(seeds: int, experiment: Overoptimisation) -> float:
    """The estimated time of `run_overoptimisation` (`lab.experiments.work`), for a reproduction's progress."""
    batch = [TrainConfig(epochs=experiment.epochs, steps=experiment.steps, seed=seed) for seed in range(seeds)]
    batches = len(experiment.kl_weights) + len(experiment.dpo_betas)
    fit = RM_FIT_S * experiment.rm_steps / OVEROPTIMISATION.rm_steps
    return len(experiment.proxies) * (2 * seeds * fit + batches * batch_work(batch))  # 2: the peaked fit too


@dataclass
class Curve:
    """Points of one optimisation path: gold, proxy and d per point, float[point]."""

    gold: np.ndarray
    proxy: np.ndarray
    d: np.ndarray


def path_point(probs, base_probs, gold, proxy) -> tuple[float, float, float]:
    kl = (probs * (probs.clamp(min=1e-300).log() - base_probs.log())).sum(-1)
    return float(expectation(probs, gold).mean()), float(expectation(probs, proxy).mean()), float(kl.mean().clamp(min=0).sqrt())


def proxy_reward(task: Task, model, reward: str) -> LearnedReward:
    """The reward model as the task's reward (`--reward learned:PATH` does the same from a folder)."""
    return LearnedReward(model, all_responses(task.vocab_size, task.response_length), task.reward_fn(reward), reward)


def best_of_n_curve(base_probs, gold, proxy, ns) -> Curve:
    points = [path_point(best_of_n_probs(base_probs, proxy, n), base_probs, gold, proxy) for n in ns]
    return Curve(*map(np.array, zip(*points)))


def optimum_curve(base_probs, gold, proxy, betas) -> Curve:
    """The path of pi*_beta over the betas (module docstring)."""
    points = [path_point(kl_regularized_optimum(base_probs, proxy, beta), base_probs, gold, proxy) for beta in betas]
    return Curve(*map(np.array, zip(*points)))


def bon_kl_gap(base_probs, proxy, ns) -> list[tuple[int, float, float]]:
    """(n, exact KL, log n - (n-1)/n) per n, averaged over prompts."""
    return [(n, max(float(best_of_n_kl(base_probs, proxy, n).mean()), 0.0), math.log(n) - (n - 1) / n) for n in ns]


def trained_curves(task: Task, proxies: dict[int, object], configs: dict[int, TrainConfig], start: dict[int, tuple],
                   experiment: Overoptimisation) -> dict[int, Curve]:
    """Train one run per seed against its proxy (`configs[seed]`, its reward `learned:proxy-<seed>`), all at once;
    each seed's Curve: the start (d = 0), then every epoch's exact gold, proxy and d (`ProxyTracker`)."""
    rewards = {f"{LEARNED}proxy-{seed}": proxy_reward(task, m, experiment.reward) for seed, m in proxies.items()}
    records = train(replace(task, rewards={**task.rewards, **rewards}), list(configs.values()))
    series = {name: records.epoch_metrics[name] for name in ("gold_reward_exact", "proxy_reward_exact", "d")}
    return {seed: Curve(*(np.concatenate([[first], values[run]]) for first, values in zip(start[seed],
                                                                                        series.values())))
            for run, seed in enumerate(configs)}


def rl_curves(task: Task, proxies: dict[int, object], base: dict[int, torch.Tensor], gold: torch.Tensor,
              scores: dict[int, torch.Tensor], experiment: Overoptimisation, kl: float) -> dict[int, Curve]:
    """GRPO (centered, clipped) against each seed's proxy at one KL weight: {seed: Curve over the epochs}."""
    configs = {seed: TrainConfig(epochs=experiment.epochs, steps=experiment.steps, seed=seed, reward=f"{LEARNED}proxy-{seed}",
                                 delta="centered", loss="clipped", init_scale=experiment.init_scale, kl=kl,
                                 kl_estimator="k1", kl_in="reward", kl_period=0) for seed in proxies}
    start = {seed: (*path_point(base[seed], base[seed], gold, scores[seed])[:2], 0.0) for seed in proxies}
    return trained_curves(task, proxies, configs, start, experiment)


def dpo_curves(task: Task, proxies: dict[int, object], fits: dict, base: dict[int, torch.Tensor], gold: torch.Tensor,
               scores: dict[int, torch.Tensor], experiment: Overoptimisation, beta: float) -> dict[int, Curve]:
    """Offline DPO at `beta` on each seed's proxy's own training pairs (`--pairs-from`, here from a temporary
    pairs.csv): the preference noise the proxy learned from, without the proxy. {seed: Curve over the epochs}."""
    responses = all_responses(task.vocab_size, task.response_length)
    with tempfile.TemporaryDirectory(prefix="lab-rm-pairs-") as folder:
        configs = {}
        for seed, fit in fits.items():
            (Path(folder) / str(seed)).mkdir()
            write_pairs(Path(folder) / str(seed) / "pairs.csv", responses, fit.chosen, fit.rejected)
            configs[seed] = TrainConfig(epochs=experiment.epochs, steps=experiment.steps, seed=seed, reward=f"{LEARNED}proxy-{seed}",
                                        loss="dpo", kl=beta, pairs="offline", pairs_from=str(Path(folder) / str(seed)),
                                        pairs_per_prompt=fit.chosen.shape[1], init_scale=experiment.init_scale)
        start = {seed: (*path_point(base[seed], base[seed], gold, scores[seed])[:2], 0.0) for seed in proxies}
        return trained_curves(task, proxies, configs, start, experiment)


def peaked_best_of_n(task: Task, seed: int, size: str, pairs: int, experiment: Overoptimisation) -> Curve:
    """Best-of-n's exact path from seed's peaked pi_0 (init `peaked_init`), ranked by a proxy fitted on its pairs."""
    policy = make_policy("factorized", task.vocab_size, task.prompts.shape[1], task.response_length, 10,
                         torch.Generator().manual_seed(seed), experiment.peaked_init)
    config = RewardModelConfig(size=size, pairs_per_prompt=pairs, steps=experiment.rm_steps, seed=seed)
    model = train_reward_model(policy, task.prompts, experiment.reward, config)[0]
    with torch.no_grad():
        base = varlen.all_probs(policy, task.prompts, torch.float64)
        scores = model(task.prompts.unsqueeze(1), varlen.enumerate_responses(policy).unsqueeze(0))
    gold = varlen.reward_table(policy, task.prompts, experiment.reward).double()
    return best_of_n_curve(base, gold, scores, experiment.best_of)


def run_overoptimisation(task: Task, seeds: int, experiment: Overoptimisation = OVEROPTIMISATION, progress=None):
    """{(size, pairs): {"bon", "peaked" and "optimum": {seed: Curve}, "rl": {kl: {seed: Curve}}, "dpo": {beta: {seed: Curve}},
    "rm": {seed: metrics}, "kl_gap": seed 0's best-of-n KL against its bound}}."""
    results, done = {}, 0
    total = len(experiment.proxies) * (1 + len(experiment.kl_weights) + len(experiment.dpo_betas))
    for size, pairs in experiment.proxies:
        models, fits, base, scores, metrics, bon, optimum = {}, {}, {}, {}, {}, {}, {}
        peaked = {seed: peaked_best_of_n(task, seed, size, pairs, experiment) for seed in range(seeds)}
        for seed in range(seeds):
            policy = make_policy("factorized", task.vocab_size, task.prompts.shape[1], task.response_length, 10,
                                 torch.Generator().manual_seed(seed), experiment.init_scale)
            config = RewardModelConfig(size=size, pairs_per_prompt=pairs, steps=experiment.rm_steps, seed=seed)
            models[seed], metrics[seed], fits[seed] = train_reward_model(policy, task.prompts, experiment.reward, config)
            with torch.no_grad():
                base[seed] = varlen.all_probs(policy, task.prompts, torch.float64)
                scores[seed] = models[seed](task.prompts.unsqueeze(1), varlen.enumerate_responses(policy).unsqueeze(0))
            gold = varlen.reward_table(policy, task.prompts, experiment.reward).double()
            bon[seed] = best_of_n_curve(base[seed], gold, scores[seed], experiment.best_of)
            optimum[seed] = optimum_curve(base[seed], gold, scores[seed], experiment.betas)
        done += 1
        progress and progress(done, total)
        rl, dpo = {}, {}
        for kl in experiment.kl_weights:
            rl[kl] = rl_curves(task, models, base, gold, scores, experiment, kl)
            done += 1
            progress and progress(done, total)
        for beta in experiment.dpo_betas:
            dpo[beta] = dpo_curves(task, models, fits, base, gold, scores, experiment, beta)
            done += 1
            progress and progress(done, total)
        results[(size, pairs)] = {"bon": bon, "peaked": peaked, "optimum": optimum, "rl": rl, "dpo": dpo, "rm": metrics,
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
