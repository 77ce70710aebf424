"""The options the commands share, as `Annotated` aliases; defaults come from `TrainConfig`.

Loads without torch (the modes from `lab.core.modes`, the task options from `lab.cli.task_options`, which reads the
task files without importing them), so that `lab --help` and every command's `--help` show them without loading
it."""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Annotated

import typer

from lab.core.modes import (DeltaMode, Demos, DPOLoss, Filter, ImportanceLevel, IPOLogps, KLEstimator, KLPlacement,
                            LossAgg, Pairs, PolicyKind, Preference, Sampler, TrainingLoss)
from lab.core.choices import described
from lab.core.modes import DType
from lab.training.config import OPTION_FIELDS, Device, TrainConfig
from lab.training.settings import option, text
from lab.cli.task_options import DEFAULT_REWARD, TRAIN_REWARDS, canonical_prompts

# Options shared by the commands that train. Defaults are the lecture's (TrainConfig).
DeltaOpt = Annotated[DeltaMode, typer.Option(help=f"rewards -> deltas: {described(DeltaMode)}")]
LossOpt = Annotated[TrainingLoss, typer.Option(help=f"what a run minimises: {described(TrainingLoss)}")]
PairsOpt = Annotated[Pairs | None, typer.Option(help="--loss dpo: online (each group's best vs worst sample) "
                                                     "or offline (one fixed set drawn from pi_ref) [default: online]")]
PairsPerPromptOpt = Annotated[int | None, typer.Option(help="--pairs offline: pairs drawn per prompt "
                                                            "[default: 16]")]
PairsFromOpt = Annotated[str | None, typer.Option(help="--loss dpo: train on the pairs a reward model was fitted on "
                                                      "(this lab reward-model folder's pairs.csv, as it judged them) "
                                                      "instead of a set drawn from pi_ref; implies --pairs offline")]
PreferenceOpt = Annotated[Preference | None, typer.Option(help="--loss dpo: argmax (higher reward wins, ties "
                                                               "dropped) or bradley-terry (wins with probability "
                                                               "sigmoid(r_a - r_b)) [default: argmax]")]
DPOLossOpt = Annotated[DPOLoss | None, typer.Option(help="--loss dpo: sigmoid (-log sigmoid(beta h)) or ipo "
                                                         "((h - 1/(2 beta))^2; h of summed log-probs unless "
                                                         "--ipo-logps token-mean) [default: sigmoid]")]
IPOLogpsOpt = Annotated[IPOLogps | None, typer.Option(help="--dpo-loss ipo: sum (each sequence's log-prob summed over "
                                                           "its tokens, Azar et al.) or token-mean (divided by its "
                                                           "token count, TRL's ipo) [default: sum]")]
SamplerOpt = Annotated[Sampler, typer.Option(help="how the run's generator draws responses: the lab's inverse CDF, "
                                                    "or torch.multinomial as the lecture's script (with --seed 5 "
                                                    "its own runs)")]
KLOpt = Annotated[float, typer.Option("--kl", help="beta, weight of the KL penalty to the reference (0 = off; k3 in "
                                                   "the loss unless --kl-estimator, --kl-in say otherwise)")]
KLEstimatorOpt = Annotated[KLEstimator | None, typer.Option(help="the penalty's per-token KL estimator (verl's "
                                                                 "kl_loss_type: k1 kl, k2 mse, k3 low_var_kl); k3 "
                                                                 "in the reward has no fixed point (claim 35)",
                                                            show_default="k3 in the loss, k1 in the reward")]
KLInOpt = Annotated[KLPlacement, typer.Option(help="where the penalty goes: the loss (verl's use_kl_loss), or the "
                                                   "reward, r - beta * summed estimator before the deltas "
                                                   "(use_kl_in_reward)")]
KLPeriodOpt = Annotated[int, typer.Option(help="refresh the reference every N epochs (0 = frozen at the start)")]
ClipOpt = Annotated[float, typer.Option(help="clip band half-width eps of the clipped loss")]
EpochsOpt = Annotated[int, typer.Option(help="epochs: each samples a fresh group per prompt")]
StepsOpt = Annotated[int, typer.Option(help="optimizer steps on each epoch's batch")]
GroupOpt = Annotated[int, typer.Option(help="G, responses sampled per prompt")]
LrOpt = Annotated[float, typer.Option(help="Adam learning rate")]
DimOpt = Annotated[int, typer.Option(help="embedding width of the policy")]
InitScaleOpt = Annotated[float, typer.Option(help="std of the embedding's initialisation (1 = the lecture's "
                                                  "N(0, 1); smaller = a flatter, more exploring initial policy)")]
TemperatureOpt = Annotated[float, typer.Option(help="sampling temperature T: responses from softmax(logits / T), the "
                                                    "loss's log-probs at the same T (as verl); 1 = the plain policy")]
EntropyCoefOpt = Annotated[float, typer.Option(help="entropy bonus: loss - coef x exact mean per-position "
                                                    "entropy (0 = off)")]
MaxGradNormOpt = Annotated[float | None, typer.Option(help="clip each run's gradient to this global L2 norm before "
                                                         "its Adam step (TRL max_grad_norm, verl grad_clip; "
                                                         "default: off)")]
DemosOpt = Annotated[Demos | None, typer.Option(help="--loss sft: its demonstrations, G per prompt, fixed: optimal "
                                                    "(the target sorted(x), the one response optimal under every "
                                                    "reward), noisy (that target, each token replaced at rate "
                                                    "--demo-noise), or policy (drawn from --demos-from's policy) "
                                                    "[default: optimal]")]
DemoNoiseOpt = Annotated[float | None, typer.Option(help="--demos noisy: the rate at which each token is replaced "
                                                         "by a uniform one [default: 0.2]")]
DemosFromOpt = Annotated[str | None, typer.Option(help="--demos policy: the run folder whose policy.pt draws the "
                                                       "demonstrations")]
EIFilterOpt = Annotated[Filter | None, typer.Option(help="--loss expert-iteration: keep each group's best responses "
                                                         "(none when all tie), or those with reward >= "
                                                         "--reward-threshold [default: group-best]")]
RewardThresholdOpt = Annotated[float | None, typer.Option(help="--ei-filter threshold: the reward a kept response "
                                                               "reaches")]
InitFromOpt = Annotated[str | None, typer.Option(help="start every run from this finished run folder's policy.pt "
                                                      "(checked against the settings); it is also the KL and DPO "
                                                      "reference")]
PolicyOpt = Annotated[PolicyKind, typer.Option(help="the lecture's factorised policy, or an autoregressive one "
                                                    "whose responses end with EOS")]
MaxLengthOpt = Annotated[int | None, typer.Option(help="autoregressive: cap on response tokens, EOS included "
                                                       "(default: prompt length + 2)")]
LossAggOpt = Annotated[LossAgg, typer.Option(help="how per-token losses are averaged (verl's loss_agg_mode)")]
DTypeOpt = Annotated[DType, typer.Option(help="float32 (fast; last bits depend on the CPU's kernels) or float64 "
                                              "(exact to about 1e-12 on every machine and batch shape)")]
DeviceOpt = Annotated[Device, typer.Option(help="auto takes CUDA when present")]
ForceOpt = Annotated[bool, typer.Option("--force", help="replace an existing output folder")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="no progress bar and no summary line")]
CriticLrOpt = Annotated[float | None, typer.Option(help="--delta gae: the critic's Adam learning rate "
                                                        "(default: --lr)")]
GaeLambdaOpt = Annotated[float, typer.Option(help="--delta gae: GAE's lambda in [0, 1] (gamma = 1; verl's lam)")]
CliprangeValueOpt = Annotated[float, typer.Option(help="--delta gae: how far a value may move from the one its "
                                                       "targets were made with (verl's cliprange_value)")]
CriticWarmupOpt = Annotated[int, typer.Option(help="--delta gae: first epochs that train only the critic")]
WhitenOpt = Annotated[bool, typer.Option("--whiten-advantages/--no-whiten-advantages",
                                         help="--delta gae: whiten the advantages over the batch, as verl and TRL")]

EpsilonHighOpt = Annotated[float | None, typer.Option(help="the clip band's upper half-width: ratio clipped to [1 - "
                                                          "eps, 1 + this] (DAPO's clip-higher; TRL epsilon_high); "
                                                          "--loss cispo: the cap on the weight [default: --clip-eps; "
                                                          "cispo 5]")]
ClipDeltaOpt = Annotated[float | None, typer.Option(help="TRL's delta (INTELLECT-2's two-sided clip): cap the "
                                                         "unclipped term's ratio at this value > 1 [default: off]")]
ImportanceLevelOpt = Annotated[ImportanceLevel, typer.Option(help="ratio of each token, or of its response: exp of "
                                                                  "the mean token log-ratio (GSPO; TRL's)")]
TopEntropyOpt = Annotated[float, typer.Option(help="train on the top share of each step's tokens by entropy (the "
                                                   "80/20 paper's rho, 0.2; TRL's); 1 = every token")]
MaskTruncatedOpt = Annotated[bool, typer.Option(
    "--mask-truncated-completions/--no-mask-truncated-completions",
    help="autoregressive: responses cut off at --max-length leave the loss (DAPO; TRL's)")]
SapoPosOpt = Annotated[float | None, typer.Option(help="--loss sapo: the gate's temperature where delta > 0 "
                                                       "[default: 1.0]")]
SapoNegOpt = Annotated[float | None, typer.Option(help="--loss sapo: the gate's temperature where delta <= 0 "
                                                       "[default: 1.05]")]
VespoKPosOpt = Annotated[float | None, typer.Option(help="--loss vespo: phi's power k where delta >= 0 [default: 2]")]
VespoLambdaPosOpt = Annotated[float | None, typer.Option(help="--loss vespo: phi's decay where delta >= 0 "
                                                              "[default: 3]")]
VespoKNegOpt = Annotated[float | None, typer.Option(help="--loss vespo: phi's power k where delta < 0 [default: 3]")]
VespoLambdaNegOpt = Annotated[float | None, typer.Option(help="--loss vespo: phi's decay where delta < 0 "
                                                              "[default: 2]")]


# `lab sweep`: the grid options repeat (--delta raw --delta centered); one value each by default,
# the one `lab run` uses, which --help shows
_RUN = TrainConfig()
DeltasOpt = Annotated[list[DeltaMode] | None, typer.Option("--delta", help="repeatable: deltas to sweep (what each "
                                                                                "does: lab run's help)",
                                                           show_default=_RUN.delta.value)]
LossesOpt = Annotated[list[TrainingLoss] | None, typer.Option("--loss", help="repeatable: losses to sweep (what each "
                                                                                "is: lab run's help)",
                                                          show_default=_RUN.loss.value)]
RewardsOpt = Annotated[list[str] | None, typer.Option("--reward", metavar="[" + "|".join(TRAIN_REWARDS) + "]",
                                                      help="repeatable: rewards to sweep (learned:PATH: a reward "
                                                           "model's score, as lab run); another task: its own "
                                                           "default", show_default=DEFAULT_REWARD)]
KLsOpt = Annotated[list[float] | None, typer.Option("--kl", help="repeatable: KL weights beta to sweep",
                                                    show_default=str(_RUN.kl))]
KLEstimatorsOpt = Annotated[list[KLEstimator] | None, typer.Option("--kl-estimator", help="repeatable: the "
                                                                  "penalty's KL estimators to sweep",
                                                                  show_default="k3 in the loss, k1 in the reward")]
KLInsOpt = Annotated[list[KLPlacement] | None, typer.Option("--kl-in", help="repeatable: where the penalty goes "
                                                            "(loss or reward) to sweep",
                                                            show_default=_RUN.kl_in.value)]
ClipsOpt = Annotated[list[float] | None, typer.Option("--clip-eps", help="repeatable: clip eps to sweep",
                                                      show_default=str(_RUN.clip_eps))]
LrsOpt = Annotated[list[float] | None, typer.Option("--lr", help="repeatable: learning rates to sweep",
                                                    show_default=str(_RUN.lr))]
InitScalesOpt = Annotated[list[float] | None, typer.Option("--init-scale", help="repeatable: embedding init "
                                                           "scales to sweep (1 = the lecture)",
                                                           show_default=str(_RUN.init_scale))]
TemperaturesOpt = Annotated[list[float] | None, typer.Option("--temperature", help="repeatable: sampling "
                                                            "temperatures to sweep (1 = the plain policy)",
                                                            show_default=str(_RUN.temperature))]
EntropyCoefsOpt = Annotated[list[float] | None, typer.Option("--entropy-coef", help="repeatable: entropy "
                                                             "bonus weights to sweep (0 = off)",
                                                             show_default=str(_RUN.entropy_coef))]
LossAggsOpt = Annotated[list[LossAgg] | None, typer.Option("--loss-agg", help="repeatable: loss aggregations "
                                                          "to sweep",
                                                          show_default=_RUN.loss_agg.value)]
PairsListOpt = Annotated[list[Pairs] | None, typer.Option("--pairs", help="repeatable, --loss dpo: pair "
                                                         "sources to sweep [default: online]")]
PreferencesOpt = Annotated[list[Preference] | None, typer.Option("--preference", help="repeatable, --loss dpo: "
                                                                 "preference models to sweep [default: argmax]")]
DPOLossesOpt = Annotated[list[DPOLoss] | None, typer.Option("--dpo-loss", help="repeatable, --loss dpo: DPO "
                                                            "losses to sweep [default: sigmoid]")]
IPOLogpsListOpt = Annotated[list[IPOLogps] | None, typer.Option("--ipo-logps", help="repeatable, --dpo-loss ipo: "
                                                                 "IPO's sequence log-probs to sweep (sum, or "
                                                                 "token-mean: TRL's) [default: sum]")]
GaeLambdasOpt = Annotated[list[float] | None, typer.Option("--gae-lambda", help="repeatable: GAE lambdas to "
                                                            "sweep (the --delta gae points only)",
                                                            show_default=str(_RUN.gae_lambda))]
MaxGradNormsOpt = Annotated[list[float] | None, typer.Option("--max-grad-norm", help="repeatable: gradient "
                                                             "norm limits to sweep, each run clipped to its own "
                                                             "[default: off]")]
EpsilonHighsOpt = Annotated[list[float] | None, typer.Option("--epsilon-high", help="repeatable: upper clip "
                                                             "half-widths to sweep (the clipped, luspo and cispo "
                                                             "points) [default: --clip-eps; cispo 5]")]
ClipDeltasOpt = Annotated[list[float] | None, typer.Option("--clip-delta", help="repeatable: TRL's delta, the "
                                                           "two-sided clip's cap, to sweep [default: off]")]
ImportanceLevelsOpt = Annotated[list[ImportanceLevel] | None, typer.Option(
    "--importance-sampling-level", help="repeatable: token or sequence ratios (the ratio losses' points)",
    show_default=_RUN.importance_sampling_level.value)]
TopEntropiesOpt = Annotated[list[float] | None, typer.Option("--top-entropy-quantile", help="repeatable: shares of "
                                                             "tokens by entropy to train on",
                                                             show_default=str(_RUN.top_entropy_quantile))]
GroupsOpt = Annotated[list[int] | None, typer.Option("--group-size", help="repeatable: group sizes G "
                                                     "(each G trains as its own batch)",
                                                     show_default=str(_RUN.group_size))]


NAME_BYTES = 200
"""The longest default folder name; a longer one becomes `PREFIX-config<hash>-SUFFIX` (`fitted_name`)."""
HASHED_NAME = re.compile(r"-config[0-9a-f]{12}-")


def fitted_name(name: str, prefix: str, settings: dict, suffix: str) -> str:
    """`name`, or where it is longer than `NAME_BYTES`, `PREFIX-config<12 hex>-SUFFIX`: a hash of every
    setting (prompts by value), so that it still differs wherever the settings do."""
    if len(os.fsencode(name)) <= NAME_BYTES:
        return name
    options = settings.get("prompt_options")
    if isinstance(options, dict):
        settings = {**settings, "prompt_options": {**options, "prompts": canonical_prompts(options["prompts"])}}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=text).encode()).hexdigest()[:12]
    return f"{prefix}-config{digest}-{suffix}"


def hashed_name_note(name: str) -> str | None:
    """The line that tells a user why the default folder has a hash for a name (None where it has not)."""
    if not HASHED_NAME.search(name):
        return None
    return (f"Note: the settings make a folder name longer than {NAME_BYTES} bytes, so the folder is named by "
            f"a hash of them: {name} (config.json lists every setting; --out chooses another name)")


CLI_NAMES = {
    # library wording -> the option a command-line user typed
    "vocab size": "--vocab-size", "prompt count": "--num-prompts", "prompt length": "--prompt-length",
    "the number of held-out prompts": "--heldout", "the prompt seed": "--prompt-seed",
    "kl (beta)": "--kl (beta)",
}


def cli_message(message: str) -> str:
    """A library error as a command-line user should read it: `--group-size`, not `group_size`."""
    for words, typed in CLI_NAMES.items():
        message = re.sub(rf"(?<![-\w]){re.escape(words)}(?= must)", typed, message, flags=re.I)
    for name in OPTION_FIELDS:  # multi-word fields anywhere; one-word ones only where they start a clause
        pattern = (rf"(?<![-\w]){name}\b" if "_" in name else
                   rf"(^|(?<=: )|(?<=needs )|(?<=unknown )){name}(?= must| is| '| [><=])")
        message = re.sub(pattern, "--" + option(name), message)
    return message
