"""Numbers and pictures of a finished simulated run: the incident summary behind each sample
run's README.md, and loss.png (loss, grad norm, loss scale per step)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

PLOT_PNG, PLOT_HTML = "loss.png", "loss.html"


def _series(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.array([float(r.get(key, math.nan)) for r in rows])


def _window(rows: list[dict[str, Any]], key: str, lo: int, hi: int) -> np.ndarray:
    return np.array([float(r.get(key, math.nan)) for r in rows if lo <= r["step"] <= hi])


def _nanmax(a: np.ndarray) -> float:
    finite = a[np.isfinite(a)]
    return float(finite.max()) if finite.size else math.nan


def incident_numbers(
    rows: list[dict[str, Any]], onset: int, peak: int, end: int = 0
) -> dict[str, Any]:
    """Trend before, loss at onset/peak, grad-norm peak: what a README quotes (recovery is
    truth.json's, measured against the clean twin: forensics/sim/twin.py).

    `end` is the last injected step of a burst; "after" counts from max(peak, end), so a
    burst of bad batches is not mistaken for what follows it.
    """
    trend = float(np.nanmedian(_window(rows, "loss", onset - 30, onset - 1)))
    last = max(peak, end)
    span = _window(rows, "loss", onset, last + 10)
    after = _window(rows, "loss", last + 20, last + 50)
    out: dict[str, Any] = {
        "trend_before": trend,
        "loss_at_onset": float(_window(rows, "loss", onset, onset)[0]),
        "peak_loss": float(_window(rows, "loss", peak, peak)[0]),
        "min_loss_in_incident": float(np.nanmin(np.where(np.isfinite(span), span, np.nan))),
        "grad_norm_before": float(np.nanmedian(_window(rows, "grad_norm", onset - 30, onset - 1))),
        "grad_norm_peak": _nanmax(_window(rows, "grad_norm", onset, last + 10)),
        "nonfinite_grad_norm_steps": [
            int(r["step"])
            for r in rows
            if onset <= r["step"] <= last + 10 and not math.isfinite(r["grad_norm"])
        ],
        "update_norm_before": float(
            np.nanmedian(_window(rows, "update_norm", onset - 30, onset - 1))
        ),
        "update_norm_peak": _nanmax(_window(rows, "update_norm", onset, last + 10)),
        "loss_after": float(np.nanmedian(after)) if after.size else math.nan,
        "skipped_steps": [int(r["step"]) for r in rows if r.get("skipped")],
    }
    if "loss_scale" in rows[0]:
        out["loss_scale_before"] = float(_window(rows, "loss_scale", onset, onset)[0])
        out["loss_scale_min"] = float(np.nanmin(_series(rows, "loss_scale")))
    return out


def drift_lines(rows: list[dict[str, Any]], at: int) -> list[str]:
    """README line for lr_too_high: how parameter and grad norms drift up during warmup."""
    q = max(1, at // 4)
    pn = [float(_window(rows, "param_norm", s, s)[0]) for s in (1, 2 * q, at)]
    g_early = float(np.nanmedian(_window(rows, "grad_norm", q, 2 * q)))
    g_late = float(np.nanmedian(_window(rows, "grad_norm", 3 * q, at)))
    return [
        f"- drift before the spikes: param norm {pn[0]:.1f} (step 1) -> {pn[1]:.1f} (step "
        f"{2 * q}) -> {pn[2]:.1f} (step {at}); median grad norm {g_early:.2f} over steps "
        f"{q}-{2 * q} -> {g_late:.2f} over {3 * q}-{at}",
    ]


def plot_run(
    run_dir: Path,
    rows: list[dict[str, Any]],
    truth: dict[str, Any],
    title: str = "",
    twin: list[dict[str, Any]] | None = None,
) -> Path:
    """loss.png (kaleido); falls back to a self-contained loss.html when no Chromium can
    render a PNG.

    Panels: loss; loss zoomed on the first injection (when there is one); grad norm; loss
    scale (fp16 runs). Red dotted lines mark injected steps, red crosses non-finite values;
    the clean twin's loss (the expected type is measured against it) is drawn in grey.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from forensics.report.figures import log_ticks, tick_label

    injected = [int(i["step"]) for i in truth.get("injected", [])]
    panels = _panels(rows, injected)
    if twin:
        note = " (grey: the clean twin)"
        panels = [(k, t + note if k == "loss" else t, lg, lo, hi) for k, t, lg, lo, hi in panels]
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        vertical_spacing=0.25 / len(panels),
        subplot_titles=[p[1] for p in panels],
    )
    for i, (key, _label, log, lo, hi) in enumerate(panels, start=1):
        part = [r for r in rows if lo <= r["step"] <= hi]
        steps, values = _series(part, "step"), _series(part, key)
        if twin and key == "loss":
            ref = [r for r in twin if lo <= r["step"] <= hi]
            grey = {"width": 1, "color": "rgba(120,120,120,0.6)"}
            fig.add_trace(go.Scatter(x=_series(ref, "step"), y=_series(ref, "loss"), line=grey),
                          row=i, col=1)  # fmt: skip
        blue = {"width": 1, "color": "#1f77b4"}
        fig.add_trace(go.Scatter(x=steps, y=values, line=blue), row=i, col=1)
        bad = ~np.isfinite(values)
        if bad.any():
            top = _nanmax(values) if np.isfinite(values).any() else 1.0
            marks = go.Scatter(
                x=steps[bad], y=np.full(bad.sum(), top), mode="markers",
                marker={"color": "red", "symbol": "x", "size": 9},
            )  # fmt: skip
            fig.add_trace(marks, row=i, col=1)
        fig.update_yaxes(type="log" if log else "linear", row=i, col=1)
        if log:  # plotly labels minor log ticks with bare digits ("2", "5"): label in full
            ys = [float(v) for v in values if np.isfinite(v) and v > 0]
            ticks = log_ticks(min(ys), max(ys)) if ys else []
            fig.update_yaxes(tickvals=ticks, ticktext=[tick_label(v) for v in ticks], row=i, col=1)
        for step in injected:
            if lo <= step <= hi:
                fig.add_vline(
                    x=step, line={"color": "red", "dash": "dot", "width": 1}, row=i, col=1
                )
    fig.update_xaxes(title_text="step", row=len(panels), col=1)
    fig.update_layout(
        title={"text": title or truth["scenario"], "font": {"size": 14}},
        showlegend=False,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 70, "b": 40},
    )
    try:
        fig.write_image(run_dir / PLOT_PNG, width=1000, height=240 * len(panels) + 90)
        return run_dir / PLOT_PNG
    except Exception:  # kaleido raises many kinds when Chromium is missing or broken
        # plotly.js embedded, not from a CDN: the machine that has no Chromium is often the
        # one without internet, and a run folder is opened where it lies
        fig.write_html(run_dir / PLOT_HTML, include_plotlyjs=True)
        return run_dir / PLOT_HTML


def _panels(
    rows: list[dict[str, Any]], injected: list[int]
) -> list[tuple[str, str, bool, int, int]]:
    """(metric, title, log scale, first step, last step) of each panel."""
    first, last = int(rows[0]["step"]), int(rows[-1]["step"])
    panels = [("loss", "loss", False, first, last)]
    if injected:
        lo, hi = max(first, injected[0] - 40), min(last, injected[-1] + 80)
        panels.append(("loss", f"loss, steps {lo}-{hi}", False, lo, hi))
    panels.append(("grad_norm", "grad norm (pre-clip, log scale)", True, first, last))
    if "loss_scale" in rows[0]:
        panels.append(("loss_scale", "loss scale (log scale)", True, first, last))
    return panels
