"""The learning rate a run's config implies at a step, for runs that do not log the LR.

Where the LR is in the log the detector reads it there. Many runs log only the loss (and
perhaps the grad norm) but keep their config: HF `training_args.json`
(`learning_rate`, `warmup_steps` / `warmup_ratio`, `lr_scheduler_type`, `max_steps`),
Megatron's arguments (`lr`, `min_lr`, `lr_warmup_iters`, `lr_decay_style`,
`lr_decay_iters` / `train_iters`). The shapes those frameworks compute are computed here,
as a fraction of the peak LR, so that the LR phase (warm-up, peak, decay) is known:

- warm-up: linear from 0 to the peak over `warmup_steps` (HF, Megatron and nanoGPT alike);
- constant: the peak after warm-up;
- cosine / linear: from the peak at the end of warm-up to `min_lr` (0 when not set) at
  `lr_decay_steps` (else `total_steps`), held there after;
- inverse_sqrt: peak * sqrt(warmup / step) after warm-up;
- wsd (warm-up, stable, decay): the peak through the stable phase; its decay length is not
  in the canonical config, so only the first half of the run is called stable.

Unknown schedule, no warm-up length or no run length (where the shape needs it): None,
and the LR phase stays unknown rather than guessed.

Checked against what real writers logged (tests/detect/test_config_schedule.py): the HF
Trainer logs at step s the LR its update s used, the schedule at s - 1 (one step is
immaterial to a phase); Megatron's scheduler does not advance on an iteration its fp16
scaler skipped, so the detector takes the logged skipped iterations off the step first
(features._schedule_step).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from forensics.detect.data import RunData, number

# WSD decays in its last 10-20% (MiniCPM: 10%); a step in the first half is surely stable.
WSD_SURELY_STABLE = 0.5


def schedule_step(data: RunData, step: int) -> float:
    """The step the LR scheduler has reached: Megatron does not advance it on an iteration
    its fp16 scaler skipped, so the skipped iterations logged before `step` are taken off."""
    if not data.has("skipped_iters"):
        return float(step)
    m = data.aux["skipped_iters"]
    before = m.values[(m.steps <= step) & np.isfinite(m.values)]
    return float(step - before.sum())


def config_lr_frac(step: float, config: Mapping[str, object]) -> float | None:
    """LR at `step` / the peak LR, from the config's schedule (None when not computable)."""
    warm = number(config.get("warmup_steps"))
    kind = config.get("lr_schedule")
    if warm is None or kind is None:
        return None
    if step < warm:
        return max(step, 0.0) / warm if warm > 0 else 1.0
    if kind == "constant":
        return 1.0
    if kind == "inverse_sqrt":
        return math.sqrt(warm / step) if warm > 0 and step > 0 else 1.0
    total = number(config.get("lr_decay_steps")) or number(config.get("total_steps"))
    if total is None or total <= warm:
        return None
    p = min(1.0, (step - warm) / (total - warm))
    if kind == "wsd":
        return 1.0 if p <= WSD_SURELY_STABLE else None
    peak, low = number(config.get("peak_lr")), number(config.get("min_lr"))
    floor = low / peak if low is not None and peak else 0.0
    if kind == "cosine":
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))
    if kind == "linear":
        return 1 - (1 - floor) * p
    return None
