"""Hugging Face Trainer trainer_state.json: train vs eval entries, the run-average train_loss."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.base import sniff_format
from forensics.ingest.readers.hf_trainer import HfTrainerReader
from forensics.store import Store, open_store

CKPT = Path(__file__).resolve().parents[1] / "fixtures" / "hf_trainer" / "checkpoint-40"
STATE = CKPT / "trainer_state.json"
READER = HfTrainerReader()


def config_of(store: Store, run: str) -> dict[str, Any]:
    """Read through `query`: Store.run_config leaves a DuckDB result open (see report)."""
    return dict(
        json.loads(store.query("SELECT config FROM runs WHERE run_id = ?", [run])["config"][0])
    )


def series(frame: pl.DataFrame, raw_name: str) -> dict[int, float]:
    rows = frame.filter(pl.col("raw_name") == raw_name).sort("step")
    return dict(zip(rows["step"].to_list(), rows["value"].to_list(), strict=True))


def test_sniffed_before_generic_json() -> None:
    reader = sniff_format(STATE)
    assert reader is not None and reader.name == "hf_trainer"


def test_train_and_eval_entries_stay_apart() -> None:
    res = READER.read(STATE)
    loss = series(res.metrics, "loss")
    assert sorted(loss) == list(range(5, 45, 5)) and math.isnan(loss[25])
    assert series(res.metrics, "grad_norm")[30] == math.inf
    assert series(res.metrics, "eval_loss") == pytest.approx({20: 2.2, 40: 2.0})
    assert series(res.metrics, "learning_rate")[40] == 0.0


def test_final_train_loss_is_not_a_step_loss() -> None:
    res = READER.read(STATE)
    assert series(res.metrics, "train_loss_final") == {40: 2.08}
    assert "train_loss" not in res.metrics["raw_name"].to_list()
    assert res.config["trainer_summary.train_runtime"] == 12.5
    train_names = res.metrics.filter(pl.col("raw_name").str.starts_with("train_"))["raw_name"]
    assert set(train_names) == {"train_loss_final"}


def test_epoch_is_stored_once_per_step() -> None:
    epochs = READER.read(STATE).metrics.filter(pl.col("raw_name") == "epoch")
    assert epochs["step"].is_duplicated().sum() == 0 and epochs.height == 8


def test_config_from_state_and_siblings() -> None:
    cfg = READER.read(STATE).config
    assert cfg["max_steps"] == 40 and cfg["total_steps"] == 40 and cfg["train_batch_size"] == 8
    assert (cfg["beta1"], cfg["beta2"]) == (0.9, 0.98)  # training_args.json adam_beta*
    assert cfg["precision"] == "bf16" and cfg["grad_clip"] == 1.0 and cfg["peak_lr"] == 5e-5
    # warmup_steps 0 beside warmup_ratio 0.1: HF warms up ceil(0.1 x max_steps 40) steps
    assert cfg["warmup_steps"] == 4 and cfg["seed"] == 42
    assert cfg["n_layer"] == 2  # model config.json


def test_malformed_state_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "trainer_state.json"
    bad.write_text('{\n  "log_history": [\n    {"loss": 1.0, "step": }\n  ]\n}\n')
    with pytest.raises(InputError, match=r"trainer_state\.json:3: not valid JSON"):
        READER.read(bad)
    bad.write_text(json.dumps({"log_history": {"step": 1}}))
    with pytest.raises(InputError, match="field 'log_history'"):
        READER.read(bad)


def test_ingest_checkpoint_folder_twice_adds_nothing(tmp_path: Path, tmp_db: Path) -> None:
    run = tmp_path / "checkpoint-40"
    shutil.copytree(CKPT, run)
    with open_store(tmp_db) as store:
        ingest(store, [run])
        ingest(store, [run])
        assert store.query("SELECT count(*) AS n FROM metrics")["n"][0] == 41
        assert store.metrics_long("checkpoint-40", ["loss"]).height == 8
        assert store.metrics_long("checkpoint-40", ["val_loss"]).height == 2
        assert config_of(store, "checkpoint-40")["beta2"] == 0.98
