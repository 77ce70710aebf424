"""`lab reproduce`: the lecture's experiments and their neighbours, N seeds each, into figures/.

    for every setting s of every experiment:  runs s x seeds 0..N-1   (lecture settings otherwise)
    figure = mean curve per setting + 95% t-band over seeds (+ the lecture's own seed-5 run, thin)

The seeds draw with the lab's sampler; each setting also gets one run with seed 5
drawn as the lecture's script draws (`sampler multinomial`, lab.policies.sampling), kept
out of the means: for the lecture's three experiments it is the lecture's own run.

Every run shares the lecture's shapes (100 epochs x 10 steps, G = 10), so all
settings of all experiments train as one batched computation; settings that
appear in several experiments train once. `figures/RESULTS.md` is written from
the same records by `lab.experiments.results`. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lab.training.config import TrainConfig
from lab.experiments.exploration_results import ENTROPY_COEFS, INIT_SCALES, STUCK
from lab.experiments.temperature_section import SETTINGS as TEMPERATURE_SETTINGS
from lab.files.output_folders import write_text_atomic
from lab.training.records import Records
from lab.policies.sampling import Sampler
from lab.experiments.sweep import run_sweep, sweep_work
from lab.experiments.work import Stages
from lab.experiments.later_sections import later_sections
from lab.experiments.sampler_results import samplers_work
from lab.experiments.sections import (BEFORE_RL_FIGURE, CRITIC_FIGURE, DPO_FIGURE, LENGTH_FIGURE,
                                      OVEROPTIMISATION_FIGURE, SAMPLERS_FIGURE, DESCENDANTS_FIGURE, section_files)
from tasks.catalog import DEFAULT_TASK, default_task, make_named_task, task_names

LECTURE = TrainConfig()
"""The lecture's settings: 100 epochs x 10 steps, G = 10, Adam lr 1e-3, inclusion-ordering, naive loss."""

LECTURE_SEED = 5
SEEDS = 20
KL_WEIGHTS = (0.0, 0.01, 0.1, 1.0)
"""beta values of the KL experiments (0 = no penalty, the reference is still tracked)."""


@dataclass(frozen=True)
class Experiment:
    """One figure: settings (overrides of LECTURE) compared over seeds, told apart by `names`."""

    name: str
    title: str
    names: tuple[str, ...]
    settings: tuple[dict, ...]
    metric: str = "mean_reward"
    panels: bool = False
    """one panel per setting (with the seed-5 curve) plus an overlay, instead of the overlay alone"""
    tradeoff: bool = False
    """a KL experiment: curves beside final reward against the exact KL to the reference"""
    exploration: bool = False
    """the exploration section: its own figures and tables (lab.experiments.exploration_results)"""


EXPERIMENTS = (
    Experiment("lecture_deltas", "The lecture's three experiments (naive loss, inclusion-ordering)", ("delta",),
               ({"delta": "raw"}, {"delta": "centered"}, {"delta": "normalized"}), panels=True),
    Experiment("losses", "Loss modes (centered deltas)", ("loss",),
               tuple({"delta": "centered", "loss": m} for m in ("naive", "unclipped", "clipped"))),
    Experiment("baselines", "Deltas beyond the lecture's three: group max and leave-one-out", ("delta",),
               tuple({"delta": d} for d in ("raw", "centered", "max", "loo"))),
    Experiment("rewards", "Both rewards, as a fraction of the optimum", ("reward", "delta"),
               tuple({"reward": r, "delta": d} for r in ("distance", "inclusion-ordering")
                     for d in ("raw", "centered")), metric="reward_fraction"),
    Experiment("kl", "KL penalty to a reference refreshed every 10 epochs (centered deltas)", ("kl",),
               tuple({"delta": "centered", "kl": b} for b in KL_WEIGHTS), tradeoff=True),
    Experiment("kl_frozen", "KL penalty to the initial policy, frozen (kl_period 0, centered deltas)", ("kl",),
               tuple({"delta": "centered", "kl": b, "kl_period": 0} for b in KL_WEIGHTS), tradeoff=True),
    Experiment("exploration", "Exploration: embedding init scale x deltas x loss; entropy bonus at the lecture's init",
               ("init_scale", "delta", "loss", "entropy_coef"),
               tuple({"init_scale": s, "delta": d, "loss": m} for s in INIT_SCALES
                     for d in ("raw", "centered", "normalized") for m in ("naive", "clipped"))
               + tuple({**STUCK, "entropy_coef": c} for c in ENTROPY_COEFS), exploration=True),
    Experiment("temperature", "Sampling temperature against the init scale (centered deltas, clipped loss)",
               ("init_scale", "temperature"), tuple({"delta": "centered", "loss": "clipped", **s}
                                                    for s in TEMPERATURE_SETTINGS)),
)


@dataclass
class Reproduction:
    """All runs of all experiments, and which runs make up each (experiment, setting)."""

    records: Records
    seeds: int
    runs: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    """(experiment name, setting index) -> run indices, in seed order"""
    lecture_runs: dict[tuple[str, int], int] = field(default_factory=dict)
    """(experiment name, setting index) -> the run with seed LECTURE_SEED drawn as the lecture's script draws"""
    length: dict[str, Records] | None = None
    """the length-bias experiment's runs per task (autoregressive policy: other shapes, so their own records)"""
    length_pairs: list[tuple[list[int], list[int]]] = field(default_factory=list)
    """per `lab.experiments.length_bias.SETTINGS` entry, its (1/|o| runs, C runs) in its task's records"""
    length_exact: tuple[dict, dict] | None = None
    """(slopes, flows) of `lab.experiments.length_bias.exact_numbers`"""
    lr_control: dict | None = None
    """`lab.experiments.controls.lr_success`"""
    batch_effect: dict | None = None
    """`lab.experiments.controls.batch_effect`"""
    critic: object = None
    """the critic experiment's runs (`lab.experiments.critic_results.CriticRuns`: one batch per setting)"""
    dpo: Records | None = None
    """the DPO section's runs (GRPO + KL and DPO at one beta, longer: its own records)"""
    dpo_groups: list[list[int]] = field(default_factory=list)
    """per `lab.experiments.dpo_results.SETTINGS` entry, its run indices in `dpo`"""
    before_rl: Records | None = None
    """the "Before RL" section's runs (SFT, expert iteration, GRPO, RL from an SFT start, clipping)"""
    before_rl_groups: list[list[int]] = field(default_factory=list)
    """per `lab.experiments.before_rl_results.SETTINGS` entry, its run indices in `before_rl`"""
    overoptimisation: dict | None = None
    """the reward-model section's results (`lab.experiments.overoptimisation.run_overoptimisation`)"""
    beyond: dict | None = None
    """the section beyond sorting: each task's records (`lab.experiments.beyond_sorting.run_beyond_sorting`)"""
    samplers: dict | None = None
    """the samplers section's results (`lab.experiments.sampler_results.run_samplers`: issue 38)"""
    descendants: dict | None = None
    """GRPO's descendants section (`lab.experiments.descendants_results.run_descendants`: issue 37)"""

    def setting_runs(self, experiment: Experiment) -> list[list[int]]:
        return [self.runs[experiment.name, i] for i in range(len(experiment.settings))]

    def setting_lecture_runs(self, experiment: Experiment) -> list[int]:
        return [self.lecture_runs[experiment.name, i] for i in range(len(experiment.settings))]


def config_of(overrides: dict, seed: int, base: TrainConfig = LECTURE) -> TrainConfig:
    return base.replace(**overrides, seed=seed)


def run_reproduction(seeds: int = SEEDS, base: TrainConfig = LECTURE, device: torch.device | str = "cpu",
                     progress: Callable[[float, float], None] | None = None,
                     experiments: tuple[Experiment, ...] = EXPERIMENTS, length_bias: bool = True,
                     controls: bool = True, critic: bool = True, dpo: bool = True,
                     before_rl: bool = True, overoptimisation: bool = True, after: float = 0.0,
                     beyond: bool = True, tasks: tuple[str, ...] | None = None, samplers: bool = True,
                     descendants: bool = True) -> Reproduction:
    """Train every distinct config of every experiment once (one batch when shapes agree), then the
    controls (`lab.experiments.controls`), the length-bias experiment (`lab.experiments.length_bias`) as its
    own batches, the critic experiment (`lab.experiments.critic_results`), a batch per setting, and the DPO
    section (`lab.experiments.dpo_results`), the "Before RL" section (`lab.experiments.before_rl_results`) and the
    reward-model section (`lab.experiments.overoptimisation`), then the lecture's verdicts on every task of `tasks`
    (default: every task file, `lab.experiments.beyond_sorting`); every other section is the lecture's task's.
    `progress(done, total)` counts the work of all of them, each
    stage weighed by its estimated time (`lab.experiments.work`), so it only rises and its time left holds;
    `after` is the work the caller does next (`figures_work`: writing the figures), counted in the total."""
    from lab.experiments import controls as c
    from lab.experiments import length_bias as lb
    from lab.experiments.critic_results import critic_configs, run_critic_experiment
    from lab.experiments.before_rl_results import run_before_rl, section_work
    from lab.experiments.dpo_results import dpo_configs
    from lab.experiments.beyond_sorting import beyond_work
    from lab.experiments.overoptimisation import for_base, section_work as rm_work
    from lab.experiments.descendants_results import descendant_configs

    configs: list[TrainConfig] = []
    index: dict[TrainConfig, int] = {}
    runs, lecture_runs = {}, {}

    def add(config: TrainConfig) -> int:
        if config not in index:
            index[config] = len(configs)
            configs.append(config)
        return index[config]

    for experiment in experiments:
        for i, overrides in enumerate(experiment.settings):
            runs[experiment.name, i] = [add(config_of(overrides, seed, base)) for seed in range(seeds)]
            lecture_runs[experiment.name, i] = add(config_of(overrides, LECTURE_SEED, base.replace(
                sampler=Sampler.multinomial)))
    controls = controls and any(e.exploration for e in experiments)
    length_runs, length_pairs = lb.length_configs(seeds, base) if length_bias else ({}, [])
    dpo_runs, dpo_groups = dpo_configs(seeds, base) if dpo else ([], [])
    stages = Stages(progress, [sweep_work(configs),
                               *([c.controls_work(seeds, base)] if controls else []),
                               *(sweep_work(runs) for runs in length_runs.values()),
                               *([lb.exact_work(length_runs, seeds)] if length_bias else []),
                               *([sum(sweep_work(runs) for runs in critic_configs(seeds, base))] if critic else []),
                               *([sweep_work(dpo_runs)] if dpo else []),
                               *(section_work(seeds, base, sweep_work) if before_rl else ()),
                               *([rm_work(seeds, for_base(base))] if overoptimisation else []),
                               *([beyond_work(seeds, base, tasks or task_names())] if beyond else []),
                               *([samplers_work(seeds, base, sweep_work)] if samplers else []),
                               *([sweep_work(descendant_configs(seeds, base)[0])] if descendants else []), after])
    stage = iter(range(len(stages.works)))
    records = run_sweep(default_task(), configs, device=device, progress=stages(next(stage)))
    reproduction = Reproduction(records, seeds, runs, lecture_runs)
    if controls:  # the learning-rate control, the batch effect
        controls_progress = stages(next(stage))
        reproduction.lr_control, reproduction.batch_effect = c.run_controls(default_task(), reproduction, base, device,
                                                                            controls_progress)
    if length_bias:  # its own batches (other shapes), then its exact numbers (lab.experiments.length_oracle)
        by_name = length_tasks()  # not `tasks`: that is the beyond-sorting section's argument
        reproduction.length_pairs = length_pairs
        reproduction.length = {name: run_sweep(by_name[name], runs, device=device, progress=stages(next(stage)))
                               for name, runs in length_runs.items()}
        reproduction.length_exact = lb.exact_numbers(by_name, length_runs, seeds, progress=stages(next(stage)))
    if critic:
        reproduction.critic = run_critic_experiment(seeds, base, device, stages(next(stage)))
    if dpo:
        reproduction.dpo_groups = dpo_groups
        reproduction.dpo = run_sweep(default_task(), dpo_runs, device=device, progress=stages(next(stage)))
    if before_rl:
        start_progress = stages(next(stage))
        reproduction.before_rl, reproduction.before_rl_groups = run_before_rl(
            seeds, base, run_sweep, default_task(), device, stages(next(stage)), start_progress)
    later_sections(reproduction, base, device, lambda: stages(next(stage)), tasks,
                   dict(overoptimisation=overoptimisation, beyond=beyond, samplers=samplers, descendants=descendants))
    return reproduction


FIGURES_S = (16.0, 1.6)
"""Seconds of `write_figures` in `lab.experiments.work`'s units: a fixed part and a part per seed. Measured on
the 2-core VM under load (20-25 s at 6 and 12 seeds, 20 and 40 epochs alike), scaled by that moment's
training time against the work model; the DPO section's exact flow adds about 1.5 s per seed (its 60 rows at 20
seeds: the last 10% of a 20-seed reproduction took 52 s against an estimated 17 s before). Only the
reproduction's progress reads it."""


def figures_work(seeds: int) -> float:
    """The estimated time of `write_figures` for a reproduction of `seeds` seeds, for its progress."""
    fixed, per_seed = FIGURES_S
    return fixed + per_seed * seeds


def length_tasks() -> dict:
    """The length-bias experiment's tasks by name: the lecture's, and Dr. GRPO's setting."""
    from lab.experiments.length_bias import DR_GRPO, DR_GRPO_TASK, LECTURE

    return {LECTURE: default_task(), DR_GRPO: make_named_task(DEFAULT_TASK, DR_GRPO_TASK["prompts"], DR_GRPO_TASK["vocab_size"])}


def output_names(experiments: tuple[Experiment, ...] = EXPERIMENTS) -> list[str]:
    """The files `write_figures` writes (checked before training, so a clash fails in seconds)."""
    from lab.experiments.exploration_results import FIGURES

    return [*(name for e in experiments for name in (FIGURES if e.exploration else (f"{e.name}.png",))),
            LENGTH_FIGURE, CRITIC_FIGURE, DPO_FIGURE, BEFORE_RL_FIGURE, OVEROPTIMISATION_FIGURE, SAMPLERS_FIGURE,
            DESCENDANTS_FIGURE, "RESULTS.md"]


def write_figures(reproduction: Reproduction, out: Path,
                  experiments: tuple[Experiment, ...] = EXPERIMENTS, ks: tuple[int, ...] | None = None) -> list[Path]:
    """Every experiment's PNG and RESULTS.md into `out` (an existing folder); returns the paths."""
    from lab.experiments import figures  # matplotlib only where figures are made
    from lab.experiments.exploration_analysis import exploration_analysis
    from lab.experiments.results import kl_points, results_markdown

    records, paths = reproduction.records, []
    analysis = None
    for experiment in experiments:
        if experiment.exploration:
            analysis = exploration_analysis(reproduction, experiment, ks)
            from lab.experiments.exploration_figures import plot_exploration  # matplotlib only where figures are made

            paths += plot_exploration(analysis, Path(out))
            continue
        groups = reproduction.setting_runs(experiment)
        path = Path(out) / f"{experiment.name}.png"
        subtitle = (f"{experiment.title}; {'left: ' if experiment.tradeoff else ''}"
                    f"{reproduction.seeds} seeds, mean and 95% t-band"
                    + (f", thin: the lecture's own run (seed {LECTURE_SEED})" if experiment.panels else ""))
        if experiment.tradeoff:
            betas, reward, kl = kl_points(records, experiment, groups)
            figures.plot_kl_tradeoff(records, experiment.names, [r for g in groups for r in g],
                                     betas, reward, kl, path, subtitle)
        else:
            overlay = ("all settings", experiment.names, [r for g in groups for r in g])
            panels = ([(f"{experiment.names[0]}={s[experiment.names[0]]}", experiment.names, g)
                       for s, g in zip(experiment.settings, groups)] + [overlay]
                      if experiment.panels else [overlay])
            figures.plot_panels(records, panels, path, subtitle, metric=experiment.metric,
                                highlight_runs=reproduction.setting_lecture_runs(experiment) if experiment.panels
                                else None)
        paths.append(path)
    text = results_markdown(reproduction, experiments, analysis)
    more_paths, more_text = section_files(reproduction, Path(out))
    paths += more_paths
    text += more_text
    results = Path(out) / "RESULTS.md"
    write_text_atomic(results, text)
    return [*paths, results]
