"""Optimizer counterfactuals: stale beta2 and a too-high learning rate.

Each re-runs the window from the same state as the original replay, with one change, on the
same logged batches (probes/counterfactual.py defines the measures X, a, E_log, the update
norms and Adam's normalized step |delta theta| / lr):

- `stale_beta2`: beta2 = 0.95 and a second-moment reset at the offending step (where the
  gradient suddenly grows; the window's first step when that is later), as SPAM does:
  exp_avg_sq is raised, element by element, so that Adam's bias-corrected v is at least the
  current (clipped) squared gradient -- a second moment as fresh as the gradient instead of
  one averaged over ~1/(1 - beta2) old, smaller gradients (raising only, so the reset cannot
  itself make an update larger). A run whose beta2 is already <= 0.95 is refuted without a
  replay: the counterfactual would be the run itself (v follows g**2 within ~20 steps);
- `lr_too_high`: the learning rate halved (peak and minimum, so the whole schedule halves).

Rules, with kept = (X_cf - a) / (X_orig - a) (the share of the added loss the change keeps):
both are inconclusive when E_log <= a (no spike to explain) and refuted when X_orig <
max(a, X_log / 2) (the run's own updates, replayed, do not produce the spike: it is in the
batches themselves, or it does not reproduce).

- stale_beta2: refuted when the original's normalized step stays below 2x its pre-spike level
  (the second moment kept up with the gradient); with B = normalized-step peak / pre-spike
  level and kept_step = (B_cf - 1) / (B_orig - 1): confirmed when kept <= 1/2 and kept_step
  <= 3/4 (beta2 = 0.95 removes at least half of the added loss and a quarter of the step
  blow-up, which no LR change removes: |delta theta| / lr = |m / sqrt(v)|);
  refuted when kept >= 3/4 and kept_step >= 3/4; inconclusive otherwise.
- lr_too_high: confirmed when kept <= 1/2 and the counterfactual's updates stay near the
  pre-spike level (within 2x, or half of the original's excess removed); refuted when
  kept >= 3/4; inconclusive otherwise. When the replay reproduced the log through the
  window's start and then drifted off it by rounding (reproduce.drift_step: a far too high
  LR grows last-bit kernel differences into other spikes), the replayed spikes are not the
  logged ones: the same rules then compare the two replays alone, once the run's own LR adds
  at least twice the noise allowance (decide_lr_drifted), and the detail says "statistical".

The runner then arbitrates (runner.arbitrate): when beta2 = 0.95 removes the spike at the
run's own learning rate, that LR was sustainable, so a confirmed lr_too_high becomes refuted.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from forensics.replay.probes.base import Session
from forensics.replay.probes.counterfactual import Window, measure, rerun
from forensics.replay.probes.fix_share import FIX_BETA2, measure_fix
from forensics.replay.probes.reproduce import drift_step
from forensics.replay.result import CONFIRMED, INCONCLUSIVE, REFUTED, ReplayResult
from forensics.replay.state import StateUnavailable
from forensics.replay.verdicts import share_text

COUNTERFACTUAL_BETA2 = FIX_BETA2  # the mechanism test and the fix's share use the same beta2
LR_FACTOR = 0.5
BLOWUP = 2.0  # a normalized step at least 2x its pre-spike level has blown up
# Confirming beta2 needs the counterfactual to remove at least a quarter of the normalized
# step's blow-up besides half the added loss: |delta theta| / lr = |m / sqrt(v)| does not
# depend on the learning rate, so only a change to the second moment moves it.
STEP_KEPT_MAX = 0.75


def stale_beta2(s: Session) -> ReplayResult:
    if s.replayer is not None:
        run_beta2 = s.replayer.beta2
    else:
        run_beta2 = s.start.cfg.beta2 if s.start is not None else _config_beta2(s)
    extra = {"run_beta2": run_beta2, "counterfactual_beta2": COUNTERFACTUAL_BETA2}
    if run_beta2 is not None and run_beta2 <= COUNTERFACTUAL_BETA2:
        return s.result("stale_beta2", "stale_beta2", REFUTED, extra, (
            f"the run's beta2 {run_beta2:g} is not above the counterfactual "
            f"{COUNTERFACTUAL_BETA2:g}: its second moment follows the gradient within "
            f"~{1 / (1 - run_beta2):.0f} steps, so the counterfactual would change nothing"
        ))  # fmt: skip
    t0 = time.perf_counter()
    changes = {"beta2": COUNTERFACTUAL_BETA2}
    res = counterfactual(s, "stale_beta2", changes, reset=True, extra=extra)
    if res.verdict == CONFIRMED:
        _plain_fix(s, res)
        res.wall_s = time.perf_counter() - t0  # the fix's re-runs included
    return res


def _plain_fix(s: Session, res: ReplayResult) -> None:
    """The engineer's fix, beta2 = 0.95 alone (no reset): the reset confirms the mechanism (a
    stale v) but overstates what the fix removes. Its share of the damage decides whether
    beta2 is the amplifier to state (verdicts.share, verdicts.choose).

    It is measured as the share is defined (probes/fix_share.py), through the trainer that
    replays the run (the bundled one, the run's own Hugging Face Trainer or nanoGPT loop):
    restarted from a checkpoint before the incident, against the run without the trigger
    (`fix_share_removed`). Only when no checkpoint can be restored for it (the bundled
    trainer without a usable one) is the window re-run from its start and the share that of
    the loss the updates added above the noise (`kept_plain`)."""
    try:
        fix = measure_fix(s, {"beta2": COUNTERFACTUAL_BETA2})
        if fix is not None:
            res.numbers |= fix.numbers()
            res.detail += "; " + fix.sentence()
            return
        cf = _rerun(s, {"beta2": COUNTERFACTUAL_BETA2}, reset=False)
    except StateUnavailable:
        return
    steps = _compared_steps(s, cf)
    if not steps:
        return
    w, _ = measure(s, steps, cf)
    res.numbers["kept_plain"] = w.kept
    res.detail += f"; beta2 = 0.95 alone (no reset) removes {_removed(w.kept)} of the added loss"


def _config_beta2(s: Session) -> float | None:
    """beta2 from the run's config (ingest's canonical key) when no state could be rebuilt."""
    value = s.data.config.get("beta2")
    return float(value) if isinstance(value, int | float) else None


def lr_too_high(s: Session) -> ReplayResult:
    if s.replayer is not None:
        extra = {"lr_factor": LR_FACTOR, "lr_scaled": s.replayer.lr_note}
        return counterfactual(s, "lr_too_high", {"lr_factor": LR_FACTOR}, reset=False, extra=extra)
    if s.start is None:
        return counterfactual(s, "lr_too_high", {}, reset=False, extra={})
    cfg = s.start.cfg
    changes = {"peak_lr": cfg.peak_lr * LR_FACTOR, "min_lr": cfg.min_lr * LR_FACTOR}
    extra = {"run_peak_lr": cfg.peak_lr, "counterfactual_peak_lr": changes["peak_lr"]}
    return counterfactual(s, "lr_too_high", changes, reset=False, extra=extra)


def counterfactual(
    s: Session, hyp: str, changes: dict[str, Any], *, reset: bool, extra: dict[str, Any]
) -> ReplayResult:
    t0 = time.perf_counter()
    if s.start is None and s.replayer is None:
        return s.result(hyp, hyp, INCONCLUSIVE, extra, f"not run: {s.unavailable}")
    try:
        cf = _rerun(s, changes, reset)
    except StateUnavailable as exc:
        return s.result(hyp, hyp, INCONCLUSIVE, extra, f"not run: {exc}")
    steps = _compared_steps(s, cf)
    if not steps:
        return s.result(hyp, hyp, INCONCLUSIVE, extra, "window too short to compare")
    w, numbers = measure(s, steps, cf)
    if hyp == "stale_beta2":
        verdict, detail = decide_beta2(w)
    else:
        drift = drift_step(s)
        if drift is None:
            verdict, detail = decide_lr(w)
        else:
            verdict, detail = decide_lr_drifted(w, drift, s)
            extra = extra | {"drift_step": drift}
    res = s.result(hyp, hyp, verdict, numbers | extra, f"{detail} ({w.facts()})")
    res.wall_s = time.perf_counter() - t0
    return res


def _compared_steps(s: Session, cf: dict[int, Any]) -> list[int]:
    """The window's steps both the replay and the counterfactual ran (after the first)."""
    return [t for t in range(s.plan.start + 2, s.plan.end + 1) if t in cf and t in s.rows]


def _rerun(s: Session, changes: dict[str, Any], reset: bool) -> dict[int, Any]:
    """The counterfactual window: through the run's own trainer when there is one (the reset
    at the offending step, or the window's first step when that is later)."""
    if s.replayer is None:
        return rerun(s, changes, reset=reset)
    at = max(s.plan.start + 1, s.plan.offending) if reset else None
    return s.replayer.rerun(changes.get("beta2"), changes.get("lr_factor", 1.0), at)


def _common(w: Window) -> tuple[str, str] | None:
    """The outcomes both probes share: nothing to explain, or nothing the updates did."""
    if w.e_log <= w.a:
        return INCONCLUSIVE, "no loss excess above the noise to remove"
    if w.x_orig < max(w.a, 0.5 * w.x_log):
        return REFUTED, (
            "the run's own updates, replayed, do not produce the spike: it is in the batches "
            "themselves or does not reproduce"
        )
    return None


def decide_beta2(w: Window) -> tuple[str, str]:
    common = _common(w)
    if common is not None:
        return common
    b_orig, b_cf = w.r_orig / w.r_pre, w.r_cf / w.r_pre
    if not (math.isfinite(b_orig) and math.isfinite(b_cf)):
        return INCONCLUSIVE, "Adam's normalized step cannot be measured"
    if b_orig < BLOWUP:
        return REFUTED, (
            f"Adam's normalized step peaks at {b_orig:.2f}x its pre-spike level: the second "
            "moment kept up with the gradient"
        )
    kept_step = (b_cf - 1.0) / (b_orig - 1.0)
    if w.kept <= 0.5 and kept_step <= STEP_KEPT_MAX:
        return CONFIRMED, (
            f"beta2 = 0.95 with a second-moment reset removes {_removed(w.kept)} of the added "
            f"loss and {_removed(kept_step)} of the normalized-step blow-up"
        )
    if w.kept >= 0.75 and kept_step >= 0.75:
        return REFUTED, "beta2 = 0.95 keeps the spike and the normalized-step blow-up"
    return INCONCLUSIVE, (
        f"beta2 = 0.95 keeps {w.kept:.0%} of the added loss and {kept_step:.0%} of the "
        "normalized-step blow-up"
    )


def decide_lr_drifted(w: Window, drift: int, s: Session) -> tuple[str, str]:
    """decide_lr on a replay that drifted off the log by rounding after the window's start
    (reproduce.drift_step): the replayed spikes are then not the logged ones, so the test is
    whether the run's own LR, replayed on the same batches from the same logged state, adds
    loss well above the noise (2x the allowance) that the halved LR removes. The runner keeps
    this verdict (downgrade) and the detail says it is statistical."""
    why = (
        f"statistical: the replay reproduces the log through step {s.plan.start}, then drifts "
        f"off it from step {drift} by rounding that the run's own LR amplifies, so its spikes "
        f"are not the logged ones; both replays start from the logged state of step "
        f"{s.plan.start} and train on the same batches"
    )
    if w.e_log <= w.a:
        return INCONCLUSIVE, "no loss excess above the noise to remove"
    if w.x_orig < 2.0 * w.a:
        return INCONCLUSIVE, (
            f"{why}; at the run's own LR the replay adds no loss above twice the noise "
            "allowance, so there is no instability to remove"
        )
    verdict, detail = decide_lr(replace(w, x_log=0.0))
    return verdict, f"{why}; {detail}"


def decide_lr(w: Window) -> tuple[str, str]:
    common = _common(w)
    if common is not None:
        return common
    if w.kept >= 0.75:
        return REFUTED, f"the halved LR keeps {w.kept:.0%} of the added loss"
    if w.kept > 0.5:
        return INCONCLUSIVE, f"the halved LR keeps {w.kept:.0%} of the added loss"
    if not w.updates_near_pre():
        return INCONCLUSIVE, "the halved LR removes the loss spike but not the update blow-up"
    return CONFIRMED, f"the halved LR removes {_removed(w.kept)} of the added loss"


def _removed(kept: float) -> str:
    """1 - kept as the share verdicts.share stores (0-100%: a counterfactual that ends
    below the noise allowance removes all of the added loss, not more than all of it)."""
    return share_text(min(1.0, max(0.0, 1.0 - kept)))
