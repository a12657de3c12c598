"""JSONL metric logs: values, steps, NaN/Inf tokens, torn and malformed lines, both read paths."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.base import ReadResult, read_head, sniff_format
from forensics.ingest.readers.jsonl import JsonlReader, read_jsonl
from forensics.store import open_store

READER = JsonlReader()
BOTH_PATHS = pytest.mark.parametrize("exact", [True, False], ids=["python", "duckdb"])


def write_jsonl(path: Path, records: list[dict[str, Any]], tail: str = "") -> Path:
    """Written by Python's json module, which emits bare NaN / Infinity / -Infinity."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def series(long: pl.DataFrame, raw_name: str) -> dict[int, float]:
    rows = long.filter(pl.col("raw_name") == raw_name).sort("step")
    return dict(zip(rows["step"].to_list(), rows["value"].to_list(), strict=True))


def canonical_rows(long: pl.DataFrame) -> list[tuple[Any, ...]]:
    """Rows in a fixed order with NaN made comparable (NaN != NaN)."""
    rows = long.select("step", "raw_name", "value", "wall_time").sort("raw_name", "step").rows()
    return [
        tuple("NaN" if isinstance(x, float) and math.isnan(x) else x for x in row) for row in rows
    ]


RECORDS: list[dict[str, Any]] = [
    {"step": 0, "loss": 3.5, "grad_norm": 1.0, "overflow": False, "phase": "train"},
    {"step": 1, "loss": math.nan, "grad_norm": math.inf, "overflow": True, "phase": "train"},
    {"step": 2, "loss": 2.5, "grad_norm": -math.inf, "optim": {"lr": 1e-4, "beta2": 0.95}},
    {"step": 3, "loss": None, "grad_norm": "nan", "tags": [1, 2], "note": "fine"},
]


@BOTH_PATHS
def test_values_nan_inf_nested_bool_string(tmp_path: Path, exact: bool) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", RECORDS)
    long, warnings = read_jsonl(path, exact=exact)
    assert warnings == []
    assert series(long, "loss")[0] == 3.5 and math.isnan(series(long, "loss")[1])
    assert 3 not in series(long, "loss")  # null is no data, not NaN
    grad = series(long, "grad_norm")
    assert grad[1] == math.inf and grad[2] == -math.inf and math.isnan(grad[3])  # "nan" text
    assert series(long, "overflow") == {0: 0.0, 1: 1.0}
    assert series(long, "optim/lr") == {2: 1e-4} and series(long, "optim/beta2") == {2: 0.95}
    names = set(long["raw_name"].to_list())
    assert not names & {"phase", "tags", "note", "step"}


def test_fast_and_exact_paths_agree_on_a_mixed_file(tmp_path: Path) -> None:
    records = [
        {"global_step": i, "loss": 2.0 + i / 7, "lr": 3e-4 * i, "timestamp": 1.7e12 + i * 10}
        for i in range(300)
    ]
    records[100]["loss"] = math.nan
    records[200]["flag"] = True
    path = write_jsonl(tmp_path / "m.jsonl", records)
    exact, _ = read_jsonl(path, exact=True)
    fast, _ = read_jsonl(path, exact=False)
    assert canonical_rows(exact) == canonical_rows(fast)
    assert exact.height == 300 * 2 + 1
    assert series(exact, "lr")[10] == pytest.approx(3e-3)
    # epoch milliseconds become seconds
    assert exact.filter(pl.col("step") == 1)["wall_time"][0] == pytest.approx(1.7e9 + 0.01)


def test_fast_path_keeps_keys_and_floats_duckdb_sampling_would_lose(tmp_path: Path) -> None:
    """DuckDB samples 20,480 lines for its schema: a key first seen later would be dropped
    and an integer column that turns float later would be rounded. We must keep both."""
    records: list[dict[str, Any]] = [{"step": i, "tokens": 1024} for i in range(25_000)]
    records[24_000]["tokens"] = 1536.5
    records[24_500]["val_loss"] = 2.25
    path = write_jsonl(tmp_path / "late.jsonl", records)
    long, _ = read_jsonl(path, exact=False)
    assert series(long, "tokens")[24_000] == 1536.5
    assert series(long, "val_loss") == {24_500: 2.25}


@pytest.mark.parametrize(
    ("record", "key"),
    [
        ({"_step": 7, "trainer/global_step": 3, "loss": 1.0}, "trainer/global_step"),
        ({"trainer": {"global_step": 3}, "_step": 7, "loss": 1.0}, "trainer/global_step"),
        ({"step": 3, "iteration": 12, "loss": 1.0}, "step"),
        ({"iter": 3, "_step": 7, "loss": 1.0}, "iter"),
        ({"_step": 3, "loss": 1.0}, "_step"),
        # the HF Trainer's W&B history: `_step` counts log calls, `train/global_step` steps
        ({"_step": 7, "train/global_step": 3, "loss": 1.0}, "train/global_step"),
    ],
)
def test_step_key_preference(tmp_path: Path, record: dict[str, Any], key: str) -> None:
    long, _ = read_jsonl(write_jsonl(tmp_path / "m.jsonl", [record]), exact=True)
    assert long["step"].to_list() == [3]
    assert long["raw_name"].to_list() == ["loss"]  # step keys are never metrics


@BOTH_PATHS
def test_wall_time_sources(tmp_path: Path, exact: bool) -> None:
    iso = write_jsonl(
        tmp_path / "iso.jsonl", [{"step": 1, "loss": 1.0, "time": "2024-05-01T00:00:10+00:00"}]
    )
    long, _ = read_jsonl(iso, exact=exact)
    assert long["wall_time"][0] == 1714521610.0
    # `time` holding a duration is a metric, not a clock reading
    dur = write_jsonl(tmp_path / "dur.jsonl", [{"step": 1, "loss": 1.0, "time": 0.31}])
    long, _ = read_jsonl(dur, exact=exact)
    assert series(long, "time") == {1: 0.31} and long["wall_time"].null_count() == 2


@BOTH_PATHS
def test_torn_last_line_keeps_the_good_part(tmp_path: Path, exact: bool) -> None:
    records = [{"step": i, "loss": 1.0 / (i + 1)} for i in range(5)]
    path = write_jsonl(tmp_path / "m.jsonl", records, tail='{"step": 5, "loss": 0.1')
    long, warnings = read_jsonl(path, exact=exact)
    assert sorted(series(long, "loss")) == [0, 1, 2, 3, 4]
    assert len(warnings) == 1 and warnings[0].startswith("line 6:") and "cut off" in warnings[0]


@BOTH_PATHS
def test_records_without_a_step_are_skipped_with_a_warning(tmp_path: Path, exact: bool) -> None:
    records = [{"event": "start", "host": "n01"}] + [{"step": i, "loss": 1.0} for i in range(3)]
    long, warnings = read_jsonl(write_jsonl(tmp_path / "m.jsonl", records), exact=exact)
    assert series(long, "loss") == {0: 1.0, 1: 1.0, 2: 1.0}
    assert warnings == ["1 records without a 'step' value were skipped"]


@BOTH_PATHS
def test_malformed_middle_line_names_file_and_line(tmp_path: Path, exact: bool) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 1.0,,}\n{"step": 2, "loss": 1}\n'
    )
    with pytest.raises(InputError, match=r"m\.jsonl:2: malformed JSON .*\(expected one JSON"):
        read_jsonl(path, exact=exact)


@BOTH_PATHS
@pytest.mark.parametrize(
    ("line", "problem"),
    [('{"step": 1.5, "loss": 1}', "step 1.5 is not an integer"), ("[1, 2]", "a JSON list")],
)
def test_bad_record_is_an_error(tmp_path: Path, exact: bool, line: str, problem: str) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0, "loss": 1.0}\n' + line + '\n{"step": 2, "loss": 1.0}\n')
    with pytest.raises(InputError, match=rf":2: .*{problem}"):
        read_jsonl(path, exact=exact)


def test_sniff_needs_a_step_key(tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "a.log", [{"iteration": 1, "lm loss": 2.0}])
    assert READER.sniff(good, read_head(good))
    no_step = write_jsonl(tmp_path / "b.jsonl", [{"loss": 2.0}])
    assert not READER.sniff(no_step, read_head(no_step))
    one_line_golden = tmp_path / "golden.json"
    one_line_golden.write_text(json.dumps({"lm loss": {"start_step": 1, "values": {"1": 2.0}}}))
    reader = sniff_format(one_line_golden)
    assert reader is not None and reader.name == "megatron_golden"


def test_ingest_twice_adds_nothing(tmp_path: Path, tmp_db: Path) -> None:
    path = write_jsonl(tmp_path / "run1" / "metrics.jsonl", RECORDS)
    with open_store(tmp_db) as store:
        ingest(store, [path])
        first = store.query("SELECT count(*) AS n FROM metrics")["n"][0]
        ingest(store, [path])
        assert store.query("SELECT count(*) AS n FROM metrics")["n"][0] == first == 11
        loss = store.metrics_long("run1", ["loss"])
        assert loss["step"].to_list() == [0, 1, 2] and math.isnan(loss["value"][1])
        assert store.query("SELECT format FROM runs")["format"].to_list() == ["jsonl"]


# ----- properties -------------------------------------------------------------------------

_finite_or_not = st.floats(allow_nan=True, allow_infinity=True, width=64)
_metric_names = st.sampled_from(["loss", "grad_norm", "lr", "train/acc", "eval loss"])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.dictionaries(_metric_names, _finite_or_not, min_size=1), min_size=1, max_size=20),
    st.booleans(),
)
def test_property_what_json_writes_is_read_back(
    tmp_path: Path, rows: list[dict[str, float]], exact: bool
) -> None:
    records = [{"step": i, **row} for i, row in enumerate(rows)]
    path = write_jsonl(tmp_path / "p.jsonl", records)
    long, _ = read_jsonl(path, exact=exact)
    expected = sorted(
        (name, i, "NaN" if math.isnan(v) else v)
        for i, row in enumerate(rows)
        for name, v in row.items()
    )
    got = sorted(
        (r[1], r[0], "NaN" if math.isnan(r[2]) else r[2])
        for r in long.select("step", "raw_name", "value").rows()
    )
    assert got == expected


_json_ish = st.one_of(
    st.text(alphabet='{}[]":,0123456789.eE-+ NaInfitysrulfx\\\x00é', max_size=40),
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    ).map(json.dumps),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(_json_ish, min_size=1, max_size=6), st.booleans())
def test_property_garbage_gives_input_error_never_a_traceback(
    tmp_path: Path, lines: list[str], exact: bool
) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text('{"step": 0, "loss": 1.0}\n' + "\n".join(lines) + '\n{"step": 9, "loss": 2}\n')
    try:
        result = READER.read(path) if exact else ReadResult(read_jsonl(path, exact=False)[0])
    except InputError:
        return
    assert result.metrics["step"].null_count() == 0


def test_torchtitan_and_olmo_metric_names(tmp_path: Path) -> None:
    # torchtitan's `loss_metrics/global_avg_loss` is its loss (before: "0 finite points" and
    # the run's NaN listed among values the checks do not read); OLMo's
    # `optim/learning_rate_group0` is the LR (before: "not logged: lr")
    path = write_jsonl(
        tmp_path / "metrics.jsonl",
        [
            {"step": 1, "loss_metrics/global_avg_loss": 10.2, "loss_metrics/global_max_loss": 11.0},
            {
                "step": 2,
                "loss_metrics/global_avg_loss": math.nan,
                "optim/learning_rate_group0": 3e-4,
            },
        ],
    )
    with open_store(tmp_path / "t.duckdb") as store:
        (summary,) = ingest(store, [path])
        long = store.metrics_long(summary.run)
    got = {(r[1], r[0]): r[2] for r in long.iter_rows()}
    assert got[("loss", 1)] == 10.2 and math.isnan(got[("loss", 2)])
    assert got[("lr", 2)] == 3e-4
    assert ("loss_metrics/global_max_loss", 1) in got  # the max is not the loss
