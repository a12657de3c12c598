"""Token shards, unigram counts, the synthetic language, and the `forensics simulate` command."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from forensics.cli import app
from forensics.sim.data import (
    COUNTS_FILE,
    MAGIC,
    TRAIN_SHARD,
    prepare_data,
    read_shard,
    write_shard,
)

runner = CliRunner()


def test_shard_layout_round_trip(tmp_path) -> None:
    tokens = np.arange(1000, dtype=np.uint16)
    write_shard(tmp_path / "a.bin", tokens)
    header = np.fromfile(tmp_path / "a.bin", dtype=np.int32, count=256)
    assert list(header[:3]) == [MAGIC, 1, 1000]
    assert (tmp_path / "a.bin").stat().st_size == 256 * 4 + 2 * 1000
    assert np.array_equal(read_shard(tmp_path / "a.bin"), tokens)


def test_language_counts_and_rare_band(tmp_path) -> None:
    lang = prepare_data(tmp_path, 512, 65536, 3)
    tokens = np.asarray(read_shard(tmp_path / TRAIN_SHARD))
    counts = np.load(tmp_path / COUNTS_FILE)
    assert counts.dtype == np.int64 and counts.shape == (512,) and counts.sum() == tokens.size
    assert counts[lang.rare_start :].sum() <= 5, "the rare band must almost never occur"
    content = np.sort(counts[1 : lang.rare_start])[::-1]
    assert content[0] > 20 * max(1, content[len(content) // 2]), "unigram should be Zipfian"
    again = prepare_data(tmp_path / "b", 512, 65536, 3)
    assert again == lang and np.array_equal(read_shard(tmp_path / "b" / TRAIN_SHARD), tokens)


def test_cli_simulate_writes_a_run_folder(tmp_path) -> None:
    out = tmp_path / "hw"
    args = ["simulate", "hardware_fault", "--out", str(out), "--steps", "120", "--at", "60"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    truth = json.loads((out / "truth.json").read_text())
    assert truth["expected"][0]["onset_step"] == 60
    for name in (
        "config.json",
        "metrics.jsonl",
        "batches.jsonl",
        "README.md",
        "data/token_counts.npy",
    ):
        assert (out / name).is_file(), name
    assert (out / "loss.png").is_file() or (out / "loss.html").is_file()
    config = json.loads((out / "config.json").read_text())
    for key in ("beta1", "beta2", "peak_lr", "min_lr", "warmup_steps", "total_steps", "precision",
                "grad_clip", "seed", "seq_len", "global_batch_size", "tokens_per_step",
                "world_size"):  # fmt: skip
        assert key in config, key
    assert config["model"]["arch"] == "forensics-gpt"


def test_cli_errors_are_one_line(tmp_path) -> None:
    result = runner.invoke(app, ["simulate", "volcano", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "unknown scenario 'volcano'" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["simulate", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "--all" in result.output
