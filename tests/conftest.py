"""Shared test settings: a Hypothesis profile and the `cuda` marker.

The `ci` profile (the default) is derandomized, so every run draws the same
examples, and has no deadline, because the first call of a torch op can be slow.
`HYPOTHESIS_PROFILE=dev pytest` draws fresh examples for exploration.
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=30, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(1)  # the tensors are tiny: one thread is fastest and deterministic



def pytest_collection_modifyitems(config, items):
    """Tests marked `@pytest.mark.cuda` skip themselves where torch finds no CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
