"""Lightning 1.x's training bar, which counts the validation batches too.

Lightning 1.x drew one main bar per epoch whose total is the training batches plus the
validation batches (`Epoch 0: 91%| 201/220`, 200 training + 20 validation), and while it
validates it redraws that bar under its `Validating:` bar, counting on from 201 with the
training loss frozen at its last value. Read as printed, every epoch is 220 steps long and
the 20 validation redraws add 20 flat "training" points. The first count drawn while it
validates is the epoch's training length plus one: the validation redraws belong to the
epoch's last training step, and the epochs are counted at that length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:  # the generic reader is imported by every ingest; polars loads when it runs
    pl = lazy_module("polars")

VALIDATING = r"Validating:"  # Lightning 1.x's validation bar, drawn before the main bar's redraw


def without_validation_counts(
    hit: pl.DataFrame, prepared: pl.DataFrame, bars: list[str], notes: list[str]
) -> pl.DataFrame:
    """`hit` with its main-bar records counted over training batches only. `prepared` holds
    every line of the file with a number (the validation bar's lines among them)."""
    slot = pl.col("step_slot")
    n = pl.col("nums").list.get(slot, null_on_oob=True).cast(pl.Int64, strict=False)
    total = pl.col("nums").list.get(slot + 1, null_on_oob=True).cast(pl.Int64, strict=False)
    is_bar = pl.col("tpl").is_in(bars) & ~pl.col("cont")
    during = is_bar & _validating(hit, prepared, is_bar)
    counts = hit.filter(during).select(n.alias("n"), total.alias("t")).drop_nulls()
    if counts.height == 0 or counts["t"].n_unique() != 1:
        return hit
    size = int(counts["t"][0])
    train = int(counts["n"].min()) - 1  # type: ignore[arg-type]
    if not 0 < train < size:
        return hit
    epochs = (pl.col("step") - n) // size  # _steps counted (epoch - base) x size + n
    counted = epochs * train + pl.min_horizontal(n, pl.lit(train))
    bar_rows = is_bar & (total == size) & pl.col("step").is_not_null()
    notes.append(
        f"generic reader: the training bar counts {size} batches an epoch, {size - train} of "
        f"them validation (drawn under `Validating:`): steps are counted over the {train} "
        f"training batches, and the {hit.filter(during).height} redraws made while "
        "validating belong to the epoch's last training step"
    )
    step = pl.when(bar_rows).then(counted).otherwise(pl.col("step"))
    return hit.with_columns(step.alias("step"))


def _validating(hit: pl.DataFrame, prepared: pl.DataFrame, is_bar: pl.Expr) -> pl.Series:
    """Per row of `hit`: the bar line is drawn while it validates, on a `Validating:` line
    or right after one (tqdm moves the cursor back up, `ESC[A`, to redraw the main bar),
    no other main-bar line between them."""
    val = prepared.filter(pl.col("text").str.contains(VALIDATING, literal=True))
    marks = pl.concat(
        [
            val.select("line", pl.lit(True).alias("v")),
            hit.filter(is_bar).select("line", pl.lit(False).alias("v")),
        ]
    )
    marks = marks.group_by("line").agg(pl.col("v").any()).sort("line")
    rows = hit.select("line", (pl.col("line") - 1).alias("prev")).with_row_index("i")
    found = rows.sort("prev").join_asof(marks, left_on="prev", right_on="line", strategy="backward")
    after = found.sort("i")["v"].fill_null(False)
    glued = hit["text"].str.contains(VALIDATING, literal=True)
    return (glued | after).alias("_validating")


def carried_once(
    rows: pl.DataFrame, bars: list[str], carried: list[str], notes: list[str]
) -> pl.DataFrame:
    """`rows` (line, tpl, raw_name, value, ...) with each of the `carried` names on a bar
    line of a template in `bars` (Lightning's `val_loss=2.45` in the postfix) kept only
    where its value first appears or changes: the bar shows the last validation's value on
    every redraw until the next validation, one value, not one a training step."""
    ordered = rows.with_row_index("_order").sort("line", maintain_order=True)
    same = pl.col("value").eq_missing(pl.col("value").shift(1).over("raw_name"))
    on_bar = pl.col("raw_name").is_in(carried) & pl.col("tpl").is_in(bars)
    repeated = ordered.select((on_bar & same).alias("r")).to_series()
    if not repeated.any():
        return rows
    names = ", ".join(f"`{n}`" for n in carried)
    notes.append(
        f"generic reader: the progress bar shows {names} of the last validation on every "
        f"redraw: stored once, where its value first appears or changes ({repeated.sum()} "
        "repeats left out)"
    )
    return ordered.filter(~repeated).sort("_order").drop("_order")
