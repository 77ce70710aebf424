"""`lab sweep`: a grid of settings x seeds as batched runs, into one folder."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from lab.cli.application import DEFAULTS, app, load, load_torch
from lab.cli.options import (
    ClipDeltasOpt, EpsilonHighsOpt, ImportanceLevelsOpt, MaskTruncatedOpt, SapoNegOpt, SapoPosOpt, TopEntropiesOpt,
    VespoKNegOpt, VespoKPosOpt, VespoLambdaNegOpt, VespoLambdaPosOpt,
    CliprangeValueOpt, CriticLrOpt, CriticWarmupOpt, GaeLambdasOpt, WhitenOpt, ClipsOpt, DPOLossesOpt,
    IPOLogpsListOpt, DeltasOpt, DeviceOpt, DTypeOpt, DimOpt, EntropyCoefsOpt, TemperaturesOpt, MaxGradNormsOpt,
    DemoNoiseOpt, InitFromOpt, DemosFromOpt, DemosOpt, EIFilterOpt, RewardThresholdOpt, EpochsOpt, ForceOpt,
    GroupsOpt, InitScalesOpt, KLEstimatorsOpt, KLInsOpt, KLPeriodOpt, KLsOpt, LossAggsOpt, LossesOpt, LrsOpt,
    MaxLengthOpt, PairsListOpt, PairsPerPromptOpt, PairsFromOpt, PolicyOpt, PreferencesOpt, QuietOpt, RewardsOpt,
    SamplerOpt, StepsOpt, fitted_name,
)
from lab.cli.task_options import (
    HeldoutOpt, NumPromptsOpt, PromptLengthOpt, PromptSeedOpt, PromptsOpt, train_reward, TaskOpt, VocabOpt,
    prompts_label,
)
from lab.cli.progress import run_with_progress
from lab.cli.sampling_options import (AdaptiveEntropiesOpt, ClipMaxOpt, ClipMinOpt, DynamicSamplingsOpt,
                                      EntropyDeltaOpt, EntropyMaxOpt, EntropyMinOpt, EntropyTargetOpt,
                                      ImportanceSamplingsOpt, MaxNumGenBatchesOpt, MixupAlphaOpt, OffPolicyMasksOpt,
                                      SamplerTemperaturesOpt, StalenessesOpt, SyncRefModelsOpt, SyncStepsOpt,
                                      with_sub_settings)
from lab.files.output_folders import write_json_atomic, write_text_atomic
from lab.files.table_format import TableFormat
from lab.core.modes import DeltaMode
from lab.training.config import SWEPT_FIELDS, ConfigError, Device, TrainConfig
from lab.training.bounds import shown
from lab.training.settings import name_parts, shared_and_swept, table_fields
from tasks.catalog import DEFAULT_TASK


def default_sweep_name(points: list[TrainConfig], prompt_options: dict, seeds: int,
                       table_format: TableFormat = TableFormat.parquet) -> str:
    """`sweep-<deltas>-<losses>-<rewards>` (no deltas where every point is DPO), then every other setting some
    grid point sets apart from the lecture's, as `<option><values>`, several joined by `+` (`lr0.01+0.02`,
    `group-size1`: `lab.training.settings.name_parts`), the prompt options (`prompts_label`), `formatcsv` for
    CSV tables, then `<N>seeds`; past `NAME_BYTES`, a hash of them all."""
    label = prompts_label(prompt_options)
    fmt = [] if table_format is TableFormat.parquet else [f"format{TableFormat(table_format).value}"]
    name = "-".join(["sweep", *name_parts(points), *([label] if label else []), *fmt, f"{seeds}seeds"])
    settings = {"points": [p.to_dict() for p in points], "prompt_options": prompt_options, "seeds": seeds,
                "format": TableFormat(table_format).value}
    return fitted_name(name, "sweep", settings, f"{seeds}seeds")


@app.command()
def sweep(
    delta: DeltasOpt = None,
    loss: LossesOpt = None,
    reward: RewardsOpt = None,
    kl: KLsOpt = None,
    kl_estimator: KLEstimatorsOpt = None,
    kl_in: KLInsOpt = None,
    clip_eps: ClipsOpt = None,
    epsilon_high: EpsilonHighsOpt = None,
    clip_delta: ClipDeltasOpt = None,
    importance_sampling_level: ImportanceLevelsOpt = None,
    top_entropy_quantile: TopEntropiesOpt = None,
    mask_truncated_completions: MaskTruncatedOpt = DEFAULTS.mask_truncated_completions,
    sapo_temperature_pos: SapoPosOpt = None,
    sapo_temperature_neg: SapoNegOpt = None,
    vespo_k_pos: VespoKPosOpt = None,
    vespo_lambda_pos: VespoLambdaPosOpt = None,
    vespo_k_neg: VespoKNegOpt = None,
    vespo_lambda_neg: VespoLambdaNegOpt = None,
    lr: LrsOpt = None,
    group_size: GroupsOpt = None,
    init_scale: InitScalesOpt = None,
    entropy_coef: EntropyCoefsOpt = None,
    loss_agg: LossAggsOpt = None,
    pairs: PairsListOpt = None,
    preference: PreferencesOpt = None,
    dpo_loss: DPOLossesOpt = None,
    ipo_logps: IPOLogpsListOpt = None,
    pairs_per_prompt: PairsPerPromptOpt = None,
    pairs_from: PairsFromOpt = None,
    gae_lambda: GaeLambdasOpt = None,
    critic_lr: CriticLrOpt = DEFAULTS.critic_lr,
    cliprange_value: CliprangeValueOpt = DEFAULTS.cliprange_value,
    critic_warmup: CriticWarmupOpt = DEFAULTS.critic_warmup,
    whiten_advantages: WhitenOpt = DEFAULTS.whiten_advantages,
    temperature: TemperaturesOpt = None,
    max_grad_norm: MaxGradNormsOpt = None,
    init_from: InitFromOpt = DEFAULTS.init_from,
    demos: DemosOpt = DEFAULTS.demos,
    demo_noise: DemoNoiseOpt = DEFAULTS.demo_noise,
    demos_from: DemosFromOpt = DEFAULTS.demos_from,
    ei_filter: EIFilterOpt = DEFAULTS.ei_filter,
    reward_threshold: RewardThresholdOpt = DEFAULTS.reward_threshold,
    dynamic_sampling: DynamicSamplingsOpt = None,
    max_num_gen_batches: MaxNumGenBatchesOpt = None,
    staleness: StalenessesOpt = None,
    sampler_temperature: SamplerTemperaturesOpt = None,
    importance_sampling_correction: ImportanceSamplingsOpt = None,
    importance_sampling_clip_min: ClipMinOpt = None,
    importance_sampling_clip_max: ClipMaxOpt = None,
    off_policy_mask_threshold: OffPolicyMasksOpt = None,
    sync_ref_model: SyncRefModelsOpt = None,
    ref_model_mixup_alpha: MixupAlphaOpt = None,
    ref_model_sync_steps: SyncStepsOpt = None,
    adaptive_entropy: AdaptiveEntropiesOpt = None,
    entropy_target: EntropyTargetOpt = None,
    entropy_coef_delta: EntropyDeltaOpt = None,
    entropy_coef_min: EntropyMinOpt = None,
    entropy_coef_max: EntropyMaxOpt = None,
    seeds: Annotated[int, typer.Option(help="run seeds 0..N-1 of every grid point")] = 5,
    sampler: SamplerOpt = DEFAULTS.sampler,
    threads: Annotated[int | None, typer.Option(
        help="torch CPU threads (default: 1, which a busy machine does not slow down; see lab bench)")] = None,
    kl_period: KLPeriodOpt = DEFAULTS.kl_period,
    policy: PolicyOpt = DEFAULTS.policy,
    max_length: MaxLengthOpt = DEFAULTS.max_length,
    epochs: EpochsOpt = DEFAULTS.epochs,
    steps: StepsOpt = DEFAULTS.steps,
    dim: DimOpt = DEFAULTS.dim,
    task: TaskOpt = DEFAULT_TASK,
    prompts: PromptsOpt = "lecture",
    num_prompts: NumPromptsOpt = 3,
    prompt_length: PromptLengthOpt = 3,
    vocab_size: VocabOpt = None,
    heldout: HeldoutOpt = 0,
    prompt_seed: PromptSeedOpt = 0,
    dtype: DTypeOpt = DEFAULTS.dtype,
    device: DeviceOpt = Device.auto,
    out: Annotated[Path | None, typer.Option(help="sweep folder (default runs/sweep-<grid>-<N>seeds)")] = None,
    table_format: Annotated[TableFormat, typer.Option(
        "--format", help="file format of the metrics tables metrics_step and metrics_epoch")] = TableFormat.parquet,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train a grid of settings x seeds as batched runs; write config.json, metrics_step.parquet,
    metrics_epoch.parquet (or .csv), summary.csv and curves.png.

    (The options are one signature because Typer reads a command's options off its parameters; each repeatable one
    is a `TrainConfig` field marked `swept` and names a grid axis by the field's name: `SWEPT_FIELDS`.)

    \b
    A run that diverges (inf/NaN loss or parameters) is frozen where it diverged and left out of
    the means; summary.csv and the table count such runs per setting. Exit codes: 0 done (also
    when some runs diverged: a line on stderr says how many); 3 every run diverged; 2 a mistake
    in the input (one line, nothing written); 1 writing failed; 130 interrupted (Ctrl-C);
    143 terminated (SIGTERM).
    """
    options_given = dict(locals())  # the options by name: a config field's option has the field's name
    torch = load_torch()  # torch and the modules that compute load here, not for `lab sweep --help`
    from lab.cli.jobs import (config_header, prepare, prompt_options, report_divergence, reward_settings,
                              start_settings, write_folder)
    from lab.experiments import sweep as sweeps
    from lab.files.tables import write_tables
    from lab.training.limits import check_threads

    given = {name: options_given[name] for name in SWEPT_FIELDS}  # the grid's axes, each a repeatable option
    grid = {name: values or [getattr(DEFAULTS, name)] for name, values in given.items()}
    if pairs_from is not None and not given["pairs"]:  # as in lab run: --pairs-from implies --pairs offline
        grid["pairs"] = ["offline"]
    if not given["kl_estimator"]:
        grid["kl_estimator"] = [None]  # each point the estimator of its placement (build_grid: k1 in the reward)
    grid["reward"] = given["reward"] or [None]  # None: the task's default reward (checked in `build`)
    names = [name for name, values in grid.items() if len(values) > 1]
    # summary.csv names every swept setting and every one given on the command line, even once
    columns = [name for name, values in grid.items() if len(values) > 1 or given[name]]
    columns += ["dtype"] if dtype is not DEFAULTS.dtype else []  # a float64 sweep says so in summary.csv
    options = prompt_options(prompts, vocab_size, num_prompts, prompt_length, heldout, prompt_seed, task)
    critic = dict(critic_lr=critic_lr, cliprange_value=cliprange_value, critic_warmup=critic_warmup,
                  whiten_advantages=whiten_advantages)  # the --delta gae points' only
    supervised = dict(demos=demos, demo_noise=demo_noise, demos_from=demos_from, ei_filter=ei_filter,
                      reward_threshold=reward_threshold,  # the --loss sft and expert-iteration points' only
                      sapo_temperature_pos=sapo_temperature_pos, sapo_temperature_neg=sapo_temperature_neg,
                      vespo_k_pos=vespo_k_pos, vespo_lambda_pos=vespo_lambda_pos, vespo_k_neg=vespo_k_neg,
                      vespo_lambda_neg=vespo_lambda_neg)  # and the --loss sapo and vespo points' only
    sub_settings = dict(max_num_gen_batches=max_num_gen_batches,
                        importance_sampling_clip_min=importance_sampling_clip_min,
                        importance_sampling_clip_max=importance_sampling_clip_max,
                        ref_model_mixup_alpha=ref_model_mixup_alpha, ref_model_sync_steps=ref_model_sync_steps,
                        entropy_target=entropy_target, entropy_coef_delta=entropy_coef_delta,
                        entropy_coef_min=entropy_coef_min, entropy_coef_max=entropy_coef_max)  # switched points' only

    def make_base() -> TrainConfig:  # the settings every run of the sweep shares
        return TrainConfig(epochs=epochs, steps=steps, dim=dim, kl_period=kl_period, sampler=sampler,
                           policy=policy, max_length=max_length, dtype=dtype,
                           mask_truncated_completions=mask_truncated_completions, **start_settings(init_from))

    def build():
        check_threads(threads)
        sweeps.check_seeds(seeds)
        grid["reward"] = [train_reward(value, task) for value in grid["reward"]]
        critic_given = gae_lambda or any(v != getattr(DEFAULTS, k) for k, v in critic.items())
        if DeltaMode.gae not in grid["delta"] and critic_given:
            raise ConfigError("the critic's options (--gae-lambda, --critic-lr, ...) apply to --delta gae only; "
                              "add --delta gae")
        points = sweeps.build_grid(make_base(), grid, 1, critic)  # one config per grid point: sized before seeds multiply it
        if pairs_from is not None and pairs_per_prompt is not None:
            raise ConfigError("--pairs-per-prompt does not apply with --pairs-from: the folder's pairs are counted "
                              "already")
        points = reward_settings(sweeps.method_settings(with_sub_settings(points, sub_settings),
                                                        pairs_per_prompt=pairs_per_prompt,
                                                        pairs_from=pairs_from, **supervised))
        return points, seeds, lambda: default_sweep_name(points, options, seeds, table_format)

    settings = math.prod(len(values) for values in grid.values())
    job = prepare("sweep", build, options, device, out, force, quiet, what=f"this sweep ({settings} settings x {shown(seeds)} seeds)")
    base = make_base()
    configs = reward_settings(sweeps.method_settings(with_sub_settings(sweeps.build_grid(base, grid, seeds, critic),
                                                                       sub_settings),
                                                     pairs_per_prompt=pairs_per_prompt, pairs_from=pairs_from,
                                                     **supervised))

    from lab.training.objective import objective, unbounded_warning

    if any(o is not None and o.warning for o in (objective(c, job.task.prompts.shape[-1]) for c in configs)):
        typer.echo(unbounded_warning(), err=True)  # k3 in the reward (claim 35)
    from lab.experiments.bench import sweep_threads

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads or sweep_threads(len(configs)))  # one thread: see SWEEP_THREADS
    try:
        records = run_with_progress(quiet, f"{len(configs)} runs", 1, lambda progress: sweeps.run_sweep(
            job.task, configs, device=job.device, progress=progress), unit=None)  # work units: lab.experiments.work
    finally:
        torch.set_num_threads(previous_threads)
    summaries = sweeps.summarise(records, columns)

    load("figures")  # matplotlib only where a figure is made
    load("tables")
    from lab.experiments.figures import plot_sweep

    shared, swept = shared_and_swept(configs)  # every setting applied: those of all runs, those that differ

    def write(tmp: Path) -> None:
        write_json_atomic(tmp / "config.json", {
            **config_header("sweep", job), "grid": swept, "seeds": list(range(seeds)), "base": shared,
            "runs": len(configs), "exploration_exact": records.exploration_exact, "parameters": records.parameters})
        write_tables(records, table_fields(configs), tmp, table_format)
        write_text_atomic(tmp / "summary.csv", sweeps.summary_csv(summaries, columns))
        plot_sweep(records, names, tmp / "curves.png")

    write_folder(job, write)
    if not quiet:
        typer.echo(sweeps.summary_table(summaries, columns))
        typer.echo(f"{len(configs)} runs in {records.seconds:.2f} s -> {job.folder.out}")
    report_divergence("sweep", records, configs, job.folder.out)
