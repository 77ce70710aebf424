"""The settings a set of runs applies, from one list: every field of their config, in declaration order.

    applied(configs) = [(field, [distinct values in run order])  for every field but the seed]
    differs(field, values)  <=>  values != [the field's default]      (DPO's defaults count as defaults)

A run's and a sweep's default folder name (`name_parts`), a sweep's config.json (`shared_and_swept`) and a
sweep's table columns (`table_fields`) are all read off `applied`, so a field added to `TrainConfig` shows
in all three with no edit here. A name part is the option as typed without its leading dashes, glued to
its values, several joined by `+`: `group-size1`, `init-scale0.1`, `lr0.01+0.02`, `loss-aggseq-mean-token-mean`;
a flag as typed (`whiten-advantages`). None (a setting that does not apply to some runs) is not shown.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from enum import Enum

from lab.core.modes import NEEDS_CRITIC
from tasks import LEARNED
from lab.training.config import ALWAYS_COLUMNS, LEADING, SHARED_FIELDS, TrainConfig
from lab.training.config_checks import DPO_DEFAULTS, SUPERVISED_DEFAULTS

FAMILY_COLUMNS = ((TrainConfig.is_dpo.fget, ("pairs", "preference", "dpo_loss")),
                  (lambda config: config.delta in NEEDS_CRITIC, ("gae_lambda",)),
                  (lambda config: config.max_grad_norm is not None, ("max_grad_norm",)),
                  (lambda config: config.demos is not None or config.ei_filter is not None, ("demos", "ei_filter")))
"""Columns a sweep's tables carry for a family as soon as one run belongs to it (a DPO run, a critic's, a clipped
run, a supervised one)."""
FOLDER_FIELDS = ("init_from", "demos_from", "pairs_from")
"""Settings that name a folder: a name shows the folder's own name and a hash of where it is (`folder_label`)."""
FOLDER_HASH_CHARACTERS = 8
"""Hex digits of the resolved path's sha256 in a name: 2**32 values, so two folders a user names collide only by
a chance of about n**2 / 2**33 among n of them."""
UNNAMED = ("init_sha256", "reward_sha256", "pairs_sha256")
"""Settings a name never shows (the sha256 of what a folder setting read: config.json records it)."""
TABLED_SHARED = ("kl_period", "critic_warmup", "pairs_per_prompt", "demo_noise", "demos_from", "init_from")
"""Settings every run of a batch shares (`SHARED_FIELDS`) that are a method's choice, not a batch's shape or schedule:
like any other setting, a `config_<field>` column where some run sets them apart from the default (they are in the
folder's name, so they are in its tables)."""
METHOD_DEFAULTS = {**DPO_DEFAULTS, **SUPERVISED_DEFAULTS}
"""What a DPO or supervised run takes for its settings when not given: defaults for a name too."""


def plain(value):
    """A value as config.json writes it: enums by value, tuples as lists."""
    return value.value if isinstance(value, Enum) else list(value) if isinstance(value, tuple) else value


def option(name: str) -> str:
    """A field's command-line option without its dashes: `group_size` -> `group-size`."""
    return name.replace("_", "-")


def text(value) -> str:
    """A value as a name shows it: floats with every digit (`repr` round-trips; `2` for 2.0), enums by value."""
    value = plain(value)
    if isinstance(value, float):
        shown = repr(value)
        return shown[:-2] if shown.endswith(".0") else shown
    return str(value)


def folder_label(path) -> str:
    """A folder argument as a name shows it: its own name, then a short hash of its resolved path (`sft-run-1a2b3c4d`),
    so `a/run` and `b/run` give different names; never the path itself (config.json records it as given)."""
    resolved = os.path.realpath(os.path.normpath(str(path)))
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:FOLDER_HASH_CHARACTERS]
    return f"{os.path.basename(resolved) or 'root'}-{digest}"


def leading_text(value) -> str:
    """A leading value as a name shows it: a learned reward by its folder's label (`learned-rm-seed0-1a2b3c4d`)."""
    value = text(value)
    if value.startswith(LEARNED):
        return "learned-" + folder_label(value[len(LEARNED):])
    return value


def defaults(config_type: type = TrainConfig) -> dict:
    """Every field's default, as a plain value."""
    return {f.name: plain(f.default if f.default is not dataclasses.MISSING else f.default_factory())
            for f in dataclasses.fields(config_type)}


def is_default(name: str, value, config_type: type = TrainConfig) -> bool:
    """The field's default; for DPO's and the supervised methods' settings also the value such a run takes when not
    given."""
    value = plain(value)
    return value == defaults(config_type)[name] or (name in METHOD_DEFAULTS and value == plain(METHOD_DEFAULTS[name]))


def applied(configs: Sequence[TrainConfig]) -> list[tuple[str, list]]:
    """Every field but the seed with its distinct plain values, in the order the runs take them."""
    fields = dataclasses.fields(type(configs[0]))
    values = [(f.name, list(dict.fromkeys(_key(plain(getattr(c, f.name))) for c in configs)))
              for f in fields if f.name != "seed"]
    return [(name, [_unkey(v) for v in vs]) for name, vs in values]


def _key(value):
    return ("list", tuple(value)) if isinstance(value, list) else (type(value).__name__, value)


def _unkey(key):
    return list(key[1]) if key[0] == "list" else key[1]


def differs(name: str, values: list, config_type: type = TrainConfig) -> bool:
    """Whether a name must show the field: some run takes a value other than the default."""
    return not all(is_default(name, v, config_type) for v in values)


def name_parts(configs: Sequence[TrainConfig]) -> list[str]:
    """`<deltas>-<losses>-<rewards>` (no delta where every run is DPO), then `<option><values>` for every other
    field some run sets apart from its default, in declaration order."""
    settings, kind = dict(applied(configs)), type(configs[0])
    leading = [name for name in LEADING if not (name == "delta" and all(c.is_dpo for c in configs))]
    parts = ["+".join(leading_text(v) for v in settings[name]) for name in leading]
    for name, values in settings.items():
        if name in LEADING or name in UNNAMED or not differs(name, values, kind):
            continue
        if name in FOLDER_FIELDS:
            shown = (folder_label(v) for v in values if v is not None)
            parts.append(option(name) + "+".join(shown))
        elif len(values) == 1 and isinstance(values[0], bool):  # a flag as typed: --whiten-advantages, --no-whiten-advantages
            parts.append(("" if values[0] else "no-") + option(name))
        else:
            parts.append(option(name) + "+".join(text(v) for v in values if v is not None))
    return parts


def shared_and_swept(configs: Sequence[TrainConfig]) -> tuple[dict, dict]:
    """config.json's "base" (each field every run shares, at its value: `temperature` only where it is not 1, as
    `TrainConfig.to_dict`) and "grid" (each field whose runs differ, with their values); the seeds are apart."""
    settings = dict(applied(configs))
    written = configs[0].to_dict()
    base = {name: values[0] for name, values in settings.items() if len(values) == 1 and name in written}
    grid = {name: values for name, values in settings.items() if len(values) > 1}
    return base, grid


def table_fields(configs: Sequence[TrainConfig]) -> list[str]:
    """The settings a sweep's tables carry as `config_<field>` columns: `ALWAYS_COLUMNS`, a family's
    (`FAMILY_COLUMNS`) where one run belongs to it, then every other scalar field whose runs differ, or that some
    run sets apart from its default and that is not a batch's shape or schedule shared by every run
    (`SHARED_FIELDS`, but for `TABLED_SHARED`: in config.json's "base")."""
    settings, kind = dict(applied(configs)), type(configs[0])
    fields = list(ALWAYS_COLUMNS)
    for member, family in FAMILY_COLUMNS:
        if any(member(c) for c in configs):
            fields += family
    for name, values in settings.items():
        scalar = all(not isinstance(v, list) for v in values)
        shared = name in SHARED_FIELDS and name not in TABLED_SHARED and len(values) == 1
        if name in UNNAMED:  # a sha256 of what a folder setting read: config.json records it
            continue
        if name not in fields and scalar and (len(values) > 1 or (differs(name, values, kind) and not shared)):
            fields.append(name)
    return fields
