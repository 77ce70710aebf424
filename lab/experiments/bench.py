"""`lab bench`: throughput of batched sweeps against one run at a time and against the lecture's loop.

    runs/s(R)                 = R / seconds of one batched train() call with R runs
    speed-up vs one at a time = R * seconds(one run alone) / seconds(R runs batched)
    speed-up vs lecture loop  = R * seconds(one lecture-loop run) / seconds(R runs batched)

All runs use the lecture's setting (100 epochs x 10 steps, G = 10, lr 1e-3,
inclusion-ordering, naive loss) with seeds 0..R-1, on the lecture's factorised policy and again
on the autoregressive one (`--policy autoregressive`, max length 5: responses of up to 5 tokens
with EOS); the report ends with the ratio of their seconds per run at each R (issue 9 asks for at
most 3x at 500 runs), and with PPO's learned critic (`--delta gae`, factorised policy, same G) against
the same sweep without it (issue 17 asks for at most 2x at 500 runs), and with SFT, expert iteration and
`--max-grad-norm 1` against the lecture's GRPO at the same G (issue 26 asks for SFT and expert iteration at no
more per run, clipping under 5%). "One at a time" is the
best time of a single run alone, times R (running 500 runs one by one would
take minutes and measure the same thing). Every time is the best of `repeats`
tries, because other processes share the machine; the sweeps of one size are tried in turn
(round robin), so the ratios between rows compare tries spread over the same minutes.

Threads are set explicitly and restored afterwards. The lab's runs are timed at
the given thread count (`lab bench` reports one thread and all cores: tiny
runs are fastest on one thread, while a sweep of hundreds of runs has tensors
large enough for a second core to pay). The lecture-style loop is timed at
each count in `LECTURE_THREADS` and its fastest is the baseline, so no ratio
is flattered by a badly threaded baseline. A benchmark, not a test: it
reports, it asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence

import torch

from lab.experiments.bench_proxy import BENCH_REWARD, with_bench_proxy
from lab.experiments.bench_rows import (BenchResult, BenchRow, critic_ratios, dpo_ratios, method_ratios,
                                        policy_pair_ratios, policy_ratios, row_label)
from lab.training.config import TrainConfig
from lab.training.lecture_loop import lecture_train
from lab.training.train import train
from lab.experiments.work import Tally, batch_work
from tasks.catalog import default_task

SIZES = (1, 10, 100, 500)
"""Sweep sizes R timed by default."""

ALL_CORES = os.cpu_count() or 1
LECTURE_THREADS = tuple(sorted({1, ALL_CORES}))
"""Thread counts the lecture-style loop is timed at; its fastest is the baseline."""

SWEEP_THREADS = 1
"""`lab sweep`'s default torch threads, whatever the number of runs. On a quiet 2-core machine all cores
made a sweep of hundreds of runs about 1.1x to 1.3x faster, but beside one other CPU-bound process the
same 500-run sweep took 5x to 12x as long as at one thread (torch's OpenMP threads wait on the one that
shares its core); one thread costs the quiet machine that little and the busy one nothing. `lab bench`'s
loaded row measures both (docs/speed.md)."""


def sweep_threads(runs: int) -> int:
    """The thread policy of `lab sweep` (`--threads` overrides it): one thread, at any size."""
    return SWEEP_THREADS


POLICIES = ("factorized", "autoregressive")
"""Policies timed by default; the factorised one is the lecture's."""

DPO_BENCH = dict(loss="dpo", kl=0.1)
"""The DPO row: the lecture's setting with online DPO pairs at beta 0.1 (its exact optimum metrics included),
factorised policy; its seconds per run are compared with the lecture's GRPO run at the same G."""


METHOD_BENCH = (dict(loss="sft"), dict(loss="expert-iteration"), dict(max_grad_norm=1.0), dict(reward=BENCH_REWARD))
"""The rows of the methods before RL, of gradient clipping and of a learned reward: SFT (optimal demonstrations, G
per prompt), expert iteration (group-best filter), the lecture's GRPO with --max-grad-norm 1.0, and with a reward
model's score as its reward (`lab.experiments.bench_proxy`; issue 27 asks for at most 1.5x at 500 runs),
factorised policy, the lecture's G; each compared with the lecture's GRPO run (`method_ratios`)."""


def _timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _best(fn, device: torch.device, repeats: int) -> float:
    return min(_timed(fn, device) for _ in range(repeats))


def lecture_baseline(config: TrainConfig | None = None, threads: Sequence[int] = LECTURE_THREADS,
                     repeats: int = 3, progress=None) -> dict[int, float]:
    """Best seconds of one lecture-style run (seed `config.seed`) at each thread count;
    `progress(counts done, counts)` after each."""
    config = config or TrainConfig()
    previous_threads = torch.get_num_threads()
    try:
        seconds = {}
        for done, count in enumerate(threads, 1):
            torch.set_num_threads(count)
            lecture_train(config.replace(epochs=2))  # warm-up
            seconds[count] = _best(lambda: lecture_train(config), torch.device("cpu"), repeats)
            if progress is not None:
                progress(done, len(threads))
        return seconds
    finally:
        torch.set_num_threads(previous_threads)


def bench_cases(config: TrainConfig, devices: Sequence[str], policies: Sequence[str], dpo: bool, critic: bool,
                methods: bool = True):
    """The rows' cases (device, policy, delta, changes) and each one's settings."""
    cases = ([(d, p, None, {}) for d in devices for p in policies]
             + [(d, "factorized", "gae", {"delta": "gae"}) for d in devices if critic]
             + [(d, "factorized", None, DPO_BENCH) for d in devices if dpo]
             + [(d, "factorized", None, changes) for d in devices if methods for changes in METHOD_BENCH])
    return cases, [config.replace(policy=policy, **changes) for _, policy, _, changes in cases]


def bench_work(sizes: Sequence[int] = SIZES, devices: Sequence[str] = ("cpu",), repeats: int = 3,
               config: TrainConfig | None = None, policies: Sequence[str] = POLICIES, dpo: bool = True,
               critic: bool = True, methods: bool = True) -> float:
    """The estimated time of `bench` (`lab.experiments.work`), the total of its progress."""
    _, settings = bench_cases(config or TrainConfig(), devices, policies, dpo, critic, methods)
    warm = max(sizes)
    return sum(batch_work([s.replace(seed=k, epochs=2) for k in range(warm)]) + repeats * batch_work([s])
               + min(repeats, 2) * sum(batch_work([s.replace(seed=k) for k in range(runs)]) for runs in sizes)
               for s in settings)


def bench(sizes: Sequence[int] = SIZES, devices: Sequence[str] = ("cpu",), threads: int = 1,
          repeats: int = 3, config: TrainConfig | None = None,
          lecture_seconds: dict[int, float] | None = None,
          policies: Sequence[str] = POLICIES, dpo: bool = True, critic: bool = True,
          methods: bool = True, progress=None) -> BenchResult:
    """Time one run alone and sweeps of each size on each device at `threads`; see the module docstring.

    `lecture_seconds` (from `lecture_baseline`) is measured here when not given. Single runs are
    timed `repeats` times, each sweep min(repeats, 2) times after a warm-up, the cases of one size in
    turn (round robin); the best time counts. `progress(done, total)` counts work (`bench_work`).
    """
    config = config or TrainConfig()
    task = with_bench_proxy(default_task(), config) if methods else default_task()
    lecture_seconds = lecture_seconds or lecture_baseline(config, repeats=repeats)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        warm = config.replace(epochs=2)
        result = BenchResult(threads, config, min(lecture_seconds.values()), {},
                             lecture_seconds_by_threads=dict(lecture_seconds))
        lecture = result.lecture_seconds_per_run
        cases, settings = bench_cases(config, devices, policies, dpo, critic, methods)
        tally = Tally(progress, bench_work(sizes, devices, repeats, config, policies, dpo, critic, methods))
        singles = {}  # case -> best seconds of one run alone
        for i, (name, policy, delta, changes) in enumerate(cases):
            device, setting = torch.device(name), settings[i]
            warm_runs = [setting.replace(seed=s, epochs=warm.epochs) for s in range(max(sizes))]
            train(task, warm_runs, device=device)  # warm-up
            singles[i] = _best(lambda: train(task, setting, device=device), device, repeats)
            result.single_run_seconds[row_label(name, policy, delta, setting.loss.value,
                                                setting.max_grad_norm is not None,
                                                setting.reward == BENCH_REWARD)] = singles[i]
            tally.add(batch_work(warm_runs) + repeats * batch_work([setting]))
        tries: dict[tuple[int, int], list[float]] = {}  # (case, R) -> seconds of each round
        for runs in sizes:
            # round robin: every case's tries are spread over the same minutes, so a ratio of two rows does not
            # carry the machine's drift between them (on a shared VM the same sweep's time wanders by 10%); every
            # other round in reverse, so each round's tries of two cases are a pair in alternating order
            for round_ in range(min(repeats, 2)):
                for i in (range(len(cases)) if round_ % 2 == 0 else reversed(range(len(cases)))):
                    configs = [settings[i].replace(seed=s) for s in range(runs)]
                    name = cases[i][0]
                    seconds = _timed(lambda: train(task, configs, device=torch.device(name)), torch.device(name))
                    tries.setdefault((i, runs), []).append(seconds)
                    tally.add(batch_work(configs))
        for i, (name, policy, delta, changes) in enumerate(cases):
            for runs in sizes:
                seconds = min(tries[i, runs])
                result.rows.append(BenchRow(name, runs, seconds, runs / seconds, runs * singles[i] / seconds,
                                            runs * lecture / seconds, policy, settings[i].loss.value, delta,
                                            settings[i].max_grad_norm is not None,
                                            settings[i].reward == BENCH_REWARD, tuple(tries[i, runs])))
        return result
    finally:
        torch.set_num_threads(previous_threads)


def bench_report(result: BenchResult) -> str:
    """The printed report: settings, thread count, the baselines and one line per (device, R)."""
    c = result.config
    lines = [
        f"lecture setting: {c.epochs} epochs x {c.steps} steps, G = {c.group_size}, lr {c.lr:g}, "
        f"{c.reward}, {c.delta.value} deltas, {c.loss.value} loss",
        f"torch {torch.__version__}, lab runs with torch.set_num_threads({result.threads}) "
        f"of {ALL_CORES} cores; best of repeated timings",
        "lecture-style loop (lab.training.lecture_loop), one run: " + ", ".join(
            f"{seconds:.3f} s at {count} thread{'s' * (count > 1)}"
            for count, seconds in sorted(result.lecture_seconds_by_threads.items()))
        + f"; baseline {result.lecture_seconds_per_run:.3f} s, its fastest "
        f"({1 / result.lecture_seconds_per_run:.2f} runs/s)",
    ]
    for device, seconds in result.single_run_seconds.items():
        lines.append(f"lab, one run alone on {device}: {seconds:.3f} s "
                     f"({result.lecture_seconds_per_run / seconds:.2f}x the lecture loop)")
    header = ("device", "R", "seconds", "runs/s", "x one-at-a-time", "x lecture loop")
    table = [header] + [(row_label(r.device, r.policy, r.delta, r.loss, r.clipped, r.learned), str(r.runs), f"{r.seconds:.3f}",
                         f"{r.runs_per_second:.1f}",
                         f"{r.speedup_vs_one_at_a_time:.1f}", f"{r.speedup_vs_lecture:.1f}") for r in result.rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in table]
    ratios, pairs = policy_ratios(result), policy_pair_ratios(result)
    if ratios:  # the goal (issue 37): at most 3x at R = 500
        lines.append("autoregressive / factorised seconds per run (best tries; median of the alternating pairs): "
                     + ", ".join(f"{ratio:.1f}x ({statistics.median(pairs[key]):.2f}x of {len(pairs[key])}) at "
                                 f"R = {key[1]} on {key[0]}" for key, ratio in ratios.items()))
    dpo = dpo_ratios(result)
    if dpo:
        lines.append("DPO (online, beta 0.1) / GRPO seconds per run at G = " f"{c.group_size}: " + ", ".join(
            f"{ratio:.1f}x at R = {runs} on {device}" for (device, runs), ratio in dpo.items()))
    if critic_ratios(result):
        lines.append("with a learned critic (gae) / without, factorised, seconds per run: " + ", ".join(
            f"{ratio:.1f}x at R = {runs} on {device}" for (device, runs), ratio in critic_ratios(result).items()))
    methods = method_ratios(result)
    for name in dict.fromkeys(name for name, _, _ in methods):
        lines.append(f"{name} / GRPO seconds per run at G = {c.group_size}: " + ", ".join(
            f"{ratio:.2f}x at R = {runs} on {device}" for (row, device, runs), ratio in methods.items() if row == name))
    return "\n".join(lines)
