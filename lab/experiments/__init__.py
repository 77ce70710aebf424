"""Experiments: grids of runs (`lab sweep`), the reproduction and its verdicts (`lab reproduce`),
confidence intervals, and the benchmark (`lab bench`)."""
