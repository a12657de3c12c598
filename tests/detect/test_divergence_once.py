"""One incident per divergence: what a diverged run does afterwards is the same incident."""

from __future__ import annotations

import numpy as np
from detect_helpers import curve

from forensics.detect import detect_data, run_data


def test_nans_long_after_a_divergence_are_not_a_second_incident(frame, rules) -> None:  # type: ignore[no-untyped-def]
    n = 5000
    loss = curve(n, seed=3)
    t = np.arange(n)
    loss = loss * np.where(t >= 2000, 1 + np.minimum(1.0, (t - 2000) / 300) * 1.5, 1.0)
    loss[4200:] = np.nan  # the run ends in NaN 2,000 steps (4 recovery windows) later
    grad = 0.3 * np.exp(np.random.default_rng(3).normal(0, 0.05, n))
    grad[4200:] = np.nan
    det = detect_data(run_data(frame(loss, grad_norm=grad), {"beta2": 0.95}, "d"), rules)
    assert len(det.incidents) == 1, [(i.onset_step, i.type, i.origin) for i in det.incidents]
    (inc,) = det.incidents
    assert inc.type == "divergent" and 1990 <= inc.onset_step <= 2100
    assert any(e.kind == "nonfinite_loss" for e in inc.events)  # the NaNs are its evidence
