"""A loss-scale collapse whose loss did not move: the page quotes the scale at the step it
names and says that it is the loss that was back.

Found by reading the pages of third-generator runs (an fp16 Megatron run whose scaler halved
131,072 -> 4096 over 60 steps): the page said "went from 131,072 to 4096 at step 1140" where
the logged scale was 65,536 (4096 came at 1200), "It was back on its pre-spike trend at step
1220" of a scale that stayed at 4096, and the run summary described the loss scale as the
run's metric ("100 logged steps of `loss_scale`"). The run is written by SummaryWriter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from consistency import check_report

from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

# the scaler halves at 500, quarters at 510 and halves at 530: 65,536 -> 4096
SCALE_AT = {500: 2, 510: 4, 530: 2}


def _fp16_run(folder: Path) -> dict[int, float]:
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(7)
    scale, scales = 65536.0, {}
    with SummaryWriter(str(folder)) as w:
        for step in range(10, 1001, 10):
            loss = 4.0 * (step / 10 + 1) ** -0.15 * math.exp(rng.normal(0, 0.01))
            scale /= SCALE_AT.get(step, 1)
            scales[step] = scale
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/loss_scale", scale, step)
            w.add_scalar("train/grad_norm", math.exp(rng.normal(0, 0.05)), step)
    return scales


def test_a_scale_collapse_is_quoted_at_its_lowest_and_the_loss_said_back(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    scales = _fp16_run(tmp_path / "run")
    out, db = analyzed(tmp_path / "run")
    with open_store(db, read_only=True) as store:
        (inc,) = store.query("SELECT * FROM incidents").to_dicts()
        assert check_report(out, store, "run") == []
    assert inc["metric"] == "loss_scale"
    assert inc["peak_step"] == 530 and inc["peak_value"] == scales[530] == 4096
    page = (out / "postmortems" / "spike-01.md").read_text()
    assert "to 4096 at step 530" in page
    back = inc["recovery_step"]
    assert f"The loss (`loss`) was back on its pre-spike trend at step {back}" in page
    assert "It was back" not in page
    summary = (out / "README.md").read_text()
    assert "100 logged steps of `loss`," in summary
