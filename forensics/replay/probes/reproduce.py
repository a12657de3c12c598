"""Reproduction check and the hardware / nondeterminism probe.

Both compare the deterministic replay (the run's own settings, logged batches, from the
checkpoint up to the end of the window) with what the run logged.

`reproduce` (hypothesis `reproduction`): confirmed when every replayed step before the
offending one matches the logged loss and grad norm (|diff| <= RTOL * max(1, |logged|), a NaN
matching a NaN) *and* the offending step matches too; refuted otherwise, naming the first
mismatch. A faithful prefix means the state at the offending step is the one the run had.
The tolerance (RTOL_LOSS 1e-3 on the loss, RTOL_GRAD 1e-2 on the grad norm) admits the
rounding of another CPU's or GPU's kernels; whether the match was bit-exact is reported too
(`bit_exact`, and "bit-exact" / "within tolerance" in the detail). A tolerance cannot make a
chaotic run reproduce: at a far too high LR a 1e-4 rounding difference grows to O(1) over a
hundred steps, and the replay then truly departs from the log (refuted, as it should be);
`drift_step` tells such a drift (the loss still within 1e-2 where it starts, after the
window's start) from a jump, for the one probe that can still conclude (optimizer.py).

`hardware` (hypothesis `hardware_fault`): needs a faithful prefix (else inconclusive: the
replay itself drifts, so a spike that does not reproduce proves nothing). Then the spike is
measured as the largest loss excess over the pre-spike trend from the offending step to the
end of the window (a NaN/Inf loss or grad norm counts as unbounded). Refuted when the replay
reproduces at least half of the logged excess (and every logged non-finite grad norm): the
cause is in the data or the optimizer, which replay re-ran. Confirmed when it does not: the
run computed something that the same inputs, weights and kernels do not give (a bit flip, a
bad GPU, a nondeterministic kernel).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from forensics.nonfinite import spell
from forensics.replay.plan import BIG, excess, fmt_excess
from forensics.replay.probes.base import Session
from forensics.replay.result import (
    CONFIRMED,
    INCONCLUSIVE,
    REFUTED,
    REPRODUCTION,
    ReplayResult,
)

RTOL_LOSS = 1e-3  # fp tolerance on the loss (bit-exact on the same device and precision)
RTOL_GRAD = 1e-2  # grad norms amplify rounding differences more than the loss does
# A replay that leaves the log with its loss still within 1e-2 of the logged one has drifted
# off by rounding (grown by the run's own dynamics), not jumped to another computation.
DRIFT_RTOL_LOSS = 1e-2


@dataclass
class Comparison:
    steps: list[int]
    logged_loss: list[float | None]
    replayed_loss: list[float]
    logged_grad: list[float | None]
    replayed_grad: list[float]
    first_mismatch: int | None  # first step (any in the replay) where they disagree
    prefix_ok: bool  # every step before the offending one matches
    offending_ok: bool
    bit_exact: bool = False  # every compared value up to the offending step is identical


def close(logged: float | None, replayed: float, rtol: float) -> bool:
    if logged is None:
        return True  # not logged: nothing to contradict
    if not (math.isfinite(logged) and math.isfinite(replayed)):
        return (math.isnan(logged) and math.isnan(replayed)) or logged == replayed
    return abs(logged - replayed) <= rtol * max(1.0, abs(logged))


def compare(s: Session) -> Comparison:
    steps = sorted(s.rows)
    ll = [s.data.value("loss", t) for t in steps]
    lg = [s.data.value("grad_norm", t) for t in steps]
    rl = [float(s.rows[t]["loss"]) for t in steps]
    rg = [float(s.rows[t]["grad_norm"]) for t in steps]
    ok = [
        close(a, b, RTOL_LOSS) and close(c, d, RTOL_GRAD)
        for a, b, c, d in zip(ll, rl, lg, rg, strict=True)
    ]
    bad = [t for t, good in zip(steps, ok, strict=True) if not good]
    off = s.plan.offending
    upto = [i for i, t in enumerate(steps) if t <= off]
    exact = all(close(ll[i], rl[i], 0.0) and close(lg[i], rg[i], 0.0) for i in upto)
    return Comparison(
        steps, ll, rl, lg, rg,
        first_mismatch=bad[0] if bad else None,
        prefix_ok=all(t >= off for t in bad),
        offending_ok=off not in bad and off in s.rows,
        bit_exact=exact,
    )  # fmt: skip


def drift_step(s: Session) -> int | None:
    """The step where a replay that reproduced the log through the window's start (the
    state both counterfactual runs start from) drifts off it by rounding: its loss is still
    within DRIFT_RTOL_LOSS there. A far too high LR grows last-bit differences between
    kernels into different spikes within tens of steps, yet a replay and its counterfactual
    still start from the logged state and see the same batches. None when the replay
    reproduces, departs at or before the window's start, or departs by a jump."""
    if not s.rows:
        return None
    c = compare(s)
    t = c.first_mismatch
    if t is None or (c.prefix_ok and c.offending_ok) or t <= s.plan.start:
        return None
    i = c.steps.index(t)
    return t if close(c.logged_loss[i], c.replayed_loss[i], DRIFT_RTOL_LOSS) else None


def _at(c: Comparison, values: list[Any], step: int | None) -> Any:
    return values[c.steps.index(step)] if step in c.steps else None


def reproduce(s: Session, wall_s: float | None) -> ReplayResult:
    """The `reproduce` row: does the replay match the log up to and at the offending step?"""
    if s.unavailable is not None or not s.rows:
        why = s.unavailable or "no step was replayed"
        return s.result("reproduce", REPRODUCTION, INCONCLUSIVE, {}, f"not run: {why}")
    c = compare(s)
    off = s.plan.offending
    pre = [i for i, t in enumerate(c.steps) if t < off]
    diffs = [_absdiff(c.logged_loss[i], c.replayed_loss[i]) for i in pre]
    numbers = {
        "checkpoint_step": s.checkpoint_step,
        "resumed_from_step": s.resumed_step,
        "offending_step": off,
        "steps_replayed": len(c.steps),
        "logged_loss": _at(c, c.logged_loss, off),
        "replayed_loss": _at(c, c.replayed_loss, off),
        "logged_grad_norm": _at(c, c.logged_grad, off),
        "replayed_grad_norm": _at(c, c.replayed_grad, off),
        "prefix_max_abs_diff_loss": max(diffs, default=0.0),
        "first_mismatch_step": c.first_mismatch,
        "rtol_loss": RTOL_LOSS,
        "rtol_grad_norm": RTOL_GRAD,
        "bit_exact": c.bit_exact,
    }
    verdict, detail = _reproduce_verdict(c, off)
    res = s.result("reproduce", REPRODUCTION, verdict, numbers, detail)
    res.wall_s = wall_s
    return res


def _absdiff(a: float | None, b: float) -> float:
    if a is None or not (math.isfinite(a) and math.isfinite(b)):
        return 0.0
    return abs(a - b)


def _reproduce_verdict(c: Comparison, off: int) -> tuple[str, str]:
    if c.prefix_ok and c.offending_ok:
        how = "bit-exact" if c.bit_exact else (
            f"within tolerance: loss {RTOL_LOSS:g}, grad norm {RTOL_GRAD:g} relative"
        )  # fmt: skip
        return CONFIRMED, (
            f"replayed loss {_num(_at(c, c.replayed_loss, off))} matches the logged "
            f"{_num(_at(c, c.logged_loss, off))} at step {off}, and every step before it "
            f"({how})"
        )
    where = "before" if not c.prefix_ok else "at"
    t = c.first_mismatch
    return REFUTED, (
        f"replay departs from the log {where} the offending step (first mismatch at step {t}: "
        f"logged loss {_num(_at(c, c.logged_loss, t))} / grad norm "
        f"{_num(_at(c, c.logged_grad, t))}, replayed {_num(_at(c, c.replayed_loss, t))} / "
        f"{_num(_at(c, c.replayed_grad, t))}; tolerance: loss {RTOL_LOSS:g}, grad norm "
        f"{RTOL_GRAD:g} relative)"
    )


def _num(x: float | None) -> str:
    """For the detail sentence: NaN and Inf spelt as the report spells them."""
    if x is None:
        return "n/a"
    return f"{x:.6g}" if math.isfinite(x) else spell(x)


def hardware(s: Session) -> ReplayResult:
    """The `hardware` row: does the logged spike survive a deterministic replay?"""
    t0 = time.perf_counter()
    probe, hyp = "hardware", "hardware_fault"
    if s.unavailable is not None or not s.rows:
        why = s.unavailable or "no step was replayed"
        return s.result(probe, hyp, INCONCLUSIVE, {}, f"not run: {why}")
    c = compare(s)
    spike = [i for i, t in enumerate(c.steps) if t >= s.plan.offending]
    e_log = max((excess(c.logged_loss[i], s.plan.trend) for i in spike), default=0.0)
    e_rep = max((excess(c.replayed_loss[i], s.plan.trend) for i in spike), default=0.0)
    nf_log = [c.steps[i] for i in spike if _nonfinite(c.logged_grad[i])]
    nf_rep = [c.steps[i] for i in spike if _nonfinite(c.replayed_grad[i])]
    numbers = {
        "logged_excess": e_log,
        "replayed_excess": e_rep,
        "reproduced_fraction": (e_rep / e_log) if 0 < e_log < BIG else None,
        "logged_nonfinite_steps": nf_log,
        "replayed_nonfinite_steps": nf_rep,
        "first_mismatch_step": c.first_mismatch,
    }
    verdict, detail = _hardware_verdict(c, e_log, e_rep, nf_log, nf_rep)
    res = s.result(probe, hyp, verdict, numbers, detail)
    res.wall_s = time.perf_counter() - t0
    return res


def _nonfinite(x: float | None) -> bool:
    return x is not None and not math.isfinite(x)


def _hardware_verdict(
    c: Comparison, e_log: float, e_rep: float, nf_log: list[int], nf_rep: list[int]
) -> tuple[str, str]:
    if not c.prefix_ok:
        return INCONCLUSIVE, (
            f"the replay already departs from the log at step {c.first_mismatch}, before the "
            "offending step, so a non-reproducing spike proves nothing"
        )
    loss_ok = e_log <= 0 or e_rep >= 0.5 * e_log
    nonfinite_ok = set(nf_log) <= set(nf_rep)
    if loss_ok and nonfinite_ok:
        return REFUTED, (
            f"a deterministic replay reproduces the spike (excess {fmt_excess(e_rep)} vs logged "
            f"{fmt_excess(e_log)}): the cause is in the data or the optimizer, not the hardware"
        )
    return CONFIRMED, (
        f"the replay matches the log up to step {c.first_mismatch} and then does not reproduce "
        f"the spike (excess {fmt_excess(e_rep)} vs logged {fmt_excess(e_log)}"
        + (f"; logged non-finite grad norm at {nf_log} not reproduced" if not nonfinite_ok else "")
        + "): the run computed what its inputs and weights do not give"
    )
