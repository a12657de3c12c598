"""The vectorised screen: candidates where the loss jumps, none on clean curves or start-up."""

from __future__ import annotations

import numpy as np
from detect_helpers import curve, spike

from forensics.detect import DetectConfig
from forensics.detect.screen import excursions, metric_spikes, screen_series

CFG = DetectConfig()


def _flagged_steps(loss: np.ndarray) -> list[int]:
    steps = np.arange(1, len(loss) + 1)
    sc = screen_series(steps, loss, CFG)
    return [int(s) for s in steps[sc.flagged]]


def test_clean_curves_raise_no_candidate() -> None:
    for seed in range(5):
        for noise in (0.003, 0.01, 0.03):
            assert _flagged_steps(curve(5000, noise=noise, seed=seed)) == []


def test_a_one_point_spike_is_a_candidate() -> None:
    loss = curve(3000)
    loss[2000] *= 1.5
    assert _flagged_steps(loss) == [2001]


def test_a_rise_below_the_floor_is_not_a_candidate() -> None:
    loss = curve(3000, noise=0.002)
    loss[2000] *= 1.10  # 50 sigmas but only +10%: under rise_min (+15%)
    assert _flagged_steps(loss) == []


def test_noise_scale_sets_the_bar() -> None:
    loss = curve(3000, noise=0.05)
    loss[2000] *= 1.2  # +20% is ~4 sigmas of this noise: not a spike
    assert 2001 not in _flagged_steps(loss)


def test_start_up_is_not_screened() -> None:
    loss = curve(3000)
    loss[10] *= 2.0  # a jump during the first points (fp16 scale search, warm-up)
    assert _flagged_steps(loss) == []


def test_a_slow_rise_is_caught_by_the_level_screen() -> None:
    loss = curve(3000, noise=0.005)
    ramp = np.clip((np.arange(3000) - 2000) / 300, 0, 1)
    flagged = _flagged_steps(loss * np.exp(0.4 * ramp))
    assert flagged and 2000 < flagged[0] < 2300


def test_excursions_group_nearby_flags() -> None:
    flags = np.zeros(20, dtype=bool)
    flags[[3, 4, 6, 15]] = True
    assert excursions(flags) == [(3, 6), (15, 15)]


def test_gradient_spikes_are_found_with_their_ratio() -> None:
    rng = np.random.default_rng(1)
    g = 0.3 * np.exp(rng.normal(0, 0.05, 3000))
    g[1500] = 3.0
    sp = metric_spikes(np.arange(1, 3001), g, 3.0, CFG, start_step=100)
    assert list(sp.steps) == [1501] and 8 < sp.ratio[0] < 12


def test_screen_is_linear_and_fast() -> None:
    import time

    loss = curve(200_000, noise=0.01)
    t = time.perf_counter()
    screen_series(np.arange(1, 200_001), spike(loss, 150_000, 0.5, 10), CFG)
    assert time.perf_counter() - t < 3.0
