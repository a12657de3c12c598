"""`write_report`: the one call that turns a run in the store into a report folder.

Layout of `out_dir`: `README.md` (the run at a glance), `postmortems/spike-NN.md` (one per
incident), `figures/<name>.png|.html`. Re-running replaces the report: files of incidents
that no longer exist are removed so that no stale post-mortem survives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from forensics.detect.store import require_detected
from forensics.errors import ReportOptionError
from forensics.report import render
from forensics.report.context import DEFAULT_MIN_SEVERITY, SEVERITIES, Options, build_report
from forensics.report.export import Exported, export
from forensics.store.db import Store

log = logging.getLogger(__name__)


@dataclass
class ReportResult:
    out_dir: Path
    readme: Path
    postmortems: list[Path]
    figures: list[Exported]
    warnings: list[str] = field(default_factory=list)

    @property
    def png(self) -> bool:
        """True when every figure has a PNG (else the Markdown links HTML figures)."""
        return all(f.png is not None for f in self.figures)


def write_report(
    store: Store,
    run_id: str,
    out_dir: Path | str,
    *,
    templates: Path | None = None,
    gpu_hour_cost: float | None = None,
    world_size: int | None = None,
    png: bool = True,
    warn: Callable[[str], None] | None = None,
    min_severity: str = DEFAULT_MIN_SEVERITY,
    plotly_js: Path | None = None,
) -> ReportResult:
    """Write README.md, one post-mortem per incident and their figures for `run_id`.

    This is the hook for the analyze pipeline: call it after detection (and replay) have
    written their rows. `warn` receives each warning once (e.g. "no Chromium, HTML only").
    Incidents below `min_severity` get one line in README.md, not a post-mortem.
    Raises NotDetectedError when `detect` never ran on the run.
    """
    if min_severity not in SEVERITIES:
        raise ReportOptionError(
            f"--min-severity {min_severity!r}: expected one of {', '.join(SEVERITIES)}"
        )
    out = Path(out_dir)
    warnings: list[str] = []

    def note(msg: str) -> None:
        warnings.append(msg)
        (warn or log.warning)(msg)

    _settle(store)
    require_detected(store, run_id)
    env = render.environment(templates)
    kb = render.knowledge(env)
    report = build_report(store, run_id, kb, env, Options(gpu_hour_cost, world_size, min_severity))
    exported = export(
        report.figures, out / render.FIGURES_DIR, png=png, warn=note, plotly_js=plotly_js
    )
    docs = render.render_report(report, exported, env, out)
    _remove_stale(out, set(docs), exported)
    for rel, text in docs.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    pms = sorted(out / rel for rel in docs if rel != "README.md")
    return ReportResult(out, out / "README.md", pms, list(exported.values()), warnings)


def _settle(store: Store) -> None:
    """Finish any result a caller left open on the connection.

    With DuckDB 2.0, `execute(...).fetchone()` (as in `Store.run_config`) leaves its result
    unfinished and the next `Store.query` on that connection fails; a fully fetched
    `execute` clears it. The analyze pipeline shares one Store across stages, so the
    report must not depend on how the stage before it read.
    """
    store.con.execute("SELECT 1").fetchall()


def _remove_stale(out: Path, docs: set[str], exported: dict[str, Exported]) -> None:
    """Delete post-mortems and figures of an earlier report that this one does not write."""
    pm_dir = out / render.POSTMORTEMS_DIR
    for path in pm_dir.glob("spike-*.md") if pm_dir.is_dir() else []:
        if f"{render.POSTMORTEMS_DIR}/{path.name}" not in docs:
            path.unlink()
    fig_dir = out / render.FIGURES_DIR
    keep = {p for e in exported.values() for p in (e.html, e.png) if p is not None}
    for pattern in ("spike-*.html", "spike-*.png", "run-overview.*"):
        for path in fig_dir.glob(pattern) if fig_dir.is_dir() else []:
            if path not in keep:
                path.unlink()
