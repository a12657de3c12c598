"""Ingest pipeline: run naming, idempotence, several runs in one DB, atomic failure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from forensics.errors import InputError, UnknownFormatError
from forensics.ingest import ingest
from forensics.store import open_store


def _write_jsonl(path: Path, losses: list[float]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for i, loss in enumerate(losses):
            fh.write(json.dumps({"step": i, "loss": loss, "grad_norm": 0.5}) + "\n")
    return path


def test_run_folder_ingest_is_idempotent(tmp_path: Path, tmp_db: Path) -> None:
    run = tmp_path / "myrun"
    _write_jsonl(run / "metrics.jsonl", [3.0, 2.5, math.nan, 2.0])
    (run / "config.json").write_text(json.dumps({"optimizer": {"betas": [0.9, 0.95]}}))
    with open_store(tmp_db) as store:
        ingest(store, [run])
        first = store.metrics_long("myrun").height
        ingest(store, [run])
        assert store.metrics_long("myrun").height == first == 8
        assert store.run_names() == ["myrun"]
        assert store.run_config("myrun")["beta2"] == 0.95


def test_two_runs_share_one_db(tmp_path: Path, tmp_db: Path) -> None:
    a = _write_jsonl(tmp_path / "a" / "metrics.jsonl", [3.0, 2.0])
    b = _write_jsonl(tmp_path / "b" / "metrics.jsonl", [4.0, 3.0, 2.0])
    with open_store(tmp_db) as store:
        ingest(store, [a])
        ingest(store, [b])
        assert store.run_names() == ["a", "b"]
        assert store.metrics_frame("b")["loss"].to_list() == [4.0, 3.0, 2.0]


def test_failed_ingest_loses_nothing_already_stored(tmp_path: Path, tmp_db: Path) -> None:
    good = _write_jsonl(tmp_path / "r" / "metrics.jsonl", [3.0, 2.0])
    with open_store(tmp_db) as store:
        ingest(store, [good])
        good.write_text(
            '{"step": 0, "loss": 1.0}\n{"step": 1, "loss": \n{"step": 2, "loss": 1.0}\n'
        )
        with pytest.raises(InputError, match=r"metrics\.jsonl:2"):
            ingest(store, [good], run="r")
        assert store.metrics_frame("r")["loss"].to_list() == [3.0, 2.0]


def test_unknown_format_lists_what_was_tried(tmp_path: Path, tmp_db: Path) -> None:
    odd = tmp_path / "notes.xyz"
    odd.write_text("nothing numeric here\n")
    with open_store(tmp_db) as store, pytest.raises(UnknownFormatError, match="tried: .*jsonl"):
        ingest(store, [odd])
