"""CSV / TSV / Parquet tables, W&B history exports and Lightning's CSVLogger metrics.csv."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.base import ReadResult, sniff_format
from forensics.store import Store, open_store

FIX = Path(__file__).resolve().parents[1] / "fixtures"
LIGHTNING = FIX / "lightning" / "lightning_logs" / "version_0"


def read(path: Path, expect_format: str) -> ReadResult:
    reader = sniff_format(path)
    assert reader is not None and reader.name == expect_format
    return reader.read(path)


def series(result: ReadResult, raw_name: str) -> dict[int, float]:
    rows = result.metrics.filter(pl.col("raw_name") == raw_name).sort("step")
    return dict(zip(rows["step"].to_list(), rows["value"].to_list(), strict=True))


def run_config(store: Store, run: str) -> dict[str, Any]:
    """Read through `query`: Store.run_config leaves a DuckDB result open (see report)."""
    return dict(
        json.loads(store.query("SELECT config FROM runs WHERE run_id = ?", [run])["config"][0])
    )


def count_rows(db: Path) -> int:
    with open_store(db) as store:
        return int(store.query("SELECT count(*) AS n FROM metrics")["n"][0])


TABLE: dict[str, list[Any]] = {
    "step": [0, 1, 2, 3],
    "loss": [3.0, math.nan, 2.0, None],
    "grad_norm": [0.5, math.inf, None, -math.inf],
    "lr": [1e-4, 2e-4, 3e-4, 4e-4],
}


def check_table(res: ReadResult) -> None:
    loss = series(res, "loss")
    assert loss[0] == 3.0 and math.isnan(loss[1]) and loss[2] == 2.0 and 3 not in loss
    assert series(res, "grad_norm") == {0: 0.5, 1: math.inf, 3: -math.inf}
    assert series(res, "lr")[3] == 4e-4


def test_csv_written_by_polars(tmp_path: Path) -> None:
    """polars writes null as an empty cell and NaN / inf as text: empty is no data."""
    path = tmp_path / "metrics.csv"
    pl.DataFrame(TABLE).write_csv(path)
    assert "NaN" in path.read_text() and ",," in path.read_text()
    check_table(read(path, "table"))


def test_tsv_written_by_csv_module(tmp_path: Path) -> None:
    path = tmp_path / "log.tsv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(["iteration", "loss", "grad_norm", "lr"])
        for i in range(4):
            row = [TABLE[k][i] for k in ("step", "loss", "grad_norm", "lr")]
            writer.writerow(["" if v is None else v for v in row])  # csv writes nan / inf
    check_table(read(path, "table"))


def test_parquet_written_by_pyarrow(tmp_path: Path) -> None:
    path = tmp_path / "history.parquet"
    pq.write_table(pa.table(TABLE), path)
    check_table(read(path, "table"))


def test_torn_last_csv_row_is_dropped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss,lr\n0,3.0,1e-4\n1,2.9,1e-4\n2,2.")
    res = read(path, "table")
    assert series(res, "loss") == {0: 3.0, 1: 2.9}
    assert res.warnings == ["line 4: last row is cut off (fewer cells than the header): dropped"]


def test_ragged_csv_row_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n0,3.0\n1,2.9,7,8\n2,2.8\n")
    with pytest.raises(InputError, match=r"metrics\.csv:3: 4 cells in a 2-column table"):
        read(path, "table")


def test_non_integer_step_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n0,3.0\n1.5,2.9\n")
    with pytest.raises(InputError, match=r"metrics\.csv:3: field 'step': step '1.5'"):
        read(path, "table")


def test_table_ingest_twice_adds_nothing(tmp_path: Path, tmp_db: Path) -> None:
    path = tmp_path / "run" / "metrics.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table(TABLE), path)
    with open_store(tmp_db) as store:
        ingest(store, [path])
        ingest(store, [path])
    assert count_rows(tmp_db) == 10


# ----- W&B history exports ----------------------------------------------------------------

WANDB_ROWS: list[dict[str, Any]] = [
    {"_step": i, "_runtime": 10.0 + i, "_timestamp": 1714521600.5 + i,
     "train/loss": 3.0 - i / 10, "trainer/global_step": 100 * i}
    for i in range(4)
]  # fmt: skip
WANDB_ROWS[2]["train/loss"] = math.nan
WANDB_ROWS[3]["val/loss"] = 2.5


def write_wandb(folder: Path, kind: str) -> Path:
    """As `wandb.Api().run(...).history()` is saved: pandas to_csv (with its index column),
    json.dumps per row (scan_history), or Parquet."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIX / "wandb" / "config.yaml", folder / "config.yaml")
    cols = ["_runtime", "_step", "_timestamp", "train/loss", "trainer/global_step", "val/loss"]
    if kind == "csv":
        path = folder / "history.csv"
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["", *cols])
            for i, row in enumerate(WANDB_ROWS):
                # pandas writes NaN (missing or not) as an empty cell
                cells = [row.get(c) for c in cols]
                writer.writerow(
                    [
                        i,
                        *(
                            "" if v is None or (isinstance(v, float) and math.isnan(v)) else v
                            for v in cells
                        ),
                    ]
                )
    elif kind == "jsonl":
        path = folder / "history.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in WANDB_ROWS))
    else:
        path = folder / "history.parquet"
        pq.write_table(pa.table({c: [r.get(c) for r in WANDB_ROWS] for c in cols}), path)
    return path


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_wandb_history_export(tmp_path: Path, kind: str) -> None:
    res = read(write_wandb(tmp_path / "wandb_run", kind), "wandb")
    loss = series(res, "train/loss")
    assert sorted(loss) == ([0, 100, 300] if kind == "csv" else [0, 100, 200, 300])
    assert loss[100] == pytest.approx(2.9)
    if kind != "csv":
        assert math.isnan(loss[200])  # NaN survives JSONL and Parquet, not pandas' CSV
    assert series(res, "val/loss") == {300: 2.5}
    assert set(res.metrics["raw_name"].to_list()) == {"train/loss", "val/loss"}
    wall = res.metrics.filter(pl.col("step") == 300)["wall_time"].to_list()
    assert wall == [1714521603.5, 1714521603.5]
    assert res.config["peak_lr"] == 0.0006 and res.config["beta2"] == 0.95
    assert res.config["warmup_steps"] == 2000 and res.config["precision"] == "bf16"
    assert res.config["total_steps"] == 600000 and "_wandb.cli_version" not in res.config


def test_wandb_summary_is_not_a_history(tmp_path: Path) -> None:
    path = tmp_path / "wandb-summary.json"
    path.write_text(json.dumps({"_step": 99, "_runtime": 5.0, "_timestamp": 1.7e9, "loss": 2.0}))
    assert sniff_format(path) is None


def test_wandb_ingest_twice_adds_nothing(tmp_path: Path, tmp_db: Path) -> None:
    path = write_wandb(tmp_path / "wandb_run", "parquet")
    with open_store(tmp_db) as store:
        ingest(store, [path.parent])
        ingest(store, [path.parent])
        assert run_config(store, "wandb_run")["grad_clip"] == 1.0
        assert store.query("SELECT DISTINCT format FROM runs")["format"].to_list() == ["wandb"]
    assert count_rows(tmp_db) == 5


# ----- Lightning CSVLogger ----------------------------------------------------------------


def test_lightning_csvlogger_metrics() -> None:
    """The fixture is CSVLogger's real output (tests/fixtures/lightning/generate.py)."""
    res = read(LIGHTNING / "metrics.csv", "lightning")
    assert series(res, "train_loss_step")[5] == pytest.approx(2.4820170402526855)
    assert series(res, "val_loss") == pytest.approx(
        {3: 1.497597336769104, 7: 1.4711244106292725, 11: 1.445715308189392}
    )
    probe = series(res, "probe")
    assert math.isnan(probe[5]) and probe[6] == math.inf
    assert series(res, "epoch")[11] == 2.0
    # lr-AdamW is logged twice at steps 0, 4 and 8 with the same value: one row each
    assert series(res, "lr-AdamW") == {s: 0.003 for s in range(12)}
    assert res.warnings == []


def test_lightning_hparams_is_the_config() -> None:
    res = read(LIGHTNING / "metrics.csv", "lightning")
    cfg = res.config
    assert cfg["betas"] == [0.9, 0.95] and cfg["beta1"] == 0.9 and cfg["beta2"] == 0.95
    assert cfg["peak_lr"] == 0.003 and cfg["total_steps"] == 12 and cfg["seed"] == 7


def test_lightning_folder_ingest_twice_adds_nothing(tmp_path: Path, tmp_db: Path) -> None:
    run = tmp_path / "version_0"
    shutil.copytree(LIGHTNING, run)
    with open_store(tmp_db) as store:
        ingest(store, [run])
        ingest(store, [run])
        assert run_config(store, "version_0")["warmup_steps"] == 2
        kinds = store.query("SELECT kind, format FROM sources ORDER BY kind").rows()
        assert kinds == [("config", "yaml"), ("metrics", "lightning")]
        val = store.metrics_long("version_0", ["val_loss"])
        assert val["step"].to_list() == [3, 7, 11]
        assert store.metrics_long("version_0", ["lr"]).height == 12  # lr-AdamW is an alias
    assert count_rows(tmp_db) == 45


def test_lightning_grad_norm_utility_total_is_the_grad_norm(tmp_path: Path) -> None:
    """`lightning.pytorch.utilities.grad_norm(module, norm_type=2)` (what Lightning's docs
    log in `on_before_optimizer_step`) names the global norm `grad_2.0_norm_total` and each
    parameter's `grad_2.0_norm/<name>`: the total is the run's grad_norm (before, the rules
    that read the gradient said it was not logged)."""
    import torch
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.utilities import grad_norm

    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    logger = CSVLogger(save_dir=str(tmp_path), name="lightning_logs", version=0)
    totals = {}
    for step in range(1, 6):
        net.zero_grad()
        net(torch.randn(8, 4)).pow(2).mean().backward()
        norms = {k: float(v) for k, v in grad_norm(net, norm_type=2).items()}
        totals[step] = norms["grad_2.0_norm_total"]
        # the Trainer adds `epoch` to every logged row; here the logger is called directly
        logger.log_metrics({"train_loss": 1.0 / step, "epoch": 0, **norms}, step=step)
    logger.save()
    folder = tmp_path / "lightning_logs" / "version_0"
    assert read(folder / "metrics.csv", "lightning").warnings == []
    with open_store(tmp_path / "l.duckdb") as store:
        ingest(store, [folder], run="l")
        got = dict(store.con.execute(
            "SELECT step, value FROM metrics WHERE metric = 'grad_norm' ORDER BY step"
        ).fetchall())  # fmt: skip
        names = {r[0] for r in store.con.execute("SELECT DISTINCT metric FROM metrics").fetchall()}
    assert got == pytest.approx(totals)
    assert "grad_2.0_norm/weight" in names  # per parameter: kept under its own name


def _chart(runs: list[str]) -> pl.DataFrame:
    """A W&B chart 'Export CSV' layout: Step, then per run `<run> - train/loss` with its
    sampled bucket's `__MIN` / `__MAX`."""
    steps = list(range(0, 50, 5))
    cols: dict[str, list[float]] = {"Step": steps}  # type: ignore[dict-item]
    for r in runs:
        base = [3.0 - s / 100 for s in steps]
        cols[f"{r} - train/loss"] = base
        cols[f"{r} - train/loss__MIN"] = [v - 0.02 for v in base]
        cols[f"{r} - train/loss__MAX"] = [v + 0.02 for v in base]
    return pl.DataFrame(cols)


def test_wandb_chart_export_of_one_run_reads_its_metric_names(tmp_path: Path) -> None:
    # before: 'olmo-1b-run3_train/loss' and its __min/__max were three metrics, and the
    # run had "no logged loss"
    path = tmp_path / "wandb_export.csv"
    _chart(["olmo-1b-run3"]).write_csv(path)
    res = read(path, "table")
    assert series(res, "train/loss")[45] == 2.55
    assert set(res.metrics["raw_name"].unique().to_list()) == {"train/loss"}
    assert any("W&B chart export of run 'olmo-1b-run3'" in w for w in res.warnings)


def test_wandb_chart_export_of_several_runs_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "wandb_export.csv"
    _chart(["gpt2-lr6e-4", "gpt2-lr3e-4"]).write_csv(path)
    with pytest.raises(
        InputError, match=r"a W&B chart export of 2 runs \(gpt2-lr3e-4, gpt2-lr6e-4\)"
    ):
        read(path, "table")


# The Hugging Face Trainer's dicts of a window whose every loss was NaN (AnswerDotAI/
# ModernBERT#233), as its W&B callback logs them (`train/` names, `train/global_step`):
#   {'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.774074342405685e-06, 'epoch': 0.53}
#   {'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.773696745450087e-06, 'epoch': 0.53}
HF_WANDB_COLS = [
    "_step", "_runtime", "_timestamp", "train/loss", "train/grad_norm",
    "train/learning_rate", "train/epoch", "train/global_step",
]  # fmt: skip


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_wandb_history_of_hf_trainer_reads_zero_standins_as_nan(tmp_path: Path, kind: str) -> None:
    # before: the 0.0 losses were stored as real losses (a dip to 0), while the same run's
    # trainer_state.json and event file read them as NaN
    rows = [
        [i, 30.0 * i, 1.75e9 + 30 * i, 0.2051 + 0.01 * i, 0.5, 9.77e-06, 0.53, 10 * (i + 1)]
        for i in range(6)
    ]
    rows += [
        [i, 30.0 * i, 1.75e9 + 30 * i, 0.0, math.nan, 9.77e-06, 0.53, 10 * (i + 1)]
        for i in range(6, 9)
    ]
    folder = tmp_path / "wandb_run"
    folder.mkdir()
    if kind == "csv":  # `run.history().to_csv()`: pandas writes NaN as an empty cell
        path = folder / "wandb_export_history.csv"
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["", *HF_WANDB_COLS])
            for i, row in enumerate(rows):
                writer.writerow([i, *("" if v != v else v for v in row)])
    else:  # scan_history() dumped with json.dumps, which writes NaN
        path = folder / "history.jsonl"
        path.write_text(
            "".join(json.dumps(dict(zip(HF_WANDB_COLS, r, strict=True))) + "\n" for r in rows)
        )
    res = read(path, "wandb")
    loss = series(res, "train/loss")
    assert sorted(loss) == [10 * (i + 1) for i in range(9)]  # train/global_step, not _step
    assert all(math.isnan(loss[s]) for s in (70, 80, 90))
    assert loss[60] == pytest.approx(0.2551)
    assert any("3 'loss: 0.0' entries (steps 70..90) read as NaN" in w for w in res.warnings)


def test_wandb_history_keeps_a_zero_loss_of_another_trainer(tmp_path: Path) -> None:
    """Only the HF Trainer's callback names (`train/loss` with `train/epoch`) mark the
    stand-in: another loop's logged 0.0 is its value."""
    path = tmp_path / "history.jsonl"
    recs = [{"_step": i, "_runtime": i, "loss": 0.5 if i < 3 else 0.0} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    loss = series(read(path, "wandb"), "loss")
    assert loss[5] == 0.0
