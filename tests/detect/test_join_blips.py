"""Grouping (detector._joins): one-point blips that each healed before the next began are
separate incidents; a spike that decayed over several points keeps its echo.

ScaleShortcuts 4897c987 spikes for one step at 18444 and at 18527 (+ a +15% pair at
18470-18471 between them), the loss back on its trend at the next point each time. They were
one incident with three peaks (its 2-point peak then made the batch-driven rule's `against`
hold: the run's one "unknown"). A stale second moment's echo or a too-high LR's recurring
spike comes after a spike that decayed over several points, and stays its incident's peak.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from detect_helpers import curve, spike  # type: ignore[import-not-found]

from forensics.detect import Detection, Incident, detect
from forensics.ingest import ingest
from forensics.store import open_store

SHORTCUTS = "KellerJordan__modded-nanogpt/records__track_1_short__2024-11-10_ScaleShortcuts*"


def _detect_file(path: Path, tmp: Path) -> Detection:
    with open_store(tmp / "x.duckdb") as store:
        ingest(store, [path], run="r")
        return detect(store, "r")[0]


def _at(det: Detection, step: int) -> Incident:
    (inc,) = [i for i in det.incidents if any(s == step for s, _ in i.peaks)]
    return inc


def test_scaleshortcuts_blips_at_18444_and_18527_are_two_incidents(
    real_logs: Path, tmp_path: Path
) -> None:
    (path,) = real_logs.glob(SHORTCUTS)
    det = _detect_file(path, tmp_path)
    first, second = _at(det, 18444), _at(det, 18527)
    assert first is not second
    for inc, step in ((first, 18444), (second, 18527)):
        assert [s for s, _ in inc.peaks] == [step] and inc.onset_step == step
        assert inc.type == "recoverable" and inc.end_step == step + 1
        assert inc.cause == "batch_driven" and inc.confidence >= 0.6
    # the documented 946/947 pair: 919 and 947 each healed at the next step
    assert _at(det, 919) is not _at(det, 947)
    assert all(i.cause != "unknown" for i in det.incidents)


def _write_tb(folder: Path, loss: np.ndarray) -> Path:
    """A loss-only run written by torch's SummaryWriter, steps 1..n."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(folder)) as w:
        for step, v in enumerate(loss, 1):
            w.add_scalar("train/loss", float(v), step)
    return folder


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Detection]:
    """Two runs through the real writer and ingest: three one-point blips 30 and 60 steps
    apart; a spike decaying over ~30 steps (back on its trend by ~2035) with an echo at
    2060, inside the echo window."""
    tmp = tmp_path_factory.mktemp("join")
    blips = curve(3000, seed=4)
    for at in (1999, 2029, 2089):
        blips[at] *= 1.5
    echo = spike(spike(curve(3000, seed=5), 1999, 0.4, 10.0), 2059, 0.3, 3.0)
    out = {}
    for name, loss in (("blips", blips), ("echo", echo)):
        out[name] = _detect_file(_write_tb(tmp / name, loss), tmp / name)
    return out


def test_one_point_blips_each_healed_are_separate_incidents(written) -> None:  # type: ignore[no-untyped-def]
    det = written["blips"]
    assert [[s for s, _ in i.peaks] for i in det.incidents] == [[2000], [2030], [2090]]
    assert all(i.type == "recoverable" and i.end_step == i.peak_step + 1 for i in det.incidents)


def test_a_decaying_spikes_echo_stays_one_incident(written) -> None:  # type: ignore[no-untyped-def]
    (inc,) = written["echo"].incidents
    assert [s for s, _ in inc.peaks] == [2000, 2060]
    assert inc.type == "recoverable" and inc.end_step is not None and inc.end_step > 2060
