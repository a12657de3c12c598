"""PccAI's validation batches, printed exactly like its training batches.

PccAI (InterDigitalInc/PccAI, pccai/pipelines/train.py) opens every epoch with `Training at
epoch 4 (total 4) with lr ...` and, every `val_freq` epochs, runs a validation under a line
`Validation at epoch 4`, whose batches `validate_one_epoch` prints with the training
loop's own format: `    batch count: 20/77, iter: 20, bpp_loss_y: ..., loss: 0.142317`.
Read as records, each validation batch was a training step (counted over epochs with the
validation's total) and its loss joined the training loss series. The lines between a
`Validation at epoch E` line and the next epoch's `Training at epoch` line are the
validation's: not records, their values the validation's, at the training step before it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:  # the generic reader is imported by every ingest; polars loads when it runs
    pl = lazy_module("polars")

# `Validation at epoch 4` alone on its line (a template: the epoch is a slot, \x00)
VALIDATION_START = r"(?i)^\s*validation at epoch\s*\x00\s*$"


def validation_lines(prepared: pl.DataFrame, epoch_start: str, counted: list[str]) -> pl.Series:
    """The lines of `prepared` (line, tpl) of a template in `counted` (records counting
    their batches within an epoch) that follow a `Validation at epoch E` line with no line
    opening an epoch (`epoch_start`) between. Empty unless the log has both kinds of line:
    where no epoch line closes a validation, the records after it may be training again."""
    none = pl.Series("line", [], dtype=pl.Int64)
    heads = prepared.filter(pl.col("tpl").str.contains(VALIDATION_START))
    starts = prepared.filter(pl.col("tpl").str.contains(epoch_start))
    if not counted or heads.height == 0 or starts.height == 0:
        return none
    marks = pl.concat(
        [
            heads.select("line", pl.lit(True).alias("validating")),
            starts.select("line", pl.lit(False).alias("validating")),
        ]
    ).sort("line")
    batches = prepared.filter(pl.col("tpl").is_in(counted)).select("line").sort("line")
    under = batches.join_asof(marks, on="line", strategy="backward")
    return under.filter(pl.col("validating").fill_null(False))["line"]
