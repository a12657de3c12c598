"""Which figures a report has, under which stable names, built from which data.

Names are stable (`run-overview`, `spike-01-metrics`, `spike-01-tokens`,
`spike-01-act-norms`) so that links and golden files do not change between runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from forensics.report import figures
from forensics.report.export import FigureSpec
from forensics.report.model import Incident

if TYPE_CHECKING:
    from forensics.report.context import IncidentView


def plan(
    frame: pl.DataFrame,
    metric: str,
    views: list[IncidentView],
    run: str,
    abandoned: list[tuple[str, pl.DataFrame]] | None = None,
) -> list[FigureSpec]:
    """The overview (with the loss of each attempt the run went back from), then per
    incident its metrics and any replay figures, by stable name."""
    incs = [v.inc for v in views]
    facts = {v.n: v.facts for v in views}
    types = {v.n: (v.type.key, v.type.name) for v in views}
    marked = ", incidents marked" if views else ""
    specs = [
        FigureSpec(
            "run-overview",
            f"{metric} over the whole run{marked}",
            lambda: figures.overview(frame, metric, incs, facts, types, run, abandoned),
        )
    ]
    for v in views:
        if v.full:  # minor incidents are one line of the summary: no figure of their own
            specs += _incident_figures(frame, v)
    return specs


def _incident_figures(frame: pl.DataFrame, v: IncidentView) -> list[FigureSpec]:
    inc, f, n = v.inc, v.facts, v.n
    title = f"Spike #{n} (type {v.type.key}, {v.type.name})"
    specs = [
        FigureSpec(
            f"{v.slug}-metrics",
            f"Spike #{n}: {_plotted(figures.window(frame, f), inc.metric)}",
            lambda: figures.incident(frame, inc, f, title),
        )
    ]
    hist = _replay_series(inc, "token_histogram", ("token_ids", "counts"))
    if hist is not None:
        specs.append(
            FigureSpec(
                f"{v.slug}-tokens",
                f"Spike #{n}: token histogram of the batch",
                lambda: figures.token_histogram(hist, n),
            )
        )
    acts = _replay_series(inc, "act_norms", ("layer", "value"))
    if acts is not None:
        specs.append(
            FigureSpec(
                f"{v.slug}-act-norms",
                f"Spike #{n}: per-layer activation norms",
                lambda: figures.act_norms(acts, n),
            )
        )
    v.figure_names = {s.name.removeprefix(f"{v.slug}-"): s.name for s in specs}
    return specs


def _plotted(part: pl.DataFrame, metric: str) -> str:
    """What the incident figure shows, in words: the rows it draws in its window."""
    names = {"loss": "loss", "grad_norm": "grad norm", "lr": "LR", "loss_scale": "loss scale"}
    words = [names.get(m, m) for m in figures.incident_rows(part, metric)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _replay_series(inc: Incident, key: str, required: tuple[str, ...]) -> dict[str, Any] | None:
    """The first replay's numbers[key] that has the required lists (probes in name order)."""
    for r in inc.replays:
        data = r.numbers.get(key)
        if _aligned_lists(data, required):
            return data  # type: ignore[no-any-return]
    return None


def _aligned_lists(data: Any, keys: tuple[str, ...]) -> bool:
    """`data` is a dict whose `keys` are non-empty lists of one common length."""
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in keys):
        return False
    return len({len(data[k]) for k in keys}) == 1 and bool(data[keys[0]])
