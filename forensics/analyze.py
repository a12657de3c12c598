"""`analyze`: the whole pipeline on one run, step by step, in one call.

    ingest -> detect -> replay -> report -> incidents.json

Each step is a function of the shared AnalyzeContext, listed in STEPS in order. A new
stage is one more entry (or pass `steps=` to run a different list); a step reads what the
previous ones stored in the DuckDB file, so steps never call each other. incidents.json is
written last so that it carries the replay verdicts the replay step stored.

Without an output folder (`out=None`, as `forensics demo` calls it) only the database is
written: the report and incidents.json steps need a folder and are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from forensics.detect import DetectConfig, Detection, detect
from forensics.detect.store import write_json
from forensics.errors import ReplayError, StoreError
from forensics.ingest import ingest
from forensics.store import Store, open_store

Progress = Callable[[str], None]


@dataclass
class AnalyzeOptions:
    run: str | None = None  # run name (default: from the path)
    replay: bool = True  # --no-replay turns the replay step off
    report: bool = True
    device: str = "auto"  # replay device
    rules_dirs: list[Path] = field(default_factory=list)  # extra rule folders (--rules)
    config: DetectConfig | None = None  # detection thresholds (None: the defaults)
    gpu_hour_cost: float | None = None  # $ per GPU-hour, for the cost of each incident
    fmt: str | None = None  # force a reader (--format)
    sources: Any = None  # forensics.replay.sources.Sources: dataset, tokenizer, shard loader


@dataclass
class AnalyzeContext:
    paths: list[Path]
    out: Path | None
    db: Path
    options: AnalyzeOptions
    store: Store
    progress: Progress
    run_id: str = ""
    detection: Detection | None = None
    notes: list[str] = field(default_factory=list)  # what a step skipped, and why
    outputs: list[Path] = field(default_factory=list)


Step = Callable[[AnalyzeContext], None]


def ingest_step(ctx: AnalyzeContext) -> None:
    run = ctx.options.run
    if run is None and len(ctx.paths) > 1:
        run = ctx.paths[0].resolve().name  # several paths are one run
    summaries = ingest(ctx.store, ctx.paths, run=run, fmt=ctx.options.fmt, progress=ctx.progress)
    ctx.run_id = summaries[0].run


def detect_step(ctx: AnalyzeContext) -> None:
    ctx.progress(f"{ctx.run_id}: detecting incidents")
    ctx.detection = detect(
        ctx.store,
        ctx.run_id,
        config=ctx.options.config,
        rules_dirs=ctx.options.rules_dirs,
        gpu_hour_cost=ctx.options.gpu_hour_cost,
    )[0]


def replay_step(ctx: AnalyzeContext) -> None:
    """Replay each incident's batches; a run that cannot be replayed keeps `not_run`."""
    if not ctx.options.replay:
        ctx.notes.append("replay: skipped (--no-replay)")
        return
    if ctx.detection is not None and not ctx.detection.incidents:
        ctx.notes.append("replay: nothing to replay (no incident)")
        return
    from forensics.replay import replay_run
    from forensics.replay.tiers import describe

    try:
        rows = replay_run(ctx.store, ctx.run_id, device=ctx.options.device,
                          progress=ctx.progress, sources=ctx.options.sources)  # fmt: skip
        ctx.notes.append(f"replay: {describe(rows)}")
    except ReplayError as exc:
        ctx.notes.append(f"replay: not run ({exc})")


def report_step(ctx: AnalyzeContext) -> None:
    if not ctx.options.report or ctx.out is None:
        return
    from forensics.report import write_report

    ctx.progress(f"{ctx.run_id}: writing the report")
    result = write_report(
        ctx.store,
        ctx.run_id,
        ctx.out,
        gpu_hour_cost=ctx.options.gpu_hour_cost,
        warn=lambda msg: ctx.notes.append(f"report: {msg}"),
    )
    ctx.outputs += [result.readme, *result.postmortems]


def json_step(ctx: AnalyzeContext) -> None:
    if ctx.out is None:
        return
    ctx.outputs.append(write_json(ctx.store, ctx.run_id, ctx.out / "incidents.json"))


STEPS: list[tuple[str, Step]] = [
    ("ingest", ingest_step),
    ("detect", detect_step),
    ("replay", replay_step),
    ("report", report_step),
    ("incidents.json", json_step),
]


@dataclass
class AnalyzeResult:
    run_id: str
    db: Path
    detection: Detection | None
    outputs: list[Path]
    notes: list[str]


def analyze(
    path: Path | Sequence[Path],
    out: Path | None = None,
    *,
    db: Path | None = None,
    run: str | None = None,
    options: AnalyzeOptions | None = None,
    steps: list[tuple[str, Step]] | None = None,
    progress: Progress | None = None,
) -> AnalyzeResult:
    """Run every step on the logs at `path` (one run). The database defaults to
    out/forensics.duckdb; `run` overrides options.run."""
    if out is None and db is None:
        raise StoreError("analyze needs an output folder or a database (--out or --db)")
    paths = [Path(path)] if isinstance(path, str | Path) else [Path(p) for p in path]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    db = db or out / "forensics.duckdb"  # type: ignore[operator]
    opts = options or AnalyzeOptions()
    if run is not None:
        opts = replace(opts, run=run)
    with open_store(db) as store:
        ctx = AnalyzeContext(paths, out, db, opts, store, progress or (lambda _msg: None))
        for name, step in steps or STEPS:
            ctx.progress(name)
            step(ctx)
    return AnalyzeResult(ctx.run_id, db, ctx.detection, ctx.outputs, ctx.notes)
