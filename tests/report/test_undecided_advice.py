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

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from forensics.analyze import AnalyzeOptions, analyze

pytest.importorskip("torch.utils.tensorboard")

N, BATCHES = 1500, (250, 275, 310)


def _write(folder: Path) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, N + 1):
            loss = (2.2 + 8.6 * (1 + step / 80) ** -0.6) * math.exp(rng.normal(0, 0.01))
            grad = 0.8 * math.exp(rng.normal(0, 0.05))
            for i, at in enumerate(BATCHES):
                amp = (0.8, 0.5, 0.6)[i]
                loss *= 1 + 0.3 * amp * math.exp(-(step - at - 1) / 30.0) * (step > at)
                if step == at:
                    loss *= 1 + amp
                    grad *= 9.0
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/grad_norm", grad, step)
            w.add_scalar("train/learning_rate", 3e-4 * min(1.0, step / 100), step)
    cfg = {"adam_beta2": 0.999, "bf16": True, "learning_rate": 3e-4, "warmup_steps": 100}
    (folder / "args.json").write_text(json.dumps(cfg))
    return folder


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
