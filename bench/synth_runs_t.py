"""A second labelled run generator, written apart from synth_runs.py on purpose.

Detection was tuned while looking at synth_runs.py; a detector that only learned that
generator's habits would score well there and badly on runs nobody here wrote. This one
shares no code or constants with it and differs where real runs differ:

- noise: AR(1) log-loss residuals with Student-t innovations (heavy tails, correlated
  micro-batch losses), a gradient norm with its own AR(1)-t noise;
- schedules: cyclic (triangular), cosine with warm restarts, inverse square root and
  warmup-stable-decay (WSD), with a loss that follows the LR a little (seasonal);
- logging: every 1, 2, 4, 8 or 20 steps, the last step's value or the mean of the window
  (as Megatron averages), written as llm.c `main.log`, modded-nanogpt `step:` lines, or JSONL
  with W&B-style keys and a config.json;
- incidents: the same six mechanisms, drawn with their own shapes and ranges (weaker
  gradient jumps for rare tokens, divergences that end in NaN, echoes of a stale beta2).

    make_run(seed) -> TRun        write_run(run, folder) -> Path
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("rare_tokens", "stale_beta2", "lr_too_high", "fp16_overflow", "data_corruption",
         "hardware_fault")  # fmt: skip
WINDOW = 500  # steps after the last peak within which a recoverable spike is back
BACK = 0.03  # "back": noise-free excess below 3%
GRAD_NOISE_MAX = math.log(10)  # the gradient norm's noise stays within 10x of its trend


@dataclass
class TRun:
    name: str
    steps: np.ndarray  # logged steps
    values: dict[str, np.ndarray]  # logged values per canonical metric
    config: dict[str, Any]
    interval: int
    fmt: str
    truth: list[dict[str, Any]] = field(default_factory=list)
    # injected, but below the visibility bar at every logged point: neither a miss nor,
    # when a detector finds it anyway (noise lifted it), a false alarm
    faint: list[dict[str, Any]] = field(default_factory=list)


def _ar_t(rng: np.random.Generator, n: int, phi: float, df: float, scale: float) -> np.ndarray:
    eps = rng.standard_t(df, n) * scale
    out = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc = phi * acc + eps[i]
        out[i] = acc
    return out * math.sqrt(1 - phi**2)  # stationary scale ~ `scale`


def _schedule(
    rng: np.random.Generator, n: int, min_warm: int
) -> tuple[np.ndarray, float, int, str]:
    peak = float(10 ** rng.uniform(-3.7, -2.7))
    warm = max(min_warm, int(rng.uniform(0.02, 0.12) * n))
    t = np.arange(1, n + 1, dtype=float)
    ramp = np.minimum(1.0, t / warm)
    kind = str(rng.choice(["cyclic", "sgdr", "invsqrt", "wsd"]))
    u = np.clip(t - warm, 0, None)
    if kind == "cyclic":
        period = rng.uniform(0.15, 0.4) * n
        shape = 0.55 + 0.45 * np.abs((u / period) % 2 - 1)  # from the top, down and back
    elif kind == "sgdr":
        period = rng.uniform(0.2, 0.5) * n
        shape = 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * ((u / period) % 1)))
    elif kind == "invsqrt":
        shape = np.sqrt(warm / np.maximum(t, warm))
    else:
        stable = rng.uniform(0.6, 0.85) * n
        shape = np.where(t < stable, 1.0, 1 - 0.9 * np.clip((t - stable) / (n - stable), 0, 1))
    return peak * ramp * shape, peak, warm, kind


def _loss_base(rng: np.random.Generator, n: int, lr: np.ndarray, peak: float) -> np.ndarray:
    t = np.arange(1, n + 1, dtype=float)
    top = math.log(float(rng.choice([50304, 65536, 151936])))
    floor = rng.uniform(1.8, 3.4)
    curve = floor + (top - floor) * (0.6 * np.exp(-t / rng.uniform(30, 150))
                                     + 0.4 * (1 + t / rng.uniform(100, 600)) ** -0.5)  # fmt: skip
    seasonal = rng.uniform(0.0, 0.03) * lr / peak  # the loss sits a little higher at high LR
    return np.log(curve) + seasonal


@dataclass
class _D:
    rng: np.random.Generator
    n: int
    lr: np.ndarray
    warm: int
    excess: np.ndarray  # added log-loss
    gmul: np.ndarray  # added log grad norm
    nan: np.ndarray  # non-finite loss at the step
    halvings: list[int] = field(default_factory=list)
    garbage: list[int] = field(default_factory=list)
    end: int = 0
    interval: int = 1
    mean_window: bool = False

    def seen(self, step: int) -> bool:
        """Whether the log shows step `step` as a point of its own (not averaged away)."""
        return step % self.interval == 0 and not (self.mean_window and self.interval > 1)


def _decay(n: int, at: int, amp: float, tau: float, rise: int = 0, offset: float = 0.0):  # type: ignore[no-untyped-def]
    t = np.arange(1, n + 1, dtype=float)
    up = np.clip((t - (at - rise)) / max(rise, 1), 0, 1) if rise else (t >= at).astype(float)
    down = np.exp(-np.clip(t - at, 0, None) / tau)
    return np.where(t >= at - rise, amp * up * down + offset * (t >= at), 0.0)


def _back_at(own: np.ndarray, last_peak: int) -> int | None:
    after = np.nonzero(own[last_peak:] < math.log1p(BACK))[0]
    if len(after) and after[0] <= WINDOW:
        return last_peak + int(after[0])
    return None


def _kind(own: np.ndarray, last_peak: int, offset: float) -> tuple[str, int | None]:
    if offset > 0:
        return "lingering", None
    back = _back_at(own, last_peak)
    return ("recoverable", back) if back is not None else ("lingering", None)


def _rare(d: _D, s: int, logged: set[str], beta2: float) -> dict[str, Any]:
    r = d.rng
    d.gmul[s - 1] += math.log(r.uniform(3.5, 150))  # weaker jumps too than synth_runs'
    amp, tau = r.uniform(0.2, 1.2), r.uniform(1.5, 30)
    own = _decay(d.n, s, amp, tau)
    d.excess += own
    kind, end = _kind(own, s, 0.0)
    # the batch's one-step gradient is evidence only when that step's grad norm is logged
    exp = "rare_tokens" if "grad_norm" in logged and s % d.interval == 0 else "batch_driven"
    return _t("rare_tokens", exp, kind, s, [s], end)


def _stale(d: _D, s: int, logged: set[str], beta2: float) -> dict[str, Any]:
    r = d.rng
    d.gmul[s - 1] += math.log(r.uniform(8, 80))
    peaks, amp = [s], r.uniform(0.3, 0.8)
    offset = r.uniform(0.09, 0.14) if r.random() < 0.5 else 0.0
    own = _decay(d.n, s, amp, r.uniform(80, 220), offset=offset)
    at = s
    for _ in range(int(r.integers(1, 4))):
        at += int(r.uniform(12, 70))
        own += _decay(d.n, at, amp * r.uniform(0.4, 0.9), r.uniform(4, 12))
        d.gmul[at - 1] += math.log(r.uniform(2, 4))
        peaks.append(at)
    d.excess += own
    kind, end = _kind(own, peaks[-1], offset)
    return _t("stale_beta2", "stale_beta2", kind, s, peaks, end)


def _lr(d: _D, s: int, logged: set[str], beta2: float) -> dict[str, Any]:
    r = d.rng
    t = np.arange(1, d.n + 1, dtype=float)
    lead = r.uniform(150, 500)
    d.gmul += np.clip((t - (s - lead)) / lead, 0, 1.6) ** 2 * math.log(r.uniform(2.5, 5))
    peaks, at, amp = [], s, r.uniform(0.2, 0.45)
    for _ in range(int(r.integers(2, 5))):
        d.excess += _decay(d.n, at, amp, r.uniform(8, 40), rise=int(r.integers(0, 6)))
        peaks.append(at)
        at += int(r.uniform(40, 220))
        amp *= r.uniform(1.05, 1.4)
    if r.random() < 0.5:
        d.excess += np.where(t >= peaks[-1], r.uniform(0.09, 0.14), 0.0)
        kind = "lingering"
    else:
        kind = "divergent"
        climb = r.uniform(80, 300)
        d.excess += np.clip((t - peaks[-1]) / climb, 0, 1) * r.uniform(0.8, 2.0)
        d.end = min(d.n, peaks[-1] + int(climb) + int(r.uniform(100, 400)))
        if r.random() < 0.6:  # ends in NaN: one incident, not two
            d.nan |= t >= peaks[-1] + climb * r.uniform(0.6, 1.0)
    ok = "lr" in logged and "grad_norm" in logged
    return _t("lr_too_high", "lr_too_high" if ok else "unknown", kind, s, peaks, None)


def _fp16(d: _D, s: int, logged: set[str], beta2: float) -> dict[str, Any]:
    r = d.rng
    d.halvings += sorted(s + r.choice(np.arange(0, 25), int(r.integers(3, 6)), replace=False))
    peak = s + int(r.integers(3, 15))
    own = _decay(d.n, peak, r.uniform(0.3, 0.9), r.uniform(10, 50), rise=peak - s)
    d.excess += own
    kind, end = _kind(own, peak, 0.0)
    exp = "fp16_overflow" if "loss_scale" in logged else "unknown"
    return _t("fp16_overflow", exp, kind, s, [peak], end)


def _corrupt(d: _D, s: int, logged: set[str], beta2: float) -> dict[str, Any]:
    r = d.rng
    d.garbage.append(s)  # its own loss is about ln(vocab): set once the baseline is known
    d.gmul[s - 1] += math.log(r.uniform(6, 40))
    own = _decay(d.n, s + 1, r.uniform(0.1, 0.35), r.uniform(3, 25))
    d.excess += own
    kind, end = _kind(own, s + 1, 0.0)
    # the garbage batch's own loss (about ln(vocab)) tells corrupt data; averaged away or
    # between two logged points, what is left is a batch-shaped spike
    exp = "data_corruption" if d.seen(s) else "batch_driven"
    return _t("data_corruption", exp, kind, s, [s], end)


def _hw(d: _D, s: int, logged: set[str], beta2: float) -> dict[str, Any]:
    s -= s % d.interval  # a fault on a step the log prints (else the log holds no trace of it)
    d.nan[s - 1] = True
    return _t("hardware_fault", "hardware_fault", "recoverable", s, [s], s + 1)


def _t(cause: str, exp: str, kind: str, onset: int, peaks: list[int], end: int | None) -> dict:  # type: ignore[type-arg]
    return {"cause": cause, "expected_cause": exp, "type": kind, "onset": int(onset),
            "peaks": [int(p) for p in peaks], "end": None if end is None else int(end)}  # fmt: skip


INJECT = {"rare_tokens": _rare, "stale_beta2": _stale, "lr_too_high": _lr,
          "fp16_overflow": _fp16, "data_corruption": _corrupt, "hardware_fault": _hw}  # fmt: skip
PROFILES = {
    "llmc": ["loss", "lr", "grad_norm"],
    "modded": ["loss"],
    "wandb": ["loss", "lr", "grad_norm", "loss_scale", "param_norm"],
}


def make_run(seed: int) -> TRun:
    """One run with zero to two incidents of random kinds (a clean run one time in five)."""
    rng = np.random.default_rng([seed, 15])
    n = int(rng.uniform(2500, 12000))
    fmt = str(rng.choice(list(PROFILES), p=[0.35, 0.25, 0.4]))
    logged = set(PROFILES[fmt])
    interval = int(rng.choice([1, 1, 2, 4, 8, 20] if fmt != "modded" else [1, 1, 2]))
    kinds = [] if rng.random() < 0.2 else list(rng.choice(KINDS, int(rng.integers(1, 3))))
    lr, peak, warm, sched = _schedule(rng, n, 500 if "lr_too_high" in kinds else 0)
    if "lr_too_high" in kinds:
        kinds = ["lr_too_high"]  # a run that diverges has nothing after it
    if "stale_beta2" in kinds:
        kinds = ["stale_beta2"]  # with beta2 0.999 every gradient spike is amplified
    precision = "fp16" if "fp16_overflow" in kinds or rng.random() < 0.2 else "bf16"
    beta2 = 0.999 if "stale_beta2" in kinds else float(rng.choice([0.95, 0.98]))
    if "loss_scale" in logged and precision != "fp16":
        logged.discard("loss_scale")
    mean_window = fmt == "wandb" and rng.random() < 0.5
    d = _D(rng, n, lr, warm, np.zeros(n), np.zeros(n), np.zeros(n, bool), end=n,
           interval=interval, mean_window=mean_window)  # fmt: skip
    truth = []
    slots = np.linspace(0.25, 0.85, len(kinds) + 1)[: len(kinds)] if kinds else []
    for kind, at in zip(kinds, slots, strict=True):
        s = int(at * n + rng.uniform(0, 0.1) * n)
        if kind == "lr_too_high":  # the end of warm-up, where the LR is at its top
            s = max(int(warm * rng.uniform(1.0, 1.3)), 600)
        truth.append(INJECT[kind](d, s, logged, beta2))
    base = _loss_base(rng, n, lr, peak)
    log_loss = base + d.excess
    # heavy tails, but no tail so heavy that noise alone makes an unlabelled +15% batch spike
    log_loss += _ar_t(rng, n, rng.uniform(0.2, 0.8), rng.uniform(4.5, 10), rng.uniform(0.004, 0.01))
    for g in d.garbage:
        log_loss[g - 1] = base[0] + math.log(rng.uniform(0.85, 1.15))
    loss = np.exp(log_loss)
    loss[d.nan] = np.nan
    gn = 0.25 * np.exp(-np.arange(n) / (0.3 * n)) + 0.15
    # heavy-tailed but bounded: t(4) innovations reach 100 scales once in ~10^8 points, a
    # 1000x gradient that no optimizer shows as noise (the detector rightly calls it a
    # hardware suspect); a clean run's gradient stays within GRAD_NOISE_MAX of its trend
    gnoise = np.clip(_ar_t(rng, n, 0.5, 4, 0.08), -GRAD_NOISE_MAX, GRAD_NOISE_MAX)
    gn = gn * np.exp(d.gmul + gnoise)
    gn[d.nan] = np.nan
    series = {"loss": loss, "lr": lr, "grad_norm": gn}
    if precision == "fp16":
        scale = np.full(n, 65536.0)
        for h in d.halvings:
            scale[h - 1 :] /= 2
        series["loss_scale"] = scale
    series["param_norm"] = (
        300 + np.cumsum(np.full(n, 0.01)) + np.cumsum(np.clip(d.gmul, 0, None)) * 0.05
    )
    end = d.end
    idx = np.arange(interval - 1, end, interval)
    values = {}
    for k in logged:
        v = series[k][:end]
        if mean_window and k == "loss" and interval > 1:  # a NaN spoils its own window only
            values[k] = v[: len(idx) * interval].reshape(len(idx), interval).mean(axis=1)
        else:
            values[k] = v[idx]
    shown = _shown_excess(d, base, idx, mean_window)
    faint = [t for t in truth if not _visible(t, d, shown, idx)]
    truth = [t for t in truth if _visible(t, d, shown, idx)]
    cfg = {"peak_lr": peak, "warmup_steps": warm, "schedule": sched, "precision": precision,
           "global_batch_size": 512, "seq_length": 2048, "train_iters": n}  # fmt: skip
    if rng.random() < 0.7:
        cfg["adam_beta2"] = beta2
    for tr in truth:  # beta2 only tells stale_beta2 when the config gives it
        if (tr["expected_cause"] == "batch_driven" and precision == "fp16"
                and "loss_scale" not in logged and interval > 1):  # fmt: skip
            tr["expected_cause"] = "unknown"  # an overflow's ramp can hide in one sparse point
        if tr["cause"] == "stale_beta2" and "adam_beta2" not in cfg:
            tr["expected_cause"] = "unknown"
        if tr["end"] is not None and tr["end"] > end:
            tr["end"] = None
    name = f"trun-{seed:06d}-{'-'.join(kinds) or 'clean'}"
    return TRun(name, np.arange(1, n + 1)[idx], values, cfg, interval, fmt, truth, faint)


def _shown_excess(d: _D, base: np.ndarray, idx: np.ndarray, mean_window: bool) -> np.ndarray:
    """Noise-free log-excess of each logged point over the clean curve. A garbage batch's
    own loss (about ln(vocab)) counts too: a logger that averages its window averages that
    loss in with the others, so the window's point shows it even when the step is not one
    the log prints on its own."""
    ex = d.excess.copy()
    for g in d.garbage:
        ex[g - 1] = max(ex[g - 1], base[0] - base[g - 1])
    if mean_window and d.interval > 1:
        win = np.exp(ex[: len(idx) * d.interval]).reshape(len(idx), d.interval)
        return np.log(win.mean(axis=1))
    return ex[idx]


def _visible(t: dict[str, Any], d: _D, shown: np.ndarray, idx: np.ndarray) -> bool:
    """An incident the log can show: a non-finite value or a scale collapse, or a noise-free
    excess of 15% (the least any real spike shows) at a logged point; a spike that decays
    between two logged points is not in the log."""
    if t["cause"] in ("hardware_fault", "fp16_overflow") or t["type"] != "recoverable":
        return True
    lo, hi = t["onset"] - 1, max(t["peaks"]) + WINDOW
    steps = idx + 1
    inside = (steps >= lo) & (steps <= hi)
    return bool(inside.any() and shown[inside].max() >= math.log(1.15)) or bool(
        t["onset"] in d.garbage and d.seen(t["onset"])
    )


def write_run(run: TRun, folder: Path) -> Path:
    """Write the run in its format; returns the file or folder to ingest."""
    out = folder / run.name
    out.mkdir(parents=True, exist_ok=True)
    v = run.values
    if run.fmt == "llmc":
        lines = [
            f"s:{s} trl:{v['loss'][i]:.4f} lr:{v['lr'][i]:.6f} norm:{v['grad_norm'][i]:.4f}"
            for i, s in enumerate(run.steps)
        ]
        path = out / "main.log"
    elif run.fmt == "modded":
        total = int(run.steps[-1])
        lines = [
            f"step:{s}/{total} train_loss:{v['loss'][i]:.4f} train_time:{s * 170}ms "
            f"step_avg:170.00ms"
            for i, s in enumerate(run.steps)
        ]
        path = out / "train.txt"
    else:
        keys = {"loss": "train/loss", "lr": "optim/lr", "grad_norm": "optim/grad_norm",
                "loss_scale": "train/loss_scale", "param_norm": "optim/param_norm"}  # fmt: skip
        lines = [
            json.dumps({"_step": int(s), **{keys[k]: _num(v[k][i]) for k in v}})
            for i, s in enumerate(run.steps)
        ]
        path = out / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n")
    (out / "config.json").write_text(json.dumps(run.config))
    return out


def _num(x: float) -> Any:
    return "NaN" if not math.isfinite(x) else float(f"{x:.6g}")
