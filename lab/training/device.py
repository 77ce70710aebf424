"""Where a run computes: `--device auto|cpu|cuda`, resolved to a torch device (`auto` takes CUDA when present).

Its own module so that lab.training.config stays under 300 lines; the config re-exports both names. Loads without
torch: `resolve_device` imports it when called, so `lab --help` shows the choices without loading it.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from lab.core.choices import ConfigError

if TYPE_CHECKING:
    import torch


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def resolve_device(device: Device | str = Device.auto) -> torch.device:
    """`auto` takes CUDA when present; asking for CUDA without it is a `ConfigError`."""
    import torch  # here, not above: the config (and `lab --help`, which shows its defaults) loads without torch

    try:
        device = Device(device)
    except ValueError:
        raise ConfigError(f"unknown device {device!r}; choose one of: auto, cpu, cuda") from None
    if device is Device.cuda and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for, but torch finds no CUDA device; "
                          "use --device cpu or --device auto")
    if device is Device.auto:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device.value)
