"""The expected type of an injected incident, judged against the run's clean twin.

The twin is the same run (same seed, data and config) without the fault, so whatever the
loss does differently is the fault's doing. The incident is typed by detection's own
recovery-window rule, `forensics.detect.typing.type_shape`, imported, not copied; the only
difference is the baseline. Detection must extrapolate a pre-spike trend; the simulator
knows where the loss would have been, the twin's loss (its forward median over the same
`smooth_points` points the rule smooths the faulted loss with). Window, tolerance,
"first point back and the median from it", lingering and divergent: all as detection does
it (docs/definitions.md). Where detection's verdict still differs, its trend extrapolation
is what differs, and `forensics demo` marks the run with a ≠.

A scenario whose fault is a trigger and an amplifier (stale_beta2: a rare-band burst and a
stale beta2) also has a *fixed* run: restarted from the checkpoint before the injection
with the amplifier fixed, the trigger kept (`fixed_loss`). The share of the damage it
removes (the loss above the same run without the trigger, batch for batch) decides whether
the amplifier is the incident's root cause, the fix that prevents it (simulate.attribute).

Twins are cached: a sibling run folder of scenario `clean` with the same config (the
`ckpt_steps` aside, which do not change training) is the twin; otherwise the twin's loss
is trained once and kept in `<parent>/.twins/<config hash>.jsonl`.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from forensics.detect.config import DetectConfig
from forensics.detect.data import Metric
from forensics.detect.screen import robust_sigma
from forensics.detect.typing import Shape, Trend, forward_median, type_shape
from forensics.sim.data import prepare_data
from forensics.sim.run import CONFIG, METRICS, read_metrics, train_run
from forensics.sim.trainer import TrainConfig, resume, train_steps

TWINS = ".twins"


@dataclass(frozen=True, eq=False)
class TwinCurve(Trend):
    """A `Trend` whose value at a step is the twin's smoothed log-loss there, so that
    `type_shape` measures the faulted run against the run without the fault."""

    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    x: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def at(self, steps: np.ndarray | float) -> np.ndarray:
        return np.asarray(np.interp(steps, self.steps, self.x))


def config_hash(cfg: TrainConfig) -> str:
    """Hash of everything that changes training (checkpoint steps do not)."""
    data = {k: v for k, v in cfg.to_dict().items() if k != "ckpt_steps"}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _loss_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"step": r["step"], "loss": r["loss"]} for r in rows]


def _sibling_clean(parent: Path, key: str, exclude: Path) -> Path | None:
    """A run folder beside `exclude` that is a clean run with the twin's config."""
    if not parent.is_dir():
        return None
    for run in sorted(parent.iterdir()):
        if run.resolve() == exclude.resolve() or not (run / METRICS).is_file():
            continue
        try:
            truth = json.loads((run / "truth.json").read_text())
            cfg = TrainConfig.from_dict(json.loads((run / CONFIG).read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if truth.get("scenario") == "clean" and config_hash(cfg) == key:
            return run
    return None


def twin_loss(cfg: TrainConfig, run_dir: Path) -> tuple[list[dict[str, Any]], str]:
    """The twin's (step, loss) rows for a run with config `cfg` written to `run_dir`, and
    where they came from (a path relative to run_dir's parent, for truth.json)."""
    parent, key = Path(run_dir).parent, config_hash(cfg)
    sibling = _sibling_clean(parent, key, Path(run_dir))
    if sibling is not None:
        return _loss_rows(read_metrics(sibling)), f"{sibling.name}/{METRICS}"
    cached = parent / TWINS / f"{key}.jsonl"
    if cached.is_file():
        with cached.open() as f:
            return [json.loads(line) for line in f if line.strip()], f"{TWINS}/{key}.jsonl"
    with tempfile.TemporaryDirectory(prefix="forensics-twin-") as tmp:
        prepare_data(Path(tmp), cfg.model.vocab_size, cfg.data_tokens, cfg.data_seed)
        _, rows = train_run(replace(cfg, ckpt_steps=[]), Path(tmp))
    loss = _loss_rows(rows)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text("".join(json.dumps(r) + "\n" for r in loss))
    return loss, f"{TWINS}/{key}.jsonl"


def twin_curve(twin: list[dict[str, Any]], cfg: DetectConfig) -> TwinCurve:
    steps = np.array([r["step"] for r in twin], dtype=float)
    x = np.log(np.array([r["loss"] for r in twin], dtype=float))
    smooth = forward_median(x, cfg.smooth_points)
    return TwinCurve(float(smooth[0]), 0.0, float(steps[0]), len(x), steps=steps, x=smooth)


def twin_sigma(twin: list[dict[str, Any]], onset: int, cfg: DetectConfig) -> float:
    """The twin's noise scale before the onset, by detection's own estimator."""
    x = np.log(np.array([r["loss"] for r in twin], dtype=float))
    resid = x - forward_median(x, cfg.smooth_points)
    sig = robust_sigma(x, resid, cfg.scale_points)
    steps = np.array([r["step"] for r in twin])
    i = min(max(int(np.searchsorted(steps, onset)) - 1, 0), len(sig) - 1)
    return float(sig[i])


def expected_shape(
    rows: list[dict[str, Any]],
    twin: list[dict[str, Any]],
    onset: int,
    last_peak: int,
    cfg: DetectConfig | None = None,
) -> Shape:
    """Type the incident whose last peak is `last_peak` with detection's rule, the twin's
    loss standing in for the pre-spike trend."""
    cfg = cfg or DetectConfig()
    loss = Metric(
        np.array([r["step"] for r in rows], dtype=float),
        np.array([float(r["loss"]) for r in rows], dtype=float),
    )
    return type_shape(
        loss, twin_curve(twin, cfg), last_peak, twin_sigma(twin, onset, cfg), 1.0, cfg
    )


def typing_record(shape: Shape) -> dict[str, Any]:
    """The numbers behind the expected type, for truth.json (a reader can check them)."""

    def num(v: float | None) -> float | None:
        return None if v is None or not math.isfinite(v) else round(float(v), 4)

    return {
        "rule": "forensics.detect.typing.type_shape against the clean twin's loss",
        "recovery_step": shape.end_step,
        "settle_excess": num(shape.settle_excess),
        "tolerance": num(shape.tolerance),
        "window_steps": shape.window_steps,
        "notes": shape.notes,
    }


def fixed_loss(
    rows: list[dict[str, Any]], run_dir: Path, ckpt: int, until: int, fix: dict[str, Any]
) -> list[dict[str, Any]]:
    """The run with its amplifier fixed the way an engineer fixes it: restarted from the
    checkpoint after step `ckpt` with `fix` (stale_beta2: beta2 = 0.95), the same batches
    (trigger included) re-run through `until`; the logged rows up to `ckpt`."""
    state = resume(run_dir, ckpt, **fix)
    replayed = train_steps(state, until - ckpt)
    return _loss_rows([r for r in rows if r["step"] <= ckpt]) + _loss_rows(replayed)


def damage(rows: list[dict[str, Any]], base: list[dict[str, Any]], lo: int, hi: int) -> float:
    """Largest loss above `base` (the run without the trigger: the same batch at the same
    step) over the steps lo..hi, the echo an amplifier adds on ordinary batches (0 when none
    is above it). Same batches, so their own noise cancels; a non-finite loss counts as far
    above."""
    ref = {int(r["step"]): float(r["loss"]) for r in base}
    got = [(float(r["loss"]), ref[int(r["step"])]) for r in rows
           if lo <= r["step"] <= hi and int(r["step"]) in ref]  # fmt: skip
    if not got:
        return 0.0
    loss, b = np.array([v for v, _ in got]), np.array([v for _, v in got])
    loss = np.where(np.isfinite(loss), loss, 10 * b)
    return float(max(0.0, np.max(loss - b)))
