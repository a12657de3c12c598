"""A too-high LR in a run whose config gives the LR and the warm-up but no schedule name.

A hand-written Lightning module saves `lr`, `warmup_steps` and `max_steps` in its
hparams.yaml and builds its scheduler in `configure_optimizers`, so the schedule's shape is
not in any file. The LR fraction at a step past the warm-up is then unknown, but just
after the warm-up (within 10% of its length) any decay has barely begun: the page says the
LR phase is **peak**, and the lr-too-high rule reads that phase as it reads a logged LR
at 90% of its peak (third generator seed 19400173: spikes growing after a gradient drift
at 1.1 warm-up lengths, stated "unknown" beside "LR phase at the onset: peak").

Written by Lightning's own CSVLogger (hparams.yaml + metrics.csv)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import stored_features, stored_incidents

pytest.importorskip("lightning")

WARM, ONSET = 1000, 1080


def _excess(step: int) -> tuple[float, float]:
    """(log excess of the loss, gradient factor): the gradient norm drifts up 1.6x over the
    300 steps before the onset, then three spikes 70 steps apart grow, each with a kick of
    its own, and the loss settles 5% above its trend."""
    k = 0.05 * min(1.0, max(0.0, (step - ONSET) / 160))
    g = 1.6 ** min(1.0, max(0.0, (step - ONSET + 300) / 290))
    for at, amp in ((ONSET, 0.25), (ONSET + 70, 0.35), (ONSET + 140, 0.5)):
        if at - 3 <= step < at:
            k += amp * (step - at + 4) / 4
            g *= 5.0
        elif step >= at:
            k += amp * math.exp(-(step - at) / 20)
    return k, g


def _write(folder: Path, hparams: dict[str, object]) -> Path:
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(str(folder), name="lightning_logs", version=0)
    logger.log_hyperparams(hparams)
    rng = np.random.default_rng(4)
    for step in range(1, 1601):
        k, g = _excess(step)
        loss = (2.2 + 8.6 * (1 + step / 80) ** -0.6) * math.exp(k + rng.normal(0, 0.01))
        grad = 0.4 * g * math.exp(rng.normal(0, 0.05))
        logger.log_metrics({"train_loss": loss, "grad_norm": grad}, step=step)
    logger.save()
    logger.finalize("success")
    return folder


HPARAMS = {"lr": 3e-4, "betas": [0.9, 0.95], "warmup_steps": WARM, "max_steps": 3000,
           "precision": "bf16-mixed", "gradient_clip_val": 1.0}  # fmt: skip


def test_spikes_just_after_the_warm_up_are_the_lrs_without_a_schedule_name(
    tmp_path: Path,
) -> None:
    found = stored_incidents(_write(tmp_path / "run", HPARAMS), tmp_path)
    assert found and abs(found[0]["onset_step"] - ONSET) <= 5, found
    feats = stored_features(tmp_path)[0]
    assert feats["lr_frac"] is None and feats["lr_phase"] == "peak", feats
    assert found[0]["cause"] == "lr_too_high"


def test_without_the_warm_up_length_the_phase_and_the_lr_stay_unknown(tmp_path: Path) -> None:
    hparams = {k: v for k, v in HPARAMS.items() if k != "warmup_steps"}
    found = stored_incidents(_write(tmp_path / "run", hparams), tmp_path)
    assert found and stored_features(tmp_path)[0]["lr_phase"] is None
    assert found[0]["cause"] != "lr_too_high"
