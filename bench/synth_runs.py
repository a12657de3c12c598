"""Labelled synthetic training runs: a baseline pre-training curve plus injected incidents.

Every incident is built from its published mechanism (see /work/shared/real_logs/SOURCES.md
section 2 and the rule files' references), not from the detector's thresholds:

- rare_tokens: one batch gives a giant gradient (BLOOM-176B 31214-31251: grad norm
  0.24 -> 960 over 4 steps, loss 2.20 -> 5.10, back in ~30 steps); the loss peaks at the
  gradient spike or 1-3 steps after it and decays back.
- stale_beta2: beta2 >= 0.99; one large gradient the slow second moment cannot follow, then
  echo spikes tens of steps later and a slow, often incomplete recovery (marin#1368; OPT
  lowered beta2 0.98 -> 0.95; tr8-104B tried 0.95).
- lr_too_high: near the end of warm-up, gradient norm and parameter norm drift up for tens
  to hundreds of steps, then spikes recur and the run lingers or diverges (tr8-104B: loss
  6.44 -> 11.42 "very closely to the moment where LR warmup stopped", then NaN).
- fp16_overflow: several loss-scale halvings with skipped iterations and non-finite grads
  around a spike (tr1-13B: 2.77 -> 8.72, loss scale 65536 -> 4096, ~hundreds of steps to
  recover; OPT's loss scale collapsing to its minimum).
- data_corruption: one batch whose own loss is abnormal - far below the trend (degenerate,
  repeated text) or near the loss of random tokens (garbage) - followed by a spike (GLM-130B
  skipped "noisy data" ranges; CPM-Live skipped data).
- hardware_fault: one non-finite loss or gradient, or an absurd gradient, at one step with
  clean steps on both sides and no loss-scale change (BLOOM's corrupt GPU, SDC).

Baselines vary: power-law decay from ln(vocab) with a warm-up + cosine/linear/constant LR
schedule, slow wander, Student-t noise of several scales, fp16 runs with the loss-scale
search at start-up and the scaler's routine single halvings. Truth types follow the issue's
definitions on the noise-free curve (returns within 3% of the trend inside a 500-step
window); shapes within a margin of a type boundary are not generated, so a label is never a
coin toss.

Usage: make_run(seed) -> SynthRun; write_run(run, folder, fmt) writes it as jsonl, csv,
megatron text or tensorboard (plus config.json) for the real ingest pipeline.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.signal import lfilter

from forensics.detect.model import CAUSES as DETECT_CAUSES

# the ones a generator can inject (batch_driven is what a log says of rare tokens or corrupt
# data when it cannot tell them apart, not a mechanism of its own)
CAUSES = tuple(c for c in DETECT_CAUSES if c not in ("unknown", "batch_driven"))
FORMATS = ("jsonl", "csv", "megatron", "tensorboard")
RECOVERY_WINDOW = 500
TOL = math.log1p(0.03)


@dataclass
class Truth:
    """One injected incident as the detector should report it."""

    cause: str
    type: str  # recoverable | lingering | divergent
    onset: int
    peaks: list[int]
    end: int | None  # noise-free recovery step (None when it never recovers)
    # cause; batch_driven for a batch whose kind the log cannot tell (no grad norm); or
    # "unknown" when the metrics that tell it are not logged
    expected_cause: str
    recovery: str
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "expected_cause": self.expected_cause,
            "type": self.type,
            "onset": self.onset,
            "peaks": self.peaks,
            "end": self.end,
            "recovery": self.recovery,
            "detail": self.detail,
        }


@dataclass
class SynthRun:
    name: str
    seed: int
    steps: np.ndarray  # every optimizer step 1..N
    series: dict[str, np.ndarray]  # per-step values; NaN = non-finite event
    config: dict[str, Any]
    interval: int
    logged: list[str]
    fmt: str
    truth: list[Truth] = field(default_factory=list)
    missing_at: dict[str, np.ndarray] = field(default_factory=dict)  # bool: not printed


# ----- baseline ---------------------------------------------------------------------------
def lr_schedule(rng: np.random.Generator, n: int, warmup: int) -> tuple[np.ndarray, float]:
    peak = float(10 ** rng.uniform(-4, -2.8))
    t = np.arange(1, n + 1, dtype=float)
    warm = np.minimum(1.0, t / warmup)
    frac = np.clip((t - warmup) / max(1, n - warmup), 0, 1)
    kind = rng.choice(["cosine", "linear", "constant"])
    if kind == "cosine":
        decay = 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac))
    elif kind == "linear":
        decay = 1 - 0.9 * frac
    else:
        decay = np.where(frac < 0.85, 1.0, 1 - 0.9 * (frac - 0.85) / 0.15)
    return peak * warm * decay, peak


def wander(rng: np.random.Generator, n: int, amp: float) -> np.ndarray:
    """Slow, smooth drift (data mixture, schedule effects) of about `amp` in log-loss."""
    w = np.cumsum(rng.normal(0, 1, n))
    k = max(50, n // 40)
    w = np.convolve(w - np.linspace(w[0], w[-1], n), np.ones(k) / k, mode="same")
    return amp * w / (np.abs(w).max() + 1e-12)


def baseline(rng: np.random.Generator, n: int, lr: np.ndarray, peak: float) -> np.ndarray:
    """Noise-free log-loss: power law from ln(vocab) with a schedule term and slow wander."""
    t = np.arange(1, n + 1, dtype=float)
    l0 = math.log(float(rng.choice([32000, 50257, 128256])))
    l_inf = rng.uniform(1.6, 3.2)
    t0, alpha = rng.uniform(20, 200), rng.uniform(0.4, 0.9)
    loss = l_inf + (l0 - l_inf) * (1 + t / t0) ** (-alpha)
    anneal = rng.uniform(0, 0.04) * (1 - lr / peak) * (t > np.argmax(lr >= peak))
    return np.log(loss) + np.log1p(-anneal) + wander(rng, n, rng.uniform(0.002, 0.008))


def noise(rng: np.random.Generator, n: int) -> np.ndarray:
    sigma = rng.uniform(0.004, 0.03)
    df = float(rng.choice([10, 30, 1000]))
    return sigma * rng.standard_t(df, n) / math.sqrt(df / (df - 2))


def grad_baseline(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.arange(1, n + 1, dtype=float)
    g_inf = rng.uniform(0.15, 1.5)
    g = g_inf * (1 + rng.uniform(4, 12) * np.exp(-t / rng.uniform(50, 400)))
    g *= 1 + rng.uniform(0, 0.8) * t / n
    return g * np.exp(rng.normal(0, rng.uniform(0.03, 0.12), n))


# ----- a run under construction -------------------------------------------------------------
@dataclass
class Draft:
    rng: np.random.Generator
    n: int
    interval: int
    lr: np.ndarray
    peak_lr: float
    warmup: int
    base: np.ndarray  # noise-free log-loss
    dl: np.ndarray  # injected log-loss offsets
    eps: np.ndarray  # noise
    grad: np.ndarray
    gmul: np.ndarray  # injected gradient multipliers (log)
    pdrift: np.ndarray  # injected parameter-norm growth (log)
    nan_loss: np.ndarray
    nan_grad: np.ndarray
    inf_grad: np.ndarray
    beta2: float
    precision: str
    overflow: np.ndarray  # forced scaler overflows (bool per step)
    end: int  # last step of the run (a divergence can end it early)
    truth: list[Truth] = field(default_factory=list)

    def grid(self, step: int) -> int:
        """The logged step at or after `step` (a log every `interval` steps)."""
        return int(math.ceil(step / self.interval) * self.interval)


def _profile(n: int, onset: int, peak: int, amp: float, tau: float, offset: float) -> np.ndarray:
    """Log-loss offset: linear rise onset->peak to amp, then decay with tau to offset."""
    p = np.zeros(n)
    idx = np.arange(n) + 1
    rise = (idx >= onset) & (idx < peak)
    p[rise] = amp * (idx[rise] - onset + 1) / (peak - onset + 1)
    after = idx >= peak
    p[after] = offset + (amp - offset) * np.exp(-(idx[after] - peak) / tau)
    return p


def _recovery_end(d: Draft, own: np.ndarray, last_peak: int, offset: float) -> int | None:
    """Noise-free step from which this incident's own offset stays under half the tolerance."""
    if offset > 0:
        return None
    w = max(RECOVERY_WINDOW, 5 * d.interval)
    seg = own[last_peak - 1 : min(d.n, last_peak + 3 * w)]
    bad = np.flatnonzero(seg > TOL * 0.5)
    return last_peak + (int(bad[-1]) + 1 if len(bad) else 0)


def _tau(d: Draft, amp: float, tau: float) -> float:
    """Cap a recoverable spike's decay so it is back well inside the window (no coin tosses)."""
    w = max(RECOVERY_WINDOW, 5 * d.interval)
    return min(tau, 0.6 * w / math.log(max(amp, 0.05) / (0.5 * TOL)))


def _spike_grad(d: Draft, step: int, ratio: float, width: float = 1.0) -> None:
    """A gradient spike peaking at `step` that fades over ~width steps on both sides."""
    idx = np.arange(d.n) + 1
    d.gmul += (
        math.log(ratio) * np.exp(-np.abs(idx - step) / width) * (np.abs(idx - step) < 6 * width + 1)
    )


def _type_of(d: Draft, own: np.ndarray, last_peak: int, offset: float) -> tuple[str, int | None]:
    """Type from the incident's own noise-free offset (another incident's is not its own)."""
    d.dl += own
    end = _recovery_end(d, own, last_peak, offset)
    w = max(RECOVERY_WINDOW, 5 * d.interval)
    if end is not None and end - last_peak <= 0.7 * w:
        return "recoverable", end
    return "lingering", None


# ----- incidents ------------------------------------------------------------------------------
def rare_tokens(d: Draft, s0: int, logged: set[str]) -> Truth:
    if d.rng.random() < 0.35:
        return rare_batch_itself(d, s0, logged)
    r = d.rng
    lag = int(r.integers(0, 4)) if d.interval == 1 else 0
    peak = d.grid(s0 + lag)
    gstep = peak - lag
    ratio = float(10 ** r.uniform(math.log10(6), math.log10(500)))
    _spike_grad(d, gstep, ratio, width=r.uniform(0.7, 1.5))
    amp = r.uniform(0.2, 1.0)
    lingering = r.random() < 0.2
    offset = r.uniform(0.08, 0.15) if lingering else 0.0
    tau = (
        r.uniform(20, 90) if lingering else _tau(d, amp, r.uniform(3, 50) * max(1, d.interval / 4))
    )
    rise_from = max(gstep - int(r.integers(0, 3)), peak - 4) if lag else peak
    kind, end = _type_of(d, _profile(d.n, rise_from, peak, amp, tau, offset), peak, offset)
    exp = "rare_tokens" if "grad_norm" in logged else "batch_driven"
    rec = "continue" if kind == "recoverable" else "restart_from_checkpoint"
    return Truth("rare_tokens", kind, rise_from, [peak], end, exp, rec, f"grad x{ratio:.0f}")


def rare_batch_itself(d: Draft, s0: int, logged: set[str]) -> Truth:
    """The rare-token batch's own loss is huge (the model gives its ids ~zero probability:
    the simulator's 3.3 -> 19.5, the modded-nanogpt one-step spikes), its gradient is giant,
    clipping and Adam bound the update, and the next batch is back on trend."""
    r = d.rng
    s0 = d.grid(s0)
    ratio = float(10 ** r.uniform(1, 2))
    _spike_grad(d, s0, ratio, width=0.5)
    d.dl[s0 - 1] += math.log(r.uniform(1.5, 6.0))
    exp = "rare_tokens" if "grad_norm" in logged else "batch_driven"
    truth = Truth("rare_tokens", "recoverable", s0, [s0], s0 + d.interval, exp, "continue")
    truth.detail = f"own loss, grad x{ratio:.0f}"
    return truth


def stale_beta2(d: Draft, s0: int, logged: set[str], beta2_known: bool) -> Truth:
    r = d.rng
    lag = int(r.integers(0, 3)) if d.interval == 1 else 0
    peak = d.grid(s0 + lag)
    ratio = float(10 ** r.uniform(math.log10(5), 2))
    _spike_grad(d, peak - lag, ratio)
    amp = r.uniform(0.25, 0.8)
    lingering = r.random() < 0.6
    offset = r.uniform(0.08, 0.15) if lingering else 0.0
    tau = r.uniform(60, 200) if lingering else _tau(d, amp, r.uniform(30, 70))
    own = _profile(d.n, peak, peak, amp, tau, offset)
    peaks = [peak]
    step = peak
    for _ in range(int(r.integers(1, 4))):
        step = d.grid(step + int(r.uniform(max(8, 2 * d.interval), max(60, 4 * d.interval))))
        echo = amp * r.uniform(0.5, 1.0)
        own += _profile(d.n, step, step, echo, r.uniform(3, 10) * max(1, d.interval / 3), 0.0)
        _spike_grad(d, step, r.uniform(2, 5))
        peaks.append(step)
    kind, end = _type_of(d, own, peaks[-1], offset)
    # v shows beta2 only when the big gradient moves it visibly: v jumps by (1-beta2) R^2
    v_visible = "adam_v_mean" in logged and (1 - d.beta2) * ratio**2 >= 0.2
    exp = "stale_beta2" if beta2_known or v_visible else "unknown"
    rec = "continue" if kind == "recoverable" else "restart_from_checkpoint"
    return Truth("stale_beta2", kind, peak, peaks, end, exp, rec, f"{len(peaks) - 1} echoes")


def lr_too_high(d: Draft, s0: int, logged: set[str]) -> Truth:
    r = d.rng
    drift_steps = int(r.uniform(100, 500))
    idx = np.arange(d.n) + 1
    ramp = np.clip((idx - (s0 - drift_steps)) / drift_steps, 0, None)
    d.gmul += math.log(r.uniform(2.0, 6.0)) * np.minimum(ramp, 1.5) ** 2
    d.pdrift += r.uniform(0.02, 0.06) * np.minimum(ramp, 3.0)
    peaks, step, amp = [], s0, r.uniform(0.2, 0.5)
    for _ in range(int(r.integers(2, 5))):
        step = d.grid(step)
        d.dl += _profile(d.n, step, step, amp, r.uniform(10, 60), 0.0)
        _spike_grad(d, step, r.uniform(3, 20))
        peaks.append(step)
        step += int(r.uniform(max(20, 3 * d.interval), 200))
        amp *= r.uniform(1.1, 1.5)
    kind = "divergent" if r.random() < 0.5 else "lingering"
    if kind == "lingering":  # after the last spike the loss settles above where it was
        d.dl += np.where(idx >= peaks[-1], r.uniform(0.08, 0.15), 0.0)
    else:
        _diverge(d, peaks[-1], idx)
    ok = "lr" in logged and bool({"grad_norm", "param_norm"} & logged)
    exp = "lr_too_high" if ok else "unknown"
    return Truth(
        "lr_too_high", kind, peaks[0], peaks, None, exp, "lower_lr", f"{len(peaks)} spikes"
    )


def _diverge(d: Draft, start: int, idx: np.ndarray) -> None:
    """The loss climbs towards ln(vocab), maybe turns NaN, and the run ends soon after."""
    r = d.rng
    climb = r.uniform(100, 400)
    top = max(0.4, float(d.base[0] - d.base[start - 1]))
    d.dl += np.where(idx > start, top * np.minimum(1.0, (idx - start) / climb), 0.0)
    d.gmul += np.where(
        idx > start, math.log(r.uniform(5, 50)) * np.minimum(1.0, (idx - start) / climb), 0.0
    )
    d.end = min(d.n, start + int(climb) + int(r.uniform(50, 600)))
    if r.random() < 0.5:
        nan_from = start + int(climb * r.uniform(0.5, 1.0))
        d.nan_loss |= idx >= nan_from
        d.nan_grad |= idx >= nan_from


def fp16_overflow(d: Draft, s0: int, logged: set[str]) -> Truth:
    r = d.rng
    halvings = int(r.integers(3, 7))
    steps = s0 + np.sort(r.choice(np.arange(0, 30), halvings, replace=False))
    d.overflow[steps - 1] = True
    d.inf_grad[steps - 1] = True
    peak = d.grid(s0 + int(r.integers(5, 20)))
    amp = r.uniform(0.4, 1.2)
    roll = r.random()
    kind_hint = "recoverable" if roll < 0.55 else "lingering" if roll < 0.8 else "divergent"
    offset = r.uniform(0.08, 0.15) if kind_hint == "lingering" else 0.0
    tau = _tau(d, amp, r.uniform(15, 70)) if kind_hint == "recoverable" else r.uniform(30, 120)
    own = _profile(d.n, s0, peak, amp, tau, offset)
    _spike_grad(d, peak, r.uniform(3, 30), width=3.0)
    if kind_hint == "divergent":
        d.dl += own
        idx = np.arange(d.n) + 1
        _diverge(d, peak, idx)
        d.overflow |= (idx > peak) & (r.random(d.n) < 0.3)
        kind, end = "divergent", None
    else:
        kind, end = _type_of(d, own, peak, offset)
    exp = "fp16_overflow" if {"loss_scale", "skipped_iters"} & logged else "unknown"
    rec = "continue" if kind == "recoverable" else "restart_from_checkpoint"
    return Truth("fp16_overflow", kind, int(s0), [peak], end, exp, rec, f"{halvings} halvings")


def data_corruption(d: Draft, s0: int, logged: set[str]) -> Truth:
    r = d.rng
    s0 = d.grid(s0)
    nxt = s0 + d.interval
    garbage = r.random() < 0.5
    lingering = r.random() < 0.15
    offset = r.uniform(0.08, 0.15) if lingering else 0.0
    tau = r.uniform(5, 60) * max(1.0, d.interval / 2)
    tau = tau if lingering else _tau(d, 0.7, tau)
    if garbage:
        batch = float(d.base[0] + math.log(r.uniform(0.9, 1.3)) - d.base[s0 - 1])
        d.dl[s0 - 1] += batch  # the garbage batch's own loss: about ln(vocab)
        own = _profile(d.n, s0 + 1, s0 + 1, r.uniform(0.15, 0.5), tau, offset)
        _spike_grad(d, s0, r.uniform(5, 50), width=0.5)
        peaks, onset, detail = [s0], s0, "garbage batch"
    else:
        d.dl[s0 - 1] += math.log(r.uniform(0.3, 0.7))
        own = _profile(d.n, s0 + 1, s0 + 1, r.uniform(0.2, 0.7), tau, offset)
        _spike_grad(d, s0 + 1, r.uniform(1.5, 5), width=0.7)
        peaks, onset, detail = [nxt], s0, "degenerate batch"
    kind, end = _type_of(d, own, s0 + 1, offset)
    rec = "skip_batch" if kind == "recoverable" else "restart_from_checkpoint"
    return Truth("data_corruption", kind, onset, peaks, end, "data_corruption", rec, detail)


def hardware_fault(d: Draft, s0: int, logged: set[str]) -> Truth:
    r = d.rng
    s0 = d.grid(s0)
    variant = (
        "nan_loss"
        if "grad_norm" not in logged
        else str(r.choice(["nan_loss", "absurd_grad", "inf_grad"], p=[0.4, 0.3, 0.3]))
    )
    if variant == "nan_loss":
        d.nan_loss[s0 - 1] = True
        d.nan_grad[s0 - 1] = True
    elif variant == "absurd_grad":
        d.gmul[s0 - 1] += math.log(10 ** r.uniform(4, 9))
    else:
        d.inf_grad[s0 - 1] = True
    return Truth(
        "hardware_fault",
        "recoverable",
        s0,
        [s0],
        s0 + d.interval,
        "hardware_fault",
        "continue",
        variant,
    )


# ----- assembling a run ----------------------------------------------------------------------
PROFILES = {
    "full": ["loss", "grad_norm", "lr", "param_norm", "update_norm", "adam_v_mean", "tokens_per_s"],
    "basic": ["loss", "grad_norm", "lr"],
    "loss_only": ["loss"],
    "megatron": ["loss", "grad_norm", "lr"],
}


def _choose_layout(rng: np.random.Generator, fmt: str | None) -> tuple[str, str, int, int]:
    fmt = fmt or str(rng.choice(FORMATS))
    if fmt == "megatron":
        profile = "megatron"
    else:
        profile = str(rng.choice(["full", "basic", "loss_only"], p=[0.45, 0.35, 0.2]))
    interval = int(rng.choice([1, 1, 5, 10]))
    n = int(rng.uniform(3000, 16000))
    return fmt, profile, interval, n


def _draft(rng: np.random.Generator, n: int, interval: int, precision: str, beta2: float) -> Draft:
    warmup = int(rng.uniform(max(300, 0.04 * n), 0.15 * n))
    lr, peak = lr_schedule(rng, n, warmup)
    z = np.zeros(n)
    b = np.zeros(n, dtype=bool)
    return Draft(
        rng, n, interval, lr, peak, warmup, baseline(rng, n, lr, peak), z.copy(), noise(rng, n),
        grad_baseline(rng, n), z.copy(), z.copy(), b.copy(), b.copy(), b.copy(), beta2,
        precision, b.copy(), n,
    )  # fmt: skip


def _plan(rng: np.random.Generator, cause: str | None, clean: bool) -> list[str]:
    """One incident, sometimes two of compatible causes (one run has one beta2/precision)."""
    if clean:
        return []
    first = cause or str(rng.choice(CAUSES))
    if first in ("lr_too_high", "stale_beta2") or rng.random() < 0.7:
        return [first]
    clash = {"hardware_fault": "fp16_overflow", "fp16_overflow": "hardware_fault"}
    pool = ["rare_tokens", "data_corruption", "hardware_fault", "fp16_overflow"]
    return [first, str(rng.choice([c for c in pool if c != clash.get(first)]))]


def _needs(causes: list[str], rng: np.random.Generator) -> tuple[str, float]:
    precision = "fp16" if "fp16_overflow" in causes or rng.random() < 0.2 else "bf16"
    if "hardware_fault" in causes and "fp16_overflow" not in causes:
        precision = "bf16"
    if "stale_beta2" in causes:
        beta2 = float(rng.choice([0.99, 0.995, 0.999]))
    elif "rare_tokens" in causes or "data_corruption" in causes:
        beta2 = float(rng.choice([0.95, 0.98]))
    else:
        beta2 = float(rng.choice([0.95, 0.98, 0.999]))
    return precision, beta2


def _place(d: Draft, causes: list[str]) -> list[int | None]:
    """Onsets: after start-up, apart, lr_too_high at the end of warm-up, room after each.
    None when a run is too short to hold one more incident 1500 steps from the others (two
    incidents tens of steps apart are one incident to any detector, and one label)."""
    lo = int(max(400, 0.08 * d.n))
    out: list[int | None] = []
    for c in causes:
        s: int | None = None
        if c == "lr_too_high":
            s = int(d.warmup * d.rng.uniform(0.95, 1.3))
        else:
            for _ in range(100):
                t = int(d.rng.uniform(lo, d.n - 1200))
                if all(o is None or abs(t - o) > 1500 for o in out) and abs(t - d.warmup) > 300:
                    s = t
                    break
        out.append(None if s is None else max(s, lo))
    return out


def make_run(
    seed: int,
    *,
    cause: str | None = None,
    clean: bool | None = None,
    fmt: str | None = None,
    interval: int | None = None,
    n_steps: int | None = None,
) -> SynthRun:
    """One labelled run; every choice not pinned by an argument is drawn from `seed`."""
    rng = np.random.default_rng(seed)
    fmt_, profile, interval_, n = _choose_layout(rng, fmt)
    interval = interval or interval_
    n = n_steps or n
    clean = bool(rng.random() < 0.2) if clean is None else clean
    causes = _plan(rng, cause, clean)
    precision, beta2 = _needs(causes, rng)
    logged = set(PROFILES[profile])
    if precision == "fp16" and profile != "loss_only":
        logged |= {"loss_scale", "skipped_iters"}
    beta2_known = bool(rng.random() < 0.75) and profile != "loss_only"
    d = _draft(rng, n, interval, precision, beta2)
    if "stale_beta2" in causes and profile not in ("loss_only", "megatron") and not beta2_known:
        logged.add("adam_v_mean")  # Megatron's log prints no second moment: stays unknown
    placed = [(c, s0) for c, s0 in zip(causes, _place(d, causes), strict=True) if s0 is not None]
    causes = [c for c, _ in placed]
    for c, s0 in placed:
        d.truth.append(_inject(d, c, s0, logged, beta2_known))
    if any(t.cause == "data_corruption" for t in d.truth) and rng.random() < 0.3:
        _repeat_corruption(d, logged)
    d.truth = _labelable(d)
    series = _series(d, logged)
    config = _config(d, beta2_known, rng)
    name = f"synth-{seed:05d}-{'-'.join(causes) or 'clean'}"
    return SynthRun(name, seed, np.arange(1, d.end + 1), series, config, interval,
                    sorted(logged), fmt_, d.truth, _missing(d, series))  # fmt: skip


def _labelable(d: Draft) -> list[Truth]:
    """Incidents a detector can be scored on, by onset: not in the run's last 200 steps, and
    not after a divergence (the run is lost from there; an incident injected into the
    diverging loss is part of it, not an incident of its own)."""
    out = sorted((t for t in d.truth if t.onset < d.end - 200), key=lambda t: t.onset)
    lost = next((t.onset for t in out if t.type == "divergent"), None)
    return [t for t in out if lost is None or t.onset <= lost]


def _inject(d: Draft, cause: str, s0: int, logged: set[str], beta2_known: bool) -> Truth:
    if cause == "stale_beta2":
        return stale_beta2(d, s0, logged, beta2_known)
    fn = {
        "rare_tokens": rare_tokens,
        "lr_too_high": lr_too_high,
        "fp16_overflow": fp16_overflow,
        "data_corruption": data_corruption,
        "hardware_fault": hardware_fault,
    }[cause]
    return fn(d, s0, logged)  # type: ignore[operator]


def _repeat_corruption(d: Draft, logged: set[str]) -> None:
    """A bad shard: more corrupted batches later in the run; all of them call for data_swap."""
    taken = [t.onset for t in d.truth]
    lo, hi = max(400, 0.08 * d.n), d.end - 1200
    # a run that ends (or diverges) within 1200 steps of where a shard could start has no
    # room for one: no repeat (drawing from an empty range raised for such seeds)
    for _ in range(int(d.rng.integers(1, 3)) if hi >= lo else 0):
        for _ in range(50):
            s = int(d.rng.uniform(lo, hi))
            if all(abs(s - o) > 1500 for o in taken) and abs(s - d.warmup) > 300:
                d.truth.append(data_corruption(d, s, logged))
                taken.append(s)
                break
    for t in d.truth:
        if t.cause == "data_corruption":
            t.recovery = "data_swap"


# ----- metric series ----------------------------------------------------------------------------
def _series(d: Draft, logged: set[str]) -> dict[str, np.ndarray]:
    e = d.end
    loss = np.exp(d.base + d.dl + d.eps)[:e]
    loss[d.nan_loss[:e]] = np.nan
    g = (d.grad * np.exp(d.gmul))[:e]
    out = {"loss": loss, "lr": d.lr[:e]}
    scale, skipped = _loss_scale(d)
    g_shown = g.copy()
    g_shown[d.nan_grad[:e]] = np.nan
    g_shown[d.inf_grad[:e]] = np.inf
    out["grad_norm"] = g_shown
    t = np.arange(1, e + 1, dtype=float)
    p0, a = d.rng.uniform(50, 500), d.rng.uniform(0.2, 1.5)
    out["param_norm"] = p0 * (1 + a * np.sqrt(t / d.n)) * np.exp(d.pdrift[:e])
    gc = np.where(np.isfinite(g), g, 0.0)
    v = lfilter([1 - d.beta2], [1, -d.beta2], (gc * 1e-3) ** 2)
    m = lfilter([0.1], [1, -0.9], gc * 1e-3)
    out["adam_v_mean"] = v
    out["update_norm"] = d.lr[:e] * np.abs(m) / (np.sqrt(v) + 1e-12) * 100
    out["tokens_per_s"] = d.rng.uniform(1e5, 2e6) * np.exp(d.rng.normal(0, 0.02, e))
    if d.precision == "fp16":
        out["loss_scale"], out["skipped_iters"] = scale, skipped
    return {k: v for k, v in out.items() if k in logged}


def _loss_scale(d: Draft) -> tuple[np.ndarray, np.ndarray]:
    """Dynamic loss scaler: start-up search from 2**32, x2 after 1000 clean steps, /2 and skip
    on an overflow (the injected ones, the start-up ones and a few routine ones)."""
    e, r = d.end, d.rng
    over = d.overflow[:e].copy()
    over[: int(r.integers(5, 20))] = True  # start-up search from 2**32 down to ~2**16
    scale = np.empty(e)
    s, clean, probe = 2.0**32, 0, -1
    for i in range(e):
        if over[i] or i == probe:  # probe: the one overflow that often follows a growth
            s, clean = max(1.0, s / 2), 0
            over[i] = True
        else:
            clean += 1
            if clean >= 1000:
                s, clean = s * 2, 0
                probe = i + int(r.integers(1, 100)) if r.random() < 0.6 else -1
        scale[i] = s
    return scale, over.astype(float)


def _config(d: Draft, beta2_known: bool, rng: np.random.Generator) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "lr": d.peak_lr,
        "warmup_steps": d.warmup,
        "precision": d.precision,
        "max_grad_norm": 1.0,
        "world_size": int(rng.choice([8, 64, 256])),
        "seq_len": 2048,
        "global_batch_size": int(rng.choice([256, 512, 1024])),
        "train_iters": d.n,
    }
    if beta2_known:
        cfg["adam_beta2"] = d.beta2
    return cfg


def _missing(d: Draft, series: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Megatron prints no grad norm on a skipped iteration."""
    if "skipped_iters" in series:
        return {"grad_norm": series["skipped_iters"] > 0}
    return {}


# ----- writing ------------------------------------------------------------------------------------
MEGATRON_NAMES = {
    "loss": "lm loss",
    "lr": "learning rate",
    "grad_norm": "grad norm",
    "loss_scale": "loss scale",
}


# Tags as common loggers write them (each is in forensics/data/aliases.yaml).
TB_TAGS = {
    "loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "lr": "train/learning_rate",
    "param_norm": "optim/param_norm",
    "update_norm": "optim/update_norm",
    "adam_v_mean": "optim/exp_avg_sq_mean",
    "tokens_per_s": "throughput/tokens_per_sec",
    "loss_scale": "train/loss_scale",
    "skipped_iters": "train/skipped",
}


def logged_rows(run: SynthRun) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Steps that are logged (every `interval`), sampled values, counters summed per window."""
    idx = np.arange(run.interval - 1, len(run.steps), run.interval)
    out = {}
    for k, v in run.series.items():
        if k == "skipped_iters":
            c = np.concatenate([[0.0], np.cumsum(v)])
            out[k] = c[idx + 1] - c[np.maximum(idx + 1 - run.interval, 0)]
        else:
            out[k] = v[idx]
    return run.steps[idx], out


def _num(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return float(f"{v:.6g}")


def write_run(run: SynthRun, folder: Path, fmt: str | None = None) -> Path:
    """Write the run's logs (and config.json / arguments block) under folder/run.name."""
    fmt = fmt or run.fmt
    out = folder / run.name
    out.mkdir(parents=True, exist_ok=True)
    steps, vals = logged_rows(run)
    if fmt != "megatron":
        (out / "config.json").write_text(json.dumps(run.config, indent=1))
    writer = {"jsonl": _jsonl, "csv": _csv, "megatron": _megatron, "tensorboard": _tensorboard}[fmt]
    writer(run, out, steps, vals)
    (out.parent / f"{run.name}.truth.json").write_text(
        json.dumps(
            {
                "run": run.name,
                "interval": run.interval,
                "format": fmt,
                "incidents": [t.as_dict() for t in run.truth],
            },
            indent=1,
        )  # fmt: skip
    )
    return out


def _jsonl(run: SynthRun, out: Path, steps: np.ndarray, vals: dict[str, np.ndarray]) -> None:
    keys = list(vals)
    with open(out / "metrics.jsonl", "w") as fh:
        for i, s in enumerate(steps):
            rec = {"step": int(s), **{k: _num(float(vals[k][i])) for k in keys}}
            fh.write(
                json.dumps(rec).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity") + "\n"
            )


def _csv(run: SynthRun, out: Path, steps: np.ndarray, vals: dict[str, np.ndarray]) -> None:
    keys = list(vals)
    lines = ["step," + ",".join(keys)]
    for i, s in enumerate(steps):
        lines.append(f"{int(s)}," + ",".join(f"{float(vals[k][i]):.6g}" for k in keys))
    (out / "metrics.csv").write_text("\n".join(lines) + "\n")


def _megatron(run: SynthRun, out: Path, steps: np.ndarray, vals: dict[str, np.ndarray]) -> None:
    cfg = run.config
    args = {
        "adam_beta2": cfg.get("adam_beta2"),
        "lr": cfg["lr"],
        "lr_warmup_iters": cfg["warmup_steps"],
        "clip_grad": 1.0,
        "fp16": cfg["precision"] == "fp16",
        "bf16": cfg["precision"] == "bf16",
        "world_size": cfg["world_size"],
        "seq_length": cfg["seq_len"],
        "global_batch_size": cfg["global_batch_size"],
        "train_iters": cfg["train_iters"],
    }
    lines = ["------------------------ arguments ------------------------"]
    lines += [f"  {k} {'.' * (40 - len(k))} {v}" for k, v in args.items() if v is not None]
    lines.append("-------------------- end of arguments ---------------------")
    total = int(cfg["train_iters"])
    missing = run.missing_at.get("grad_norm")
    idx = np.arange(run.interval - 1, len(run.steps), run.interval)
    for i, s in enumerate(steps):
        parts = [f" iteration {int(s):>8d}/{total:>8d} | consumed samples: {int(s) * 4:>10d}"]
        for k, name in MEGATRON_NAMES.items():
            if k not in vals:
                continue
            v = float(vals[k][i])
            if k == "grad_norm" and missing is not None and missing[idx[i]]:
                continue
            if k == "loss" and not math.isfinite(v):
                continue  # Megatron drops `lm loss` on a NaN window and prints grad norm: nan
            parts.append(f"{name}: {v:.6E}" if k in ("loss", "lr") else f"{name}: {v:.3f}")
        skipped = int(vals["skipped_iters"][i]) if "skipped_iters" in vals else 0
        nan = 0 if math.isfinite(float(vals["loss"][i])) else 1
        parts.append(f"number of skipped iterations: {skipped:3d}")
        parts.append(f"number of nan iterations: {nan:3d}")
        lines.append(" | ".join(parts) + " |")
    (out / "train.log").write_text("\n".join(lines) + "\n")


def _tensorboard(run: SynthRun, out: Path, steps: np.ndarray, vals: dict[str, np.ndarray]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(out / "tb"))
    tags = {k: TB_TAGS.get(k, f"train/{k}") for k in vals}
    for i, s in enumerate(steps):
        for k, tag in tags.items():
            w.add_scalar(tag, float(vals[k][i]), int(s))
    w.close()
