"""Input and output: what a training call returns and what each metric means, output folders the lab
owns, a sweep's tables, and the figures (the only modules that import matplotlib)."""
