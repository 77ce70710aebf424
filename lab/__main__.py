"""`python -m lab ...` is the `lab` command."""

from lab.cli.main import main

main()
