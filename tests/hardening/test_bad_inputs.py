"""Each bad input of issue 14: the right values, or one clear line naming the file."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.hardening.conftest import assert_one_line_error, cli, ingest_paths, metrics, table


def _jsonl_big(path: Path, value: float, rows: int = 12_000) -> Path:
    """Over 1 MiB, so that the DuckDB path (which globbed names) reads it."""
    pad = "x" * 100
    path.write_text("".join(json.dumps({"step": i, "loss": value, "pad": pad}) + "\n"
                            for i in range(rows)))  # fmt: skip
    return path


def _loss_run(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.9}\n')
    return folder


@pytest.mark.parametrize("name", ["metrics[0].jsonl", "a*.jsonl", "r?n.jsonl", "x{1,2}.jsonl"])
def test_glob_characters_in_a_file_name_are_literal(tmp_path: Path, db: Path, name: str) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    for decoy in ("metrics0.jsonl", "abc.jsonl", "run.jsonl", "x1.jsonl"):
        _jsonl_big(d / decoy, 1.0)
    _jsonl_big(d / name, 7.0)
    ingest_paths(db, d / name, run="g")
    got = metrics(db, "metric = 'loss'")
    assert got.height == 12_000 and got["value"].unique().to_list() == [7.0]


@pytest.mark.parametrize("sep,suffix", [(",", ".csv"), ("\t", ".tsv")])
def test_torn_last_row_is_dropped_with_a_warning(
    tmp_path: Path, db: Path, sep: str, suffix: str
) -> None:
    log = tmp_path / f"log{suffix}"
    log.write_text(f"step{sep}loss\n0{sep}1.00\n1{sep}1.05\n2{sep}1")  # `1.05` cut after `1`
    (summary,) = ingest_paths(db, log)
    assert metrics(db)["value"].to_list() == [1.0, 1.05]
    notes = summary.sources[0].warnings  # type: ignore[attr-defined]
    assert any("line 4" in w and "dropped" in w for w in notes), notes


def test_torn_last_row_of_a_lightning_csv_is_dropped(tmp_path: Path, db: Path) -> None:
    run = tmp_path / "version_0"
    run.mkdir()
    (run / "hparams.yaml").write_text("lr: 0.1\n")
    (run / "metrics.csv").write_text("epoch,step,train_loss\n0,0,2.5\n0,1,2.4\n0,2,2")
    ingest_paths(db, run / "metrics.csv")
    assert metrics(db, "metric = 'loss'")["value"].to_list() == [2.5, 2.4]


def test_nan_and_infinity_text_in_trainer_state_are_kept(tmp_path: Path, db: Path) -> None:
    history = [{"step": 1, "loss": "nan"}, {"step": 2, "loss": "Infinity"},
               {"step": 3, "loss": "-inf"}, {"step": 4, "loss": 1.5}]  # fmt: skip
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    ingest_paths(db, tmp_path / "trainer_state.json")
    values = metrics(db, "metric = 'loss'")["value"].to_list()
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf, 1.5]


@pytest.mark.parametrize(
    "name,body",
    [
        ("m.jsonl", b'{"step": 0, "loss": 1}\n{"step": 1, "loss": 2}\n'),
        ("m.csv", b"step,loss\n0,1\n1,2\n"),
        (
            "trainer_state.json",
            b'{"log_history": [{"step": 0, "loss": 1}, {"step": 1, "loss": 2}]}',
        ),
    ],
)
def test_byte_order_mark_is_not_content(tmp_path: Path, db: Path, name: str, body: bytes) -> None:
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + body)
    ingest_paths(db, tmp_path / name)
    got = metrics(db, "metric = 'loss'")
    assert got["step"].to_list() == [0, 1] and got["value"].to_list() == [1.0, 2.0]


@pytest.mark.parametrize(
    "name,body",
    [("m.jsonl", '{"step": -1, "loss": 1}\n{"step": 0, "loss": 2}\n'),
     ("m.csv", "step,loss\n-2,1\n0,2\n")],
)  # fmt: skip
def test_negative_steps_are_stored(tmp_path: Path, db: Path, name: str, body: str) -> None:
    (tmp_path / name).write_text(body)
    ingest_paths(db, tmp_path / name)
    assert metrics(db)["step"].to_list()[0] < 0


@pytest.mark.parametrize(
    "body", ['{"1": 1e308, "2": 5}', '{"1": -3}', '{"99999999999": 1}', "[" * 50_000 + "]" * 50_000]
)
def test_bad_token_counts_are_one_line(tmp_path: Path, db: Path, body: str) -> None:
    run = _loss_run(tmp_path / "r")
    (run / "token_counts.json").write_text(body)
    code, out = cli("ingest", str(run), "--db", str(db))
    assert_one_line_error(code, out, "token_counts.json")
    assert not db.exists() or table(db, "SELECT count(*) FROM token_counts").item() == 0


def test_empty_token_counts_npy_is_one_line(tmp_path: Path, db: Path) -> None:
    run = _loss_run(tmp_path / "r")
    np.save(run / "token_counts.npy", np.zeros(0, dtype=np.int64))
    code, out = cli("ingest", str(run), "--db", str(db))
    assert_one_line_error(code, out, "token_counts.npy", "empty")


@pytest.mark.parametrize("field", ["token_offset", "n_tokens"])
def test_huge_manifest_offsets_are_one_line(tmp_path: Path, db: Path, field: str) -> None:
    run = _loss_run(tmp_path / "r")
    rec = {"step": 0, "source": "data/train.bin", "token_offset": 0, "n_tokens": 8, field: 1e308}
    (run / "batches.jsonl").write_text(json.dumps(rec) + "\n")
    code, out = cli("ingest", str(run), "--db", str(db))
    assert_one_line_error(code, out, "batches.jsonl", field)


def test_manifest_may_not_point_outside_the_run(tmp_path: Path, db: Path) -> None:
    run = _loss_run(tmp_path / "r")
    rec = {"step": 0, "source": "../../../../etc/passwd", "token_offset": 0, "n_tokens": 8}
    (run / "batches.jsonl").write_text(json.dumps(rec) + "\n")
    code, out = cli("ingest", str(run), "--db", str(db))
    assert_one_line_error(code, out, "batches.jsonl", "outside the run folder")
    code, out = cli("ingest", str(run), "--db", str(db), "--allow-outside-sources")
    assert code == 0, out
    assert table(db, "SELECT source FROM batches").item().endswith("/etc/passwd")


def test_yaml_alias_bomb_is_refused_quickly(tmp_path: Path, db: Path) -> None:
    run = _loss_run(tmp_path / "r")
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    (run / "config.yaml").write_text("\n".join(lines) + "\n")  # 9**10 values once expanded
    code, out = cli("ingest", str(run), "--db", str(db))
    assert_one_line_error(code, out, "config.yaml", "alias")


def test_truncated_checkpoint_is_one_line(tmp_path: Path, db: Path) -> None:
    run = _loss_run(tmp_path / "r")
    torch.save({"model": {"w": torch.ones(4096)}, "step": 5}, run / "ckpt_5.pt")
    data = (run / "ckpt_5.pt").read_bytes()
    for cut in (len(data) // 10, len(data) // 2, len(data) - 30):
        (run / "ckpt_5.pt").write_bytes(data[:cut])
        code, out = cli("ingest", str(run), "--db", str(db))
        assert_one_line_error(code, out, "ckpt_5.pt")


def test_malicious_checkpoint_at_replay_load_is_one_line(tmp_path: Path) -> None:
    from forensics.errors import InputError
    from forensics.sim.checkpoint import read_checkpoint

    class Boom:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    torch.save({"model": Boom()}, tmp_path / "evil.pt")
    with pytest.raises(InputError, match="evil.pt"):
        read_checkpoint(tmp_path / "evil.pt")
    assert not (tmp_path / "pwned").exists()
    good = tmp_path / "cut.pt"
    torch.save({"model": {"w": torch.ones(4096)}}, good)
    good.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(InputError, match="cut.pt"):
        read_checkpoint(good)


def test_lone_safetensors_checkpoint_gets_a_step(tmp_path: Path, db: Path) -> None:
    from safetensors.torch import save_file

    run = _loss_run(tmp_path / "r")
    save_file({"w": torch.ones(8)}, str(run / "model.safetensors"), metadata={"step": "1"})
    ingest_paths(db, run)
    assert table(db, "SELECT step FROM checkpoints").item() == 1


def test_dev_null_is_one_line(db: Path) -> None:
    code, out = cli("ingest", "/dev/null", "--db", str(db))
    assert_one_line_error(code, out, "/dev/null", "not a regular file")


def test_a_huge_field_gives_a_capped_line_naming_the_file(tmp_path: Path, db: Path) -> None:
    log = tmp_path / "m.jsonl"
    log.write_text('{"step": 0, "loss": 1}\n{"step": "' + "9" * 5_000_000 + 'x", "loss": 2}\n'
                   '{"step": 2, "loss": 1}\n')  # fmt: skip
    code, out = cli("ingest", str(log), "--db", str(db))
    assert_one_line_error(code, out, "m.jsonl")


def test_unexpected_exception_is_one_line(
    tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forensics.ingest.readers import jsonl

    def boom(*a: object, **k: object) -> object:
        raise KeyError("x" * 10_000)

    monkeypatch.setattr(jsonl, "_read", boom)
    log = _loss_run(tmp_path / "r") / "metrics.jsonl"
    code, out = cli("ingest", str(log), "--db", str(db))
    assert_one_line_error(code, out, "metrics.jsonl", "KeyError")


def test_old_db_rows_survive_a_failed_ingest(tmp_path: Path, db: Path) -> None:
    run = _loss_run(tmp_path / "r")
    ingest_paths(db, run)
    (run / "token_counts.json").write_text('{"1": 1e308}')
    code, out = cli("ingest", str(run), "--db", str(db))
    assert code != 0
    assert metrics(db).height == 2


def test_safetensors_metadata_header_is_bounded(tmp_path: Path) -> None:
    from forensics.ingest.checkpoints import _safetensors_metadata

    bad = tmp_path / "x.safetensors"
    bad.write_bytes(struct.pack("<Q", 1 << 62) + b"{}")
    assert _safetensors_metadata(bad) == {}


def test_manifest_count_past_int64_is_one_line(tmp_path: Path, db: Path) -> None:
    """Found by the fuzzer: polars reads 2**63 as an Int128, whose cast raised."""
    run = _loss_run(tmp_path / "r")
    rec = {"step": 0, "source": "data/train.bin", "token_offset": 0, "n_tokens": 2**63}
    (run / "batches.jsonl").write_text(json.dumps(rec) + "\n")
    code, out = cli("ingest", str(run), "--db", str(db))
    assert_one_line_error(code, out, "batches.jsonl", "n_tokens")


def test_fuzzer_findings_are_one_line(tmp_path: Path, db: Path) -> None:
    """Long-run fuzz findings: -2**63-1 in a manifest (Int128 in polars), and a torch.save
    file with a flipped byte that made torch raise AssertionError."""
    run = _loss_run(tmp_path / "r")
    rec = {"step": 0, "source": "data/train.bin", "token_offset": 0, "n_tokens": -(2**63) - 1}
    (run / "batches.jsonl").write_text(json.dumps(rec) + "\n")
    code, out = cli("ingest", str(run), "--db", str(db))
    assert_one_line_error(code, out, "batches.jsonl", "n_tokens")
    (run / "batches.jsonl").unlink()
    torch.save({"model": {"a": torch.zeros(2), "b": torch.zeros(2)}, "step": 1}, run / "c_1.pt")
    data = bytearray((run / "c_1.pt").read_bytes())
    for i in range(0, len(data), 7):  # every 7th byte flipped: torch fails in many ways
        data[i] ^= 0x10
    (run / "c_1.pt").write_bytes(bytes(data))
    code, out = cli("ingest", str(run), "--db", str(db))
    assert_one_line_error(code, out, "c_1.pt")
