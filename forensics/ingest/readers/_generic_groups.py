"""Values a text log prints as a dict under one key, one per parameter group.

InternEvo logs `grad_norm={'0_default': 2.16, '1_fp32': 0.0}`: one gradient norm per
parameter group, each group clipped on its own (`hybrid_zero_optim.py`). The generic reader
names each entry `grad_norm/<group>` (the group's name without InternEvo's leading index)
and stores the norm of the whole gradient, sqrt of the sum of the groups' squares, as
`grad_norm`, so that the detector sees one series whatever the number of groups.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from forensics.canon import alias_table
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

# `grad_norm={` or `'grad_norm': {` left open at the end of a template's literal text
_OPEN = re.compile(r"['\"]?([A-Za-z][\w./-]*)['\"]?\s*[=:]\s*\{([^{}]*)\Z")
# the entry's key right before its value: `'1_fp32': ` (the index was a slot), `'default': `
_ENTRY = re.compile(r"(?:^|[{,])\s*['\"]?([A-Za-z_][\w.-]*)['\"]?\s*:\s*\Z")
# InternEvo returns a group's norm as -1 when it found an Inf and -2 for a NaN
# (`if -1 in norms.values(): found_inf = True`); a norm is never negative otherwise.
_SENTINELS = {-1.0: float("inf"), -2.0: float("nan")}


def dict_entries(lits: list[str]) -> dict[int, tuple[str, str]]:
    """slot -> (key of the dict, entry name) for the values printed inside `key={...}`."""
    out: dict[int, tuple[str, str]] = {}
    prefix = ""
    for i, lit in enumerate(lits[:-1]):
        if prefix and "}" in lit:
            prefix, lit = "", lit[lit.rindex("}") + 1 :]
        opened = _OPEN.search(lit)
        if opened:
            prefix, lit = opened.group(1), opened.group(2)
        entry = _ENTRY.search(lit) if prefix else None
        if entry and entry.group(1).strip("_"):
            out[i] = (prefix, entry.group(1).strip("_"))
    return out


def group_totals(rows: pl.DataFrame, entries: dict[str, str], notes: list[str]) -> pl.DataFrame:
    """Rows (line, step, raw_name, value, wall_time) plus, per line, the whole gradient's
    norm of each per-group grad-norm dict (`entries`: raw name -> dict key); the groups'
    sentinel values become Inf / NaN, in the groups and in the total."""
    table = alias_table()
    norms = {n: k for n, k in entries.items() if table.canonical(k) == "grad_norm"}
    if not norms:
        return rows
    mine = pl.col("raw_name").is_in(list(norms))
    value = pl.col("value")
    fixed = rows.filter(mine).with_columns(
        pl.when(value == -1.0)
        .then(_SENTINELS[-1.0])
        .when(value == -2.0)
        .then(_SENTINELS[-2.0])
        .otherwise(value)
        .alias("value"),
        pl.col("raw_name").replace_strict(norms).alias("_key"),
    )
    totals = fixed.group_by("line", "_key", maintain_order=True).agg(
        pl.col("step").first(),
        (value**2).sum().sqrt().alias("value"),
        pl.col("wall_time").first(),
    )
    notes.append(
        f"generic reader: {', '.join(sorted(norms))}: one norm per parameter group; "
        "grad_norm is the whole gradient's, sqrt of the sum of their squares (-1 / -2 in a "
        "group: Inf / NaN, as InternEvo writes them)"
    )
    totals = totals.select("line", "step", pl.col("_key").alias("raw_name"), "value", "wall_time")
    return pl.concat([rows.filter(~mine), fixed.drop("_key"), totals]).sort(
        "line", maintain_order=True
    )
