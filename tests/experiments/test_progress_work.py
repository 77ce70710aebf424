"""Progress that only rises, in units that weigh what each part takes (lab/experiments/work.py, lab/cli/progress.py).

    work(batch)      = epochs * steps * (fixed cost per step + runs * per-run cost), kinds scaled
    Stages           = finished stages' work + the current stage's fraction of its own
    run_sweep, run_reproduction report one total, from 0 to it, never down
    LineProgress     shows nothing lower than it showed, and a line when overdue even between reports
"""

import io

import pytest

from lab.cli.progress import LineProgress
from lab.experiments.sweep import run_sweep, sweep_work
from lab.experiments.work import WORK, Stages, batch_work
from lab.training.config import TrainConfig
from tasks.sorting import make_task


def recorder():
    seen = []
    return seen, lambda done, total: seen.append((done, total))


def test_a_batchs_work_is_a_fixed_part_per_step_plus_a_part_per_run():
    one = TrainConfig(epochs=2, steps=3)
    assert batch_work([one]) == pytest.approx(6 * (WORK.step_s + WORK.run_step_s))
    many = [one.replace(seed=s) for s in range(500)]
    assert batch_work(many) == pytest.approx(6 * (WORK.step_s + 500 * WORK.run_step_s))
    assert batch_work([one.replace(group_size=20)]) == pytest.approx(6 * (WORK.step_s + 2 * WORK.run_step_s))
    ar = WORK.autoregressive
    assert batch_work([one.replace(policy="autoregressive")]) == pytest.approx(
        6 * (WORK.step_s * ar.step + WORK.run_step_s * ar.run))


def test_stages_add_the_finished_stages_to_the_current_fraction():
    seen, progress = recorder()
    stages = Stages(progress, [1.0, 3.0])
    stages(0)(5, 10)
    stages(1)(1, 4)
    stages(1)(4, 4)
    assert seen == [(0.5, 4.0), (1.75, 4.0), (4.0, 4.0)]
    assert Stages(None, [1.0])(0) is None


def test_a_sweep_of_unequal_batches_reports_one_rising_total_weighed_by_work():
    small = [TrainConfig(epochs=2, steps=1, group_size=4, seed=s) for s in range(2)]
    large = [TrainConfig(epochs=2, steps=1, group_size=8, seed=s) for s in range(40)]
    seen, progress = recorder()
    run_sweep(make_task(), small + large, progress=progress)
    done = [d for d, _ in seen]
    assert all(t == pytest.approx(sweep_work(small + large)) for _, t in seen)
    assert done == sorted(done) and done[-1] == pytest.approx(seen[-1][1])
    assert done[1] == pytest.approx(batch_work(small))  # the small batch's share is its work, not half the epochs


@pytest.mark.slow
def test_the_reproductions_progress_rises_to_its_one_total():
    from lab.experiments.reproduce import run_reproduction

    seen, progress = recorder()
    run_reproduction(seeds=6, base=TrainConfig(epochs=2, steps=1), progress=progress)
    done, totals = [d for d, _ in seen], {round(t, 12) for _, t in seen}
    assert len(totals) == 1 and done == sorted(done) and done[-1] == pytest.approx(seen[-1][1])


def test_the_lines_never_go_back_and_a_quiet_stretch_still_gets_one():
    now = [0.0]
    progress = LineProgress("reproduce", unit=None, quiet_s=5, every_s=60, clock=lambda: now[0], file=io.StringIO())
    now[0] = 10.0
    progress(5, 10)
    progress(4, 10)  # a report below the last shows the last
    now[0] = 80.0
    progress.heartbeat()  # no report for 70 s: a line anyway
    lines = progress.file.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["50%,", "50%,"]
    assert lines[1] == "reproduce: 50%, 80 s, about 80 s left"


def test_the_length_oracles_stage_weighs_the_runs_it_follows():
    """The exact flow runs for every Dr. GRPO run and the lecture task's first ORACLE_SEEDS seeds only."""
    from lab.experiments import length_bias as lb

    runs, _ = lb.length_configs(6, TrainConfig(epochs=4))
    chosen = {name: lb.oracle_runs(name, configs, 6) for name, configs in runs.items()}
    assert len(chosen[lb.DR_GRPO]) == len(runs[lb.DR_GRPO])
    assert all(runs[lb.LECTURE][i].seed < lb.ORACLE_SEEDS for i in chosen[lb.LECTURE])
    cost = lb.ORACLE_COST
    expected = sum(len(configs) * cost.slope_s for configs in runs.values()) + 5 * (
        len(chosen[lb.LECTURE]) * cost.lecture_flow_s + len(chosen[lb.DR_GRPO]) * cost.dr_grpo_flow_s)
    assert lb.exact_work(runs, 6) == pytest.approx(expected)
