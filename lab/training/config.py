"""The run configuration: every number of an experiment, with the lecture's defaults.

A run is fully determined by its `TrainConfig`, its task and the device. Each field says on itself (`setting`'s
metadata) how the rest of the lab treats it, and every list of fields is read off those marks here, in one place:

    SHARED_FIELDS   shared=True    fixes tensor shapes or the schedule: equal across the runs of one batch
    OPTION_FIELDS   option=True    a `lab run` option (`--group-size`; the default); False: set in code only
    OMITTED         omit=(v, ...)  left out of config.json at these values, so files of runs without it are unchanged
    ALWAYS_COLUMNS  column=k       a sweep table's k-th setting column, whatever its values
    LEADING         leads=True     a default folder name starts with its value (`raw-naive-inclusion-ordering`)
    SWEPT_FIELDS    swept=True     a repeatable `lab sweep` option (a grid axis), in the order of ALWAYS_COLUMNS, then
                                   declaration
    CRITIC_FIELDS   critic=True    the learned critic's (`--delta gae` only)
    (checked)       loss_only=True read only by the losses whose entry names it (`lab.core.modes.Loss.settings`):
                                   set for another loss, a `ConfigError`

The checks every config passes are `lab.training.config_checks`. The module loads without torch (its modes come
from `lab.core.modes`; `resolve_device`, lab.training.device, imports torch when called), so that the `lab` command shows its options and their
defaults without loading it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from lab.core.choices import ConfigError
from lab.core.modes import (DeltaMode, Demos, DPOLoss, DType, Filter, ImportanceLevel, IPOLogps, KLEstimator,
                            KLPlacement, LossAgg, Method, Optimizer, Pairs, PolicyKind, Preference, Sampler,
                            TrainingLoss)
from lab.training.config_checks import check_config
from lab.training.device import Device, resolve_device  # noqa: F401  (the commands read them here)
from lab.training.sampling_config import SamplingSettings
from lab.training.setting_marks import setting


@dataclass(frozen=True)
class TrainConfig(SamplingSettings):
    """One GRPO-style run on a task (docs/task.md; the lecture's settings as defaults)."""

    epochs: int = setting(100, shared=True)
    """outer iterations; each samples a fresh group per prompt"""
    steps: int = setting(10, shared=True)
    """optimizer steps on each epoch's batch (TRL `num_iterations`, verl `ppo_epochs`)"""
    group_size: int = setting(10, shared=True, column=6, swept=True)
    """G, responses sampled per prompt (TRL `num_generations`, verl `rollout.n`)"""
    lr: float = setting(1e-3, column=5, swept=True)
    """Adam learning rate"""
    seed: int = setting(5)
    """seeds the run's generator: parameter initialisation, then every sample"""
    sampler: Sampler = setting(Sampler.inverse_cdf)
    """how responses are drawn from that generator (lab.policies.sampling): the lab's inverse CDF, or `multinomial`,
    the lecture script's torch.multinomial, which reproduces its seed-5 logs"""
    dim: int = setting(10, shared=True)
    """embedding and hidden width of the policy"""
    reward: str = setting("inclusion-ordering", column=2, leads=True, swept=True)
    """name of a reward registered by the task"""
    delta: DeltaMode = setting(DeltaMode.raw, column=0, leads=True, swept=True)
    """how rewards become deltas (lab.core.deltas)"""
    loss: TrainingLoss = setting(TrainingLoss.naive, column=1, leads=True, swept=True)
    """which surrogate loss (lab.core.losses), or `dpo`: DPO's loss on preference pairs (lab.core.dpo), with
    beta = `kl` and the reference frozen at the initial policy (`kl_period` does not apply)"""
    clip_eps: float = setting(0.01, column=4, swept=True)
    """clip band half-width eps of the clipped loss (TRL `epsilon`, verl `clip_ratio`); the lecture's 0.01"""
    kl: float = setting(0.0, column=3, swept=True)
    """beta, weight of the KL penalty to the reference (TRL `beta`, verl `kl_loss_coef` / `kl_ctrl.kl_coef`); 0 = off;
    the estimator and where it goes: `kl_estimator`, `kl_in` (k3 in the loss by default)"""
    kl_estimator: KLEstimator = setting(KLEstimator.k3, omit=('k3',), swept=True)
    """which per-token estimator of KL(pi_theta || pi_ref) the penalty uses (lab.core.kl): k1 = log(pi / pi_ref),
    k2 = its square / 2, k3 = rho - log rho - 1 (verl `kl_loss_type` / `kl_penalty`: k1 is `kl`, k2 `mse`,
    k3 `low_var_kl` without its clamp; TRL's GRPO: k3). Left out of `to_dict` at k3"""
    kl_in: KLPlacement = setting(KLPlacement.loss, omit=('loss',), swept=True)
    """where the penalty goes: `loss`, beta * the estimator added to the loss (verl `use_kl_loss`, TRL's GRPO), or
    `reward`, each response's reward becomes r - beta * its summed estimator, detached, before the deltas (verl
    `use_kl_in_reward`, PPO-RLHF; the `reward` metrics stay the task's). Claim 14: k2 in the loss and k1 in the
    reward follow grad KL(pi_theta || pi_ref); k3 in the loss grad KL(pi_ref || pi_theta); k3 in the reward an
    objective unbounded above (claim 35: `lab run` and `lab sweep` name k1 for the reward when no estimator is
    given, and warn about k3 there; lab.training.objective names what each setting ascends). Left out of `to_dict`
    at loss"""
    kl_period: int = setting(10, shared=True)
    """refresh the reference every this many epochs; 0 = freeze it once at the start"""
    std_eps: float = setting(1e-5, shared=True, option=False)
    """added to the group std in `normalized` deltas (the lecture's 1e-5)"""
    std_unbiased: bool = setting(True, shared=True, option=False)
    """Bessel-corrected group std (the lecture, torch.std) rather than the population std"""
    optimizer: Optimizer = setting(Optimizer.adam, shared=True, option=False, omit=('adam',))
    """what steps the policy: Adam (the lecture's, TRL's, verl's) or plain SGD, whose step scales with the gradient
    (lab.training.optim); left out of `to_dict` at adam"""
    adam_betas: tuple[float, float] = setting((0.9, 0.999), shared=True, option=False)
    """Adam's moment decay rates (torch defaults)"""
    adam_eps: float = setting(1e-8, shared=True, option=False)
    """Adam's denominator epsilon (torch default)"""
    sample_every: int = setting(10, shared=True, option=False)
    """keep the sampled responses, rewards and deltas every this many epochs (samples.txt)"""
    init_scale: float = setting(1.0, column=7, swept=True)
    """std of the embedding's initialisation: parameters are drawn as the lecture draws them (E ~ N(0, 1),
    as nn.Embedding), then E is multiplied by this; 1 = the lecture; smaller = flatter, more exploring policy"""
    entropy_coef: float = setting(0.0, column=8, swept=True)
    """weight of an entropy bonus: loss - coef x mean per-position entropy on the training prompts, the exact
    entropy of the factorised policy, not a sample estimate (verl `entropy_coeff`, CleanRL `ent_coef`); 0 = off"""
    policy: PolicyKind = setting(PolicyKind.factorized, shared=True)
    """which policy answers: the lecture's factorised model, or an autoregressive one that ends with EOS
    (lab.policies)"""
    max_length: int | None = setting(None, shared=True)
    """autoregressive only: the cap on response tokens, EOS included (a response reaching it is truncated);
    None = the prompt length + 2"""
    loss_agg: LossAgg = setting(LossAgg.token_mean, column=9, swept=True)
    """how per-token losses and KL estimates are averaged (lab.core.aggregation; verl `loss_agg_mode`)"""
    pairs: Pairs | None = setting(None, shared=True, swept=True)
    """DPO only (None otherwise; `online` by default): `online` takes each epoch's group of G samples from the
    current policy and pairs its highest with its lowest reward (no pair when all are equal); `offline` draws
    one fixed set of pairs from pi_ref before training and takes `steps` Adam steps on it every epoch"""
    pairs_per_prompt: int | None = setting(None, shared=True)
    """DPO with offline pairs only (default 16): pairs drawn per prompt (a tie under argmax drops its pair)"""
    preference: Preference | None = setting(None, swept=True)
    """DPO only (default `argmax`): which response of a pair wins: the higher reward (ties dropped), or
    `bradley-terry`: the first with probability sigmoid(r_1 - r_2), drawn from a generator seeded from the run's"""
    dpo_loss: DPOLoss | None = setting(None, swept=True)
    """DPO only (default `sigmoid`): Rafailov et al.'s -log sigmoid(beta h), or `ipo`: (h - 1/(2 beta))^2 (TRL's
    `loss_type`; h of summed sequence log-probs unless `ipo_logps`)"""
    ipo_logps: IPOLogps | None = setting(None, omit=(None, 'sum'), swept=True)
    """`--dpo-loss ipo` only (default `sum`, None otherwise): h of whole-sequence log-probs, sums over the response's
    live tokens (Azar et al.), or `token-mean`: each sequence's log-prob, the policy's and the reference's, divided by
    its token count first (TRL's `loss_type="ipo"`; lab.core.dpo). Left out of `to_dict` at sum"""
    optimum_metrics: bool = setting(False, shared=True, option=False)
    """record the exact distance to the KL-regularised optimum pi* each epoch (kl_to_optimum, objective_exact,
    objective_gap: lab.exact.optimum, beta = `kl`, pi_ref = the initial policy; always on for DPO), and with it the
    exact expected reward and KL to the initial policy (reward_exact, kl_initial_exact, as SFT's)"""
    critic_lr: float | None = setting(None, critic=True)
    """`--delta gae` only: the critic's Adam learning rate (verl `critic.optim.lr`); None = the policy's lr"""
    gae_lambda: float = setting(1.0, critic=True, swept=True)
    """`--delta gae` only: GAE's lambda in [0, 1], gamma = 1 (verl `algorithm.lam`, default 1.0; TRL `lam`)"""
    cliprange_value: float = setting(0.5, critic=True)
    """`--delta gae` only: how far a value prediction may move from the one its targets were made with before
    the value loss stops rewarding the move (verl `critic.cliprange_value`, 0.5; TRL `cliprange_value`, 0.2)"""
    critic_warmup: int = setting(0, shared=True, critic=True)
    """`--delta gae` only: the first this many epochs train the critic alone (verl `trainer.critic_warmup`)"""
    whiten_advantages: bool = setting(False, critic=True)
    """`--delta gae` only: whiten the advantages over each run's batch of tokens, (A - mean) / std, as verl's
    `masked_whiten` and TRL's PPO do; off by default, so the expected update is the unbiased one of claim 23"""
    temperature: float = setting(1.0, omit=(1.0,), swept=True)
    """sampling temperature T: responses drawn from softmax(logits / T), and the loss's (and the reference's)
    log-probs taken at the same T, as verl's rollout and actor do (lab.training.kinds); 1 = the plain policy.
    Left out of `to_dict` at 1, so the files of a run without it are unchanged"""
    dtype: DType = setting(DType.float32, shared=True, column=10)
    """the floating-point type the run trains in: `float32` (fast; its last bits depend on the CPU's kernels, so a
    sampled token can flip between machines), or `float64` for exactness (results agree across machines and
    batch shapes to about 1e-12; docs/reproducibility.md). Both start from the same float32 draws of the
    parameters, so a float64 run is the float32 run computed more exactly"""
    max_grad_norm: float | None = setting(None, omit=(None,), swept=True)
    """clip each run's gradient to this global L2 norm over all its policy parameters before each Adam step (TRL
    `max_grad_norm`, verl `grad_clip`; lab.training.clipping); None = off"""
    demos: Demos | None = setting(None, shared=True, omit=(None,))
    """`--loss sft` only (default `optimal`): its G demonstrations per prompt, one fixed set drawn before training:
    `optimal`, the task's target sorted(x) (then EOS) repeated, the one response that is optimal under every reward
    (the tie rule among equally rewarded responses); `noisy`, that target with each token replaced, at rate
    `demo_noise`, by a uniform draw from the vocabulary; `policy`, G samples per prompt from the policy of the
    run folder `demos_from`"""
    demo_noise: float | None = setting(None, shared=True, omit=(None,))
    """`--demos noisy` only (default 0.2): the rate at which each demonstration token is replaced"""
    demos_from: str | None = setting(None, shared=True, omit=(None,))
    """`--demos policy` only: the run folder whose policy.pt draws the demonstrations"""
    ei_filter: Filter | None = setting(None, omit=(None,))
    """`--loss expert-iteration` only (default `group-best`): which sampled responses are kept for the supervised
    steps: each group's best (all that tie at its highest reward, none when all are equal), or `threshold`,
    those with reward >= `reward_threshold`"""
    reward_threshold: float | None = setting(None, omit=(None,))
    """`--ei-filter threshold` only: the reward a kept response reaches"""
    init_from: str | None = setting(None, shared=True, omit=(None,))
    """start from this run folder's policy.pt instead of a random policy; it is also the reference (KL, DPO)"""
    init_sha256: str | None = setting(None, shared=True, omit=(None,), option=False)
    """the sha256 of the policy.pt that `init_from` read (set by the command that read it)"""
    reward_sha256: str | None = setting(None, omit=(None,), option=False)
    """`reward` learned:PATH only: the sha256 of the model.pt it read (set by the command that read it)"""
    pairs_from: str | None = setting(None, omit=(None,))
    """DPO, offline pairs only: the fixed set is this reward-model folder's pairs.csv (the pairs its model was fitted
    on, `lab reward-model`), judged as they were drawn, in place of a set drawn from pi_ref"""
    pairs_sha256: str | None = setting(None, omit=(None,), option=False)
    """the sha256 of the pairs.csv that `pairs_from` read (set by the command that read it)"""

    epsilon_high: float | None = setting(None, omit=(None,), swept=True, loss_only=True)
    """the clip band's upper half-width, [1 - clip_eps, 1 + this] (TRL `epsilon_high`, DAPO's clip-higher); None =
    clip_eps. `--loss cispo`: TRL's eps_max, the absolute cap on the weight (default 5, TRL's recommendation)"""
    clip_delta: float | None = setting(None, omit=(None,), swept=True, loss_only=True)
    """TRL `delta` (`--delta` is the lab's deltas): INTELLECT-2's two-sided clip, the unclipped ratio capped (> 1)"""
    importance_sampling_level: ImportanceLevel = setting(ImportanceLevel.token, omit=('token',), swept=True,
                                                         loss_only=True)
    """each token's ratio (`token`), or its response's, exp of the mean log-ratio over its tokens (`sequence`, GSPO;
    TRL `importance_sampling_level`); left out of `to_dict` at token"""
    sapo_temperature_pos: float | None = setting(None, omit=(None,), loss_only=True)
    """`--loss sapo` only (TRL's defaults: 1.0; neg 1.05): the gate's temperature where delta > 0 (neg: <= 0)"""
    sapo_temperature_neg: float | None = setting(None, omit=(None,), loss_only=True)
    vespo_k_pos: float | None = setting(None, omit=(None,), loss_only=True)
    """`--loss vespo` only: phi's power k and decay lambda (TRL's: 2, 3 where delta >= 0; 3, 2 below; descendants)"""
    vespo_lambda_pos: float | None = setting(None, omit=(None,), loss_only=True)
    vespo_k_neg: float | None = setting(None, omit=(None,), loss_only=True)
    vespo_lambda_neg: float | None = setting(None, omit=(None,), loss_only=True)
    top_entropy_quantile: float = setting(1.0, omit=(1.0,), swept=True)
    """policy-gradient only: train on the top share rho of each step's live tokens by entropy (lab.core.token_masks;
    TRL `top_entropy_quantile`, the 80/20 paper's 0.2); 1 = every token, left out of `to_dict`"""
    mask_truncated_completions: bool = setting(False, omit=(False,))
    """autoregressive, policy-gradient only: responses that reach the length cap without EOS leave the loss and
    its KL term (DAPO; TRL `mask_truncated_completions`); their rewards still count in the deltas"""

    def __post_init__(self) -> None:
        check_config(self)  # fills the method's defaults (DPO's, SFT's) and refuses what does not apply

    def loss_setting(self, name: str) -> float:
        """The number a loss reads for `name` (`Loss.settings`): epsilon_high falls back to clip_eps, clip_delta to
        inf (no cap), as TRL's; NaN where this run's loss does not read it (a batch's other runs may)."""
        value = getattr(self, name)
        if value is None:
            return {"epsilon_high": self.clip_eps, "clip_delta": float("inf")}.get(name, float("nan"))
        return float(value)

    @property
    def is_dpo(self) -> bool:
        return self.loss is TrainingLoss.dpo

    @property
    def method(self) -> Method:
        return self.loss.entry.method

    def plain(self) -> dict:
        """Every field as a plain value (enums as their names, tuples as lists)."""
        return {f.name: (v.value if isinstance(v, Enum) else list(v) if isinstance(v, tuple) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    def to_dict(self) -> dict:
        """`plain()` as written to config.json: each field left out at the values it is marked to be omitted at
        (`OMITTED`: `temperature` at 1, the optional ones while None), so earlier runs' files are unchanged."""
        return {k: v for k, v in self.plain().items() if not (k in OMITTED and v in OMITTED[k])}

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config fields: {', '.join(sorted(unknown))}")
        return cls(**data)

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)


def marked(mark: str) -> tuple[str, ...]:
    """The fields whose `mark` is set, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig)
                 if not any(f.metadata[mark] is unset for unset in (None, False)) and f.metadata[mark] != ())


SHARED_FIELDS = marked("shared")
"""Fields that must be equal across the runs of one batched computation."""
OPTION_FIELDS = marked("option")
"""Fields that are `lab run` options (underscores become dashes)."""
OMITTED = {name: TrainConfig.__dataclass_fields__[name].metadata["omit"] for name in marked("omit")}
"""Fields `to_dict` leaves out at these (plain) values: written only by runs that use them."""
ALWAYS_COLUMNS = tuple(sorted(marked("column"), key=lambda n: TrainConfig.__dataclass_fields__[n].metadata["column"]))
"""The settings every sweep table carries as a column, whatever their values (the tables' first columns)."""
LEADING = tuple(n for n in ALWAYS_COLUMNS if n in marked("leads"))
"""The fields a default name starts with, by value alone (`raw-naive-inclusion-ordering`); DPO has no delta."""
SWEPT_FIELDS = (*(n for n in ALWAYS_COLUMNS if n in marked("swept")),
                *(n for n in marked("swept") if n not in ALWAYS_COLUMNS))
"""The fields `lab sweep` takes as repeatable options: the grid's axes, in the grid's order."""
CRITIC_FIELDS = marked("critic")
"""The critic's settings (`--delta gae` only)."""


def check_batchable(configs: list[TrainConfig]) -> None:
    if not configs:
        raise ConfigError("no runs to train")
    for name in SHARED_FIELDS:
        values = {getattr(c, name) for c in configs}
        if len(values) > 1:
            raise ConfigError(f"runs trained together must share {name}; got {sorted(values, key=str)}. "
                              "Train them in separate batches.")
    methods = {c.method.value for c in configs}
    if len(methods) > 1:
        raise ConfigError(f"runs trained together must share their method; got {sorted(methods)}. "
                          "Train them in separate batches.")
