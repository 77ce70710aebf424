"""`lab bench`'s ratios between rows of one `BenchResult` (`lab.experiments.bench`): seconds per run of one row
over another's at the same device and R (each function takes the `BenchResult`, each row a `BenchRow`).

    policy ratio       = autoregressive / factorised            (issue 37 asks for at most 3x at 500 runs)
    policy pair ratios = the same per round of the round robin, each round a pair of tries in alternating order
    critic ratio       = with a learned critic (gae) / without   (issue 17: at most 2x)
    DPO, method ratios = DPO, SFT, expert iteration, --max-grad-norm, a learned reward / the lecture's GRPO
"""

from __future__ import annotations


def _plain(row) -> bool:
    """A row of the lecture's loss without a critic or clipping (the DPO row keeps its loss, DPO)."""
    return row.delta is None and not row.clipped and not row.learned and row.loss in ("naive", "dpo")


def dpo_ratios(result) -> dict[tuple[str, int], float]:
    """(device, R) -> seconds per run of the DPO row / of the factorised GRPO row (no critic)."""
    rows = {(r.device, r.runs, r.policy, r.loss): r.seconds for r in result.rows if _plain(r)}
    return {(d, n): seconds / rows[d, n, "factorized", "naive"] for (d, n, p, loss), seconds in rows.items()
            if loss == "dpo" and (d, n, "factorized", "naive") in rows}


def policy_ratios(result) -> dict[tuple[str, int], float]:
    """(device, R) -> seconds per run of the autoregressive policy / of the factorised one."""
    rows = {(r.device, r.runs, r.policy): r.seconds for r in result.rows if _plain(r) and r.loss == "naive"}
    return {(d, n): seconds / rows[d, n, "factorized"] for (d, n, p), seconds in rows.items()
            if p == "autoregressive" and (d, n, "factorized") in rows}


def policy_pair_ratios(result) -> dict[tuple[str, int], list[float]]:
    """(device, R) -> the autoregressive / factorised ratio of each round's pair of tries (alternating order)."""
    rows = {(r.device, r.runs, r.policy): r.tries for r in result.rows if _plain(r) and r.loss == "naive"}
    return {(d, n): [a / f for a, f in zip(tries, rows[d, n, "factorized"])] for (d, n, p), tries in rows.items()
            if p == "autoregressive" and (d, n, "factorized") in rows}


def critic_ratios(result) -> dict[tuple[str, int], float]:
    """(device, R) -> seconds per run with a learned critic (gae) / without, factorised policy, same G."""
    rows = {(r.device, r.runs, r.delta): r.seconds for r in result.rows
            if r.policy == "factorized" and r.loss == "naive" and not r.clipped and not r.learned}
    return {(d, n): seconds / rows[d, n, None] for (d, n, delta), seconds in rows.items()
            if delta == "gae" and (d, n, None) in rows}


def method_ratios(result) -> dict[tuple[str, str, int], float]:
    """(row, device, R) -> seconds per run of an SFT, expert-iteration, clipped or learned-reward row / of the
    factorised GRPO row (row: the loss, "max-grad-norm" or "learned reward")."""
    base = {(r.device, r.runs): r.seconds for r in result.rows if r.policy == "factorized" and _plain(r)
            and r.loss == "naive"}
    return {("max-grad-norm" if r.clipped else "learned reward" if r.learned else r.loss, r.device, r.runs):
            r.seconds / base[r.device, r.runs]
            for r in result.rows if (r.clipped or r.learned or r.loss in ("sft", "expert-iteration")) and
            (r.device, r.runs) in base}
