"""A bare `scale` printed beside the loss is the fp16 loss scale when it moves in powers of two.

MiniLLM (LMOps) prints `| lr: 8.5000e-07 | scale:  32.00 |` on every step line and
DeepSpeed's `OVERFLOW! ... reducing to 16` between them: that `scale` is the dynamic loss
scale, which only a halving or a doubling changes. Stored under its raw name, the run
looked as if it logged no loss scale, and an fp16 overflow spike read as a hardware fault.
`scale` alone also names image scales, temperature scales, init scales: only a series whose
every finite value is a power of two, not all of them 1, is read as the loss scale.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:  # the generic reader is imported by every ingest; polars loads when it runs
    pl = lazy_module("polars")

_BARE = {"scale", "cur_scale", "cur scale"}


def _powers_of_two(values: list[float]) -> bool:
    finite = [v for v in values if math.isfinite(v)]
    if not finite or all(v == 1.0 for v in finite):
        return False
    return all(v > 0 and math.log2(v) == round(math.log2(v)) for v in finite)


def scale_as_loss_scale(rows: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """`rows` (raw_name, value, ...) with a bare scale that moves in powers of two renamed
    `loss_scale`, and a note saying so; unchanged otherwise."""
    names = [n for n in rows["raw_name"].unique().to_list() if n.strip().lower() in _BARE]
    renamed = {}
    for name in sorted(names):
        values = rows.filter(pl.col("raw_name") == name)["value"].to_list()
        if _powers_of_two(values):
            renamed[name] = "loss_scale"
            notes.append(
                f"generic reader: `{name}` moves in powers of two "
                f"({_span(values)}): read as the fp16 loss scale (`loss_scale`)"
            )
    if not renamed:
        return rows
    return rows.with_columns(pl.col("raw_name").replace(renamed))


def _span(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    return f"{min(finite):g} to {max(finite):g}"
