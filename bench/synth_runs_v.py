"""A third labelled run generator, written without looking at the detector or at the two
generators before it (bench/synth_runs.py, bench/synth_runs_t.py).

Why it exists: a detector tuned on generated runs learns the generator's habits. This one
is built from how real runs look (/work/shared/real_logs and the training chronicles
summarised in its SOURCES.md), and spends most of its effort on the *benign* features of
clean runs that a detector could take for incidents, so that false alarms are measured
where they come from:

- LR schedules whose changes move the loss: step decay (a sharp drop of several percent at
  each milestone), WSD (a loss drop in the decay phase), cosine, linear, constant, and
  continued pre-training, whose LR re-warm lifts an annealed model's loss for hundreds of
  steps before it comes down again. The loss follows an EMA of the LR (`c_lr` term).
- Multi-epoch fine-tuning: at the start of epoch 2+ the training loss drops (data seen
  before), while the validation loss does not follow it.
- Warm-up: a high initial loss (ln V for a model trained from scratch) and a fast descent
  driven by tokens seen, so a batch-size ramp bends the curve and shrinks the noise.
- Logging: the interval changes mid-run (a resume with another `logging_steps` /
  `--log-interval`), a resume whose log misses some steps (a gap), evaluation loss beside
  the training loss, and per-writer aggregation: the HF Trainer and Megatron average the
  loss over the logging window (Megatron leaves out skipped iterations and drops the
  `lm loss` field when the average is NaN or 0; the Trainer rounds to 4 decimals and, with
  `logging_nan_inf_filter`, replaces a NaN step by the window's mean), a custom TensorBoard
  loop or Lightning logs the step's own value (or a running mean).
- Loss noise that is not Gaussian: a small Gaussian core, hard batches (+5-10%), easy
  batches (-2-6%), and a slow AR(1) wander (data-mix drift).
- The gradient norm's own life: high early, benign one-step blips (x3-8, clipped, a loss
  bump of 0-3%), a slow rise during the LR decay, `inf` at fp16 overflow steps.
- Healthy fp16: a dynamic loss scaler that doubles every `growth_interval` clean steps and
  halves on the next overflow, skipping that step (about every 1000-2000 steps), with the
  early loss-scale search of Megatron (2^32 down to the usable scale, all skipped).

Faults, six causes with shapes of this generator's own design (`_inject_*`): rare tokens (one
to three batches: a gradient spike and the batch's loss, a short tail), data corruption
(a garbage shard at random-token loss level, or a degenerate shard whose loss collapses
below trend and whose updates then lift the loss), stale beta2 (beta2 >= 0.99; a gradient
spike whose oversized Adam updates raise the loss over several steps, with echoes and a slow
tail), LR too high (gradient-norm drift at peak LR, then recurring growing spikes), fp16
overflow (a cascade of halvings and skipped steps, the loss rising after the scale fell),
hardware fault (one or two steps with a NaN/Inf or absurd loss, skipped, no lasting
effect). About 35% of runs are clean; 30% of faulted runs hold two incidents.

Truth (`VRun.truth`, the dicts `bench/accuracy.py`'s `score()` reads): `cause`, `type`
(recoverable / lingering / divergent, judged on the noise-free curve against the clean
counterfactual: back within 2% inside 450 steps of the last peak; settled 5-20% above it;
non-finite for good or >= +40% to the end), `onset`, `peaks` (the logged steps holding the
highest noise-free excess of each designed peak), `end` (first logged step back, for
recoverable), `expected_cause` and `detail`. `expected_cause` is what the *file* can show:

- rare_tokens: the gradient norm is logged at a step of the batch -> rare_tokens; else a
  batch's shape in the logged loss (under half its peak excess within two logged points)
  -> batch_driven; else unknown.
- data_corruption: the logged loss reaches the random-token level (>= 0.8 ln V) or sits
  >= 15% below the clean curve inside the shard -> data_corruption; else as rare_tokens
  without the gradient (batch_driven / unknown).
- stale_beta2: a config the run's folder holds says beta2 >= 0.99 and the gradient norm
  is logged -> stale_beta2; else unknown.
- lr_too_high: the LR is known (logged, or peak LR in the config) and the gradient norm
  is logged -> lr_too_high; else unknown.
- fp16_overflow: the loss scale or skipped-iteration counts are logged, or the gradient
  norm (inf at an overflowed step, as the writers log it) is logged at an overflow step
  before the peak and the run's config file says fp16 -> fp16_overflow; else unknown.
- hardware_fault: it is in the truth only when the logged loss shows the bad value.

An injection whose noise-free logged excess stays under max(15%, 5 x the logged noise)
everywhere (and shows no bad value) is not a truth but goes to `faint`: neither a miss nor,
when noise lifts it, a false alarm. A Lightning run may log the gradient norm as
`grad_2.0_norm_total` (what `lightning.pytorch.utilities.grad_norm` names it): the truth
counts it as logged, since the file holds it.

    VRun = make_run(seed); folder = write_run(run, Path(tmp))
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CAUSES = (
    "rare_tokens",
    "stale_beta2",
    "lr_too_high",
    "fp16_overflow",
    "data_corruption",
    "hardware_fault",
)
WRITERS = ("tensorboard", "hf", "lightning", "megatron")
VISIBLE = 0.15  # noise-free logged excess below which an injection is faint
RECOVERED = 0.02  # excess under which the loss is back
WINDOW = 450  # a recoverable incident is back within this many steps of its last peak
VOCABS = (32000, 50257, 50304, 100277, 128256)


@dataclass
class VRun:
    """One generated run: per-step series (index = step, 0 unused) and how it is logged."""

    name: str
    seed: int
    writer: str
    kind: str  # pretrain | finetune | cpt
    n_steps: int
    interval: int  # the largest logging interval of the run (the scorer's tolerance)
    segments: list[tuple[int, int]]  # (first step, every): logging interval from that step
    gap: tuple[int, int] | None  # steps lo..hi (inclusive) missing from the log
    loss_mode: str  # instant | mean | hf | megatron
    config: dict[str, Any]
    writer_opts: dict[str, Any]
    loss: np.ndarray
    grad_norm: np.ndarray
    lr: np.ndarray
    loss_scale: np.ndarray | None
    skipped: np.ndarray  # bool: the update was skipped (overflow, NaN guard)
    batch_size: np.ndarray
    epoch: np.ndarray
    val: dict[int, float]
    logged: np.ndarray  # logged steps, rising
    window_start: np.ndarray  # first step of each logged step's averaging window
    truth: list[dict[str, Any]] = field(default_factory=list)
    faint: list[dict[str, Any]] = field(default_factory=list)
    benign: list[str] = field(default_factory=list)

    @property
    def fmt(self) -> str:
        return self.writer


# ----- small helpers ---------------------------------------------------------------------
def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def _pick(rng: np.random.Generator, items: list[Any], p: list[float] | None = None) -> Any:
    if p is not None:
        p = list(np.asarray(p, dtype=float) / float(np.sum(p)))
    return items[int(rng.choice(len(items), p=p))]


def _after(n: int, t0: int, tau: float) -> np.ndarray:
    """exp(-(t - t0) / tau) for t >= t0, else 0 (index = step)."""
    t = np.arange(n + 1, dtype=float)
    out = np.exp(-(t - t0) / tau)
    out[t < t0] = 0.0
    return out


def _pulse(n: int, at: int, rise: int, tau: float) -> np.ndarray:
    """0 before at - rise, a smooth rise to 1 at `at`, then exp decay with tau."""
    t = np.arange(n + 1, dtype=float)
    out = np.zeros(n + 1)
    start = at - max(rise, 0)
    if rise > 0:
        x = np.clip((t - start) / rise, 0.0, 1.0)
        up = x * x * (3 - 2 * x)
        out[(t >= start) & (t < at)] = up[(t >= start) & (t < at)]
    out[t >= at] = np.exp(-(t[t >= at] - at) / tau)
    return out


def _ramp(n: int, lo: int, hi: int) -> np.ndarray:
    """0 before lo, linear to 1 at hi, 1 after."""
    t = np.arange(n + 1, dtype=float)
    return np.clip((t - lo) / max(hi - lo, 1), 0.0, 1.0)


# ----- the clean run ---------------------------------------------------------------------
@dataclass
class _Plan:
    rng: np.random.Generator
    n: int
    kind: str
    writer: str
    precision: str
    beta2: float
    peak_lr: float
    warmup: int
    schedule: str
    lr: np.ndarray
    batch: np.ndarray
    vocab: int
    l0: float
    nf: np.ndarray  # noise-free clean training loss (index = step)
    nf_val: np.ndarray  # noise-free clean validation loss
    benign: list[str]
    milestones: list[int]  # level shifts of the clean loss: LR milestones, epoch starts
    epochs: int
    steps_per_epoch: float


def _schedule(
    rng: np.random.Generator, n: int, kind: str, benign: list[str], flat: bool = False
) -> tuple:
    if flat:
        schedule = _pick(rng, ["constant", "wsd"])
        warmup = int(max(10, n * _u(rng, 0.01, 0.06)))
    elif kind == "cpt":
        schedule = "rewarm_cosine"
        warmup = int(n * _u(rng, 0.08, 0.25))
    else:
        schedule = _pick(
            rng,
            ["cosine", "linear", "step", "wsd", "constant"],
            [0.35, 0.15, 0.2, 0.2, 0.1] if kind == "pretrain" else [0.3, 0.4, 0.15, 0.05, 0.1],
        )
        warmup = int(max(10, n * _u(rng, 0.01, 0.1)))
    peak = float(10 ** _u(rng, -4.3, -3.0)) if kind != "finetune" else float(10 ** _u(rng, -5, -4))
    min_frac = _pick(rng, [0.0, 0.1, 0.1, 0.05])
    t = np.arange(n + 1, dtype=float)
    lr = np.full(n + 1, peak)
    post = np.clip((t - warmup) / max(n - warmup, 1), 0.0, 1.0)
    milestones: list[int] = []
    if schedule in ("cosine", "rewarm_cosine"):
        lr = peak * (min_frac + (1 - min_frac) * 0.5 * (1 + np.cos(np.pi * post)))
    elif schedule == "linear":
        lr = peak * (1 - (1 - min_frac) * post)
    elif schedule == "step":
        gamma = _pick(rng, [0.1, 0.3, 0.5])
        fracs = _pick(rng, [[0.5, 0.8], [0.6], [0.33, 0.66], [0.75]])
        milestones = [int(warmup + f * (n - warmup)) for f in fracs]
        lr = np.full(n + 1, peak)
        for m in milestones:
            lr[t >= m] *= gamma
        benign.append(f"step_decay x{gamma} at {milestones}")
    elif schedule == "wsd":
        frac = _u(rng, 0.1, 0.25) if not flat else _u(rng, 0.05, 0.1)
        d0 = int(n * (1 - frac))
        shape = _pick(rng, ["linear", "sqrt"])
        x = np.clip((t - d0) / max(n - d0, 1), 0.0, 1.0)
        decay = 1 - x if shape == "linear" else 1 - np.sqrt(x)
        lr = peak * (min_frac + (1 - min_frac) * decay)
        milestones = [d0]
        benign.append(f"wsd decay from {d0} ({shape})")
    warm = np.clip(t / max(warmup, 1), 0.0, 1.0)
    lr = lr * np.where(t < warmup, warm, 1.0)
    lr[0] = 0.0
    return schedule, warmup, peak, lr, milestones


def _ema(x: np.ndarray, tau: float) -> np.ndarray:
    out = np.empty_like(x)
    a = 1.0 / max(tau, 1.0)
    acc = x[0]
    for i, v in enumerate(x):
        acc += a * (v - acc)
        out[i] = acc
    return out


def _clean_plan(
    rng: np.random.Generator, n: int, kind: str, writer: str, flat: bool = False
) -> _Plan:
    benign: list[str] = []
    schedule, warmup, peak, lr, milestones = _schedule(rng, n, kind, benign, flat)
    if kind == "cpt":
        benign.append(f"continued pre-training: LR re-warm over {warmup} steps")
    vocab = _pick(rng, list(VOCABS))
    t = np.arange(n + 1, dtype=float)
    # batch size, and its ramp (Megatron's rampup-batch-size and its kin)
    if kind == "finetune":
        b_final = int(_pick(rng, [8, 16, 32, 64, 128]))
    else:
        b_final = int(_pick(rng, [128, 256, 512, 1024, 2048]))
    batch = np.full(n + 1, b_final, dtype=np.int64)
    if kind == "pretrain" and rng.random() < 0.3:
        b0 = max(8, b_final // int(_pick(rng, [4, 8, 16])))
        ramp_end = int(n * _u(rng, 0.05, 0.3))
        incs = int(rng.integers(4, 16))
        frac = np.floor(np.clip(t / max(ramp_end, 1), 0, 1) * incs) / incs
        batch = (b0 + (b_final - b0) * frac).astype(np.int64)
        benign.append(f"batch ramp {b0}->{b_final} over {ramp_end} steps")
    batch[0] = 0
    # progress in tokens seen, slowed by a tiny LR in warm-up
    drive = np.sqrt(np.clip(lr / peak, 0.0, 1.0)) * batch / b_final
    prog = np.cumsum(drive)
    c_lr = _u(rng, 0.04, 0.12)
    if kind == "pretrain":
        l0 = math.log(vocab) * _u(rng, 0.97, 1.04)
        l_inf = _u(rng, 2.2, 3.6)
        tau, alpha = _u(rng, 15, 120), _u(rng, 0.35, 0.8)
    elif kind == "finetune":
        l0 = _u(rng, 1.6, 3.4)
        l_inf = l0 * _u(rng, 0.45, 0.8)
        tau, alpha = _u(rng, 10, 150), _u(rng, 0.3, 0.7)
    else:  # cpt: an annealed model on shifted data
        l_inf = _u(rng, 2.0, 3.2)
        l0 = l_inf * _u(rng, 1.03, 1.15)
        tau, alpha = _u(rng, 200, 1500), _u(rng, 0.3, 0.6)
        c_lr = _u(rng, 0.06, 0.12)
    desc = l_inf + (l0 - l_inf) * (1 + prog / tau) ** (-alpha)
    lr_term = 1 + c_lr * _ema(lr / peak, _u(rng, 8, 40))
    if kind == "pretrain":
        # the model trained from scratch starts at ln V whatever the LR term says
        lr_term = 1 + (lr_term - 1) * np.clip(prog / (5 * tau), 0, 1)
    nf = desc * lr_term
    if kind == "cpt":
        t_f = _u(rng, 150, 700)
        rise = _u(rng, 0.02, 0.05) * (1 - np.exp(-t / t_f)) * np.exp(-t / (t_f * _u(rng, 2, 4)))
        nf = nf * (1 + rise)
        benign.append("slow loss rise after the re-warm")
    nf_val = nf * (1 + _u(rng, -0.01, 0.04))
    epochs = 1
    if kind == "finetune" and rng.random() < 0.6:
        epochs = int(rng.integers(2, 5))
        per = n / epochs
        factor = np.ones(n + 1)
        overfit = np.ones(n + 1)
        for e in range(1, epochs):
            b = int(round(e * per))
            milestones.append(b)
            d = _u(rng, 0.03, 0.15)
            ramp = int(rng.integers(3, 30))
            factor *= 1 - d * _ramp(n, b, b + ramp)
            overfit *= 1 + _u(rng, 0.0, 0.03) * _ramp(n, b, b + ramp * 5)
        nf = nf * factor
        nf_val = nf_val * overfit
        benign.append(f"{epochs} epochs: loss drops at each epoch start")
    steps_per_epoch = n / epochs if epochs > 1 else n * _u(rng, 1.5, 40)
    nf[0] = nf[1]
    nf_val[0] = nf_val[1]
    precision = _pick(rng, ["bf16", "fp16", "fp32"], [0.6, 0.3, 0.1])
    beta2 = _pick(rng, [0.95, 0.98, 0.99, 0.999], [0.35, 0.15, 0.15, 0.35])
    return _Plan(
        rng, n, kind, writer, precision, beta2, peak, warmup, schedule, lr, batch, vocab,
        l0, nf, nf_val, benign, milestones, epochs, steps_per_epoch,
    )  # fmt: skip


# ----- injections ------------------------------------------------------------------------
@dataclass
class _Inj:
    cause: str
    onset: int
    peaks: list[int]  # designed peak steps
    detail: str
    model: np.ndarray  # relative excess of the model (train and validation)
    batch: np.ndarray  # relative excess of the training batch only
    level: dict[int, float] = field(default_factory=dict)  # absolute batch loss (garbage)
    grad: np.ndarray | None = None  # gradient-norm multiplier
    bad: dict[int, float] = field(default_factory=dict)  # step -> nan / inf / absurd factor
    overflow: list[int] = field(default_factory=list)  # forced fp16 overflows
    scale_cap_div: float = 1.0  # the scaler's usable scale after the event, divided by
    nan_from: int | None = None  # loss non-finite from this step on
    stop_at: int | None = None  # the run ends here (crashed)
    batch_steps: list[int] = field(default_factory=list)  # steps of the trigger batch(es)
    design: str = "recoverable"


def _blank(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(n + 1), np.zeros(n + 1), np.ones(n + 1)


def _inject_rare_tokens(p: _Plan, s: int, small: bool) -> _Inj:
    rng, n = p.rng, p.n
    model, batch, grad = _blank(n)
    k = 1 if rng.random() < 0.7 else int(rng.integers(2, 4))
    steps = [s]
    for _ in range(k - 1):
        steps.append(steps[-1] + int(rng.integers(3, 40)))
    steps = [b for b in steps if b < n - 2]
    for b in steps:
        amp = _u(rng, 0.06, 0.13) if small else _u(rng, 0.25, 0.9)
        batch[b] += amp
        model += amp * _u(rng, 0.1, 0.45) * _after(n, b + 1, _u(rng, 3, 40))
        g = _u(rng, 8, 60)
        grad[b] *= g
        for j in (1, 2, 3):
            if b + j <= n:
                grad[b + j] *= 1 + g / 8 * 0.5**j
    return _Inj("rare_tokens", s, steps, f"{len(steps)} rare-token batch(es)", model, batch,
                grad=grad, batch_steps=steps)  # fmt: skip


def _inject_data_corruption(p: _Plan, s: int, small: bool, lingering: bool) -> _Inj:
    rng, n = p.rng, p.n
    model, batch, grad = _blank(n)
    inj = _Inj("data_corruption", s, [s], "", model, batch, grad=grad)
    if small:
        batch[s] = _u(rng, 0.06, 0.12)
        inj.detail, inj.batch_steps = "one slightly corrupt batch", [s]
        return inj
    garbage = rng.random() < 0.6
    if garbage:
        k = int(rng.integers(1, 4)) if rng.random() < 0.5 else int(rng.integers(4, 41))
        k = min(k, n - s - 5)
        level = math.log(p.vocab) * _u(rng, 0.8, 1.05)
        for t in range(s, s + k):
            inj.level[t] = level
        grad[s : s + k] *= _u(rng, 3, 12)
        dmg = min(0.35, _u(rng, 0.02, 0.06) * math.sqrt(k))
        model += dmg * _after(n, s + k, _u(rng, 20, 90))
        inj.peaks = [s + k // 2]
        inj.detail = f"garbage shard of {k} batch(es) at random-token level {level:.2f}"
    else:
        k = min(int(rng.integers(5, 61)), n - s - 5)
        batch[s : s + k] = -_u(rng, 0.4, 0.85)
        grad[s : s + k] *= _u(rng, 0.3, 0.7)
        dmg = _u(rng, 0.15, 0.5)
        model += dmg * _pulse(n, s + k + 3, 3, _u(rng, 30, 90))
        inj.peaks = [s + k + 3]
        inj.detail = f"degenerate shard of {k} batches (loss collapses), then damage"
    if lingering:
        end = max(inj.peaks) + 3
        model += _u(rng, 0.08, 0.13) * _ramp(n, s, end) * _after(n, 0, _u(rng, 2e4, 6e4))
        inj.design = "lingering"
        inj.detail += ", lasting damage"
    inj.batch_steps = list(range(s, s + k))
    return inj


def _inject_stale_beta2(p: _Plan, s: int, design: str) -> _Inj:
    rng, n = p.rng, p.n
    model, batch, grad = _blank(n)
    batch[s] += _u(rng, 0.03, 0.25)
    g = _u(rng, 5, 30)
    grad[s] *= g
    rise = int(rng.integers(3, 26))
    p1 = _u(rng, 0.3, 1.4)
    n_echo = int(rng.integers(1, 5))
    gap = _u(rng, 15, 80)
    rho = _u(rng, 1.15, 1.5) if design == "divergent" else _u(rng, 0.4, 0.8)
    tau_e = _u(rng, 8, 30)
    peaks, at, amp = [], s + rise, p1
    profile = np.zeros(n + 1)
    for _ in range(n_echo + 1):
        if at >= n - 5:
            break
        profile = np.maximum(profile, amp * _pulse(n, at, max(2, rise // 2), tau_e))
        peaks.append(at)
        at = int(at + gap * _u(rng, 0.7, 1.3))
        amp *= rho
    last = peaks[-1]
    tail = p1 * _u(rng, 0.15, 0.4)
    if design == "recoverable":
        profile += tail * _pulse(n, peaks[0], rise, _u(rng, 40, 100)) * _ramp(n, s, peaks[0])
    elif design == "lingering":
        profile += tail * _pulse(n, last, 2, _u(rng, 40, 100))
        profile += _u(rng, 0.08, 0.13) * _ramp(n, s, last) * _after(n, 0, _u(rng, 2e4, 6e4))
    model += profile
    grad *= 1 + g * _u(rng, 0.2, 0.5) * profile / max(p1, 1e-9)
    grad[s] = max(grad[s], g)
    inj = _Inj("stale_beta2", s, peaks, f"beta2 {p.beta2}: gradient x{g:.0f}, "
               f"{len(peaks) - 1} echo(es)", model, batch, grad=grad, batch_steps=[s],
               design=design)  # fmt: skip
    if design == "divergent":
        _blow_up(p, inj, last)
    return inj


def _blow_up(p: _Plan, inj: _Inj, after: int) -> None:
    """Make `inj` divergent after step `after`: the loss climbs and (often) turns NaN."""
    rng, n = p.rng, p.n
    climb = int(rng.integers(20, 100))
    top = _u(rng, 1.0, 3.0)
    inj.model += top * _ramp(n, after, min(after + climb, n))
    inj.design = "divergent"
    if rng.random() < 0.6 and after + climb + 5 < n:
        inj.nan_from = after + climb + int(rng.integers(1, 30))
        if rng.random() < 0.6:
            inj.stop_at = min(n, inj.nan_from + int(rng.integers(20, 300)))
    elif rng.random() < 0.4:
        inj.stop_at = min(n, after + climb + int(rng.integers(30, 400)))


def _inject_lr_too_high(p: _Plan, s: int, design: str) -> _Inj:
    rng, n = p.rng, p.n
    model, batch, grad = _blank(n)
    drift = int(rng.integers(100, 600))
    d0 = max(p.warmup // 2, s - drift)
    g_drift = _u(rng, 1.5, 4.0)
    grad *= np.exp(math.log(g_drift) * _ramp(n, d0, s))
    model += _u(rng, 0.01, 0.04) * _ramp(n, d0, s)
    m = int(rng.integers(2, 6))
    a = _u(rng, 0.15, 0.4)
    growth = _u(rng, 1.1, 1.6)
    peaks, at = [], s
    for _ in range(m):
        if at >= n - 10:
            break
        rise = int(rng.integers(2, 9))
        model += a * _pulse(n, at, rise, _u(rng, 8, 40))
        model += _u(rng, 0.01, 0.03) * _ramp(n, at - rise, at)
        grad[max(1, at - rise) : at + 3] *= _u(rng, 4, 30)
        peaks.append(at)
        at += int(rng.integers(20, 151))
        a *= growth
    inj = _Inj("lr_too_high", s - 0, peaks, f"LR {p.peak_lr:.1e}: grad drift x{g_drift:.1f}, "
               f"{len(peaks)} growing spikes", model, batch, grad=grad, design=design)  # fmt: skip
    last = peaks[-1]
    if design == "divergent":
        _blow_up(p, inj, last + 5)
        grad *= 1 + 20 * _ramp(n, last, last + 60)
    else:
        model += _u(rng, 0.08, 0.13) * _ramp(n, s, last + 20) * _after(n, 0, _u(rng, 2e4, 6e4))
        inj.design = "lingering"
    return inj


def _inject_fp16_overflow(p: _Plan, s: int, design: str) -> _Inj:
    rng, n = p.rng, p.n
    model, batch, grad = _blank(n)
    width = int(rng.integers(5, 61))
    m = int(rng.integers(4, 15))
    offs = sorted({0, *(int(x) for x in rng.integers(0, width, size=m - 1))})
    overflow = [s + o for o in offs if s + o < n]
    grad[s : s + width] *= _u(rng, 2, 6)
    lag = int(rng.integers(5, 41))
    peak = min(s + lag, n - 2)
    inj = _Inj("fp16_overflow", s, [peak], f"{len(overflow)} overflows in {width} steps, "
               f"loss up {lag} steps later", model, batch, grad=grad, overflow=overflow,
               design=design)  # fmt: skip
    if design == "divergent":
        model += _u(rng, 0.3, 0.8) * _pulse(n, peak, int(rng.integers(3, 16)), 1e9)
        _blow_up(p, inj, peak)
        # the scale keeps falling while it climbs
        inj.overflow += list(range(peak, min(n, peak + 80), int(rng.integers(3, 9))))
    else:
        model += _u(rng, 0.3, 1.4) * _pulse(n, peak, int(rng.integers(3, 16)), _u(rng, 20, 80))
        inj.scale_cap_div = 2 ** int(rng.integers(2, 6))
    return inj


def _inject_hardware_fault(p: _Plan, s: int) -> _Inj:
    rng, n = p.rng, p.n
    model, batch, grad = _blank(n)
    steps = [s]
    if rng.random() < 0.4:  # a flaky device: a few bad steps close together
        for _ in range(int(rng.integers(1, 4))):
            steps.append(steps[-1] + int(rng.integers(1, 8)))
    inj = _Inj("hardware_fault", s, steps, "", model, batch, grad=grad, batch_steps=steps)
    kinds = []
    for b in steps:
        r = rng.random()
        v = float("nan") if r < 0.5 else float("inf") if r < 0.6 else 10 ** _u(rng, 2, 5)
        inj.bad[b] = v
        kinds.append("nan" if v != v else "inf" if math.isinf(v) else f"x{v:.0f}")
        if p.precision == "fp16":
            inj.overflow.append(b)
    inj.detail = f"bad value(s) {', '.join(kinds)} at {steps}, step(s) skipped"
    return inj


# ----- the run ---------------------------------------------------------------------------
# steps an incident needs after its onset, per (cause, design): its peaks, its recovery or
# the 600 steps that show it lingering, so that the type is settled inside the run
_NEED = {
    ("rare_tokens", "recoverable"): 250,
    ("data_corruption", "recoverable"): 500,
    ("data_corruption", "lingering"): 800,
    ("stale_beta2", "recoverable"): 1000,
    ("stale_beta2", "lingering"): 1100,
    ("stale_beta2", "divergent"): 600,
    ("lr_too_high", "lingering"): 1400,
    ("lr_too_high", "divergent"): 900,
    ("fp16_overflow", "recoverable"): 500,
    ("fp16_overflow", "divergent"): 250,
    ("hardware_fault", "recoverable"): 60,
}


_MIN_STEPS = {
    "rare_tokens": 300,
    "data_corruption": 700,
    "stale_beta2": 1500,
    "lr_too_high": 2000,
    "fp16_overflow": 800,
    "hardware_fault": 300,
}


def _designs(rng: np.random.Generator, cause: str, last: bool) -> str:
    options = {
        "rare_tokens": (["recoverable"], [1.0]),
        "data_corruption": (["recoverable", "lingering"], [0.75, 0.25]),
        "stale_beta2": (["recoverable", "lingering", "divergent"], [0.5, 0.35, 0.15]),
        "lr_too_high": (["lingering", "divergent"], [0.5, 0.5]),
        "fp16_overflow": (["recoverable", "divergent"], [0.6, 0.4]),
        "hardware_fault": (["recoverable"], [1.0]),
    }[cause]
    names, probs = options
    if not last:  # a first incident must come back, so the second has a trend to leave
        return "recoverable"
    return str(_pick(rng, list(names), list(probs)))


def _place(p: _Plan, cause: str, design: str, lo: int, reserve: int = 0) -> int | None:
    """An onset step at or after `lo` that leaves the incident room, or None. A lingering
    incident keeps clear of the clean loss's level shifts (an LR milestone, WSD's decay, an
    epoch start) until its type is settled: a drop there would hide what it left."""
    rng, n = p.rng, p.n
    start = max(lo, 120, int(0.06 * n), p.warmup + 20 if cause != "lr_too_high" else 0)
    need = _NEED[(cause, design)]
    ok = np.arange(start, n - need - reserve + 1)
    if cause == "lr_too_high":
        ok = ok[(p.lr[ok] >= 0.92 * p.peak_lr) & (ok >= max(int(0.8 * p.warmup), 150))]
    if design == "lingering":
        for m in p.milestones:
            ok = ok[(ok > m + 50) | (ok + need < m)]
    return int(_pick(rng, list(ok))) if len(ok) else None


def make_run(seed: int) -> VRun:
    rng = np.random.default_rng([seed, 0x76_33])
    writer = WRITERS[int(rng.integers(len(WRITERS)))]
    kind = _pick(
        rng,
        ["pretrain", "finetune", "cpt"],
        {"tensorboard": [0.6, 0.15, 0.25], "hf": [0.2, 0.6, 0.2],
         "lightning": [0.35, 0.5, 0.15], "megatron": [0.7, 0.0, 0.3]}[writer],
    )  # fmt: skip
    n = int(round(math.exp(_u(rng, math.log(300), math.log(5000)))))
    clean = rng.random() < 0.35
    causes: list[str] = []
    if not clean:
        causes = [str(_pick(rng, list(CAUSES)))]
        if rng.random() < 0.3:
            causes.append(str(_pick(rng, list(CAUSES))))
            # lr_too_high never comes back: it can only be the last incident
            causes.sort(key=lambda c: c == "lr_too_high")
            if causes == ["lr_too_high", "lr_too_high"]:
                causes = causes[:1]
        # a run long enough to show its incidents' outcome (the type needs the steps after)
        n = max(n, _MIN_STEPS[causes[0]])
        if len(causes) == 2:
            n = max(n, 400 + _NEED[(causes[0], "recoverable")] + 900 + _MIN_STEPS[causes[1]])
    # an LR too high late in a run: a schedule that stays at its peak (constant, WSD)
    p = _clean_plan(rng, n, kind, writer, flat=causes[1:] == ["lr_too_high"])
    if "fp16_overflow" in causes:
        p.precision = "fp16"
    if "stale_beta2" in causes:
        p.beta2 = _pick(rng, [0.999, 0.99], [0.7, 0.3])
    if "lr_too_high" in causes and kind == "finetune":
        p.peak_lr *= 10
    # faults
    injs: list[_Inj] = []
    lo = 0
    for i, cause in enumerate(causes):
        last = i == len(causes) - 1
        # the first of two leaves room for the second: its peaks, 600 steps, its need
        reserve = 0 if last else 900 + max(v for (c, _), v in _NEED.items() if c == causes[-1])
        design = _designs(rng, cause, last)
        s = _place(p, cause, design, lo, reserve)
        for other in [d for c, d in _NEED if c == cause and d != design]:
            if s is None and (last or other == "recoverable"):
                design, s = other, _place(p, cause, other, lo, reserve)
        if s is None:
            continue
        small = rng.random() < 0.12
        if cause == "rare_tokens":
            inj = _inject_rare_tokens(p, s, small)
        elif cause == "data_corruption":
            inj = _inject_data_corruption(p, s, small, design == "lingering")
        elif cause == "stale_beta2":
            inj = _inject_stale_beta2(p, s, design)
        elif cause == "lr_too_high":
            inj = _inject_lr_too_high(p, s, design)
        elif cause == "fp16_overflow":
            inj = _inject_fp16_overflow(p, s, design)
        else:
            inj = _inject_hardware_fault(p, s)
        injs.append(inj)
        lo = max(inj.peaks) + 600
    return _assemble(seed, p, injs)


def _assemble(seed: int, p: _Plan, injs: list[_Inj]) -> VRun:
    rng, n = p.rng, p.n
    stop = min([i.stop_at for i in injs if i.stop_at] or [n])
    model = np.zeros(n + 1)
    batch_x = np.zeros(n + 1)
    grad_x = np.ones(n + 1)
    level: dict[int, float] = {}
    bad: dict[int, float] = {}
    forced: set[int] = set()
    nan_from = min([i.nan_from for i in injs if i.nan_from] or [n + 1])
    cap_div = np.ones(n + 1)
    for inj in injs:
        model += inj.model
        batch_x += inj.batch
        if inj.grad is not None:
            grad_x *= inj.grad
        level.update(inj.level)
        bad.update(inj.bad)
        forced.update(inj.overflow)
        if inj.scale_cap_div != 1.0:
            cap_div[max(inj.overflow or [inj.onset]) :] *= inj.scale_cap_div
    t = np.arange(n + 1, dtype=float)
    # ---- noise ----
    sigma = _u(rng, 0.004, 0.02) if p.kind != "finetune" else _u(rng, 0.01, 0.03)
    sig_t = sigma * np.sqrt(p.batch.max() / np.maximum(p.batch, 1))
    noise = rng.normal(0.0, 1.0, n + 1) * sig_t
    p_hard, p_easy = _u(rng, 0.002, 0.03), _u(rng, 0.0, 0.01)
    hard = rng.random(n + 1) < p_hard
    easy = rng.random(n + 1) < p_easy
    noise[hard] += rng.uniform(0.05, 0.10, int(hard.sum()))
    noise[easy] -= rng.uniform(0.02, 0.06, int(easy.sum()))
    ell = _u(rng, 50, 300)
    phi = math.exp(-1 / ell)
    amp = _u(rng, 0.002, 0.008)
    shocks = rng.normal(0.0, amp * math.sqrt(1 - phi * phi), n + 1)
    wander = np.zeros(n + 1)
    for i in range(1, n + 1):
        wander[i] = phi * wander[i - 1] + shocks[i]
    # gradient-norm blips: clipped, a small loss bump at most
    blip_rate = _u(rng, 1 / 2000, 1 / 300)
    blips = np.nonzero(rng.random(n + 1) < blip_rate)[0]
    blips = blips[blips > 20]
    bump = np.zeros(n + 1)
    for b in blips:
        bump[b] += _u(rng, 0.0, 0.03)
    if len(blips):
        p.benign.append(f"{len(blips)} clipped grad-norm blips")
    if p_hard > 0.01:
        p.benign.append(f"hard batches (p={p_hard:.3f}, +5-10%)")
    clean_loss = p.nf * (1 + wander) * (1 + noise) * (1 + bump)
    loss = clean_loss * (1 + model) * (1 + batch_x)
    for s_, v in level.items():
        loss[s_] = v * (1 + noise[s_] * 0.3)
    skipped = np.zeros(n + 1, dtype=bool)
    for s_, v in bad.items():
        loss[s_] = v if (v != v or math.isinf(v)) else loss[s_] * v
        skipped[s_] = True
    if nan_from <= n:
        loss[nan_from:] = float("nan")
    # ---- gradient norm ----
    g0, g_inf = _u(rng, 2, 15), _u(rng, 0.15, 1.2)
    prog = np.cumsum(p.batch / p.batch.max())
    gbase = g_inf + (g0 - g_inf) * np.exp(-prog / _u(rng, 30, 400))
    if p.kind == "cpt":
        gbase = g_inf * (1 + 0.5 * np.exp(-prog / 200))
    if rng.random() < 0.3:
        late = np.where((t > p.warmup) & (p.lr < p.peak_lr), 1 - p.lr / p.peak_lr, 0.0)
        gbase = gbase * (1 + _u(rng, 0.3, 1.0) * late)
        p.benign.append("grad norm rises during the LR decay")
    gnorm = gbase * np.exp(rng.normal(0, _u(rng, 0.08, 0.25), n + 1))
    gnorm[hard] *= rng.uniform(1.1, 1.5, int(hard.sum()))
    gnorm[blips] *= rng.uniform(3, 8, len(blips))
    gnorm *= grad_x
    for s_, v in bad.items():
        gnorm[s_] = v if (v != v or math.isinf(v)) else gnorm[s_] * v
    if nan_from <= n:
        gnorm[nan_from:] = float("nan")
    # ---- fp16 loss scale ----
    scale = None
    megatron = p.writer == "megatron"
    if p.precision == "fp16":
        scale, over = _scaler(rng, n, forced, cap_div, megatron, nan_from, p.benign)
        skipped |= over
        gnorm[over] = float("inf")
    # ---- logging plan ----
    plan = _log_plan(rng, p, stop, injs)
    segments, gap, logged, wstart, interval = plan
    if gap:
        p.benign.append(f"resume gap: steps {gap[0]}-{gap[1]} not logged")
    if len(segments) > 1:
        p.benign.append(
            f"logging interval {segments[0][1]} -> {segments[1][1]} at {segments[1][0]}"
        )
    loss_mode = {"hf": "hf", "megatron": "megatron", "lightning": "instant"}.get(
        p.writer, "mean" if rng.random() < 0.3 else "instant"
    )
    opts = _writer_opts(rng, p)
    cfg = _config(p, opts, interval, stop)
    # validation loss
    eval_every = int(_pick(rng, [100, 200, 250, 500])) if n > 600 else 50
    val: dict[int, float] = {}
    for s_ in range(eval_every, stop + 1, eval_every):
        if gap and gap[0] <= s_ <= gap[1]:
            continue
        v = p.nf_val[s_] * (1 + model[s_]) * (1 + rng.normal(0, 0.002))
        val[s_] = float("nan") if s_ >= nan_from else float(v)
    name_causes = "-".join(i.cause for i in injs) or "clean"
    run = VRun(
        name=f"vrun-{seed:06d}-{name_causes}", seed=seed, writer=p.writer, kind=p.kind,
        n_steps=stop, interval=interval, segments=segments, gap=gap, loss_mode=loss_mode,
        config=cfg, writer_opts=opts, loss=loss[: stop + 1], grad_norm=gnorm[: stop + 1],
        lr=p.lr[: stop + 1], loss_scale=None if scale is None else scale[: stop + 1],
        skipped=skipped[: stop + 1], batch_size=p.batch[: stop + 1],
        epoch=_epochs(p)[: stop + 1], val=val, logged=logged, window_start=wstart,
        benign=p.benign,
    )  # fmt: skip
    _label(run, p, injs, clean_loss[: stop + 1], sigma)
    return run


def _epochs(p: _Plan) -> np.ndarray:
    return np.arange(p.n + 1, dtype=float) / p.steps_per_epoch


def _scaler(rng, n, forced, cap_div, megatron, nan_from, benign):  # type: ignore[no-untyped-def]
    """A dynamic loss scaler: doubles after `growth` clean steps, halves on an overflow."""
    growth = 1000 if megatron else int(_pick(rng, [1000, 2000]))
    init = 2.0**32 if megatron else 2.0**16
    cap = 2.0 ** int(rng.integers(12, 19))
    p_random = _u(rng, 0.0, 1 / 4000)
    scale = np.zeros(n + 1)
    over = np.zeros(n + 1, dtype=bool)
    cur, clean_run = init, 0
    for i in range(1, n + 1):
        limit = cap / cap_div[i]
        o = i in forced or i >= nan_from
        if not o and cur > limit:
            o = rng.random() < 0.6
        if not o:
            o = rng.random() < p_random
        if o:
            cur = max(1.0, cur / 2)
            clean_run = 0
            over[i] = True
        else:
            clean_run += 1
            if clean_run == growth:
                cur *= 2
                clean_run = 0
        scale[i] = cur
    n_over = int(over[: min(n + 1, nan_from)].sum())
    benign.append(f"fp16 scaler: {n_over} overflow steps skipped (growth every {growth})")
    return scale, over


def _log_plan(rng, p: _Plan, stop: int, injs: list[_Inj]):  # type: ignore[no-untyped-def]
    if p.writer == "megatron":
        every = int(_pick(rng, [1, 5, 10, 10, 20]))
    else:
        every = int(_pick(rng, [1, 1, 2, 4, 5, 10, 10, 16, 20, int(rng.integers(1, 21))]))
    segments = [(1, every)]
    if rng.random() < 0.25 and stop > 800:
        other = int(_pick(rng, [v for v in (1, 2, 5, 10, 20) if v != every]))
        at = int(stop * _u(rng, 0.2, 0.7))
        segments.append((at, other))
    gap = None
    if p.writer != "hf" and rng.random() < 0.2 and stop > 800:
        busy = [(i.onset - 150, max(i.peaks) + 600) for i in injs]
        for _ in range(20):
            g0 = int(rng.integers(int(0.2 * stop), int(0.85 * stop)))
            g1 = g0 + int(rng.integers(30, 300))
            if g1 < stop - 50 and not any(a <= g1 and g0 <= b for a, b in busy):
                gap = (g0, g1)
                break
    logged, wstart = [], []
    prev = 0
    for s in range(1, stop + 1):
        if gap and gap[0] <= s <= gap[1]:
            prev = gap[1]
            continue
        ev = [e for a, e in segments if s >= a][-1]
        seg_start = [a for a, e in segments if s >= a][-1]
        if s % ev == 0 or s == stop:
            if s == seg_start and prev < seg_start - 1:
                prev = seg_start - 1
            logged.append(s)
            wstart.append(prev + 1)
            prev = s
    interval = max(e for _, e in segments)
    return segments, gap, np.asarray(logged), np.asarray(wstart), interval


def _writer_opts(rng: np.random.Generator, p: _Plan) -> dict[str, Any]:
    w = p.writer
    o: dict[str, Any] = {}
    o["grad_logged"] = rng.random() < {"tensorboard": 0.85, "hf": 1.0, "lightning": 0.65,
                                       "megatron": 0.9}[w]  # fmt: skip
    o["lr_logged"] = rng.random() < {"tensorboard": 0.85, "hf": 1.0, "lightning": 0.8,
                                     "megatron": 1.0}[w]  # fmt: skip
    o["scale_logged"] = (
        p.precision == "fp16"
        and w in ("tensorboard", "megatron")
        and (w == "megatron" or rng.random() < 0.6)
    )
    o["skips_logged"] = p.precision == "fp16" and w == "megatron"
    o["config_file"] = rng.random() < {"tensorboard": 0.75, "hf": 0.5, "lightning": 0.85,
                                       "megatron": 1.0}[w]  # fmt: skip
    o["grad_name"] = "grad_2.0_norm_total" if w == "lightning" and rng.random() < 0.3 else None
    o["loss_name"] = _pick(rng, ["train_loss", "train_loss_step"]) if w == "lightning" else None
    o["nan_filter"] = w == "hf" and rng.random() < 0.7
    o["save_state"] = w == "hf" and rng.random() < 0.5
    o["save_total_limit"] = _pick(rng, [None, 2, 3]) if w == "hf" else None
    return o


def _config(p: _Plan, opts: dict[str, Any], interval: int, stop: int) -> dict[str, Any]:
    return {
        "lr": p.peak_lr, "min_lr": float(p.lr[-1]), "warmup_steps": p.warmup,
        "lr_schedule": p.schedule, "adam_beta1": 0.9, "adam_beta2": p.beta2,
        "precision": p.precision, "max_grad_norm": 1.0, "max_steps": p.n,
        "global_batch_size": int(p.batch.max()),
        "seq_length": 2048 if p.kind != "finetune" else 1024,
        "vocab_size": p.vocab, "log_interval": interval, "kind": p.kind,
        "steps_per_epoch": p.steps_per_epoch,
    }  # fmt: skip


# ----- what the log shows ----------------------------------------------------------------
def logged_loss(run: VRun, per_step: np.ndarray, rounding: bool = True) -> np.ndarray:
    """The loss value the writer puts at each logged step (NaN where the field is absent
    or the value is not a number), from a per-step series, with the writer's aggregation."""
    out = np.empty(len(run.logged))
    for j, (s, a) in enumerate(zip(run.logged, run.window_start, strict=True)):
        win = per_step[a : s + 1]
        if run.loss_mode == "instant":
            out[j] = per_step[s]
        elif run.loss_mode == "mean":
            out[j] = float(np.mean(win))
        elif run.loss_mode == "hf":
            out[j] = _hf_mean(win, run.writer_opts["nan_filter"], rounding)
        else:  # megatron: skipped iterations are left out; NaN or 0 drops the field
            keep = ~run.skipped[a : s + 1]
            v = float(np.mean(win[keep])) if keep.any() else 0.0
            out[j] = v if (v == v and v > 0 and not math.isinf(v)) else float("nan")
    return out


def _hf_mean(win: np.ndarray, nan_filter: bool, rounding: bool) -> float:
    tr = 0.0
    for k, v in enumerate(win):
        if nan_filter and not math.isfinite(v):
            tr += tr / (1 + k)
        else:
            tr += float(v)
    v = tr / len(win)
    return round(v, 4) if rounding and math.isfinite(v) else v


def _label(run: VRun, p: _Plan, injs: list[_Inj], clean_loss: np.ndarray, sigma: float) -> None:
    """Truth and faint lists from what the log shows of each injection (noise-free)."""
    n = run.n_steps
    nf = p.nf[: n + 1]
    base_logged = logged_loss(run, nf, rounding=False)
    steps = run.logged
    k_mean = float(np.mean(run.logged - run.window_start + 1)) if run.loss_mode != "instant" else 1
    noise_floor = 5 * sigma / math.sqrt(max(k_mean, 1.0))
    threshold = max(VISIBLE, noise_floor)
    for inj in injs:
        per = nf * (1 + inj.model[: n + 1]) * (1 + inj.batch[: n + 1])
        for s_, v in inj.level.items():
            if s_ <= n:
                per[s_] = v
        for s_, v in inj.bad.items():
            if s_ <= n:
                per[s_] = v if (v != v or math.isinf(v)) else per[s_] * v
        if inj.nan_from is not None and inj.nan_from <= n:
            per[inj.nan_from :] = float("nan")
        shown = logged_loss(run, per, rounding=False)
        with np.errstate(invalid="ignore", divide="ignore"):
            excess = shown / base_logged - 1
        per_excess = per / nf - 1
        region = steps >= inj.onset - run.interval
        bad_shown = bool(
            np.any(region & ~np.isfinite(shown) & np.isfinite(base_logged))
            or np.any(region & np.isfinite(excess) & (excess > 50))
        )
        if inj.cause == "hardware_fault" and run.loss_mode == "megatron":
            # a NaN step is left out of Megatron's average: only an absurd value shows
            bad_shown = bool(np.any(region & np.isfinite(excess) & (excess > 50)))
        bad = (~np.isfinite(shown) & np.isfinite(base_logged)) | (
            np.isfinite(excess) & (excess > 50)
        )
        fin = np.where(bad, np.inf, np.where(np.isfinite(excess), excess, -np.inf))
        finite = np.where(np.isfinite(fin), fin, -np.inf)
        top = float(np.max(finite[region])) if region.any() else -np.inf
        visible = bad_shown or top >= threshold
        peaks = _logged_peaks(run, inj, fin)
        t = _truth_dict(run, p, inj, per_excess, fin, shown, peaks, top)
        if visible:
            run.truth.append(t)
        else:
            t["why_faint"] = f"logged excess {top:+.1%} < {threshold:.1%}"
            run.faint.append(t)


def _logged_peaks(run: VRun, inj: _Inj, fin: np.ndarray) -> list[int]:
    """The logged steps that show each designed peak: the record whose window holds it
    (an averaging writer), else the highest logged excess within a few steps of it; a bad
    value (NaN, Inf, absurd) shown counts as the highest."""
    out = []
    tol = max(run.interval, 3)
    for pk in inj.peaks:
        j = int(np.searchsorted(run.logged, pk))
        if run.loss_mode != "instant" and j < len(run.logged) and run.window_start[j] <= pk:
            out.append(int(run.logged[j]))
            continue
        near = np.nonzero((run.logged >= pk - tol) & (run.logged <= pk + tol))[0]
        if len(near):
            out.append(int(run.logged[near[np.argmax(fin[near])]]))
        elif j < len(run.logged):
            out.append(int(run.logged[j]))
    if inj.cause == "hardware_fault":  # only the records that show a bad value
        shown = [s for s in out if fin[int(np.searchsorted(run.logged, s))] == np.inf]
        out = shown or out
    return sorted(set(out)) or [int(inj.peaks[0])]


def _truth_dict(run, p, inj, per_excess, fin, shown, peaks, top) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    n = run.n_steps
    last = max(inj.peaks)
    after = per_excess[last:]
    typ, end = "lingering", None
    nonfinite_end = inj.nan_from is not None and inj.nan_from <= n
    back = np.nonzero(np.isfinite(after) & (np.abs(after) < RECOVERED))[0]
    if nonfinite_end or inj.design == "divergent":
        typ = "divergent"
    elif len(back) and back[0] <= WINDOW and inj.design == "recoverable":
        typ = "recoverable"
        step = last + int(back[0])
        later = run.logged[run.logged >= step]
        end = int(later[0]) if len(later) else n
    if inj.cause == "hardware_fault":
        later = run.logged[run.logged > last]
        typ, end = "recoverable", int(later[0]) if len(later) else n
    return {
        "cause": inj.cause, "expected_cause": _expected(run, p, inj, fin, shown, peaks),
        "type": typ, "onset": int(inj.onset), "peaks": peaks, "end": end,
        "detail": inj.detail, "writer": run.writer, "visible_excess": round(top, 3),
    }  # fmt: skip


def _expected(
    run: VRun, p: _Plan, inj: _Inj, fin: np.ndarray, shown: np.ndarray, peaks: list[int]
) -> str:
    o = run.writer_opts
    logged_set = set(run.logged.tolist())
    grad_at_batch = o["grad_logged"] and any(b in logged_set for b in inj.batch_steps)
    config_beta2 = o["config_file"] and p.beta2 >= 0.99
    lr_known = o["lr_logged"] or o["config_file"]

    def one_point() -> bool:
        # a batch: the logged excess is under half its peak within two logged points
        for pk in peaks:
            j = int(np.searchsorted(run.logged, pk))
            nxt = fin[j + 1 : j + 3]
            if len(nxt) and fin[j] > 0 and float(np.min(nxt)) < 0.5 * fin[j]:
                return True
        return False

    c = inj.cause
    if c == "rare_tokens":
        return "rare_tokens" if grad_at_batch else "batch_driven" if one_point() else "unknown"
    if c == "data_corruption":
        lo, hi = min(inj.batch_steps), max(inj.batch_steps)
        shard = (run.logged >= lo) & (run.window_start <= hi)  # windows holding a shard step
        garbage = bool(np.any(shard & (shown >= 0.8 * math.log(p.vocab))))
        dip = bool(np.any(shard & (fin <= -0.15)))
        if garbage or dip:
            return "data_corruption"
        return "batch_driven" if one_point() else "unknown"
    if c == "stale_beta2":
        return "stale_beta2" if config_beta2 and o["grad_logged"] else "unknown"
    if c == "lr_too_high":
        return "lr_too_high" if lr_known and o["grad_logged"] else "unknown"
    if c == "fp16_overflow":
        # the writers log an overflowed step's grad norm as inf: with the grad norm logged
        # at one of them before the peak and fp16 in the config, the file shows it too
        seen = (
            o["grad_logged"]
            and o["config_file"]
            and any(st in logged_set and st <= max(inj.peaks) for st in inj.overflow)
        )
        return "fp16_overflow" if o["scale_logged"] or o["skips_logged"] or seen else "unknown"
    return "hardware_fault"


# ----- writers ---------------------------------------------------------------------------
def write_run(run: VRun, folder: Path) -> Path:
    """Write `run` with its writer into folder/<run name>/ and return that folder."""
    out = Path(folder) / run.name
    out.mkdir(parents=True, exist_ok=True)
    {"tensorboard": _write_tb, "hf": _write_hf, "lightning": _write_lightning,
     "megatron": _write_megatron}[run.writer](run, out)  # fmt: skip
    return out


def _rows(run: VRun) -> list[dict[str, Any]]:
    """One dict per logged step: loss (as the writer aggregates), lr, grad norm, scale."""
    shown = logged_loss(run, run.loss)
    rows = []
    for j, s in enumerate(run.logged.tolist()):
        a = int(run.window_start[j])
        rows.append({
            "step": s, "loss": float(shown[j]), "lr": float(run.lr[s]),
            "grad_norm": float(run.grad_norm[s]), "epoch": float(run.epoch[s]),
            "scale": None if run.loss_scale is None else float(run.loss_scale[s]),
            "skipped": int(run.skipped[a : s + 1].sum()),
            "nan_iters": int((~np.isfinite(run.loss[a : s + 1])).sum()),
            "last_skipped": bool(run.skipped[s]), "batch": int(run.batch_size[s]),
            "consumed": int(run.batch_size[: s + 1].sum()), "window": s - a + 1,
        })  # fmt: skip
    return rows


def logged_rows(run: VRun) -> list[dict[str, Any]]:
    """What the writer's file holds, as rows of canonical metric names (None: not in the
    file at that step), evaluations included: the --direct path, without files."""
    o, out = run.writer_opts, []
    fp16 = run.config["precision"] == "fp16"
    mega = run.writer == "megatron"
    for what, item in _stream(run):
        if what == "eval":
            out.append({"step": item[0], "val_loss": item[1]})
            continue
        r = item
        row: dict[str, Any] = {"step": r["step"], "loss": r["loss"]}
        if mega and not math.isfinite(r["loss"]):
            row["loss"] = None  # the field is left out
        if o["lr_logged"]:
            row["lr"] = r["lr"]
        if o["grad_logged"] and not (mega and fp16 and r["last_skipped"]):
            row["grad_norm"] = r["grad_norm"]
        if o["scale_logged"]:
            row["loss_scale"] = r["scale"]
        if mega:
            row["skipped_iters"] = float(r["skipped"])
            row["nan_iters"] = float(r["nan_iters"])
        out.append(row)
    return out


def _stream(run: VRun) -> list[tuple[str, Any]]:
    """Training rows and evaluations in the order a run writes them: an evaluation at step
    v follows the training record of v (or, when v is not logged, comes before the next)."""
    out: list[tuple[str, Any]] = []
    val = sorted(run.val.items())
    for r in _rows(run):
        while val and val[0][0] < r["step"]:
            out.append(("eval", val.pop(0)))
        out.append(("train", r))
        while val and val[0][0] == r["step"]:
            out.append(("eval", val.pop(0)))
    out += [("eval", v) for v in val]
    return out


def _resumed(run: VRun, s: int) -> bool:
    """True when step s is logged by the process started after the gap / interval change."""
    if run.gap and s > run.gap[1]:
        return True
    return len(run.segments) > 1 and s >= run.segments[1][0]


def _yaml_config(run: VRun) -> dict[str, Any]:
    c = run.config
    return {
        "model": {"vocab_size": c["vocab_size"], "seq_length": c["seq_length"]},
        "optimizer": {"name": "adamw", "lr": c["lr"], "betas": [c["adam_beta1"], c["adam_beta2"]],
                      "weight_decay": 0.1},
        "scheduler": {"name": c["lr_schedule"], "warmup_steps": c["warmup_steps"],
                      "min_lr": c["min_lr"]},
        "trainer": {"max_steps": c["max_steps"], "precision": c["precision"],
                    "grad_clip": c["max_grad_norm"], "global_batch_size": c["global_batch_size"],
                    "log_every": c["log_interval"]},
    }  # fmt: skip


def _write_tb(run: VRun, out: Path) -> None:
    import yaml
    from torch.utils.tensorboard import SummaryWriter

    logdir = out / "tb"
    o = run.writer_opts
    writer = SummaryWriter(log_dir=str(logdir))
    reopened = False
    for what, item in _stream(run):
        if what == "eval":
            writer.add_scalar("eval/loss", item[1], item[0])
            continue
        r, s = item, item["step"]
        if _resumed(run, s) and not reopened:
            writer.close()  # the resumed process writes a new events file
            writer = SummaryWriter(log_dir=str(logdir), filename_suffix=".resumed")
            reopened = True
        writer.add_scalar("train/loss", r["loss"], s)
        if o["lr_logged"]:
            writer.add_scalar("train/lr", r["lr"], s)
        if o["grad_logged"]:
            writer.add_scalar("train/grad_norm", r["grad_norm"], s)
        if o["scale_logged"] and r["scale"] is not None:
            writer.add_scalar("train/loss_scale", r["scale"], s)
    writer.close()
    if o["config_file"]:
        (out / "config.yaml").write_text(yaml.safe_dump(_yaml_config(run), sort_keys=False))


def _write_hf(run: VRun, out: Path) -> None:
    o = run.writer_opts
    history: list[dict[str, Any]] = []
    steps_per_epoch = run.config["steps_per_epoch"]
    for what, item in _stream(run):
        if what == "eval":
            v_step, v = item
            history.append({
                "epoch": round(float(run.epoch[v_step]), 4), "eval_loss": v,
                "eval_runtime": 12.3, "eval_samples_per_second": 81.2,
                "eval_steps_per_second": 10.2, "step": v_step,
            })  # fmt: skip
            continue
        r = item
        entry: dict[str, Any] = {"epoch": round(r["epoch"], 4)}
        if o["grad_logged"]:
            entry["grad_norm"] = r["grad_norm"]
        entry["learning_rate"] = r["lr"]
        entry["loss"] = r["loss"]
        entry["step"] = r["step"]
        history.append(entry)
    last = run.n_steps
    finite = [h["loss"] for h in history if "loss" in h and math.isfinite(h["loss"])]
    history.append({
        "epoch": round(float(run.epoch[last]), 4), "step": last, "total_flos": 1.2e17,
        "train_loss": float(np.mean(finite)) if finite else 0.0, "train_runtime": 3600.0,
        "train_samples_per_second": 50.0, "train_steps_per_second": 1.0,
    })  # fmt: skip
    save_every = max(100, (last // 4) // 50 * 50)
    ckpts = sorted({*range(save_every, last, save_every), last})
    keep = o["save_total_limit"]
    if keep:
        ckpts = ckpts[-keep:]
    logging_steps = run.segments[-1][1]
    for c in ckpts:
        state = {
            "best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
            "epoch": round(float(run.epoch[c]), 4), "eval_steps": 500, "global_step": c,
            "is_hyper_param_search": False, "is_local_process_zero": True,
            "is_world_process_zero": True,
            "log_history": [h for h in history if h["step"] <= c and ("train_loss" not in h
                                                                      or c == last)],
            "logging_steps": logging_steps, "max_steps": run.config["max_steps"],
            "num_input_tokens_seen": 0, "num_train_epochs": max(1, int(math.ceil(
                run.config["max_steps"] / steps_per_epoch))),
            "save_steps": save_every, "stateful_callbacks": {}, "total_flos": 1.0e17,
            "train_batch_size": 8, "trial_name": None, "trial_params": None,
        }  # fmt: skip
        d = out / f"checkpoint-{c}"
        d.mkdir(exist_ok=True)
        # the Trainer's own dump: json.dumps(asdict(state), indent=2, sort_keys=True)
        text = json.dumps(state, indent=2, sort_keys=True) + "\n"
        (d / "trainer_state.json").write_text(text)
        _hf_weights(run, d, c)
        if c == last and o["save_state"]:  # Trainer.save_state() at the end of the script
            (out / "trainer_state.json").write_text(text)
    if o["config_file"]:
        c = run.config
        args = {
            "output_dir": str(out.name), "learning_rate": c["lr"], "adam_beta1": 0.9,
            "adam_beta2": c["adam_beta2"], "adam_epsilon": 1e-8, "max_grad_norm": 1.0,
            "warmup_steps": c["warmup_steps"], "lr_scheduler_type": c["lr_schedule"],
            "max_steps": c["max_steps"], "logging_steps": logging_steps,
            "fp16": c["precision"] == "fp16", "bf16": c["precision"] == "bf16",
            "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
            "logging_nan_inf_filter": o["nan_filter"], "seed": 42,
        }  # fmt: skip
        (out / "args.json").write_text(json.dumps(args, indent=2))


def _hf_weights(run: VRun, d: Path, step: int) -> None:
    """What else a Trainer checkpoint holds: a (tiny) model and its config."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng([run.seed, step])
    save_file({"lm_head.weight": rng.normal(0, 0.02, (8, 4)).astype(np.float32),
               "model.norm.weight": np.ones(4, dtype=np.float32)},
              str(d / "model.safetensors"), metadata={"format": "pt"})  # fmt: skip
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4,
           "vocab_size": run.config["vocab_size"], "dtype": "bfloat16"}  # fmt: skip
    (d / "config.json").write_text(json.dumps(cfg, indent=2))


def _write_lightning(run: VRun, out: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    o = run.writer_opts
    loss_name = o["loss_name"] or "train_loss"
    grad_name = o["grad_name"] or "grad_norm"
    version = 0
    logger = CSVLogger(save_dir=str(out), name="lightning_logs", version=version)
    hp = {"lr": run.config["lr"], "betas": [0.9, run.config["adam_beta2"]],
          "warmup_steps": run.config["warmup_steps"], "max_steps": run.config["max_steps"],
          "precision": {"fp16": "16-mixed", "bf16": "bf16-mixed"}.get(run.config["precision"],
                                                                      "32-true"),
          "gradient_clip_val": 1.0}  # fmt: skip
    if o["config_file"]:
        logger.log_hyperparams(hp)
    reopened = False
    for what, item in _stream(run):
        if what == "eval":
            v_step, v = item
            logger.log_metrics({"val_loss": v, "epoch": math.floor(float(run.epoch[v_step]))},
                               step=v_step)  # fmt: skip
            continue
        r, s = item, item["step"]
        if _resumed(run, s) and not reopened:
            logger.finalize("success")
            version += 1  # a resumed Trainer logs into a new version folder
            logger = CSVLogger(save_dir=str(out), name="lightning_logs", version=version)
            if o["config_file"]:
                logger.log_hyperparams(hp)
            reopened = True
        m: dict[str, float] = {loss_name: r["loss"], "epoch": math.floor(r["epoch"])}
        if o["lr_logged"]:
            m["lr-AdamW"] = r["lr"]
        if o["grad_logged"]:
            m[grad_name] = r["grad_norm"]
        logger.log_metrics(m, step=s)
    logger.finalize("success")


def _megatron_args(run: VRun) -> list[str]:
    c = run.config
    fp16 = c["precision"] == "fp16"
    args = {
        "adam_beta1": 0.9, "adam_beta2": c["adam_beta2"], "adam_eps": 1e-08,
        "bf16": c["precision"] == "bf16", "clip_grad": 1.0, "eval_interval": 0,
        "fp16": fp16, "global_batch_size": c["global_batch_size"],
        "initial_loss_scale": 4294967296 if fp16 else None, "log_interval": c["log_interval"],
        "loss_scale": None, "loss_scale_window": 1000, "lr": c["lr"],
        "lr_decay_style": c["lr_schedule"], "lr_warmup_iters": c["warmup_steps"],
        "min_loss_scale": 1.0, "min_lr": c["min_lr"], "micro_batch_size": 4,
        "optimizer": "adam", "seq_length": c["seq_length"], "train_iters": c["max_steps"],
        "weight_decay": 0.1, "world_size": 64,
    }  # fmt: skip
    lines = ["------------------------ arguments ------------------------"]
    for k in sorted(args):
        lines.append(f"  {k} {'.' * max(3, 47 - len(k))} {args[k]}")
    lines.append("-------------------- end of arguments ---------------------")
    return lines


def _write_megatron(run: VRun, out: Path) -> None:
    total = run.config["max_steps"]
    lines = ["using world size: 64, data-parallel-size: 8, tensor-model-parallel size: 8, "
             "pipeline-model-parallel size: 1 ", *_megatron_args(run), "training ..."]  # fmt: skip
    restarted = False
    fp16 = run.config["precision"] == "fp16"
    for what, item in _stream(run):
        if what == "eval":
            v_step, v = item
            ppl = math.exp(min(v, 700)) if math.isfinite(v) else float("nan")
            lines += ["-" * 100, f" validation loss at iteration {v_step} | lm loss value: "
                      f"{v:.6E} | lm loss PPL: {ppl:.6E} | ", "-" * 100]  # fmt: skip
            continue
        r, s = item, item["step"]
        if _resumed(run, s) and not restarted:
            lines += [f"saving checkpoint at iteration {s - 1:8d} to checkpoints",
                      "WARNING: process 0 exited; restarting", *_megatron_args(run),
                      f" loading checkpoint from checkpoints at iteration {r['step'] - 1}",
                      "training ..."]  # fmt: skip
            restarted = True
        f = [f" iteration {s:8d}/{total:8d}", f" consumed samples: {r['consumed']:12d}",
             f" elapsed time per iteration (ms): {1000 + 37 * (s % 7):.1f}",
             f" learning rate: {r['lr']:.3E}", f" global batch size: {r['batch']:5d}"]  # fmt: skip
        if math.isfinite(r["loss"]) and r["loss"] > 0:
            f.append(f" lm loss: {r['loss']:.6E}")
        f.append(f" loss scale: {r['scale'] if fp16 and r['scale'] else 1.0:.1f}")
        if run.writer_opts["grad_logged"] and not (fp16 and r["last_skipped"]):
            g = r["grad_norm"]
            f.append(f" grad norm: {g:.3f}" if math.isfinite(g) else " grad norm: nan")
        f.append(f" number of skipped iterations: {r['skipped']:3d}")
        f.append(f" number of nan iterations: {r['nan_iters']:3d}")
        lines.append(" |".join(f) + " |")
    (out / "train.log").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":  # a quick look: python bench/synth_runs_v.py [first] [count]
    import sys

    first = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    for seed in range(first, first + (int(sys.argv[2]) if len(sys.argv) > 2 else 20)):
        r = make_run(seed)
        truth = [(t["type"], t["expected_cause"], t["peaks"][:3]) for t in r.truth]
        print(f"{r.name:48s} {r.writer:11s} {r.kind:8s} n={r.n_steps:5d} every={r.interval:2d} "
              f"{r.loss_mode:8s} truth={truth} faint={len(r.faint)}")  # fmt: skip
