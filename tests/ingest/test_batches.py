"""Batch manifests, token shards and token counts, written here with json/polars/numpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.batches import (
    index_token_shard,
    is_manifest,
    is_token_counts,
    is_token_shard,
    read_manifest,
    read_token_counts,
)
from forensics.store import open_store

RECORDS = [
    {
        "step": 0,
        "micro": 0,
        "source": "data/train.bin",
        "token_offset": 0,
        "n_tokens": 1025,
        "seq_len": 1024,
        "loader_seed": 7,
    },
    {
        "step": 0,
        "micro": 1,
        "source": "data/train.bin",
        "token_offset": 1025,
        "n_tokens": 1025,
        "seq_len": 1024,
    },
    {
        "step": 1,
        "source": "/abs/shard_001.bin",
        "sample_index": 12,
        "seq_len": 1024,
        "doc_ids": [3, 4],
    },
]


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _check(frame: pl.DataFrame, folder: Path) -> None:
    assert frame.columns == [
        "step",
        "source",
        "micro",
        "sample_index",
        "token_offset",
        "n_tokens",
        "seq_len",
        "extra",
    ]
    assert frame["step"].to_list() == [0, 0, 1]
    assert frame["source"].to_list() == [str((folder / "data/train.bin").resolve())] * 2 + [
        "/abs/shard_001.bin"
    ]
    assert frame["token_offset"].to_list() == [0, 1025, None]
    assert frame["sample_index"].to_list() == [None, None, 12]
    assert frame["micro"].to_list() == [0, 1, None]
    assert [json.loads(e) if e else None for e in frame["extra"]] == [
        {"loader_seed": 7},
        None,
        {"doc_ids": [3, 4]},
    ]


def test_jsonl_manifest(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "batch_manifest.jsonl", RECORDS)
    assert is_manifest(path)
    _check(read_manifest(path), tmp_path)


def test_parquet_manifest(tmp_path: Path) -> None:
    path = tmp_path / "batches.parquet"
    pl.DataFrame(RECORDS).write_parquet(path)
    assert is_manifest(path)
    _check(read_manifest(path), tmp_path)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"source": "a.bin", "token_offset": 0, "n_tokens": 5}', r":2: field 'step': missing"),
        ('{"step": 1, "source": "a.bin", "token_offset": -3, "n_tokens": 5}', "'token_offset'"),
        ('{"step": 1, "source": "a.bin"}', r":2: field 'token_offset': no token span"),
        ('{"step": 1, "source": "a.bin", "sample_index": 2}', r":2: field 'seq_len'"),
        ('{"step": 1, "token_offset": 0, "n_tokens": 5}', r":2: field 'source'"),
        ('{"step": 1, ', r":2: not valid JSON"),
        ("[1, 2]", r":2: not a JSON object"),
    ],
)
def test_malformed_manifest_names_line_and_field(tmp_path: Path, line: str, match: str) -> None:
    path = tmp_path / "manifest.jsonl"
    path.write_text(json.dumps(RECORDS[0]) + "\n" + line + "\n")
    with pytest.raises(InputError, match=match):
        read_manifest(path)


def test_token_shards(tmp_path: Path) -> None:
    data = tmp_path / "data" / "owt"
    data.mkdir(parents=True)
    nano = data / "val.bin"
    np.arange(1000, dtype=np.uint16).tofile(nano)
    assert is_token_shard(nano)
    assert index_token_shard(nano) == {
        "dtype": "uint16",
        "header_bytes": 0,
        "n_tokens": 1000,
        "bytes": 2000,
    }
    for version, dtype in ((1, np.uint16), (2, np.uint32)):
        path = tmp_path / f"fineweb_{version}.bin"  # no telling name, no data folder: magic
        header = np.zeros(256, dtype=np.int32)
        header[:3] = (20240520, version, 300)
        path.write_bytes(header.tobytes() + np.arange(300, dtype=dtype).tobytes())
        assert is_token_shard(path)
        info = index_token_shard(path)
        assert (info["dtype"], info["header_bytes"], info["n_tokens"]) == (
            dtype.__name__,
            1024,
            300,
        )
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(InputError, match=r"header\[2\].*promises 300 uint32"):
        index_token_shard(path)


def test_shard_rule_false_positives(tmp_path: Path) -> None:
    blob = tmp_path / "weights.bin"
    np.zeros(10, dtype=np.uint16).tofile(blob)
    assert not is_token_shard(blob), "an even-sized .bin outside a data folder, no shard word"
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 10)
    assert not is_token_shard(tmp_path / "pytorch_model.bin")
    np.save(tmp_path / "tokens.npy", np.arange(50, dtype=np.uint32))
    np.save(tmp_path / "acts.npy", np.zeros(5, dtype=np.float32))
    assert is_token_shard(tmp_path / "tokens.npy") and not is_token_shard(tmp_path / "acts.npy")
    info = index_token_shard(tmp_path / "tokens.npy")
    assert (info["dtype"], info["n_tokens"], info["header_bytes"]) == ("uint32", 50, 128)


@pytest.mark.parametrize("suffix", [".npy", ".json", ".json-list", ".parquet", ".csv"])
def test_token_counts_formats(tmp_path: Path, suffix: str) -> None:
    counts = np.array([5, 0, 17, 2], dtype=np.int64)
    path = tmp_path / f"token_counts{suffix.replace('-list', '')}"
    if suffix == ".npy":
        np.save(path, counts)
    elif suffix == ".json":
        path.write_text(json.dumps({str(i): int(c) for i, c in enumerate(counts)}))
    elif suffix == ".json-list":
        path.write_text(json.dumps(counts.tolist()))
    else:
        frame = pl.DataFrame({"token": range(4), "count": counts})
        frame.write_parquet(path) if suffix == ".parquet" else frame.write_csv(path)
    assert is_token_counts(path) and not is_token_shard(path)
    frame = read_token_counts(path)
    assert frame.schema == {"token": pl.Int32, "count": pl.Int64}
    assert frame.rows() == [(0, 5), (1, 0), (2, 17), (3, 2)]


def test_malformed_token_counts(tmp_path: Path) -> None:
    path = tmp_path / "token_counts.csv"
    path.write_text("token,count\n0,5\n1,many\n")
    with pytest.raises(InputError, match=r"token_counts\.csv:3: field 'count'"):
        read_token_counts(path)
    path.write_text("token,count\n0,5\n0,6\n")
    with pytest.raises(InputError, match="field 'token': a token appears twice"):
        read_token_counts(path)
    (tmp_path / "token_counts.json").write_text('{"0": 1, "x": 2}')
    with pytest.raises(InputError, match="field 'x'"):
        read_token_counts(tmp_path / "token_counts.json")


def test_batches_through_the_store(tmp_path: Path, tmp_db: Path) -> None:
    run = tmp_path / "r1"
    (run / "data").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 0, "loss": 3.0}\n{"step": 1, "loss": 2.9}\n')
    np.arange(5000, dtype=np.uint16).tofile(run / "data" / "train.bin")
    np.save(run / "token_counts.npy", np.ones(64, dtype=np.int64))
    _jsonl(run / "manifest.jsonl", RECORDS)
    with open_store(tmp_db) as store:
        for _ in range(2):
            ingest(store, [run], allow_outside_sources=True)  # RECORDS name /abs/...
        assert store.query("SELECT count(*) AS n FROM batches")["n"][0] == 3
        shard = store.query("SELECT dtype, n_tokens FROM token_shards").rows()
        assert shard == [("uint16", 5000)]
        assert store.query("SELECT sum(count) AS n FROM token_counts")["n"][0] == 64
