"""The `lab` application with every command registered (importing a command module registers it).

    lab run --delta centered --loss clipped      one run -> runs/<settings>-seed<k>/
    lab sweep --delta raw --delta centered --seeds 20
    lab reward-model                             a reward model on preference pairs -> --reward learned:FOLDER
    lab diagnose                                 exact gradient bias and variance per delta mode
    lab reproduce                                figures/ and figures/RESULTS.md from scratch
    lab bench                                    speed against the lecture-style loop
"""

from lab.cli.application import app

# `lab --help` lists the commands in this order
# isort: off
from lab.cli import run_command, sweep_command, reward_model_command, diagnose_command, reproduce_command, trl_command  # noqa: E402, F401,E501
# isort: on

__all__ = ["app"]
