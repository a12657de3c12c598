"""Where each step's data came from: batch manifests, token shards, unigram token counts.

Replay re-runs a suspect step's batch through a reference model, so it needs, per step, the
shard and the token span it read (the manifest, `docs/batches.md`), the shards themselves
(nanoGPT raw uint16 `.bin`, llm.c `.bin` with a 256 x int32 header, `.npy`), and how common
each token is over the corpus (token counts) for the rare-token probe. Ingest only indexes
shards (dtype, header size, token count); it never reads their tokens.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import InputError, shown
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
    import polars as pl
else:
    np = lazy_module("numpy")
    pl = lazy_module("polars")


def manifest_schema() -> dict[str, Any]:
    return {
        "step": pl.Int64,
        "source": pl.Utf8,
        "micro": pl.Int32,
        "sample_index": pl.Int64,
        "token_offset": pl.Int64,
        "n_tokens": pl.Int64,
        "seq_len": pl.Int32,
        "extra": pl.Utf8,
    }


def counts_schema() -> dict[str, Any]:
    return {"token": pl.Int32, "count": pl.Int64}


LLMC_MAGIC = 20240520
LLMC_HEADER_INTS = 256
LLMC_DTYPES = {1: "uint16", 2: "uint32"}  # llm.c header[1]: format version
_KNOWN = ("step", "source", "micro", "sample_index", "token_offset", "n_tokens", "seq_len")
_INT_FIELDS = ("micro", "sample_index", "token_offset", "n_tokens", "seq_len")
_SHARD_WORDS = re.compile(r"train|val|shard|token", re.I)
_DATA_DIRS = {"data", "dataset", "datasets", "tokens", "tokenized", "shards"}
_NOT_SHARDS = re.compile(r"^(pytorch_model|training_args|optimizer)", re.I)
_COUNT_SUFFIXES = (".npy", ".json", ".parquet", ".csv")


# ----- manifests ----------------------------------------------------------------------------
def is_manifest(path: Path) -> bool:
    """`*manifest*.jsonl|.parquet` or `batches.jsonl|.parquet`."""
    name = path.name.lower()
    if not path.is_file() or path.suffix.lower() not in (".jsonl", ".parquet"):
        return False
    return "manifest" in name or Path(name).stem == "batches"


def read_manifest(path: Path, root: Path | None = None) -> pl.DataFrame:
    """One row per (step, micro-batch), shard paths made absolute; columns manifest_schema().

    A clean manifest is read and checked column-wise by polars; when polars cannot read it or
    a check fails, the record-by-record reader finds the line and field to report. With a
    `root` (the run folder), every shard must lie inside it: a manifest is untrusted input,
    and replay reads its shards as tokens (`../../etc/passwd` must not be one).
    """
    parquet = path.suffix.lower() == ".parquet"
    frame = _read_frame(path, parquet)
    base = path.resolve().parent
    fast = _manifest_columns(frame, base) if frame is not None else None
    if fast is None:
        records = _parquet_records(path) if parquet else _jsonl_records(path)
        sources: dict[str, str] = {}  # a manifest names a few shards many times
        rows = [_manifest_row(path, where, rec, base, sources) for where, rec in records]
        if not rows:
            raise InputError(path, "no batch record", expected="one record per (step, micro-batch)")
        fast = pl.DataFrame(rows, schema=manifest_schema(), orient="row")
    if root is not None:
        _check_inside(path, fast, root)
    return fast


def _check_inside(path: Path, frame: pl.DataFrame, root: Path) -> None:
    """Every shard of the manifest lies inside `root` (symlinks resolved), else an error
    naming the first record that points out."""
    top = os.path.realpath(root)
    for i, src in enumerate(frame["source"].to_list()):
        real = os.path.realpath(src)
        if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
            raise InputError(
                path,
                f"record {i + 1}: shard {shown(src)} lies outside the run folder {top}",
                field="source",
                expected="shards inside it (pass --allow-outside-sources to allow)",
            )


def _read_frame(path: Path, parquet: bool) -> pl.DataFrame | None:
    try:
        if parquet:
            return pl.read_parquet(path)
        return pl.read_ndjson(path, infer_schema_length=None)
    except Exception:  # any problem: the record-by-record reader names it
        return None


def _manifest_columns(frame: pl.DataFrame, base: Path) -> pl.DataFrame | None:
    """The manifest checked and built column-wise; None when any record breaks a rule."""
    if frame.height == 0 or "source" not in frame.columns or frame["source"].dtype != pl.Utf8:
        return None
    found = {k: _int_column(frame, k) for k in ("step", *_INT_FIELDS)}
    ints = {k: v for k, v in found.items() if v is not None}
    source = frame["source"]
    if len(ints) < len(found) or ints["step"].is_null().any():
        return None
    if source.is_null().any() or (source == "").any():
        return None
    has_span = ints["token_offset"].is_not_null() & ints["n_tokens"].is_not_null()
    has_sample = ints["sample_index"].is_not_null() & ints["seq_len"].is_not_null()
    if not (has_span | has_sample | _identified(frame)).all():
        return None
    paths = {s: os.path.normpath(os.path.join(base, s)) for s in source.unique().to_list()}
    extra = [c for c in frame.columns if c not in _KNOWN]
    columns = {
        "step": ints["step"],
        "source": source.replace_strict(paths, return_dtype=pl.Utf8),
        **{k: ints[k] for k in _INT_FIELDS},
        "extra": _extra_json(frame.select(extra)) if extra else None,
    }
    return pl.DataFrame(columns).select([pl.col(c).cast(t) for c, t in manifest_schema().items()])


def _identified(frame: pl.DataFrame) -> pl.Series:
    """Records without a token span that still say what they held: dataset `sample_indices`
    (a list of integers) or a content `hash` (a string), as the recorder writes them."""
    out = pl.Series([False] * frame.height)
    dtype = frame["sample_indices"].dtype if "sample_indices" in frame.columns else None
    if isinstance(dtype, pl.List) and dtype.inner.is_integer():
        out = out | (frame["sample_indices"].list.len().fill_null(0) > 0)
    if "hash" in frame.columns and frame["hash"].dtype == pl.Utf8:
        out = out | frame["hash"].is_not_null()
    return out


def _record_identified(rec: dict[str, Any]) -> bool:
    indices = rec.get("sample_indices")
    if isinstance(indices, list) and indices:
        return all(isinstance(i, int) and not isinstance(i, bool) for i in indices)
    return isinstance(rec.get("hash"), str) and bool(rec["hash"])


def _int_column(frame: pl.DataFrame, name: str) -> pl.Series | None:
    """A column of non-negative integers (nulls allowed) as Int64, or None when it is not."""
    if name not in frame.columns:
        return pl.Series(name, [None] * frame.height, dtype=pl.Int64)
    col = frame[name]
    if col.dtype == pl.Null:
        return col.cast(pl.Int64)
    if col.dtype.is_float():
        values = col.drop_nulls()
        ok = values.is_finite() & (values == values.round()) & (values.abs() <= _MAX_OFFSET)
        if not ok.all():
            return None
    elif not col.dtype.is_integer() or not col.drop_nulls().is_between(0, _MAX_OFFSET).all():
        return None  # (polars reads ±2**63 as an Int128: checked before the cast)
    col = col.cast(pl.Int64)
    return None if (col < 0).any() else col


def _extra_json(extra: pl.DataFrame) -> pl.Series:
    """Other keys of each record as a JSON object (absent and null keys left out)."""
    out = []
    for row in extra.iter_rows(named=True):
        kept = {k: v for k, v in row.items() if v is not None}
        out.append(json.dumps(kept, default=str) if kept else None)
    return pl.Series("extra", out, dtype=pl.Utf8)


def _jsonl_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    out = []
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.lstrip("\ufeff") if line_no == 1 else line)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"not valid JSON: {exc.msg}", line=line_no) from exc
            except RecursionError as exc:
                raise InputError(path, "JSON nested too deeply", line=line_no) from exc
            if not isinstance(rec, dict):
                raise InputError(path, "not a JSON object", line=line_no, expected="{...}")
            out.append((line_no, rec))
    return out


def _parquet_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # polars raises several kinds on a broken file
        raise InputError(path, f"cannot read Parquet: {exc}".splitlines()[0]) from exc
    return list(enumerate(frame.to_dicts(), start=1))


def _manifest_row(
    path: Path, where: int, rec: dict[str, Any], base: Path, sources: dict[str, str]
) -> tuple[Any, ...]:
    """Validate one record; `where` is its line (JSONL) or 1-based row (Parquet)."""
    step = _int(path, where, rec, "step", required=True)
    source = rec.get("source")
    if not isinstance(source, str) or not source:
        raise InputError(
            path, "missing or not a string", line=where, field="source", expected="a shard path"
        )
    ints = {k: _int(path, where, rec, k) for k in _INT_FIELDS}
    has_span = ints["token_offset"] is not None and ints["n_tokens"] is not None
    if not has_span and ints["sample_index"] is None and not _record_identified(rec):
        raise InputError(
            path,
            "no token span",
            line=where,
            field="token_offset",
            expected="token_offset and n_tokens, sample_index (with seq_len), or sample_indices",
        )
    if not has_span and ints["sample_index"] is not None and ints["seq_len"] is None:
        raise InputError(path, "sample_index needs a sample length", line=where, field="seq_len")
    if source not in sources:
        sources[source] = os.path.normpath(os.path.join(base, source))
    extra = {k: v for k, v in rec.items() if k not in _KNOWN and v is not None}
    return (
        step,
        sources[source],
        ints["micro"],
        ints["sample_index"],
        ints["token_offset"],
        ints["n_tokens"],
        ints["seq_len"],
        json.dumps(extra, default=str) if extra else None,
    )


def _int(
    path: Path, where: int, rec: dict[str, Any], key: str, *, required: bool = False
) -> int | None:
    """A non-negative integer field (an integral float such as 3.0 is accepted)."""
    value = rec.get(key)
    if value is None:
        if required:
            raise InputError(path, "missing", line=where, field=key, expected="an integer")
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_OFFSET:
        raise InputError(
            path, f"{shown(value)} is not allowed", line=where, field=key,
            expected="an integer in 0..2**62",
        )  # fmt: skip
    return value


# ----- token shards -------------------------------------------------------------------------
def is_token_shard(path: Path) -> bool:
    """llm.c `.bin` (by magic), nanoGPT `.bin` (by name/folder, see docs/batches.md), or a
    uint16/uint32 `.npy`."""
    if not path.is_file() or is_token_counts(path):
        return False
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _npy_dtype(path) in ("uint16", "uint32")
    if suffix != ".bin" or _NOT_SHARDS.match(path.name):
        return False
    if _has_llmc_magic(path):
        return True
    size = path.stat().st_size
    return size > 0 and size % 2 == 0 and _looks_like_data(path)


def _looks_like_data(path: Path) -> bool:
    """A name with train/val/shard/token in it, or a data folder among the three parents."""
    if _SHARD_WORDS.search(path.stem):
        return True
    return any(p.name.lower() in _DATA_DIRS for p in list(path.parents)[:3])


def _has_llmc_magic(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4)
    return len(head) == 4 and int(np.frombuffer(head, dtype="<i4")[0]) == LLMC_MAGIC


def _llmc_header(path: Path) -> np.ndarray | None:
    """The 256 int32 header of an llm.c shard, or None when the magic is not there."""
    with path.open("rb") as fh:
        raw = fh.read(LLMC_HEADER_INTS * 4)
    if len(raw) < 4 or int(np.frombuffer(raw[:4], dtype="<i4")[0]) != LLMC_MAGIC:
        return None
    if len(raw) < LLMC_HEADER_INTS * 4:
        raise InputError(path, "llm.c header cut short", expected="256 int32 header values")
    return np.frombuffer(raw, dtype="<i4")


def _npy_dtype(path: Path) -> str | None:
    try:
        return str(np.load(path, mmap_mode="r", allow_pickle=False).dtype)
    except (ValueError, OSError):
        return None


def index_token_shard(path: Path) -> dict[str, Any]:
    """dtype, header_bytes, n_tokens, bytes of one shard; its tokens are not read."""
    size = path.stat().st_size
    if path.suffix.lower() == ".npy":
        return _index_npy(path, size)
    header = _llmc_header(path)
    if header is None:
        if size % 2:
            raise InputError(path, f"{size} bytes is not a whole number of uint16 tokens")
        return {"dtype": "uint16", "header_bytes": 0, "n_tokens": size // 2, "bytes": size}
    dtype = LLMC_DTYPES.get(int(header[1]))
    if dtype is None:
        raise InputError(
            path, f"unknown llm.c version {int(header[1])}", field="header[1]", expected="1 or 2"
        )
    n_tokens, header_bytes = int(header[2]), LLMC_HEADER_INTS * 4
    want = header_bytes + n_tokens * np.dtype(dtype).itemsize
    if size != want:
        raise InputError(
            path,
            f"{size} bytes but the header promises {n_tokens} {dtype} tokens ({want} bytes)",
            field="header[2]",
            expected="a complete shard",
        )
    return {"dtype": dtype, "header_bytes": header_bytes, "n_tokens": n_tokens, "bytes": size}


def _index_npy(path: Path, size: int) -> dict[str, Any]:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError(path, f"not a readable .npy array: {exc}", expected="a .npy file") from exc
    if str(arr.dtype) not in ("uint16", "uint32"):
        raise InputError(path, f"dtype {arr.dtype}", field="dtype", expected="uint16 or uint32")
    return {
        "dtype": str(arr.dtype),
        "header_bytes": int(arr.offset),
        "n_tokens": int(arr.size),
        "bytes": size,
    }


# ----- token counts -------------------------------------------------------------------------
def is_token_counts(path: Path) -> bool:
    """`*token_counts*.npy|.json|.parquet|.csv`."""
    name = path.name.lower()
    return path.is_file() and "token_counts" in name and name.endswith(_COUNT_SUFFIXES)


def read_token_counts(path: Path) -> pl.DataFrame:
    """Unigram counts as (token, count) rows; counts are non-negative integers."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        tokens, counts = _counts_npy(path)
    elif suffix == ".json":
        tokens, counts = _counts_json(path)
    else:
        tokens, counts = _counts_table(path, suffix)
    return _counts_frame(path, tokens, counts)


def _counts_npy(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError(path, f"not a readable .npy array: {exc}") from exc
    if arr.ndim == 1 and arr.size == 0:
        raise InputError(path, "an empty array", expected="1-D counts indexed by token id")
    if arr.ndim != 1 or arr.dtype.kind not in "iuf":
        raise InputError(
            path, f"a {arr.ndim}-D {arr.dtype} array", expected="1-D counts indexed by token id"
        )
    return np.arange(arr.size), arr


def _counts_json(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InputError(path, "JSON nested too deeply", expected='{"token": count}') from exc
    if isinstance(data, list):
        return np.arange(len(data)), _numbers(path, data, "counts")
    if not isinstance(data, dict):
        raise InputError(path, "neither a mapping nor a list", expected='{"token": count}')
    tokens = []
    for key in data:
        try:
            tokens.append(int(key))
        except ValueError:
            raise InputError(path, f"key {key!r} is not a token id", field=str(key)) from None
    return np.asarray(tokens), _numbers(path, list(data.values()), "count")


def _numbers(path: Path, values: list[Any], what: str) -> np.ndarray:
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InputError(path, f"{v!r} is not a number", field=f"{what}[{i}]")
    return np.asarray(values, dtype=np.float64)


def _counts_table(path: Path, suffix: str) -> tuple[np.ndarray, np.ndarray]:
    """Columns token,count of a Parquet or CSV table; a bad cell is named by line and column."""
    try:
        if suffix == ".parquet":
            frame = pl.read_parquet(path)
        else:
            frame = pl.read_csv(path, infer_schema_length=None)
    except Exception as exc:  # polars raises several kinds on a broken file
        raise InputError(path, f"cannot read table: {exc}".splitlines()[0]) from exc
    first_line = 2 if suffix == ".csv" else 1  # CSV line 1 is the header
    for col in ("token", "count"):
        if col not in frame.columns:
            raise InputError(path, "column missing", field=col, expected="columns token,count")
        bad = frame[col].cast(pl.Float64, strict=False).is_null()
        if bad.any():
            row = int(bad.arg_max() or 0)
            raise InputError(
                path,
                f"{frame[col][row]!r} is not a number",
                line=row + first_line,
                field=col,
                expected="an integer",
            )
    return frame["token"].cast(pl.Float64).to_numpy(), frame["count"].cast(pl.Float64).to_numpy()


# Range of what is stored: token ids are INTEGER, counts BIGINT. Counts stop at 2**53,
# where float64 (how JSON and CSV numbers arrive) still holds every integer exactly.
_MAX_TOKEN = 2**31 - 1
_MAX_COUNT = 2**53
_MAX_OFFSET = 2**62  # a token offset or count past any real shard (and inside BIGINT)


def _counts_frame(path: Path, tokens: np.ndarray, counts: np.ndarray) -> pl.DataFrame:
    """Check integrality, signs and uniqueness, then build the (token, count) frame."""
    tokens_f, counts_f = tokens.astype(np.float64), counts.astype(np.float64)
    for name, values in (("token", tokens_f), ("count", counts_f)):
        limit = _MAX_TOKEN if name == "token" else _MAX_COUNT
        bad = np.flatnonzero(
            ~np.isfinite(values) | (values < 0) | (values != np.round(values)) | (values > limit)
        )
        if bad.size:
            raise InputError(
                path,
                f"{shown(float(values[bad[0]]))} at record {int(bad[0]) + 1}",
                field=name,
                expected=f"an integer in 0..{limit:.0f}",
            )
    if np.unique(tokens_f).size != tokens_f.size:
        raise InputError(path, "a token appears twice", field="token", expected="unique ids")
    return pl.DataFrame(
        {"token": tokens_f.astype(np.int64), "count": counts_f.astype(np.int64)}
    ).cast(counts_schema())  # type: ignore[arg-type]
