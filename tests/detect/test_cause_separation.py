"""Causes that look alike in the loss, kept apart by what else the log holds.

- Stale beta2 without a gradient norm: beta2 0.999 is PyTorch's and the HF Trainer's
  default, and an echoing spike in the loss alone looks the same after an fp16 overflow
  cascade, a too-high LR or a batch. It is not named; the gradient norm is what to log.
- A rare-token batch in a beta2 = 0.999 run that was back at once: nothing was amplified;
  the gradient norm (taken before the optimizer) jumped with the batch.
- A divergence at the peak LR a few warm-up lengths in is the LR's, not stale beta2's.
- NaN losses in an fp16 run, the scale halved once for each: the scaler reacting to bad
  values (a fault), not an overflow cascade (halvings at finite losses, skipped steps).
- An absurd loss value at an epoch boundary, where the trend lags the drop: the loss after
  it is where it was before it, so the value was corrupted, not the model.

Every run is written by torch's SummaryWriter, its config as a Hugging Face
TrainingArguments-style config.json."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import stored_features, stored_incidents

from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

N, WARM, PEAK_LR = 3000, 200, 3e-4


def _lr(step: int) -> float:
    if step < WARM:
        return PEAK_LR * step / WARM
    p = (step - WARM) / (N - WARM)
    return PEAK_LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def _pretrain_loss(step: int, rng: np.random.Generator) -> float:
    """A pre-training loss from ~10.8 nats down a power law, with 1% noise."""
    return (2.2 + 8.6 * (1 + step / 80) ** -0.6) * math.exp(rng.normal(0, 0.01))


def _write(
    folder: Path,
    shape: Callable[[int, float], tuple[float, float]],
    config: dict,
    *,
    grad: bool = True,
    lr: bool = True,
    every: int = 1,
    scale: bool = False,
    scale_at: Callable[[int], float] = lambda step: 65536.0,
    lr_at: Callable[[int], float] = _lr,
) -> Path:
    """A pre-training run from ~10.8 nats, logged every `every` steps (with the loss scale,
    scale_at(step), when `scale`); `shape(step, loss)` returns the (loss, gradient-norm
    factor) at a step."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, N + 1):
            base = _pretrain_loss(step, rng)
            loss, gmul = shape(step, base)
            g = 0.4 * gmul * math.exp(rng.normal(0, 0.05))
            if step % every:
                continue
            w.add_scalar("train/loss", loss, step)
            if grad:
                w.add_scalar("train/grad_norm", g, step)
            if scale:
                w.add_scalar("train/loss_scale", scale_at(step), step)
            if lr:
                w.add_scalar("train/learning_rate", lr_at(step), step)
    args = {"learning_rate": PEAK_LR, "warmup_steps": WARM, "max_steps": N,
            "lr_scheduler_type": "cosine", "max_grad_norm": 1.0, **config}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(args))
    return folder


def _echoing_spike(step: int, loss: float) -> tuple[float, float]:
    """+50% at 2000 decaying over ~30 steps, an echo at 2040; the gradient jumps at 2000."""
    k = 0.0
    if step >= 2000:
        k += 0.4 * math.exp(-(step - 2000) / 30)
    if step >= 2040:
        k += 0.25 * math.exp(-(step - 2040) / 8)
    return loss * math.exp(k), (15.0 if step == 2000 else 1.0)


def _hypotheses(tmp_path: Path) -> dict[str, tuple[str, list[str]]]:
    with open_store(tmp_path / "detect.duckdb", read_only=True) as store:
        rows = store.query("SELECT cause, status, needs FROM hypotheses").rows()
    return {c: (s, json.loads(n) if n else []) for c, s, n in rows}


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_without_a_gradient_norm_stale_beta2_is_not_named(tmp_path: Path, precision: str) -> None:
    # the gradient jump is the mechanism's own evidence: a loss-only log (with beta2 0.999 in
    # its config) cannot separate a stale second moment from a too-high LR or a batch, in
    # bf16 as in fp16 (before, bf16 with the LR at a third of its peak named stale_beta2)
    config = {"adam_beta2": 0.999, precision: True}
    found = stored_incidents(_write(tmp_path / "run", _echoing_spike, config, grad=False), tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(2000, "unknown")]
    status, needs = _hypotheses(tmp_path)["stale_beta2"]
    assert status == "not_evaluable" and "grad_norm" in needs


def test_with_the_gradient_norm_the_same_spike_names_stale_beta2(tmp_path: Path) -> None:
    config = {"adam_beta2": 0.999, "bf16": True}
    found = stored_incidents(_write(tmp_path / "run", _echoing_spike, config, grad=True), tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(2000, "stale_beta2")]


@pytest.mark.parametrize(("scale", "cause"), [(False, "unknown"), (True, "stale_beta2")])
def test_a_gradient_norm_that_missed_the_jump_names_stale_beta2_in_fp16_only_beside_the_scale(
    tmp_path: Path, scale: bool, cause: str
) -> None:
    """Every 10 steps logged: the gradient norm misses the jump at 2001; the run is fp16.
    Without the loss scale an overflow cascade would look the same: left open. With the
    scale logged and steady, no cascade happened."""

    def late_jump(step: int, loss: float) -> tuple[float, float]:
        k = 0.0  # +40% decaying over ~60 steps, an echo at 2061: slow, as stale beta2's are
        if step >= 2001:
            k += 0.4 * math.exp(-(step - 2001) / 60)
        if step >= 2061:
            k += 0.3 * math.exp(-(step - 2061) / 20)
        return loss * math.exp(k), (15.0 if step == 2001 else 1.0)

    config = {"adam_beta2": 0.999, "fp16": True}
    run = _write(tmp_path / "run", late_jump, config, every=10, scale=scale)
    found = stored_incidents(run, tmp_path)
    assert [(i["onset_step"], i["cause"]) for i in found] == [(2010, cause)]


def test_a_rare_token_batch_in_a_beta2_0999_run_back_at_once_is_named(tmp_path: Path) -> None:
    def batch(step: int, loss: float) -> tuple[float, float]:
        if step >= 2000:
            loss *= math.exp(0.45 * math.exp(-(step - 2000) / 2))
        return loss, (20.0 if step == 2000 else 1.0)

    run = _write(tmp_path / "run", batch, {"adam_beta2": 0.999, "bf16": True})
    found = stored_incidents(run, tmp_path)
    assert [(i["peak_step"], i["type"], i["cause"]) for i in found] == [
        (2000, "recoverable", "rare_tokens")
    ]


def test_a_divergence_at_the_peak_lr_soon_after_warm_up_is_the_lrs(tmp_path: Path) -> None:
    """From step 700 (3.5 warm-ups in, the LR at 97% of its peak) the loss climbs to 3x and
    stays, the gradient norm with it; nothing drifted before; beta2 is 0.999."""

    def diverge(step: int, loss: float) -> tuple[float, float]:
        if step < 700:
            return loss, 1.0
        k = min(1.0, (step - 700) / 60)
        return loss * (1 + 2 * k), 1 + 9 * k

    run = _write(tmp_path / "run", diverge, {"adam_beta2": 0.999, "bf16": True})
    found = stored_incidents(run, tmp_path)
    assert [(i["type"], i["cause"]) for i in found] == [("divergent", "lr_too_high")]
    assert 690 <= found[0]["onset_step"] <= 720
    # one definition, read by lr-too-high and stale-beta2 alike
    assert stored_features(tmp_path)[0]["warmup_end_divergence"] == 1.0
    assert _hypotheses(tmp_path)["stale_beta2"][0] != "supported"


def test_an_absurd_value_at_an_epoch_boundary_is_a_corrupted_value(tmp_path: Path) -> None:
    """A fine-tune whose loss steps down 12% as epoch 2 starts (steps 980-990, data seen
    before): the trend, fitted before the onset, lags it. The value logged at 1000 is 60x
    the loss; the ones after it are at the new level, where the point before it was."""
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path / "run"
    rng = np.random.default_rng(3)
    with SummaryWriter(str(folder)) as w:
        for step in range(10, 1601, 10):
            drop = 0.88 if step >= 990 else 0.94 if step == 980 else 1.0
            loss = 2.0 * drop * math.exp(rng.normal(0, 0.008))
            w.add_scalar("train/loss", loss * (60 if step == 1000 else 1), step)
            w.add_scalar("train/grad_norm", 6.0 * math.exp(rng.normal(0, 0.05)), step)
    (folder / "config.json").write_text(json.dumps({"adam_beta2": 0.99, "bf16": True}))
    found = stored_incidents(folder, tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(1000, "hardware_fault")]


def test_an_absurd_value_where_an_epoch_steps_the_loss_down_is_a_corrupted_value(
    tmp_path: Path,
) -> None:
    """The same fault as the boundary itself: the point before it is at the old level, the
    points after it 7% below the trend (epoch 2 starts at the bad step). An fp16 run, its
    gradient norm inf there (the scaler skipped the step). A loss the bad value had damaged
    would sit higher, not lower: the value was corrupted, not the model (third generator
    seed 19400048, read as an fp16 overflow because the loss after was not back on trend)."""
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path / "run"
    rng = np.random.default_rng(5)
    with SummaryWriter(str(folder)) as w:
        for step in range(10, 1601, 10):
            loss = 2.0 * (0.93 if step > 1000 else 1.0) * math.exp(rng.normal(0, 0.008))
            w.add_scalar("train/loss", loss * (60 if step == 1000 else 1), step)
            grad = math.inf if step == 1000 else 6.0 * math.exp(rng.normal(0, 0.05))
            w.add_scalar("train/grad_norm", grad, step)
    (folder / "config.json").write_text(json.dumps({"adam_beta2": 0.99, "fp16": True}))
    found = stored_incidents(folder, tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(1000, "hardware_fault")]


def _degenerate_shard(step: int, loss: float) -> tuple[float, float]:
    """Sixteen batches of repeated tokens from 2000: the loss collapses to a quarter (the
    batches' own loss), then the model they trained is worse: +40% decaying to +8%."""
    if 2000 <= step < 2016:
        return loss * 0.25, 1.0
    if step >= 2016:
        return loss * (1.08 + 0.32 * math.exp(-(step - 2016) / 60)), 1.0
    return loss, 1.0


def test_a_collapse_before_a_lasting_rise_is_the_data_in_a_beta2_0999_run(
    tmp_path: Path,
) -> None:
    """A dip of tens of noise scales is the batches' own loss; beta2 0.999 with no echo and
    no gradient jump amplified nothing the log shows (it was named stale_beta2 at 0.72)."""
    config = {"adam_beta2": 0.999, "bf16": True}
    run = _write(tmp_path / "run", _degenerate_shard, config, every=5)
    found = stored_incidents(run, tmp_path)
    assert [i["cause"] for i in found] == ["data_corruption"]


@pytest.mark.parametrize(
    ("overflows", "nans", "halvings", "cause"),
    [
        ((), (2000,), 0, "hardware_fault"),  # one NaN loss; the scaler halves once for it
        # two NaN losses 6 steps apart, a halving at each: the reactions to two bad values
        # (counted as a cascade's 2 halvings before, and named fp16_overflow)
        ((), (2000, 2006), 0, "hardware_fault"),
        ((1990, 1995), (2000,), 2, "fp16_overflow"),  # two skipped overflows first: a cascade
    ],
)
def test_nan_losses_in_fp16_with_a_halving_each_are_a_fault_not_an_overflow(
    tmp_path: Path, overflows: tuple[int, ...], nans: tuple[int, ...], halvings: int, cause: str
) -> None:
    """The loss is NaN at the `nans` steps (its gradient norm too) and on trend from the
    next step. The scaler halves its scale for every non-finite gradient, so a halving at a
    NaN loss is its reaction to the bad value itself, not counted; an overflow cascade
    halves it at steps whose loss is finite, before the spike."""
    bad = (*overflows, *nans)

    def fault(step: int, loss: float) -> tuple[float, float]:
        if step in nans:
            return float("nan"), float("nan")
        return loss, (float("inf") if step in overflows else 1.0)

    def scale_at(step: int) -> float:
        return 65536.0 / 2 ** sum(step >= b for b in bad)

    run = _write(tmp_path / "run", fault, {"fp16": True}, scale=True, scale_at=scale_at)
    found = stored_incidents(run, tmp_path)
    assert [i["cause"] for i in found] == [cause]
    assert stored_features(tmp_path)[0]["scale_halvings"] == halvings


def _cascade(drift: bool) -> tuple[Callable[[int, float], tuple[float, float]], Callable]:
    """An fp16 run logged every 5 steps: the scale halves every 10 steps from 940 to 1000,
    the gradient norm x4 from 940 (the overflowing gradients), the loss climbs to 2x from
    1000 and stays (divergent). With `drift` the gradient had already grown 3x from 600 to
    940: a too-high LR's gradient that overflowed."""

    def shape(step: int, loss: float) -> tuple[float, float]:
        g = 3.0 ** min(1.0, max(0.0, (step - 600) / 340)) if drift else 1.0
        g *= 4.0 if step >= 940 else 1.0
        k = min(1.0, max(0.0, (step - 1000) / 30)) * math.log(2.0)
        return loss * math.exp(k), g

    def scale_at(step: int) -> float:
        return 65536.0 / 2 ** sum(step >= b for b in range(940, 1001, 10))

    return shape, scale_at


@pytest.mark.parametrize(("drift", "cause"), [(False, "fp16_overflow"), (True, "lr_too_high")])
def test_a_gradient_that_grew_only_with_the_overflows_did_not_drift_before_them(
    tmp_path: Path, drift: bool, cause: str
) -> None:
    """The gradient's drift is measured up to the first overflow of a cascade that began
    before the loss rose: the overflowing gradient is the cascade's, not a drift that
    caused it. Measured up to the loss's onset, the cascade's own 4x read as a too-high
    LR's drift and the LR rule outranked the overflow rule."""
    shape, scale_at = _cascade(drift)
    run = _write(tmp_path / "run", shape, {"fp16": True}, every=5, scale=True, scale_at=scale_at)
    found = stored_incidents(run, tmp_path)
    assert [(i["type"], i["cause"]) for i in found] == [("divergent", cause)]
    feats = stored_features(tmp_path)[0]
    assert feats["scale_halvings"] >= 5
    assert (feats["grad_drift"] >= 2.0) == drift


def test_a_batch_where_the_log_thinned_out_is_judged_at_the_spacing_there(
    tmp_path: Path,
) -> None:
    """Logged every step to 1000, then every 20 as the HF Trainer does (the loss the mean of
    its 20 steps, the gradient norm the last step's). One bad batch at 1791 lifts the mean
    logged at 1800 by a third and is gone from the next. The gradient norm at 1800 is not
    that batch's, so its calm does not refute the batch: that holds only where every step is
    logged, and there the log holds one point in 20 (the run's most common spacing is 1)."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    window: list[float] = []
    with SummaryWriter(str(tmp_path / "run")) as w:
        for step in range(1, N + 1):
            loss = _pretrain_loss(step, rng)
            window.append(loss * (7.0 if step == 1791 else 1.0))
            if step > 1000 and step % 20:
                continue
            w.add_scalar("train/loss", float(np.mean(window)), step)
            w.add_scalar("train/grad_norm", 0.4 * math.exp(rng.normal(0, 0.05)), step)
            w.add_scalar("train/learning_rate", _lr(step), step)
            window = []
    args = {"learning_rate": PEAK_LR, "warmup_steps": WARM, "max_steps": N,
            "lr_scheduler_type": "cosine", "bf16": True}  # fmt: skip
    (tmp_path / "run" / "config.json").write_text(json.dumps(args))
    found = stored_incidents(tmp_path / "run", tmp_path)
    assert [(i["peak_step"], i["type"], i["cause"]) for i in found] == [
        (1800, "recoverable", "batch_driven")
    ]
    assert stored_features(tmp_path)[0]["log_interval"] == 20


@pytest.mark.parametrize(
    ("precision", "cause"),
    [
        ("bf16", "lr_too_high"),  # the rest refuted: what is left is the held LR
        ("fp16", "unknown"),  # an overflow cascade could diverge the same way: left open
    ],
)
def test_a_divergence_at_a_held_peak_lr_with_beta2_095_in_bf16_is_the_lrs(
    tmp_path: Path, precision: str, cause: str
) -> None:
    """The LR held at its peak after warm-up; at step 2000, ten warm-ups in, the loss climbs
    to 2.5x over 60 steps and stays there, the gradient norm 20x, with no drift before it.
    beta2 = 0.95 refutes stale beta2, a batch heals, a fault is transient; in bf16 no
    overflow cascade is possible either, so the held LR is what is left."""

    def diverge(step: int, loss: float) -> tuple[float, float]:
        k = min(1.0, max(0.0, (step - 2000) / 60))
        return loss * math.exp(k * math.log(2.5)), (20.0 if step >= 2000 else 1.0)

    def held(step: int) -> float:
        return PEAK_LR * min(1.0, step / WARM)

    config = {"adam_beta2": 0.95, precision: True, "lr_scheduler_type": "constant_with_warmup"}
    found = stored_incidents(_write(tmp_path / "run", diverge, config, lr_at=held), tmp_path)
    assert [(i["type"], i["cause"]) for i in found] == [("divergent", cause)]


def test_halvings_after_the_loss_went_nan_are_no_overflow_cascade(tmp_path: Path) -> None:
    """An fp16 run at a held peak LR, the gradient norm not logged: spikes at 2000, 2050 and
    2100, each larger than the last, then the loss climbs and is NaN from 2150 to the end;
    the scaler halves at every NaN step down to 1 (16 halvings). Those halvings are the
    scaler reacting to a loss already gone; before it the scale held, so there was no
    overflow cascade to blame, and without the gradient norm the LR cannot be named
    either: the cause is left open. The old count named an fp16 overflow at 90%."""

    def diverge(step: int, loss: float) -> tuple[float, float]:
        if step >= 2150:
            return float("nan"), 1.0
        k = sum(a * math.exp(-(step - s) / 10) for s, a in ((2000, 0.3), (2050, 0.4), (2100, 0.55))
                if step >= s)  # fmt: skip
        return loss * math.exp(k + min(1.0, max(0.0, (step - 2120) / 30)) * math.log(2.0)), 1.0

    def scale_at(step: int) -> float:
        return 65536.0 / 2 ** min(16, max(0, step - 2149))

    config = {"adam_beta2": 0.95, "fp16": True}
    run = _write(tmp_path / "run", diverge, config, grad=False, scale=True, scale_at=scale_at)
    found = stored_incidents(run, tmp_path)
    assert [(i["type"], i["cause"]) for i in found] == [("divergent", "unknown")]
    f = stored_features(tmp_path)[0]
    assert f["scale_halvings"] <= 1 and f["nonfinite_loss"] >= 100


def _late_gradient(drift: bool) -> Callable[[int, float], tuple[float, float]]:
    """A spike at 400, the LR at its peak, the loss back over ~100 steps. With `drift` the
    gradient norm grew 3x from 150 to 390 (a too-high LR's slow rise); without it, it
    jumped 4x at 375, 25 steps before the spike: a kick or an overflow cascade the log
    does not show (fp16, the loss scale not logged)."""

    def shape(step: int, loss: float) -> tuple[float, float]:
        if drift:
            g = 3.0 ** min(1.0, max(0.0, (step - 150) / 240))
        else:
            g = 4.0 if 375 <= step < 400 else 1.0
        bump = 0.5 * math.exp(-(step - 400) / 30) if step >= 400 else 0.0
        return loss * (1 + bump), g

    return shape


@pytest.mark.parametrize("drift", [False, True])
def test_a_gradient_that_jumped_just_before_the_spike_did_not_drift(
    tmp_path: Path, drift: bool
) -> None:
    """Both gradients stand 3-4x over the precursor's lowest quarter in its last quarter
    (grad_drift), but only the slow one was already up before the last 40 steps
    (grad_drift_early). The jump read as a too-high LR's drift at 0.9 on fp16 runs whose
    loss scale is not logged (bench/synth_runs_v.py: an overflow cascade's gradient)."""
    run = _write(tmp_path / "run", _late_gradient(drift), {"fp16": True}, every=5)
    found = stored_incidents(run, tmp_path)
    assert [i["peak_step"] for i in found] == [400]
    feats = stored_features(tmp_path)[0]
    assert feats["grad_drift"] >= 1.3
    assert (feats["grad_drift_early"] >= 1.15) == drift
    assert (found[0]["cause"] == "lr_too_high") == drift


def _ramp(step: int, start: int, length: int) -> float:
    """0 before `start`, rising linearly to 1 over `length` steps, 1 after."""
    return min(1.0, max(0.0, (step - start) / length))


def _spike_train(
    step: int, peaks: list[tuple[int, float, float]], tau: float
) -> tuple[float, float]:
    """(log excess of the loss, gradient factor) at `step` of spikes (at, amp, kick): each
    rises over 4 steps to `amp` at its step, its kick multiplying the gradient in those
    steps, then decays with time constant `tau`."""
    k, g = 0.0, 1.0
    for at, amp, kick in peaks:
        if at - 3 <= step < at:
            k += amp * (step - at + 4) / 4
            g *= kick
        elif step >= at:
            k += amp * math.exp(-(step - at) / tau)
    return k, g


def _early_lr_train(onset: int) -> Callable[[int, float], tuple[float, float]]:
    """A too-high LR soon after warm-up: the gradient norm grows 2.5x over the 120 steps
    before `onset`, then three spikes 70 steps apart, each larger than the last, each with
    its own gradient kick, and the loss settles a little above its trend."""
    peaks = [(onset, 0.25, 5.0), (onset + 70, 0.35, 5.0), (onset + 140, 0.5, 5.0)]

    def shape(step: int, loss: float) -> tuple[float, float]:
        k, g = _spike_train(step, peaks, 20)
        k += 0.05 * _ramp(step, onset, 160)
        return loss * math.exp(k), g * 2.5 ** _ramp(step, onset - 120, 115)

    return shape


@pytest.mark.parametrize(("every", "onset"), [(10, 250), (16, 330)])
def test_an_early_lr_train_in_a_sparse_log_has_its_drift_measured(
    tmp_path: Path, every: int, onset: int
) -> None:
    """An onset early in the run leaves half its history as the precursor. Logged every 10
    steps, the window ending 40 steps earlier (`grad_drift_early`) held two points in a
    quarter and was not measured; logged every 16, neither was the drift itself. With the
    drift unmeasured the LR (beta2 0.999, the default) read as a stale second moment
    (bench/synth_runs_v.py seeds 16000002 and 16000145; 16000015). The windows now hold
    at least sixteen intervals, and the earlier one is as long as the drift's own."""
    run = _write(tmp_path / "run", _early_lr_train(onset), {"adam_beta2": 0.999}, every=every)
    found = stored_incidents(run, tmp_path)
    assert found and found[0]["onset_step"] <= onset + every
    feats = stored_features(tmp_path)[0]
    assert feats["grad_drift"] >= 1.3 and feats["grad_drift_early"] >= 1.15, feats
    assert found[0]["cause"] == "lr_too_high"


def _kicked_train(grow: bool) -> Callable[[int, float], tuple[float, float]]:
    """beta2 0.999, the LR at its peak: one giant gradient (20x) at 500, then spikes at
    500, 580 and 660, each with a kick of its own (5x); they grow (or fade), and the loss
    settles 10% above its trend. No drift before: the gradient norm does not show the LR."""
    amps = (0.2, 0.3, 0.45) if grow else (0.45, 0.3, 0.2)

    def shape(step: int, loss: float) -> tuple[float, float]:
        g, k = 1.0, 0.0
        for at, amp in zip((500, 580, 660), amps, strict=True):
            if at - 3 <= step <= at:
                g *= 20.0 if at == 500 else 5.0
            if at - 3 <= step < at:
                k += amp * (step - at + 4) / 4
            elif step >= at:
                k += amp * math.exp(-(step - at) / 15)
        k += 0.1 * min(1.0, max(0.0, (step - 500) / 200))
        return loss * math.exp(k), g

    return shape


@pytest.mark.parametrize(("grow", "cause"), [(True, "lr_too_high"), (False, "stale_beta2")])
def test_spikes_still_growing_long_after_the_largest_gradient_are_the_lrs(
    tmp_path: Path, grow: bool, cause: str
) -> None:
    """A kick a stale second moment failed to damp is spent within tens of steps; spikes
    that grow through two echoes, the top 160 steps after the largest gradient, the LR at
    its peak and the loss left above its trend, are the LR holding the model at its edge
    (`late_growth`). They read as stale beta2 (third generator, 11 sets: 5 of the 20
    too-high LRs read as stale had their top at the third peak or later, 92-310 steps
    after the largest gradient). The same kicks fading after the first stay stale beta2's."""
    run = _write(tmp_path / "run", _kicked_train(grow), {"adam_beta2": 0.999}, every=4)
    found = stored_incidents(run, tmp_path)
    assert len(found) == 1 and found[0]["type"] == "lingering", found
    feats = stored_features(tmp_path)[0]
    shown = ("echo_fade", "grad_lead", "lr_frac", "lr_frac_peak", "type", "log_interval")
    assert feats["late_growth"] == float(grow), {k: feats[k] for k in shown}
    assert found[0]["cause"] == cause


def _close_train(kicks: tuple[float, float, float]) -> Callable[[int, float], tuple[float, float]]:
    """beta2 0.999, the LR at its peak, no drift: spikes at 500, 520 and 540 that grow
    (0.2, 0.3, 0.45), each with a gradient kick of its own (`kicks`), the loss settling
    10% above its trend. The top comes 40 steps after the first spike: within the reach
    of one kick."""
    peaks = [(500, 0.2, kicks[0]), (520, 0.3, kicks[1]), (540, 0.45, kicks[2])]

    def shape(step: int, loss: float) -> tuple[float, float]:
        k, g = _spike_train(step, peaks, 15)
        return loss * math.exp(k + 0.1 * _ramp(step, 500, 200)), g

    return shape


@pytest.mark.parametrize(
    ("kicks", "cause"), [((4.0, 6.0, 9.0), "lr_too_high"), ((20.0, 5.0, 5.0), "stale_beta2")]
)
def test_growing_spikes_each_with_a_larger_gradient_are_the_lrs(
    tmp_path: Path, kicks: tuple[float, float, float], cause: str
) -> None:
    """A stale second moment fails to damp one kick: the largest gradient, before the
    loss's first response. Spikes that grow to the last, each with a larger gradient of its
    own, are no one kick's, even when the top comes within 50 steps of the largest gradient
    (third generator: seeds 18000001 and 16400068, too-high LRs whose largest gradient came
    with their last spike, read as stale beta2). With the giant kick before the first
    spike, the same growing train stays stale beta2's."""
    run = _write(tmp_path / "run", _close_train(kicks), {"adam_beta2": 0.999}, every=2)
    found = stored_incidents(run, tmp_path)
    assert len(found) == 1 and found[0]["type"] != "divergent", found
    feats = stored_features(tmp_path)[0]
    shown = ("echo_fade", "echo_count", "grad_lead", "lr_frac", "type", "grad_drift")
    assert feats["late_growth"] == float(cause == "lr_too_high"), {k: feats[k] for k in shown}
    assert found[0]["cause"] == cause, {k: feats[k] for k in shown}


def _diverging_lr_train(drift: float) -> Callable[[int, float], tuple[float, float]]:
    """Past the peak (the LR at ~80% of it): the gradient norm grows `drift`x over the 300
    steps before 1100, then spikes at 1100, 1170 and 1240, each larger than the last with a
    kick of its own (5x), and from 1250 the loss climbs to e times its trend and stays."""
    peaks = [(1100, 0.2, 5.0), (1170, 0.3, 5.0), (1240, 0.45, 5.0)]

    def shape(step: int, loss: float) -> tuple[float, float]:
        k, g = _spike_train(step, peaks, 15)
        climb = _ramp(step, 1250, 60)
        return loss * math.exp(k + climb), g * drift ** _ramp(step, 800, 300) * (1 + 4 * climb)

    return shape


@pytest.mark.parametrize(("drift", "cause"), [(1.6, "lr_too_high"), (1.0, "stale_beta2")])
def test_a_divergence_after_recurring_spikes_and_a_drift_past_the_peak_is_the_lrs(
    tmp_path: Path, drift: float, cause: str
) -> None:
    """Spikes that kept coming, then a divergence at 80% of the peak LR, the gradient norm
    drifting up before them: the lr-too-high rule asked for the LR within 10% of its peak
    (or a 2x drift), so it read as unknown (third generator, 14 sets: 3 such divergences,
    seeds 15600084, 15900179, 16100139). The divergence refutes a batch, the drift a stale
    second moment. Without the drift the kicks, beta2 0.999, stay stale beta2's."""
    run = _write(tmp_path / "run", _diverging_lr_train(drift), {"adam_beta2": 0.999}, every=4)
    found = stored_incidents(run, tmp_path)
    assert found and found[-1]["type"] == "divergent", found
    feats = stored_features(tmp_path)[-1]
    shown = ("lr_frac", "grad_drift", "grad_drift_early", "echo_count", "type")
    assert 0.6 <= feats["lr_frac"] < 0.9, {k: feats[k] for k in shown}
    assert found[-1]["cause"] == cause, {k: feats[k] for k in shown}


def _overflow_then_rise(step: int, loss: float) -> tuple[float, float]:
    """One inf gradient norm at 1500 (an overflow the log shows as inf), then the loss
    building over 5 steps to +60% at 1530 and healing over ~30 steps."""
    k = 0.0
    if 1525 <= step < 1530:
        k = 0.47 * (step - 1524) / 6
    elif step >= 1530:
        k = 0.47 * math.exp(-(step - 1530) / 30)
    return loss * math.exp(k), (math.inf if step == 1500 else 1.0)


@pytest.mark.parametrize("config", [{}, {"fp16": True}])
def test_a_rise_long_after_one_inf_gradient_is_not_a_transient_fault(
    tmp_path: Path, config: dict
) -> None:
    """The loss clean around an inf gradient norm, then up 30 steps later: the fault rule
    read the bad value as isolated (its three points on each side were clean) and named a
    hardware fault at 60-80% for the whole incident, whose rise the value does not explain
    (third generator, seeds 16700030, 16700084, 16700142: fp16 overflows)."""
    run = _write(tmp_path / "run", _overflow_then_rise, config, every=5)
    found = stored_incidents(run, tmp_path)
    assert [i["peak_step"] for i in found] == [1530], found
    feats = stored_features(tmp_path)[0]
    assert feats["isolated_nonfinite"] == 0.0
    assert found[0]["cause"] != "hardware_fault"


def _lr_train_split() -> Callable[[int, float], tuple[float, float]]:
    """A too-high LR at its peak: the gradient norm doubles over the 250 steps before 400,
    a spike there with its kick (10x) that heals, then 160 steps later another kick (10x),
    a spike with an echo 60 steps on, and the loss left 10% above its trend. The gradient
    holds its doubled level after 400: before the second spike it no longer drifts."""

    def shape(step: int, loss: float) -> tuple[float, float]:
        k, g = _spike_train(step, [(400, 0.3, 10.0), (560, 0.3, 10.0), (620, 0.35, 4.0)], 12)
        return loss * math.exp(k + 0.1 * _ramp(step, 560, 200)), g * 2.0 ** _ramp(step, 150, 250)

    return shape


def test_a_later_spike_at_the_lr_an_earlier_incident_was_attributed_to_is_the_lrs(
    tmp_path: Path,
) -> None:
    """The first spike reads as the LR's (the drift before it); the second, its drift
    spent, read as stale beta2 (a 10x kick, an echo, beta2 0.999), although the run had
    just shown that this LR destabilises it and the kicks before had filled v (third
    generator, 14 sets: 3 such trains, seed 16200081 among them)."""
    run = _write(tmp_path / "run", _lr_train_split(), {"adam_beta2": 0.999}, every=10)
    found = stored_incidents(run, tmp_path)
    assert [i["onset_step"] // 10 for i in found] == [40, 56], found
    later = stored_features(tmp_path)[1]
    assert later["lr_vs_earlier_lr_too_high"] >= 0.5
    assert [i["cause"] for i in found] == ["lr_too_high", "lr_too_high"]


def _kick(glow: bool, tau: float = 15) -> Callable[[int, float], tuple[float, float]]:
    """A 20x gradient at 2000 with a +40% loss spike healing over ~`tau` steps, no echo;
    with `glow` the gradient norm stays 3x its level for the 40 steps after (decaying), as
    the model the amplified updates moved returns; without it, it is back at the next step."""

    def shape(step: int, loss: float) -> tuple[float, float]:
        k = 0.34 * math.exp(-(step - 2000) / tau) if step >= 2000 else 0.0
        g = 20.0 if step == 2000 else 1.0
        if glow and 2000 < step <= 2040:
            g = 1 + 2 * math.exp(-(step - 2001) / 30)
        return loss * math.exp(k), g

    return shape


@pytest.mark.parametrize(("glow", "cause"), [(True, "stale_beta2"), (False, "rare_tokens")])
def test_a_gradient_that_stays_up_after_the_kick_is_stale_beta2s(
    tmp_path: Path, glow: bool, cause: str
) -> None:
    """beta2 0.999, one kick, back within 100 steps, no echo: the rare-tokens rule read it
    as a batch the optimizer damped. A batch's gradient is its own, and the next batches'
    are where they were (our simulator's rare_tokens: 14.4 at the batch, the median after
    1.07x); a stale second moment's amplified updates moved the model, whose gradient
    stays up while it returns (our simulator's stale_beta2: 1.4x; third generator, set
    12600000: stale 1.36-9.3x, rare tokens 0.52-1.06x): `grad_afterglow`."""
    run = _write(tmp_path / "run", _kick(glow), {"adam_beta2": 0.999, "bf16": True})
    found = stored_incidents(run, tmp_path)
    assert [i["peak_step"] for i in found] == [2000], found
    feats = stored_features(tmp_path)[0]
    assert (feats["grad_afterglow"] >= 1.3) == glow, feats["grad_afterglow"]
    assert found[0]["cause"] == cause


@pytest.mark.parametrize(("glow", "cause"), [(True, "unknown"), (False, "rare_tokens")])
def test_with_beta2_unknown_a_gradient_that_stays_up_is_no_batchs_alone(
    tmp_path: Path, glow: bool, cause: str
) -> None:
    """No beta2 in the config (PyTorch's and the HF Trainer's default is 0.999), one kick,
    the loss over half gone within two steps: the batch-driven rule named the batch. A
    gradient that stays up after the kick shows updates that moved the model, which the log
    cannot pin on the batch alone, nor on a stale second moment without beta2 (third
    generator, 20 sets: 9 such, stale beta2 or fp16 overflows without a config, read as a
    batch). With the gradient back at once it is the rare-token batch."""
    run = _write(tmp_path / "run", _kick(glow, tau=2.5), {"bf16": True})
    found = stored_incidents(run, tmp_path)
    assert [i["peak_step"] for i in found] == [2000], found
    feats = stored_features(tmp_path)[0]
    assert feats["heal_share"] >= 0.5 and feats["single_point_peaks"] == 0, feats
    assert found[0]["cause"] == cause
