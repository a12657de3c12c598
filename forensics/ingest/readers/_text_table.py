"""Metric tables pasted as text: a Markdown table or tab-separated cells in a `.log`/`.txt`.

The Hugging Face Trainer's notebook progress table (TRL's GRPO/SFT/DPO trainers use it too)
is what users copy out of Jupyter or Colab into an issue: `Step | Training Loss | reward`
with a `-- | --` rule line under the header (huggingface/open-r1#704), or the same cells
joined by tabs, and `No log` where a column has no value at that step. Such a file holds no
`key value` text for the line-log readers, so it is read as the table it is: one header
naming a step (or epoch) column, then one row per record. A cell that is not a number
(`No log`) is no data; `nan`/`inf` are values (NaN and Inf are the evidence).
The table is the first block of rows under its header; lines before it (a progress line,
`[100/100 05:12, Epoch 3/3]`) and after it are not read, with a warning naming them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forensics.ingest.readers._text import NUMBER
from forensics.ingest.readers._wide import epoch_key, pick_step_key
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

_RULE_CELL = re.compile(r"^:?-{2,}:?$")  # `--`, `---`, `:---:` under a Markdown header
_NUMBER = re.compile(rf"^{NUMBER}$")
_NAME = re.compile(r"^[A-Za-z_][\w .%/()@\-]*$")
_SNIFF_SHARE = 0.8  # the table's rows are most of a head's lines after the header
_MIN_ROWS = 2


@dataclass
class TextTable:
    """Where a pasted table sits in a file's lines (0-based), and its column names."""

    header: int  # index of the header line
    first: int  # index of the first data row
    end: int  # index after the last data row
    columns: list[str]


def cells(line: str) -> list[str] | None:
    """The cells of a Markdown (`a | b`, `| a | b |`) or tab-separated line; None for a
    line of neither kind. A single cell is no table row."""
    text = line.strip()
    if "|" in text:
        parts = text.removeprefix("|").removesuffix("|").split("|")
    elif "\t" in text:
        parts = text.split("\t")
    else:
        return None
    out = [p.strip() for p in parts]
    return out if len(out) >= 2 else None


def _is_header(row: list[str]) -> bool:
    """Column names, one of which names the step or epoch (`Step`, `global_step`, `Epoch`)."""
    if not all(_NAME.match(c) for c in row) or len(set(row)) < len(row):
        return False
    return pick_step_key(row) is not None or epoch_key(row) is not None


def _is_row(row: list[str] | None, width: int, counter: int) -> bool:
    """A data row: as many cells as the header, the step (or epoch) cell a number."""
    return row is not None and len(row) == width and _NUMBER.match(row[counter]) is not None


def find_table(lines: list[str]) -> TextTable | None:
    """The first header with at least two data rows under it (after an optional rule line)."""
    for i, line in enumerate(lines):
        head = cells(line)
        if head is None or not _is_header(head):
            continue
        key = pick_step_key(head) or epoch_key(head)
        counter = head.index(key) if key is not None else 0
        first = i + 1
        rule = cells(lines[first]) if first < len(lines) else None
        if rule is not None and all(_RULE_CELL.match(c) for c in rule):
            first += 1
        end = first
        while end < len(lines) and _is_row(cells(lines[end]), len(head), counter):
            end += 1
        if end - first >= _MIN_ROWS:
            return TextTable(i, first, end, head)
    return None


def sniff_text_table(lines: list[str]) -> bool:
    """A log head that is a pasted table: its rows are most of the lines after the header
    (a log that prints a small table among its records is a log, not a table)."""
    table = find_table(lines)
    if table is None:
        return False
    after = [ln for ln in lines[table.header + 1 :] if ln.strip()]
    rows = table.end - table.first
    return bool(after) and rows >= _SNIFF_SHARE * (len(after) - (table.first - table.header - 1))


def text_table_frame(text: str) -> tuple[pl.DataFrame, list[str], int] | None:
    """The pasted table as a wide frame of text cells, warnings about the lines not read,
    and the file line (1-based) of row 0; None when `text` holds no such table."""
    lines = text.removeprefix("\ufeff").splitlines()
    table = find_table(lines)
    if table is None:
        return None
    rows = [cells(ln) or [] for ln in lines[table.first : table.end]]
    wide = pl.DataFrame(
        {name: [r[j] for r in rows] for j, name in enumerate(table.columns)},
        schema={name: pl.Utf8 for name in table.columns},
    )
    warnings = [
        f"a table pasted as text (header on line {table.header + 1}, "
        f"{table.end - table.first} rows); cells that are no number (`No log`) are no data"
    ]
    before = sum(1 for ln in lines[: table.header] if ln.strip())
    after = [k + 1 for k in range(table.end, len(lines)) if lines[k].strip()]
    if before:
        warnings.append(f"{before} lines before the table's header not read")
    if after:
        warnings.append(f"{len(after)} lines after the table (from line {after[0]}) not read")
    return wide, warnings, table.first + 1
