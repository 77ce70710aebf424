"""--temperature: sampling from softmax(logits / T) and the loss's log-probs at the same T (lab.training.kinds)."""

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from lab.cli.application import app
import lab.cli.commands  # noqa: F401  (registers the commands)
from lab.policies import make_stack
from lab.policies.ar_model import teacher_forced_logits
from lab.policies.factorized import policy_logits
from lab.training.config import ConfigError, TrainConfig
from lab.training.kinds import tempered, temperature_scale
from lab.training.train import train
from tasks.sorting import make_task


@pytest.mark.parametrize("kind", ["factorized", "autoregressive"])
def test_tempered_parameters_divide_every_logit_by_t(kind):
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4]])
    stack = make_stack(kind, 5, 3, 3 if kind == "factorized" else 5, 10,
                       [torch.Generator().manual_seed(s) for s in range(2)]).double()
    params = [p.detach() for p in stack.parameters()]
    configs = [TrainConfig(temperature=t) for t in (0.5, 7.0)]
    scale = temperature_scale(configs, torch.device("cpu"))
    if kind == "factorized":
        plain, hot = policy_logits(*params, prompts), policy_logits(*tempered(params, scale), prompts)
    else:
        responses = torch.randint(0, 6, (2, 2, 4, 5), generator=torch.Generator().manual_seed(0))
        plain = teacher_forced_logits(*params, prompts, responses)
        hot = teacher_forced_logits(*tempered(params, scale), prompts, responses)
    t = torch.tensor([0.5, 7.0], dtype=torch.float64).view(2, *[1] * (plain.dim() - 1))
    torch.testing.assert_close(hot, plain / t, rtol=1e-10, atol=1e-12)
    assert temperature_scale([TrainConfig(), TrainConfig()], torch.device("cpu")) is None  # T = 1: untouched


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_temperature_four_samples_as_init_scale_one_half_but_learns_differently(policy):
    """logits are quadratic in the embedding: init scale 1/2 is the initial policy at temperature 4, so the
    first epoch's samples are the same; the gradients are not (the loss is taken at T), so the runs part."""
    task = make_task()
    base = TrainConfig(epochs=3, steps=3, delta="centered", policy=policy, seed=1)
    hot, scaled = train(task, base.replace(temperature=4.0)), train(task, base.replace(init_scale=0.5))
    np.testing.assert_array_equal(hot.samples[0].responses, scaled.samples[0].responses)
    np.testing.assert_allclose(hot.epoch_metrics["optimal_prob"][:, 0], scaled.epoch_metrics["optimal_prob"][:, 0],
                               rtol=1e-5)
    assert not np.allclose(hot.state["embedding"], scaled.state["embedding"])


def test_temperature_is_validated_and_named_as_typed():
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="temperature must be > 0 and finite"):
            TrainConfig(temperature=bad)
    result = CliRunner().invoke(app, ["run", "--epochs", "2", "--temperature", "0"])
    assert result.exit_code == 2 and "--temperature must be > 0 and finite" in result.output
    assert "temperature" not in TrainConfig().to_dict() and TrainConfig(temperature=2.0).to_dict()["temperature"] == 2
    assert TrainConfig.from_dict(TrainConfig().to_dict()) == TrainConfig()


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_the_critics_exact_error_is_against_the_tempered_sampling_policy(policy):
    """A gae run at T = 4 samples as one at init scale 1/2; its first epoch's critic (all zeros, the same for
    both) has the same exact error, which is taken against V^pi of the policy that samples (at T)."""
    task = make_task()
    base = TrainConfig(epochs=2, steps=2, delta="gae", group_size=2, policy=policy, seed=1)
    hot, scaled = train(task, base.replace(temperature=4.0)), train(task, base.replace(init_scale=0.5))
    plain = train(task, base)
    np.testing.assert_array_equal(hot.samples[0].responses, scaled.samples[0].responses)
    first = lambda records: records.epoch_metrics["value_error_exact"][:, 0]  # noqa: E731
    np.testing.assert_allclose(first(hot), first(scaled), rtol=1e-4)
    assert not np.allclose(first(hot), first(plain), rtol=1e-3)


@pytest.mark.parametrize("changes", [{}, {"pairs": "offline", "pairs_per_prompt": 4}, {"policy": "autoregressive"}])
def test_dpo_at_a_temperature_measures_the_tempered_policy_against_pi_star(changes):
    """DPO at T = 4 with a step too small to move the policy: its exact J_beta after the first epoch is the one
    of the tempered initial policy, i.e. of the same policy reached by init scale 1/2 at T = 1."""
    task = make_task()
    base = TrainConfig(loss="dpo", kl=0.1, epochs=1, steps=1, lr=1e-12, seed=1, **changes)
    hot, scaled = train(task, base.replace(temperature=4.0)), train(task, base.replace(init_scale=0.5))
    plain = train(task, base)
    for name in ("objective_exact", "kl_to_optimum"):
        np.testing.assert_allclose(hot.epoch_metrics[name], scaled.epoch_metrics[name], rtol=1e-4)
    assert not np.allclose(hot.epoch_metrics["objective_exact"], plain.epoch_metrics["objective_exact"], rtol=1e-3)
    np.testing.assert_array_equal(hot.step_metrics["pair_fraction"], scaled.step_metrics["pair_fraction"])
