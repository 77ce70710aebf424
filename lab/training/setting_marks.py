"""The marks a `TrainConfig` field carries (`setting(...)`): how the rest of the lab treats it. What each mark decides is
lab.training.config's docstring; the lists of fields read off them are there too. Its own module so that the
config's field groups (`lab.training.sampling_config`) and `TrainConfig` mark their fields alike. Loads without torch.
"""

from __future__ import annotations

from dataclasses import field


def setting(default, *, shared: bool = False, option: bool = True, omit: tuple = (), column: int | None = None,
            leads: bool = False, swept: bool = False, critic: bool = False, loss_only: bool = False):
    """A `TrainConfig` field with its marks (the module docstring lists what each decides)."""
    return field(default=default, metadata=dict(shared=shared, option=option, omit=omit, column=column, leads=leads,
                                                swept=swept, critic=critic, loss_only=loss_only))
