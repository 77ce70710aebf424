"""Running a TRL trainer with the exact lens every epoch: what `lab trl`'s GRPO and DPO runs share.

    records[0]  = the lens on the initial model (epoch 0)
    records[e]  = TRL's logs of epoch e's `steps` optimizer steps (renamed to the lab's names) and the
                  lens on the model after them: log pi over the whole response space, summarised by
                  `metrics(log_probs, initial_log_probs)`

The trainer is built on the tiny model saved to a temporary folder (TRL builds its reference model
from that path) inside `torch.random.fork_rng`, so TRL's global seeding leaves the caller's generator
as it was; the libraries' progress bars and log lines are silenced (the records are the output).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from lab.bridge.exact_lm import response_log_probs
from lab.bridge.tiny_lm import TinyLM, save_pretrained

DROPPED = frozenset({"learning_rate", "epoch", "num_tokens", "step_time"})
"""TRL logs that say nothing about the run (schedule bookkeeping, wall time)."""


def lab_trainer_args(output_dir: Path, seed: int, lr: float, logging_steps: int, max_steps: int,
                     batch_size: int) -> dict:
    """The fields every `lab trl` trainer shares: the lab's optimiser (Adam at a constant lr, no weight decay,
    no gradient clipping; TRL's defaults decay the lr and clip at 1.0), one full batch a step, float32 on the
    CPU (TRL 1.16 trains in bf16 autocast by default; the exact lens reads the model in float32), no dropout,
    and nothing logged or saved beyond the records."""
    return dict(output_dir=str(output_dir), report_to=[], use_cpu=True, save_strategy="no",
                logging_steps=logging_steps, seed=seed, data_seed=seed, bf16=False, disable_tqdm=True,
                log_level="error", disable_dropout=True, per_device_train_batch_size=batch_size,
                gradient_accumulation_steps=1, max_steps=max_steps, learning_rate=lr, lr_scheduler_type="constant",
                warmup_steps=0, weight_decay=0.0, max_grad_norm=0.0)


def renamed(logs: dict, names: dict[str, str]) -> dict:
    """TRL's logged metrics under the lab's names where the quantity is the same; the rest as TRL names them."""
    return {names.get(k, k): v for k, v in logs.items() if k not in DROPPED and not k.startswith("train_")}


def quiet_libraries() -> None:
    from datasets.utils.logging import disable_progress_bar as quiet_datasets
    from transformers.utils.logging import disable_progress_bar, set_verbosity_error

    set_verbosity_error()
    disable_progress_bar()
    quiet_datasets()


def run_with_lens(spec: TinyLM, make_trainer: Callable, prompts: torch.Tensor, responses: torch.Tensor,
                  temperature: float, steps: int, metrics: Callable, names: dict[str, str],
                  scratch: Path | None = None, progress: Callable | None = None) -> tuple[list[dict], dict, dict]:
    """Train `make_trainer(model_folder, output_dir, callbacks)`; return the records, TRL's config and the weights.
    `progress(epochs_done, epochs)` is called after every epoch, for the caller's progress line."""
    from transformers import PrinterCallback, ProgressCallback, TrainerCallback

    quiet_libraries()
    records: list[dict] = []

    def lens(model) -> torch.Tensor:
        was_training = model.training
        model.eval()
        log_probs = response_log_probs(model, prompts, responses, spec.eos_id, temperature)
        model.train(was_training)
        return log_probs

    class ExactLens(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.initial = lens(model)
            records.append({"epoch": 0, **metrics(self.initial, self.initial)})
            if progress:  # training starts now: the time before it (loading TRL, building the model) is not per epoch
                progress(0, state.max_steps // steps)

        def on_log(self, args, state, control, logs=None, model=None, **kwargs):
            if state.global_step % steps == 0 and state.global_step > 0 and "loss" in logs:
                records.append({"epoch": state.global_step // steps, **renamed(logs, names),
                                **metrics(lens(model), self.initial)})
                if progress:
                    progress(state.global_step // steps, state.max_steps // steps)

    with tempfile.TemporaryDirectory(dir=scratch) as tmp, torch.random.fork_rng(devices=[]), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' renamings inside TRL, not ours to act on
        trainer = make_trainer(save_pretrained(spec, Path(tmp) / "model"), Path(tmp) / "trainer", [ExactLens()])
        for printer in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(printer)
        trainer.train()
        weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return records, trainer.args.to_dict(), weights
