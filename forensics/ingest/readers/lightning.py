"""PyTorch Lightning CSVLogger output: `metrics.csv` (+ `hparams.yaml` beside it).

CSVLogger writes one row per logging call with the union of all metric names as columns
(`epoch`, `step`, `train_loss_step`, `train_loss_epoch`, `val_loss`, `lr-AdamW`, ...), so
most cells are empty: an empty cell is no data, "nan"/"inf" are values. `step` is the
trainer's global step. LearningRateMonitor logs the same (step, lr) twice around epoch
boundaries; such exact duplicates are dropped here rather than reported as a resume.
`hparams.yaml` (save_hyperparameters; may hold `!!python/tuple` tags) is the config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.config import is_config_file, load_config
from forensics.ingest.readers._wide import wide_to_long
from forensics.ingest.readers.tabular import load_table, table_header, table_kind


@register
class LightningReader(Reader):
    name = "lightning"
    description = "PyTorch Lightning CSVLogger metrics.csv (hparams.yaml beside it is the config)"
    priority = 20  # before the generic table reader, which would also accept it

    def sniff(self, path: Path, head: str) -> bool:
        if path.is_dir() or table_kind(path, head) != "csv":
            return False
        columns = table_header(path, head)
        lightning_file = path.name == "metrics.csv" or (path.parent / "hparams.yaml").is_file()
        return lightning_file and "step" in columns and "epoch" in columns

    def read(self, path: Path) -> ReadResult:
        wide, warnings, first_line = load_table(path)
        long, more = wide_to_long(wide, path, first_line=first_line)
        long = long.unique(subset=["step", "raw_name", "value"], keep="last", maintain_order=True)
        return ReadResult(long, config=_hparams(path), warnings=warnings + more)


def _hparams(path: Path) -> dict[str, Any]:
    for name in ("hparams.yaml", "hparams.yml"):
        sibling = path.parent / name
        if is_config_file(sibling):
            return load_config(sibling)
    return {}
