"""`lab run`: one run -> runs/<settings>-seed<k>/ (config.json, metrics.csv, samples.txt, summary.json, policy.pt, curves.png)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lab.cli.application import DEFAULTS, app, load, load_torch
from lab.cli.options import (
    ClipDeltaOpt, EpsilonHighOpt, ImportanceLevelOpt, MaskTruncatedOpt, SapoNegOpt, SapoPosOpt, TopEntropyOpt,
    VespoKNegOpt, VespoKPosOpt, VespoLambdaNegOpt, VespoLambdaPosOpt,
    CliprangeValueOpt, CriticLrOpt, CriticWarmupOpt, GaeLambdaOpt, WhitenOpt, ClipOpt, DeltaOpt, DeviceOpt, DTypeOpt,
    DPOLossOpt, IPOLogpsOpt, DimOpt, EntropyCoefOpt, TemperatureOpt, MaxGradNormOpt, DemoNoiseOpt, InitFromOpt,
    DemosFromOpt, DemosOpt, EIFilterOpt, RewardThresholdOpt, EpochsOpt, ForceOpt, GroupOpt, InitScaleOpt,
    KLEstimatorOpt, KLInOpt, KLOpt, KLPeriodOpt, LossAggOpt, LossOpt, LrOpt, MaxLengthOpt, PairsOpt,
    PairsPerPromptOpt, PairsFromOpt, PolicyOpt, PreferenceOpt, QuietOpt, SamplerOpt, StepsOpt, fitted_name,
)
from lab.cli.task_options import (
    PROMPT_DEFAULTS, HeldoutOpt, NumPromptsOpt, PromptLengthOpt, PromptSeedOpt, PromptsOpt, TrainRewardOpt, TaskOpt,
    VocabOpt, prompts_label,
)
from lab.cli.progress import run_with_progress
from lab.cli.sampling_options import (AdaptiveEntropyOpt, ClipMaxOpt, ClipMinOpt, DynamicSamplingOpt, EntropyDeltaOpt,
                                      EntropyMaxOpt, EntropyMinOpt, EntropyTargetOpt, ImportanceSamplingOpt,
                                      MaxNumGenBatchesOpt, MixupAlphaOpt, OffPolicyMaskOpt, SamplerTemperatureOpt,
                                      StalenessOpt, SyncRefModelOpt, SyncStepsOpt)
from lab.files.output_folders import write_json_atomic, write_text_atomic
from lab.training.config import OPTION_FIELDS, Device, TrainConfig
from lab.training.settings import name_parts
from tasks.catalog import DEFAULT_TASK

if TYPE_CHECKING:
    import torch


def default_run_name(config: TrainConfig, prompt_options: dict | None = None) -> str:
    """`<delta>-<loss>-<reward>` (DPO: `dpo-<reward>`, it has no deltas), then every other setting that differs
    from the lecture's as `<option><value>` (`lab.training.settings.name_parts`: `group-size1`, `init-scale0.1`;
    the prompt options included: `prompts_label`), then the seed; past `NAME_BYTES`,
    `<delta>-<loss>-<reward>-config<hash of every setting>-seed<k>` (`fitted_name`)."""
    parts = name_parts([config])
    lead = 2 if config.is_dpo else 3
    label = prompts_label(prompt_options or {})
    name = "-".join(parts + ([label] if label else [])) + f"-seed{config.seed}"
    return fitted_name(name, "-".join(parts[:lead]), {"config": config.to_dict(), "prompt_options": {
        **PROMPT_DEFAULTS, **(prompt_options or {})}}, f"seed{config.seed}")


@app.command()
def run(
    delta: DeltaOpt = DEFAULTS.delta,
    loss: LossOpt = DEFAULTS.loss,
    reward: TrainRewardOpt = None,
    kl: KLOpt = DEFAULTS.kl,
    kl_period: KLPeriodOpt = DEFAULTS.kl_period,
    kl_estimator: KLEstimatorOpt = None,
    kl_in: KLInOpt = DEFAULTS.kl_in,
    policy: PolicyOpt = DEFAULTS.policy,
    max_length: MaxLengthOpt = DEFAULTS.max_length,
    loss_agg: LossAggOpt = DEFAULTS.loss_agg,
    pairs: PairsOpt = None,
    pairs_per_prompt: PairsPerPromptOpt = None,
    pairs_from: PairsFromOpt = None,
    preference: PreferenceOpt = None,
    dpo_loss: DPOLossOpt = None,
    ipo_logps: IPOLogpsOpt = None,
    critic_lr: CriticLrOpt = DEFAULTS.critic_lr,
    gae_lambda: GaeLambdaOpt = DEFAULTS.gae_lambda,
    cliprange_value: CliprangeValueOpt = DEFAULTS.cliprange_value,
    critic_warmup: CriticWarmupOpt = DEFAULTS.critic_warmup,
    whiten_advantages: WhitenOpt = DEFAULTS.whiten_advantages,
    clip_eps: ClipOpt = DEFAULTS.clip_eps,
    epsilon_high: EpsilonHighOpt = DEFAULTS.epsilon_high,
    clip_delta: ClipDeltaOpt = DEFAULTS.clip_delta,
    importance_sampling_level: ImportanceLevelOpt = DEFAULTS.importance_sampling_level,
    top_entropy_quantile: TopEntropyOpt = DEFAULTS.top_entropy_quantile,
    mask_truncated_completions: MaskTruncatedOpt = DEFAULTS.mask_truncated_completions,
    sapo_temperature_pos: SapoPosOpt = None,
    sapo_temperature_neg: SapoNegOpt = None,
    vespo_k_pos: VespoKPosOpt = None,
    vespo_lambda_pos: VespoLambdaPosOpt = None,
    vespo_k_neg: VespoKNegOpt = None,
    vespo_lambda_neg: VespoLambdaNegOpt = None,
    epochs: EpochsOpt = DEFAULTS.epochs,
    steps: StepsOpt = DEFAULTS.steps,
    group_size: GroupOpt = DEFAULTS.group_size,
    lr: LrOpt = DEFAULTS.lr,
    dim: DimOpt = DEFAULTS.dim,
    init_scale: InitScaleOpt = DEFAULTS.init_scale,
    entropy_coef: EntropyCoefOpt = DEFAULTS.entropy_coef,
    temperature: TemperatureOpt = DEFAULTS.temperature,
    max_grad_norm: MaxGradNormOpt = DEFAULTS.max_grad_norm,
    init_from: InitFromOpt = DEFAULTS.init_from,
    demos: DemosOpt = DEFAULTS.demos,
    demo_noise: DemoNoiseOpt = DEFAULTS.demo_noise,
    demos_from: DemosFromOpt = DEFAULTS.demos_from,
    ei_filter: EIFilterOpt = DEFAULTS.ei_filter,
    reward_threshold: RewardThresholdOpt = DEFAULTS.reward_threshold,
    dynamic_sampling: DynamicSamplingOpt = DEFAULTS.dynamic_sampling,
    max_num_gen_batches: MaxNumGenBatchesOpt = None,
    staleness: StalenessOpt = DEFAULTS.staleness,
    sampler_temperature: SamplerTemperatureOpt = None,
    importance_sampling_correction: ImportanceSamplingOpt = None,
    importance_sampling_clip_min: ClipMinOpt = None,
    importance_sampling_clip_max: ClipMaxOpt = None,
    off_policy_mask_threshold: OffPolicyMaskOpt = None,
    sync_ref_model: SyncRefModelOpt = DEFAULTS.sync_ref_model,
    ref_model_mixup_alpha: MixupAlphaOpt = None,
    ref_model_sync_steps: SyncStepsOpt = None,
    adaptive_entropy: AdaptiveEntropyOpt = DEFAULTS.adaptive_entropy,
    entropy_target: EntropyTargetOpt = None,
    entropy_coef_delta: EntropyDeltaOpt = None,
    entropy_coef_min: EntropyMinOpt = None,
    entropy_coef_max: EntropyMaxOpt = None,
    seed: Annotated[int, typer.Option(help="seed of the run's generator (init and sampling)")] = DEFAULTS.seed,
    sampler: SamplerOpt = DEFAULTS.sampler,
    task: TaskOpt = DEFAULT_TASK,
    prompts: PromptsOpt = "lecture",
    num_prompts: NumPromptsOpt = 3,
    prompt_length: PromptLengthOpt = 3,
    vocab_size: VocabOpt = None,
    heldout: HeldoutOpt = 0,
    prompt_seed: PromptSeedOpt = 0,
    dtype: DTypeOpt = DEFAULTS.dtype,
    device: DeviceOpt = Device.auto,
    out: Annotated[Path | None, typer.Option(help="run folder (default runs/<settings>-seed<k>)")] = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train one run and write config.json, metrics.csv, samples.txt, summary.json, policy.pt and curves.png.

    (The options are one signature because Typer reads a command's options off its parameters; every option that is
    a `TrainConfig` field has the field's name and goes to the config by it: `config_from_options`.)

    \b
    Exit codes: 0 done; 2 a mistake in the input (one line, nothing written);
    3 the run diverged: a loss or parameter became inf/NaN (one line saying where;
      the records up to that step are written, summary.json says "status": "diverged",
      no policy.pt); 1 writing failed (full disk: nothing written); 130 interrupted
      (Ctrl-C); 143 terminated (SIGTERM): the partial output removed as for Ctrl-C.
    """
    given = dict(locals())  # the options by name: a config field's option has the field's name
    load_torch()  # torch and the modules that compute load here, not for `lab run --help`
    import numpy as np

    from lab.cli.jobs import (config_from_options, config_header, prepare, prompt_options, report_divergence,
                              reward_settings, write_folder)
    from lab.files.run_text import metrics_csv, samples_text
    from lab.policies import policy_from_state
    from lab.policies.factorized import save_policy
    from lab.training.train import train

    options = prompt_options(prompts, vocab_size, num_prompts, prompt_length, heldout, prompt_seed, task)

    def build():
        config, = reward_settings([config_from_options(given)])
        return [config], 1, lambda: default_run_name(config, options)

    job = prepare("run", build, options, device, out, force, quiet)
    config = job.points[0]
    from lab.training.objective import objective

    ascends = objective(config, job.task.prompts.shape[-1])  # --kl: what the run ascends, at which beta'
    if ascends is not None and ascends.warning:
        typer.echo(ascends.warning, err=True)  # k3 in the reward (claim 35)
    records = run_with_progress(quiet, "training", config.epochs, lambda progress: train(
        job.task, config, device=job.device, progress=progress))
    diverged = records.divergence[0] if records.divergence else None  # (checked by lab.training.train)

    load("figures")  # matplotlib only where a figure is made
    from lab.figures.plots import plot_run

    final = (lambda name: None) if diverged else (lambda name: float(records.final(name)[0]))  # noqa: E731
    summary = {
        "status": "diverged" if diverged else "ok",
        **({"diverged": diverged.to_dict()} if diverged else {}),
        "final_mean_reward": final("mean_reward"),
        "optimum": float(records.optimum[0].mean()),
        "final_greedy_reward": final("greedy_reward"),
        "final_greedy_accuracy": final("greedy_accuracy"),
        "final_greedy_responses": None if diverged else records.greedy_responses[0].tolist(),
        # --reward learned:PATH: where the proxy left the gold reward, exactly (lab.training.optimum.ProxyTracker)
        **{f"final_{name}": final(name) for name in ("gold_reward_exact", "proxy_reward_exact", "d")
           if name in records.epoch_metrics},
        **({"objective": ascends.to_dict()} if ascends is not None else {}),
        "seconds": records.seconds,
        "exploration_exact": records.exploration_exact,
        # --max-grad-norm: the fraction of its optimizer steps whose gradient was clipped
        **({"grad_clipped_fraction": float(np.nanmean(records.step_metrics["grad_clipped"][0]))}
           if "grad_clipped" in records.step_metrics else {}),
    }

    def write(tmp: Path) -> None:
        write_json_atomic(tmp / "config.json", {
            **config_header("run", job), "config": config.to_dict(), "parameters": records.parameters,
            "rerun": rerun_command(config, options, job.device)})
        write_text_atomic(tmp / "metrics.csv", metrics_csv(records))
        write_text_atomic(tmp / "samples.txt", samples_text(records))
        write_json_atomic(tmp / "summary.json", summary)
        if not diverged:  # a diverged run has no final policy
            save_policy(policy_from_state(records.state), tmp / "policy.pt")
        plot_run(records, tmp / "curves.png", title=None if not diverged else
                 f"{config.delta.value} deltas, {config.loss.value} loss: diverged at step {diverged.step}")

    write_folder(job, write)
    report_divergence("run", records, [config], job.folder.out)
    counted = records.step_metrics.get("pair_fraction")
    if counted is not None and not diverged and not np.nanmax(counted[0]) > 0:  # DPO with nothing to train on
        typer.echo("warning: no DPO pair counted at any step (pair_fraction 0: every online group's rewards were "
                   "equal, or every pair was a tie under argmax preferences), so the run did not train", err=True)
    if not quiet:
        accuracy = summary["final_greedy_accuracy"]
        if "final_gold_reward_exact" in summary:
            typer.echo(f"exact gold reward {summary['final_gold_reward_exact']:.3f}, proxy "
                       f"{summary['final_proxy_reward_exact']:.3f} at d = sqrt(KL to the start) "
                       f"{summary['final_d']:.3f}")
        if ascends is not None:
            typer.echo(f"--kl {config.kl:g}: {ascends.line()}")
        # against a learned reward the mean is on the proxy's scale: the last line gives the gold too, exactly
        gold = (f" (proxy), gold {summary['final_gold_reward_exact']:.3f} / "
                f"{float(job.task.optimum(job.task.rewards[config.reward].gold_name).mean()):g} exactly"
                if "final_gold_reward_exact" in summary else "")
        typer.echo(f"final mean reward {summary['final_mean_reward']:.3f} / {summary['optimum']:g}{gold}, "
                   f"greedy accuracy {accuracy:.0%} ({round(accuracy * len(job.task.prompts))}/{len(job.task.prompts)} "
                   f"prompts {job.task.solved}), {records.seconds:.2f} s -> {job.folder.out}")


def rerun_command(config: TrainConfig, prompt_options: dict, device: torch.device) -> str:
    """A `lab run` command line that reproduces this run exactly."""
    settings = {k: v for k, v in config.to_dict().items() if k in OPTION_FIELDS and v is not None}
    if config.pairs_from is not None:  # the folder's pairs are counted and judged: these two do not apply
        settings = {k: v for k, v in settings.items() if k not in ("pairs_per_prompt", "preference")}
    args = [(f"--{'' if v else 'no-'}{k.replace('_', '-')}" if isinstance(v, bool) else f"--{k.replace('_', '-')} {v}")
            for k, v in {**settings, **prompt_options}.items() if k != "prompts"]
    return f"lab run --prompts '{prompt_options['prompts']}' " + " ".join(args) + f" --device {device.type}"

