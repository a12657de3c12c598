"""A log's own report that a batch held data the model cannot take.

llm.c prints `Error: Token out of vocabulary at train_gpt2.cu:675` with `Token: 678715752`
and `Vocab: 50257` below it, and trains on: the loss may not move, yet a token id eight
digits long is corrupt input, what this tool exists to flag. Such a line is kept as an event
of kind `data_error` at the step of the record it is printed in or after (its detail the
report's own words), for the report to quote; detection does not read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:  # the generic reader is imported by every ingest; polars loads when it runs
    pl = lazy_module("polars")

DATA_ERROR = (
    r"(?i)\btoken (?:id )?out of vocab(?:ulary)?\b|\btoken id\b.{0,40}\bout of (?:range|bounds)\b"
    r"|\binvalid token id\b"
)
_SAID = r"(?i)((?:error:\s*)?(?:token|invalid token).*?)\s*$"


def data_error_events(lines: pl.DataFrame, records: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """Events (step, kind, detail) for the data-error reports among `lines` (line, text), at
    the step of the last record line at or before each; none when the log has no such line."""
    hit = lines.filter(pl.col("text").str.contains(DATA_ERROR))
    if hit.height == 0:
        return pl.DataFrame(schema={"step": pl.Int64, "kind": pl.Utf8, "detail": pl.Utf8})
    found = hit.select("line", pl.col("text").str.extract(_SAID, 1).alias("detail")).join_asof(
        records.sort("line"), on="line", strategy="backward"
    )
    notes.append(
        f"generic reader: {found.height} report(s) of data the model cannot take "
        f"(`{str(found['detail'][0])[:60]}`): events of kind 'data_error' at the step of "
        "the record printed with or before each"
    )
    return found.select("step", pl.lit("data_error").alias("kind"), "detail")
