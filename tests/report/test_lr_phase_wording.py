"""The LR-phase line when the LR is known from the config only: "(the LR first reached its
peak at step 79)", not "( the LR ...". Found reading the page of a third-generator fp16
run (SummaryWriter, a config.yaml with the schedule, no `lr` logged). Written here by
SummaryWriter with such a config."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from consistency import check_report

from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

CONFIG = {
    "optimizer": {"name": "adamw", "lr": 4e-5, "betas": [0.9, 0.98]},
    "scheduler": {"name": "cosine", "warmup_steps": 79},
    "trainer": {"max_steps": 1000, "precision": "bf16", "log_every": 10},
}


def _run(folder: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    rng = np.random.default_rng(2)
    with SummaryWriter(str(folder / "tb")) as w:
        for step in range(10, 1001, 10):
            loss = 4.0 * (step / 10 + 1) ** -0.15 * math.exp(rng.normal(0, 0.01))
            w.add_scalar("train/loss", 2.0 * loss if step == 500 else loss, step)


def test_the_lr_phase_line_without_a_logged_lr_reads_as_a_sentence(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    _run(tmp_path / "run")
    out, db = analyzed(tmp_path / "run", min_severity="minor")
    with open_store(db, read_only=True) as store:
        (inc,) = store.query("SELECT * FROM incidents").to_dicts()
        assert check_report(out, store, inc["run_id"]) == []
    assert inc["lr_at_onset"] is None and inc["lr_peak_step"] == 79
    page = (out / "postmortems" / "spike-01.md").read_text()
    assert (
        f"LR phase at the onset: **{inc['lr_phase']}** (the LR first reached its peak at step 79)."
        in page
    )
