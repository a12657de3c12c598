"""Metrics coverage: what the run logged, how often, and what it should also log."""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics.report import series
from forensics.report.knowledge import Knowledge

# A standard metric a run logs in another form: `tokens_per_s` is asked for because pricing
# an incident needs the time per step, which OLMo's per-device throughput or a logged time
# per iteration (Megatron's iteration-time, `elapsed time per iteration (ms)`) gives as well;
# with one of them logged, what pricing still lacks is the GPU count (the cost section says
# so), not a throughput.
STANDS_IN = {"tokens_per_s": ("tokens_per_s_device", "iter_time_s", "iter_time_ms")}


def coverage(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-layer metrics (`act_norm/3`...) folded into one row per family.

    Only a numeric suffix is a layer (canon.py names per-layer metrics `<name>/<int>`): a
    logger's own slashed names (OLMo's `system/peak_gpu_memory_(mb)`) are metrics of their
    own, not layers of a family."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        family, _, layer = r["metric"].partition("/")
        layered = layer.isdigit()
        name = f"{family}/<layer>" if layered else r["metric"]
        seen = name in out
        row = out.setdefault(name, {**r, "metric": name, "layers": 0})
        row["layers"] += 1 if layered else 0
        row["n"], row["first"] = max(row["n"], r["n"]), min(row["first"], r["first"])
        row["last"] = max(row["last"], r["last"])
        if seen and r.get("nonfinite"):  # a layer's NaN/Inf counts for its family
            row["nonfinite"] = (row.get("nonfinite") or 0) + r["nonfinite"]
            firsts = (row.get("first_nonfinite"), r["first_nonfinite"])
            row["first_nonfinite"] = min(x for x in firsts if x is not None)
    return sorted(out.values(), key=lambda r: (r["metric"] != "loss", r["metric"]))


def missing(
    coverage: list[dict[str, Any]], config: dict[str, Any], kb: Knowledge
) -> list[tuple[str, str]]:
    """Standard metrics this run did not log, with why each matters."""
    logged = {r["metric"].split("/")[0] for r in coverage}
    logged |= {name for name, stand_ins in STANDS_IN.items() if logged & set(stand_ins)}
    precision = str(config.get("precision", "")).lower()
    out = []
    for name, why in kb.metrics.items():
        if name in logged:
            continue
        if name in kb.fp16_only and precision and precision != "fp16":
            continue
        if name in kb.fp16_only and not precision:
            why = (
                why.rstrip(".")
                + " (only if the run used fp16: its precision is not in the config)."
            )
        out.append((name, why))
    return out


def span(frame: pl.DataFrame, metric: str) -> dict[str, Any]:
    """First and last logged step of `metric`, how many, and the wall-clock range if known."""
    col = series.column(frame, metric)
    span: dict[str, Any] = {
        "first": None,
        "last": None,
        "steps": col.height,
        "start": None,
        "end": None,
    }
    if col.height:
        span["first"], span["last"] = int(col["step"][0]), int(col["step"][-1])
    if "wall_time" in frame.columns and frame["wall_time"].drop_nulls().len():
        span["start"], span["end"] = frame["wall_time"].min(), frame["wall_time"].max()
    return span
