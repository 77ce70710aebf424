"""What the `lab` command offers of the sorting task before torch loads: its reward names and its vocabulary.

The command builds its `--reward` choices and `--vocab-size` default from these, so that `lab --help` and
`lab run --help` need no torch. The names are those `tasks.sorting` registers in its `REWARDS` table, in
its order (tests/tasks/test_sorting_choices.py checks them against the table itself).
"""

from __future__ import annotations

REWARD_NAMES = ("distance", "inclusion-ordering", "blended", "exact-match")
"""`tasks.sorting.REWARDS`' names, in registration order."""

LECTURE_VOCAB_SIZE = 5
"""The lecture's vocabulary: tokens 0..4."""
