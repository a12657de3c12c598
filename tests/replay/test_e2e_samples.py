"""End to end on every bundled sample run (sample_logs/<scenario>/ with truth.json), on CPU:
ingest -> detect -> replay, as `forensics analyze` does. Replay must confirm the injected
cause of the incident at the injected step and refute at least one wrong hypothesis; on the
clean run there is nothing to replay. Skipped until the simulator's sample runs exist.

Only the incident at the injected step is replayed, with a short counterfactual window, to
keep the whole module to well under a minute per scenario.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from replay_portability import departed, drifted, rows_of

from forensics.detect import detect
from forensics.ingest import ingest
from forensics.replay import replay_run
from forensics.store import Store, open_store

# FORENSICS_SAMPLES points the test at another folder of simulator runs (same layout).
SAMPLES = Path(
    os.environ.get("FORENSICS_SAMPLES", Path(__file__).resolve().parents[2] / "sample_logs")
)
SCENARIOS = sorted(p.parent.name for p in SAMPLES.glob("*/truth.json"))
K = 16


def truth_incidents(name: str) -> list[dict[str, Any]]:
    """The injected incidents of a scenario: [{cause, onset}] (none for a clean run)."""
    t = json.loads((SAMPLES / name / "truth.json").read_text())
    items = t.get("expected", t.get("incidents", [t] if t.get("cause") else []))
    out = []
    for it in items:
        cause = it.get("expected_cause", it.get("cause"))
        if cause in (None, "clean", "none"):
            continue
        peaks = it.get("peaks") or [it.get("peak", it.get("peak_step"))]
        peaks = [p["step"] if isinstance(p, dict) else p for p in peaks if p is not None]
        onset = it.get("onset", it.get("onset_step", it.get("step", peaks[0] if peaks else None)))
        out.append({"cause": cause, "onset": int(onset)})
    return out


def _incident_for(store: Store, run: str, onset: int) -> dict[str, Any]:
    frame = store.query(
        "SELECT incident_id, onset_step, peak_step FROM incidents WHERE run_id = ? "
        "ORDER BY abs(onset_step - ?) LIMIT 1",
        [run, onset],
    )
    assert frame.height, f"{run}: detection found no incident (injected at step {onset})"
    return frame.to_dicts()[0]


PARAMS: list[str | None] = [*SCENARIOS] or [None]


@pytest.fixture(scope="module", params=PARAMS)
def analyzed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    name = request.param
    if name is None:
        pytest.skip(f"no sample runs yet: {SAMPLES} has no <scenario>/truth.json")
    db = tmp_path_factory.mktemp(name) / "runs.duckdb"
    store = open_store(db)
    ingest(store, [SAMPLES / name], run=name)
    detect(store, name)
    truth = truth_incidents(name)
    replayed: dict[int, list[Any]] = {}
    for t in truth:
        inc = _incident_for(store, name, t["onset"])
        replayed[inc["incident_id"]] = replay_run(
            store, name, incident_id=inc["incident_id"], device="cpu", k=K
        )
    yield name, store, truth, replayed
    store.close()


def test_injected_cause_is_confirmed_by_replay(analyzed: Any) -> None:
    name, store, truth, replayed = analyzed
    if not truth:
        incidents = store.query("SELECT * FROM incidents WHERE run_id = ?", [name])
        assert incidents.height == 0, f"{name}: clean run has incidents"
        assert replay_run(store, name, device="cpu", k=K) == []
        return
    for t in truth:
        inc = _incident_for(store, name, t["onset"])
        rows = replayed[inc["incident_id"]]
        verdicts = {r.hypothesis: r.verdict for r in rows}
        row = store.query(
            "SELECT cause, replay FROM incidents WHERE run_id = ? AND incident_id = ?",
            [name, inc["incident_id"]],
        ).to_dicts()[0]
        if departed(name, rows_of(rows)):  # another CPU's chaotic run (replay_portability)
            assert all(drifted(r.probe, r.verdict, r.detail, r.numbers) for r in rows if
                       r.verdict == "confirmed"), (name, rows_of(rows))  # fmt: skip
        assert verdicts.get(t["cause"]) == "confirmed", (name, [(r.probe, r.verdict, r.detail)
                                                              for r in rows])  # fmt: skip
        assert row == {"cause": t["cause"], "replay": "confirmed"}, (name, row)


def test_at_least_one_wrong_cause_is_refuted(analyzed: Any) -> None:
    name, store, truth, replayed = analyzed
    if not truth:
        pytest.skip("clean run: nothing replayed")
    for t in truth:
        inc = _incident_for(store, name, t["onset"])
        rows = replayed[inc["incident_id"]]
        wrong = [r for r in rows if r.hypothesis not in (t["cause"], "reproduction")]
        assert any(r.verdict == "refuted" for r in wrong), (name, [(r.probe, r.verdict)
                                                                   for r in rows])  # fmt: skip


def test_replay_reproduces_the_logged_run(analyzed: Any) -> None:
    name, store, truth, replayed = analyzed
    if not truth:
        pytest.skip("clean run: nothing replayed")
    for rows in replayed.values():
        if departed(name, rows_of(rows)):
            continue  # said so, with the first mismatching step (replay_portability.py)
        repro = next(r for r in rows if r.probe == "reproduce")
        hw = next(r for r in rows if r.probe == "hardware")
        # A faithful replay, or one whose only departure is explained by a hardware fault.
        assert repro.verdict == "confirmed" or hw.verdict == "confirmed", (name, repro.detail)
