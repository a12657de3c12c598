"""`forensics ingest` and `forensics runs`."""

from __future__ import annotations

from pathlib import Path

import typer

from forensics.cli import App, app, print_table, status, warn

DB_OPTION = typer.Option(..., "--db", help="DuckDB file of the analysis (created if missing).")


@app.command()
def ingest(
    paths: list[Path] = typer.Argument(..., help="Log files or run folders.", show_default=False),
    db: Path = DB_OPTION,
    run: str | None = typer.Option(None, "--run", help="Run name (default: from the path)."),
    fmt: str | None = typer.Option(
        None, "--format", help="Force a reader (see `forensics formats`)."
    ),
    aliases: Path | None = typer.Option(None, "--aliases", help="Extra metric-alias YAML file."),
    allow_outside: bool = typer.Option(
        False,
        "--allow-outside-sources",
        help="Let batch manifests name token shards outside the run folder.",
    ),
) -> None:
    """Load training logs, configs, checkpoints and batch manifests into a DuckDB store.

    Example: forensics ingest sample_logs/rare_tokens --db runs.duckdb
    """
    from forensics.ingest import ingest as run_ingest
    from forensics.store import open_store

    with open_store(db) as store, status("ingesting") as spinner:
        summaries = run_ingest(
            store,
            paths,
            run=run,
            fmt=fmt,
            aliases=str(aliases) if aliases else None,
            allow_outside_sources=allow_outside,
            progress=lambda msg: spinner.update(msg),
        )
    rows = [
        [s.run, Path(src.path).name, src.kind, src.format, str(src.rows)]
        + ["; ".join(src.warnings)[:120]]
        for s in summaries
        for src in s.sources
    ]
    columns = ("run", "source", "kind", "format", "rows", "warnings")
    print_table(columns, rows, title=f"ingested into {db}")
    for s in summaries:
        for src in s.sources:
            for w in src.warnings:
                warn(f"{src.path}: {w}")


@app.command()
def runs(db: Path = typer.Option(..., "--db", help="DuckDB file of the analysis.")) -> None:
    """List the runs stored in a database, with their format and metric counts.

    Example: forensics runs --db runs.duckdb
    """
    from forensics.store import open_store

    with open_store(db, read_only=True) as store:
        frame = store.run_overview()
    rows = [
        [name, fmt or "", str(n), f"{lo}–{hi}" if lo is not None else ""]
        for name, fmt, n, lo, hi in frame.iter_rows()
    ]
    print_table(("run", "format", "metric rows", "steps"), rows)


@app.command()
def formats() -> None:
    """List the log formats that ingest recognises (names for --format).

    Example: forensics formats
    """
    from forensics.ingest.base import readers

    print_table(("format", "description"), [[r.name, r.description] for r in readers()])


__all__ = ["App", "ingest", "runs", "formats"]
