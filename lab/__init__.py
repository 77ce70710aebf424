"""GRPO sorting lab: policy-gradient mechanics, exact and fast, on a toy sorting task.

The package is laid out along the lab's architecture:

    lab.core         the math: deltas, surrogate losses, loss aggregation, KL estimators (pure functions)
    lab.policies     the policies behind one interface (the lecture's factorised model, an autoregressive
                     one with EOS), sampling and log-probs, the fused fast path
    lab.training     the run config, the batched training loop, the plain loop it is tested against
    lab.exact        exact analysis by enumeration: J, grad J, estimator moments, pass@k, diagnostics
    lab.experiments  sweeps, the reproduction and its verdicts, intervals, the benchmark
    lab.io           records and metric definitions, output folders, tables, figures
    lab.cli          the `lab` command line

Modules of the earlier flat layout keep their names (`lab.deltas`, `lab.policy`, `lab.train`, ...):
each is the module it moved to (`MOVED`), imported on first use.
"""

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "deltas": "core.deltas",
    "losses": "core.losses",
    "aggregation": "core.aggregation",
    "kl": "core.kl",
    "policy": "policies.factorized",
    "rollout": "policies.rollout",
    "fused": "policies.fused",
    "samplers": "policies.samplers",
    "config": "training.config",
    "train": "training.train",
    "train_varlen": "training.varlen",
    "simple_loop": "training.simple_loop",
    "lecture_loop": "training.lecture_loop",
    "optim": "training.optim",
    "metrics": "training.metrics",
    "lengths": "training.lengths",
    "divergence": "training.divergence",
    "limits": "training.limits",
    "metrics_varlen": "training.metrics_varlen",
    "estimators": "exact.estimators",
    "exact_varlen": "exact.varlen",
    "voting": "exact.voting",
    "exploration": "exact.exploration",
    "diagnose": "exact.diagnose",
    "baselines": "exact.baselines",
    "drift": "exact.drift",
    "stuck": "exact.stuck",
    "ar_exploration": "exact.ar_exploration",
    "prefix_kl": "exact.prefix_kl",
    "sweep": "experiments.sweep",
    "reproduce": "experiments.reproduce",
    "results": "experiments.results",
    "exploration_results": "experiments.exploration_results",
    "length_bias": "experiments.length_bias",
    "intervals": "experiments.intervals",
    "bench": "experiments.bench",
    "endtoend": "experiments.endtoend",
    "records": "io.records",
    "outputs": "io.outputs",
    "tables": "io.tables",
    "plots": "io.plots",
    "figures": "io.figures",
    "exploration_figures": "io.exploration_figures",
    "writable": "io.writable",
    "run_files": "io.run_files",
    "figure_files": "io.figure_files",
}
"""Old flat module name -> where it lives now (under `lab.`)."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves `lab.<old name>` to the module it moved to: the same module object, loaded lazily
    (so `import lab` does not import matplotlib through `lab.plots`)."""

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.partition(".")
        if prefix == "lab" and name in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(f"lab.{MOVED[spec.name.partition('.')[2]]}")

    def exec_module(self, module):
        pass  # already executed under its own name


sys.meta_path.insert(0, _MovedModules())  # before any finder that could see a stale copy

from lab.core.deltas import DeltaMode, compute_deltas  # noqa: E402
from lab.core.kl import k1, k2, k3, kl_penalty  # noqa: E402
from lab.core.losses import LossMode, compute_loss  # noqa: E402
from lab.policies.factorized import Policy, PolicyStack  # noqa: E402
from lab.policies.rollout import response_log_probs, sample_responses  # noqa: E402
from lab.training.config import ConfigError, TrainConfig, resolve_device  # noqa: E402
from lab.training.train import train  # noqa: E402

# the moved modules this import already loaded answer to their old names at once, as attributes too
# (`import lab; lab.kl.k3`), without rebinding a name that is taken (`lab.train` stays the function)
for _old, _new in MOVED.items():
    if f"lab.{_new}" in sys.modules:
        sys.modules.setdefault(f"lab.{_old}", sys.modules[f"lab.{_new}"])
        globals().setdefault(_old, sys.modules[f"lab.{_new}"])

__all__ = [
    "ConfigError", "DeltaMode", "LossMode", "Policy", "PolicyStack", "TrainConfig", "compute_deltas",
    "compute_loss", "k1", "k2", "k3", "kl_penalty", "resolve_device", "response_log_probs",
    "sample_responses", "train",
]
