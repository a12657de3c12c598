"""Types by recovery shape: recoverable / lingering / divergent, as a user would check them."""

from __future__ import annotations

import numpy as np
import pytest
from detect_helpers import curve, spike

from forensics.detect import DetectConfig, detect_data, run_data
from forensics.detect.data import Metric
from forensics.detect.typing import fit_trend, type_shape, window_steps

CFG = DetectConfig()


def _only(frame, rules):  # type: ignore[no-untyped-def]
    det = detect_data(run_data(frame, {}, "t"), rules)
    assert len(det.incidents) == 1, [(i.onset_step, i.peak_step) for i in det.incidents]
    return det.incidents[0]


def test_recoverable_spike_returns_within_the_window(frame, rules) -> None:  # type: ignore[no-untyped-def]
    inc = _only(frame(spike(curve(4000), 2500, 0.6, 20)), rules)
    assert inc.type == "recoverable"
    assert inc.onset_step == 2501 and inc.peak_step == 2501
    assert inc.end_step is not None and 2501 < inc.end_step < 2501 + 200
    assert inc.post_value == pytest.approx(inc.pre_value, rel=0.05)


def test_lingering_spike_settles_above_the_tolerance(frame, rules) -> None:  # type: ignore[no-untyped-def]
    inc = _only(frame(spike(curve(4000), 2500, 0.6, 30, offset=0.1)), rules)
    assert inc.type == "lingering" and inc.end_step is None
    assert 0.05 < inc.shape.settle_excess < 0.15


def test_divergent_when_the_loss_turns_nan_for_good(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = spike(curve(4000), 2500, 0.8, 1000)
    loss[2700:] = np.nan
    inc = _only(frame(loss), rules)
    assert inc.type == "divergent" and inc.shape.nonfinite_for_good
    assert inc.peak_step == 2701 and np.isnan(inc.peak_value)


def test_divergent_when_the_loss_stays_far_above_until_the_end(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = curve(4000)
    loss[2500:] *= np.exp(np.minimum(1.0, np.arange(1500) / 200))
    inc = _only(frame(loss), rules)
    assert inc.type == "divergent"


def test_sparse_logs_widen_the_window_to_five_points() -> None:
    assert window_steps(CFG, 1) == 500
    assert window_steps(CFG, 500) == 2500


def test_a_log_every_500_steps_still_types(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = curve(60, noise=0.005)
    loss[40] *= 1.8
    inc = _only(frame(loss, every=500), rules)
    assert inc.type == "recoverable" and inc.end_step == 41 * 500 + 1


def test_run_ending_inside_the_window_is_said(frame, rules) -> None:  # type: ignore[no-untyped-def]
    inc = _only(frame(spike(curve(2600), 2500, 0.6, 20, offset=0.1)), rules)
    assert inc.type == "lingering" and not inc.shape.window_closed
    assert any("before the recovery window closed" in n for n in inc.shape.notes)


def test_trend_slope_is_clamped_to_falling() -> None:
    steps = np.arange(1, 2001)
    rising = np.log(2.0 + steps / 1000)
    assert fit_trend(steps, rising, 2000, CFG).slope == 0.0
    falling = np.log(3.0 * steps**-0.1)
    assert fit_trend(steps, falling, 2000, CFG).slope == pytest.approx(-0.1, abs=0.01)


def test_noise_widens_the_tolerance() -> None:
    steps = np.arange(1, 3001)
    x = np.log(curve(3000, noise=0.06, seed=3))
    trend = fit_trend(steps, x, 2000, CFG)
    shape = type_shape(Metric(steps, np.exp(x)), trend, 2000, 0.06, 1.0, CFG)
    assert shape.type == "recoverable" and shape.tolerance > CFG.tolerance


def test_a_history_too_short_for_a_slope_is_level() -> None:
    """A fine-tune whose start-up ended only after its second epoch's drop (third generator,
    seed 16700016: burn-in at step 185, a garbage batch at 194) leaves 9 points to fit. A
    3% fall across them fits a slope of -0.8 in log-log, which extrapolated 500 steps cuts
    the loss to a third (in that run the recovered spike read lingering, 123% above its
    "trend"). Over less than ~20% of the step count a slope is noise; the trend is held
    level."""
    steps = np.arange(1, 194)
    x = np.log(np.where(steps < 185, 3.2, 2.8 * (1 - 0.004 * (steps - 185))))
    usable = steps >= 185
    trend = fit_trend(steps, x, 194, CFG, usable)
    assert trend.slope == 0.0
    assert trend.value_at(694) == pytest.approx(float(np.exp(np.median(x[-4:]))), rel=0.01)
    # a span long enough to measure one keeps its slope
    assert fit_trend(steps, np.log(3.0 * steps**-0.1), 194, CFG).slope == pytest.approx(
        -0.1, abs=0.01
    )
    # after an earlier incident, the curve's slope is the one that incident was judged on
    # (the points since it only give the level)
    before = fit_trend(steps, np.log(3.0 * steps**-0.1), 150, CFG)
    after = fit_trend(steps, x, 194, CFG, usable, before=before)
    assert after.slope == before.slope and after.level == trend.level
