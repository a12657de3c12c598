"""CSV / TSV / Parquet metric tables: one row per logged record, one column per metric.

The step column is the first of `_wide.STEP_KEYS` present; values follow `_wide`'s rules:
an EMPTY cell is no data, while the text "nan"/"inf"/"-inf" is a NaN/Inf value. A last
CSV row with fewer cells than the header and no final newline is a torn write: it is
dropped with a warning naming its line. W&B history exports and Lightning's metrics.csv
are tables too, but have their own readers (`wandb`, `lightning`) that sniff first.
A table pasted as text into a `.log`/`.txt` (the Hugging Face notebook table as Markdown
`Step | Training Loss | ...`, or tab-separated) is read the same way (`_text_table`).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, read_head, register
from forensics.ingest.readers._text import head_lines, looks_like_text_log, read_text
from forensics.ingest.readers._text_table import sniff_text_table, text_table_frame
from forensics.ingest.readers._wide import epoch_key, pick_step_key, wide_to_block
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
    import pyarrow.parquet as pq
else:
    pl = lazy_module("polars")
    pq = lazy_module("pyarrow.parquet")

_DELIMITERS = {".csv": ",", ".tsv": "\t"}
_PARQUET_SUFFIXES = (".parquet", ".pq")


@register
class TableReader(Reader):
    name = "table"
    description = (
        "CSV / TSV / Parquet metric tables with a step column, and such tables pasted as "
        "text (Markdown `Step | Training Loss | ...`, tab-separated)"
    )
    priority = 30  # after W&B and Lightning tables, before the text-log readers

    def sniff(self, path: Path, head: str) -> bool:
        if table_kind(path, head) is None:  # a `.log`/`.txt` that is a pasted table
            return looks_like_text_log(path, head) and sniff_text_table(head_lines(head))
        header = table_header(path, head)
        return pick_step_key(header) is not None or epoch_key(header) is not None

    def read(self, path: Path) -> ReadResult:
        pasted = table_kind(path, read_head(path)) is None
        wide, warnings, first_line = _pasted_table(path) if pasted else load_table(path)
        wide = chart_export(wide, path, warnings)
        block, more = wide_to_block(wide, path, first_line=first_line)
        return ReadResult(blocks=[block], warnings=warnings + more)


# W&B's chart "Export CSV": `Step, <run> - train/loss, <run> - train/loss__MIN, ...__MAX`
_CHART_COLUMN = re.compile(r"^(?P<run>.+?) - (?P<metric>.+?)(?P<range>__MIN|__MAX)?$")


def chart_export(wide: pl.DataFrame, path: Path, warnings: list[str]) -> pl.DataFrame:
    """A W&B chart export names each column `<run> - <metric>` (with `__MIN` / `__MAX`,
    the range of each sampled bucket): one run's columns are read under their metric's
    name (the run's name was 'olmo-1b-run3_train/loss', never the loss); an export of
    several runs is refused, saying how to get one run per file."""
    step = pick_step_key(wide.columns)
    cols = [c for c in wide.columns if c != step]
    found = [_CHART_COLUMN.match(c) for c in cols]
    if step is None or not cols or not all(found):
        return wide
    runs = sorted({m["run"] for m in found if m})
    if len(runs) > 1:
        raise InputError(
            path,
            f"a W&B chart export of {len(runs)} runs ({', '.join(runs[:4])})",
            expected="one run per file: export the chart with one run shown, or each run's history",
        )
    keep = {c: m["metric"] for c, m in zip(cols, found, strict=True) if m and not m["range"]}
    warnings.append(
        f"W&B chart export of run '{runs[0]}': columns '<run> - <metric>' read as <metric>; "
        "__MIN/__MAX (the range of each sampled bucket) left out"
    )
    return wide.select(step, *keep).rename(keep)


def _pasted_table(path: Path) -> tuple[pl.DataFrame, list[str], int | None]:
    """A text file's pasted table (wide frame, warnings, line of row 0), or a clear error."""
    found = text_table_frame(read_text(path))
    if found is None:
        raise InputError(
            path,
            "no table with a step column",
            expected="a header naming a Step (or Epoch) column, then rows of cells split by "
            "'|' or tabs",
        )
    return found


def table_kind(path: Path, head: str) -> str | None:
    """'parquet', 'csv' or 'tsv' from the suffix (or Parquet's magic bytes), else None."""
    suffix = path.suffix.lower()
    if suffix in _PARQUET_SUFFIXES or head.startswith("PAR1"):
        return "parquet"
    return suffix[1:] if suffix in _DELIMITERS else None


def table_header(path: Path, head: str) -> list[str]:
    """Column names of a table file, [] when it is not one (cheap: head or Parquet footer)."""
    if path.is_dir():
        return []
    kind = table_kind(path, head)
    if kind == "parquet":
        try:
            return list(pq.read_schema(path).names)
        except Exception:  # noqa: BLE001 - any unreadable footer just means "not ours"
            return []
    if kind is None or not head.strip():
        return []
    first = head.splitlines()[0]
    return next(csv.reader([first], delimiter=_DELIMITERS["." + kind]), [])


def load_table(path: Path) -> tuple[pl.DataFrame, list[str], int | None]:
    """The table as a wide frame, warnings, and the file line of row 0 (None for Parquet)."""
    kind = table_kind(path, read_head(path)) or "csv"
    if kind == "parquet":
        try:
            return pl.read_parquet(path), [], None
        except (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError) as exc:
            # a corrupt file can make polars' Rust code panic (a BaseException, found by
            # the fuzzer): still one line naming the file
            first = (str(exc).splitlines() or [""])[0]
            raise InputError(path, f"not a readable Parquet file: {first[:120]}") from exc
    return _load_delimited(path, _DELIMITERS["." + kind])


def _load_delimited(path: Path, sep: str) -> tuple[pl.DataFrame, list[str], int]:
    try:
        wide = pl.read_csv(path, separator=sep, infer_schema=False, encoding="utf8-lossy")
    except pl.exceptions.NoDataError as exc:
        raise InputError(path, "empty file", expected="a header row naming the columns") from exc
    except pl.exceptions.PolarsError as exc:
        raise _ragged(path, sep, str(exc)) from exc
    warnings: list[str] = []
    torn = _torn_last_row(path, sep, wide.width) if wide.height else None
    if torn is not None:
        line = wide.height + 1
        warnings.append(f"line {line}: last row {torn}: dropped")
        wide = wide.head(-1)
    return wide, warnings, 2


def _torn_last_row(path: Path, sep: str, width: int) -> str | None:
    """Why the last row looks cut off by a killed writer, or None when it is whole.

    Every CSV writer ends a row with a newline, so a last row without one was cut off
    mid-write even when its cells are all there: `1.05` torn after `1` still parses, as
    the wrong number. Such a row is dropped (with a warning), never stored."""
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 65536))
        tail = fh.read()
    if not tail or tail.endswith((b"\n", b"\r")):
        return None
    last = tail.rsplit(b"\n", 1)[-1].decode("utf-8", errors="replace")
    if not last.strip():
        return None
    try:
        cells = next(csv.reader([last], delimiter=sep), [])
    except csv.Error:
        return "is cut off (unreadable)"
    if len(cells) < width:
        return "is cut off (fewer cells than the header)"
    return "has no line end (the writer was cut off before finishing it)"


def _ragged(path: Path, sep: str, problem: str) -> InputError:
    """Name the first row whose cell count differs from the header's."""
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        reader = csv.reader(fh, delimiter=sep)
        try:
            width = len(next(reader, []))
            for row in reader:
                if len(row) > width:
                    return InputError(
                        path, f"{len(row)} cells in a {width}-column table",
                        line=reader.line_num, expected=f"at most {width} cells per row",
                    )  # fmt: skip
        except csv.Error as exc:
            return InputError(path, f"not a readable table: {exc}", line=reader.line_num)
    first = (problem.splitlines() or [""])[0]
    return InputError(path, f"not a readable table: {first[:100]}")
