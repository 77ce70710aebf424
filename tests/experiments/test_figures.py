"""lab.experiments.figures: titles wrapped to fit their figure (a centred title wider than the figure loses both ends)."""

from lab.experiments.figures import CHAR_WIDTH, TITLE_FONTSIZE, fit_title

LONG = "Deltas beyond the lecture's three: group max and leave-one-out; 20 seeds, mean and 95% t-band"


def test_a_long_title_is_wrapped_into_lines_that_fit_and_keeps_every_word():
    width_in = 6.0
    chars = int(width_in * 72 / (CHAR_WIDTH * TITLE_FONTSIZE))
    wrapped = fit_title(LONG, width_in)
    assert "\n" in wrapped and len(LONG) > chars  # the mutant (no wrapping) would be one line too wide
    assert all(len(line) <= chars for line in wrapped.splitlines())
    assert wrapped.split() == LONG.split()


def test_a_title_that_fits_is_left_alone():
    assert fit_title(LONG, 20.0) == LONG
