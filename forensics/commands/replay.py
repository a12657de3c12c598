"""`forensics replay`: re-run the offending batches of each incident through the reference model."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from forensics.cli import app, err_console, out_console


@app.command()
def replay(
    db: Path = typer.Option(..., "--db", help="DuckDB file of the analysis."),
    run: str | None = typer.Option(None, "--run", help="Run name (default: the only run)."),
    incident: int | None = typer.Option(None, "--incident", help="Replay only this incident."),
    step: int | None = typer.Option(
        None, "--step", help="Replay the batch of this step (the incident holding it, if any)."
    ),
    device: str = typer.Option("auto", "--device", help="auto (cuda if available), cuda, cpu."),
    k: int = typer.Option(20, "--k", help="Steps each optimizer counterfactual replays."),
) -> None:
    """Confirm or refute each incident's suspected causes by replaying its batches from the
    latest checkpoint before it, and store the verdicts in the `replays` table.

    Example: forensics replay --db runs.duckdb --run rare_tokens --incident 1 --device cpu
    """
    from forensics.detect.store import require_detected
    from forensics.replay import replay_run  # torch: only when replaying
    from forensics.store import open_store

    with open_store(db) as store, err_console.status("replaying") as status:
        run_id = store.resolve_run(run)
        if incident is not None or step is None:  # --step alone replays any logged batch
            require_detected(store, run_id, db)
        results = replay_run(
            store,
            run_id,
            incident_id=incident,
            step=step,
            device=device,
            k=k,
            progress=lambda msg: status.update(msg),
        )
    if not results:
        out_console.print(f"{run_id}: no incident to replay (run `forensics analyze` first?)")
        return
    title = f"replay of {run_id}"
    table = Table("incident", "probe", "hypothesis", "verdict", "detail", title=title)
    for r in results:
        table.add_row(str(r.incident_id), r.probe, r.hypothesis, r.verdict, r.detail[:160])
    out_console.print(table)


__all__ = ["replay"]
