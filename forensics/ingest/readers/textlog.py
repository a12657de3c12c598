"""Plain-text training logs read through named line patterns kept as data.

nanoGPT, modded-nanogpt, llm.c and litgpt print one line per step in their own ad-hoc
syntax. Rather than one reader each, a table of regexes with named groups
(`forensics/data/line_patterns.yaml`) says how to read each style, and a user with an
in-house format adds a YAML file of the same shape (FORENSICS_LINE_PATTERNS) instead of
writing code. Every pattern runs over all lines at once (polars, Rust regex), so a
1M-step log is a few vectorised passes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.printed_config import printed_config
from forensics.ingest.readers._text import (
    NUMBER,
    cut_last_line,
    head_lines,
    line_frame,
    looks_like_text_log,
    parse_number,
    parse_timestamp,
    read_text,
    scan_beyond_head,
)
from forensics.lazy import lazy_module
from forensics.yamlio import safe_load

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

ENV_VAR = "FORENSICS_LINE_PATTERNS"
SHIPPED = "forensics/data/line_patterns.yaml"
# A date-time stamp a launcher or a user's print puts before the line (`2023-03-22 09:30:39
# iter 2920: loss 3.9883, ...`, nanoGPT#215; Python logging's `,123` and ` - ` after it), and
# the `> ` of a log pasted as a Markdown quote, as the generic reader's prefix takes them.
_STAMP = r"\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:\s+-)?"
_MACROS = {
    "{prefix}": rf"\s*(?:\[[^\]]*\]:?\s*|{_STAMP}\s+|>\s+)*",
    "{num}": NUMBER,
    "{finite}": r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)",
}
_GROUP = re.compile(r"\(\?P?<([^>]+)>")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"line", "text"}


@dataclass(frozen=True)
class LinePattern:
    """One named line style: a regex whose `step` group is the step, other groups metrics."""

    name: str
    regex: str  # macros already expanded
    metrics: tuple[str, ...]
    description: str = ""
    example: str = ""
    per_step: str = "all"  # "all" | "last" | "micro" (several lines per optimizer step)
    source: str = SHIPPED


def load_patterns(extra: Path | None = None) -> list[LinePattern]:
    """The shipped patterns, preceded by those of `extra` (a YAML file of the same shape).

    A user's patterns are tried first so that they can override a shipped one. A broken
    file raises InputError naming the file and the pattern's field.
    """
    shipped = _load_cached(SHIPPED, None)
    if extra is None:
        return list(shipped)
    path = Path(extra)
    if not path.is_file():
        raise InputError(path, "line-pattern file not found", expected=f"a YAML file ({ENV_VAR})")
    return list(_load_cached(str(path), path.stat().st_mtime_ns)) + list(shipped)


def env_patterns() -> list[LinePattern]:
    """Patterns in effect: shipped ones plus the file named by FORENSICS_LINE_PATTERNS."""
    extra = os.environ.get(ENV_VAR, "").strip()
    return load_patterns(Path(extra) if extra else None)


@lru_cache(maxsize=16)
def _load_cached(source: str, mtime: int | None) -> tuple[LinePattern, ...]:
    """Parse and validate one pattern file; cached per (path, mtime) as sniff runs often."""
    if source == SHIPPED:
        text = resources.files("forensics").joinpath("data/line_patterns.yaml").read_text()
    else:
        text = Path(source).read_text(encoding="utf-8", errors="replace")
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(source, f"not valid YAML: {exc}".splitlines()[0]) from exc
    items = data.get("patterns") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise InputError(source, "no 'patterns' list", field="patterns")
    return tuple(_pattern(item, i, source) for i, item in enumerate(items))


def _pattern(item: Any, index: int, source: str) -> LinePattern:
    where = f"patterns[{index}]"
    if not isinstance(item, dict):
        raise InputError(source, "must be a mapping", field=where)
    name, raw = item.get("name"), item.get("regex")
    if not isinstance(name, str) or not name:
        raise InputError(source, "missing", field=f"{where}.name", expected="a pattern name")
    if not isinstance(raw, str) or not raw:
        raise InputError(source, "missing", field=f"{where}.regex", expected="a regex")
    regex = _expand(raw)
    groups = _GROUP.findall(regex)
    _check_groups(groups, source, f"{where}.regex")
    _check_compiles(regex, source, f"{where}.regex")
    per_step = str(item.get("per_step", "all"))
    if per_step not in ("all", "last", "micro"):
        raise InputError(
            source,
            f"unknown value {per_step!r}",
            field=f"{where}.per_step",
            expected="'all', 'last' or 'micro'",
        )
    metrics = tuple(g for g in groups if g != "step")
    return LinePattern(
        name,
        regex,
        metrics,
        str(item.get("description", "")),
        str(item.get("example", "")),
        per_step,
        source,
    )


def _expand(regex: str) -> str:
    for macro, body in _MACROS.items():
        regex = regex.replace(macro, body)
    return regex


def _check_groups(groups: list[str], source: str, field: str) -> None:
    if "step" not in groups:
        raise InputError(
            source, "no named group 'step'", field=field, expected="(?P<step>\\d+) in the regex"
        )
    metrics = [g for g in groups if g != "step"]
    bad = [g for g in groups if not _IDENT.match(g) or g in _RESERVED]
    if bad or not metrics or len(set(groups)) != len(groups):
        problem = f"bad group names {bad}" if bad else "needs distinct metric groups"
        raise InputError(
            source,
            problem,
            field=field,
            expected="identifiers other than line/text, each once, besides step",
        )


def _check_compiles(regex: str, source: str, field: str) -> None:
    try:
        pl.Series([""], dtype=pl.Utf8).str.extract_groups(regex)
    except pl.exceptions.PolarsError as exc:
        msg = str(exc).strip().splitlines()
        raise InputError(
            source, f"bad regular expression: {msg[-1] if msg else exc}", field=field
        ) from exc


def _match(lines: pl.DataFrame, pat: LinePattern) -> pl.DataFrame:
    """Lines that `pat` matches: `line`, `step` (str) and one str column per metric group."""
    groups = pl.col("text").str.extract_groups(pat.regex)
    cols = [groups.struct.field(g).alias(g) for g in ("step", *pat.metrics)]
    return lines.select("line", *cols).filter(pl.col("step").is_not_null())


def _long(hits: pl.DataFrame, pat: LinePattern, path: Path) -> pl.DataFrame:
    """Matched lines to long rows (line, step, raw_name, value, raw); a group that captured
    something that is not a number (a user pattern too loose) is an InputError."""
    long = (
        hits.unpivot(
            index=["line", "step"], on=list(pat.metrics), variable_name="raw_name", value_name="raw"
        )
        .filter(pl.col("raw").is_not_null())
        .with_columns(
            pl.col("step").cast(pl.Int64, strict=False),
            parse_number(pl.col("raw")).alias("value"),
        )
    )
    bad = long.filter(pl.col("value").is_null() | pl.col("step").is_null())
    if bad.height:
        row = bad.sort("line").row(0, named=True)
        field = "step" if row["step"] is None else row["raw_name"]
        raise InputError(
            path,
            f"pattern '{pat.name}' captured {row['raw']!r}",
            line=row["line"],
            field=field,
            expected="a number, nan or inf",
        )
    return long.select("line", "step", "raw_name", "value", "raw")


def _last_per_step(long: pl.DataFrame, pat: LinePattern, warnings: list[str]) -> pl.DataFrame:
    """Keep the last line of each step for logs that print every micro-iteration."""
    kept = long.unique(subset=["step", "raw_name"], keep="last", maintain_order=True)
    lines_before = long["line"].n_unique()
    dropped = lines_before - kept["line"].n_unique()
    if dropped:
        warnings.append(
            f"{pat.name}: {lines_before} lines for {kept['step'].n_unique()} optimizer steps "
            f"(micro-iterations or redraws); kept the last line of each step ({dropped} "
            "earlier ones dropped"
            + (
                "; the micro-iteration counter is the `iter` metric)"
                if "iter" in pat.metrics
                else ")"
            )
        )
    return kept


def _micro_per_step(long: pl.DataFrame, pat: LinePattern, warnings: list[str]) -> pl.DataFrame:
    """Logs that print every micro-iteration (litgpt): keep each micro-iteration's value in
    a metric of its own (`loss/micro/0`, `loss/micro/1`, ... by position in the step), and
    per step the mean (`loss`, what the optimizer step averaged) and the max (`loss/max`),
    so that a blow-up inside one step is not hidden by the step's other micro-batches.
    Other metrics keep the step's last line, as printed."""
    lines_per_step = long.select("line", "step").unique().group_by("step").len()
    if lines_per_step.height == 0 or int(lines_per_step["len"].max()) <= 1:  # type: ignore[arg-type]
        return long
    loss = long.filter(pl.col("raw_name") == "loss").with_columns(
        pl.col("line").rank("ordinal").over("step").cast(pl.Int64).sub(1).alias("k")
    )
    rest = long.filter(pl.col("raw_name") != "loss").unique(
        subset=["step", "raw_name"], keep="last", maintain_order=True
    )
    per_step = loss.group_by("step", maintain_order=True).agg(
        pl.col("line").last(),
        pl.col("value").mean().alias("mean"),
        pl.col("value").nan_max().alias("max"),
    )
    agg = per_step.unpivot(index=["line", "step"], on=["mean", "max"], variable_name="which")
    agg = agg.select(
        "line",
        "step",
        pl.when(pl.col("which") == "mean")
        .then(pl.lit("loss"))
        .otherwise(pl.lit("loss/max"))
        .alias("raw_name"),
        "value",
        pl.col("value").cast(pl.Utf8).alias("raw"),
    )
    micro = loss.select(
        "line",
        "step",
        (pl.lit("loss/micro/") + pl.col("k").cast(pl.Utf8)).alias("raw_name"),
        "value",
        "raw",
    )
    most = int(lines_per_step["len"].max())  # type: ignore[arg-type]
    warnings.append(
        f"{pat.name}: {loss.height} micro-iteration lines for {per_step.height} optimizer steps "
        f"(up to {most} per step): `loss` is each step's mean, `loss/max` its largest "
        "micro-iteration loss, and every micro-iteration's loss is kept as `loss/micro/<k>`"
    )
    return pl.concat([rest, agg, micro]).sort(["line", "raw_name"])


def parse_lines(
    lines: pl.DataFrame,
    patterns: list[LinePattern],
    path: Path,
    warnings: list[str],
    claimed: list[pl.Series] | None = None,
) -> pl.DataFrame:
    """Long rows (line, step, raw_name, value, raw) from every line some pattern claims.

    A line goes to the first pattern that matches it; rows keep file order, which the
    pipeline relies on to spot restarts (a step that goes backwards). `claimed` collects
    the numbers of the lines patterns matched, including those a per-step rule dropped.
    """
    remaining = lines.filter(pl.col("text").str.len_bytes() > 0)
    parts: list[pl.DataFrame] = []
    for pat in patterns:
        hits = _match(remaining, pat)
        if hits.height == 0:
            continue
        if claimed is not None:
            claimed.append(hits["line"])
        remaining = remaining.filter(~pl.col("line").is_in(hits["line"].implode()))
        long = _long(hits, pat, path)
        if pat.per_step == "last":
            long = _last_per_step(long, pat, warnings)
        elif pat.per_step == "micro":
            long = _micro_per_step(long, pat, warnings)
        parts.append(long)
    if not parts:
        return pl.DataFrame(
            schema={
                "line": pl.Int64,
                "step": pl.Int64,
                "raw_name": pl.Utf8,
                "value": pl.Float64,
                "raw": pl.Utf8,
            }
        )
    return pl.concat(parts).sort("line", maintain_order=True)


def _drop_cut_tail(
    text: str, lines: pl.DataFrame, rows: pl.DataFrame, warnings: list[str]
) -> pl.DataFrame:
    """A last line without a newline may be cut mid-number (`lr:0.0000` of 0.000003): keep
    the line, but drop the value that runs to its end, and say so."""
    last = cut_last_line(text, lines)
    if last is None:
        return rows
    if not rows.height or rows["line"][-1] != last:
        warnings.append(f"line {last} (the last) has no line end and matches no pattern: ignored")
        return rows
    line_text = lines["text"][last - 1].rstrip()
    tail = rows.filter(pl.col("line") == last)
    ends = [
        name
        for name, raw in zip(tail["raw_name"], tail["raw"], strict=True)
        if line_text.endswith(raw)
    ]
    warnings.append(
        f"line {last} (the last) has no line end: kept"
        + (f", except its final value ({', '.join(ends)}), which may be cut short" if ends else "")
    )
    return rows.filter(~((pl.col("line") == last) & pl.col("raw_name").is_in(ends)))


@register
class TextLogReader(Reader):
    name = "textlog"
    structured = False  # numbers parsed back from printed text
    description = "named line patterns (nanoGPT, modded-nanogpt, llm.c, litgpt, torchtune)"
    # Generic: sniffed after every structured format.
    priority = 90

    def sniff(self, path: Path, head: str) -> bool:
        if not looks_like_text_log(path, head):
            return False
        patterns = env_patterns()
        if _any_match(head_lines(head), patterns):
            return True
        return scan_beyond_head(path, lambda chunk: _any_match(chunk.splitlines(), patterns))

    def read(self, path: Path) -> ReadResult:
        patterns = env_patterns()
        text = read_text(path)
        lines = line_frame(text)
        warnings: list[str] = []
        claimed: list[pl.Series] = []
        rows = parse_lines(lines, patterns, path, warnings, claimed)
        if rows.height == 0:
            shown = "; ".join(f"'{p.example}'" for p in patterns[:3] if p.example)
            raise InputError(
                path,
                "no line matches a known text-log pattern",
                expected=f"lines like {shown} (or add a pattern via {ENV_VAR})",
            )
        rows = _drop_cut_tail(text, lines, rows, warnings)
        rows = _with_wall_time(lines, rows)
        metrics = rows.select("step", "raw_name", "value", "wall_time")
        extra = _unclaimed_loss_lines(lines, rows, pl.concat(claimed), warnings)
        if extra.height:
            extra = _with_wall_time(lines, extra)
            keep = ["line", "step", "raw_name", "value", "wall_time"]
            metrics = pl.concat([rows.select(keep), extra.select(keep)])
            metrics = metrics.sort("line", maintain_order=True).drop("line")
        return ReadResult(metrics=metrics, config=printed_config(text), warnings=warnings)


def _with_wall_time(lines: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` with the wall time of their line's date-time stamp (`2023-03-22 09:30:39 iter
    2920: ...`), null where the lines print none: the same clock the generic reader keeps
    for a stamped log, so that a stamped nanoGPT log read by its named pattern loses none."""
    stamped = lines.filter(pl.col("line").is_in(rows["line"].head(1000).implode()))
    if not stamped.select(parse_timestamp(pl.col("text")).is_not_null().any()).item():
        return rows.with_columns(pl.lit(None, pl.Float64).alias("wall_time"))
    wall = lines.select("line", parse_timestamp(pl.col("text")).alias("wall_time"))
    return rows.join(wall, on="line", how="left", maintain_order="left")


def _unclaimed_loss_lines(
    lines: pl.DataFrame, rows: pl.DataFrame, claimed: pl.Series, warnings: list[str]
) -> pl.DataFrame:
    """Losses on lines no named pattern claimed, read by the generic reader (a log whose
    newer lines changed style: parameter-golf's `1/20000 train_loss: 8.32` beside
    modded-nanogpt's `step:0/20000 val_loss:...`). Only templates with a loss are taken,
    and only metrics the named patterns did not already give."""
    from forensics.ingest.readers import generic

    rest = lines.filter(~pl.col("line").is_in(claimed.implode()))
    found_rows, found, _ = generic.extract(rest, [], with_time=False)
    if found_rows.height == 0:
        return found_rows.select("line", "step", "raw_name", "value")
    known = set(rows["raw_name"].unique().to_list())
    lossy = {n for t in found.values() for n in t.names.values() if "loss" in n.lower()}
    templates = [t for t in found.values() if set(t.names.values()) & lossy]
    names = {n for t in templates for n in t.names.values()} - known
    extra = found_rows.filter(pl.col("raw_name").is_in(list(names)))
    if extra.height:
        shown = "; ".join(f"'{t.shown()[:100]}'" for t in templates[:3])
        warnings.append(
            f"{extra['line'].n_unique()} lines no named pattern knows were read by the "
            f"generic reader ({', '.join(sorted(names))}) from lines like {shown}"
        )
    return extra.select("line", "step", "raw_name", "value")


def _any_match(lines: list[str], patterns: list[LinePattern]) -> bool:
    """True when any line matches any pattern (the sniff test)."""
    if not lines:
        return False
    series = pl.Series(lines, dtype=pl.Utf8)
    return any(bool(series.str.contains(p.regex).any()) for p in patterns)
