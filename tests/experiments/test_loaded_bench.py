"""`lab bench`'s loaded row (lab/experiments/loaded_bench.py) and the thread defaults it checks.

    the competitor runs for the length of the block and is gone after it, however the block ends
    (an error, Ctrl-C, and the bench's own process killed outright)
    `import lab` sets OMP_WAIT_POLICY=PASSIVE before torch loads, unless the user set it
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from lab.experiments.bench import ALL_CORES, sweep_threads
from lab.experiments.loaded_bench import competing_process, loaded_report, loaded_row
from lab.training.config import TrainConfig


def gone(pid: int, within_s: float = 10.0) -> bool:
    """The process has ended (or is a zombie waiting for whoever reaps orphans)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("ending", [RuntimeError, KeyboardInterrupt])
def test_the_competitor_runs_in_the_block_and_is_reaped_however_it_ends(ending):
    with pytest.raises(ending):
        with competing_process() as competitor:
            time.sleep(0.2)
            assert competitor.poll() is None
            raise ending()
    assert competitor.returncode is not None  # killed and waited for


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_competitor_dies_with_a_bench_killed_outright():
    script = ("import time\nfrom lab.experiments.loaded_bench import competing_process\n"
              "with competing_process() as c:\n    print(c.pid, flush=True)\n    time.sleep(60)\n")
    bench = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(bench.stdout.readline())
    assert not gone(pid, within_s=0.2)
    bench.send_signal(signal.SIGKILL)
    bench.wait()
    assert gone(pid)


def test_the_loaded_row_times_the_default_one_thread_and_all_cores():
    row = loaded_row(runs=3, repeats=1, config=TrainConfig(epochs=2, steps=2))
    assert row.default_threads == sweep_threads(3) == 1
    assert set(row.seconds) == {1, ALL_CORES} and all(s > 0 for s in row.seconds.values())
    assert row.cost == row.seconds[1] / row.seconds[1] == 1.0
    line = loaded_report(row, quiet_seconds=row.seconds[1] / 2)
    assert "goal: at most about 1.3x" in line and "2.00x the same sweep at one thread without it" in line


@pytest.mark.parametrize("exported, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_lab_makes_waiting_openmp_threads_sleep_before_torch_loads(exported, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | (
        {"OMP_WAIT_POLICY": exported} if exported else {})
    code = ("import os, sys\nimport lab.cli.main\n"
            "print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", expected]
