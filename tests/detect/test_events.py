"""Events: the fp16 start-up search and routine halvings are normal; collapses, NaNs and
absurd gradients are incidents; clipped gradient spikes are near-misses."""

from __future__ import annotations

import numpy as np
from detect_helpers import curve, spike

from forensics.detect import detect_data, run_data


def _scale(n: int, halvings_at: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A loss scale that searches down from 2**32 in the first 12 steps, then holds 2**16
    except for the given halvings; skipped = 1 on every step whose scale dropped."""
    scale = np.full(n, 2.0**16)
    scale[:12] = 2.0 ** np.arange(32, 20, -1)
    skipped = np.zeros(n)
    skipped[:12] = 1
    for at, k in halvings_at.items():
        for j in range(k):
            scale[at + 3 * j :] /= 2
            skipped[at + 3 * j] = 1
    return scale, skipped


def test_start_up_search_and_routine_halvings_raise_nothing(frame, rules) -> None:  # type: ignore[no-untyped-def]
    scale, skipped = _scale(4000, {1500: 1, 2800: 1})
    f = frame(curve(4000), loss_scale=scale, skipped_iters=skipped)
    det = detect_data(run_data(f, {"precision": "fp16"}, "t"), rules)
    assert det.incidents == []


def test_scale_collapse_with_a_spike_is_fp16_overflow(frame, rules) -> None:  # type: ignore[no-untyped-def]
    scale, skipped = _scale(4000, {2490: 4})
    loss = spike(curve(4000), 2500, 0.9, 40)
    f = frame(loss, loss_scale=scale, skipped_iters=skipped)
    (inc,) = detect_data(run_data(f, {"precision": "fp16"}, "t"), rules).incidents
    assert inc.cause == "fp16_overflow" and inc.features["scale_halvings"] == 4
    assert inc.features["scale_drop"] == 16


def test_scale_collapse_alone_is_an_incident(frame, rules) -> None:  # type: ignore[no-untyped-def]
    scale, skipped = _scale(4000, {2490: 3})
    f = frame(curve(4000), loss_scale=scale, skipped_iters=skipped)
    (inc,) = detect_data(run_data(f, {"precision": "fp16"}, "t"), rules).incidents
    assert (inc.metric, inc.origin, inc.type, inc.cause) == (
        "loss_scale", "events", "recoverable", "fp16_overflow"
    )  # fmt: skip


def test_absurd_gradient_is_a_hardware_suspect(frame, rules) -> None:  # type: ignore[no-untyped-def]
    g = 0.3 * np.exp(np.random.default_rng(0).normal(0, 0.05, 4000))
    g[2500] = 3e6
    (inc,) = detect_data(run_data(frame(curve(4000), grad_norm=g), {}, "t"), rules).incidents
    assert (inc.metric, inc.cause, inc.peak_step) == ("grad_norm", "hardware_fault", 2501)


def test_clipped_gradient_spike_is_a_near_miss(frame, rules) -> None:  # type: ignore[no-untyped-def]
    g = 0.3 * np.exp(np.random.default_rng(0).normal(0, 0.05, 4000))
    g[2500] = 2.1  # 7x, the llm.c step-9025 shape
    det = detect_data(run_data(frame(curve(4000), grad_norm=g), {"grad_clip": 1.0}, "t"), rules)
    assert det.incidents == []
    (nm,) = det.near_misses
    assert nm.step == 2501 and 6 < nm.ratio < 8
    assert "above the clip at 1.0: clipping scaled that update down" in nm.detail  # 2.1 > 1.0
