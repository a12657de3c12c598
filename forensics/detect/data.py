"""The run's metrics as per-metric numpy arrays: what detection reads, nothing else.

Each metric keeps only the steps where it was logged (NULL = not logged is dropped) but
keeps NaN and Inf: those are evidence. Working on arrays, not frames, keeps the screen
vectorised and the per-incident code simple.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from forensics.detect.vocab import EVIDENCE_SOURCES

# Metrics detection looks at; the first present of LOSS_METRICS is screened for spikes.
LOSS_METRICS = ("loss", "val_loss")
AUX_METRICS = (
    "grad_norm",
    "lr",
    "loss_scale",
    "skipped_iters",
    "nan_iters",
    "overflow",
    "param_norm",
    "update_norm",
    "adam_v_mean",
    "tokens_per_s",
    "consumed_tokens",
    "iter_time_ms",
    "iter_time_s",
    "epoch",  # where an epoch begins the loss may step down (typing.fit_trend's `shifts`)
)
# The metrics the cause rules read: what "not logged" is reported against.
CAUSE_METRICS = ("grad_norm", "lr", "loss_scale", "skipped_iters", "param_norm", "adam_v_mean")


@dataclass
class Metric:
    """One metric: the steps it was logged at (ascending) and its values there."""

    steps: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.steps)

    def window(self, lo: float, hi: float) -> np.ndarray:
        """Values logged at lo <= step <= hi."""
        return self.window_steps(lo, hi)[1]

    def window_steps(self, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        a = np.searchsorted(self.steps, lo, side="left")
        b = np.searchsorted(self.steps, hi, side="right")
        return self.steps[a:b], self.values[a:b]

    def at_or_before(self, step: float) -> float | None:
        i = int(np.searchsorted(self.steps, step, side="right")) - 1
        return float(self.values[i]) if i >= 0 else None


@dataclass
class RunData:
    """Everything detection needs about one run."""

    run_id: str
    loss_name: str
    loss: Metric
    aux: dict[str, Metric] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    wall: Metric | None = None
    # (step, kind, detail) rows of the store's `events` table
    events: list[tuple[int | None, str, str]] = field(default_factory=list)
    # the store holds the token ids of the run's batches (a manifest): replay can tell
    # rare tokens from corrupt data
    has_batches: bool = False

    @property
    def first_step(self) -> int:
        return int(self.loss.steps[0]) if len(self.loss) else 0

    @property
    def last_step(self) -> int:
        """Last step any metric or logged event was at: the run's end as far as the logs know
        (detectron2 raises `Loss became infinite or NaN at iteration=2137!` after its last
        metric line, at 2119: the divergence that ends the run reaches 2137)."""
        ends = [int(m.steps[-1]) for m in (self.loss, *self.aux.values()) if len(m)]
        ends += [int(s) for s, _, _ in self.events if s is not None]
        return max(ends) if ends else 0

    @property
    def interval(self) -> float:
        """Median step gap of the loss log (1 when every step is logged)."""
        if len(self.loss) < 2:
            return 1.0
        return float(max(1.0, np.median(np.diff(self.loss.steps))))

    def has(self, name: str) -> bool:
        return name in self.aux and len(self.aux[name]) > 0

    def logged_lr(self) -> Metric | None:
        """The logged LR when it is a schedule: three finite points or more. A value printed
        once (DeepSpeed's `step=0, skipped=0, lr=[3e-05]` line before its scheduler stepped)
        read as an LR held for the whole run, "constant", in a WarmupDecayLR run."""
        if not self.has("lr"):
            return None
        lr = self.aux["lr"]
        return lr if np.isfinite(lr.values).sum() >= MIN_LR_POINTS else None

    def lr_covers(self, step: float) -> bool:
        """Whether the logged LR says where the schedule was at `step`: it is a schedule
        (logged_lr) and `step` is no further past its last finite point than two of their
        intervals. Elsewhere the config's schedule, if any, says it."""
        lr = self.logged_lr()
        if lr is None:
            return False
        st = lr.steps[np.isfinite(lr.values)]
        return bool(step <= st[-1] + 2 * float(np.median(np.diff(st))))

    def missing(self, names: tuple[str, ...] = CAUSE_METRICS) -> list[str]:
        """Cause metrics not logged (the loss scale only counts when the run may be fp16)."""
        skip = {"loss_scale", "skipped_iters"} if self._not_fp16() else set()
        return [n for n in names if not self.has(n) and n not in skip]

    def evidence_sources(self) -> set[str]:
        """The EVIDENCE_SOURCES this run has (logged metrics, config values, batches)."""
        out = {n for n in EVIDENCE_SOURCES if self.has(n)}
        if self.has("grad_norm") and _interval(self.aux["grad_norm"]) <= 1:
            out.add("grad_norm_every_step")  # else a batch's one-step gradient can fall between
        for key, name in (("beta2", "beta2"), ("precision", "precision")):
            if self.config.get(key) not in (None, ""):
                out.add(name)
        if self.config.get("peak_lr") is not None and self.config.get("warmup_steps") is not None:
            out.add("lr")
        if self.has("overflow"):
            out.add("skipped_iters")
        if self.has_batches:
            out.add("batch_tokens")
        return out

    def _not_fp16(self) -> bool:
        p = str(self.config.get("precision") or "").lower()
        return p in ("bf16", "fp32", "fp8")


# A logged LR of fewer points is a value printed once or twice, not a schedule (lr_covers).
MIN_LR_POINTS = 3

# A logged LR that first reaches its top this late (share of its points) after a rise has
# not shown its peak: the log ends while it still climbs (logged_lr_top).
LR_TOP_TAIL = 0.05


def logged_lr_top(lr: Metric, near: float) -> tuple[float, int] | None:
    """The highest logged LR and the first step at `near` x it, or None when the log ends
    while the LR still climbs: LLaMA-Adapter#144 prints `lr: 0.000010` at the last two of
    94 lines, every earlier line lower, and the schedule's peak lies past the log (a page
    said "the LR first reached its peak at step 950" of a log ending at 960)."""
    ok = np.isfinite(lr.values)
    if not ok.any():
        return None
    st, v = lr.steps[ok], lr.values[ok]
    top = float(v.max())
    first = int(np.argmax(v >= near * top))
    climbing = float(v[0]) < near * top and first >= (1 - LR_TOP_TAIL) * (len(v) - 1) > 0
    return None if climbing else (top, int(st[first]))


def number(v: object) -> float | None:
    """A finite float from a config value, else None."""
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def _interval(m: Metric) -> float:
    return float(np.median(np.diff(m.steps))) if len(m) > 1 else 1.0


def _metric(frame: pl.DataFrame, name: str) -> Metric:
    sub = frame.select("step", name).filter(pl.col(name).is_not_null())
    return Metric(sub["step"].to_numpy().astype(np.int64), sub[name].to_numpy().astype(float))


def run_data(
    frame: pl.DataFrame,
    config: dict[str, Any] | None = None,
    run_id: str = "run",
    events: list[tuple[int | None, str, str]] | None = None,
) -> RunData:
    """Build RunData from a wide frame (step, wall_time, one column per canonical metric)."""
    frame = frame.sort("step")
    loss_name = next((m for m in LOSS_METRICS if m in frame.columns), None)
    if loss_name is None:
        loss = Metric(np.zeros(0, np.int64), np.zeros(0))
        loss_name = "loss"
    else:
        loss = _metric(frame, loss_name)
    aux = {m: _metric(frame, m) for m in AUX_METRICS if m in frame.columns}
    wall = _metric(frame, "wall_time") if "wall_time" in frame.columns else None
    return RunData(run_id, loss_name, loss, aux, dict(config or {}), wall, list(events or []))
