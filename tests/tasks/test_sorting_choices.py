"""The torch-free list of the sorting task's reward names is the task's own table, name for name, in order."""

from tasks import sorting, sorting_choices


def test_sorting_reward_names_are_the_tables_names_in_order():
    """`lab --help` offers exactly the rewards `tasks.sorting` registers (a reward added to one and not the
    other fails here)."""
    assert sorting_choices.REWARD_NAMES == tuple(sorting.REWARDS)
