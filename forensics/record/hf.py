"""`ForensicsCallback`: the recorder inside a Hugging Face `Trainer`.

    trainer = Trainer(model, args, train_dataset=ds, callbacks=[ForensicsCallback()])
    trainer.train()                      # writes <output_dir>/forensics/

A `TrainerCallback` sees neither the loss of a step nor its inputs nor the gradient norm
before clipping, so at `on_train_begin` the callback finds the `Trainer` that called it and
wraps two of its methods on that instance only: `training_step` (each micro-batch's inputs and
returned loss; their sum is the step loss the Trainer itself logs) and `_get_grad_norm` (the
pre-clip norm the Trainer computed; nothing is computed twice). Dataset sample indices come
from the train dataloader's sampler, read as it yields them. Pass `trainer=` to skip the
search. Without a Trainer (another caller of the callback hooks) the loss and the pre-clip
norm are not recorded; every other statistic is.
"""

from __future__ import annotations

import inspect
import math
from collections import deque
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from forensics.record.recorder import Recorder
from forensics.record.sampling import record_indices, sampler_name, take


class ForensicsCallback(TrainerCallback):  # type: ignore[misc]
    """Record the run under `run_dir` (default: `args.output_dir`) in `forensics/`."""

    def __init__(
        self,
        run_dir: str | Path | None = None,
        *,
        log_every: int = 20,
        stats_every: int = 10,
        layers_every: int = 100,
        trainer: Any = None,
    ) -> None:
        self.run_dir = run_dir
        self.settings: dict[str, Any] = {
            "log_every": log_every, "stats_every": stats_every, "layers_every": layers_every,
        }  # fmt: skip
        self.trainer = trainer
        self.rec: Recorder | None = None
        self._loss: torch.Tensor | None = None
        self._grad_norm: Any = None
        self._lr: float | None = None
        self._indices: deque[int] | None = None

    # ----- hooks --------------------------------------------------------------------------
    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        optimizer: Any = None,
        train_dataloader: Any = None,
        **kwargs: Any,
    ) -> None:
        run_dir = Path(self.run_dir or str(args.output_dir))
        self.rec = Recorder(run_dir, model=model, framework="transformers",
                            step=state.global_step, **self.settings)  # fmt: skip
        trainer = self.trainer or _find_trainer()
        if trainer is not None:
            self._wrap(trainer)
        if state.global_step == 0 and train_dataloader is not None:
            self._indices = record_indices(train_dataloader)
        self.rec.write_config(
            model, optimizer, **_hf_config(args, state, trainer, sampler_name(train_dataloader))
        )

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.rec is None:
            return
        model = kw["model"]
        scaler = self._scaler()
        measured = self._grad_norm is not None
        self.rec.after_backward(model, scaler=scaler, grad_norm=self._grad_norm, measure=measured)

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        opt = kw.get("optimizer")
        if opt is not None and opt.param_groups:  # before the scheduler moves it on
            self._lr = float(opt.param_groups[0]["lr"])

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.rec is None:
            return
        skipped = None
        trainer = self.trainer
        if trainer is not None and getattr(trainer, "accelerator", None) is not None:
            skipped = bool(trainer.accelerator.optimizer_step_was_skipped)
        self.rec.after_step(
            kw["model"], kw["optimizer"], self._loss, step=state.global_step,
            scaler=self._scaler(), skipped=skipped, lr=self._lr,
        )  # fmt: skip
        self._loss, self._grad_norm = None, None

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.rec is not None:
            self.rec.close()
            self.rec = None

    # ----- the Trainer's own numbers ----------------------------------------------------
    def _wrap(self, trainer: Any) -> None:
        """Instance-level wrappers of training_step and _get_grad_norm (idempotent)."""
        self.trainer = trainer
        if getattr(trainer, "_forensics_wrapped", None) is self:
            return
        trainer._forensics_wrapped = self
        step_fn, norm_fn = trainer.training_step, trainer._get_grad_norm

        def training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            loss = step_fn(model, inputs, *args, **kwargs)
            if self.rec is not None:
                self._loss = loss.detach() if self._loss is None else self._loss + loss.detach()
                self.rec.record_batch(self._batch(inputs))
            return loss

        def get_grad_norm(*args: Any, **kwargs: Any) -> Any:
            self._grad_norm = norm_fn(*args, **kwargs)
            return self._grad_norm

        trainer.training_step = training_step
        trainer._get_grad_norm = get_grad_norm

    def _batch(self, inputs: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if isinstance(inputs, dict):
            fields.update({k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")})
            ids = inputs.get("input_ids")
            rows = int(ids.shape[0]) if isinstance(ids, torch.Tensor) and ids.dim() == 2 else 0
            indices = take(self._indices, rows)
            if indices is not None:
                fields["sample_indices"] = indices
        trainer = self.trainer
        source = _dataset_source(getattr(trainer, "train_dataset", None)) if trainer else None
        fields["source"] = source or "train_dataset"
        return fields

    def _scaler(self) -> Any:
        trainer = self.trainer
        accelerator = getattr(trainer, "accelerator", None) if trainer is not None else None
        return getattr(accelerator, "scaler", None)


def _find_trainer() -> Any:
    """The `Trainer` whose callback handler is calling us (a few frames up the stack)."""
    from transformers import Trainer

    frame = inspect.currentframe()
    try:
        for _ in range(12):
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Trainer):
                return candidate
            frame = frame.f_back
    finally:
        del frame
    return None


def _dataset_source(dataset: Any) -> str | None:
    """The folder of an Arrow dataset (what `datasets.load_from_disk` reads), if it has one."""
    files = getattr(dataset, "cache_files", None)
    if (
        isinstance(files, list)
        and files
        and isinstance(files[0], dict)
        and files[0].get("filename")
    ):
        return str(Path(files[0]["filename"]).parent)
    return None


def _hf_config(
    args: TrainingArguments, state: TrainerState, trainer: Any, sampler: str | None
) -> dict[str, Any]:
    """The TrainingArguments that matter to forensics under their canonical spellings."""
    precision = "bf16" if args.bf16 else "fp16" if args.fp16 else None
    clip = args.max_grad_norm if args.max_grad_norm and args.max_grad_norm > 0 else None
    out: dict[str, Any] = {
        "peak_lr": args.learning_rate,
        "beta1": args.adam_beta1,
        "beta2": args.adam_beta2,
        "eps": args.adam_epsilon,
        "weight_decay": args.weight_decay,
        "grad_clip": clip,
        "seed": args.seed,
        "micro_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "world_size": args.world_size,
        "total_steps": state.max_steps or None,
        "lr_scheduler_type": str(args.lr_scheduler_type),
        "warmup_steps": args.warmup_steps if isinstance(args.warmup_steps, int) else None,
        "data": {
            "seed": args.data_seed if args.data_seed is not None else args.seed,
            "sampler": sampler,
            "train_dataset": _dataset_source(getattr(trainer, "train_dataset", None)),
            "dataloader_drop_last": args.dataloader_drop_last,
        },
    }
    if precision:
        out["precision"] = precision
    if not math.isfinite(float(out["peak_lr"])):
        out["peak_lr"] = str(out["peak_lr"])
    return {k: v for k, v in out.items() if v is not None}
