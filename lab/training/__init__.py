"""Training: the run config, the batched training loop (fixed and variable length), the plain
single-run loop it is tested against, the lecture-style baseline loop, Adam over runs, the step metrics."""
