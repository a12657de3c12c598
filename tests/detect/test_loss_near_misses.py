"""Loss points that came close to the spike bar without crossing it.

A noisy log holds points a spike's size above the trend that the screen leaves under its
noise bar (z_min sigmas). The ones within NEAR_BAR of the bar are stored as near-misses
(`near_misses`, metric = the loss), and a post-mortem names those in its figure's window:
a reader who sees a tall point just after "recovered" learns why it is no incident (the
ScaleUp1B run's step 14840, +47% at 7.5 sigma beside spike 23). Ordinary noise further under
the bar is not listed, nor is a point inside an incident.

The run is written by torch's SummaryWriter: a power-law loss with 2.5% log-normal noise,
a +60% spike that decays within ~15 steps and, 40 steps after it, one +20% point
(about 7 sigma)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import stored_incidents

from forensics.report import write_report
from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

NEAR, SPIKE = 2040, 2000


def _write(folder: Path, seed: int) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(seed)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, 3001):
            loss = (2.4 + 6.0 * (step / 50 + 1) ** -0.6) * math.exp(rng.normal(0, 0.025))
            if step == NEAR:
                loss = (2.4 + 6.0 * (step / 50 + 1) ** -0.6) * 1.2
            if step >= SPIKE:
                loss *= 1 + 0.6 * math.exp(-(step - SPIKE) / 4)
            w.add_scalar("train/loss", loss, step)
    return folder


def _near(tmp_path: Path) -> list[tuple[int, str, float, str]]:
    with open_store(tmp_path / "detect.duckdb", read_only=True) as store:
        return store.query(
            "SELECT step, metric, ratio, detail FROM near_misses ORDER BY step"
        ).rows()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_point_just_under_the_bar_is_a_near_miss_named_on_the_page(
    tmp_path: Path, seed: int
) -> None:
    found = stored_incidents(_write(tmp_path / "run", seed), tmp_path)
    assert [abs(i["onset_step"] - SPIKE) <= 2 for i in found] == [True]
    near = _near(tmp_path)
    assert [(s, m) for s, m, _, _ in near] == [(NEAR, "loss")]
    step, _, ratio, detail = near[0]
    assert ratio == pytest.approx(1.2, abs=0.03)  # over the trailing median of the screen
    assert detail.startswith(f"loss {ratio - 1:+.0%} over the median of the points before it at ")
    assert "under the 8σ bar for a spike" in detail
    with open_store(tmp_path / "detect.duckdb") as store:
        run = store.query("SELECT run_id FROM runs").item()
        write_report(store, run, tmp_path / "report", png=False, min_severity="minor")
    page = (tmp_path / "report" / "postmortems" / "spike-01.md").read_text()
    assert f"1 near-miss in the figure's window, not an incident: step {NEAR} (" in page
    assert detail in page
