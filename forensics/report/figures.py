"""Plotly figures for the report: the run overview, each incident, and replay evidence.

Each builder returns a `go.Figure` and touches no files (export.py writes them), so the
same figure goes to PNG and to interactive HTML. Long curves are decimated with a min/max
per bucket, which keeps every spike visible while keeping the HTML small.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from forensics.report import series
from forensics.report.fmt import sentence
from forensics.report.incident import Facts
from forensics.report.model import Incident

WIDTH = 1000
ROW_HEIGHT = 220
# Per trace, after min/max decimation: ~1,500 points x 8 bytes (int32 step + float32
# value, base64 in the HTML) keep a 4-row figure under 100 KB however long the run is.
# Only what is drawn is decimated; detection and the text read every logged point.
MAX_POINTS = 1500
FONT = {"family": "DejaVu Sans, Arial, sans-serif", "size": 14}
TYPE_COLORS = {"1": "#ff7f0e", "2": "#9467bd", "3": "#d62728"}
OTHER_COLOR = "#7f7f7f"
LABELS = {
    "loss": "loss",
    "grad_norm": "grad norm, pre-clip",
    "lr": "learning rate",
    "loss_scale": "loss scale",
}
LINEAR = {"lr"}  # schedules read better on a linear axis, whatever their range
MAX_NAN_MARKERS = 60
INCIDENT_ROWS = ["grad_norm", "lr", "loss_scale"]  # below the incident's own metric
LEGEND = {"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 1.0, "xanchor": "right"}


def layout(fig: go.Figure, title: str, rows: int) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 18}, "x": 0.01, "xanchor": "left"},
        template="plotly_white",
        font=FONT,
        width=WIDTH,
        height=110 + ROW_HEIGHT * rows,
        margin={"l": 90, "r": 30, "t": 80, "b": 60},
        showlegend=False,
        hovermode="x unified",
    )
    return fig


def decimate(steps: Sequence[int], values: Sequence[float]) -> tuple[list[int], list[float]]:
    """At most ~MAX_POINTS points: per bucket keep the min and the max, in step order."""
    n = len(steps)
    if n <= MAX_POINTS:
        return list(steps), list(values)
    size = math.ceil(n / (MAX_POINTS // 2))
    keep: set[int] = set()
    for lo in range(0, n, size):
        idx = [i for i in range(lo, min(lo + size, n)) if math.isfinite(values[i])]
        if idx:
            keep.add(min(idx, key=lambda i: values[i]))
            keep.add(max(idx, key=lambda i: values[i]))
    order = sorted(keep)
    return [steps[i] for i in order], [values[i] for i in order]


def _fits_int32(xs: Sequence[int]) -> bool:
    return not xs or (min(xs) > -(2**31) and max(xs) < 2**31)


def use_log(values: Sequence[float]) -> bool:
    """Log axis when the positive finite values span more than 3×."""
    pos = [v for v in values if math.isfinite(v) and v > 0]
    return len(pos) == len(values) and bool(pos) and max(pos) / min(pos) > 3


def add_curve(fig: go.Figure, data: pl.DataFrame, metric: str, row: int, color: str) -> bool:
    """One metric as a line; NaN/Inf steps as red crosses along the top, with a label.

    Returns whether its y axis is logarithmic. Arrays go to plotly as numpy (validating
    Python lists of thousands of points is plotly's slowest path).
    """
    steps, vals = data["step"].to_list(), [float(v) for v in data["value"].to_list()]
    finite = [(s, v) for s, v in zip(steps, vals, strict=True) if math.isfinite(v)]
    xs, ys = decimate([s for s, _ in finite], [v for _, v in finite])
    name = LABELS.get(metric, metric)
    gx, gy = broken_at_gaps(xs, ys)
    fig.add_trace(
        go.Scatter(
            x=np.asarray(gx, dtype=np.int32 if _fits_int32(gx) else np.int64),
            y=np.asarray(gy, dtype=np.float32),
            mode="lines",
            name=name,
            line={"color": color, "width": 1.6},
        ),
        row=row,
        col=1,
    )
    bad = [s for s, v in zip(steps, vals, strict=True) if not math.isfinite(v)]
    log = _y_axis(fig, metric, name, ys, row)
    if bad:  # (a panel with no finite value, ms-swift's grad norm, shows only its crosses)
        _nan_markers(fig, bad, max(ys) if ys else 1.0, name, row, log, every=not ys)
    return log


GAP_FACTOR = 20  # a step gap this many times the typical one is a hole in the log


def broken_at_gaps(xs: list[int], ys: list[float]) -> tuple[list[int], list[float]]:
    """The curve with a NaN point in each hole of the log (a gap of GAP_FACTOR typical
    intervals: Megatron's golden values hold 1.7k-step holes), so the line breaks there
    instead of drawing a straight segment across steps where nothing was logged."""
    if len(xs) < 3:
        return xs, ys
    d = np.diff(np.asarray(xs, dtype=np.float64))
    holes = np.flatnonzero(d > GAP_FACTOR * max(float(np.median(d)), 1.0))
    if not len(holes):
        return xs, ys
    gx: list[int] = []
    gy: list[float] = []
    prev = 0
    for h in map(int, holes):
        gx += [*xs[prev : h + 1], (xs[h] + xs[h + 1]) // 2]
        gy += [*ys[prev : h + 1], math.nan]
        prev = h + 1
    return gx + xs[prev:], gy + ys[prev:]


def _nan_markers(
    fig: go.Figure, bad: list[int], top: float, name: str, row: int, log: bool, every: bool = False
) -> None:
    shown = bad[:: max(1, len(bad) // MAX_NAN_MARKERS)]
    fig.add_trace(
        go.Scatter(
            x=shown,
            y=[top] * len(shown),
            mode="markers",
            name=f"{name}: NaN/Inf",
            marker={"symbol": "x", "color": "#d62728", "size": 8},
        ),
        row=row,
        col=1,
    )
    xs = [x for t in fig.data if t.x is not None for x in t.x if x is not None]
    early = not xs or bad[0] <= (min(xs) + max(xs)) / 2  # the label reads into the plot
    n = len(bad)
    text = f"NaN/Inf at {n} logged step{'s' if n != 1 else ''}, the first at step {bad[0]}"
    if every:  # the crosses' height means nothing then: no numbers on the axis
        text = f"NaN/Inf at every logged step shown ({n}): no finite value to draw"
        fig.update_yaxes(showticklabels=False, row=row, col=1)
    fig.add_annotation(
        x=bad[0],
        y=math.log10(top) if log else top,
        text=text,
        showarrow=False,
        xanchor="left" if early else "right",
        yanchor="top",
        font={"color": "#d62728", "size": 12},
        row=row,
        col=1,
    )


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values for a log axis over [lo, hi]: 1-2-5 per decade, or only the decades
    (every other one past eight) when that would crowd the axis; finer when that gives
    fewer than three."""
    if not (0 < lo <= hi and math.isfinite(hi)):
        return []
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    decades = [10.0**e for e in range(first, last + 1)]
    steps = (1, 2, 5) if last - first <= 2 else (1,)
    vals = [d * m for d in decades for m in steps if lo <= d * m <= hi]
    if len(vals) < 3:
        vals = [d * m for d in decades for m in (1, 1.5, 2, 3, 5, 7) if lo <= d * m <= hi]
    while len(vals) > 8:
        vals = vals[::2]
    return vals


def tick_label(v: float) -> str:
    """A tick label: 3 significant digits, k/M/G above a thousand."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def _y_axis(fig: go.Figure, metric: str, name: str, ys: list[float], row: int) -> bool:
    """Log when the values span more than 3× (not for schedules); a flat line gets a range.

    Returns whether the axis is logarithmic (annotations then take log10 coordinates).
    """
    log = metric not in LINEAR and use_log(ys)
    fig.update_yaxes(
        title_text=name + (" (log)" if log else ""), row=row, col=1, type="log" if log else "linear"
    )
    if metric == "lr":
        fig.update_yaxes(exponentformat="e", row=row, col=1)
    if log:
        # Plotly's own log ticks label minor values as bare digits ("5", "2", "10k", "5"),
        # which reads as nonsense on a short range: give it full 1-2-5 labels instead.
        vals = log_ticks(min(ys), max(ys))
        fig.update_yaxes(tickvals=vals, ticktext=[tick_label(v) for v in vals], row=row, col=1)
    if ys and min(ys) == max(ys):
        v = ys[0]
        span = [v * 0.5, v * 1.5] if v else [-1, 1]
        fig.update_yaxes(range=span, exponentformat="none", row=row, col=1)
    return log


def vline(step: int, color: str, dash: str) -> dict[str, Any]:
    """A vertical line through every row (the rows share the x axis)."""
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": step,
        "x1": step,
        "y0": 0,
        "y1": 1,
        "line": {"color": color, "dash": dash, "width": 1.5},
    }


def vband(x0: int, x1: int, color: str) -> dict[str, Any]:
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": x0,
        "x1": x1,
        "y0": 0,
        "y1": 1,
        "fillcolor": color,
        "opacity": 0.18,
        "line": {"width": 0},
        "layer": "below",
    }


def label(step: int, text: str, color: str, side: str = "left") -> dict[str, Any]:
    """Text above the plot at `step`, on `side` of the line so neighbours do not overlap."""
    return {
        "x": step,
        "y": 1.0,
        "xref": "x",
        "yref": "paper",
        "text": text,
        "showarrow": False,
        "yanchor": "bottom",
        "xanchor": "right" if side == "left" else "left",
        "font": {"color": color, "size": 13},
    }


def decorate(fig: go.Figure, shapes: list[dict[str, Any]], notes: list[dict[str, Any]]) -> None:
    """Add shapes and annotations in one layout update (add_vline per row is slow)."""
    fig.update_layout(shapes=shapes, annotations=[*fig.layout.annotations, *notes])


def overview(
    frame: pl.DataFrame,
    metric: str,
    incidents: list[Incident],
    facts: dict[int, Facts],
    types: dict[int, tuple[str, str]],
    run: str,
    abandoned: list[tuple[str, pl.DataFrame]] | None = None,
) -> go.Figure:
    """The whole run: the loss (and grad norm / LR when logged) with every incident marked,
    and the loss of each attempt the run went back from (`abandoned`: label, step/value).

    `types` maps incident id to its type (key "1"/"2"/"3", which picks the colour; name).
    """
    rows = [m for m in [metric, "grad_norm", "lr"] if series.column(frame, m).height]
    rows = rows or [metric]
    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.05)
    for i, m in enumerate(rows, start=1):
        add_curve(fig, series.column(frame, m), m, i, "#1f77b4" if i == 1 else "#555555")
    for text, data in abandoned or []:
        _abandoned_curve(fig, data, text)
    shapes, notes = [], []
    step_list = frame["step"].to_list()
    span = float(max(step_list) - min(step_list)) if step_list else 1.0
    ends: list[float] = []  # right end (in steps) of the last label on each text row
    for inc in incidents:
        key, name = types.get(inc.incident_id, ("", ""))
        color = TYPE_COLORS.get(key, OTHER_COLOR)
        f = facts[inc.incident_id]
        end = max(s for s in (inc.peak_step, inc.end_step, f.symptoms.recovery) if s is not None)
        shapes += [
            vband(inc.onset_step, max(end, inc.onset_step + 1), color),
            vline(inc.onset_step, color, "dot"),
        ]
        text = f"#{inc.incident_id} {name}" if len(incidents) <= 4 else f"#{inc.incident_id}"
        notes.append(_stacked(label(inc.onset_step, text, color, "right"), ends, span))
    decorate(fig, shapes, notes)
    fig.update_xaxes(title_text="step", row=len(rows), col=1)
    n = len(incidents)
    marked = f"{n} incident{'s' if n != 1 else ''} marked" if n else "no incident detected"
    if abandoned:
        k = len(abandoned)
        marked += f"; {k} abandoned attempt{'s' if k != 1 else ''} dashed"
    title = f"{sentence(metric)} over the whole run: {marked}<br><sup>run {_short(run)}</sup>"
    return _room(layout(fig, title, len(rows)), ends)


def _abandoned_curve(fig: go.Figure, data: pl.DataFrame, text: str) -> None:
    """An abandoned attempt's loss over the run's (row 1), dashed; its NaN/Inf steps as
    crosses at its own top."""
    steps, vals = data["step"].to_list(), [float(v) for v in data["value"].to_list()]
    finite = [(s, v) for s, v in zip(steps, vals, strict=True) if math.isfinite(v)]
    line = {"color": "#d62728", "width": 1.2, "dash": "dash"}
    xs, ys = [s for s, _ in finite], [v for _, v in finite]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=text, line=line), row=1, col=1)
    bad = [s for s, v in zip(steps, vals, strict=True) if not math.isfinite(v)]
    if bad and ys:
        shown = bad[:: max(1, len(bad) // MAX_NAN_MARKERS)]
        marker = {"symbol": "x", "color": "#d62728", "size": 8}
        trace = go.Scatter(
            x=shown, y=[max(ys)] * len(shown), mode="markers", name=f"{text}: NaN/Inf",
            marker=marker,
        )  # fmt: skip
        fig.add_trace(trace, row=1, col=1)
        text += f", NaN/Inf from step {bad[0]}"
    if ys:
        top = max(ys)
        log = fig.layout.yaxis.type == "log"
        fig.add_annotation(
            x=steps[-1], y=math.log10(top) if log else top, text=" " + text, showarrow=False,
            xanchor="left", yanchor="middle", font={"color": "#d62728", "size": 12},
            row=1, col=1,
        )  # fmt: skip


def _stacked(note: dict[str, Any], ends: list[float], span: float) -> dict[str, Any]:
    """A label that extends right of its step, raised to the lowest row of labels where it
    overlaps none (`span`: the steps the x axis shows; ~110 characters fill it)."""
    note["y"] = 1.0 + 0.07 * _text_row(ends, note["x"], len(note["text"]) * span / 110)
    return note


def _room(fig: go.Figure, ends: list[float]) -> go.Figure:
    """Room above the plot for the extra rows of labels that _stacked opened."""
    extra = 22 * max(len(ends) - 1, 0)
    return fig.update_layout(height=fig.layout.height + extra, margin_t=80 + extra)


def _text_row(ends: list[float], x: float, width: float) -> int:
    """The lowest row of labels where a label from x to x + width overlaps no other (rows
    grow as needed; `ends` holds each row's right end and is updated)."""
    for row, right in enumerate(ends):
        if x > right:
            ends[row] = x + width
            return row
    ends.append(x + width)
    return len(ends) - 1


def _short(text: str, width: int = 90) -> str:
    """Long run names (Megatron test ids) would run off the figure."""
    return text if len(text) <= width else text[: width - 1] + "…"


def window(frame: pl.DataFrame, f: Facts) -> pl.DataFrame:
    """The rows an incident figure draws: its window's steps."""
    lo, hi = f.window
    return frame.filter(pl.col("step").is_between(lo, hi))


def incident_rows(part: pl.DataFrame, metric: str) -> list[str]:
    """The incident figure's rows, top down: the incident's metric, then the loss and
    INCIDENT_ROWS that hold a value in its window (the figure's alt text names the same)."""
    rows = [metric] + [m for m in ["loss", *INCIDENT_ROWS] if m != metric]
    return [m for m in rows if series.column(part, m).height] or [metric]


def incident(frame: pl.DataFrame, inc: Incident, f: Facts, title: str) -> go.Figure:
    """Loss, grad norm, LR and loss scale around one incident, with onset/peak/recovery."""
    lo, hi = f.window
    part = window(frame, f)
    rows = incident_rows(part, inc.metric)
    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.04)
    logs = [
        add_curve(fig, series.column(part, m), m, i, "#1f77b4" if i == 1 else "#555555")
        for i, m in enumerate(rows, start=1)
    ]
    shapes = [vline(inc.onset_step, "#ff7f0e", "dash")]
    notes = [label(inc.onset_step, f"onset {inc.onset_step}", "#ff7f0e", "left")]
    ends: list[float] = []  # peak and recovery labels extend right: stacked when they meet
    span = float(max(hi - lo, 1))
    if inc.peak_step != inc.onset_step:
        shapes.append(vline(inc.peak_step, "#d62728", "dot"))
        peak = label(inc.peak_step, f"peak {inc.peak_step}", "#d62728", "right")
        notes.append(_stacked(peak, ends, span))
    shapes += _dip_band(inc, lo, hi, notes, ends, span)
    rec = f.symptoms.recovery
    if rec is not None:
        shapes.append(vline(rec, "#2ca02c", "dash"))
        notes.append(_stacked(label(rec, f"recovered {rec}", "#2ca02c", "right"), ends, span))
    if series.is_finite(inc.pre_value):
        shapes.append(_level(float(inc.pre_value)))  # type: ignore[arg-type]
        notes.append(_level_label(float(inc.pre_value), logs[0]))  # type: ignore[arg-type]
    decorate(fig, shapes, notes)
    fig.update_xaxes(title_text="step", row=len(rows), col=1)
    return _room(layout(fig, f"{title}, steps {lo}–{hi}", len(rows)), ends)


def _dip_band(
    inc: Incident, lo: int, hi: int, notes: list[dict[str, Any]], ends: list[float], span: float
) -> list[dict[str, Any]]:
    """The collapse before the onset that detection stored (evidence `dip`, the steps the
    skip advice takes out), shaded; labelled where it is wide enough to hold its label."""
    dip = next((str(e["value"]) for e in inc.evidence if e.get("key") == "dip"), None)
    if not dip or "-" not in dip:
        return []
    a, b = (int(x) for x in dip.split("-", 1))
    a, b = max(a, lo), min(b, hi)
    if b < a:
        return []
    if (b - a) / span >= 0.2:
        notes.append(_stacked(label(a, "collapse (skipped)", "#7f7f7f", "right"), ends, span))
    return [vband(a, b, "#7f7f7f")]


def _level(y: float) -> dict[str, Any]:
    """The back-on-track level across the top row."""
    return {
        "type": "line",
        "xref": "x domain",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": "#2ca02c", "dash": "dot", "width": 1},
    }


def _level_label(y: float, log: bool) -> dict[str, Any]:
    return {
        "x": 0,
        "y": math.log10(y) if log and y > 0 else y,
        "xref": "x domain",
        "yref": "y",
        "text": "pre-spike trend at the onset",
        "showarrow": False,
        "xanchor": "left",
        "yanchor": "top",
        "font": {"color": "#2ca02c", "size": 11},
    }


def token_histogram(data: dict[str, Any], n: int, top: int = 30) -> go.Figure:
    """Token counts in the offending batch next to what the training frequency predicts."""
    ids = [int(t) for t in data["token_ids"]]
    counts = [float(c) for c in data["counts"]]
    labels = [str(x) for x in data.get("labels") or []]
    names = [f"'{labels[i]}' ({t})" if i < len(labels) else str(t) for i, t in enumerate(ids)]
    freq = data.get("train_freq")
    total = float(data.get("batch_tokens") or sum(counts))
    expected = [float(p) * total for p in freq] if freq else None
    order = _by_surprise(counts, expected)[:top]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=[names[i] for i in order],
            y=[counts[i] for i in order],
            name="count in the offending batch",
            marker_color="#d62728",
        )
    )
    if expected:
        fig.add_trace(
            go.Bar(
                x=[names[i] for i in order],
                y=[max(expected[i], 1e-3) for i in order],
                name="expected from training frequency",
                marker_color="#7f7f7f",
            )
        )
    fig.update_layout(barmode="group", showlegend=True)
    shown = [counts[i] for i in order] + (
        [max(expected[i], 1e-3) for i in order] if expected else []
    )
    vals = log_ticks(min([v for v in shown if v > 0] or [1.0]), max(shown or [1.0]))
    fig.update_yaxes(
        type="log",
        title_text="tokens in batch (log)",
        tickvals=vals,
        ticktext=[tick_label(v) for v in vals],
    )
    fig.update_xaxes(title_text="token (id)", tickangle=-45, type="category")
    fig = layout(fig, f"Spike #{n}: most over-represented tokens of the offending batch", 2)
    return fig.update_layout(hovermode="closest", margin={"b": 140}, showlegend=True, legend=LEGEND)


def _by_surprise(counts: list[float], expected: list[float] | None) -> list[int]:
    """Token indices, the most over-represented (count ÷ expected) first; ties by count."""
    if not expected:
        return sorted(range(len(counts)), key=lambda i: (-counts[i], i))
    return sorted(range(len(counts)), key=lambda i: (-counts[i] / max(expected[i], 1e-9), i))


def act_norms(data: dict[str, Any], n: int) -> go.Figure:
    """Per-layer activation norms on the offending batch, and on a control batch if given."""
    layers = [str(x) for x in data["layer"]]
    values = [float(v) for v in data["value"]]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=layers,
            y=values,
            mode="lines+markers",
            name="offending batch",
            line={"color": "#d62728", "width": 2},
        )
    )
    control = data.get("control")
    if control:
        fig.add_trace(
            go.Scatter(
                x=layers,
                y=[float(v) for v in control],
                mode="lines+markers",
                name="control batch",
                line={"color": "#7f7f7f", "width": 2},
            )
        )
    every = values + [float(v) for v in control or []]
    if use_log(every):  # an overflowing batch sits orders of magnitude above its control
        vals = log_ticks(min(v for v in every if v > 0), max(every))
        fig.update_yaxes(
            title_text="activation L2 norm (log)",
            type="log",
            tickvals=vals,
            ticktext=[tick_label(v) for v in vals],
        )
    else:
        fig.update_yaxes(title_text="activation L2 norm", rangemode="tozero")
    fig.update_xaxes(title_text="layer", type="category")
    fig = layout(fig, f"Spike #{n}: per-layer activation norms during replay", 2)
    return fig.update_layout(hovermode="closest", showlegend=True, legend=LEGEND)
