"""detector._gradient_climbs: the warm-up climb's gradient test reads both shapes of a
gradient that grows with a too-high LR: a drift from before the climb to its top (two
windows' medians), or the grad norm moving with the loss through the climb (Theil-Sen of
log grad norm on the median log-loss, every point of the phase).

The simulator's lr_too_high 216870@81 (300 steps) climbs +16.6% (4.5 noise scales) while
its grad norm jumps 2-3x from step to step: the two medians gave 1.98 against the 2.0 bar,
the co-movement 3.7x. Here a sharp 12-step hump with that gradient noise: the medians
around its top read mostly points off the hump, the regression reads all of them."""

from __future__ import annotations

import numpy as np
import pytest

from forensics.detect import DetectConfig, detect_data, run_data
from forensics.detect import detector as D

N = 300
T = np.arange(1, N + 1, dtype=float)


def _lr(warmup: int) -> np.ndarray:
    decay = 0.1 + 0.45 * (1 + np.cos(np.pi * (T - warmup) / (N - warmup)))
    return np.where(warmup >= T, T / warmup, decay)


def _hump(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Loss down to 4.4 by step 40, a +16% hump from 100 to 112 back down by 130; the grad
    norm x3 at its top, times log-normal noise (sd 0.6: 2-3x from step to step)."""
    rng = np.random.default_rng(seed)
    up = np.clip((T - 100) / 12, 0, 1) * np.clip(1 - (T - 112) / 18, 0, 1)
    loss = (4.4 + 1.2 * np.exp(-T / 12)) * np.exp(0.16 * up + rng.normal(0, 0.03, N))
    grad = 0.6 * np.exp(7 * 0.16 * up + rng.normal(0, 0.6, N))
    return loss, grad


def _climb(frame, loss, grad):  # type: ignore[no-untyped-def]
    data = run_data(frame(loss, grad_norm=grad, lr=_lr(110)), {}, "t")
    cfg = DetectConfig()
    sc = D.screen_loss(data, cfg)
    span = D._warmup_span(sc, data, cfg)
    assert span is not None
    return data, sc, D._climb(sc, *span, cfg), cfg


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_a_noisy_gradient_that_moves_with_the_loss_makes_the_climb(frame, rules, seed: int) -> None:  # type: ignore[no-untyped-def]
    loss, grad = _hump(seed)
    data, sc, climb, cfg = _climb(frame, loss, grad)
    assert climb is not None
    # the two medians miss it; the co-movement does not
    assert not D._gradient_drifts(sc, data, climb, cfg)
    assert D._gradient_follows_loss(sc, data, climb, cfg)
    inc = D.warmup_rise(sc, data, [], cfg)
    assert inc is not None and 95 <= inc.onset_step <= 112 and 105 <= inc.peak_step <= 120
    (found,) = detect_data(data, rules).incidents
    assert found.onset_step <= inc.peak_step <= found.span_end


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_the_same_gradient_shuffled_in_time_makes_no_climb(frame, seed: int) -> None:  # type: ignore[no-untyped-def]
    # the same values, the same loss: no co-movement and no drift, so no climb
    loss, grad = _hump(seed)
    grad = np.random.default_rng(seed + 100).permutation(grad)
    data, sc, climb, cfg = _climb(frame, loss, grad)
    assert climb is not None and not D._gradient_climbs(sc, data, climb, cfg)
    assert D.warmup_rise(sc, data, [], cfg) is None
