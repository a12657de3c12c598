"""Run discovery: which files under a folder belong together, and what each run is called.

A folder handed to `forensics analyze` may hold one run (a log, its config, checkpoints), or
many (eleven speedrun logs, six Megatron golden-value files, a TensorBoard log dir with one
subfolder per run). Merging them silently would put several runs' steps on one axis and hide
their spikes, so discovery decides:

* The walk reads every real file once: links are followed only when they stay inside the
  folder given, a link loop is reported and cut, and anything that is not a regular file
  (a FIFO, a device, a socket) is skipped with a warning instead of blocking a read.
* Metric sources written by different writers (a text log and a TensorBoard folder, a
  `trainer_state.json` and a JSONL) are one run: the same run logged twice. Sources of the
  *same* format whose step ranges overlap are different runs, unless one clearly continues
  the other (it starts in the second half of the other's steps, at most half the other's
  span after its last step, and goes further: a resumed run, such as a Lightning
  `version_1/` after `version_0/`, whose first steps after a crash may be lost with the
  rows a buffered logger had not yet written); such a chain is one run, and a note says so,
  naming the steps neither log holds.
* Configs, checkpoints and batch manifests belong to every run whose metric sources sit in
  their folder or below it. A `forensics/` subfolder (our live-run recorder) is part of its
  parent folder's run.
* A Hugging Face output folder often has no `trainer_state.json` of its own (only
  `Trainer.save_state()` writes one; a run that crashed or was stopped never does), but each
  `checkpoint-N/` holds the whole log history up to N. Such a folder's metrics are read from
  its latest checkpoint's `trainer_state.json`, and a note says which and what it lacks.

Step ranges are only needed where one folder holds several sources of one format; they are
read with the format's reader, which keeps what it read on the source (`Source.result`):
the ingest stores that instead of reading the file a second time.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.canon import alias_table
from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult
from forensics.ingest.checkpoints import HF_CHECKPOINT_DIR
from forensics.ingest.readers import mlflow
from forensics.lazy import lazy_module
from forensics.store.blocks import value_column

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

# File names too generic to name a run: the run takes its folder's name instead.
GENERIC_STEMS = {"metrics", "log", "main", "train", "trainer_state", "events", "history", "stdout"}
RECORDER_DIR = "forensics"  # written by our live-run recorder inside a run folder
HF_STATE = "trainer_state.json"
SKIP_DIRS = {"__pycache__", ".git", ".ipynb_checkpoints", "plots", "figures"}
MAX_DEPTH = 4

Classify = Callable[[Path], tuple[str, "Reader | None"]]
IsSourceDir = Callable[[Path], bool]


@dataclass
class Source:
    path: Path
    kind: str  # metrics | config | checkpoint | manifest | token_shard | token_counts
    reader: Reader | None
    # What discovery already read of a metric source (to learn its step range), handed on
    # to the ingest so that the file is read once.
    result: ReadResult | None = field(default=None, compare=False, repr=False)


@dataclass
class RunGroup:
    """One run: its name, its sources, and what discovery has to say about it."""

    name: str
    sources: list[Source]
    notes: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [s.path for s in self.sources]


@dataclass
class Walk:
    found: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def run_name_for(path: Path) -> str:
    """A run's name from its folder or log file (generic file names take the folder's)."""
    path = Path(os.path.abspath(path))
    if path.is_dir():
        return _folder_name(path)
    stem = path.name.split(".")[0] if path.name.startswith("events.out") else path.stem
    if stem.lower() in GENERIC_STEMS or path.name.startswith("events.out"):
        return _folder_name(path.parent)
    return stem


def _folder_name(folder: Path) -> str:
    if folder.name == RECORDER_DIR and folder.parent.name:
        return folder.parent.name
    return folder.name


def walk(root: Path, is_source_dir: IsSourceDir) -> Walk:
    """Every candidate source under `root`, each real file once (see the module docstring)."""
    out = Walk()
    top = root.resolve()
    seen_dirs: set[Path] = set()
    seen_files: set[Path] = set()

    def visit(folder: Path, depth: int) -> None:
        real = folder.resolve()
        if real in seen_dirs:
            out.warnings.append(f"{folder}: link loop (already visited as {real}): not entered")
            return
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            out.warnings.append(f"{folder}: cannot list the folder ({exc.strerror or exc})")
            return
        for entry in entries:
            if entry.name.startswith(".") or entry.name in SKIP_DIRS:
                continue
            _visit_entry(Path(entry.path), entry.is_symlink(), depth)

    def _visit_entry(path: Path, is_link: bool, depth: int) -> None:
        try:
            real = path.resolve(strict=True)
            mode = os.stat(path).st_mode
        except (OSError, RuntimeError):
            what = "a link loop" if is_link else "unreadable"
            out.warnings.append(f"{path}: {what} (or a broken link): skipped")
            return
        if is_link and not real.is_relative_to(top):
            out.warnings.append(f"{path}: a link to {real}, outside {top}: not followed")
            return
        if stat.S_ISDIR(mode):
            if real in seen_dirs:
                out.warnings.append(f"{path}: link loop (already visited as {real}): not entered")
            elif is_source_dir(path):
                seen_dirs.add(real)
                out.found.append(path)
            elif depth < MAX_DEPTH:
                visit(path, depth + 1)
        elif stat.S_ISREG(mode):
            if real in seen_files:
                return  # a second link to a file already read
            seen_files.add(real)
            out.found.append(path)
        else:
            out.warnings.append(f"{path}: not a regular file (a FIFO, device or socket): skipped")

    visit(root, 0)
    return out


def group(
    root: Path, sources: list[Source], notes: list[str], step_range: StepRange | None = None
) -> list[RunGroup]:
    """Split the sources found under `root` into runs (see the module docstring)."""
    deleted = [s for s in sources if _mlflow_meta(s.path).get("lifecycle_stage") == "deleted"]
    sources = [s for s in sources if s not in deleted]
    notes = notes + [f"{s.path}: a deleted MLflow run: skipped" for s in deleted]
    metrics = [s for s in sources if s.kind == "metrics"]
    others = [s for s in sources if s.kind != "metrics"]
    chains = _split_metrics(metrics, step_range or read_step_range)
    if len(chains) <= 1:
        run = RunGroup(run_name_for(root), sources, list(notes))
        run.notes += [n for chain in chains for n in chain.notes]
        return [run]
    runs: list[RunGroup] = []
    for chain in chains:
        homes = {_home(s.path) for s in chain.sources}
        attached = [o for o in others if any(_within(h, _home(o.path)) for h in homes)]
        runs.append(RunGroup(_chain_name(chain, root), attached + chain.sources, chain.notes))
    _unique_names(runs)
    if notes and runs:
        runs[0].notes += notes
    return runs


@dataclass
class _Chain:
    sources: list[Source]
    lo: int | None
    hi: int | None
    notes: list[str] = field(default_factory=list)
    spacing: int = 1  # median steps between its logged points (its log interval)
    # the steps it logged, NaN included, as a note quotes them (lo..hi count finite values)
    shown: tuple[int, int] | None = None

    @property
    def logged(self) -> tuple[int | None, int | None]:
        """First and last step it logged, NaN included (else of its finite values)."""
        return self.shown or (self.lo, self.hi)


# (first step, last step, median steps between logged points) of a source
StepRange = Callable[[Source], tuple[int, int, int] | None]


def read_step_range(src: Source) -> tuple[int, int, int] | None:
    """First and last step of a metric source's training loss (else of any metric), and
    its log interval. What was read stays on `src.result` for the ingest."""
    assert src.reader is not None
    try:
        result = src.reader.read(src.path)
    except Exception:  # noqa: BLE001 - the ingest reads it again and reports the error
        return None
    src.result = result
    return _step_range(result)


def _step_range(result: ReadResult) -> tuple[int, int, int] | None:
    """Steps of the loss series (else of every series) where a value is logged, from the
    blocks as read: no long frame of every value. NaN values count only when no other value
    is logged (Megatron golden values write "nan" for steps with no data)."""
    table = alias_table()
    series = [(b, i) for b in result.blocks for i in range(len(b.names))]
    picked = [(b, i) for b, i in series if table.canonical(b.names[i]) == "loss"] or series
    logged: list[pl.Series] = []
    finite: list[pl.Series] = []
    for block, i in picked:
        frame = block.polars().select("step", pl.col(value_column(i)).alias("v"))
        frame = frame.filter(pl.col("v").is_not_null())
        logged.append(frame["step"])
        finite.append(frame.filter(pl.col("v").is_not_nan())["step"])
    steps = [s for s in finite if len(s)] or [s for s in logged if len(s)]
    if not steps:
        return None
    both = pl.concat(steps).unique().sort()
    spacing = both.diff().drop_nulls().median() if len(both) > 1 else 1
    return int(both[0]), int(both[-1]), max(1, int(spacing or 1))  # type: ignore[arg-type]


def _logged_range(src: Source) -> tuple[int, int] | None:
    """First and last step where the source's loss (else any metric) has a value, NaN
    included: the range a note quotes. A resumed run that diverged logged NaN to its end
    (Lightning's version_2 at 304-599, NaN from 504), which `_step_range` leaves out. None
    when the source was not read here."""
    if src.result is None:
        return None
    table = alias_table()
    series = [(b, i) for b in src.result.blocks for i in range(len(b.names))]
    picked = [(b, i) for b, i in series if table.canonical(b.names[i]) == "loss"] or series
    steps = [
        block.polars().filter(pl.col(value_column(i)).is_not_null())["step"] for block, i in picked
    ]
    both = pl.concat([s for s in steps if len(s)]) if any(len(s) for s in steps) else None
    if both is None:
        return None
    return int(both.min()), int(both.max())  # type: ignore[arg-type]


def _span(chain: _Chain) -> str:
    """`lo-hi` of a chain as logged (NaN included), else of its finite values."""
    lo, hi = chain.logged
    return f"{lo}-{hi}"


def _split_metrics(metrics: list[Source], step_range: StepRange) -> list[_Chain]:
    """Chains of same-format sources that continue each other; formats side by side."""
    by_format: dict[str, list[Source]] = {}
    for s in metrics:
        by_format.setdefault(s.reader.name if s.reader else "", []).append(s)
    if len(metrics) <= 1:
        return [_Chain(metrics, None, None)] if metrics else []
    chains_per_format: dict[str, list[_Chain]] = {}
    for fmt, group_ in by_format.items():
        ranged = [(s, step_range(s)) for s in group_]
        ranged.sort(key=lambda t: (t[1] or (0, 0, 0), str(t[0].path)))
        chains: list[_Chain] = []
        for src, rng in ranged:
            lo, hi, spacing = rng if rng else (None, None, 1)
            target = _continued(chains, lo, hi, spacing)
            shown = _logged_range(src)
            if target is None:
                chains.append(_Chain([src], lo, hi, spacing=spacing, shown=shown))
                continue
            before = target.sources[-1].path
            names = (src.path.name, before.name)
            if names[0] == names[1]:  # version_1/metrics.csv continues version_0/metrics.csv
                names = (f"{src.path.parent.name}/{names[0]}", f"{before.parent.name}/{names[1]}")
            resumed = _Chain([src], lo, hi, shown=shown)
            target.notes.append(
                f"{names[0]} continues {names[1]} from step {lo} "
                f"(steps {_span(target)} then {_span(resumed)}): read as one resumed run"
                + _unlogged(target, lo, spacing)
            )
            target.sources.append(src)
            target.hi, target.spacing = hi, max(target.spacing, spacing)
            if target.shown and shown:
                target.shown = (target.shown[0], max(target.shown[1], shown[1]))
        chains_per_format[fmt] = chains
    # Another writer of the same run logs the same steps: a chain of another format joins
    # the chain of the main format whose steps it overlaps, in the same run folder;
    # otherwise it is a run of its own.
    main = max(chains_per_format.values(), key=len)
    out = list(main)
    for chains in chains_per_format.values():
        if chains is main:
            continue
        for chain in chains:
            home = _home(chain.sources[0].path)
            target = next(
                (c for c in main if _home(c.sources[0].path) == home and _overlap(c, chain)),
                None,
            )
            if target is None:
                target = next((c for c in main if _twin_logger(c, chain)), None)
                if target is not None:
                    target.notes.append(_twin_note(target, chain))
            if target is not None:
                target.sources += chain.sources
                target.notes += chain.notes  # its own resume, if any
            else:
                out.append(chain)
    return out


_MIN_SHARED = 3  # loss points two writers must share, all equal, to be one fit's two copies


def _twin_logger(main: _Chain, other: _Chain) -> bool:
    """Another writer's copy of the same fit in a sibling folder: Lightning gives each of
    `logger=[CSVLogger(root), TensorBoardLogger(root)]` a version folder of its own
    (`version_0/metrics.csv`, `version_1/events...`). Their loss values are equal (to an
    event file's float32) at every shared step; another fit in the same root logs other
    values, so it stays a run of its own."""
    if _home(main.sources[0].path).parent != _home(other.sources[0].path).parent:
        return False
    if not _overlap(main, other):
        return False
    mine, theirs = _loss_points(main), _loss_points(other)
    shared = set(mine) & set(theirs)
    if len(shared) < _MIN_SHARED:
        return False
    return all(_same_value(mine[s], theirs[s]) for s in shared)


def _same_value(a: float, b: float) -> bool:
    """Equal as logged: both NaN, or equal to float32 precision (an event file's copy)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def _loss_points(chain: _Chain) -> dict[int, float]:
    """{step: loss} of a chain's sources as discovery read them (later sources win)."""
    table = alias_table()
    out: dict[int, float] = {}
    for src in chain.sources:
        if src.result is None:
            continue
        for block in src.result.blocks:
            for i, name in enumerate(block.names):
                if table.canonical(name) != "loss":
                    continue
                frame = block.polars().select("step", pl.col(value_column(i)).alias("v"))
                out.update(frame.filter(pl.col("v").is_not_null()).iter_rows())
    return out


def _twin_note(main: _Chain, other: _Chain) -> str:
    """Why two writers' folders are one run."""
    first, theirs = main.sources[0].path, other.sources[0].path
    return (
        f"{theirs.parent.name}/{theirs.name} logs the same loss at the same steps as "
        f"{first.parent.name}/{first.name} (another logger of the same fit, as Lightning "
        "writes a CSVLogger and a TensorBoardLogger to sibling version folders): read as "
        "one run"
    )


def _overlap(a: _Chain, b: _Chain) -> bool:
    """Do two chains log common steps (unknown ranges count as overlapping)?"""
    if a.lo is None or a.hi is None or b.lo is None or b.hi is None:
        return True
    return max(a.lo, b.lo) <= min(a.hi, b.hi)


def _continued(
    chains: list[_Chain], lo: int | None, hi: int | None, spacing: int = 1
) -> _Chain | None:
    """The chain that a source with steps lo..hi resumes, if one clearly does."""
    if lo is None or hi is None:
        return None
    for chain in chains:
        if chain.lo is None or chain.hi is None:
            continue
        # a resume restarts from a late checkpoint: it starts in the second half of what
        # came before (a run from scratch starts where the other started: a second run).
        # It may start after the last logged step: the steps in between were trained, not
        # logged (a Lightning resume that logs every 2 steps after every 10 starts at 932
        # after 930; a crash loses the rows a buffered logger had not written, CSVLogger
        # flushing every 100 steps, while the checkpoint restored is later), by at most
        # half of what came before: a stage that starts further on is a run of its own.
        # Measured on what the chain logged, NaN included: a run that logged NaN to
        # 3068 (its finite values end at 1656) and was resumed at 3152 resumes 84 steps on.
        end = chain.logged[1]
        if end is None:
            continue
        half = max(1, (end - chain.lo) // 2)
        gap = max(chain.spacing, spacing, half)
        if chain.lo + half <= lo <= end + gap and hi > chain.hi:
            return chain
    return None


def _unlogged(chain: _Chain, lo: int | None, spacing: int) -> str:
    """The steps neither log holds, when the resume starts more than a log interval on."""
    end = chain.logged[1]
    if lo is None or end is None or lo <= end + max(chain.spacing, spacing):
        return ""
    return f"; steps {end + 1}-{lo - 1} are in neither log (trained, not logged)"


def _home(path: Path) -> Path:
    """The folder a source speaks for (a `forensics/` recorder folder, or an HF checkpoint's
    trainer_state.json read for its run, speaks for its parent)."""
    folder = path.parent
    in_checkpoint = path.name == HF_STATE and HF_CHECKPOINT_DIR.match(folder.name)
    if folder.name == RECORDER_DIR or in_checkpoint:
        folder = folder.parent
    return folder


def checkpoint_histories(found: list[Source], classify: Classify) -> tuple[list[Source], list[str]]:
    """The latest `checkpoint-N/trainer_state.json` of every folder whose HF checkpoints have
    one while the folder has no trainer_state.json of its own (module docstring), as metric
    sources, with a note each."""
    own = {s.path.parent for s in found if s.kind == "metrics" and s.path.name == HF_STATE}
    latest: dict[Path, tuple[int, Path]] = {}
    for s in found:
        m = HF_CHECKPOINT_DIR.match(s.path.name)
        if s.kind != "checkpoint" or m is None or not (s.path / HF_STATE).is_file():
            continue
        n, parent = int(m.group(1)), s.path.parent
        if parent not in own and n >= latest.get(parent, (-1, s.path))[0]:
            latest[parent] = (n, s.path)
    out: list[Source] = []
    notes: list[str] = []
    for parent, (n, ckpt) in sorted(latest.items()):
        kind, reader = classify(ckpt / HF_STATE)
        if kind != "metrics":
            continue
        out.append(Source(ckpt / HF_STATE, kind, reader))
        notes.append(
            f"{parent}: no {HF_STATE} of its own (written by Trainer.save_state()); the log "
            f"history is read from its latest checkpoint, {ckpt.name}/{HF_STATE}, so steps "
            f"logged after {n} are not in it"
        )
    return out, notes


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def _mlflow_meta(folder: Path) -> dict[str, object]:
    """An MLflow run folder's meta.yaml ({} for anything else)."""
    if not (folder.is_dir() and mlflow.is_run_dir(folder)):
        return {}
    try:
        return mlflow.run_meta(folder)
    except InputError:
        return {}  # the reader reports it when it reads the run (parsed once for both)


def _chain_name(chain: _Chain, root: Path) -> str:
    first = chain.sources[0].path
    mlflow_name = _mlflow_meta(first).get("run_name")
    if mlflow_name:
        return str(mlflow_name)
    name = run_name_for(first)
    return name if name != root.name or first.parent != root else first.stem


def _unique_names(runs: list[RunGroup]) -> None:
    """Two runs named alike (two `log.txt` in sibling folders) get the folder too."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
    seen: dict[str, int] = {}
    for r in runs:
        if counts[r.name] > 1:
            seen[r.name] = seen.get(r.name, 0) + 1
            first = r.sources[0].path if r.sources else None
            stem = first.stem if first is not None else ""
            r.name = f"{r.name}-{stem}" if stem and stem != r.name else f"{r.name}-{seen[r.name]}"
