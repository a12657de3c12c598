"""Megatron-LM CI golden-values JSON: the string "nan" is no data, a numeric NaN is a value."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.base import sniff_format
from forensics.ingest.readers.megatron_golden import MegatronGoldenReader
from forensics.store import open_store

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "megatron_golden"
DICT_FORM = FIX / "golden_values_dev_dgx_h100.json"
READER = MegatronGoldenReader()


def series(frame: pl.DataFrame, raw_name: str) -> dict[int, float]:
    rows = frame.filter(pl.col("raw_name") == raw_name).sort("step")
    return dict(zip(rows["step"].to_list(), rows["value"].to_list(), strict=True))


def test_sniffed_as_golden() -> None:
    reader = sniff_format(DICT_FORM)
    assert reader is not None and reader.name == "megatron_golden"


def test_nan_string_is_no_data_numeric_nan_is_a_value() -> None:
    res = READER.read(DICT_FORM)
    loss = series(res.metrics, "lm loss")
    assert sorted(loss) == [1, 2, 3, 4, 5, 6, 7] and loss[4] == 13.5 and math.isnan(loss[6])
    assert series(res.metrics, "mtp_1 loss")[7] == 10.65
    assert set(res.metrics["raw_name"]) == {
        "lm loss", "mtp_1 loss", "num-zeros", "iteration-time", "mem-allocated-bytes",
    }  # fmt: skip
    assert len(res.warnings) == 1
    assert res.warnings[0].endswith(
        '3 "nan" entries hold no data: steps 8-10 after its last value at step 7'
    )


def test_list_form_uses_start_and_interval() -> None:
    res = READER.read(FIX / "golden_values_list_form.json")
    assert series(res.metrics, "lm loss") == {0: 10.9, 5: 10.2, 10: 9.8, 15: 9.5, 20: 9.3}


@pytest.mark.parametrize(
    ("values", "match"),
    [({"1": "oops"}, r"field 'lm loss\.values\.1': value 'oops'"), ({"x": 1.0}, "step 'x'")],
)
def test_bad_entries_are_errors(tmp_path: Path, values: dict[str, object], match: str) -> None:
    path = tmp_path / "golden.json"
    path.write_text(
        json.dumps({"lm loss": {"start_step": 1, "step_interval": 1, "values": values}})
    )
    with pytest.raises(InputError, match=match):
        READER.read(path)


def test_ingest_twice_adds_nothing(tmp_path: Path, tmp_db: Path) -> None:
    path = tmp_path / "gpt" / DICT_FORM.name
    path.parent.mkdir()
    shutil.copy(DICT_FORM, path)
    with open_store(tmp_db) as store:
        ingest(store, [path], run="gpt")
        ingest(store, [path], run="gpt")
        assert store.query("SELECT count(*) AS n FROM metrics")["n"][0] == 35
        assert store.metrics_long("gpt", ["loss"]).height == 7  # `lm loss` is the loss
        assert store.metrics_long("gpt", ["mtp_loss/1"]).height == 7
