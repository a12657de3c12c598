"""Mechanisms added after the accuracy suite's error analysis: each test pins one of them on
a hand-built series (see docs/detection.md for the definitions)."""

from __future__ import annotations

import numpy as np
import polars as pl
from detect_helpers import curve, spike

from forensics.detect import DetectConfig, detect_data, run_data
from forensics.detect.screen import screen_series

CFG = DetectConfig()


def _flagged(loss: np.ndarray) -> list[int]:
    steps = np.arange(1, len(loss) + 1)
    return [int(s) for s in steps[screen_series(steps, loss, CFG).flagged]]


def test_a_spike_right_after_a_degenerate_batch_needs_fewer_sigmas() -> None:
    # +22% is ~5 sigmas of 3% noise: not a spike on its own, but it is one after a batch
    # whose loss is half the trend (the data-corruption pair: dip, then spike)
    loss = curve(3000, noise=0.03)
    loss[2001] *= 1.22
    assert _flagged(loss) == []
    loss[2000] *= 0.5
    assert _flagged(loss) == [2002]


def test_a_recovered_spike_stays_recoverable_when_the_run_ends_in_nan_later(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = spike(curve(5000), 1500, 0.6, 20)
    loss[4000:] = np.nan
    det = detect_data(run_data(frame(loss), {}, "t"), rules)
    first = next(i for i in det.incidents if i.peak_step == 1501)
    assert first.type == "recoverable" and first.end_step is not None
    assert any(i.type == "divergent" and i.onset_step >= 4000 for i in det.incidents)


def test_a_nan_with_a_noisy_neighbour_is_still_isolated(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = curve(4000, noise=0.01)
    loss[2000] = np.nan
    loss[1999] *= np.exp(0.035)  # 3.5 sigmas: noise, not an excursion
    (inc,) = detect_data(run_data(frame(loss), {"precision": "bf16"}, "t"), rules).incidents
    assert inc.features["isolated_nonfinite"] == 1.0
    assert inc.cause == "hardware_fault"


def test_beta2_is_read_from_the_early_decay_of_v_not_a_drifting_tail(rules) -> None:  # type: ignore[no-untyped-def]
    # v still falls (and flattens) before the jump: a straight line through its last 100
    # steps undershoots later on, and a fit of the whole decay read 0.997 for a 0.98 decay
    t = np.arange(1, 4001, 10).astype(float)
    base = 3.5e-7 + 4e-7 * np.exp(-(t - 2000) / 200)
    v = base + np.where(t >= 2500, 5e-7 * 0.98 ** (t - 2500), 0.0)
    loss = spike(curve(len(t), noise=0.01), 250, 0.6, 3)
    frame = pl.DataFrame({"step": t.astype(int), "loss": loss, "adam_v_mean": v})
    (inc,) = detect_data(run_data(frame, {}, "v"), rules).incidents
    assert abs(inc.features["beta2_eff"] - 0.98) < 0.003  # type: ignore[operator]
    assert inc.cause != "stale_beta2"


def test_a_spike_recurring_while_the_lr_is_still_high_is_lr_too_high(rules) -> None:  # type: ignore[no-untyped-def]
    n = 4000
    rng = np.random.default_rng(1)
    t = np.arange(1, n + 1, dtype=float)
    lr = np.minimum(1.0, t / 1000) * np.where(t < 2600, 1.0, 0.3)
    grad = 0.5 * np.exp(rng.normal(0, 0.05, n)) * (1 + 2 * np.clip((t - 700) / 300, 0, 1) ** 2)
    loss = curve(n, seed=1)
    for at, g in ((1000, 10.0), (1700, 1.5), (3200, 1.5)):
        loss = spike(loss, at, 0.5, 15)
        grad[at] *= g
    frame = pl.DataFrame({"step": t.astype(int), "loss": loss, "grad_norm": grad, "lr": lr})
    first, again, later = detect_data(run_data(frame, {"beta2": 0.95}, "lr"), rules).incidents
    assert first.cause == "lr_too_high"  # drift of the gradient norm at the end of warm-up
    assert again.features["lr_vs_earlier_lr_too_high"] == 1.0
    assert again.cause == "lr_too_high" and again.confidence == 0.65  # no drift of its own
    assert later.features["lr_vs_earlier_lr_too_high"] == 0.3  # the LR was cut: not evidence
    assert later.cause == "unknown"
