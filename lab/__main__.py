"""`python -m lab ...` is the `lab` command."""

from lab_console import main

main()
