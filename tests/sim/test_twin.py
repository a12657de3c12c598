"""The expected type of an injected incident is measured against the run's clean twin with
detection's own recovery-window rule, and the twin really is the run without the fault."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from forensics.detect.config import DetectConfig
from forensics.errors import SimulationError
from forensics.sim.run import read_metrics
from forensics.sim.scenarios import get_scenario
from forensics.sim.simulate import base_config, refresh, simulate
from forensics.sim.twin import TWINS, config_hash, expected_shape

STEPS = 1200


def _curve(n: int = STEPS, seed: int = 0) -> np.ndarray:
    """A pre-training-like loss: power law plus 1% multiplicative noise."""
    steps = np.arange(1, n + 1)
    rng = np.random.default_rng(seed)
    return 6.0 * steps**-0.15 * np.exp(0.01 * rng.standard_normal(n))


def _rows(loss: np.ndarray) -> list[dict]:
    return [{"step": i + 1, "loss": float(v)} for i, v in enumerate(loss)]


def test_spike_that_returns_to_the_twin_is_recoverable() -> None:
    twin = _curve()
    run = twin.copy()
    run[599:604] *= [3.0, 2.0, 1.5, 1.2, 1.1]
    shape = expected_shape(_rows(run), _rows(twin), onset=600, last_peak=600)
    assert shape.type == "recoverable" and shape.end_step is not None
    assert 601 <= shape.end_step <= 610


def test_a_level_that_stays_above_the_twin_is_lingering_even_if_it_falls() -> None:
    """Falling again is not recovering: 10% above the run without the fault is lingering
    (what a by-eye 'trend' test fooled by the falling curve would miss)."""
    twin = _curve()
    run = twin.copy()
    run[599] *= 3.0
    run[600:] *= 1.10
    shape = expected_shape(_rows(run), _rows(twin), onset=600, last_peak=600)
    assert shape.type == "lingering" and shape.end_step is None
    assert shape.settle_excess == pytest.approx(0.10, abs=0.02)


def test_nonfinite_to_the_end_is_divergent() -> None:
    twin = _curve()
    run = twin.copy()
    run[600:650] *= 1.5  # off the twin from the peak until the loss goes NaN
    run[650:] = math.nan
    shape = expected_shape(_rows(run), _rows(twin), onset=600, last_peak=600)
    assert shape.type == "divergent"


def test_back_on_the_twin_before_the_nan_is_recoverable() -> None:
    """Detection's rule: a spike the loss healed from before the run went NaN is recoverable,
    and the NaN is an incident of its own."""
    twin = _curve()
    run = twin.copy()
    run[600] *= 1.5
    run[650:] = math.nan
    shape = expected_shape(_rows(run), _rows(twin), onset=600, last_peak=600)
    assert shape.type == "recoverable" and shape.end_step == 602  # steps count from 1


def test_same_window_as_detection() -> None:
    """Back only after the recovery window closes: lingering, with detection's window."""
    cfg = DetectConfig()
    twin = _curve()
    run = twin.copy()
    late = 600 + cfg.recovery_window + 50
    run[600:late] *= 1.2
    shape = expected_shape(_rows(run), _rows(twin), onset=600, last_peak=600, cfg=cfg)
    assert shape.type == "lingering" and shape.window_steps == cfg.recovery_window
    wide = replace(cfg, recovery_window=cfg.recovery_window + 100)
    shape = expected_shape(_rows(run), _rows(twin), onset=600, last_peak=600, cfg=wide)
    assert shape.type == "recoverable" and shape.end_step == late + 1


def test_twin_config_removes_only_the_fault() -> None:
    base = base_config("tiny", 400, "cpu", 1337)
    for name in ("rare_tokens", "stale_beta2", "data_corruption", "hardware_fault"):
        scen = get_scenario(name)
        cfg = scen.configure(base, scen.default_at(base), scen.default_strength)
        assert config_hash(scen.twin_config(base, cfg)) == config_hash(base), name
    lr = get_scenario("lr_too_high")
    cfg = lr.configure(base, 100, 50.0)
    twin = lr.twin_config(base, cfg)
    assert (twin.peak_lr, twin.min_lr, twin.warmup_steps) == (base.peak_lr, base.min_lr, 100)
    fp16 = get_scenario("fp16_overflow")
    cfg = fp16.configure(base, 200, 3e5)
    assert fp16.twin_config(base, cfg).precision == "fp16"  # fp16 is the setting, not the fault


def test_twin_is_the_clean_run_and_is_trained_once(tmp_path: Path) -> None:
    kw = {"steps": 100, "device": "cpu", "plot": False}
    hw = simulate("hardware_fault", tmp_path / "hw", **kw)
    assert hw.truth["twin"].startswith(f"{TWINS}/")
    cached = tmp_path / hw.truth["twin"]
    twin = [json.loads(line)["loss"] for line in cached.read_text().splitlines()]
    simulate("clean", tmp_path / "clean", **kw)
    clean = [r["loss"] for r in read_metrics(tmp_path / "clean")]
    assert twin == clean  # same seed and config: the twin is the clean run, bit for bit
    again = simulate("rare_tokens", tmp_path / "rare", **kw)
    assert again.truth["twin"] == "clean/metrics.jsonl"  # a clean sibling is reused
    exp = again.truth["expected"][0]
    assert exp["type"] == "recoverable" and exp["typing"]["recovery_step"] is not None


def test_refresh_rewrites_truth_without_training(tmp_path: Path) -> None:
    kw = {"steps": 100, "device": "cpu", "plot": False}
    run = tmp_path / "rare"
    simulate("rare_tokens", run, **kw)
    metrics = (run / "metrics.jsonl").read_bytes()
    truth = json.loads((run / "truth.json").read_text())
    (run / "truth.json").write_text(json.dumps({**truth, "expected": []}))
    again = refresh(run, plot=False)
    assert again.truth == truth and (run / "metrics.jsonl").read_bytes() == metrics
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "peak_lr": 1.0}))
    with pytest.raises(SimulationError, match="not the config"):
        refresh(run, plot=False)
