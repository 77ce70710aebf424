"""Training: the run config, the batched training loop (one body for both policies; `kinds` holds where
they differ), the plain single-run loop it is tested against, the lecture-style baseline loop, Adam over
runs, the step metrics, and PPO's critic beside the policy for `--delta gae` (`critic`)."""
