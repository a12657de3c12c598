"""`forensics report`: Markdown post-mortems and a run summary, with figures."""

from __future__ import annotations

from pathlib import Path

import typer

from forensics.cli import app, out_console, status
from forensics.cli import warn as cli_warn

_warned: set[str] = set()

MIN_SEVERITY_OPTION = typer.Option(
    "moderate",
    "--min-severity",
    help="Full post-mortems from this severity up (minor, moderate, major, critical); "
    "the rest get one line each in README.md.",
)


def warn(message: str) -> None:
    """A warning on stderr, each message once per command (the demo writes seven reports,
    and "no Chrome" is one problem, not seven)."""
    if message in _warned:
        return
    _warned.add(message)
    cli_warn(message)


@app.command()
def report(
    db: Path = typer.Option(..., "--db", help="DuckDB file of the analysis."),
    out: Path = typer.Option(
        ..., "--out", help="Folder for README.md, postmortems/ and figures/ (created)."
    ),
    run: str | None = typer.Option(None, "--run", help="Run name (default: the only run)."),
    templates: Path | None = typer.Option(
        None,
        "--templates",
        help="Folder of templates overriding the bundled ones file by file "
        "(postmortem.md.j2, summary.md.j2, _macros.md.j2, lessons.yaml).",
    ),
    gpu_hour_cost: float | None = typer.Option(
        None, "--gpu-hour-cost", help="Dollars per GPU-hour, to price each incident."
    ),
    world_size: int | None = typer.Option(
        None, "--world-size", help="Number of GPUs of the run (overrides its config)."
    ),
    min_severity: str = MIN_SEVERITY_OPTION,
) -> None:
    """Write one Markdown post-mortem per incident and a README.md for the run, with figures.

    Figures: PNG when a Chrome/Chromium is installed (FORENSICS_CHROMIUM picks one), plus HTML.
    PNG export stops after 30 s + 5 s per figure (FORENSICS_PNG_TIMEOUT sets the seconds).

    Example: forensics report --db runs.duckdb --out report/ --gpu-hour-cost 2.5
    """
    from forensics.report import write_report
    from forensics.store import open_store

    with open_store(db, read_only=True) as store, status("writing the report"):
        result = write_report(
            store,
            store.resolve_run(run),
            out,
            templates=templates,
            gpu_hour_cost=gpu_hour_cost,
            world_size=world_size,
            warn=warn,
            min_severity=min_severity,
        )
    out_console.print(str(result.readme), highlight=False)
    for path in result.postmortems:
        out_console.print(str(path), highlight=False)


__all__ = ["report"]
