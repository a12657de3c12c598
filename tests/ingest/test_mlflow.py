"""MLflow file-store runs: metrics files, params as config, picking the one run."""

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
from forensics.ingest.base import read_head, sniff_format
from forensics.ingest.readers.mlflow import MlflowReader
from forensics.store import Store, open_store

# Written by mlflow-skinny's own file store: tests/fixtures/mlflow/generate.py
MLRUNS = Path(__file__).resolve().parents[1] / "fixtures" / "mlflow" / "mlruns"
EXPERIMENT = MLRUNS / "968831867306038540"
SPIKY = EXPERIMENT / "c6f2c302ba5644bd8fe5b52788558bb5"
OTHER = EXPERIMENT / "c7961cde45134a39899382b9e3eea513"
READER = MlflowReader()


def config_of(store: Store, run: str) -> dict[str, Any]:
    """Read through `query`: Store.run_config leaves a DuckDB result open (see report)."""
    return dict(
        json.loads(store.query("SELECT config FROM runs WHERE run_id = ?", [run])["config"][0])
    )


def series(frame: pl.DataFrame, raw_name: str) -> dict[int, float]:
    rows = frame.filter(pl.col("raw_name") == raw_name).sort("step")
    return dict(zip(rows["step"].to_list(), rows["value"].to_list(), strict=True))


def test_run_folder_values_nan_inf_and_wall_time() -> None:
    res = READER.read(SPIKY)
    loss = series(res.metrics, "loss")
    assert sorted(loss) == list(range(8)) and loss[4] == 2.75 and math.isnan(loss[5])
    assert series(res.metrics, "grad_norm")[6] == math.inf
    assert series(res.metrics, "train/tokens_per_s")[7] == 1007.0  # nested metric name
    first = res.metrics.filter((pl.col("raw_name") == "loss") & (pl.col("step") == 0))
    assert first["wall_time"][0] == 1795307875.601  # milliseconds -> seconds
    assert res.metrics.height == 32


def test_params_and_meta_are_the_config() -> None:
    cfg = READER.read(SPIKY).config
    assert cfg["lr"] == 3e-4 and cfg["peak_lr"] == 3e-4
    assert (cfg["beta1"], cfg["beta2"]) == (0.9, 0.95)  # from the text "(0.9, 0.95)"
    assert cfg["precision"] == "bf16" and cfg["precision_raw"] == "bf16-mixed"
    assert cfg["warmup_steps"] == 2 and cfg["total_steps"] == 8 and cfg["seed"] == 1234
    assert cfg["tokens_per_step"] == 64 * 128
    assert cfg["mlflow.run_name"] == "spiky" and cfg["mlflow.tags.mlflow.runName"] == "spiky"


def test_sniff_accepts_run_experiment_and_root_folders_only(tmp_path: Path) -> None:
    for folder in (SPIKY, EXPERIMENT, MLRUNS):
        assert READER.sniff(folder, read_head(folder))
    (tmp_path / "plain" / "metrics").mkdir(parents=True)
    assert not READER.sniff(tmp_path / "plain", "")
    assert not READER.sniff(SPIKY / "meta.yaml", read_head(SPIKY / "meta.yaml"))


@pytest.mark.parametrize("where", [EXPERIMENT, MLRUNS], ids=["experiment", "mlruns"])
def test_several_runs_ask_for_the_run_folder(where: Path) -> None:
    with pytest.raises(InputError, match="holds 2 MLflow runs") as err:
        READER.read(where)
    assert "c6f2c302ba5644bd8fe5b52788558bb5 (spiky)" in str(err.value)
    assert "c7961cde45134a39899382b9e3eea513 (other)" in str(err.value)
    assert "pass the run folder" in str(err.value)


def test_deleted_runs_are_ignored(tmp_path: Path) -> None:
    root = tmp_path / "mlruns"
    shutil.copytree(MLRUNS, root)
    meta = root / OTHER.relative_to(MLRUNS) / "meta.yaml"
    meta.write_text(meta.read_text().replace("lifecycle_stage: active", "lifecycle_stage: deleted"))
    res = READER.read(root)
    assert res.config["mlflow.run_name"] == "spiky"


def test_malformed_metric_line_names_file_and_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SPIKY, run)
    (run / "metrics" / "loss").write_text("1795307875601 3.2 0\n1795307875603 oops 1\n")
    with pytest.raises(InputError, match=r"metrics/loss:2: malformed metric line"):
        READER.read(run)


def test_ingest_run_folder_twice_adds_nothing(tmp_path: Path, tmp_db: Path) -> None:
    run = tmp_path / "spiky"
    shutil.copytree(SPIKY, run)
    reader = sniff_format(run)
    assert reader is not None and reader.name == "mlflow"
    with open_store(tmp_db) as store:
        ingest(store, [run])
        ingest(store, [run])
        assert store.query("SELECT count(*) AS n FROM metrics")["n"][0] == 32
        assert config_of(store, "spiky")["beta2"] == 0.95
        loss = store.metrics_long("spiky", ["loss"])
        assert loss.height == 8 and math.isnan(loss["value"][5])


def test_meta_yaml_is_parsed_once_per_ingest(
    tmp_path: Path, tmp_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # discovery (deleted runs), the choice of the run and its config all need meta.yaml
    from forensics.ingest.readers import mlflow

    root = tmp_path / "mlruns"
    shutil.copytree(MLRUNS, root)
    other = root / OTHER.relative_to(MLRUNS)
    shutil.rmtree(other)  # one run left in the experiment
    parsed: list[Path] = []
    real = Path.read_text

    def counting(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.name == "meta.yaml":
            parsed.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    mlflow._parsed_meta.cache_clear()
    with open_store(tmp_db) as store:
        (summary,) = ingest(store, [root / EXPERIMENT.name])
        assert config_of(store, summary.run)["mlflow.run_name"] == "spiky"
    assert parsed.count(root / SPIKY.relative_to(MLRUNS) / "meta.yaml") == 1
    # a rewritten meta.yaml is read again
    meta = root / SPIKY.relative_to(MLRUNS) / "meta.yaml"
    meta.write_text(meta.read_text().replace("lifecycle_stage: active", "lifecycle_stage: deleted"))
    assert not mlflow._is_active(meta.parent)
