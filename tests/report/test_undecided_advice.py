"""A hypothesis the log leaves undecided with every metric it needs logged: the page names
the inputs the log does not give and never asks for the metrics that are there.

A SummaryWriter run logs the loss, the pre-clip grad norm and the LR every step, with
`args.json` beside it (beta2 0.999). Three batches early in training lift the loss to the
initial level, each with a 9x gradient: lr-too-high can neither fire nor be refuted (the
LR is at its peak, no drift; its condition also reads the parameter norm, never logged,
and an earlier LR incident, of which there is none). The cause's general advice ("`lr` and
`grad_norm` in the log") would ask the engineer for two metrics the run logged.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from tb_runs import PEAK_LR, WARMUP, ones, write_run

from forensics.analyze import AnalyzeOptions, analyze

pytest.importorskip("torch.utils.tensorboard")

N, BATCHES = 1500, (250, 275, 310)


def _write(folder: Path) -> Path:
    """Each batch lifts its step's loss by its amplitude and leaves a 30-step tail of the
    damage its update did; its gradient is 9x."""
    k = np.arange(N + 1, dtype=float)
    loss_x, grad_x = ones(N), ones(N)
    for at, amp in zip(BATCHES, (0.8, 0.5, 0.6), strict=True):
        loss_x *= 1 + 0.3 * amp * np.exp(-(k - at - 1) / 30.0) * (k > at)
        loss_x[at] *= 1 + amp
        grad_x[at] *= 9.0
    cfg = {"adam_beta2": 0.999, "bf16": True, "learning_rate": PEAK_LR, "warmup_steps": WARMUP}
    return write_run(folder, loss_x, grad_x, cfg)


def test_an_undecided_cause_asks_for_what_the_log_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORENSICS_CHROMIUM", "off")
    out = tmp_path / "out"
    analyze(_write(tmp_path / "run"), out, options=AnalyzeOptions(replay=False))
    page = (out / "postmortems" / "spike-01.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| learning rate too high"))
    assert "| not evaluated |" in row
    assert "`lr` and `grad_norm` in the log" not in row  # both are logged
    absent = re.search(r"does not give, among: ([^)]*)\)", row)
    assert absent is not None and "param_drift" in absent.group(1).split(", ")
