"""`lab reproduce` (figures/ from scratch) and `lab bench` (speed against the lecture-style loop)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from lab.cli.application import USER_ERRORS, app, fail, load, load_torch, writing
from lab.cli.progress import Heartbeat, LineProgress, run_with_progress
from lab.cli.options import DeviceOpt, DTypeOpt, QuietOpt, cli_message
from lab.cli.task_options import TASKS, task_choice
from lab.core.modes import DType
from lab.training.config import ConfigError, Device, resolve_device
from lab.experiments.endtoend import END_TO_END_RUNS
from lab.experiments.loaded_bench import LOADED_RUNS
from lab.training.bounds import shown
from lab.files.output_folders import OutputFiles
from lab.files.writable import check_writable

MIN_SEEDS = 6
"""The fewest seeds `lab reproduce` takes: seeds 0..N-1 must include the lecture's seed 5
(`lab.experiments.reproduce.LECTURE_SEED`; tests/cli/test_help_texts.py keeps the two in step)."""


@app.command()
def reproduce(
    seeds: Annotated[int, typer.Option(help=f"seeds 0..N-1 per setting; at least {MIN_SEEDS}, so that the "
                                            "lecture's seed 5 is among them")] = 20,
    out: Annotated[Path | None, typer.Option(
        help="folder to write the figures and RESULTS.md into; `--out figures` replaces the tracked ones (only "
             "the lab's own files there are replaced)", show_default="runs/reproduce-<N>seeds")] = None,
    dtype: DTypeOpt = DType.float32,
    task: Annotated[list[str] | None, typer.Option(
        "--task", metavar="[" + "|".join(TASKS) + "]",
        help="repeatable: the tasks on which the section 'The lecture's conclusions beyond sorting' re-decides the "
             "lecture's verdicts; every other section is the lecture's task's (sorting)",
        show_default="every task in tasks/")] = None,
    device: DeviceOpt = Device.auto,
    quiet: QuietOpt = False,
) -> None:
    """The lecture's experiments and their neighbours over seeds: every figure of figures/ and RESULTS.md,
    written into a new folder under runs/ (or, with `--out figures`, over the tracked ones). Minutes, not seconds."""
    import time

    load_torch()  # torch and the modules that compute load here, not for `lab reproduce --help`
    from lab.experiments import reproduce as rep
    from lab.training.limits import check_memory
    start = time.perf_counter()
    suffix = "" if dtype is DType.float32 else f"-{dtype.value}"
    out = Path("runs") / f"reproduce-{seeds}seeds{suffix}" if out is None else out
    try:
        if seeds <= rep.LECTURE_SEED:
            raise ConfigError(f"--seeds must be > {rep.LECTURE_SEED} so that the lecture's seed "
                              f"{rep.LECTURE_SEED} is among them, got {seeds}")
        tasks = tuple(dict.fromkeys(task_choice(name) for name in task)) if task else None
        torch_device = resolve_device(device)
        settings = list({repr(sorted(rep.config_of(o, 0).to_dict().items())): rep.config_of(o, 0)
                         for e in rep.EXPERIMENTS for o in e.settings}.values())
        check_memory(settings, 5, 3, 3, 0, torch_device, f"the reproduction ({len(settings)} settings x {shown(seeds)} "
                     "seeds)", seeds=seeds, advice="lower --seeds")
        check_writable(out, temporary=False)  # first: a name too long fails any other look at it
        files = OutputFiles(out, "reproduce")
        files.check(rep.output_names())  # --out a file: named as given, not as OUT/RESULTS.md
        check_writable(out / "RESULTS.md", temporary=False)  # the longest path it writes fits too
    except USER_ERRORS as e:
        fail(cli_message(str(e)))
    load("figures")
    def reproduce_and_write(progress):  # one progress, in work units (lab.experiments.work), to the last file
        last = [1.0]

        def report(done: float, total: float) -> None:
            last[0] = total
            progress(done, total)
        reproduction = rep.run_reproduction(seeds, base=rep.LECTURE.replace(dtype=dtype), device=torch_device,
                                            progress=progress and report, after=rep.figures_work(seeds), tasks=tasks)
        with writing(out), files.staging() as tmp:
            paths = rep.write_figures(reproduction, tmp)
        if progress:
            progress(last[0], last[0])
        return reproduction, paths
    reproduction, paths = run_with_progress(quiet, "reproduce", 1, reproduce_and_write, unit=None)
    if not quiet:
        typer.echo(f"{reproduction.records.num_runs} runs, {len(paths)} files -> {out}/ "
                   f"in {time.perf_counter() - start:.1f} s (training {reproduction.records.seconds:.1f} s)")


MAX_REPEATS = 100
"""The most timings per measurement `lab bench` takes (the best of 100 is as good as it gets)."""


@app.command()
def bench(
    sizes: Annotated[list[int] | None, typer.Option("--runs", help="repeatable: sweep sizes R",
                                                    show_default="1 10 100 500")] = None,
    threads: Annotated[list[int] | None, typer.Option(
        help="repeatable: torch CPU threads of the lab's runs (each reported)",
        show_default="1 and all cores")] = None,
    repeats: Annotated[int, typer.Option(help=f"timings per measurement, 1 to {MAX_REPEATS}; the best counts")] = 3,
    sweep_runs: Annotated[int, typer.Option(
        help="runs of the end-to-end row: a real `lab sweep` timed from start-up to its written folder "
             "(0 = skip it)")] = END_TO_END_RUNS,
    loaded_runs: Annotated[int, typer.Option(
        help="runs of the loaded row: a sweep at `lab sweep`'s default threads and at 1 thread beside a "
             "CPU-bound process the bench starts and ends (0 = skip it)")] = LOADED_RUNS,
    trl_row: Annotated[bool, typer.Option(
        help="time one `lab trl` run (TRL's GRPOTrainer on a tiny transformer) against the lab's autoregressive "
             "run at the same settings, where TRL is installed")] = True,
) -> None:
    """Time the lecture's setting: the lecture-style loop, one run alone, and sweeps of R runs (CPU, CUDA),
    at each --threads (the lecture-style loop too), a whole `lab sweep`, and a sweep beside a competing process."""
    torch = load_torch()  # torch and the modules that compute load here, not for `lab bench --help`
    from lab.experiments.bench import ALL_CORES, LECTURE_THREADS, SIZES, bench_report, lecture_baseline
    from lab.experiments.bench import bench as run_bench
    from lab.training.config import TrainConfig
    from lab.training.limits import check_memory, check_threads

    try:
        if not 0 < repeats <= MAX_REPEATS:
            raise ConfigError(f"--repeats must be from 1 to {MAX_REPEATS} (each repeat times every row again), "
                              f"got {repeats}")
        if any(n <= 0 for n in [*(sizes or [])]):
            raise ConfigError("every --runs must be a positive integer")
        if sweep_runs < 0 or loaded_runs < 0:
            raise ConfigError(f"--sweep-runs and --loaded-runs must be >= 0 (0 skips the row), got "
                              f"{sweep_runs} and {loaded_runs}")
        for count in threads or []:
            check_threads(count)
        largest = max([*(sizes or SIZES), sweep_runs, loaded_runs])  # every row's sweep, before any timing
        check_memory([TrainConfig()], 5, 3, 3, 0, torch.device("cpu"), "this benchmark", seeds=largest,
                     advice="lower the largest --runs, --sweep-runs or --loaded-runs",
                     seeds_flag="--runs" if largest in (sizes or SIZES) else
                     "--sweep-runs" if sweep_runs == largest else "--loaded-runs")
    except USER_ERRORS as e:
        fail(cli_message(str(e)))
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    counts = list(dict.fromkeys(threads or [1, ALL_CORES]))
    lecture_counts = sorted(counts) if threads else LECTURE_THREADS  # its fastest is the baseline
    end_to_end_counts = counts if threads else [None]  # None: `lab sweep`'s own default
    from lab.experiments.bench_plan import bench_stage_works
    from lab.experiments.work import Stages

    works = bench_stage_works(sizes or SIZES, devices, repeats, lecture_counts, len(counts),
                              sweep_runs * len(devices) * len(end_to_end_counts), loaded_runs)
    with Heartbeat(LineProgress("bench", unit=None)) as line:  # lines on stderr: the report goes to stdout
        stages = Stages(line, works)
        lecture = lecture_baseline(threads=lecture_counts, repeats=repeats, progress=stages(0))
        quiet_seconds = None  # the loaded row's sweep at one thread without the competitor, where measured
        for k, count in enumerate(counts, 1):
            result = run_bench(sizes or SIZES, devices, count, repeats, lecture_seconds=lecture, progress=stages(k))
            typer.echo(bench_report(result))
            quiet_seconds = quiet_seconds or next((r.seconds for r in result.rows if count == 1 and r.device == "cpu"
                                                   and r.runs == loaded_runs and r.policy == "factorized"
                                                   and r.delta is None and r.loss == "naive"), None)
        if sweep_runs:
            from lab.experiments.endtoend import end_to_end, end_to_end_report

            rows = [(device, count) for device in devices for count in end_to_end_counts]
            for k, (device, count) in enumerate(rows):
                row = end_to_end(sweep_runs, device, repeats=repeats, extra=[f"--threads={count}"] if count else [],
                                 progress=lambda done, total, k=k: stages(len(counts) + 1)(k + done / total, len(rows)))
                typer.echo(end_to_end_report(row, min(lecture.values()), count))
        if loaded_runs:
            from lab.experiments.loaded_bench import loaded_report, loaded_row

            row = loaded_row(loaded_runs, repeats=min(repeats, 2), progress=stages(len(works) - 1))
            typer.echo(loaded_report(row, quiet_seconds))
        if trl_row and importlib.util.find_spec("trl") is not None:
            load("trl")
            from lab.experiments.trl_bench import bench_trl

            typer.echo(bench_trl(repeats=min(repeats, 2), threads=counts[0]).text())
