"""Logs that count epochs and no steps (Keras' CSVLogger, per-epoch JSONL) are numbered
1, 2, ... in file order with a warning, like a text log without a step counter (issue 11).
They used to be "format not recognised"."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from forensics.ingest import ingest
from forensics.store import open_store

LOSSES = [3.0 / (e + 1) if e != 4 else math.nan for e in range(40)]


def _jsonl(path: Path, repeat: int = 1) -> Path:
    with path.open("w") as fh:
        for e, loss in enumerate(LOSSES * repeat):
            fh.write(json.dumps({"epoch": e, "loss": loss, "lr": 1e-3, "note": "x" * 60}) + "\n")
    return path


def _keras_csv(path: Path) -> Path:
    with path.open("w", newline="") as fh:  # the columns Keras' CSVLogger writes
        writer = csv.writer(fh)
        writer.writerow(["epoch", "loss", "val_loss"])
        for e, loss in enumerate(LOSSES):
            writer.writerow([e, loss, loss + 0.1])
    return path


@pytest.mark.parametrize(
    ("name", "write"),
    [
        ("log.jsonl", _jsonl),
        ("big.jsonl", lambda p: _jsonl(p, repeat=300)),  # > 1 MB: DuckDB's path declines
        ("training.log.csv", _keras_csv),
    ],
)
def test_epoch_only_log_is_numbered_with_a_warning(
    tmp_path: Path, tmp_db: Path, name: str, write: object
) -> None:
    path = write(tmp_path / name)  # type: ignore[operator]
    assert name != "big.jsonl" or path.stat().st_size > 1 << 20
    with open_store(tmp_db) as store:
        [summary] = ingest(store, [path], run="r")
        loss = store.metrics_long("r", ["loss"])
        epoch = store.metrics_long("r", ["epoch"])
    n = len(LOSSES) * (300 if name == "big.jsonl" else 1)
    [src] = summary.sources
    assert any("numbered 1, 2, ... in file order" in w for w in src.warnings)
    assert loss["step"].to_list() == list(range(1, n + 1))  # nothing dropped or repeated
    assert loss["value"].is_nan().sum() == n // len(LOSSES)  # NaN kept
    assert epoch["value"].to_list()[: len(LOSSES)] == list(range(len(LOSSES)))


def test_a_step_key_still_wins_over_the_epoch(tmp_path: Path, tmp_db: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"epoch": 0, "step": 10 * s, "loss": 1.0}) + "\n"
                            for s in range(5)))  # fmt: skip
    with open_store(tmp_db) as store:
        [summary] = ingest(store, [path], run="r")
        assert store.metrics_long("r", ["loss"])["step"].to_list() == [0, 10, 20, 30, 40]
    assert not summary.sources[0].warnings
