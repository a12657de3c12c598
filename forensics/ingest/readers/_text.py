"""Helpers shared by the plain-text log readers (`megatron`, `textlog`).

Text logs are parsed as a polars frame of lines with vectorised regexes, so that a
1M-step log costs a few Rust passes instead of a Python loop with a dict per line.
This module holds what both readers need: the file as lines, numbers (with nanotron's
K/M/G/T suffixes, NaN and Inf kept), timestamps in line prefixes, and the guards that
stop a text reader from claiming a binary file or a document that merely quotes a log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import InputError
from forensics.ingest.base import HEAD_BYTES
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

# Files that are never a raw training log even when they quote one (a README quoting
# `step:946/1530 train_loss:5.0995`), or that belong to a structured reader.
NOT_LOG_SUFFIXES = frozenset(
    {
        ".md",
        ".rst",
        ".py",
        ".ipynb",
        ".json",
        ".jsonl",
        ".yaml",
        ".yml",
        ".toml",
        ".csv",
        ".tsv",
        ".html",
        ".htm",
        ".sh",
        ".slurm",
        ".parquet",
        ".safetensors",
        ".pt",
        ".bin",
        ".npy",
        ".gz",
        ".zip",
    }
)
# How far past the 64 KiB head a sniff may look: some launchers print 100 KiB of shell
# trace (`set -x` of module loads) before the framework's first line.
SCAN_LIMIT = 4 * 1024 * 1024
_SCAN_CHUNK = 1024 * 1024
_OVERLAP = 4096  # re-read of the head's tail: a line cut at 64 KiB is seen whole

# What a tqdm bar leaves glued after itself when it prints no newline: a logger's record
# (`...s/it][2021-02-04 15:06:19,825] [INFO] ...`, rich's `...Tflops][09/30/22 02:46:23]
# WARNING ...`, `...s/step]2025-08-23 06:19:20,889 - trainer - WARNING - ...`), a printed
# dict (`...10.13s/it]{'loss': nan, ...}`, `...15.11s/it{'loss': 0.25, ...}`) or a message
# (`...1.69it/s]Validation Summary Epoch: [20] ...`), another bar's or a tagged print
# (trlx: `...1.40it/s][losses/total_loss: 1.34 | ...]:  16%|...`, `...it/s][RANK 0] ...`),
# Keras' TerminateOnNaN report after the bar's last value (`... - accuracy: 0.2188Batch 1:
# Invalid loss, terminating training`), or a logger's record after mmcv's own ProgressBar,
# which ends in its ETA (`[>>>>] 50/50, 163.1 task/s, elapsed: 0s, ETA:     0s2021-07-14
# 13:52:36,901 - mmcls - INFO - Epoch(val)`).
# One pattern for Python (the sniff's head) and polars (the whole file): no look-around,
# the two cut parts are groups.
_GLUED_RECORD = (
    r"(\]|s/it|ETA:\s*\d+s)(\[?(?:\d{4}-\d\d-\d\d[ T]|\d\d/\d\d/\d\d(?:\d\d)? )\d\d:\d\d|\{')"
    r"|((?:it/s|s/it|s/step)\])([A-Z][a-z]|\[[A-Za-z])"
    r"|((?:\d|(?i:nan|inf))[ \t]*)(Batch \d+: Invalid loss)"
)
_GLUED_RE = re.compile(_GLUED_RECORD)
_GLUE_MARKS = ("]", "s/it", "ETA:")  # without one of them nothing is glued
# Python/Rust-compatible number syntax, used by both readers' regexes.
NUMBER = r"[-+]?(?:(?i:nan|inf(?:inity)?)|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
_SUFFIX_SCALE = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
# `2026-05-28 22:26:20`, `2022-01-19 13:09:13,305` (logging), `2024-05-01T12:00:00.5`.
_ISO_TS = r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?"
# nanotron / Python logging default `%m/%d/%Y %H:%M:%S`.
_US_TS = r"(\d{2})/(\d{2})/(\d{4}) (\d{2}:\d{2}:\d{2})"

# A number's place in a line template: NUL never survives read_text, so no line holds it.
SLOT = "\x00"


def looks_like_text_log(path: Path, head: str) -> bool:
    """Cheap gate before any regex: a file, text (no NUL), not a document or data format."""
    head = head.lstrip("\ufeff")
    if not head or path.is_dir() or "\x00" in head:
        return False
    return path.suffix.lower() not in NOT_LOG_SUFFIXES


def head_lines(head: str) -> list[str]:
    """The complete lines of a sniff head (a head cut at 64 KiB ends mid-line)."""
    lines = _unglued(head.removeprefix("\ufeff")).splitlines()
    if len(head.encode("utf-8", errors="replace")) >= HEAD_BYTES and lines:
        lines.pop()
    return lines


def _unglued(text: str) -> str:
    """`text` with whatever a progress bar left glued to its end put on a line of its own."""
    if not any(mark in text for mark in _GLUE_MARKS):
        return text
    return _GLUED_RE.sub(r"\1\3\5\n\2\4\6", text)


def scan_beyond_head(path: Path, found: Callable[[str], bool]) -> bool:
    """Look for a format's marker past the head, chunk by chunk, up to SCAN_LIMIT bytes.

    Only called when the head did not decide. The scan starts a little before the end of
    the head and carries each chunk's unfinished last line into the next, so that a line
    cut by any boundary is still seen whole.
    """
    try:
        with open(path, "rb") as fh:
            fh.seek(HEAD_BYTES - _OVERLAP)
            carry, read = b"", 0
            while read < SCAN_LIMIT:
                chunk = fh.read(_SCAN_CHUNK)
                if not chunk or b"\x00" in chunk:
                    return False
                read += len(chunk)
                data = carry + chunk
                cut = data.rfind(b"\n") + 1 or len(data)
                if found(data[:cut].decode("utf-8", errors="replace")):
                    return True
                carry = data[cut:]
    except OSError:
        return False
    return False


def read_text(path: Path) -> str:
    """The whole file as text; undecodable bytes become U+FFFD rather than aborting."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read the file: {exc.strerror or exc}") from exc
    if b"\x00" in data[:HEAD_BYTES]:
        raise InputError(path, "binary content, not a text log", expected="a plain-text log")
    # A byte-order mark (Windows editors, PowerShell's Tee-Object) would glue itself to the
    # first line and hide its record (llm.c's step 0) from every line pattern.
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def line_frame(text: str) -> pl.DataFrame:
    """One row per line: `line` (1-based, for messages) and `text` (without CR/LF).

    A bare carriage return ends a line too: a progress bar (tqdm, Keras) redraws itself
    after `\r`, and a log captured to a file keeps every redraw on one physical line. Line
    numbers then count those redraws (an editor shows fewer lines). A logger's record glued
    to a bar that printed no newline (`12/1184 [00:21<1:09:10, 3.52s/it][2021-02-04
    15:06:19,825] [INFO] ... OVERFLOW! ...`) is cut off onto a line of its own.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    col = pl.col("text")
    if any(mark in text for mark in _GLUE_MARKS):
        col = col.str.replace_all(_GLUED_RECORD, "${1}${3}${5}\n${2}${4}${6}")
    frame = pl.DataFrame({"text": [text]}, schema={"text": pl.Utf8}).select(
        col.str.split("\n").explode()
    )
    if text.endswith("\n"):
        frame = frame.head(frame.height - 1)
    return frame.with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.Int64))


def cut_last_line(text: str, lines: pl.DataFrame) -> int | None:
    """Number of the last line when the file ends without a newline (it may be cut short)."""
    if not text or text.endswith("\n") or lines.height == 0:
        return None
    last = lines.row(lines.height - 1, named=True)
    return int(last["line"]) if last["text"].strip() else None


def parse_number(col: pl.Expr) -> pl.Expr:
    """Float64 of a captured value: `1.5E-04`, `nan`, `-inf`, `85.8G` (x1e9); null if not one.

    NaN and Inf survive: they are the evidence a forensics tool exists for.
    """
    s = col.str.strip_chars().str.to_lowercase()
    suffix = s.str.extract(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?([kmgt])$", 1)
    base = pl.when(suffix.is_null()).then(s).otherwise(s.str.slice(0, s.str.len_chars() - 1))
    scale = suffix.replace_strict(_SUFFIX_SCALE, default=1.0, return_dtype=pl.Float64)
    return base.cast(pl.Float64, strict=False) * scale


def parse_timestamp(col: pl.Expr) -> pl.Expr:
    """Seconds since the epoch of the first timestamp in a text (read as UTC), else null."""
    iso = col.str.extract_groups(_ISO_TS)
    us = col.str.extract_groups(_US_TS)
    day = pl.coalesce(
        iso.struct.field("1"),
        pl.concat_str(
            us.struct.field("3"), us.struct.field("1"), us.struct.field("2"), separator="-"
        ),
    )
    clock = pl.coalesce(iso.struct.field("2"), us.struct.field("4"))
    stamp = pl.concat_str(day, clock, separator=" ").str.to_datetime(
        "%Y-%m-%d %H:%M:%S", time_unit="ms", time_zone="UTC", strict=False
    )
    frac = iso.struct.field("3")
    frac_s = (
        pl.when(frac.is_null())
        .then(0.0)
        .otherwise(frac.cast(pl.Float64, strict=False) / pl.lit(10.0).pow(frac.str.len_chars()))
    )
    return stamp.dt.epoch("ms").cast(pl.Float64) / 1000.0 + frac_s
