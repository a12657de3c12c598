"""A tiny model trained by the real Hugging Face Trainer (the [hf] extra), for tests of what
the Trainer writes: trainer_state.json, training_args.bin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import Trainer, TrainingArguments

STEPS = 60


class Regressor(nn.Module):
    """A linear model on noisy targets (its loss settles near the noise's variance, far from
    0); from forward call `nan_from` on its loss and gradients are NaN (the weights follow);
    at the calls in `nan_at` only the loss value is NaN."""

    def __init__(self, nan_from: int | None, nan_at: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.w = nn.Linear(8, 16)
        self.calls, self.nan_from, self.nan_at = 0, nan_from, set(nan_at)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        loss = nn.functional.mse_loss(self.w(x), labels)
        if self.nan_from is not None and self.calls >= self.nan_from:
            loss = loss * float("nan")  # NaN gradients too: the weights turn NaN
        elif self.calls in self.nan_at:
            loss = loss + float("nan")  # the value only: the update stays finite
        return {"loss": loss}


def train(folder: Path, model: nn.Module, logging_steps: int = 1, **schedule: Any) -> Path:
    """Train `model` with the real Trainer; return the final checkpoint's trainer_state.json.
    `schedule` overrides the constant LR (lr_scheduler_type, warmup_steps, ...)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS * 32, 8, generator=g)  # 32 rows x 16 targets: a steady loss
    y = x @ torch.randn(8, 16, generator=g) + 2.0 * torch.randn(STEPS * 32, 16, generator=g)
    rows = [{"x": a, "labels": b} for a, b in zip(x, y, strict=True)]
    args = TrainingArguments(
        output_dir=str(folder), max_steps=STEPS, per_device_train_batch_size=32,
        logging_steps=logging_steps, save_strategy="steps", save_steps=STEPS, report_to=[],
        disable_tqdm=True, use_cpu=True, seed=0, learning_rate=1e-2,
        **({"lr_scheduler_type": "constant"} | schedule),
    )  # fmt: skip
    torch.manual_seed(0)
    Trainer(model=model, args=args, train_dataset=rows).train()
    return folder / f"checkpoint-{STEPS}" / "trainer_state.json"
