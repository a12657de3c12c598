"""Ingest: find a run's sources under the given paths, read each, store them atomically.

One transaction per run: a malformed file aborts the whole run's ingest and leaves the
database as it was (the error names the file). Re-ingesting a source first removes what
that source stored before, which makes ingest idempotent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

import forensics.ingest.readers  # noqa: F401 - registers the readers once, at import
from forensics.canon import alias_table
from forensics.errors import InputError
from forensics.ingest import batches, checkpoints, config
from forensics.ingest.base import Reader, ReadResult, detect_format, get_reader, sniff_format
from forensics.ingest.discover import RunGroup, Source, group, run_name_for, walk
from forensics.ingest.readers import mlflow, tensorboard
from forensics.store import Store
from forensics.store.blocks import MetricBlock, value_column

Progress = Callable[[str], None]


@dataclass
class SourceSummary:
    path: str
    kind: str  # metrics | config | checkpoint | manifest | token_shard | token_counts
    format: str
    rows: int
    warnings: list[str] = field(default_factory=list)


@dataclass
class RunSummary:
    run: str
    sources: list[SourceSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # discovery: skipped files, resumed runs

    @property
    def metric_rows(self) -> int:
        return sum(s.rows for s in self.sources if s.kind == "metrics")


def _is_source_dir(path: Path) -> bool:
    """A folder read as one source: a checkpoint, an MLflow run folder, a TensorBoard log
    dir of one run. An MLflow experiment or `mlruns` root, and a log dir with one
    subfolder per run, are walked instead, so that each of their runs is a run."""
    if checkpoints.is_checkpoint(path) or mlflow.is_run_dir(path):
        return True
    reader = sniff_format(path)
    if reader is None or reader.name == "mlflow":
        return False
    return not (reader.name == "tensorboard" and tensorboard.several_runs(path))


def classify(path: Path, forced: Reader | None = None) -> tuple[str, Reader | None]:
    """What a file is to the store; metrics readers are found by sniffing its head."""
    if forced is not None:
        return "metrics", forced
    if config.is_config_file(path):
        return "config", None
    if checkpoints.is_checkpoint(path):
        return "checkpoint", None
    if batches.is_manifest(path):
        return "manifest", None
    if batches.is_token_counts(path):
        return "token_counts", None
    if batches.is_token_shard(path):
        return "token_shard", None
    reader = sniff_format(path)
    return ("metrics", reader) if reader else ("unknown", None)


def _read_metrics(store: Store, path: Path, reader: Reader) -> ReadResult:
    """Read a metric source, letting the reader stage big tables on the store's connection.

    Called outside the ingest transaction (see Reader.read_with). Repeated steps are
    resolved here, once for every format.
    """
    result = reader.read_with(store.con, path)
    try:
        _drop_repeated_steps(result)
    except BaseException:
        result.release()
        raise
    return result


def _drop_repeated_steps(result: ReadResult) -> None:
    """A resumed run logs some steps twice: keep the last value, say so as a warning."""
    if not any(_repeats_steps(b) for b in result.blocks):
        return
    long = result.metrics
    before = long.height
    long = long.unique(subset=["step", "raw_name"], keep="last", maintain_order=True).sort("step")
    result.release()  # what was staged is superseded by the rows below
    result.metrics = long
    result.warnings.append(
        f"{before - long.height} repeated (step, metric) rows from a restart or resume: "
        "kept the last value of each"
    )


def _repeats_steps(block: MetricBlock) -> bool:
    """Does a series of the block log a step twice or go back? Cheap when steps only rise."""
    if block.rising:
        return False
    if isinstance(block.frame, pl.DataFrame):
        steps = block.frame["step"]
    else:
        steps = pl.Series(block.frame.select("step").to_arrow_table()["step"])
    if (steps.diff().drop_nulls() > 0).all():
        return False
    frame = block.polars()
    return any(
        (frame.filter(pl.col(value_column(i)).is_not_null())["step"].diff() <= 0).any()
        for i in range(len(block.names))
    )


def _store_metrics(
    store: Store, run_id: str, path: Path, reader: Reader, result: ReadResult, aliases: str | None
) -> SourceSummary:
    source = str(path)
    store.clear_source(run_id, source)
    table = alias_table(aliases)
    rows = sum(
        store.insert_metric_block(run_id, source, block, [table.canonical(n) for n in block.names])
        for block in result.blocks
    )
    if result.events.height:
        store.insert_frame(
            "events",
            result.events.with_columns(
                pl.lit(run_id).alias("run_id"), pl.lit(source).alias("source")
            ),
        )
    if result.config:
        store.upsert_run(run_id, source, reader.name, result.config)
    store.record_source(run_id, source, "metrics", reader.name, rows, result.warnings)
    return SourceSummary(source, "metrics", reader.name, rows, result.warnings)


def _store_other(store: Store, run_id: str, path: Path, kind: str) -> SourceSummary:
    source = str(path)
    store.clear_source(run_id, source)
    rows, fmt, warnings = 0, kind, []
    if kind == "config":
        cfg = config.load_config(path)
        store.upsert_run(run_id, source, "config", cfg)
        rows, fmt = len(cfg), path.suffix.lstrip(".") or "args"
    elif kind == "checkpoint":
        idx = checkpoints.index_checkpoint(path)
        row = {**idx.row, "run_id": run_id, "path": source, "source": source}
        row["model_config"] = json.dumps(row.get("model_config"), default=str)
        store.insert_frame("checkpoints", pl.DataFrame([row]))
        stats = idx.stats.with_columns(
            pl.lit(run_id).alias("run_id"), pl.lit(source).alias("source")
        )
        store.insert_frame("checkpoint_stats", stats)
        rows, fmt, warnings = stats.height, idx.row["format"], idx.warnings
    elif kind == "manifest":
        frame = batches.read_manifest(path)
        frame = frame.with_columns(pl.lit(run_id).alias("run_id"), pl.lit(source).alias("manifest"))
        rows, fmt = store.insert_frame("batches", frame), path.suffix.lstrip(".")
    elif kind == "token_shard":
        info = batches.index_token_shard(path)
        store.insert_frame(
            "token_shards",
            pl.DataFrame([{**info, "run_id": run_id, "path": source, "source": source}]),
        )
        rows, fmt = 1, str(info.get("dtype"))
    elif kind == "token_counts":
        counts = batches.read_token_counts(path)
        counts = counts.with_columns(pl.lit(run_id).alias("run_id"), pl.lit(source).alias("source"))
        rows, fmt = store.insert_frame("token_counts", counts), path.suffix.lstrip(".")
    store.record_source(run_id, source, kind, fmt, rows, warnings)
    return SourceSummary(source, kind, fmt, rows, warnings)


def ingest(
    store: Store,
    paths: list[Path],
    *,
    run: str | None = None,
    fmt: str | None = None,
    aliases: str | None = None,
    progress: Progress | None = None,
) -> list[RunSummary]:
    """Ingest the runs found under `paths` (discover.py decides which files belong together
    and names each run; all of them are one run when `run` is given)."""
    forced = get_reader(fmt) if fmt else None
    groups: dict[str, RunGroup] = {}
    for p in paths:
        if not p.exists():
            raise InputError(p, "no such file or folder")
        for g in _discover(p, forced, split=run is None):
            name = run or g.name
            if name in groups:
                groups[name].sources += g.sources
                groups[name].notes += g.notes
            else:
                groups[name] = RunGroup(name, list(g.sources), list(g.notes))
    return [_ingest_run(store, name, g, forced, aliases, progress) for name, g in groups.items()]


def _discover(path: Path, forced: Reader | None, *, split: bool) -> list[RunGroup]:
    """The runs under one path given by the user (a file is one run)."""
    if path.is_file() or (path.is_dir() and _is_source_dir(path)):
        kind, reader = classify(path, forced)
        if kind == "unknown":
            detect_format(path)  # raises UnknownFormatError listing what was tried
        return [RunGroup(run_name_for(path), [Source(path, kind, reader)])]
    walked = walk(path, _is_source_dir)
    found = []
    for f in walked.found:
        kind, reader = classify(f, None)
        if kind != "unknown":
            found.append(Source(f, kind, reader))
    if not any(s.kind == "metrics" for s in found):
        raise InputError(path, "no metric log found", expected="a training log in a known format")
    if not split:
        return [RunGroup(run_name_for(path), found, walked.warnings)]
    return group(path, found, walked.warnings)


def _sources(run: RunGroup) -> list[tuple[Path, str, Reader | None]]:
    """A run's sources, configs first so that later sources can merge into its config."""
    order = {"config": 0, "metrics": 1}
    found = [(s.path, s.kind, s.reader) for s in run.sources]
    return sorted(found, key=lambda t: order.get(t[1], 2))


def _ingest_run(
    store: Store,
    name: str,
    run: RunGroup,
    forced: Reader | None,
    aliases: str | None,
    progress: Progress | None,
) -> RunSummary:
    summary = RunSummary(name, notes=list(run.notes))
    found = _sources(run)
    paths = run.paths
    first_metrics = next((r for _, k, r in found if k == "metrics"), None)
    # Metric logs are read before the transaction opens: a reader may stage a big log on
    # the store's connection, and a statement failing inside a transaction would abort it.
    read: dict[int, ReadResult] = {}
    try:
        for i, (path, kind, reader) in enumerate(found):
            if kind == "metrics":
                assert reader is not None
                if progress:
                    progress(f"{name}: {path.name} ({kind})")
                read[i] = _read_metrics(store, path, reader)
        if read and run.notes:  # what discovery found is said where the run's sources are
            read[min(read)].warnings.extend(run.notes)
        with store.transaction():
            store.upsert_run(
                name, str(paths[0].resolve()), first_metrics.name if first_metrics else "", {}
            )
            for i, (path, kind, reader) in enumerate(found):
                if kind == "metrics":
                    assert reader is not None
                    source = _store_metrics(store, name, path, reader, read[i], aliases)
                else:
                    if progress:
                        progress(f"{name}: {path.name} ({kind})")
                    source = _store_other(store, name, path, kind)
                summary.sources.append(source)
            store.con.execute(
                "UPDATE runs SET format = ? WHERE run_id = ?",
                [first_metrics.name if first_metrics else "", name],
            )
    finally:  # after the transaction, so that a rollback cannot bring a staged table back
        for result in read.values():
            result.release()
    return summary


def run_config_value(cfg: dict[str, Any], *keys: str) -> Any:
    """First present key of a flattened config (helpers for later stages)."""
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return None
