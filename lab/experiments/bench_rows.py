"""What `lab bench` measures: its rows, and the ratios of seconds per run between rows of the same device and size.

    ratio(row, base) = seconds per run of `row` / seconds per run of `base`   (the same R, the same device)

`dpo_ratios`, `policy_ratios`, `critic_ratios` and `method_ratios` each answer one issue's budget (docs/speed.md):
DPO, the autoregressive policy, a learned critic, and SFT, expert iteration, clipping and a learned reward, each
against the lecture's GRPO row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.training.config import TrainConfig


@dataclass(frozen=True)
class BenchRow:
    device: str
    runs: int
    seconds: float
    runs_per_second: float
    speedup_vs_one_at_a_time: float
    speedup_vs_lecture: float
    policy: str = "factorized"
    loss: str = "naive"
    delta: str | None = None
    """None: the config's delta; "gae": the same runs with a learned critic"""
    clipped: bool = False
    """the same runs with --max-grad-norm (`CLIP_BENCH`)"""
    learned: bool = False
    """the same runs against a reward model (`BENCH_REWARD`)"""
    tries: tuple[float, ...] = ()
    """the seconds of each round of the round robin (`seconds` is their best)"""


@dataclass
class BenchResult:
    threads: int
    """torch CPU threads of the lab's runs"""
    config: TrainConfig
    lecture_seconds_per_run: float
    """the baseline: the lecture-style loop's best time at its fastest thread count"""
    single_run_seconds: dict[str, float]
    """device (then ", autoregressive" for that policy) -> best seconds of one run alone"""
    rows: list[BenchRow] = field(default_factory=list)
    lecture_seconds_by_threads: dict[int, float] = field(default_factory=dict)
    """thread count -> the lecture-style loop's best seconds for one run"""


def row_label(device: str, policy: str, delta: str | None = None, loss: str = "naive", clipped: bool = False,
              learned: bool = False) -> str:
    label = (device if policy == "factorized" else f"{device}, {policy}") + (f", {delta}" if delta else "")
    return ((label if loss == "naive" else f"{label}, {loss}") + (", max-grad-norm" if clipped else "")
            + (", learned reward" if learned else ""))


def _plain(row: BenchRow) -> bool:
    """A row of the lecture's loss without a critic or clipping (the DPO row keeps its loss, DPO)."""
    return row.delta is None and not row.clipped and not row.learned and row.loss in ("naive", "dpo")


def dpo_ratios(result: BenchResult) -> dict[tuple[str, int], float]:
    """(device, R) -> seconds per run of the DPO row / of the factorised GRPO row (no critic)."""
    rows = {(r.device, r.runs, r.policy, r.loss): r.seconds for r in result.rows if _plain(r)}
    return {(d, n): seconds / rows[d, n, "factorized", "naive"] for (d, n, p, loss), seconds in rows.items()
            if loss == "dpo" and (d, n, "factorized", "naive") in rows}


def policy_ratios(result: BenchResult) -> dict[tuple[str, int], float]:
    """(device, R) -> seconds per run of the autoregressive policy / of the factorised one."""
    rows = {(r.device, r.runs, r.policy): r.seconds for r in result.rows if _plain(r) and r.loss == "naive"}
    return {(d, n): seconds / rows[d, n, "factorized"] for (d, n, p), seconds in rows.items()
            if p == "autoregressive" and (d, n, "factorized") in rows}


def policy_pair_ratios(result: BenchResult) -> dict[tuple[str, int], list[float]]:
    """(device, R) -> the autoregressive / factorised ratio of each round's pair of tries (alternating order)."""
    rows = {(r.device, r.runs, r.policy): r.tries for r in result.rows if _plain(r) and r.loss == "naive"}
    return {(d, n): [a / f for a, f in zip(tries, rows[d, n, "factorized"])] for (d, n, p), tries in rows.items()
            if p == "autoregressive" and (d, n, "factorized") in rows}


def critic_ratios(result: BenchResult) -> dict[tuple[str, int], float]:
    """(device, R) -> seconds per run with a learned critic (gae) / without, factorised policy, same G."""
    rows = {(r.device, r.runs, r.delta): r.seconds for r in result.rows
            if r.policy == "factorized" and r.loss == "naive" and not r.clipped and not r.learned}
    return {(d, n): seconds / rows[d, n, None] for (d, n, delta), seconds in rows.items()
            if delta == "gae" and (d, n, None) in rows}


def method_ratios(result: BenchResult) -> dict[tuple[str, str, int], float]:
    """(row, device, R) -> seconds per run of an SFT, expert-iteration, clipped or learned-reward row / of the
    factorised GRPO row (row: the loss, "max-grad-norm" or "learned reward")."""
    base = {(r.device, r.runs): r.seconds for r in result.rows if r.policy == "factorized" and _plain(r)
            and r.loss == "naive"}
    return {("max-grad-norm" if r.clipped else "learned reward" if r.learned else r.loss, r.device, r.runs):
            r.seconds / base[r.device, r.runs]
            for r in result.rows if (r.clipped or r.learned or r.loss in ("sft", "expert-iteration")) and
            (r.device, r.runs) in base}
