"""detector.warmup_rise: a too-high learning rate that never spikes. While the logged LR
still warms up, the loss stops falling and climbs back by ~10-20%, the gradient norm
climbing with it (the simulator's lr_too_high at 300 steps: the tiny model at 100x its LR
sits at the unigram loss). Each point is too small for the screen; the climb in the first
LR ramp, with the grad norm doubling, is the mechanism's own test. Later bumps, a flat
gradient, and the real logs' warm-ups raise nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from forensics.detect import DetectConfig, detect_data, run_data
from forensics.detect.detector import screen_loss, warmup_rise
from forensics.detect.store import load_run
from forensics.ingest import ingest
from forensics.store import open_store

N = 300


def _lr(warmup: int, peak: float = 1.0) -> np.ndarray:
    t = np.arange(1, N + 1, dtype=float)
    decay = 0.1 + 0.45 * (1 + np.cos(np.pi * (t - warmup) / (N - warmup)))
    return np.where(t <= warmup, peak * t / warmup, peak * decay)


def _climb(start: int, top: int, rise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Loss falling to 4.4 by step 40, climbing by `rise` (log) from `start` to `top`, then
    falling back; the grad norm 0.6, 3.5x at the top of the climb."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, N + 1, dtype=float)
    base = 4.4 + 1.2 * np.exp(-t / 12)
    up = np.clip((t - start) / (top - start), 0, 1) * np.clip(1 - (t - top) / 120, 0, 1)
    loss = base * np.exp(rise * up + rng.normal(0, 0.03, N))
    grad = 0.6 * (1 + 2.5 * up) * np.exp(rng.normal(0, 0.1, N))
    return loss, grad


def _detect(frame, rules, loss, grad, lr):  # type: ignore[no-untyped-def]
    data = run_data(frame(loss, grad_norm=grad, lr=lr), {}, "t")
    return detect_data(data, rules).incidents


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_climb_while_the_lr_warms_up_is_a_too_high_lr(frame, rules, seed: int) -> None:  # type: ignore[no-untyped-def]
    loss, grad = _climb(50, 125, 0.14, seed)
    (inc,) = _detect(frame, rules, loss, grad, _lr(120))
    assert 60 <= inc.onset_step <= 130 and 110 <= inc.peak_step <= 140
    assert inc.cause == "lr_too_high"


def test_no_climb_without_the_gradient(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss, _ = _climb(50, 125, 0.14)
    flat = np.full(N, 0.6) * np.exp(np.random.default_rng(3).normal(0, 0.1, N))
    assert _detect(frame, rules, loss, flat, _lr(120)) == []


def test_a_bump_after_the_warm_up_is_not_this_mechanism(frame, rules) -> None:  # type: ignore[no-untyped-def]
    # the same climb with the LR at its peak since step 30 (llm.c's +9% bumps, an SGDR
    # restart, a seasonal schedule: all after the first ramp)
    loss, grad = _climb(150, 225, 0.14)
    assert _detect(frame, rules, loss, grad, _lr(30)) == []


def test_a_constant_lr_has_no_warm_up(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss, grad = _climb(50, 125, 0.14)
    assert _detect(frame, rules, loss, grad, np.full(N, 1e-3)) == []


def test_no_real_warm_up_climbs(real_logs: Path, tmp_path: Path) -> None:
    """Every real log that logs an LR ramp and the grad norm (llm.c, Megatron golden values,
    OLMo, ...) has a healthy warm-up: the detector finds nothing in any of them."""
    checked = []
    for i, path in enumerate(sorted(p for p in real_logs.glob("*/*") if p.is_file())):
        with open_store(tmp_path / f"{i}.duckdb") as store:
            ingest(store, [path], run="r")
            data = load_run(store, "r")
        if not (data.has("lr") and data.has("grad_norm")):
            continue
        sc = screen_loss(data, DetectConfig())
        assert warmup_rise(sc, data, [], DetectConfig()) is None, path.name
        checked.append(path.name)
    assert len(checked) >= 3, checked


def test_a_spike_on_the_climb_is_a_peak_of_it(frame, rules) -> None:  # type: ignore[no-untyped-def]
    """One instability, one incident: a spike the screen finds on the climb is taken in as
    one of its peaks, the screen's onset kept (it is refined on breakpoints)."""
    loss, grad = _climb(50, 125, 0.14)
    loss[89] *= 1.5  # step 90: a +50% point, far above the point screen's bar
    (inc,) = _detect(frame, rules, loss, grad, _lr(120))
    steps = [s for s, _ in inc.peaks]
    assert 90 in steps and max(steps) >= 115
    assert inc.onset_step <= 90


@pytest.mark.parametrize("seed", [0, 1])
def test_the_climbs_peak_is_its_highest_loss_on_the_hump(frame, rules, seed: int) -> None:  # type: ignore[no-untyped-def]
    """A spike riding on the hump after the median's top (the loss is noisiest there; the
    simulator's lr_too_high 487758@81: median top at 95, highest loss at 112) is the climb's
    peak, as any incident's peak is its highest loss; one past the hump (the median back
    under half of the climb) is not. Both spikes are +22%: under the point screen's bar."""
    loss, grad = _climb(50, 125, 0.14, seed)
    loss[159] *= np.exp(0.2)  # step 160: the median still ~70% up the climb
    (inc,) = _detect(frame, rules, loss, grad, _lr(120))
    assert inc.peak_step == 160 and inc.cause == "lr_too_high"
    loss, grad = _climb(50, 125, 0.14, seed)
    loss[229] *= np.exp(0.2)  # step 230: the median ~12% up: past the hump
    (inc,) = _detect(frame, rules, loss, grad, _lr(120))
    assert 110 <= inc.peak_step <= 140


@pytest.mark.slow
def test_a_climb_an_early_spike_never_settled_from_is_still_the_lrs(tmp_path: Path) -> None:
    """Simulated lr_too_high, seed 343664 at step 91 (300 steps), written by the simulator:
    at 100x its LR the tiny model already blows up at step 8 (x2.6, the LR at 8% of its
    peak), sits 3-5% above its start-up low through the warm-up, then climbs 83-118 with the
    grad norm. The start-up spike never settles, so the climb's peaks join it: one incident
    from step 7 whose highest point is the spike. The climb the detector found in it names
    the LR (warmup_climb), not "unknown" (the LR at the onset is 8% of the peak)."""
    from detect_helpers import stored_features, stored_incidents

    from forensics.sim.simulate import simulate

    run = tmp_path / "run"
    simulate("lr_too_high", run, steps=300, seed=343664, at=91, device="cpu", plot=False)
    (inc,) = stored_incidents(run, tmp_path)
    (feats,) = stored_features(tmp_path)
    assert inc["onset_step"] < 20 and feats["lr_frac"] < 0.2
    assert feats["warmup_climb"] == 1
    assert inc["cause"] == "lr_too_high"
