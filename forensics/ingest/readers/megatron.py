"""Megatron-style text logs: Megatron-LM, Megatron-DeepSpeed, NeMo, Megatron-Bridge, nanotron.

These frameworks print one `key: value |` record per logging window
(` iteration 30/ 1000 | lm loss: 2.247505E+01 | grad norm: 16.999 | ...`). Every field
becomes a raw metric named as printed; canonical names come later from the alias table.
What the log does not print is not invented: `lm loss` and `grad norm` vanish on
skipped/NaN windows, and that absence is itself the evidence. DeepSpeed's
`OVERFLOW! ... Skipping step` lines become events plus an `overflow` count, and the
`arguments` block becomes the run config.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, event_schema, register
from forensics.ingest.config import schedule_name
from forensics.ingest.readers._text import (
    NUMBER,
    cut_last_line,
    line_frame,
    looks_like_text_log,
    parse_number,
    parse_timestamp,
    read_text,
    scan_beyond_head,
)
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

# `[prefix] iteration 30/ 1000 | ...` (Megatron) and `iteration: 327281 / 378950 | ...` (nanotron).
_TRAIN = r"^(?P<prefix>.*?)\biteration(?P<colon>:?)\s+(?P<step>\d+)\s*/\s*\d+\s*\|(?P<rest>.*)$"
# ` validation loss at iteration 100 | lm loss value: ... |`, `extra validation loss at iteration
# 100 wiki | ...` (forks that evaluate several sets)
_VAL = (
    r"^(?P<prefix>.*?)\b(?:validation|valid) loss at iteration\s+(?P<step>\d+)(?P<where>[^|]*)"
    r"\|(?P<rest>.*)$"
)
# DeepSpeed ZeRO `OVERFLOW! Rank 0 Skipping step`, its fused optimizer's `[Rank 0] Overflow
# detected. Skipping step` (GPT-NeoX logs), apex `Gradient overflow.  Skipping step`.
_OVERFLOW = r"(?i:overflow(?:!| detected\.|\.).*skipping step)"
# epfLLM/Megatron-LLM's optimizer: `***WARNING*** Bad grad_norm detected (grad_norm=nan)`
_BAD_NORM = r"(?i)\bbad grad_norm detected \(grad_norm=([-+]?(?:nan|inf))\)"
_SNIFF = re.compile(
    r"\biteration:?\s+\d+\s*/\s*\d+\s*\|[^|\n]*(?::|\b(?:lm loss|learning rate)\s)|"
    r"-{8,} arguments -{8,}|"
    r"(?:validation|valid) loss at iteration\s+\d+[^|\n]*\|\s*[^|\n]*:"
)
_RECORD_START = re.compile(rf"{_SNIFF.pattern}|{_OVERFLOW}|^\s*\[")
_WRAP_FIELD = re.compile(rf"^\s*[^:|]+:\s*{NUMBER}[KMGTkmgt]?\s*$")
_MAX_WRAP = 4  # continuation lines joined onto one wrapped record at most
_PREFIX = r"(?:\s*\[[^\]]*\]:?)*\s*"
_ARGS_START = re.compile(rf"^{_PREFIX}-{{8,}} arguments -{{8,}}\s*$")
_ARGS_END = re.compile(rf"^{_PREFIX}-{{8,}} end of arguments -{{8,}}\s*$")
_ARG_LINE = re.compile(rf"^{_PREFIX}([A-Za-z_][\w.-]*) \.{{2,}}(?: (.*?))?\s*$")
_MAX_ARGS = 2000  # lines read after an `arguments` banner at most


# ----- records: one row per iteration / validation line -----------------------------------
def _records(lines: pl.DataFrame) -> pl.DataFrame:
    """Iteration and validation lines: line, kind, qual, style, step, wall_time, rest.

    `qual` is what an evaluation line says between its step and its first `|` (a data
    set's label, `on test set`); it is kept in the metric names so that evaluations of
    different sets at one step stay apart.
    """
    parts = []
    for kind, literal, regex in (
        ("train", "iteration", _TRAIN),
        ("val", "loss at iteration", _VAL),
    ):
        found = (
            lines.filter(pl.col("text").str.contains(literal, literal=True))
            .select("line", pl.col("text").str.extract_groups(regex).alias("m"))
            .unnest("m")
            .filter(pl.col("step").is_not_null())
        )
        train = kind == "train"
        nanotron = (pl.col("colon") == ":") if train else pl.lit(False)
        parts.append(
            found.select(
                "line",
                pl.lit(kind).alias("kind"),
                (pl.lit("") if train else pl.col("where").str.strip_chars()).alias("qual"),
                pl.when(nanotron)
                .then(pl.lit("nanotron"))
                .otherwise(pl.lit("megatron"))
                .alias("style"),
                "step",
                parse_timestamp(pl.col("prefix")).alias("wall_time"),
                "rest",
            )
        )
    return pl.concat(parts).sort("line")


def _check_steps(records: pl.DataFrame, path: Path) -> pl.DataFrame:
    records = records.with_columns(pl.col("step").cast(pl.Int64, strict=False).alias("num"))
    bad = records.filter(pl.col("num").is_null())
    if bad.height:
        row = bad.row(0, named=True)
        raise InputError(
            path,
            f"iteration {row['step']} is out of range",
            line=row["line"],
            field="iteration",
            expected="a 64-bit step counter",
        )
    return records.with_columns(pl.col("num").alias("step")).drop("num")


# ----- wrapped records --------------------------------------------------------------------
def _join(rest: str, nxt: str) -> str | None:
    """`rest` with the continuation line `nxt` appended, or None if `nxt` does not continue it.

    A break inside a value (`lm loss: 2.0` / `11934E+00`) is joined without a blank, a
    break inside a key (`learning` / ` rate: ...`) with one; the rejoined field must read
    as `key: number`, which keeps timer lines (`time (ms) | ...`) from being glued on.
    """
    if not nxt.strip() or "|" not in nxt or _RECORD_START.search(nxt):
        return None
    tail = rest.rsplit("|", 1)[-1]
    sep = "" if ":" in tail else " "
    head = nxt.split("|", 1)[0]
    if not _WRAP_FIELD.match(tail + sep + head):
        return None
    return rest + sep + nxt


def _mend_one(rest: str, following: list[str]) -> tuple[str, int]:
    used = 0
    for nxt in following:
        if rest.rstrip().endswith("|"):
            break
        joined = _join(rest, nxt)
        if joined is None:
            break
        rest, used = joined, used + 1
    return rest, used


def _mend_wrapped(records: pl.DataFrame, lines: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """Rejoin Megatron records broken over several lines (copied from a terminal or wiki).

    Megatron ends every record with `|`, so a record without one was wrapped or cut.
    Only those few rows go through Python.
    """
    closed = pl.col("rest").str.strip_chars_end().str.ends_with("|")
    megatron = records.filter(pl.col("style") == "megatron")
    open_ = megatron.filter(~closed)
    if open_.height == 0 or open_.height == megatron.height:  # none closes: not wrapped
        return records
    texts = lines["text"].to_list()
    fixed: dict[int, str] = {}
    for line, rest in open_.select("line", "rest").iter_rows():
        joined, used = _mend_one(rest, texts[line : line + _MAX_WRAP])
        if used:
            fixed[line] = joined
    if fixed:
        warnings.append(
            f"{len(fixed)} iteration records were wrapped over several lines (first at line "
            f"{min(fixed)}): rejoined them"
        )
        patch = pl.DataFrame(
            {"line": list(fixed), "rest": list(fixed.values())},
            schema={"line": pl.Int64, "rest": pl.Utf8},
        )
        records = records.update(patch, on="line")
    return records


# ----- fields -----------------------------------------------------------------------------
def _split_open(records: pl.DataFrame, cut_line: int | None, warnings: list[str]) -> pl.DataFrame:
    """Drop the unfinished last field of records that were cut short.

    A Megatron record ends with `|`; one that does not (or a nanotron record on a last
    line with no newline) was cut, and its last value may be truncated (`lm loss: 2.2`
    of 2.247). The complete fields before it are kept.
    """
    unclosed = ~pl.col("rest").str.strip_chars_end().str.ends_with("|")
    closing = bool(records.filter(pl.col("style") == "megatron").select((~unclosed).any()).item())
    # a log none of whose records ends with `|` (NeMo's `Training epoch 0, iteration 120/149 |
    # ... | val_loss: 4.106`) has that style: only a record on a cut last line is unfinished
    style = (pl.col("style") == "megatron") & pl.lit(closing)
    is_open = unclosed & (style | (pl.col("line") == (cut_line or -1)))
    open_ = records.filter(is_open)
    if open_.height == 0:
        return records
    warnings.append(
        f"{open_.height} iteration records end without '|' (cut short, first at line "
        f"{open_['line'][0]}): kept their complete fields, dropped the unfinished last one"
    )
    body = pl.col("rest").str.extract(r"^(.*)\|[^|]*$", 1).fill_null("")
    fixed = open_.with_columns(body.alias("rest"))
    return pl.concat([records.filter(~is_open), fixed]).sort("line")


# 2019-era Megatron prints some fields without a colon: `lm loss 6.758929E+00`,
# `learning rate 9.773E-06`, `lm loss NAN`, `loss scale 64.0`.
_BARE_FIELD = rf"^\s*(?P<k>[A-Za-z][^:]*?[A-Za-z)])\s+(?P<v>{NUMBER})\s*$"


def _fields(records: pl.DataFrame) -> pl.DataFrame:
    """One row per `key: value` (or colon-less `key value`) field: line, kind, qual, step,
    wall_time, raw_name, raw."""
    kv = pl.col("rest").str.split_exact(":", 1)
    bare = pl.col("rest").str.extract_groups(_BARE_FIELD)
    has_colon = pl.col("rest").str.contains(":", literal=True)
    fields = (
        records.with_columns(pl.col("rest").str.split("|"))
        .explode("rest")
        .select(
            "line",
            "kind",
            "qual",
            "step",
            "wall_time",
            pl.when(has_colon)
            .then(kv.struct.field("field_0"))
            .otherwise(bare.struct.field("k"))
            .str.strip_chars()
            .alias("raw_name"),
            pl.when(has_colon)
            .then(kv.struct.field("field_1"))
            .otherwise(bare.struct.field("v"))
            .str.strip_chars()
            .alias("raw"),
        )
        .filter(pl.col("raw").is_not_null() & (pl.col("raw_name").str.len_bytes() > 0))
    )
    return _tidy_names(fields)


def _tidy_names(fields: pl.DataFrame) -> pl.DataFrame:
    """Collapse blanks in keys (left by rejoined wraps) and name evaluation fields so they
    never collide with training ones (`lm loss` on a validation line -> `lm loss value`;
    a labelled evaluation `... at iteration 100 on test set |` -> `on test set lm loss value`).

    Works on the few distinct (kind, qual, key) triples, not on every row.
    """
    names = fields.select("kind", "qual", "raw_name").unique()
    key = pl.col("raw_name").str.replace_all(r"\s+", " ")
    is_eval = pl.col("kind") == "val"
    eval_named = key.str.to_lowercase().str.contains("value|ppl")
    key = pl.when(is_eval & ~eval_named).then(key + pl.lit(" value")).otherwise(key)
    key = pl.when(pl.col("qual") != "").then(pl.col("qual") + pl.lit(" ") + key).otherwise(key)
    names = names.with_columns(key.alias("new")).filter(pl.col("new") != pl.col("raw_name"))
    if names.height == 0:
        return fields
    return (
        fields.join(names, on=["kind", "qual", "raw_name"], how="left", maintain_order="left")
        .with_columns(pl.coalesce("new", "raw_name").alias("raw_name"))
        .drop("new")
    )


def _move_units(fields: pl.DataFrame) -> pl.DataFrame:
    """`elapsed time per iteration: 21392.5 ms` -> `elapsed time per iteration (ms)` = 21392.5,
    the spelling Megatron-LM itself uses, so the alias table knows it."""
    unit = pl.col("raw").str.extract_groups(rf"^(?P<num>{NUMBER})\s*(?P<unit>ms|s)$")
    fixed = (
        fields.filter(pl.col("value").is_null())
        .with_columns(unit.alias("u"))
        .unnest("u")
        .filter(pl.col("unit").is_not_null())
    )
    if fixed.height == 0:
        return fields
    fixed = fixed.with_columns(
        (pl.col("raw_name") + " (" + pl.col("unit") + ")").alias("raw_name"),
        parse_number(pl.col("num")).alias("value"),
    ).select(fields.columns)
    keep = fields.join(fixed.select("line", "raw"), on=["line", "raw"], how="anti")
    return pl.concat([keep, fixed]).sort("line", maintain_order=True)


def _values(fields: pl.DataFrame, path: Path, warnings: list[str]) -> pl.DataFrame:
    """Parse values. A non-number in a loss/norm field is a corrupt record (InputError);
    elsewhere it is skipped with a warning."""
    fields = _move_units(fields.with_columns(parse_number(pl.col("raw")).alias("value")))
    bad = fields.filter(pl.col("value").is_null())
    if bad.height:
        critical = bad.filter(pl.col("raw_name").str.to_lowercase().str.contains("loss|norm"))
        if critical.height:
            row = critical.row(0, named=True)
            raise InputError(
                path,
                f"value {row['raw']!r} is not a number",
                line=row["line"],
                field=row["raw_name"],
                expected="a number, nan or inf",
            )
        row = bad.row(0, named=True)
        warnings.append(
            f"{bad.height} non-numeric fields skipped (first: '{row['raw_name']}: {row['raw']}' "
            f"at line {row['line']})"
        )
    return fields.filter(pl.col("value").is_not_null())


def _global_steps(
    records: pl.DataFrame, values: pl.DataFrame, warnings: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """NeMo prints `Training epoch 1, iteration 3/149 | ... | global_step: 152 | ...`: its
    `iteration` restarts every epoch, and the optimizer step is the `global_step` field."""
    glob = values.filter(
        (pl.col("kind") == "train") & (pl.col("raw_name").str.to_lowercase() == "global_step")
    ).select("line", pl.col("value").cast(pl.Int64, strict=False).alias("_global"))
    if glob.height == 0:
        return records, values
    warnings.append(
        f"{glob.height} iteration records carry a global_step field: it is the step (the "
        "printed iteration counts batches within an epoch)"
    )

    def moved(frame: pl.DataFrame) -> pl.DataFrame:
        return (
            frame.join(glob, on="line", how="left", maintain_order="left")
            .with_columns(pl.coalesce("_global", "step").alias("step"))
            .drop("_global")
        )

    return moved(records), moved(values)


def _bad_grad_norms(
    lines: pl.DataFrame, records: pl.DataFrame, values: pl.DataFrame, warnings: list[str]
) -> pl.DataFrame:
    """epfLLM/Megatron-LLM checks the gradient norm and, when it is not finite, prints
    `***WARNING*** Bad grad_norm detected (grad_norm=nan)` and skips the step: that step's
    record then prints `number of skipped iterations: 1` and no `grad norm`. The NaN (Inf)
    is the norm of the next record's step (as an overflow line's), kept as its `grad norm`
    where the record prints none. Before, the line was not read: the NaN was lost."""
    found = lines.filter(pl.col("text").str.contains(_BAD_NORM)).select(
        "line", pl.col("text").str.extract(_BAD_NORM, 1).alias("raw")
    )
    steps = records.filter(pl.col("kind") == "train").select("line", "step", "wall_time")
    empty = values.select("step", "raw_name", "value", "wall_time").clear()
    if found.height == 0 or steps.height == 0:
        return empty
    printed = values.filter(pl.col("raw_name").str.to_lowercase() == "grad norm")
    hit = (
        found.join_asof(steps, on="line", strategy="forward")
        .filter(pl.col("step").is_not_null())
        .join(printed.select("step"), on="step", how="anti")
        .unique("step", keep="last", maintain_order=True)
    )
    if hit.height:
        warnings.append(
            f"{hit.height} `Bad grad_norm detected` lines: their NaN/Inf is the `grad norm` of "
            "the step after them (skipped, its record prints no norm)"
        )
    return hit.select(
        "step",
        pl.lit("grad norm").alias("raw_name"),
        pl.col("raw").str.to_lowercase().cast(pl.Float64).alias("value"),
        "wall_time",
    ).cast(empty.schema)


# ----- DeepSpeed overflow lines -----------------------------------------------------------
def _overflows(
    lines: pl.DataFrame, records: pl.DataFrame, warnings: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(metric rows `overflow` = count per step, events) for `OVERFLOW! ... Skipping step`.

    An overflow is printed while a step runs, before that step's iteration record, so it
    belongs to the next record's step. Overflows after the last record go to the step
    after it (the one in progress when the log ends).
    """
    found = lines.filter(pl.col("text").str.contains(_OVERFLOW)).select(
        "line",
        pl.col("text").str.extract(r"(?i)((?:gradient )?overflow.*?)\s*$", 1).alias("detail"),
    )
    steps = records.filter(pl.col("kind") == "train").select("line", "step", "wall_time")
    if found.height == 0 or steps.height == 0:
        if found.height:
            warnings.append(f"{found.height} overflow lines but no iteration record: no step")
        events = found.select(
            pl.lit(None, pl.Int64).alias("step"), pl.lit("overflow").alias("kind"), "detail"
        )
        empty = pl.DataFrame(
            schema={"step": pl.Int64, "value": pl.Float64, "wall_time": pl.Float64}
        )
        return empty, events
    hit = found.join_asof(steps, on="line", strategy="forward")
    trailing = hit["step"].null_count()
    if trailing:
        warnings.append(
            f"{trailing} overflow lines after the last iteration record: put at step "
            f"{int(steps['step'][-1]) + 1}"
        )
        hit = hit.with_columns(pl.col("step").fill_null(int(steps["step"][-1]) + 1))
    events = hit.select("step", pl.lit("overflow").alias("kind"), "detail")
    counts = hit.group_by("step", maintain_order=True).agg(
        pl.len().cast(pl.Float64).alias("value"), pl.col("wall_time").first()
    )
    return counts, events


# ----- arguments block -> config ----------------------------------------------------------
def _arg_value(raw: str | None) -> Any:
    """Typed value of a printed argument: bool, None, int, float, else the text."""
    if raw is None or raw == "None":
        return None
    if raw in ("True", "False"):
        return raw == "True"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def _args_blocks(lines: pl.DataFrame) -> list[dict[str, Any]]:
    """Every `arguments` block of the log (a resumed run prints one per launch)."""
    texts = lines.filter(pl.col("text").str.contains(" arguments ", literal=True))
    blocks: list[dict[str, Any]] = []
    all_text: list[str] | None = None
    for line, text in texts.select("line", "text").iter_rows():
        if not _ARGS_START.match(text):
            continue
        all_text = all_text if all_text is not None else lines["text"].to_list()
        block: dict[str, Any] = {}
        for arg_line in all_text[line : line + _MAX_ARGS]:
            if _ARGS_END.match(arg_line):
                break
            m = _ARG_LINE.match(arg_line)
            if m:
                block[m.group(1)] = _arg_value(m.group(2))
        blocks.append(block)
    return blocks


def _num(args: dict[str, Any], key: str) -> float | None:
    """A numeric argument as float; None when absent, None-valued, boolean or text."""
    value = args.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _warmup_steps(args: dict[str, Any]) -> int | None:
    """Warm-up in steps as Megatron computes it: a fraction of the decay span wins over
    an iteration count; sample counts are divided by the global batch size."""
    span = _num(args, "lr_decay_iters") or _num(args, "train_iters")
    frac, iters = _num(args, "lr_warmup_fraction"), _num(args, "lr_warmup_iters")
    samples, gbs = _num(args, "lr_warmup_samples"), _num(args, "global_batch_size")
    old = _num(args, "warmup")  # Megatron v1: a fraction of train_iters
    if frac is not None and span:
        return round(frac * span)
    if iters:
        return int(iters)
    if samples and gbs:
        return round(samples / gbs)
    if old is not None:
        return round(old * span) if 0 < old < 1 and span else int(old)
    return int(iters) if iters is not None else None


_CANONICAL_ARGS = {
    "beta1": ("adam_beta1",),
    "beta2": ("adam_beta2",),
    "peak_lr": ("lr",),
    "min_lr": ("min_lr",),
    "grad_clip": ("clip_grad",),
    "world_size": ("world_size",),
    "seq_len": ("seq_length", "encoder_seq_length"),
    "global_batch_size": ("global_batch_size",),
    "train_iters": ("train_iters",),
    "total_steps": ("train_iters",),
    "lr_decay_steps": ("lr_decay_iters",),
    "seed": ("seed",),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
}
# Megatron prints the tokenizer's size after the arguments block, not in it:
# ` > padded vocab (size: 50257) with 431 dummy tokens (new size: 50688)`.
_PADDED_VOCAB = re.compile(r">\s*padded vocab \(size: (\d+)\)")


def canonical_config(args: dict[str, Any]) -> dict[str, Any]:
    """The raw Megatron args plus the canonical keys later stages read (beta2, peak_lr, ...)."""
    out = dict(args)
    for canon, keys in _CANONICAL_ARGS.items():
        value = next((args[k] for k in keys if args.get(k) is not None), None)
        if value is not None:
            out[canon] = value
    warmup = _warmup_steps(args)
    if warmup is not None:
        out["warmup_steps"] = warmup
    schedule = schedule_name(args.get("lr_decay_style"))
    if schedule is not None:
        out["lr_schedule"] = schedule
    if "fp16" in args or "bf16" in args:
        out["precision"] = "bf16" if args.get("bf16") else "fp16" if args.get("fp16") else "fp32"
    return out


def _config(lines: pl.DataFrame, warnings: list[str]) -> dict[str, Any]:
    blocks = _args_blocks(lines)
    if not blocks:
        return {}
    first = blocks[0]
    for i, later in enumerate(blocks[1:], start=2):
        changed = sorted(k for k in first.keys() | later.keys() if first.get(k) != later.get(k))
        if changed:
            shown = ", ".join(f"{k}: {first.get(k)!r} -> {later.get(k)!r}" for k in changed[:5])
            warnings.append(
                f"arguments block {i} differs from the first ({shown}); config is the first block's"
            )
    config = canonical_config(first)
    vocab = lines.filter(pl.col("text").str.contains("padded vocab (size:", literal=True))
    m = _PADDED_VOCAB.search(vocab["text"][0]) if vocab.height else None
    if m and "vocab_size" not in config:
        config["vocab_size"] = int(m.group(1))
    return config


def _has_record(text: str) -> bool:
    """An iteration record or an arguments banner; substring tests first, as they are
    ten times cheaper than the regex on megabytes of unrelated text."""
    if "iteration" not in text and " arguments " not in text:
        return False
    return _SNIFF.search(text) is not None


@register
class MegatronReader(Reader):
    name = "megatron"
    structured = False  # numbers parsed back from printed text
    description = "Megatron-LM / Megatron-DeepSpeed / NeMo / Megatron-Bridge / nanotron text logs"
    priority = 40

    def sniff(self, path: Path, head: str) -> bool:
        if not looks_like_text_log(path, head):
            return False
        return _has_record(head) or scan_beyond_head(path, _has_record)

    def read(self, path: Path) -> ReadResult:
        text = read_text(path)
        lines = line_frame(text)
        warnings: list[str] = []
        config = _config(lines, warnings)
        records = _check_steps(_records(lines), path)
        if records.height == 0 and not config:
            raise InputError(
                path,
                "no Megatron iteration record",
                expected="lines like ' iteration 30/ 1000 | lm loss: 2.2E+00 |'",
            )
        if records.height == 0:
            warnings.append("an arguments block but no iteration record (the run stopped early)")
        records = _mend_wrapped(records, lines, warnings)
        records = _split_open(records, cut_last_line(text, lines), warnings)
        values = _values(_fields(records), path, warnings)
        records, values = _global_steps(records, values, warnings)
        counts, events = _overflows(lines, records, warnings)
        metrics = pl.concat(
            [
                values.select("step", "raw_name", "value", "wall_time"),
                _bad_grad_norms(lines, records, values, warnings),
                counts.select("step", pl.lit("overflow").alias("raw_name"), "value", "wall_time"),
            ]
        )
        return ReadResult(
            metrics=metrics,
            config=config,
            warnings=warnings,
            events=events.select([pl.col(c).cast(t) for c, t in event_schema().items()]),
        )
