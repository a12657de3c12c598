"""JSONL / NDJSON metric logs: one JSON object per line, one line per logged record.

Nested objects become '/'-joined raw names (`{"train": {"loss": 2}}` → `train/loss`); the
step, wall-time and value rules are those of `_wide` (step keys, in order of preference:
trainer/global_step, global_step, global_step/max_steps, step, iteration, iter, _step; a
step written "N/M" is N). Bare `NaN`, `Infinity`
and `-Infinity` tokens (Python's `json.dumps` writes them) are values; `null` is no data;
booleans are 0/1; text that does not spell a number is skipped.

Two paths give the same result (one exception: a fractional step past DuckDB's 20,480-line
sample, in a step column of integers, is rounded there; see `_jsonl_stage`). Large files
go through DuckDB's vectorised JSON reader (`_jsonl_stage`: every key, exact values, one
read of the file in the common case); when
the reader is given the store's connection the log is staged there and goes into the
store without leaving DuckDB. Small files, nested records and anything DuckDB declines
take the exact Python path, which is also the one that names the malformed line. A torn
last line (a run killed mid-write) is dropped with a warning; a malformed line anywhere
else is an InputError.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.readers import _jsonl_stage as staging
from forensics.ingest.readers._wide import (
    COUNTER_TEXT,
    EPOCH_KEYS,
    STEP_KEYS,
    WALL_TIME_KEYS,
    wide_to_block,
)
from forensics.lazy import lazy_module
from forensics.store.blocks import MetricBlock, block_to_long

if TYPE_CHECKING:
    import duckdb
    import polars as pl
else:
    duckdb = lazy_module("duckdb")
    pl = lazy_module("polars")

# One JSON object with a step key, yet not a per-step log: W&B's end-of-run summary.
NOT_HISTORY = frozenset({"wandb-summary.json", "wandb-metadata.json"})
SMALL_FILE_BYTES = 1 << 20  # below this, starting DuckDB costs more than parsing in Python
_STEP_SET = frozenset(STEP_KEYS)
_COUNTERS = frozenset(STEP_KEYS + EPOCH_KEYS)  # a per-epoch log is numbered (_wide)
_CHUNK_ROWS = 50_000
_TAIL_BYTES = 1 << 20
_GLOB_CHARS = re.compile(r"[*?\[\]{}]")
_DICT_KEYS = 256  # above this many keys in a chunk, records are pivoted (see _rows_frame)
_EXPECTED = "one JSON object per line"
_NUMBER_TEXT = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE
)


@register
class JsonlReader(Reader):
    name = "jsonl"
    description = "JSON-lines metric logs (one object per line, nested keys become a/b)"
    priority = 30  # after the specific JSON formats (golden values, HF, W&B)

    def sniff(self, path: Path, head: str) -> bool:
        if path.name in NOT_HISTORY:
            return False
        record = first_record(head)
        return record is not None and any(k in _COUNTERS for k in flat_keys(record))

    def read(self, path: Path) -> ReadResult:
        block, warnings, _ = _read(path, None, None)
        return ReadResult(blocks=[block], warnings=warnings)

    def read_with(self, con: duckdb.DuckDBPyConnection, path: Path) -> ReadResult:
        block, warnings, release = _read(path, None, con)
        return ReadResult(blocks=[block], warnings=warnings, release=release)


def first_record(head: str) -> dict[str, Any] | None:
    """The first line of `head` as a JSON object, or None."""
    line = next((ln for ln in head.splitlines() if ln.strip()), "")
    if not line.lstrip().startswith("{"):
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def flat_keys(record: dict[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, value in record.items():
        name = f"{prefix}{key}"
        out.extend(flat_keys(value, name + "/") if isinstance(value, dict) else [name])
    return out


def read_jsonl(path: Path, *, exact: bool | None = None) -> tuple[pl.DataFrame, list[str]]:
    """Long-form metrics and warnings; `exact` forces (True) or forbids (False) the Python path.

    With exact=None the size decides, and the DuckDB path falls back to the exact one
    whenever it cannot vouch for its result.
    """
    block, warnings, _ = _read(path, exact, None)
    return block_to_long(block), warnings


Release = Callable[[], None]


def _read(
    path: Path, exact: bool | None, con: duckdb.DuckDBPyConnection | None
) -> tuple[MetricBlock, list[str], Release | None]:
    """The log as one block, its warnings, and how to drop what was staged on `con`."""
    good_bytes, warnings = _good_extent(path)
    if exact is False or (exact is None and good_bytes >= SMALL_FILE_BYTES):
        fast = _fast_block(path, good_bytes, con)
        if fast is not None:
            block, more, release = fast
            return block, warnings + more, release
    block, more = wide_to_block(_exact_wide(path, good_bytes), path)
    return block, warnings + more, None


# ----- torn last line ---------------------------------------------------------------------


def _good_extent(path: Path) -> tuple[int, list[str]]:
    """Bytes of `path` worth reading: all of it, or all but a torn last line (with a warning)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        start = max(0, size - _TAIL_BYTES)
        fh.seek(start)
        tail = fh.read()
    end = len(tail.rstrip())
    cut = tail.rfind(b"\n", 0, end) + 1
    if end == 0 or (cut == 0 and start > 0):
        return size, []  # blank tail, or a last line longer than we look at: let the read judge
    last = tail[cut:end]
    try:
        json.loads(last)
        return size, []
    except (ValueError, RecursionError):
        pass
    line = _count_newlines(path, start + cut) + 1
    shown = last[:60].decode("utf-8", errors="replace")
    return start + cut, [
        f"line {line}: last record is cut off ({shown!r}...); kept the {line - 1} lines before it"
    ]


def _count_newlines(path: Path, upto: int) -> int:
    count, done = 0, 0
    with open(path, "rb") as fh:
        while done < upto:
            block = fh.read(min(1 << 24, upto - done))
            if not block:
                break
            count += block.count(b"\n")
            done += len(block)
    return count


# ----- vectorised path --------------------------------------------------------------------


def _fast_block(
    path: Path, good_bytes: int, con: duckdb.DuckDBPyConnection | None
) -> tuple[MetricBlock, list[str], Release | None] | None:
    """The log through DuckDB, or None when only the exact path will do.

    On a given connection (the store's) the block may be a relation on a staged table,
    dropped by the returned release; otherwise a private connection is used and closed.
    """
    own = con is None
    if con is None:
        con = duckdb.connect()
        con.execute("SET enable_progress_bar = false")
    try:
        with tempfile.TemporaryDirectory(prefix="forensics-jsonl-") as tmp:
            src = literal_path(path, Path(tmp))
            if good_bytes < path.stat().st_size:
                src = Path(tmp) / "prefix.jsonl"
                _copy_prefix(path, src, good_bytes)
            table = staging.stage(con, src)
        if table is None:
            return None
        return _staged_block(con, table, path, own)
    finally:
        if own:
            con.close()


def _staged_block(
    con: duckdb.DuckDBPyConnection, table: str, path: Path, own: bool
) -> tuple[MetricBlock, list[str], Release | None] | None:
    keep = False
    try:
        if not own:
            block = staging.sql_block(con, table, path)
            if block is not None:
                keep = True
                return block, [], lambda: staging.drop(con, table)
        wide = staging.staged_wide(con, table)
    finally:
        if not keep:
            staging.drop(con, table)
    if wide is None:
        return None
    try:
        block, warnings = wide_to_block(wide, path)
    except InputError:
        return None  # the exact path names the offending line
    return block, warnings, None


def literal_path(path: Path, tmp: Path) -> Path:
    """A name for `path` that DuckDB reads literally: DuckDB expands `*`, `?`, `[..]` and
    `{..}` in file names as globs (`metrics[0].jsonl` would read `metrics0.jsonl`), and has
    no switch to turn that off, so such a file is read through a plain-named link to it."""
    if not _GLOB_CHARS.search(str(path)):
        return path
    link = tmp / "source.jsonl"
    link.symlink_to(path.resolve())
    return link


def _copy_prefix(src: Path, dst: Path, nbytes: int) -> None:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        remaining = nbytes
        while remaining:
            block = fin.read(min(1 << 24, remaining))
            if not block:
                break
            fout.write(block)
            remaining -= len(block)
    shutil.copystat(src, dst)


# ----- exact path -------------------------------------------------------------------------


class _BadStep(ValueError):
    def __init__(self, key: str, value: Any) -> None:
        super().__init__(key)
        self.key, self.value = key, value


def _exact_wide(path: Path, good_bytes: int) -> pl.DataFrame:
    """Parse line by line with Python's json (NaN/Infinity tokens accepted), in chunks."""
    chunks: list[pl.DataFrame] = []
    rows: list[dict[str, float]] = []
    pos = 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if pos >= good_bytes:
                break
            pos += len(raw)
            if raw.strip():
                rows.append(_parse_line(path, raw, lineno))
            if len(rows) >= _CHUNK_ROWS:
                chunks.append(_rows_frame(rows))
                rows = []
    if rows:
        chunks.append(_rows_frame(rows))
    if not chunks:
        raise InputError(path, "no JSON records", expected=_EXPECTED)
    return pl.concat(chunks, how="diagonal_relaxed")


def _parse_line(path: Path, raw: bytes, lineno: int) -> dict[str, float]:
    try:
        record = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
    except json.JSONDecodeError as exc:
        problem = f"malformed JSON ({exc.msg} at column {exc.colno})"
        raise InputError(path, problem, line=lineno, expected=_EXPECTED) from exc
    except (ValueError, RecursionError) as exc:  # bad UTF-8, 5000-digit ints, deep nesting
        problem = f"malformed JSON ({str(exc)[:80]})"
        raise InputError(path, problem, line=lineno, expected=_EXPECTED) from exc
    if not isinstance(record, dict):
        problem = f"a JSON {type(record).__name__}, not an object"
        raise InputError(path, problem, line=lineno, expected=_EXPECTED)
    out: dict[str, float] = {}
    try:
        _flatten(record, "", out)
    except _BadStep as exc:
        raise InputError(
            path, f"step {exc.value!r} is not an integer", line=lineno, field=exc.key,
            expected="integer steps",
        ) from exc  # fmt: skip
    except RecursionError as exc:
        raise InputError(path, "record nested too deeply", line=lineno) from exc
    return out


def _flatten(record: dict[str, Any], prefix: str, out: dict[str, float]) -> None:
    for key, value in record.items():
        name = prefix + key if prefix else key
        if name in _STEP_SET:
            out[name] = _step_value(name, value)
        elif type(value) is float:  # the common case first: this loop runs per value
            out[name] = value
        elif isinstance(value, dict):
            _flatten(value, name + "/", out)
        else:
            _add_other(name, value, out)


def _add_other(name: str, value: Any, out: dict[str, float]) -> None:
    """A value that is not a float: int, bool, numeric text or a clock reading; else skip."""
    number = _number(value)
    if number is None and name in WALL_TIME_KEYS and isinstance(value, str):
        number = _iso_seconds(value)
    if number is not None:
        out[name] = number


def _step_value(key: str, value: Any) -> float:
    if isinstance(value, str) and (counter := re.match(COUNTER_TEXT, value)):
        return float(counter.group(1))  # ms-swift `"global_step/max_steps": "12/94"`
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _BadStep(key, value)
    if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
        raise _BadStep(key, value)
    return float(value)


def _number(value: Any) -> float | None:
    """JSON value → float per the module rules (bool 0/1, numeric text, else None)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.copysign(math.inf, value)
    if isinstance(value, str):
        return _text_number(value)
    return None


def _text_number(text: str) -> float | None:
    """Same spellings the vectorised path accepts (polars' string → float64 cast)."""
    return float(text) if _NUMBER_TEXT.fullmatch(text.strip()) else None


def _iso_seconds(text: str) -> float | None:
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _rows_frame(rows: list[dict[str, float]]) -> pl.DataFrame:
    """Records as a wide frame, columns in first-seen order. Narrow records go through
    `from_dicts`; many distinct keys (a sparse log of 10,000 metrics) through a pivot of
    (row, key, value) triples, since `from_dicts` costs rows x keys in Python."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    if len(keys) <= _DICT_KEYS:
        return pl.from_dicts(rows, schema={k: pl.Float64 for k in keys})
    index = [i for i, row in enumerate(rows) for _ in row]
    names = [k for row in rows for k in row]
    values = [v for row in rows for v in row.values()]
    long = pl.DataFrame(
        {"\0row": index, "\0key": names, "\0value": values},
        schema={"\0row": pl.Int64, "\0key": pl.Utf8, "\0value": pl.Float64},
    )
    wide = long.pivot(on="\0key", index="\0row", values="\0value", aggregate_function=None)
    every = pl.DataFrame({"\0row": range(len(rows))}, schema={"\0row": pl.Int64})
    wide = every.join(wide, on="\0row", how="left", maintain_order="left")
    return wide.select([pl.col(k).cast(pl.Float64) for k in keys])
