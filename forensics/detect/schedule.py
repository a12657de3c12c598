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
- inverse_sqrt: peak * sqrt(warmup / step) after warm-up (at least `min_lr` where
  `lr_floor_clamp` says the scheduler clamps there: NeMo's NoamAnnealing);
- polynomial: from the peak to `min_lr` as (1 - p)^`lr_decay_power` (NeMo's
  PolynomialDecayAnnealing);
- sqrt_annealing: sqrt((total - step) / total), counted from step 0, clamped at `min_lr`
  (NeMo's SquareRootAnnealing);
- wsd (warm-up, stable, decay): the peak through the stable phase, then a decay over the
  last `lr_wsd_decay_steps` of the decay length shaped `lr_wsd_decay_shape` (linear, cosine,
  sqrt: 1 - sqrt, exponential: 2 x 0.5^q - 1) to `min_lr` (torchtitan's decay_ratio,
  Megatron's lr_wsd_decay_iters and lr_wsd_decay_style); without that length only the
  first half of the run is called stable;
- a warm-up `lr_warmup_shape: log` (DeepSpeed's default) rises as log(step + 1) / log(warm-up);
  one with an `lr_warmup_start` (DeepSpeed's warmup_min_lr, or WarmupCosineLR's
  warmup_min_ratio x lr) rises from that LR, not from 0: start + (peak - start) x the shape.

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
        start = _share(config.get("lr_warmup_start"), config)
        return start + (1 - start) * _warmup_frac(step, warm, config.get("lr_warmup_shape"))
    if kind == "constant":
        return 1.0
    floor = _share(config.get("min_lr"), config)
    if kind == "inverse_sqrt":
        frac = math.sqrt(warm / step) if warm > 0 and step > 0 else 1.0
        return max(frac, floor) if config.get("lr_floor_clamp") else frac
    total = number(config.get("lr_decay_steps")) or number(config.get("total_steps"))
    if total is None or total <= warm:
        return None
    if kind == "sqrt_annealing":
        return max(math.sqrt(max(0.0, (total - step) / total)), floor)
    p = min(1.0, (step - warm) / (total - warm))
    if kind == "wsd":
        return _wsd_frac(step, total, p, floor, config)
    if kind == "cosine":
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))
    if kind == "linear":
        return 1 - (1 - floor) * p
    power = number(config.get("lr_decay_power"))
    if kind == "polynomial" and power is not None and power > 0:
        return floor + (1 - floor) * (1 - p) ** power
    return None


def _share(lr: object, config: Mapping[str, object]) -> float:
    """An LR of the config as a fraction of its peak LR; 0 when either is unknown."""
    value, peak = number(lr), number(config.get("peak_lr"))
    return value / peak if value is not None and peak else 0.0


def _warmup_frac(step: float, warm: float, shape: object) -> float:
    """Linear from 0, or DeepSpeed's `warmup_type: log` (its default): log(step + 1) /
    log(warmup), which is most of the way up after a tenth of the warm-up."""
    if warm <= 0:
        return 1.0
    if shape == "log":
        return math.log(max(step, 0.0) + 1) / math.log(warm) if warm > 1 else 1.0
    return max(step, 0.0) / warm


# WSD decay shapes (torchtitan's decay_type): the share of the way from the peak to the floor.
_WSD_SHAPES = {
    "linear": lambda q: 1 - q,
    "cosine": lambda q: 0.5 * (1 + math.cos(math.pi * q)),
    "sqrt": lambda q: 1 - math.sqrt(q),
    "exponential": lambda q: 2 * 0.5**q - 1,  # Megatron's
}


def _wsd_frac(
    step: float, total: float, p: float, floor: float, config: Mapping[str, object]
) -> float | None:
    """WSD: the peak until its decay, which spans the last `lr_wsd_decay_steps` (torchtitan's
    decay_ratio x steps). Without that length only the run's first half is surely stable."""
    decay = number(config.get("lr_wsd_decay_steps"))
    if decay is None or decay <= 0:
        return 1.0 if p <= WSD_SURELY_STABLE else None
    q = (step - (total - decay)) / decay
    if q <= 0:
        return 1.0
    shape = _WSD_SHAPES.get(str(config.get("lr_wsd_decay_shape")))
    return None if shape is None else floor + (1 - floor) * shape(min(q, 1.0))
