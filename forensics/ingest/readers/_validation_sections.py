"""PccAI's validation batches, printed exactly like its training batches.

PccAI (InterDigitalInc/PccAI, pccai/pipelines/train.py) opens every epoch with `Training at
epoch 4 (total 4) with lr ...` and, every `val_freq` epochs, runs a validation under a line
`Validation at epoch 4`, whose batches `validate_one_epoch` prints with the training
loop's own format: `    batch count: 20/77, iter: 20, bpp_loss_y: ..., loss: 0.142317`.
Read as records, each validation batch was a training step (counted over epochs with the
validation's total) and its loss joined the training loss series. The lines between a
`Validation at epoch E` line and the next epoch's `Training at epoch` line are the
validation's: not records, their values the validation's, at the training step before it.
A validation is one measurement: after its batches PccAI prints their averages, `Validation
--- avg_val_bpp_loss: ..., avg_val_loss: ...`, the values the run's validation gives.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:  # the generic reader is imported by every ingest; polars loads when it runs
    pl = lazy_module("polars")

# `Validation at epoch 4` alone on its line (a template: the epoch is a slot, \x00)
VALIDATION_START = r"(?i)^\s*validation at epoch\s*\x00\s*$"
# PccAI's `Validation --- avg_val_loss: 0.134657, ...` after a validation's batches (a template)
_SUMMARY = re.compile(r"(?i)^\s*validation\s*---\s*avg_val_")
_AVERAGE = re.compile(r"(?i)^avg_val_(.+)$")


def summary_names(text: str, names: dict[int, str]) -> dict[int, str] | None:
    """The names (slot -> name) of a template's values as a validation's batch lines name
    them (`avg_val_loss` -> `loss`), when `text` is PccAI's `Validation --- avg_val_...`
    line and every value is an `avg_val_` one; else None."""
    if not names or not _SUMMARY.match(text):
        return None
    plain = {i: _AVERAGE.match(k) for i, k in names.items()}
    if not all(plain.values()):
        return None
    return {i: m.group(1) for i, m in plain.items() if m}


def validation_passes(
    prepared: pl.DataFrame, epoch_start: str, counted: list[str], summaries: list[str]
) -> pl.DataFrame:
    """(line, pass, summary) for each line of `prepared` (line, tpl) of a template in
    `counted` (records counting their batches within an epoch) or in `summaries` (PccAI's
    `Validation --- avg_val_...` templates) that follows a `Validation at epoch E` line with
    no line opening an epoch (`epoch_start`) between: `pass` is the line number of its
    `Validation at epoch E` line, `summary` whether it is the pass's printed averages. Empty
    unless the log has both kinds of line: where no epoch line closes a validation, the
    records after it may be training again."""
    none = pl.DataFrame(schema={"line": pl.Int64, "pass": pl.Int64, "summary": pl.Boolean})
    heads = prepared.filter(pl.col("tpl").str.contains(VALIDATION_START))
    starts = prepared.filter(pl.col("tpl").str.contains(epoch_start))
    if not counted or heads.height == 0 or starts.height == 0:
        return none
    marks = pl.concat(
        [
            heads.select("line", pl.col("line").alias("pass")),
            starts.select("line", pl.lit(None, pl.Int64).alias("pass")),
        ]
    ).sort("line")
    mine = prepared.filter(pl.col("tpl").is_in(counted + summaries))
    mine = mine.select("line", pl.col("tpl").is_in(summaries).alias("summary")).sort("line")
    under = mine.join_asof(marks, on="line", strategy="backward")
    return under.filter(pl.col("pass").is_not_null()).select(none.columns)


def one_per_pass(rows: pl.DataFrame, passes: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`rows` (line, raw_name, value, ... of every line read) with one row per validation
    pass and name: the pass's printed average where its `Validation --- avg_val_...` line
    gives the name (as printed, NaN too), else the mean of its batch lines' values (NaN
    when one of them is: a NaN batch does not vanish from the pass), on its last batch
    line. Before, every batch was a value of its own at the same step: the store kept the
    last batch's and put the others in `conflicts`, warning of values logged again at once.
    Also (pass, means): the passes whose values are the batches' means, for the note."""
    none = pl.DataFrame(schema={"pass": pl.Int64, "batches": pl.UInt32})
    if passes.height == 0:
        return rows, none
    tagged = rows.join(passes, on="line", how="left")
    mine = tagged.filter(pl.col("pass").is_not_null())
    rest = tagged.filter(pl.col("pass").is_null()).drop("pass", "summary")
    printed = mine.filter(pl.col("summary"))
    batches = mine.filter(~pl.col("summary")).join(
        printed.select("pass", "raw_name").unique(), on=["pass", "raw_name"], how="anti"
    )
    means = (
        batches.sort("line")
        .group_by("pass", "raw_name", maintain_order=True)
        .agg(
            pl.col("value").mean(),
            pl.col("line").n_unique().alias("batches"),
            pl.all().exclude("value").last(),
        )
    )
    kept = pl.concat(
        [printed.select(rest.columns), means.select(rest.columns)], how="vertical_relaxed"
    )
    averaged = means.group_by("pass").agg(pl.col("batches").max()).sort("pass")
    return pl.concat([rest, kept], how="vertical_relaxed"), averaged.select(none.columns)
