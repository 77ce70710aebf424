"""The options the commands share, as `Annotated` aliases; defaults come from `TrainConfig`."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from lab.aggregation import LossAgg
from lab.config import Device
from lab.deltas import DeltaMode
from lab.losses import LossMode
from lab.policies.interface import PolicyKind
from lab.samplers import Sampler
from tasks import sorting

Reward = Enum("Reward", {name.replace("-", "_"): name for name in sorting.REWARDS}, type=str)
"""Reward choices: every reward the sorting task registers."""

# Options shared by the commands that train. Defaults are the lecture's (TrainConfig).
DeltaOpt = Annotated[DeltaMode, typer.Option(help="rewards -> deltas: raw, minus the group mean, "
                                                  "also / group std, group max only, leave-one-out")]
LossOpt = Annotated[LossMode, typer.Option(help="surrogate loss: naive log-prob * delta, ratio * delta, "
                                                "or PPO-style clipped ratio")]
SamplerOpt = Annotated[Sampler, typer.Option(help="how the run's generator draws responses: the lab's inverse CDF, "
                                                    "or torch.multinomial as the lecture's script (with --seed 5 "
                                                    "its own runs)")]
RewardOpt = Annotated[Reward, typer.Option(help="reward function of the sorting task")]
KLOpt = Annotated[float, typer.Option("--kl", help="beta, weight of the k3 KL penalty to the reference (0 = off)")]
KLPeriodOpt = Annotated[int, typer.Option(help="refresh the reference every N epochs (0 = frozen at the start)")]
ClipOpt = Annotated[float, typer.Option(help="clip band half-width eps of the clipped loss")]
EpochsOpt = Annotated[int, typer.Option(help="epochs: each samples a fresh group per prompt")]
StepsOpt = Annotated[int, typer.Option(help="optimizer steps on each epoch's batch")]
GroupOpt = Annotated[int, typer.Option(help="G, responses sampled per prompt")]
LrOpt = Annotated[float, typer.Option(help="Adam learning rate")]
DimOpt = Annotated[int, typer.Option(help="embedding width of the policy")]
InitScaleOpt = Annotated[float, typer.Option(help="std of the embedding's initialisation (1 = the lecture's "
                                                  "N(0, 1); smaller = a flatter, more exploring initial policy)")]
EntropyCoefOpt = Annotated[float, typer.Option(help="entropy bonus: loss - coef x exact mean per-position "
                                                    "entropy (0 = off)")]
PromptsOpt = Annotated[str, typer.Option(help="'lecture', 'random' (see --num-prompts, --prompt-length), "
                                              "or a JSON list such as '[[3,1,0,2],[2,2,0,1]]'")]
NumPromptsOpt = Annotated[int, typer.Option(help="how many prompts --prompts random draws")]
PromptLengthOpt = Annotated[int, typer.Option(help="length of the prompts --prompts random draws")]
VocabOpt = Annotated[int, typer.Option(help="vocabulary size: tokens are 0..vocab-1")]
HeldoutOpt = Annotated[int, typer.Option(help="random held-out prompts evaluated greedily, never trained on")]
PromptSeedOpt = Annotated[int, typer.Option(help="seed for random and held-out prompts")]
PolicyOpt = Annotated[PolicyKind, typer.Option(help="the lecture's factorised policy, or an autoregressive one "
                                                    "whose responses end with EOS")]
MaxLengthOpt = Annotated[int | None, typer.Option(help="autoregressive: cap on response tokens, EOS included "
                                                       "(default: prompt length + 2)")]
LossAggOpt = Annotated[LossAgg, typer.Option(help="how per-token losses are averaged (verl's loss_agg_mode)")]
DeviceOpt = Annotated[Device, typer.Option(help="auto takes CUDA when present")]
ForceOpt = Annotated[bool, typer.Option("--force", help="replace an existing output folder")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="no progress bar and no summary line")]


# `lab sweep`: the grid options repeat (--delta raw --delta centered); one value each by default.
DeltasOpt = Annotated[list[DeltaMode] | None, typer.Option("--delta", help="repeatable: deltas to sweep")]
LossesOpt = Annotated[list[LossMode] | None, typer.Option("--loss", help="repeatable: losses to sweep")]
RewardsOpt = Annotated[list[Reward] | None, typer.Option("--reward", help="repeatable: rewards to sweep")]
KLsOpt = Annotated[list[float] | None, typer.Option("--kl", help="repeatable: KL weights beta to sweep")]
ClipsOpt = Annotated[list[float] | None, typer.Option("--clip-eps", help="repeatable: clip eps to sweep")]
LrsOpt = Annotated[list[float] | None, typer.Option("--lr", help="repeatable: learning rates to sweep")]
InitScalesOpt = Annotated[list[float] | None, typer.Option("--init-scale", help="repeatable: embedding init "
                                                           "scales to sweep (1 = the lecture)")]
EntropyCoefsOpt = Annotated[list[float] | None, typer.Option("--entropy-coef", help="repeatable: entropy "
                                                             "bonus weights to sweep (0 = off)")]
LossAggsOpt = Annotated[list[LossAgg] | None, typer.Option("--loss-agg", help="repeatable: loss aggregations "
                                                          "to sweep")]
GroupsOpt = Annotated[list[int] | None, typer.Option("--group-size", help="repeatable: group sizes G "
                                                     "(each G trains as its own batch)")]


def make_task(prompts: str, vocab_size: int, num_prompts: int, prompt_length: int, heldout: int,
              prompt_seed: int):
    """The sorting task the prompt options describe (`tasks.sorting.task_from_spec`)."""
    return sorting.task_from_spec(prompts, vocab_size, num_prompts, prompt_length, heldout, prompt_seed)
