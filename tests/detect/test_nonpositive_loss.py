"""A loss that is not positive (an RL policy loss around 0: TRL's GRPO, open-r1#704) is
screened, typed and quoted in its own units.

Such a series is screened as logged (no log). It used to be rescaled by its median
magnitude for the screen, and the incident's values came out in those units while the
recovery test compared them with the loss as logged: open-r1's GRPO spike to 3.42 read
"from -0.1999 to 55.63 (x-278)", back "at step 61" where the loss was still 1.2, and the
ratio features (pre_dip, peak_vs_initial) mixed log and linear units into "corrupted data
(95%)". Every run here is written by torch's SummaryWriter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from forensics.analyze import AnalyzeOptions, analyze
from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

SPIKE_AT, SPIKE, AFTER = 600, 3.4, 1.2


def _grpo_run(folder: Path) -> dict[int, float]:
    """1000 steps of a policy loss around 0 (noise 0.05), a spike to 3.4 at 600 and 1.2 at
    the next step, as open-r1's table logs it."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(3)
    logged = {}
    with SummaryWriter(str(folder)) as w:
        for step in range(1, 1001):
            loss = float(rng.normal(0.0, 0.05))
            loss = {SPIKE_AT: SPIKE, SPIKE_AT + 1: AFTER}.get(step, loss)
            w.add_scalar("train/loss", loss, step)
            logged[step] = loss
    return logged


def test_a_spike_of_a_policy_loss_around_zero_is_quoted_as_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORENSICS_CHROMIUM", "off")  # the page is read, not its PNGs
    logged = _grpo_run(tmp_path / "grpo")
    out, db = tmp_path / "out", tmp_path / "f.duckdb"
    opts = AnalyzeOptions(replay=False, min_severity="minor")
    analyze([tmp_path / "grpo"], out=out, db=db, options=opts)
    with open_store(db, read_only=True) as store:
        (inc,) = store.query(
            "SELECT peak_step, pre_value, peak_value, end_step, features FROM incidents"
        ).to_dicts()
    assert inc["peak_step"] == SPIKE_AT
    assert inc["peak_value"] == pytest.approx(logged[SPIKE_AT], rel=1e-6)
    assert abs(inc["pre_value"]) < 0.05  # the trend the loss was on, around 0
    assert inc["end_step"] > SPIKE_AT + 1  # still at 1.2 one step later: not back yet
    feats = json.loads(inc["features"])
    assert feats["peak_vs_initial"] is None and feats["pre_dip"] is None
    page = (out / "postmortems" / "spike-01.md").read_text()
    change = f"{inc['peak_value'] - inc['pre_value']:+.3g}"
    assert f"({change})" in page and "×" not in page.split("## Evidence")[0]
