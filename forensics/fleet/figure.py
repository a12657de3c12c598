"""One plotly figure: the loss of every run around a recurring step, overlaid."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from forensics.store import Store

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from forensics.fleet.summary import FleetRecurrence

HALF_WINDOW = 40  # steps either side of the recurring step


def _loss(store: Store, run_id: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    rows = store.con.execute(
        "SELECT step, first(value) FROM metrics WHERE run_id = ? AND metric = 'loss' "
        "AND step BETWEEN ? AND ? GROUP BY step ORDER BY step",
        [run_id, lo, hi],
    ).fetchall()
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows], dtype=float)


def overlay(store: Store, rec: FleetRecurrence) -> go.Figure:
    """Spiking runs in colour, each with its own dash pattern (runs that share the data order
    lie on top of each other: the fleet review saw 2 curves for 4 runs), runs that cover the
    step without spiking dotted grey."""
    import plotly.graph_objects as go

    from forensics.fleet.render import short_names

    lo, hi = rec.step - HALF_WINDOW, rec.step + HALF_WINDOW
    twins = {r: t for r, _, t in rec.repeats}  # a run repeated: on top of the run it tracks
    spiking = [r for r, _ in rec.runs] + list(twins)
    names = short_names(spiking + rec.absent)
    fig = go.Figure()
    for k, run_id in enumerate(spiking):
        st, v = _loss(store, run_id, lo, hi)
        dash = DASHES[k % len(DASHES)]
        label = _short(names[run_id])
        if run_id in twins:
            label = f"{_short(names[run_id], 30)} (tracks {_short(names[twins[run_id]], 30)})"
        fig.add_trace(
            go.Scatter(x=st, y=v, mode="lines", name=label, line={"width": 2, "dash": dash})
        )
    for run_id in rec.absent:
        st, v = _loss(store, run_id, lo, hi)
        fig.add_trace(
            go.Scatter(
                x=st,
                y=v,
                mode="lines",
                name=f"{_short(names[run_id])} (no spike)",
                line={"width": 1, "dash": "dot", "color": "#999999"},
            )
        )
    fig.add_vline(x=rec.step, line={"color": "#d62728", "dash": "dash", "width": 1})
    fig.update_layout(
        title=f"Loss of {len(rec.runs)} runs around step {rec.step} (recurrence {rec.id})"
        + (f", {len(twins)} more tracking them" if twins else ""),
        xaxis_title="step",
        yaxis_title="loss",
        template="plotly_white",
        width=1000,
        height=480,
        legend={"font": {"size": 9}},
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def _short(run_id: str, width: int = 48) -> str:
    return run_id if len(run_id) <= width else run_id[: width - 1] + "…"


def write_overlay(
    store: Store, rec: FleetRecurrence, out: Path, png: bool = True, plotly_js: Path | None = None
) -> tuple[Path, Path | None, str | None]:
    """HTML always (it loads the plotly.min.js beside it, so it opens offline); PNG when a
    browser is found."""
    from forensics.report.export import write_html

    out.mkdir(parents=True, exist_ok=True)
    fig = overlay(store, rec)
    html = out / f"recurrence-{rec.id}.html"
    write_html(fig, html, f"recurrence-{rec.id}", plotly_js)
    if not png:
        return html, None, None
    path = out / f"recurrence-{rec.id}.png"
    try:
        from forensics.report.export import find_chromium, write_pngs

        browser, why = find_chromium()
        if browser is None:
            return html, None, f"no PNG: {why}"
        write_pngs({path: fig}, browser)
    except Exception as exc:  # a missing browser must not lose the HTML and the table
        return html, None, f"no PNG: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return html, path if path.exists() else None, None
