"""GRPO sorting lab: policy-gradient mechanics, exact and fast, on a toy sorting task.

The package is laid out along the lab's architecture; each layer imports only from those above it
in this list (`docs/architecture.md`; `tests/test_architecture.py` keeps it so):

    lab.core         the math: deltas, surrogate losses, loss aggregation, KL estimators (pure functions)
    lab.policies     the policies behind one interface, sampling and log-probs, the fused fast paths
    lab.exact        exact analysis by enumeration: J, grad J, estimator moments, pass@k, diagnostics
    lab.training     the run config, the batched training loop and its records, the plain loops
    lab.files        output folders the lab owns, metrics.csv and samples.txt, Parquet/CSV tables
    lab.figures      a run's curves
    lab.experiments  sweeps, the reproduction and its verdicts and figures, intervals, the benchmark
    lab.cli          the `lab` command line

`tasks/` (the sorting task and its rewards) sits beside `lab.core`.

The names below are the lab's short public API (`from lab import Policy, train`). They are loaded on
first use, so that `import lab` stays cheap and the `lab` command can install its signal handlers
before torch loads (`lab.cli.main`).
"""

from __future__ import annotations

import importlib
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
"""Before torch loads (the `lab` command imports this package first): OpenMP threads that wait sleep
instead of spinning, so that `--threads 2` beside another busy process does not run several times slower
(docs/speed.md, `lab bench`'s loaded row). A value the user exported is kept."""

PUBLIC = {
    "ConfigError": "lab.training.config",
    "DeltaMode": "lab.core.modes",
    "Policy": "lab.policies.factorized",
    "PolicyStack": "lab.policies.factorized",
    "TrainConfig": "lab.training.config",
    "TrainingLoss": "lab.core.modes",
    "compute_deltas": "lab.core.deltas",
    "compute_loss": "lab.core.losses",
    "k1": "lab.core.kl",
    "k2": "lab.core.kl",
    "k3": "lab.core.kl",
    "kl_penalty": "lab.core.kl",
    "resolve_device": "lab.training.config",
    "response_log_probs": "lab.policies.sampling",
    "sample_responses": "lab.policies.sampling",
    "train": "lab.training.train",
}
"""Public name -> the module that defines it."""

__all__ = sorted(PUBLIC)


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'lab' has no attribute {name!r}")
    value = getattr(importlib.import_module(PUBLIC[name]), name)
    globals()[name] = value  # the next access is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(PUBLIC))
