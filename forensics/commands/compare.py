"""`forensics compare`: runs x incidents of a store with several runs, cross-run recurrences."""

from __future__ import annotations

from pathlib import Path

import typer

from forensics.cli import app, err_console, rich_console


@app.command()
def compare(
    db: Path = typer.Option(..., "--db", help="DuckDB file holding several ingested runs."),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for the overlay figure of the most shared recurring step."
    ),
    no_png: bool = typer.Option(False, "--no-png", help="Write the figure as HTML only."),
    rules: list[Path] | None = typer.Option(None, "--rules", help="Extra rules folder."),
) -> None:
    """Detect every run of the store and show spikes that recur across runs.

    A spike at the same step (or the same tokens consumed) in several runs points to the
    data at that step; it is stored in the `recurrences` table and raises the batch-driven
    hypothesis of each incident involved.

    Example: for f in logs/*.txt; do forensics ingest $f --db fleet.duckdb; done;
    forensics compare --db fleet.duckdb --out fleet/
    """
    from forensics.fleet import compare as run_compare
    from forensics.fleet.render import print_fleet
    from forensics.store import open_store

    with open_store(db) as store:
        if not store.run_names():
            store.resolve_run(None)  # raises the store's one-line "no run" error
        fleet = run_compare(store, out, png=not no_png, rules_dirs=rules or [])
    print_fleet(fleet, rich_console())
    for note in fleet.notes:
        err_console.print(note, highlight=False, markup=False)
