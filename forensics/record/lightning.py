"""`ForensicsLightningCallback`: the recorder inside a PyTorch Lightning `Trainer`.

    trainer = L.Trainer(..., callbacks=[ForensicsLightningCallback()])
    trainer.fit(module, datamodule)      # writes <log_dir or default_root_dir>/forensics/

Lightning calls `on_before_optimizer_step` after the closure's backward (and, under AMP,
after unscaling) but before it clips, so the gradient norm there is the pre-clip one. The
optimizer step has no callback of its own: `on_train_batch_end` of the micro-batch that
moved `trainer.global_step` closes the step. The step loss is the mean of the micro-batches'
`training_step` losses. Sample indices are read from the train dataloader's sampler as it
yields them (per rank: Lightning gives each rank its own DistributedSampler).

`data_source`: where the training rows live, when the dataloader reads a
`datasets.save_to_disk` folder (or the caller's batches do not name a `source` themselves);
with it, `forensics analyze` rebuilds each batch from its sample indices and checks its hash.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from forensics.record.recorder import Recorder
from forensics.record.sampling import record_indices, sampler_name, take


class ForensicsLightningCallback(pl.Callback):  # type: ignore[misc]
    """Record the run under `run_dir` (default: the trainer's log_dir, else
    default_root_dir) in `forensics/`."""

    def __init__(
        self,
        run_dir: str | Path | None = None,
        *,
        log_every: int = 20,
        stats_every: int = 10,
        layers_every: int = 100,
        data_source: str | Path | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.data_source = str(Path(data_source).resolve()) if data_source else None
        self.settings: dict[str, Any] = {
            "log_every": log_every, "stats_every": stats_every, "layers_every": layers_every,
        }  # fmt: skip
        self.rec: Recorder | None = None
        self._losses: list[torch.Tensor] = []
        self._lr: float | None = None
        self._indices: deque[int] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        run_dir = Path(self.run_dir or trainer.log_dir or trainer.default_root_dir)
        self.rec = Recorder(run_dir, model=pl_module, framework="lightning",
                            step=trainer.global_step, **self.settings)  # fmt: skip
        if trainer.global_step == 0:
            self._indices = record_indices(trainer.train_dataloader)
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        clip = trainer.gradient_clip_val
        extra: dict[str, Any] = {
            "precision": str(trainer.precision),
            "grad_clip": float(clip) if clip else None,
            "gradient_accumulation_steps": trainer.accumulate_grad_batches,
            "total_steps": trainer.max_steps if trainer.max_steps > 0 else None,
            "data": {
                "sampler": sampler_name(trainer.train_dataloader),
                **({"train_dataset": self.data_source} if self.data_source else {}),
            },
        }
        self.rec.write_config(pl_module, optimizer, **{k: v for k, v in extra.items() if v})

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        if self.rec is None:
            return
        self.rec.after_backward(pl_module, scaler=_scaler(trainer))
        if optimizer.param_groups:
            self._lr = float(optimizer.param_groups[0]["lr"])

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.rec is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            self._losses.append(loss.detach().float().reshape(()))
        self.rec.record_batch(self._batch(batch))
        if trainer.global_step > self.rec.step:  # this micro-batch closed an optimizer step
            step_loss = torch.stack(self._losses).mean() if self._losses else None
            self.rec.after_step(
                pl_module, trainer.optimizers[0], step_loss, step=trainer.global_step,
                scaler=_scaler(trainer), lr=self._lr,
            )  # fmt: skip
            self._losses = []

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.rec is not None:
            self.rec.close()
            self.rec = None

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        """A run that dies (a NaN check, an OOM) keeps the steps since the last interval."""
        self.on_train_end(trainer, pl_module)

    def _batch(self, batch: Any) -> Any:
        """The micro-batch as the recorder reads it, with its sample indices when known."""
        fields: dict[str, Any]
        if isinstance(batch, dict):
            fields = dict(batch)
        elif isinstance(batch, tuple | list) and batch and isinstance(batch[0], torch.Tensor):
            fields = {"input_ids": batch[0]}
        elif isinstance(batch, torch.Tensor):
            fields = {"input_ids": batch}
        else:
            return batch
        ids = fields.get("input_ids")
        rows = int(ids.shape[0]) if isinstance(ids, torch.Tensor) and ids.dim() == 2 else 0
        indices = take(self._indices, rows)
        if indices is not None:
            fields.setdefault("sample_indices", indices)
        fields.setdefault("source", self.data_source or "train_dataloader")
        return fields


def _scaler(trainer: pl.Trainer) -> Any:
    return getattr(trainer.precision_plugin, "scaler", None)
