"""The package layout shows the architecture, and the names users already call keep working (issue 9 point 8)."""

import importlib
import subprocess
import sys

import pytest

import lab

SUBPACKAGES = ("core", "policies", "training", "exact", "experiments", "io", "cli")


@pytest.mark.parametrize("old, new", sorted(lab.MOVED.items()))
def test_every_moved_module_answers_to_its_old_name_as_the_same_module(old, new):
    assert importlib.import_module(f"lab.{old}") is importlib.import_module(f"lab.{new}")


def test_the_public_names_the_issues_give_still_work():
    from lab.deltas import compute_deltas
    from lab.diagnose import gradient_diagnostics
    from lab.exact import expected_reward, maj_at_k, pass_at_k  # noqa: F401
    from lab.kl import k1, k2, k3
    from lab.losses import compute_loss
    from lab.policy import PolicyStack

    assert (lab.compute_deltas, lab.compute_loss, lab.k1, lab.k2, lab.k3, lab.PolicyStack) == (
        compute_deltas, compute_loss, k1, k2, k3, PolicyStack)
    assert callable(gradient_diagnostics) and lab.kl.k3 is k3  # attribute access after `import lab`
    importlib.import_module("lab.train")  # as `import lab.train` does
    assert lab.train.__name__ == "train" and callable(lab.train)  # still the function, not the module


def test_the_flat_package_is_grouped_and_import_lab_loads_no_plotting():
    """Only the package's front door and the notebooks' exercise helper stay at the top of lab/; importing
    lab does not import matplotlib (the CLI starts faster, notebooks keep their backend)."""
    from pathlib import Path

    top = {p.stem for p in Path(lab.__file__).parent.glob("*.py")}
    assert top == {"__init__", "__main__", "exercises"}
    for name in SUBPACKAGES:
        assert importlib.import_module(f"lab.{name}").__doc__ or name == "exact"
    code = "import sys, lab; import lab.deltas, lab.plots; print('matplotlib' in sys.modules)"
    fresh = subprocess.run([sys.executable, "-c", "import sys, lab; print('matplotlib' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "False"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"  # lab.plots loads it on first use


def test_paths_computed_from_a_modules_location_still_point_at_the_repository():
    """Moving a module one folder down moves its `__file__`: the end-to-end benchmark must still find the
    repository it puts on the sweep's path."""
    from lab.experiments import endtoend

    assert (endtoend.PROJECT_ROOT / "pyproject.toml").is_file() and (endtoend.PROJECT_ROOT / "lab").is_dir()
