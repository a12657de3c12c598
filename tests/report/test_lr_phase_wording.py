"""The LR-phase line when the LR is known from the config only: "(the LR first reached its
peak at step 79)", not "( the LR ...". Found reading the page of a third-generator fp16
run (SummaryWriter, a config.yaml with the schedule, no `lr` logged). Written here by
SummaryWriter with such a config.

And the phase it names: past the warm-up it used to say **peak** wherever the onset was,
beside a feature table that said `lr_phase` decay (a cosine schedule at 57% of its peak)
or n/a (a Lightning run whose hparams give the LR and the warm-up but no schedule)."""

from __future__ import annotations

import json
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
    # cosine from 79 to 1000: at 500 the LR is 57% of its peak, as the features say
    assert inc["lr_phase"] == "decay" and json.loads(inc["features"])["lr_phase"] == "decay"
    page = (out / "postmortems" / "spike-01.md").read_text()
    assert (
        f"LR phase at the onset: **{inc['lr_phase']}** (the LR first reached its peak at step 79)."
        in page
    )


def _lightning_run(root: Path) -> None:
    """Lightning's CSVLogger: hparams.yaml with the peak LR and the warm-up, no schedule."""
    from lightning.pytorch.loggers import CSVLogger

    rng = np.random.default_rng(3)
    logger = CSVLogger(str(root), name="lightning_logs")
    logger.log_hyperparams({"lr": 3e-4, "warmup_steps": 100, "max_steps": 1000})
    for step in range(5, 1001, 5):
        loss = 4.0 * (step / 10 + 1) ** -0.15 * math.exp(rng.normal(0, 0.01))
        logger.log_metrics({"train_loss_step": 2.0 * loss if step == 600 else loss}, step=step)
    logger.save()
    logger.finalize("success")


def test_no_schedule_in_the_config_reads_after_warm_up(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    pytest.importorskip("lightning")
    _lightning_run(tmp_path / "run")
    out, db = analyzed(tmp_path / "run", min_severity="minor")
    with open_store(db, read_only=True) as store:
        (inc,) = store.query("SELECT * FROM incidents").to_dicts()
        assert check_report(out, store, inc["run_id"]) == []
    assert inc["lr_phase"] == "after warm-up" and inc["lr_peak_step"] == 100
    assert json.loads(inc["features"])["lr_phase"] is None  # what the LR was is not known
    page = (out / "postmortems" / "spike-01.md").read_text()
    assert (
        "LR phase at the onset: **after warm-up** (the LR first reached its peak at step 100)."
        in page
    )
