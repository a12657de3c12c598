"""Runs written by TensorBoard's own SummaryWriter, the way the HF Trainer's TensorBoard
callback logs them (`train/loss`, `train/grad_norm`, `train/learning_rate`, `args.json`
beside the events): one writer for the detect and report tests that shape a run's loss and
gradient norm step by step."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

PEAK_LR, WARMUP = 3e-4, 100


def ones(n: int) -> np.ndarray:
    """A multiplier that changes nothing (index = step, 0..n)."""
    return np.ones(n + 1)


def write_run(
    folder: Path,
    loss_x: np.ndarray,
    grad_x: np.ndarray,
    config: dict,
    *,
    interval: int = 1,
    seed: int = 0,
    grad: bool = True,
) -> Path:
    """Loss (the window's mean, as the HF Trainer logs it), the last step's grad norm (unless
    not `grad`) and the LR (linear warm-up to PEAK_LR over WARMUP steps) every `interval`
    steps for len(loss_x) - 1 steps; loss_x / grad_x multiply the clean loss / grad norm
    (index = step)."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(seed)
    window: list[float] = []
    with SummaryWriter(str(folder)) as w:
        for step in range(1, len(loss_x)):
            loss = (2.2 + 8.6 * (1 + step / 80) ** -0.6) * math.exp(rng.normal(0, 0.01))
            g = 0.8 * math.exp(rng.normal(0, 0.05)) * grad_x[step]
            window.append(loss * loss_x[step])
            if step % interval == 0:
                w.add_scalar("train/loss", float(np.mean(window)), step)
                if grad:
                    w.add_scalar("train/grad_norm", g, step)
                w.add_scalar("train/learning_rate", PEAK_LR * min(1.0, step / WARMUP), step)
                window = []
    (folder / "args.json").write_text(json.dumps(config))
    return folder
