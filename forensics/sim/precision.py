"""Mixed precision the way Megatron/DeepSpeed do it: a half-precision compute copy of the model,
fp32 master weights in the optimizer, and (fp16 only) a dynamic loss scaler.

Why a full half copy instead of autocast: with autocast the residual stream stays fp32, so an
fp16 run could never overflow the way real fp16 runs did (activations past 65504). Here every
activation is stored in the compute dtype; RMSNorm and the loss still reduce in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def compute_dtype(precision: str) -> torch.dtype:
    """torch dtype of the forward/backward for a precision name."""
    assert precision in DTYPES, f"precision must be one of {sorted(DTYPES)}, not {precision!r}"
    return DTYPES[precision]


@dataclass
class LossScaler:
    """Dynamic loss scaler (DeepSpeed DynamicLossScaler semantics, hysteresis 1).

    The loss is multiplied by `scale` before backward. When any gradient is non-finite the
    step is skipped and the scale halved (not below `min_scale`); after `window` consecutive
    good steps it doubles. Disabled (scale 1, never changes) for fp32/bf16.
    """

    enabled: bool = False
    scale: float = 2.0**16
    window: int = 1000
    min_scale: float = 1.0
    good_steps: int = 0

    @property
    def factor(self) -> float:
        """What to multiply the loss by."""
        return self.scale if self.enabled else 1.0

    def update(self, finite: bool) -> None:
        """Record one step's outcome: halve on overflow, grow after a clean window."""
        if not self.enabled:
            return
        if not finite:
            self.scale = max(self.scale / 2.0, self.min_scale)
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps >= self.window:
            self.scale *= 2.0
            self.good_steps = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "scale": self.scale,
            "window": self.window,
            "min_scale": self.min_scale,
            "good_steps": self.good_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.enabled = bool(state["enabled"])
        self.scale = float(state["scale"])
        self.window = int(state["window"])
        self.min_scale = float(state["min_scale"])
        self.good_steps = int(state["good_steps"])
