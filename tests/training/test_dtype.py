"""`--dtype float64`: a run that is the same on every CPU, and what float32 gives up for its speed.

torch picks one of several kernel sets for the CPU it runs on (AVX-512, AVX2, or the unvectorised `default`;
`ATEN_CPU_CAPABILITY` forces one). In float32 they round differently in the last bits: the very first draws of a
run's parameters (torch's vectorised normal sampler) already differ, and after a few epochs a sampled token can
flip, after which two machines' runs of one seed go their own ways. In float64 the draws are bitwise the same
under every kernel set and later differences stay near 1e-16, far from flipping a draw; the pinned outputs and the
alone-versus-batched tests run in float64 for that (tests/test_pinned_outputs.py, tests/training/test_batched.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.csv as pacsv
import pytest
import torch
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.core.losses import compute_loss
from lab.policies.fused import policy_log_probs
from lab.training.config import TrainConfig

DRAWS = """
import hashlib, torch
from lab.policies import make_stack
from lab.policies.critic import Critic
digest = hashlib.sha256()
for kind in ("factorized", "autoregressive"):
    generators = [torch.Generator().manual_seed(seed) for seed in (0, 5)]
    stack = make_stack(kind, 5, 3, 5, 10, generators, [1.0, 0.1], torch.float64)
    critic = Critic(kind, 5, 3, 5, 10, [torch.Generator().manual_seed(7)], torch.float64)
    for _, p in [*stack.named_parameters(), *critic.named_parameters()]:
        digest.update(p.detach().contiguous().numpy().tobytes())
print(digest.hexdigest())
"""


def draws_under(capability: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    done = subprocess.run([sys.executable, "-c", DRAWS], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_float64_parameters_are_drawn_bitwise_the_same_under_every_cpu_kernel_set():
    """Both policies' and the critic's float64 initial parameters are the same bytes under this CPU's own kernels,
    AVX2 and the unvectorised `default` (torch's float32 normals are not: on an AVX2 or AVX-512 machine the `default`
    set draws other last bits; the mutant that draws float32 and casts to float64 fails here on such machines)."""
    digests = {capability: draws_under(capability) for capability in (None, "avx2", "default")}
    assert len(set(digests.values())) == 1, digests


def test_a_float32_step_is_the_float64_step_to_float32_precision():
    """The training step's math (fused log-probs, the clipped surrogate and its gradient) in float32 is the same
    step in float64 to a float32 bound: log-probs within 1e-5 absolute, each parameter's gradient within 1e-4 of its
    norm (float32's 6e-8 per rounding, over sums of a few hundred terms; measured: about 1e-6). A float32 run's
    trajectory has no such bound: after a draw flips (a uniform within float32 rounding of a CDF boundary) it
    samples other responses."""
    generator = torch.Generator().manual_seed(0)
    params64 = [torch.randn(3, *shape, generator=generator, dtype=torch.float64) * scale
                for shape, scale in (((5, 10), 1.0), ((3, 10, 10), 10 ** -0.5), ((3, 10, 10), 10 ** -0.5))]
    prompts = torch.randint(5, (3, 3), generator=generator)
    responses = torch.randint(5, (3, 3, 10, 3), generator=generator)  # int[run batch trial pos]
    deltas = torch.randn(3, 3, 10, generator=generator, dtype=torch.float64)

    def step(dtype):
        params = [p.to(dtype).requires_grad_() for p in params64]
        log_probs, _ = policy_log_probs(*params, prompts, responses)
        old = log_probs.detach() + 0.05 * torch.randn(log_probs.shape, generator=torch.Generator().manual_seed(1),
                                                      dtype=torch.float64).to(dtype)
        loss = compute_loss(log_probs, deltas.to(dtype), "clipped", old, clip_eps=0.2).sum()
        return log_probs.detach().double(), [g.double() for g in torch.autograd.grad(loss, params)]

    (lp32, grads32), (lp64, grads64) = step(torch.float32), step(torch.float64)
    assert (lp32 - lp64).abs().max() < 1e-5
    for g32, g64 in zip(grads32, grads64):
        assert g64.norm() > 0 and (g32 - g64).norm() / g64.norm() < 1e-4


def test_a_run_and_a_sweep_record_their_dtype(tmp_path):
    """config.json names the dtype of every run (float32 included); a sweep's tables carry it as `config_dtype`, and
    a float64 sweep's summary.csv says so in a `dtype` column."""
    short = ["--epochs", "2", "--steps", "1", "--quiet", "--device", "cpu"]
    for dtype in ("float32", "float64"):
        out = tmp_path / f"run-{dtype}"
        result = CliRunner().invoke(app, ["run", *short, "--dtype", dtype, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert json.loads((out / "config.json").read_text())["config"]["dtype"] == dtype
    out = tmp_path / "sweep"
    result = CliRunner().invoke(app, ["sweep", *short, "--dtype", "float64", "--seeds", "2", "--format", "csv",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert set(pacsv.read_csv(out / "metrics_epoch.csv").column("config_dtype").to_pylist()) == {"float64"}
    assert pacsv.read_csv(out / "summary.csv").column("dtype").to_pylist() == ["float64"]
    assert TrainConfig(dtype="float64").dtype.torch is torch.float64


def test_an_unknown_dtype_is_one_clear_line():
    result = CliRunner().invoke(app, ["run", "--dtype", "float16", "--quiet"])
    assert result.exit_code == 2 and "float32" in result.output and "float64" in result.output


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_a_float64_run_trains_in_float64(policy):
    """Its final parameters are float64 (no part of the loop falls back to float32 and back)."""
    from lab.training.train import train
    from tasks.sorting import make_task

    records = train(make_task(), TrainConfig(epochs=2, steps=1, policy=policy, dtype="float64"))
    assert {value.dtype for value in records.state.values()} == {torch.float64}
