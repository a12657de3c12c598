"""Nothing stored twice or lost: source identity, one value per (run, step, metric), --db."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from forensics.store import open_store
from forensics.store.blocks import block_from_columns
from tests.hardening.conftest import assert_one_line_error, cli, ingest_paths, metrics, table


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(folder: Path, steps: range) -> Path:
    return _jsonl(folder / "metrics.jsonl", [{"step": s, "loss": 2.0 + s / 1000} for s in steps])


def test_reingest_by_other_spellings_stores_each_row_once(tmp_path: Path, db: Path) -> None:
    run = tmp_path / "runs" / "a"
    _run(run, range(50))
    (tmp_path / "link").symlink_to(tmp_path / "runs")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for spelling in (run, Path("runs/a"), tmp_path / "link" / "a", Path("runs/../runs/a")):
            ingest_paths(db, spelling)
    finally:
        os.chdir(cwd)
    got = metrics(db)
    assert got.height == 50
    assert got["source"].unique().to_list() == [str((run / "metrics.jsonl").resolve())]


def test_copy_of_a_log_is_stored_once_with_a_warning(tmp_path: Path, db: Path) -> None:
    run = tmp_path / "a"
    log = _run(run, range(30))
    (run / "metrics (copy).jsonl").write_bytes(log.read_bytes())
    (summary,) = ingest_paths(db, run)
    assert metrics(db).height == 30
    notes = [w for s in summary.sources for w in s.warnings]  # type: ignore[attr-defined]
    assert any("same content as" in w for w in notes), notes


def test_resumed_run_over_two_files_keeps_the_later_segment(tmp_path: Path, db: Path) -> None:
    run = tmp_path / "resumed"
    _jsonl(run / "part1" / "metrics.jsonl", [{"step": s, "loss": 1.0} for s in range(0, 1000)])
    _jsonl(run / "part2" / "metrics.jsonl", [{"step": s, "loss": 2.0} for s in range(961, 2000)])
    (summary,) = ingest_paths(db, run)
    got = metrics(db, "metric = 'loss'")
    assert got.height == 2000  # one value per step, none lost
    assert got.filter(pl.col("step").is_between(961, 999))["value"].unique().to_list() == [2.0]
    assert got.filter(pl.col("step") < 961)["value"].unique().to_list() == [1.0]
    lost = table(db, "SELECT count(*) AS n, min(rule) AS rule FROM conflicts")
    assert lost.row(0) == (39, "later resume segment")
    notes = [w for s in summary.sources for w in s.warnings]  # type: ignore[attr-defined]
    assert any("39 values at steps 961..999" in w for w in notes), notes


def test_canonical_name_beats_its_alias_in_one_record(tmp_path: Path, db: Path) -> None:
    log = _jsonl(tmp_path / "r" / "metrics.jsonl", [{"step": s, "loss": 2, "train/loss": 5}
                                                    for s in range(10)])  # fmt: skip
    ingest_paths(db, log)
    got = metrics(db, "metric = 'loss'")
    assert got["value"].to_list() == [2.0] * 10
    assert table(db, "SELECT DISTINCT raw_name, rule FROM conflicts").rows() == [
        ("train/loss", "canonical name")
    ]


def test_jsonl_beside_csv_keeps_one_value_and_records_the_other(tmp_path: Path, db: Path) -> None:
    run = tmp_path / "r"
    _run(run, range(20))
    (run / "log.csv").write_text("step,loss\n" + "".join(f"{s},{9.0}\n" for s in range(20)))
    ingest_paths(db, run)
    assert metrics(db, "metric = 'loss'").height == 20
    assert table(db, "SELECT count(*) FROM conflicts").item() == 20
    # idempotent: a second ingest decides the same, stores nothing twice, loses nothing
    ingest_paths(db, run)
    assert metrics(db, "metric = 'loss'").height == 20
    assert table(db, "SELECT count(*) FROM conflicts").item() == 20


def test_other_metrics_of_a_row_survive_when_one_value_loses(tmp_path: Path, db: Path) -> None:
    run = tmp_path / "r"
    _jsonl(run / "a.jsonl", [{"step": s, "loss": 1.0, "lr": 0.1} for s in range(10)])
    _jsonl(run / "b.jsonl", [{"step": s, "loss": 2.0} for s in range(5, 15)])
    ingest_paths(db, run, run="r")
    got = metrics(db)
    assert got.filter(pl.col("metric") == "lr").height == 10
    assert got.filter(pl.col("metric") == "loss").height == 15


def test_ten_thousand_sparse_metrics_round_trip(tmp_path: Path, db: Path) -> None:
    """The signature path (wide blocks): every value where it was, NaN kept."""
    rows = [{"step": i, f"m{i % 2000}": float(i)} for i in range(4000)]
    rows[7]["m7"] = float("nan")
    log = tmp_path / "sparse.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest_paths(db, log)
    got = metrics(db)
    assert got.height == 4000 and got["metric"].n_unique() == 2000
    by_step = dict(zip(got["step"].to_list(), got["value"].to_list(), strict=True))
    assert np.isnan(by_step.pop(7))
    assert by_step == {i: float(i) for i in range(4000) if i != 7}


def test_wide_block_groups_columns_by_their_null_rows(db: Path) -> None:
    rng = np.random.default_rng(0)
    n, width = 300, 80
    masks = [rng.random(n) < p for p in rng.choice([0.2, 0.5, 1.0], width)]
    cols = [pl.Series(np.where(m, rng.normal(size=n), np.nan)) for m in masks]
    cols = [c.fill_nan(None) for c in cols]
    cols[3] = cols[3].set(pl.Series([True] + [False] * (n - 1)), float("inf"))
    block = block_from_columns(pl.Series(range(n)), None, cols, [f"m{i}" for i in range(width)])
    with open_store(db) as store:
        stored = store.insert_metric_block("r", "s", block, block.names)
        got = store.query("SELECT step, metric, value FROM metrics")
    expect = sum(int(c.is_not_null().sum()) for c in cols)
    assert stored == expect == got.height
    for i in (0, 3, 41):
        series = got.filter(pl.col("metric") == f"m{i}").sort("step")
        want = cols[i].to_frame("v").with_row_index("step").drop_nulls()
        assert series["step"].to_list() == want["step"].cast(pl.Int64).to_list()
        assert series["value"].to_list() == want["v"].to_list()


def test_db_that_is_not_duckdb_is_refused(tmp_path: Path) -> None:
    old = tmp_path / "old.csv"
    old.write_text("a,b\n1,2\n")
    log = _run(tmp_path / "r", range(5))
    code, out = cli("ingest", str(log), "--db", str(old))
    assert_one_line_error(code, out, "old.csv", "not a DuckDB")
    assert old.read_text() == "a,b\n1,2\n"
    code, out = cli("ingest", str(log), "--db", str(tmp_path))
    assert_one_line_error(code, out, "folder")


def test_old_schema_database_gains_the_new_columns(tmp_path: Path) -> None:
    import duckdb

    db = tmp_path / "v2.duckdb"
    con = duckdb.connect(str(db))
    con.execute(
        "CREATE TABLE sources (run_id VARCHAR NOT NULL, path VARCHAR NOT NULL, kind VARCHAR "
        "NOT NULL, format VARCHAR, bytes BIGINT, rows BIGINT, warnings JSON, ingested_at "
        "TIMESTAMP, PRIMARY KEY (run_id, path))"
    )
    con.close()
    ingest_paths(db, _run(tmp_path / "r", range(5)))
    assert table(db, "SELECT count(*) FROM source_fingerprints").item() == 1


def test_a_loop_link_and_a_linked_copy_store_each_file_once(tmp_path: Path, db: Path) -> None:
    run = tmp_path / "r"
    _run(run, range(40))
    (run / "loop").symlink_to(run)  # `loop -> .`: the walk meets every file again
    (run / "again.jsonl").symlink_to(run / "metrics.jsonl")
    ingest_paths(db, run)
    assert metrics(db).height == 40
    assert table(db, "SELECT count(*) FROM sources WHERE kind = 'metrics'").item() == 1


def test_structured_source_beats_a_text_log(tmp_path: Path, db: Path) -> None:
    run = tmp_path / "r"
    _jsonl(run / "metrics.jsonl", [{"step": s, "loss": 2.0} for s in range(1, 11)])
    (run / "main.log").write_text(  # llm.c's main.log
        "".join(f"s:{s} trl:9.0 lr:0.000001 norm:15.3\n" for s in range(1, 11))
    )
    ingest_paths(db, run)
    assert metrics(db, "metric = 'loss'")["value"].unique().to_list() == [2.0]
    assert table(db, "SELECT DISTINCT rule FROM conflicts WHERE metric = 'loss'").rows() == [
        ("structured source",)
    ]


def test_each_file_is_hashed_once_per_ingest(
    tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder's metric logs are fingerprinted by discovery (copies) and again by identity:
    one read of each file per ingest (a 250 MB log costs ~0.2 s to hash), and a file
    rewritten before the next ingest is read again."""
    from forensics.ingest import identity

    calls: list[str] = []
    digest_of = identity._digest_of
    monkeypatch.setattr(
        identity, "_digest_of", lambda path, size: calls.append(path.name) or digest_of(path, size)
    )
    run = tmp_path / "run"
    run.mkdir()
    for name in ("metrics.jsonl", "copy.jsonl"):
        (run / name).write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n')
    ingest_paths(db, run)
    assert sorted(calls) == ["copy.jsonl", "metrics.jsonl"]
    ingest_paths(db, run)
    assert len(calls) == 4
