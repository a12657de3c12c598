"""`forensics detect` and `forensics analyze`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from forensics.cli import app, err_console, out_console, status
from forensics.commands.replay import (
    ACCUM_OPTION,
    BATCH_OPTION,
    DATASET_OPTION,
    LOADER_OPTION,
    SEQ_OPTION,
    SHARDS_OPTION,
    TOKENIZER_OPTION,
    WORLD_OPTION,
    make_sources,
)  # fmt: skip
from forensics.commands.report import MIN_SEVERITY_OPTION

if TYPE_CHECKING:  # the pipeline (numpy, polars, scipy, duckdb) loads only when a command runs
    from forensics.detect import DetectConfig, Detection

RULES_OPTION = typer.Option(
    None,
    "--rules",
    help="Extra folder of rule YAML files (repeatable); a rule id there "
    "replaces the shipped rule of that id.",
)
WINDOW_OPTION = typer.Option(
    None,
    "--recovery-window",
    help="Steps after the last peak within which the loss must come "
    "back for a recoverable incident (default 500).",
)
TOLERANCE_OPTION = typer.Option(
    None,
    "--tolerance",
    help="Relative distance to the pre-spike trend that counts as back (default 0.03).",
)
COST_OPTION = typer.Option(
    None, "--gpu-hour-cost", help="Dollars per GPU-hour, to price incidents."
)


def _config(window: int | None, tolerance: float | None) -> DetectConfig:
    from forensics.detect import DetectConfig

    return DetectConfig().with_overrides(recovery_window=window, tolerance=tolerance)


def print_detection(det: Detection, replay: dict[int, str] | None = None) -> None:
    """One table per run: what was found, its type, cause and the advice; with `replay`
    (incident id -> verdict of its cause), the verdict beside the cause."""
    from rich import box
    from rich.table import Table

    title = f"{det.run_id}: {len(det.incidents)} incident(s), {len(det.near_misses)} near-miss(es)"
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    cols = ("id", "onset", "peak", "end", "type", "severity", "cause (confidence)", "recovery")
    for name in cols:
        table.add_column(name, overflow="fold")  # wrap, never cut "recoverable" to "recov…"
    for i in det.incidents:
        cause = i.cause if i.cause == "unknown" else f"{i.cause} ({i.confidence:.2f})"
        if replay is not None and replay.get(i.id, "not_run") != "not_run":
            cause += f", replay {replay[i.id]}"
        advice = i.recovery
        if i.restart_checkpoint_step is not None:
            advice += f" @ {i.restart_checkpoint_step}"
        end = "-" if i.end_step is None else str(i.end_step)
        table.add_row(
            str(i.id), str(i.onset_step), str(i.peak_step), end, i.type, i.severity, cause, advice
        )
    out_console.print(table)
    if det.missing_metrics:
        err_console.print(
            f"{det.run_id}: not logged: {', '.join(det.missing_metrics)} (causes that need them "
            "cannot be told apart)",
            highlight=False,
        )


@app.command()
def detect(
    db: Path = typer.Option(..., "--db", help="DuckDB file of the analysis."),
    run: str | None = typer.Option(None, "--run", help="Run name (default: every run)."),
    rules: list[Path] | None = RULES_OPTION,
    recovery_window: int | None = WINDOW_OPTION,
    tolerance: float | None = TOLERANCE_OPTION,
    gpu_hour_cost: float | None = COST_OPTION,
) -> None:
    """Find every loss spike, NaN and divergence; type it, name its cause, advise a recovery.

    Stores the incidents, findings and near-misses in the database (re-running replaces
    them).

    Example: forensics detect --db runs.duckdb --run gpt-small
    """
    from forensics.detect import detect as run_detect
    from forensics.store import open_store

    with open_store(db) as store, status("detecting"):
        detections = run_detect(
            store,
            run,
            config=_config(recovery_window, tolerance),
            rules_dirs=rules or [],
            gpu_hour_cost=gpu_hour_cost,
        )
    for det in detections:
        print_detection(det)


@app.command()
def analyze(
    path: Path = typer.Argument(..., help="Log file or run folder.", show_default=False),
    out: Path = typer.Option(..., "--out", help="Output folder (incidents.json, report)."),
    db: Path | None = typer.Option(
        None, "--db", help="DuckDB file (default: OUT/forensics.duckdb)."
    ),
    run: str | None = typer.Option(None, "--run", help="Run name (default: from the path)."),
    no_replay: bool = typer.Option(False, "--no-replay", help="Skip replaying the batches."),
    no_report: bool = typer.Option(False, "--no-report", help="Skip the Markdown report."),
    device: str = typer.Option("auto", "--device", help="Replay device: auto, cpu, cuda."),
    rules: list[Path] | None = RULES_OPTION,
    recovery_window: int | None = WINDOW_OPTION,
    tolerance: float | None = TOLERANCE_OPTION,
    gpu_hour_cost: float | None = COST_OPTION,
    min_severity: str = MIN_SEVERITY_OPTION,
    fmt: str | None = typer.Option(None, "--format", help="Force a reader."),
    dataset: Path | None = DATASET_OPTION,
    tokenizer: Path | None = TOKENIZER_OPTION,
    shards: list[Path] | None = SHARDS_OPTION,
    loader: str = LOADER_OPTION,
    batch_size: int | None = BATCH_OPTION,
    seq_len: int | None = SEQ_OPTION,
    world_size: int | None = WORLD_OPTION,
    grad_accum: int | None = ACCUM_OPTION,
) -> None:
    """Ingest, detect, replay and report in one go; always writes OUT/incidents.json.

    Example: forensics analyze sample_logs/rare_tokens --out analysis/ --no-replay
    """
    from forensics.analyze import AnalyzeOptions, stored_tables
    from forensics.analyze import analyze as run_analyze

    # Replay's sources load torch: built only when the run will be replayed.
    sources = None if no_replay else make_sources(
        dataset=dataset, tokenizer=tokenizer, shards=shards, loader=loader,
        batch_size=batch_size, seq_len=seq_len, world_size=world_size, grad_accum=grad_accum,
    )  # fmt: skip
    options = AnalyzeOptions(
        run=run,
        replay=not no_replay,
        report=not no_report,
        device=device,
        rules_dirs=rules or [],
        config=_config(recovery_window, tolerance),
        gpu_hour_cost=gpu_hour_cost,
        min_severity=min_severity,
        fmt=fmt,
        sources=sources,
    )
    with status("analyzing") as spinner:
        result = run_analyze(path, out, db=db, options=options, progress=spinner.update)
    for detection, verdicts in stored_tables(result):  # one per run found under PATH
        print_detection(detection, verdicts)
    for note in result.notes:
        err_console.print(f"note: {note}", highlight=False)
    for p in result.outputs:
        out_console.print(str(p), highlight=False)


__all__ = ["analyze", "detect"]
