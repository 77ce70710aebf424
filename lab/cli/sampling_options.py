"""The options of issue 38 (what is sampled and from which policy), for `lab run` and `lab sweep`: TRL's names in
kebab case where TRL has the setting (`vllm_importance_sampling_mode` drops its `vllm_`: the lab has no vLLM), verl's
`max_num_gen_batches` for dynamic sampling's cap. Each is the `TrainConfig` field of its name
(lab.training.config; its checks: lab.training.sampling_checks). In `lab sweep` the switches repeat (grid axes:
`--dynamic-sampling true --dynamic-sampling false`) and their own settings are given once, for the points whose
switch is on (`with_sub_settings`). Loads without torch."""

from __future__ import annotations

from typing import Annotated

import typer

from lab.core.choices import ConfigError
from lab.core.modes import ImportanceSampling
from lab.training.sampling_checks import SUB_SETTINGS, option

DynamicSamplingOpt = Annotated[bool, typer.Option(
    "--dynamic-sampling/--no-dynamic-sampling", help="DAPO's dynamic sampling (verl filter_groups): a prompt whose "
    "group's rewards are all equal is drawn again, up to --max-num-gen-batches groups")]
MaxNumGenBatchesOpt = Annotated[int | None, typer.Option(help="--dynamic-sampling: groups drawn per prompt and epoch "
                                                              "at most (verl's cap) [default: 10]")]
StalenessOpt = Annotated[int, typer.Option(help="K: draw the responses by the policy of K optimizer steps earlier, as "
                                                "an asynchronous trainer (0 = on-policy)")]
SamplerTemperatureOpt = Annotated[float | None, typer.Option(help="a mismatched sampler: draw at this temperature, "
                                                                  "train at --temperature [default: the same]")]
ImportanceSamplingOpt = Annotated[ImportanceSampling | None, typer.Option(
    help="reweigh a stale or mismatched sampler's responses by pi_old / mu, per token or per response, truncated or "
         "masked to the clip bounds (TRL vllm_importance_sampling_mode) [default: off]")]
ClipMinOpt = Annotated[float | None, typer.Option(help="--importance-sampling-correction: C_min [default: none]")]
ClipMaxOpt = Annotated[float | None, typer.Option(help="--importance-sampling-correction: C_max (finite; a large "
                                                       "one for none) [default: 3]")]
OffPolicyMaskOpt = Annotated[float | None, typer.Option(help="drop a response with a negative advantage whose mean "
                                                             "log mu - log pi_theta exceeds this (TRL "
                                                             "off_policy_mask_threshold) [default: off]")]
SyncRefModelOpt = Annotated[bool, typer.Option("--sync-ref-model/--no-sync-ref-model", help="TR-DPO's reference "
                                               "that follows the policy: ref <- alpha theta + (1 - alpha) ref every "
                                               "--ref-model-sync-steps steps (needs --kl > 0, --kl-period 0)")]
MixupAlphaOpt = Annotated[float | None, typer.Option(help="--sync-ref-model: alpha in (0, 1] [default: 0.6]")]
SyncStepsOpt = Annotated[int | None, typer.Option(help="--sync-ref-model: optimizer steps between mixes "
                                                       "[default: 512]")]
AdaptiveEntropyOpt = Annotated[bool, typer.Option("--adaptive-entropy/--no-adaptive-entropy", help="Skywork-OR1's "
                                                  "adaptive entropy control: --entropy-coef moves to hold "
                                                  "--entropy-target (factorised policy)")]
EntropyTargetOpt = Annotated[float | None, typer.Option(help="--adaptive-entropy: target mean entropy in nats "
                                                             "[default: 0.2]")]
EntropyDeltaOpt = Annotated[float | None, typer.Option(help="--adaptive-entropy: the coefficient's step "
                                                            "[default: 0.005]")]
EntropyMinOpt = Annotated[float | None, typer.Option(help="--adaptive-entropy: the coefficient's floor [default: 0]")]
EntropyMaxOpt = Annotated[float | None, typer.Option(help="--adaptive-entropy: the coefficient's cap [default: 1]")]

# `lab sweep`: the switches repeat
DynamicSamplingsOpt = Annotated[list[bool] | None, typer.Option(
    "--dynamic-sampling", help="repeatable: true/false, dynamic sampling on or off [default: false]")]
StalenessesOpt = Annotated[list[int] | None, typer.Option("--staleness", help="repeatable: sampler lags K to sweep "
                                                                              "[default: 0]")]
SamplerTemperaturesOpt = Annotated[list[float] | None, typer.Option(
    "--sampler-temperature", help="repeatable: mismatched samplers' temperatures [default: the trainer's]")]
ImportanceSamplingsOpt = Annotated[list[ImportanceSampling] | None, typer.Option(
    "--importance-sampling-correction", help="repeatable: importance-sampling modes to sweep [default: off]")]
OffPolicyMasksOpt = Annotated[list[float] | None, typer.Option(
    "--off-policy-mask-threshold", help="repeatable: off-policy mask thresholds [default: off]")]
SyncRefModelsOpt = Annotated[list[bool] | None, typer.Option(
    "--sync-ref-model", help="repeatable: true/false, the synced reference on or off [default: false]")]
AdaptiveEntropiesOpt = Annotated[list[bool] | None, typer.Option(
    "--adaptive-entropy", help="repeatable: true/false, adaptive entropy on or off [default: false]")]


def with_sub_settings(points: list, given: dict) -> list:
    """The grid's points with the switches' own settings `given` (field -> value or None) set on the points whose
    switch is on; a setting given while no point turns its switch on is one `ConfigError`."""
    for switch, settings in SUB_SETTINGS.items():
        chosen = {name: given[name] for name in settings if given.get(name) is not None}
        if not chosen:
            continue
        if not any(getattr(p, switch) not in (None, False) for p in points):
            raise ConfigError(f"{option(next(iter(chosen)))} applies to {option(switch)} only; add {option(switch)}")
        points = [p.replace(**chosen) if getattr(p, switch) not in (None, False) else p for p in points]
    return points
