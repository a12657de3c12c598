"""A degenerate shard's collapse is no pre-spike trend.

A shard of repeated or empty text drops the loss far below its level while it lasts; when
it ends the loss comes back up, with the damage the shard did on top, and heals. The trend
used to be fitted across the collapse, at its level: the return read as a x7 spike that
never recovered (divergent, cause unknown) on third-generator runs (a fine-tune at 2.2
whose loss sat at 0.37 for 60 steps, then 2.8, back to 2.2 by 150 steps later). The history
before the collapse is the curve; a drop the loss stays at after the spike (an epoch's, an
LR milestone's) is still the curve's own. And the advice skips the collapse's batches (it
skipped the onset's to the peak's: the damage, not the data that did it). Runs written by
torch's SummaryWriter.
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

LEVEL = 2.2


def _write(folder: Path, loss_at: Callable[[int], float], n: int = 1200) -> None:
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(4)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, n + 1):
            w.add_scalar("train/loss", loss_at(step) * math.exp(rng.normal(0, 0.01)), step)


def _collapse(start: int, length: int) -> Callable[[int], float]:
    """A flat fine-tune at LEVEL; a shard collapses the loss to 0.37 for `length` steps,
    then the damage: x1.3 at the shard's end, fading over ~40 steps."""
    end = start + length

    def loss(step: int) -> float:
        if start <= step < end:
            return 0.37
        damage = 0.3 * math.exp(-(step - end) / 40) if step >= end else 0.0
        return LEVEL * (1 + damage)

    return loss


def _incidents(tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]) -> list[dict]:
    out, db = analyzed(tmp_path / "tb", min_severity="minor")
    with open_store(db, read_only=True) as store:
        rows = store.query("SELECT * FROM incidents ORDER BY onset_step").to_dicts()
        assert check_report(out, store, store.run_names()[0]) == []
    return rows


@pytest.mark.parametrize("start", [150, 600], ids=["in_start_up", "later"])
def test_the_return_from_a_collapse_is_judged_against_the_level_before_it(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]], start: int
) -> None:
    _write(tmp_path / "tb", _collapse(start, 60))
    rows = [r for r in _incidents(tmp_path, analyzed) if r["onset_step"] >= start]
    (inc,) = rows
    assert start + 55 <= inc["onset_step"] <= start + 62
    assert inc["type"] == "recoverable"  # was divergent: the trend sat at 0.37
    assert inc["pre_value"] == pytest.approx(LEVEL, rel=0.05)
    assert inc["cause"] == "data_corruption"  # the dip before the spike (data-corruption-dip)
    # the skip takes out the shard's batches (the collapse), not only the onset's: a skip of
    # the spike's steps alone would keep the data that did it
    assert inc["recovery"] == f"skip_batch:{start}-{inc['peak_step']}"
    page = (tmp_path / "out" / "postmortems" / "spike-01.md").read_text()
    assert f"far below its pre-spike trend, at steps {start}–{start + 59} (8" in page
    k = inc["peak_step"] - start + 1
    assert f"the k = {k} batches of steps {start}–{inc['peak_step']}" in page
    figure = (tmp_path / "out" / "figures" / "spike-01-metrics.html").read_text()
    assert "collapse (skipped)" in figure  # the skipped steps, shaded


def test_a_drop_the_loss_stays_at_is_still_the_curve(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    # an epoch's drop at 500 (x0.7, held), a one-step spike at 560: judged against the new
    # level, as before
    def loss(step: int) -> float:
        base = LEVEL if step < 500 else 0.7 * LEVEL
        return 2.0 * base if step == 560 else base

    _write(tmp_path / "tb", loss)
    (inc,) = [r for r in _incidents(tmp_path, analyzed) if r["onset_step"] >= 540]
    assert inc["peak_step"] == 560 and inc["type"] == "recoverable"
    assert inc["pre_value"] == pytest.approx(0.7 * LEVEL, rel=0.05)
