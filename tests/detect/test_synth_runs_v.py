"""The third labelled generator (bench/synth_runs_v.py): deterministic per seed, its truth is
what bench/accuracy.py's score() reads, and one run of each writer ingests."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bench import synth_runs_v as V  # type: ignore[import-not-found]
from forensics.ingest import ingest
from forensics.store import open_store

SEEDS = range(40)
TYPES = {"recoverable", "lingering", "divergent"}
EXPECTED = {*V.CAUSES, "batch_driven", "unknown"}


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True))


def test_make_run_is_deterministic_per_seed() -> None:
    for seed in (0, 7, 123):
        a, b = V.make_run(seed), V.make_run(seed)
        assert a.name == b.name and a.writer == b.writer and a.segments == b.segments
        assert _same(a.loss, b.loss) and _same(a.grad_norm, b.grad_norm)
        assert np.array_equal(a.logged, b.logged)
        assert a.truth == b.truth and a.faint == b.faint and a.val == b.val
    assert not _same(V.make_run(1).loss[:50], V.make_run(2).loss[:50])


def test_truth_is_well_formed() -> None:
    clean = 0
    for seed in SEEDS:
        run = V.make_run(seed)
        assert 300 <= run.n_steps <= 5000 and 1 <= run.interval <= 20
        assert run.writer in V.WRITERS
        logged = set(run.logged.tolist())
        if run.name.endswith("-clean"):
            clean += 1
            assert not run.truth and not run.faint
        for t in run.truth + run.faint:
            assert {"cause", "expected_cause", "type", "onset", "peaks", "end"} <= set(t)
            assert t["cause"] in V.CAUSES and t["expected_cause"] in EXPECTED
            assert t["type"] in TYPES
            assert t["peaks"] == sorted(t["peaks"]) and t["peaks"][0] >= t["onset"] - run.interval
        for t in run.truth:
            assert set(t["peaks"]) <= logged, (seed, t)
            if t["type"] == "recoverable":
                assert t["end"] is not None and t["end"] >= max(t["peaks"])
                assert t["end"] - max(t["peaks"]) <= V.WINDOW + run.interval
            else:
                assert t["end"] is None
        # incidents come in step order, the divergent one last
        onsets = [t["onset"] for t in run.truth]
        assert onsets == sorted(onsets)
        assert all(t["type"] != "divergent" for t in run.truth[:-1])
    assert 0 < clean < len(SEEDS)


def _one_per_writer() -> dict[str, V.VRun]:
    runs: dict[str, V.VRun] = {}
    for seed in range(200):
        run = V.make_run(seed)
        runs.setdefault(run.writer, run)
        if len(runs) == len(V.WRITERS):
            return runs
    raise AssertionError(f"no run for {set(V.WRITERS) - set(runs)}")


@pytest.mark.parametrize("writer", V.WRITERS)
def test_each_writer_ingests(writer: str, tmp_path: Path) -> None:
    run = _one_per_writer()[writer]
    folder = V.write_run(run, tmp_path)
    with open_store(tmp_path / "x.duckdb") as store:
        ingest(store, [folder], run=run.name)
        got = store.con.execute(
            "select metric, count(*) from metrics where run_id = ? group by metric", [run.name]
        ).fetchall()
        loss_steps = {
            s
            for (s,) in store.con.execute(
                "select step from metrics where run_id = ? and metric = 'loss'", [run.name]
            ).fetchall()
        }
    metrics = dict(got)
    shown = [r for r in V.logged_rows(run) if "loss" in r]
    finite = [r for r in shown if r["loss"] is not None and math.isfinite(r["loss"])]
    assert loss_steps <= set(run.logged.tolist())
    assert len(loss_steps) >= len(finite), (writer, metrics)
    assert metrics.get("val_loss", 0) >= 1
    if run.writer_opts["grad_logged"] and run.writer_opts["grad_name"] is None:
        assert metrics.get("grad_norm", 0) >= len(finite) // 2
