"""A change that rounds to nothing is written "+0.0%", never "-0.0%".

A third-generator hardware-fault run's page listed a near-miss as "grad norm 9.2x its
trailing median with no loss spike (loss -0.0% vs trend)": the loss sat a hair under its
trend, and a reader takes "-0.0%" for a drop. Written here by torch's SummaryWriter: a
flat loss whose gradient norm jumps 9x at one step where the loss sits 0.001% under its
trend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from consistency import check_report

from forensics.nonfinite import signed_percent
from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

KICK = 300


def _run(folder: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(folder)) as w:
        for step in range(1, 601):
            loss = 2.0 * (1 + 0.0001 * math.sin(step))
            grad = 1.0 + 0.05 * math.sin(0.7 * step)
            if step == KICK:
                loss, grad = loss * 0.99999, 9.0
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/grad_norm", grad, step)


@pytest.mark.parametrize(
    ("x", "decimals", "text"),
    [(-0.0004, 1, "+0.0%"), (-0.00004, 0, "+0%"), (0.027, 1, "+2.7%"), (-0.5, 0, "-50%")],
)
def test_signed_percent(x: float, decimals: int, text: str) -> None:
    assert signed_percent(x, decimals) == text


def test_signed_percent_spells_non_finite() -> None:
    assert signed_percent(math.inf) == "+Inf" and signed_percent(math.nan) == "NaN"


def test_a_near_miss_on_its_trend_reads_plus_zero(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    _run(tmp_path / "tb")
    out, db = analyzed(tmp_path / "tb", min_severity="minor")
    with open_store(db, read_only=True) as store:
        (near,) = store.query("SELECT * FROM near_misses WHERE step = ?", [KICK]).to_dicts()
        assert check_report(out, store, store.run_names()[0]) == []
    assert "no loss spike (loss +0.0% vs trend)" in near["detail"], near["detail"]
    assert "-0.0%" not in (out / "README.md").read_text()
