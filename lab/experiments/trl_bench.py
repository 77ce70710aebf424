"""`lab bench`'s TRL row: one GRPO run by TRL's GRPOTrainer against the lab's autoregressive run at the same settings.

    seconds(TRL)  = wall time of `lab.bridge.trl_grpo.train_trl` (trainer construction included, the exact
                    lens every epoch included: what `lab trl` costs)
    seconds(lab)  = wall time of `lab.training.train.train` of one autoregressive run
    ratio         = seconds(TRL) / seconds(lab)

Both at `TRL_BENCH`'s settings (the lecture's prompts, G = 10, one step per epoch, cap 4), each the best of
`repeats` tries, tried in turn. The libraries' import time is left out (imported before timing). A
benchmark: it reports, it asserts nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from lab.bridge.tiny_lm import TinyLM
from lab.bridge.trl_grpo import TRLGRPO, train_trl
from lab.training.config import TrainConfig
from lab.training.train import train
from tasks.catalog import default_task

TRL_BENCH = dict(epochs=30, steps=1, group_size=10, lr=1e-3, clip_eps=0.2, delta="centered", loss_agg="token-mean",
                 seed=0)


@dataclass(frozen=True)
class TRLBenchRow:
    trl_seconds: float
    lab_seconds: float
    epochs: int

    @property
    def ratio(self) -> float:
        return self.trl_seconds / self.lab_seconds

    def text(self) -> str:
        return (f"TRL GRPOTrainer, one run of {self.epochs} epochs (tiny transformer, exact lens each epoch): "
                f"{self.trl_seconds:.2f} s; the lab's autoregressive run: {self.lab_seconds:.3f} s; "
                f"TRL/lab {self.ratio:.0f}x")


def bench_trl(repeats: int = 3, threads: int = 1) -> TRLBenchRow:
    import trl  # noqa: F401  (imported before the clock starts)

    task = default_task()
    trl_run = TRLGRPO(max_length=4, model=TinyLM(seed=0), **TRL_BENCH)
    lab_config = TrainConfig(policy="autoregressive", max_length=4, loss="clipped", **TRL_BENCH)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        trl_best, lab_best = float("inf"), float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            train_trl(task, trl_run)
            trl_best = min(trl_best, time.perf_counter() - start)
            start = time.perf_counter()
            train(task, lab_config)
            lab_best = min(lab_best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return TRLBenchRow(trl_best, lab_best, TRL_BENCH["epochs"])
