"""The manifest reader on the recorder's dataset records: sample_indices or a hash instead of
a token span (docs/batches.md); records that name their data in no way are still refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.errors import InputError
from forensics.ingest.batches import read_manifest

HASH = "sha256:" + "0" * 64


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_dataset_records_are_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "batches.jsonl", [
        {"step": 1, "micro": 0, "source": "train_dataset", "sample_indices": [4, 9],
         "batch_size": 2, "seq_len": 8, "lengths": [8, 5], "hash": HASH},
        {"step": 2, "micro": 0, "source": "unrecorded", "hash": HASH},
    ])  # fmt: skip
    frame = read_manifest(path)
    assert frame["step"].to_list() == [1, 2]
    assert frame["token_offset"].null_count() == 2 and frame["sample_index"].null_count() == 2
    extra = json.loads(frame["extra"][0])
    assert extra["sample_indices"] == [4, 9] and extra["lengths"] == [8, 5]


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"step": 1, "source": "d"}, "token_offset"),
        ({"step": 1, "source": "d", "sample_indices": []}, "token_offset"),
        ({"step": 1, "source": "d", "sample_indices": ["a"]}, "token_offset"),
        ({"step": 1, "source": "d", "sample_index": 3}, "seq_len"),
    ],
)
def test_records_without_any_identity_are_refused(tmp_path: Path, record: dict, field: str) -> None:
    good = {"step": 0, "source": "d", "sample_indices": [1]}
    path = _write(tmp_path / "batches.jsonl", [good, record])
    with pytest.raises(InputError) as err:
        read_manifest(path)
    assert f"field '{field}'" in str(err.value) and ":2" in str(err.value)
