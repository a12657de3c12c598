"""JSONL / NDJSON metric logs: one JSON object per line, one line per logged record.

Nested objects become '/'-joined raw names (`{"train": {"loss": 2}}` → `train/loss`); the
step, wall-time and value rules are those of `_wide` (step keys, in order of preference:
trainer/global_step, global_step, step, iteration, iter, _step). Bare `NaN`, `Infinity`
and `-Infinity` tokens (Python's `json.dumps` writes them) are values; `null` is no data;
booleans are 0/1; text that does not spell a number is skipped.

Two paths give the same result. Large files go through DuckDB's vectorised JSON reader:
the full key set is found first (DuckDB's own schema sampling silently drops keys first
seen after 20,480 lines and rounds 1.5 to 2 in a column sampled as integers), then every
column is read with an explicit type. Small files, nested records and anything DuckDB
declines take the exact Python path, which is also the one that names the malformed line.
A torn last line (a run killed mid-write) is dropped with a warning; a malformed line
anywhere else is an InputError.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.readers._wide import STEP_KEYS, WALL_TIME_KEYS, pick_step_key, wide_to_long

# One JSON object with a step key, yet not a per-step log: W&B's end-of-run summary.
NOT_HISTORY = frozenset({"wandb-summary.json", "wandb-metadata.json"})
SMALL_FILE_BYTES = 1 << 20
_STEP_SET = frozenset(STEP_KEYS)  # below this, starting DuckDB costs more than parsing in Python
_CHUNK_ROWS = 50_000
_TAIL_BYTES = 1 << 20
# DuckDB's sampled type → the type we read the column as. Numbers (and all-null samples)
# as DOUBLE; text, including text DuckDB recognised as dates or UUIDs, as VARCHAR.
_NUMERIC_TYPES = ("BIGINT", "UBIGINT", "INTEGER", "HUGEINT", "DOUBLE", "FLOAT", "BOOLEAN")
_TEXT_TYPES = ("VARCHAR", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "DATE", "TIME", "UUID")
_NULL_TYPES = ('"NULL"', "NULL")
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
        return record is not None and any(k in STEP_KEYS for k in flat_keys(record))

    def read(self, path: Path) -> ReadResult:
        long, warnings = read_jsonl(path)
        return ReadResult(long, warnings=warnings)


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
    good_bytes, warnings = _good_extent(path)
    if exact is False or (exact is None and good_bytes >= SMALL_FILE_BYTES):
        wide = _fast_wide(path, good_bytes)
        if wide is not None:
            with suppress(InputError):  # the exact path below names the offending line
                long, more = wide_to_long(wide, path)
                return long, warnings + more
    long, more = wide_to_long(_exact_wide(path, good_bytes), path)
    return long, warnings + more


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


def _fast_wide(path: Path, good_bytes: int) -> pl.DataFrame | None:
    """The file as a wide frame through DuckDB, or None when only the exact path will do."""
    with tempfile.TemporaryDirectory(prefix="forensics-jsonl-") as tmp:
        src = path
        if good_bytes < path.stat().st_size:
            src = Path(tmp) / "prefix.jsonl"
            _copy_prefix(path, src, good_bytes)
        con = duckdb.connect()
        try:
            con.execute("SET enable_progress_bar = false")
            return _duckdb_wide(con, _sql_str(str(src)))
        except Exception:  # noqa: BLE001 - DuckDB, Arrow or text decoding: the exact path decides
            return None
        finally:
            con.close()


def _duckdb_wide(con: duckdb.DuckDBPyConnection, src: str) -> pl.DataFrame | None:
    types = _column_types(con, src)
    if types is None:
        return None
    columns = "{" + ", ".join(f"{_sql_str(k)}: '{t}'" for k, t in types.items()) + "}"
    table = con.sql(
        f"SELECT * FROM read_json({src}, format='newline_delimited', columns={columns})"
    ).to_arrow_table()
    wide = pl.DataFrame(pl.from_arrow(table))
    for key, kind in types.items():
        if kind == "VARCHAR" and wide[key].str.contains(r"^\s*[\[{]").any():
            return None  # an object or list DuckDB turned into text
    step_key = pick_step_key(wide.columns)
    if step_key is None or wide[step_key].null_count():
        return None  # records without a step (or not objects): the exact path names them
    return wide


def _column_types(con: duckdb.DuckDBPyConnection, src: str) -> dict[str, str] | None:
    """Every key of every line (one scan), typed from DuckDB's sample where it saw the key.

    None when the records are nested, or hold names DuckDB would fold together ("Loss"
    and "loss"): the exact path handles those.
    """
    found = con.sql(f"SELECT DISTINCT unnest(json_keys(json)) FROM read_ndjson_objects({src})")
    keys = {r[0] for r in found.fetchall()}
    describe = f"DESCRIBE SELECT * FROM read_json({src}, format='newline_delimited')"
    sampled = {r[0]: r[1] for r in con.sql(describe).fetchall()}
    if not keys or len({k.lower() for k in keys}) < len(keys):
        return None
    ordered = [k for k in sampled if k in keys] + sorted(keys - sampled.keys())
    types: dict[str, str] = {}
    for key in ordered:
        kind = sampled.get(key, "DOUBLE")
        if kind in _TEXT_TYPES:
            types[key] = "VARCHAR"
        elif kind in _NUMERIC_TYPES or kind in _NULL_TYPES:
            types[key] = "DOUBLE"
        else:
            return None
    return types


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


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
        record = json.loads(raw.decode("utf-8"))
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
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return pl.from_dicts(rows, schema={k: pl.Float64 for k in keys})
