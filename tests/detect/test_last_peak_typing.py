"""An incident is typed from its last peak, not its highest: the loss back between two peaks
is not back for good.

Found by reading the pages of third-generator runs: a corrupt loss of 93,935 at step 1565,
back at 1566, another of 962 at 1568 were one incident whose page said "step 1568 (peak
962.2; back at step 1566)", steps lost "(1566 - 1565) + (1566 - 1568)", "back for good at
step 1566". The new incident had been typed after its highest peak. The run is written by
torch's SummaryWriter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

BAD = {1565: 93935.3, 1568: 962.2}


def _run(folder: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(11)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, 2001):
            loss = 4.0 * (step / 10 + 1) ** -0.08 * math.exp(rng.normal(0, 0.004))
            w.add_scalar("train/loss", BAD.get(step, loss), step)


def test_a_second_corrupt_value_three_steps_later_is_recovered_from_after_it(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    _run(tmp_path / "run")
    out, db = analyzed(tmp_path / "run", min_severity="minor")
    with open_store(db, read_only=True) as store:
        rows = store.query("SELECT * FROM incidents ORDER BY onset_step").to_dicts()
    (inc,) = [r for r in rows if r["onset_step"] <= 1565 <= (r["recovery_step"] or 10**9)]
    peaks = json.loads(inc["peaks"])
    assert [p["step"] for p in peaks] == [1565, 1568]
    assert inc["recovery_step"] > 1568
    assert all(p["back"] is None or p["back"] > p["from"] for p in peaks)
    stretches = {(p["from"], p["back"]) for p in peaks}
    assert inc["steps_lost"] == sum(b - a for a, b in stretches)
    page = (out / "postmortems" / "spike-01.md").read_text()
    assert f"back for good at step {inc['recovery_step']}" in page
