"""Weights & Biases run-history exports: CSV / JSONL / Parquet with `_step`, `_runtime`, ...

This is what `wandb.Api().run(...).history()` / `scan_history()` return, saved with
pandas or polars (a leading unnamed index column is ignored). The `_`-prefixed columns
are W&B bookkeeping, never metrics: `_timestamp` gives the wall time, and `_step` the step
unless the run logged its own (`trainer/global_step` from Lightning's WandbLogger,
`global_step`, `step`): W&B's `_step` counts `wandb.log` calls, which is the optimizer
step only when the training loop passed `step=` itself. Metric names keep W&B's
'/' sections (`train/loss`). A sibling `config.yaml` (W&B's `{key: {value: X}}` layout) is
read as the run's config. The Hugging Face Trainer's W&B callback logs the same `loss: 0.0`
stand-ins for an all-NaN window as its trainer_state.json: they are read as the NaN they
stand for, as the hf_trainer and tensorboard readers read them (`long_standins`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forensics.ingest.base import Reader, ReadResult, read_head, register
from forensics.ingest.config import is_config_file, load_config
from forensics.ingest.readers._wide import wide_to_long
from forensics.ingest.readers.hf_trainer import long_standins
from forensics.ingest.readers.jsonl import NOT_HISTORY, first_record, flat_keys, read_jsonl
from forensics.ingest.readers.tabular import load_table, table_header, table_kind


@register
class WandbReader(Reader):
    name = "wandb"
    description = "W&B history exports (CSV / JSONL / Parquet with _step, _runtime, _timestamp)"
    priority = 20  # before the generic table and JSONL readers, which would also accept them

    def sniff(self, path: Path, head: str) -> bool:
        if path.is_dir() or path.name in NOT_HISTORY:
            return False
        if table_kind(path, head) is not None:
            columns = table_header(path, head)
        else:
            record = first_record(head)
            columns = flat_keys(record) if record else []
        return "_step" in columns and ("_runtime" in columns or "_timestamp" in columns)

    def read(self, path: Path) -> ReadResult:
        if table_kind(path, read_head(path)) is not None:
            wide, warnings, first_line = load_table(path)
            long, more = wide_to_long(wide, path, first_line=first_line)
            warnings += more
        else:
            long, warnings = read_jsonl(path)
        long = long_standins(long, warnings)
        return ReadResult(long, config=_sibling_config(path), warnings=warnings)


def _sibling_config(path: Path) -> dict[str, Any]:
    for name in ("config.yaml", "config.yml", "config.json"):
        sibling = path.parent / name
        if is_config_file(sibling):
            return load_config(sibling)
    return {}
