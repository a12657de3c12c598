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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import forensics.ingest.readers  # noqa: F401 - registers the readers once, at import
from forensics.canon import AliasTable, alias_table, natural_key
from forensics.errors import ForensicsError, InputError, one_line
from forensics.ingest import batches, checkpoints, config, hf_args, identity
from forensics.ingest.base import (
    Reader,
    ReadResult,
    detect_format,
    get_reader,
    sniff_format,
    text_formats,
)
from forensics.ingest.discover import (
    RunGroup,
    Source,
    checkpoint_histories,
    group,
    run_name_for,
    walk,
)
from forensics.ingest.readers import mlflow, tensorboard
from forensics.lazy import lazy_module
from forensics.store import Store, conflicts
from forensics.store.arrow import to_polars
from forensics.store.blocks import MetricBlock, value_column

if TYPE_CHECKING:
    import polars as pl
else:  # a plain JSONL log goes to the store through DuckDB alone: no polars import
    pl = lazy_module("polars")

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


def _read_metrics(
    store: Store, path: Path, reader: Reader, cached: ReadResult | None = None
) -> ReadResult:
    """Read a metric source, letting the reader stage big tables on the store's connection;
    `cached`: what discovery already read of it (not read again).

    Called outside the ingest transaction (see Reader.read_with). Repeated steps are
    resolved here, once for every format.
    """
    result = cached if cached is not None else reader.read_with(store.con, path)
    try:
        _drop_repeated_steps(result)
    except BaseException:
        result.release()
        raise
    return result


def _drop_repeated_steps(result: ReadResult) -> None:
    """A resumed run logs some steps twice: keep the last value, say so as a warning.

    The values a resume wrote over (a later stretch of the file went back to an earlier
    step and logged them again) are the attempt the run abandoned, often the spike or the
    NaN that made someone roll it back: they are kept in `result.superseded` with the index
    of the file segment they were logged in (`attempt`, counted from 0 where the series'
    step goes back), and stored in `conflicts` (rule REWOUND), never dropped. A step logged
    again at once (a progress bar redrawn, one line per rank) is a repeat in place, no
    attempt: kept there too, with no segment."""
    if not any(_repeats_steps(b) for b in result.blocks):
        return
    long = result.metrics.with_row_index("_row")
    before = long.height
    back = (pl.col("step").diff().over("raw_name") < 0).fill_null(False)
    long = long.with_columns(back.cast(pl.Int32).cum_sum().over("raw_name").alias("attempt"))
    key = ("step", "raw_name")
    last = pl.col("_row") == pl.col("_row").max().over(*key)
    in_place = pl.col("attempt") == pl.col("attempt").max().over(*key)
    segment = pl.when(in_place).then(None).otherwise(pl.col("attempt")).alias("attempt")
    result.superseded = long.with_columns(segment).filter(~last).drop("_row")
    long = long.filter(last).drop("_row", "attempt").sort("step")
    result.release()  # what was staged is superseded by the rows below
    result.metrics = long
    repeated = before - long.height
    rewound = int(result.superseded["attempt"].is_not_null().sum())
    result.warnings.append(_repeat_warning(repeated, rewound))


def _repeat_warning(repeated: int, rewound: int) -> str:
    if not repeated:
        return "the steps of some series go back in the file (none repeats): sorted by step"
    parts = []
    if rewound:
        parts.append(
            f"{rewound} repeated (step, metric) rows from a restart or resume: kept the last "
            "value of each; the earlier ones (the attempt the run went back from) are in table "
            "`conflicts`"
        )
    if repeated - rewound:
        parts.append(
            f"{repeated - rewound} (step, metric) rows logged again at once (a progress bar "
            "redrawn, one line per rank, a tag written twice at one step): kept the last of "
            "each; the others are in table `conflicts`"
        )
    return "; ".join(parts)


def _repeats_steps(block: MetricBlock) -> bool:
    """Does a series of the block log a step twice or go back? Cheap when steps only rise."""
    if block.rising:
        return False
    if isinstance(block.frame, pl.DataFrame):
        steps = block.frame["step"]
    else:
        steps = to_polars(block.frame.select("step"))["step"]
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
    _store_superseded(store, run_id, source, result, table)
    if result.has_events:
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


def _store_superseded(
    store: Store, run_id: str, source: str, result: ReadResult, table: AliasTable
) -> None:
    """The values a resume wrote over (rule conflicts.REWOUND: the abandoned attempt stays
    in the store as evidence) and those logged again at once (conflicts.REPEATED), into
    `conflicts` beside the value kept."""
    old = result.superseded
    if old is None or old.height == 0:
        return
    # one row per (step, raw_name): _drop_repeated_steps kept the last of each
    kept = result.metrics.select("step", "raw_name", pl.col("value").alias("kept_value"))
    names = {n: table.canonical(n) for n in old["raw_name"].unique().to_list()}
    frame = old.join(kept, on=["step", "raw_name"], how="left").with_columns(
        pl.lit(run_id).alias("run_id"),
        pl.col("raw_name").replace_strict(names, return_dtype=pl.Utf8).alias("metric"),
        pl.lit(source).alias("source"),
        pl.col("raw_name").alias("kept_raw_name"),
        pl.lit(source).alias("kept_source"),
        pl.when(pl.col("attempt").is_null())
        .then(pl.lit(conflicts.REPEATED))
        .otherwise(pl.lit(conflicts.REWOUND))
        .alias("rule"),
    )
    store.insert_frame("conflicts", frame)


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
    """Ingest the runs found under `paths` (discover.py decides which files belong together
    and names each run; all of them are one run when `run` is given).

    `allow_outside_sources` lets batch manifests name shards outside the run folder."""
    with identity.remembered():  # each file hashed once, by discovery or by identity
        return _ingest_paths(store, paths, run, fmt, aliases, progress, allow_outside_sources)


def _ingest_paths(
    store: Store,
    paths: list[Path],
    run: str | None,
    fmt: str | None,
    aliases: str | None,
    progress: Progress | None,
    allow_outside_sources: bool,
) -> list[RunSummary]:
    forced = get_reader(fmt) if fmt else None
    groups: dict[str, RunGroup] = {}
    given: dict[str, list[Path]] = {}  # the paths the user gave for each run
    for p in paths:
        _check_path(p)
        for g in _discover(p, forced, split=run is None):
            name = run or g.name
            if name in groups:
                groups[name].sources += g.sources
                groups[name].notes += g.notes
            else:
                groups[name] = RunGroup(name, list(g.sources), list(g.notes))
            given.setdefault(name, []).append(p)
    return [
        _ingest_run(
            store,
            name,
            g,
            forced,
            aliases,
            progress,
            None if allow_outside_sources else given[name],
        )
        for name, g in groups.items()
    ]


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
    histories, notes = checkpoint_histories(found, classify)
    found += histories
    walked.warnings += notes
    if not any(s.kind == "metrics" for s in found):
        links = sum("not followed" in w for w in walked.warnings)
        why = f" ({links} link(s) out of the folder not followed: pass their targets)"
        why = why if links else ""
        raise InputError(
            path, f"no metric log found{why}", expected="a training log in a known format"
        )
    if not split:
        return [RunGroup(run_name_for(path), found, walked.warnings)]
    unique, copies = _content_copies(found)
    groups = group(path, unique, walked.warnings)
    for copy, twin in copies:  # a copy joins its original's run, where ingest skips it
        next(g for g in groups if twin in g.sources).sources.append(copy)
    return groups


def _content_copies(found: list[Source]) -> tuple[list[Source], list[tuple[Source, Source]]]:
    """Metric logs with the same content as an earlier one (a copied file): they are one
    source, not a second run whose steps overlap the first's."""
    first: dict[str, Source] = {}
    unique: list[Source] = []
    copies: list[tuple[Source, Source]] = []
    for src in found:
        digest = identity.fingerprint(src.path) if src.kind == "metrics" else None
        if digest is not None and digest in first:
            copies.append((src, first[digest]))
            continue
        if digest is not None:
            first[digest] = src
        unique.append(src)
    return unique, copies


def _sources(run: RunGroup) -> list[Source]:
    """A run's sources, configs first so that later sources can merge into its config."""
    order = {"config": 0, "metrics": 1}
    return sorted(run.sources, key=lambda s: order.get(s.kind, 2))


@dataclass
class _Source:
    """A source to store: the path as found (read through it: readers look beside it),
    its identity (real path, the name it is stored under; content fingerprint)."""

    path: Path
    kind: str
    reader: Reader | None
    real: str
    digest: str
    result: ReadResult | None = None  # read already, by discovery (Source.result)


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
    store: Store, run_id: str, found: list[Source]
) -> tuple[list[_Source], list[SourceSummary]]:
    """Each source once: by real path (any spelling of a path is the same source) and by
    content (a copy is stored once). Skipped copies come back as summaries with a warning."""
    stored = store.source_fingerprints(run_id)
    seen_real: set[str] = set()
    seen_digest: dict[str, str] = {}
    out: list[_Source] = []
    skipped: list[SourceSummary] = []
    for source in found:
        path, kind = source.path, source.kind
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
        out.append(_Source(path, kind, source.reader, real, digest, source.result))
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
    run: RunGroup,
    forced: Reader | None,
    aliases: str | None,
    progress: Progress | None,
    given: list[Path] | None,
) -> RunSummary:
    """`given`: the paths the user named for this run, whose folder its manifests must stay
    inside; None when sources outside it are allowed."""
    summary = RunSummary(name, notes=list(run.notes))
    paths = run.paths
    root = _run_root(given) if given is not None else None
    found, skipped = _identify(store, name, _sources(run))
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
                    read[i] = _read_metrics(store, src.path, src.reader, src.result)
                except (ForensicsError, *_NOT_FAILURES):
                    raise
                except BaseException as exc:  # a Rust panic in polars is a BaseException
                    raise _source_error(src.path, exc) from exc
        if read and run.notes:  # what discovery found is said where the run's sources are
            read[min(read)].warnings.extend(run.notes)
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
            _hf_training_args(store, name, found, summary)
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


def _hf_training_args(store: Store, name: str, found: list[_Source], summary: RunSummary) -> None:
    """The batch settings of the latest HF `checkpoint-N/training_args.bin` into the run
    config (forensics/ingest/hf_args.py); a file that cannot be read is a warning on its
    checkpoint, never a failed ingest."""
    folders = [s for s in found if s.kind == "checkpoint" and (s.path / hf_args.NAME).is_file()]
    if not folders:
        return
    latest = max(folders, key=lambda s: natural_key(s.path.name))
    keys, warnings = hf_args.training_args_config(latest.path / hf_args.NAME)
    if warnings:
        store.add_source_warnings(name, latest.real, warnings)
        for s in summary.sources:
            if s.path == latest.real:
                s.warnings.extend(warnings)
    if keys:
        merged = config.add_canonical({**store.run_config(name), **keys})
        store.con.execute(
            "UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(merged, default=str), name]
        )


def _resolve_conflicts(store: Store, name: str, summary: RunSummary) -> None:
    """One value per (step, metric): see forensics/store/conflicts.py for the rule."""
    texts = text_formats()
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
