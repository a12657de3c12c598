"""Megatron counts, per log interval, the iterations whose loss was NaN/Inf (`number of nan
iterations`), averages them out of `lm loss`, and prints no `lm loss` at all when every
iteration of the interval was one. In an fp16 run its scaler halves the loss scale at each
of them: a reaction to a loss already gone, not an overflow cascade (which skips steps
whose loss is finite). Counted as a cascade, those halvings named fp16 overflow as the
cause of a too-high LR's divergence (third generator, Megatron writer: seeds 18000068,
18200059, 17600183, 14500030, the scale halving 12-18 times only after the loss went NaN).

The log is written line for line in the format Megatron-LM's training_log prints, with its
`arguments` block (fp16, beta2 0.95, a cosine LR warming up over 100 iterations)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from detect_helpers import stored_features, stored_incidents

TRAIN, EVERY, WARM, PEAK_LR = 2000, 10, 100, 6e-4
ARGS = {
    "adam_beta1": 0.9, "adam_beta2": 0.95, "bf16": False, "clip_grad": 1.0, "fp16": True,
    "global_batch_size": 256, "initial_loss_scale": 4294967296, "log_interval": EVERY,
    "lr": PEAK_LR, "lr_decay_style": "cosine", "lr_warmup_iters": WARM, "min_lr": 6e-5,
    "min_loss_scale": 1.0, "micro_batch_size": 4, "optimizer": "adam", "seq_length": 2048,
    "train_iters": TRAIN,
}  # fmt: skip


def _lr(it: int) -> float:
    if it < WARM:
        return PEAK_LR * it / WARM
    p = (it - WARM) / (TRAIN - WARM)
    return 6e-5 + (PEAK_LR - 6e-5) * 0.5 * (1 + math.cos(math.pi * p))


def _shape(it: int) -> tuple[float, float]:
    """(log excess of the loss, gradient factor): spikes at 300, 340 and 380 each larger
    than the last with a kick of its own, at 94-97% of the peak LR, then a climb from 390
    that turns NaN. No drift before: early in a run the gradient norm's own fall hides it
    (the third generator's runs above)."""
    k, g = 0.0, 1.0
    for at, amp, kick in ((300, 0.3, 4.0), (340, 0.45, 5.0), (380, 0.6, 6.0)):
        if at - 3 <= it < at:
            k, g = k + amp * (it - at + 4) / 4, g * kick
        elif it >= at:
            k += amp * math.exp(-(it - at) / 15)
    return k + 1.5 * min(1.0, max(0.0, (it - 390) / 70)), g


def _cascade(it: int) -> tuple[float, float]:
    """An overflow cascade: a spike at 340 that decays over ~40 iterations, after the
    scaler skipped six steps in 301-330 (see _write)."""
    return (0.5 * math.exp(-(it - 340) / 40) if it >= 340 else 0.0), 1.0


OVERFLOWS = (303, 309, 314, 318, 322, 327)


def _line(
    it: int, loss: float | None, scale: float, grad: float | None, nans: int, skips: int
) -> str:
    parts = [
        f" iteration {it:8d}/{TRAIN:8d}", f" consumed samples: {it * 256:12d}",
        " elapsed time per iteration (ms): 1021.4", f" learning rate: {_lr(it):.3E}",
        " global batch size:   256",
    ]  # fmt: skip
    if loss is not None:
        parts.append(f" lm loss: {loss:.6E}")
    parts.append(f" loss scale: {scale:.1f}")
    if grad is not None:
        parts.append(f" grad norm: {grad:.3f}")
    parts += [f" number of skipped iterations: {skips:3d}", f" number of nan iterations: {nans:3d}"]
    return " |".join(parts) + " |"


def _write(folder: Path, nan_from: int, cascade: bool = False) -> Path:
    """The log of iterations to TRAIN / 2: a too-high LR's climb to NaN from `nan_from`, or
    (`cascade`) an overflow cascade, each overflow skipped at a finite loss, then a spike."""
    shape = _cascade if cascade else _shape
    rng = np.random.default_rng(3)
    lines = ["------------------------ arguments ------------------------"]
    lines += [f"  {k} {'.' * max(3, 47 - len(k))} {v}" for k, v in sorted(ARGS.items())]
    lines += ["-------------------- end of arguments ---------------------", "training ..."]
    scale = 65536.0
    for it in range(EVERY, TRAIN // 2 + 1, EVERY):
        window = range(it - EVERY + 1, it + 1)
        nans = sum(1 for i in window if i >= nan_from)
        skips = nans + sum(1 for i in window if cascade and i in OVERFLOWS)
        scale = max(1.0, scale / 2**skips)  # the scaler halves at every skipped iteration
        finite = [i for i in window if i < nan_from and not (cascade and i in OVERFLOWS)]
        losses = [
            (2.3 + 8.5 * (1 + i / 60) ** -0.55) * math.exp(shape(i)[0] + rng.normal(0, 0.01))
            for i in finite
        ]
        grad = 0.5 * shape(it)[1] * math.exp(rng.normal(0, 0.05)) if not skips else None
        loss = float(np.mean(losses)) if losses else None
        lines.append(_line(it, loss, scale, grad, nans, skips))
    folder.mkdir(parents=True)
    (folder / "train.log").write_text("\n".join(lines) + "\n")
    return folder


def test_halvings_at_nan_iterations_are_no_overflow_cascade(tmp_path: Path) -> None:
    run = _write(tmp_path / "run", nan_from=461)
    found = stored_incidents(run, tmp_path)
    assert found and found[-1]["type"] == "divergent", found
    feats = stored_features(tmp_path)[-1]
    shown = ("scale_halvings", "skipped", "nan_iters", "grad_drift", "lr_frac", "type")
    assert feats["scale_halvings"] == 0 and feats["skipped"] == 0, {k: feats[k] for k in shown}
    assert feats["nan_iters"] > 0
    assert found[-1]["cause"] == "lr_too_high", {k: feats[k] for k in shown}


def test_halvings_at_finite_losses_stay_an_overflow_cascade(tmp_path: Path) -> None:
    """Six overflows skipped at finite losses, the scale halved for each, then the spike:
    the cascade the fp16-overflow rule names, whatever the NaN counter says (0 here)."""
    run = _write(tmp_path / "run", nan_from=TRAIN + 1, cascade=True)
    found = stored_incidents(run, tmp_path)
    assert len(found) == 1, found
    feats = stored_features(tmp_path)[0]
    assert feats["scale_halvings"] == 6 and feats["skipped"] == 6, feats
    assert found[0]["cause"] == "fp16_overflow"
