"""A replay that drifts off the log by rounding after the window's start (a far too high LR
amplifies last-bit differences between kernels): only the LR counterfactual may conclude,
statistically, comparing the run's LR with the halved one from the same logged state."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from forensics.replay.probes.counterfactual import Window
from forensics.replay.probes.optimizer import decide_lr_drifted
from forensics.replay.probes.reproduce import drift_step
from forensics.replay.result import CONFIRMED, INCONCLUSIVE, REFUTED


class _Data:
    def __init__(self, logged: dict[int, tuple[float, float]]) -> None:
        self.logged = logged

    def value(self, metric: str, step: int) -> float | None:
        loss, grad = self.logged[step]
        return loss if metric == "loss" else grad


def _session(replayed: dict[int, tuple[float, float]], start: int, offending: int) -> Any:
    logged = {t: (4.0 + 0.01 * t, 1.0) for t in replayed}
    rows = {t: {"loss": loss, "grad_norm": grad} for t, (loss, grad) in replayed.items()}
    plan = SimpleNamespace(start=start, offending=offending)
    return SimpleNamespace(rows=rows, data=_Data(logged), plan=plan)


def _replayed(drift_at: int | None, loss_off: float, grad_off: float) -> dict[int, Any]:
    out = {}
    for t in range(121, 141):
        late = drift_at is not None and t >= drift_at
        out[t] = (4.0 + 0.01 * t + (loss_off if late else 0.0), 1.0 + (grad_off if late else 0.0))
    return out


def test_rounding_drift_after_the_window_start_is_found() -> None:
    s = _session(_replayed(126, 4e-4, 0.017), start=120, offending=135)
    assert drift_step(s) == 126


def test_no_drift_when_the_replay_reproduces_or_jumps_or_departs_before_the_start() -> None:
    assert drift_step(_session(_replayed(None, 0, 0), start=120, offending=135)) is None
    assert drift_step(_session(_replayed(126, 0.5, 0.5), start=120, offending=135)) is None
    assert drift_step(_session(_replayed(122, 4e-4, 0.05), start=125, offending=135)) is None


def _window(x_orig: float, x_cf: float) -> Window:
    return Window(e_log=6.6, x_log=6.4, x_orig=x_orig, x_cf=x_cf, a=0.28,
                  u_pre=float("nan"), u_orig=74.0, u_cf=30.0,
                  r_pre=float("nan"), r_orig=75.0, r_cf=59.0)  # fmt: skip


def test_drifted_lr_verdict_is_statistical_and_never_above_all() -> None:
    s = _session({}, start=120, offending=287)
    verdict, detail = decide_lr_drifted(_window(2.95, 0.057), 126, s)
    assert verdict == CONFIRMED
    assert detail.startswith("statistical: ") and "from step 126" in detail
    assert "removes 100% of the added loss" in detail  # x_cf below the noise: all, not 108%


def test_drifted_replay_without_instability_concludes_nothing() -> None:
    s = _session({}, start=120, offending=287)
    verdict, detail = decide_lr_drifted(_window(0.4, 0.05), 126, s)  # below 2x the allowance
    assert verdict == INCONCLUSIVE and "no instability to remove" in detail
    assert decide_lr_drifted(_window(2.95, 2.9), 126, s)[0] == REFUTED  # halving keeps it
