"""`forensics replay`: re-run the offending batches of each incident (tiers 1-3, docs/replay.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from forensics.cli import app, out_console, status

# Where the run's batches and tokenizer are, when the store does not say (shared with analyze).
DATASET_OPTION = typer.Option(
    None, "--dataset", help="HF run: the datasets.save_to_disk folder the Trainer read."
)
TOKENIZER_OPTION = typer.Option(
    None, "--tokenizer", help="tokenizer.json for decoded excerpts (default: the checkpoint's)."
)
SHARDS_OPTION = typer.Option(
    None, "--shards", help="Token shards (.bin) in the run's order; a glob is sorted by name."
)
LOADER_OPTION = typer.Option("modded", "--loader", help="Shard loader: modded or llmc.")
BATCH_OPTION = typer.Option(None, "--batch-size", help="Shard loader: sequences per micro-batch.")
SEQ_OPTION = typer.Option(None, "--seq-len", help="Shard loader: tokens per sequence.")
WORLD_OPTION = typer.Option(None, "--world-size", help="Shard loader: data-parallel ranks.")
ACCUM_OPTION = typer.Option(None, "--grad-accum", help="Shard loader: micro-batches per step.")


def make_sources(**flags: Any) -> Any:
    """A forensics.replay.sources.Sources from the CLI flags (imported here: it loads torch)."""
    from forensics.replay.sources import Sources

    flags["shards"] = list(flags.get("shards") or [])
    return Sources(**flags)


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
    dataset: Path | None = DATASET_OPTION,
    tokenizer: Path | None = TOKENIZER_OPTION,
    shards: list[Path] | None = SHARDS_OPTION,
    loader: str = LOADER_OPTION,
    batch_size: int | None = BATCH_OPTION,
    seq_len: int | None = SEQ_OPTION,
    world_size: int | None = WORLD_OPTION,
    grad_accum: int | None = ACCUM_OPTION,
    first_step: int | None = typer.Option(
        None,
        "--first-step",
        help="Shard loader: logged number of the first step (modded 1, llmc 0).",
    ),
    no_judge: bool = typer.Option(
        False, "--no-judge", help="Do not train the bundled model as a judge (tier 2)."
    ),
) -> None:
    """Replay each incident's batches to confirm or refute its suspected causes.

    Stores the verdicts in the `replays` table and says which tier ran (1: the run's batches
    and data probes; 2: the bundled model as a judge; 3: the run's own model) and what the
    next needs.

    Example: forensics replay --db runs.duckdb --run rare_tokens --incident 1 --device cpu
    """
    from forensics.detect.store import require_detected
    from forensics.replay import replay_run  # torch: only when replaying
    from forensics.replay.tiers import describe
    from forensics.store import open_store

    sources = make_sources(
        dataset=dataset, tokenizer=tokenizer, shards=shards, loader=loader,
        batch_size=batch_size, seq_len=seq_len, world_size=world_size, grad_accum=grad_accum,
        first_step=first_step, judge=not no_judge,
    )  # fmt: skip
    with open_store(db) as store, status("replaying") as spinner:
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
            progress=lambda msg: spinner.update(msg),
            sources=sources,
        )
    if not results:
        out_console.print(f"{run_id}: no incident to replay (run `forensics analyze` first?)")
        return
    from rich.table import Table

    title = f"replay of {run_id}"
    table = Table("incident", "probe", "hypothesis", "verdict", "detail", title=title)
    for r in results:
        table.add_row(str(r.incident_id), r.probe, r.hypothesis, r.verdict, r.detail[:160])
    out_console.print(table)
    out_console.print(f"{run_id}: {describe(results)}", highlight=False)


__all__ = ["replay"]
