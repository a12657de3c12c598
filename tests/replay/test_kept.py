"""Replay verdicts survive a cross-run re-detection that leaves their incident in place.

`forensics compare` (and analysing a folder into a --db that already holds runs) re-detects
every run of the store; replays of incidents found where they were must not be thrown away,
and the ones whose incident moved are dropped with a note saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forensics.analyze import AnalyzeOptions, analyze
from forensics.fleet import compare
from forensics.ingest import ingest
from forensics.store import open_store

SAMPLES = Path(__file__).resolve().parents[2] / "sample_logs"


def _state(db: Path, run: str) -> dict[str, Any]:
    with open_store(db, read_only=True) as store:
        inc = store.query(
            "SELECT incident_id, onset_step, cause, replay FROM incidents WHERE run_id = ?", [run]
        ).to_dicts()
        rep = store.query(
            "SELECT incident_id, probe, verdict, detail FROM replays WHERE run_id = ? "
            "ORDER BY incident_id, probe",
            [run],
        ).to_dicts()
    return {"incidents": inc, "replays": rep}


def _copy(db: Path, tmp_path: Path) -> Path:
    """A private copy of the replayed store (each test changes its own)."""
    path = tmp_path / "fleet.duckdb"
    path.write_bytes(db.read_bytes())
    return path


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("kept") / "fleet.duckdb"
    analyze(SAMPLES / "rare_tokens", db=db, run="rare", options=AnalyzeOptions(report=False))
    with open_store(db) as store:
        ingest(store, [SAMPLES / "clean"], run="clean")
    return db


def test_compare_keeps_the_replays_of_incidents_detected_in_place(
    replayed: Path, tmp_path: Path
) -> None:
    db = _copy(replayed, tmp_path)
    before = _state(db, "rare")
    assert before["replays"] and before["incidents"][0]["replay"] == "confirmed"
    with open_store(db) as store:
        fleet = compare(store)
    assert _state(db, "rare") == before
    assert not fleet.notes


def test_compare_says_which_replays_it_dropped(replayed: Path, tmp_path: Path) -> None:
    db = _copy(replayed, tmp_path)
    with open_store(db) as store:  # as if an older detection had put the onset elsewhere
        store.con.execute("UPDATE incidents SET onset_step = onset_step - 7 WHERE run_id = 'rare'")
        fleet = compare(store)
    after = _state(db, "rare")
    assert after["replays"] == [] and after["incidents"][0]["replay"] == "not_run"
    assert any("dropped" in n and "rare (1)" in n for n in fleet.notes), fleet.notes


def test_analyzing_a_folder_into_the_store_keeps_the_other_runs_replays(
    replayed: Path, tmp_path: Path
) -> None:
    db = _copy(replayed, tmp_path)
    before = _state(db, "rare")
    folder = tmp_path / "more"
    for name in ("clean", "data_corruption"):
        (folder / name).mkdir(parents=True)
        for f in ("metrics.jsonl", "config.json"):
            (folder / name / f).write_bytes((SAMPLES / name / f).read_bytes())
    res = analyze(folder, db=db, options=AnalyzeOptions(report=False, replay=False))
    assert len(res.runs) == 2
    assert _state(db, "rare") == before
