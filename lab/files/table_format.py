"""The file format of a sweep's metrics tables (`lab sweep --format`; `lab.files.tables` writes them).

A module of its own, without numpy or torch, so that `lab sweep --help` shows the choices without loading them.
"""

from __future__ import annotations

from enum import Enum


class TableFormat(str, Enum):
    """Parquet (compressed, typed: the default) or CSV (for a spreadsheet)."""

    parquet = "parquet"
    csv = "csv"
