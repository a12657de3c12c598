"""Ingest: find a run's sources under the given paths, read each, store them atomically.

One transaction per run: a malformed file aborts the whole run's ingest and leaves the
database as it was (the error names the file). A source is stored under its real path and
known by its content too (forensics/ingest/identity.py): re-ingesting it, by any spelling
of its path, first removes what it stored before, and a copy is stored once. Several values
for one (step, metric) keep one by the rule of forensics/store/conflicts.py, the others in
table `conflicts`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

import forensics.ingest.readers  # noqa: F401 - registers the readers once, at import
from forensics.canon import alias_table
from forensics.errors import ForensicsError, InputError, one_line
from forensics.ingest import batches, checkpoints, config, identity
from forensics.ingest.base import (
    Reader,
    ReadResult,
    detect_format,
    get_reader,
    readers,
    sniff_format,
)
from forensics.store import Store, conflicts
from forensics.store.blocks import MetricBlock, value_column

# File names too generic to name a run: the run takes its folder's name instead.
_GENERIC_STEMS = {"metrics", "log", "main", "train", "trainer_state", "events", "history", "stdout"}
_SKIP_DIRS = {"__pycache__", ".git", ".ipynb_checkpoints", "plots", "figures"}
_MAX_DEPTH = 4

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

    @property
    def metric_rows(self) -> int:
        return sum(s.rows for s in self.sources if s.kind == "metrics")


def run_name_for(path: Path) -> str:
    path = path.resolve()
    if path.is_dir():
        return path.name
    stem = path.name.split(".")[0] if path.name.startswith("events.out") else path.stem
    return (
        path.parent.name
        if stem.lower() in _GENERIC_STEMS or path.name.startswith("events.out")
        else stem
    )


def _walk(root: Path, depth: int = 0) -> Iterable[Path]:
    for child in sorted(root.iterdir()):
        if child.name.startswith(".") or child.name in _SKIP_DIRS:
            continue
        if child.is_dir():
            if checkpoints.is_checkpoint(child) or sniff_format(child) is not None:
                yield child  # a safetensors folder or an MLflow tree is one source
            elif depth < _MAX_DEPTH:
                yield from _walk(child, depth + 1)
        else:
            yield child


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
    store: Store,
    run_id: str,
    source: str,
    reader: Reader,
    result: ReadResult,
    aliases: str | None,
    digest: str,
) -> SourceSummary:
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
    store.record_source(run_id, source, "metrics", reader.name, rows, result.warnings, digest)
    return SourceSummary(source, "metrics", reader.name, rows, result.warnings)


def _store_other(
    store: Store, run_id: str, path: Path, source: str, kind: str, digest: str, root: Path | None
) -> SourceSummary:
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
        frame = batches.read_manifest(path, root)
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
    store.record_source(run_id, source, kind, fmt, rows, warnings, digest)
    return SourceSummary(source, kind, fmt, rows, warnings)


def ingest(
    store: Store,
    paths: list[Path],
    *,
    run: str | None = None,
    fmt: str | None = None,
    aliases: str | None = None,
    progress: Progress | None = None,
    allow_outside_sources: bool = False,
) -> list[RunSummary]:
    """Ingest each path as a run (all of them as one run when `run` is given).

    `allow_outside_sources` lets batch manifests name shards outside the run folder."""
    forced = get_reader(fmt) if fmt else None
    groups: dict[str, list[Path]] = {}
    for p in paths:
        if not p.exists():
            raise InputError(p, "no such file or folder")
        groups.setdefault(run or run_name_for(p), []).append(p)
    return [
        _ingest_run(store, name, ps, forced, aliases, progress, allow_outside_sources)
        for name, ps in groups.items()
    ]


def _sources(paths: list[Path], forced: Reader | None) -> list[tuple[Path, str, Reader | None]]:
    found: list[tuple[Path, str, Reader | None]] = []
    for p in paths:
        if p.is_file() or (p.is_dir() and (checkpoints.is_checkpoint(p) or sniff_format(p))):
            kind, reader = classify(p, forced)
            if kind == "unknown":
                detect_format(p)  # raises UnknownFormatError listing what was tried
            found.append((p, kind, reader))
            continue
        for f in _walk(p):
            kind, reader = classify(f, None)
            if kind != "unknown":
                found.append((f, kind, reader))
    if not any(k == "metrics" for _, k, _ in found):
        raise InputError(
            paths[0], "no metric log found", expected="a training log in a known format"
        )
    # Configs first so that later sources can merge into the run's config.
    order = {"config": 0, "metrics": 1}
    return sorted(found, key=lambda t: order.get(t[1], 2))


@dataclass
class _Source:
    """A source to store: the path as found (read through it: readers look beside it),
    its identity (real path, the name it is stored under; content fingerprint)."""

    path: Path
    kind: str
    reader: Reader | None
    real: str
    digest: str


def _check_path(path: Path) -> None:
    """A path given on the command line must be a regular file or a folder."""
    if not path.exists():
        raise InputError(path, "no such file or folder")
    if not (path.is_file() or path.is_dir()):
        raise InputError(
            path, "not a regular file or folder (a device, FIFO or socket)",
            expected="a log file or a run folder",
        )  # fmt: skip


def _identify(
    store: Store, run_id: str, found: list[tuple[Path, str, Reader | None]]
) -> tuple[list[_Source], list[SourceSummary]]:
    """Each source once: by real path (any spelling of a path is the same source) and by
    content (a copy is stored once). Skipped copies come back as summaries with a warning."""
    stored = store.source_fingerprints(run_id)
    seen_real: set[str] = set()
    seen_digest: dict[str, str] = {}
    out: list[_Source] = []
    skipped: list[SourceSummary] = []
    for path, kind, reader in found:
        try:
            real = str(identity.real_path(path))
            digest = identity.fingerprint(path)
        except OSError as exc:
            raise InputError(path, f"cannot be read ({exc.strerror or exc})") from exc
        if real in seen_real:
            continue  # the same file reached twice (two spellings, a link to it)
        seen_real.add(real)
        twin = seen_digest.get(digest) or (
            stored[digest] if stored.get(digest, real) != real else None
        )
        if twin is not None:
            note = f"same content as {twin}: not stored twice"
            skipped.append(SourceSummary(real, kind, "duplicate", 0, [note]))
            continue
        seen_digest[digest] = real
        out.append(_Source(path, kind, reader, real, digest))
    return out, skipped


def _run_root(paths: list[Path]) -> Path:
    """The folder a run's manifests must stay inside: the run folder given (for several
    paths, their deepest common folder)."""
    folders = [str((p if p.is_dir() else p.parent).resolve()) for p in paths]
    return Path(os.path.commonpath(folders))


# What a `except BaseException` must let through: the user's ^C and an orderly exit.
_NOT_FAILURES = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _source_error(path: Path, exc: BaseException) -> InputError:
    """An exception no reader turned into an InputError, as one line naming the file."""
    return InputError(path, f"cannot be ingested: {type(exc).__name__}: {one_line(str(exc), 160)}")


def _ingest_run(
    store: Store,
    name: str,
    paths: list[Path],
    forced: Reader | None,
    aliases: str | None,
    progress: Progress | None,
    allow_outside: bool = False,
) -> RunSummary:
    summary = RunSummary(name)
    root = None if allow_outside else _run_root(paths)
    for p in paths:
        _check_path(p)
    found, skipped = _identify(store, name, _sources(paths, forced))
    first_metrics = next((s.reader for s in found if s.kind == "metrics"), None)
    # Metric logs are read before the transaction opens: a reader may stage a big log on
    # the store's connection, and a statement failing inside a transaction would abort it.
    read: dict[int, ReadResult] = {}
    try:
        for i, src in enumerate(found):
            if src.kind == "metrics":
                assert src.reader is not None
                if progress:
                    progress(f"{name}: {src.path.name} ({src.kind})")
                try:
                    read[i] = _read_metrics(store, src.path, src.reader)
                except (ForensicsError, *_NOT_FAILURES):
                    raise
                except BaseException as exc:  # a Rust panic in polars is a BaseException
                    raise _source_error(src.path, exc) from exc
        with store.transaction():
            store.upsert_run(
                name, str(paths[0].resolve()), first_metrics.name if first_metrics else "", {}
            )
            conflicts.restore(store.con, name)
            for i, src in enumerate(found):
                stored = _store_source(store, name, src, read.get(i), aliases, root)
                summary.sources.append(stored)
                if progress and src.kind != "metrics":
                    progress(f"{name}: {src.path.name} ({src.kind})")
            summary.sources += skipped
            _resolve_conflicts(store, name, summary)
            store.con.execute(
                "UPDATE runs SET format = ? WHERE run_id = ?",
                [first_metrics.name if first_metrics else "", name],
            )
    finally:  # after the transaction, so that a rollback cannot bring a staged table back
        for result in read.values():
            result.release()
    return summary


def _store_source(
    store: Store,
    name: str,
    src: _Source,
    result: ReadResult | None,
    aliases: str | None,
    root: Path | None,
) -> SourceSummary:
    try:
        if src.kind == "metrics":
            assert src.reader is not None and result is not None
            return _store_metrics(store, name, src.real, src.reader, result, aliases, src.digest)
        return _store_other(store, name, src.path, src.real, src.kind, src.digest, root)
    except (ForensicsError, *_NOT_FAILURES):
        raise
    except BaseException as exc:  # a Rust panic in polars is a BaseException
        raise _source_error(src.path, exc) from exc


def _resolve_conflicts(store: Store, name: str, summary: RunSummary) -> None:
    """One value per (step, metric): see forensics/store/conflicts.py for the rule."""
    texts = frozenset(r.name for r in readers() if not r.structured) | conflicts.TEXT_FORMATS
    by_source = {s.path: s for s in summary.sources}
    for c in conflicts.resolve(store.con, name, texts):
        line = c.warning()
        store.add_source_warnings(name, c.source, [line])
        if c.source in by_source:
            by_source[c.source].warnings.append(line)


def run_config_value(cfg: dict[str, Any], *keys: str) -> Any:
    """First present key of a flattened config (helpers for later stages)."""
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return None
