"""Any line-oriented training log, read by inferring a template per kind of line.

A log no named pattern knows (`line_patterns.yaml`, the Megatron reader) still prints one
record per step: a step counter and `name value` fields in some syntax. This reader finds
them without a pattern written for the format:

1. Each line loses the prefix that carries no metric: a timestamp, `[rank0]:`, a glog
   header, everything up to a logger level (`INFO:root:`, `... | INFO | mod:fn:12 - `,
   OLMo's tab-separated `time<TAB>host<TAB>logger<TAB>INFO<TAB>`).
2. Every number (scientific notation, `2,097,152`, `85.8G`, NaN/Inf spelt any way) is
   replaced by a slot. Lines that are the same text around their slots are one *template*
   (a train line, a validation line, a banner): a 5M-line log has a handful.
3. Each template is read once, in Python: which slot is the step (`step N`, `iter N`,
   `iteration N/M`, `[step=N/M]`, `s:N`, a bare leading `N/M` or `N`), which slots are
   totals (`/M`) or annotations (`(+nanz)`), and the name of every other slot (the text
   before it within its field, fields being cut at `|`, `,`, `;`, tabs, runs of blanks; the
   unit after it when nothing precedes it).
4. The values of all lines of accepted templates come out in one vectorised pass.

Lines without a step that follow a record (OLMo's indented `    train/CrossEntropyLoss=2.998`,
llm.c's `val loss 3.28`) take the step of the record before them. The reader says what it
read (each metric with the line template it came from, how many lines it ignored, a sample
of them) in its warnings, so that a user can check it.

Why not a log-template miner such as Drain3: it clusters line by line in Python (tens of
microseconds a line: minutes on 5M lines) and still leaves naming the fields and finding the
step to us; slots from one vectorised regex give the same templates for numeric logs, in
the speed class of the named-pattern reader (bench/ingest_textlog.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.canon import alias_table
from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.readers._text import (
    head_lines,
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

SLOT = "\x00"  # NUL never survives read_text, so it cannot occur in a line
# A number as logs print it. The leading \b keeps digits inside names (`gpt2`, `mtp_1`,
# `h100`) out; NaN/Inf need a trailing \b too so that `nanz`, `info`, `inference` stay text.
NUM = (
    r"(?:[-+]?\b(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?:[KMGT]\b)?"
    r"|[-+]?\b(?i:nan|inf(?:inity)?)\b)"
)
# Prefixes that carry no metric, removed before templating (applied repeatedly).
_LEVEL = r"(?:INFO|WARNING|WARN|DEBUG|ERROR|CRITICAL|TRACE|SUCCESS)"
_PREFIX = (
    r"^(?:\s*(?:"
    rf".{{0,160}}?\b{_LEVEL}\b(?:\|[^\]\s]*\])?"  # `[INFO|DP=0|TP=0]` (nanotron)
    r"(?:\s*\|\s*[\w.<>]+:[\w.<>]+:\d+\s*-"  # loguru `| mod:fn:12 -`
    r"|\s+[\w.$<>]+:\d+\s+-"  # log4j `Class$:295 -`
    r"|[\s:|\]\-]*\w*:[\w.]*:)?[\s:|\]\-]*"  # `INFO:root:`
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]"  # glog (torchrun warnings)
    r"|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
    # [rank0]:, [2024-05-01 12:00:00], [titan] ... but not [step=1/10] nor [Iteration 5]
    r"|\[(?:[^\]=sSiI][^\]=]*)?\]:?"
    r"|>\s"  # a Markdown quote of a pasted log
    r"|\[\d+,\d+\]<\w+>:"  # mpirun --tag-output
    r"|rank\s*\d+\s*:"
    r"))+\s*"
)
# Keys that name the step counter, best first (litgpt prints `iter N step M`: M is the step).
_STEP_KEYS = ("step", "global_step", "global step", "steps", "iteration", "iter", "it", "s", "i")
_SPLITS = {"train", "val", "valid", "validation", "eval", "test"}
_FIELD_SEP = re.compile(r"[|,;\t\]]|\s{2,}|:\s|\s-\s|=(?=\s)")
_WORD = re.compile(r"[A-Za-z]")
_ANSI = r"\x1b\[[0-9;]*[A-Za-z]"  # colour codes (torchtitan colours its step lines)
_GLUED = re.compile(r"([A-Za-z%]{1,4})(?:[\s|,;)]|$)")
_UNIT_GLUED = re.compile(r"^[^\s|,;:=()\[\]]+(?=[\s|,;])")
_KEY = re.compile(r"[A-Za-z%][\w .%/()@\-]*\Z")
# `file.cu:675` in an error or warning message is a source line, not a metric.
_SOURCE_FILE = re.compile(r"\.(?:py|pyx|cu|cuh|c|cc|cpp|cxx|h|hpp|rs|go|java|js|ts|sh)\Z")
_MAX_STEP_SLOT = 3  # the step is among the first numbers of a record
_MAX_FIELDS = 40  # more named numbers on one line is a config dump
_MAX_TEMPLATES = 5000  # distinct templates examined at most (the most frequent first)
_SAMPLES = 3


@dataclass
class Template:
    """One kind of line: its text with numbers as slots, and what each slot is."""

    text: str
    lines: int
    step_slot: int | None = None
    names: dict[int, str] = field(default_factory=dict)  # slot -> metric name
    cont: bool = False  # no step: takes the step of the record before it

    keyed: bool = False  # the step is named (`step N`), not a bare leading number
    epoch_slot: int | None = None  # mmengine `[epoch][i/N]`: step = (epoch - 1) * N + i
    total_slot: int | None = None
    ordinal: bool = False  # no step counter at all: records numbered in file order

    @property
    def is_record(self) -> bool:
        """A step record: named numbers, or a named step alone (OLMo's `[step=N/M]` line,
        whose metrics follow on indented lines)."""
        return self.ordinal or (self.step_slot is not None and (bool(self.names) or self.keyed))

    def shown(self) -> str:
        parts = self.text.split(SLOT)
        out = parts[0]
        for i, lit in enumerate(parts[1:]):
            label = (
                "<step>"
                if i == self.step_slot
                else f"<{self.names[i]}>"
                if i in self.names
                else "#"
            )
            out += label + lit
        return out.strip()


def _clean_key(text: str) -> str:
    key = text.strip().strip("{}<>#*'\"").strip()
    while key[:1] in "[(" and key and key.count(key[0]) > key.count(")]"["[(".index(key[0])]):
        key = key[1:].strip()
    while key[-1:] in ")]" and key and key.count(key[-1]) > key.count("(["[")]".index(key[-1])]):
        key = key[:-1].strip()
    return re.sub(r"\s+", " ", key)


def _key_before(lit: str) -> str:
    """The name a slot's preceding text gives it: the last field's text, separators off."""
    body = lit.rstrip(" \t:=#")
    if not body:
        return ""
    return _clean_key(_FIELD_SEP.split(body)[-1])


def _key_after(lit: str) -> str:
    """The unit or name after a slot (`4230.95 ms`, `31.9% bf16 MFU`, `123917 tok/s`)."""
    return _clean_key(_FIELD_SEP.split(lit.lstrip())[0]) if lit.strip() else ""


def infer(text: str, count: int) -> Template:
    """What each slot of one template is (see the module docstring)."""
    tpl = Template(text, count)
    lits = text.split(SLOT)
    n = len(lits) - 1
    # a unit glued to the previous number (`0.0m tok/s:`, `12ms, mfu`) is not part of a key
    befores = [_key_before(_UNIT_GLUED.sub("", lits[i]) if i else lits[i]) for i in range(n)]
    skip: set[int] = set()
    for i in range(n):
        before = lits[i]
        if i and before.strip() in ("/", "of"):  # `N/M`: M is a total
            skip.add(i)
        elif before.rstrip().endswith(("(", "(+", "(-")):
            skip.add(i)  # `(+nanz)`, `(-1.20z)`: an annotation of the value before it
        elif i and not before:  # glued to the previous number (`1.5.2`, a date): not a value
            skip.add(i)
        elif i and before == ":" and i + 1 < len(lits) - 1 and lits[i + 1] == ":":
            skip.update({i - 1, i, i + 1})  # a clock `2:46:39` (an ETA), not three values
    lowered = [b.lower().lstrip("[") for b in befores]
    for key in _STEP_KEYS:
        hits = [i for i in range(n) if lowered[i] == key and i not in skip]
        if hits:
            tpl.step_slot, tpl.keyed = hits[0], True
            break
    if tpl.step_slot is None and n and not lits[0].strip(" \t[") and 0 not in skip:
        tpl.step_slot = 0  # a bare leading `N` or `N/M`
    if tpl.step_slot is None:
        _epoch_iteration(tpl, lits, skip)
    split_word = _split_of(lits)
    for i in range(n):
        if i == tpl.step_slot or i in skip:
            continue
        key = befores[i]
        if not _WORD.search(key):
            after = lits[i + 1]
            spaced = not lits[i] or lits[i][-1:] in " \t|,;"  # `| 4230.95 ms`, not `:39  time`
            key = _key_after(after) if spaced and (after[:1] in " %" or after[:1].isalpha()) else ""
        if not _good_key(key):
            continue
        unit = _GLUED.match(lits[i + 1])
        if unit and befores[i] and not key.lower().endswith(unit.group(1).lower()):
            key = f"{key} ({unit.group(1)})"  # `time 1019.95ms` -> `time (ms)`, `0.0m` -> minutes
        if key.lower() in _SPLITS and n - len(skip) == 2:  # build-nanogpt: `0 train 10.955`
            key = f"{key} loss"
        elif split_word and split_word not in key.lower() and "loss" in key.lower():
            key = f"{split_word} {key}"
        tpl.names[i] = key
    if tpl.step_slot is not None and (
        tpl.step_slot > _MAX_STEP_SLOT or len(tpl.names) > _MAX_FIELDS
    ):
        tpl.step_slot, tpl.keyed = None, False  # a config dump or a table, not a record
        tpl.names = {}
    if tpl.step_slot is None:
        keys = list(tpl.names.values())
        indented = lits[0][:1] in (" ", "\t") and len(keys) <= 3
        tpl.cont = indented or (len(keys) == 1 and "loss" in keys[0].lower())
    return tpl


def _epoch_iteration(tpl: Template, lits: list[str], skip: set[int]) -> None:
    """mmengine / mmcv `Epoch [E][i/N]` or `Epoch(train) [E][i/N]`: the step is the
    iteration counted over epochs."""
    for i in range(1, len(lits) - 2):
        bracketed = lits[i].endswith("][") and lits[i + 1] == "/" and lits[i - 1].endswith("[")
        if bracketed and "epoch" in lits[i - 1].lower():
            tpl.epoch_slot, tpl.step_slot, tpl.total_slot = i - 1, i, i + 1
            skip.update({i - 1, i + 1})
            return


def _good_key(key: str) -> bool:
    """A metric name as logs print them: starts with a letter, a few words, no code."""
    if not _KEY.match(key) or len(key) > 60 or len(key.split()) > 6:
        return False
    if _SOURCE_FILE.search(key):
        return False
    return key.count("(") == key.count(")")


def _split_of(lits: list[str]) -> str:
    """`val`/`eval`/`test` when the template's literal text says it is an evaluation line
    (a word outside its keys: `validation | loss 3.4`), so its loss never joins `loss`."""
    words = re.findall(r"[A-Za-z]+", " ".join(lits[:1]).lower())
    for w in words:
        if w in ("val", "valid", "validation"):
            return "val"
        if w in ("eval", "evaluation", "test"):
            return w
    return ""


def _prepared(lines: pl.DataFrame) -> pl.DataFrame:
    """line, text (prefix removed), tpl (numbers as slots, blank runs collapsed)."""
    body = pl.col("text").str.replace_all(_ANSI, "").str.replace(_PREFIX, "")
    return (
        lines.filter(pl.col("text").str.contains(r"\d|(?i:nan|inf)"))
        .with_columns(body.alias("body"))
        .with_columns(
            pl.col("body").str.replace_all(NUM, SLOT).str.replace_all(r"[ ]{2,}", "  ").alias("tpl")
        )
    )


def templates(prepared: pl.DataFrame, notes: list[str]) -> dict[str, Template]:
    """Infer every template that may hold a record, most frequent first."""
    counts = (
        prepared.filter(pl.col("tpl").str.contains(SLOT, literal=True))
        .group_by("tpl")
        .len()
        .sort(["len", "tpl"], descending=[True, False])
    )
    if counts.height > _MAX_TEMPLATES:
        notes.append(
            f"{counts.height} distinct line templates; only the {_MAX_TEMPLATES} most frequent "
            "were examined"
        )
        counts = counts.head(_MAX_TEMPLATES)
    out = {}
    for text, count in counts.iter_rows():
        tpl = infer(text, count)
        if tpl.is_record or tpl.cont or any("loss" in k.lower() for k in tpl.names.values()):
            out[text] = tpl
    return out


def _number_in_order(found: dict[str, Template], notes: list[str]) -> bool:
    """A log with no step counter at all (Hugging Face Trainer's stdout prints
    `{'loss': 2.3, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.53}`): its
    training-loss lines become records numbered 1, 2, ... in file order, and lines with
    another loss (an eval dict) follow the record before them. Says so in a note."""
    table = alias_table()
    ordinal = [
        t
        for t in found.values()
        if t.step_slot is None and any(table.canonical(k) == "loss" for k in t.names.values())
    ]
    if not ordinal:
        return False
    chosen = {id(t) for t in ordinal}
    for t in found.values():
        t.ordinal = id(t) in chosen
        t.cont = not t.ordinal and any("loss" in k.lower() for k in t.names.values())
    notes.append(
        "generic reader: the log prints no step counter; its "
        f"{sum(t.lines for t in ordinal)} training-loss records are numbered 1, 2, ... in "
        "file order (the step axis is the record's rank, not the optimizer step)"
    )
    return True


def _slot_table(found: dict[str, Template]) -> tuple[pl.DataFrame, pl.DataFrame]:
    steps = pl.DataFrame(
        {
            "tpl": list(found),
            "step_slot": [t.step_slot for t in found.values()],
            "epoch_slot": [t.epoch_slot for t in found.values()],
            "total_slot": [t.total_slot for t in found.values()],
            "ordinal": [t.ordinal for t in found.values()],
            "cont": [t.cont and not t.is_record for t in found.values()],
        },
        schema={
            "tpl": pl.Utf8,
            "step_slot": pl.Int64,
            "epoch_slot": pl.Int64,
            "total_slot": pl.Int64,
            "ordinal": pl.Boolean,
            "cont": pl.Boolean,
        },
    )
    rows = [(k, i, n) for k, t in found.items() for i, n in t.names.items()]
    names = pl.DataFrame(
        {
            "tpl": [r[0] for r in rows],
            "slot": [r[1] for r in rows],
            "raw_name": [r[2] for r in rows],
        },
        schema={"tpl": pl.Utf8, "slot": pl.Int64, "raw_name": pl.Utf8},
    )
    return steps, names


def extract(
    lines: pl.DataFrame, notes: list[str], *, with_time: bool = True
) -> tuple[pl.DataFrame, dict[str, Template], int]:
    """Long rows (line, step, raw_name, value, wall_time) of every record line, the
    templates used, and how many non-blank lines were left unread."""
    prepared = _prepared(lines)
    found = templates(prepared, notes)
    empty = pl.DataFrame(
        schema={
            "line": pl.Int64,
            "step": pl.Int64,
            "raw_name": pl.Utf8,
            "value": pl.Float64,
            "wall_time": pl.Float64,
        }
    )
    if not any(t.is_record for t in found.values()) and not _number_in_order(found, notes):
        return empty, {}, 0
    found = {k: t for k, t in found.items() if t.is_record or t.cont}
    step_tbl, name_tbl = _slot_table(found)
    hit = prepared.join(step_tbl, on="tpl", how="inner", maintain_order="left").with_columns(
        pl.col("body").str.extract_all(NUM).alias("nums")
    )
    slot = pl.col("step_slot")
    num = pl.col("nums").list.get
    step = num(slot, null_on_oob=True).cast(pl.Int64, strict=False)
    epoch = num(pl.col("epoch_slot"), null_on_oob=True).cast(pl.Int64, strict=False)
    total = num(pl.col("total_slot"), null_on_oob=True).cast(pl.Int64, strict=False)
    hit = hit.with_columns(
        pl.when(pl.col("ordinal"))
        .then(pl.col("ordinal").cast(pl.Int64).cum_sum())
        .when(pl.col("epoch_slot").is_not_null())
        .then((epoch - 1) * total + step)
        .when(slot.is_not_null())
        .then(step)
        .alias("step")
    )
    # records whose step slot is not an integer (a decimal where a step was): not records
    bad_step = hit.filter(~pl.col("cont") & pl.col("step").is_null())
    hit = hit.filter(pl.col("cont") | pl.col("step").is_not_null())
    hit = _attach_continuations(hit, lines)
    stamped = (
        with_time
        and hit.height
        and bool(hit.head(1000).select(parse_timestamp(pl.col("text")).is_not_null().any()).item())
    )  # most logs print no time: skip the regex over every line then
    wall = parse_timestamp(pl.col("text")) if stamped else pl.lit(None, pl.Float64)
    hit = hit.with_columns(wall.alias("wall_time"))
    rows = (
        hit.select("line", "tpl", "step", "nums", "wall_time")
        .join(name_tbl, on="tpl", how="inner")
        .with_columns(pl.col("nums").list.get(pl.col("slot"), null_on_oob=True).alias("raw"))
        .with_columns(pl.col("raw").cast(pl.Float64, strict=False).alias("value"))
    )
    odd = rows.filter(pl.col("value").is_null())  # `2,097,152`, `85.8G`, `Infinity`: few rows
    if odd.height:
        odd = odd.with_columns(
            parse_number(pl.col("raw").str.replace_all(",", "")).alias("value")
        ).filter(pl.col("value").is_not_null())
        rows = pl.concat([rows.filter(pl.col("value").is_not_null()), odd])
    rows = rows.sort(["line", "slot"])
    used = set(rows["tpl"].unique().to_list())
    found = {k: t for k, t in found.items() if k in used}
    nonblank = lines.filter(pl.col("text").str.strip_chars().str.len_bytes() > 0).height
    ignored = nonblank - rows["line"].n_unique()
    if bad_step.height:
        notes.append(f"{bad_step.height} lines whose step field is not an integer: ignored")
    return rows.select(empty.columns), found, ignored


def _attach_continuations(hit: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Continuation lines take the step of the nearest record line before them, when
    nothing but other continuation lines sits between them; an unindented loss line
    (llm.c's `val loss`) before the first record takes the step before the first one."""
    cont = hit.filter(pl.col("cont"))
    recs = hit.filter(~pl.col("cont"))
    if cont.height == 0:
        return recs
    anchors = recs.select(pl.col("line").alias("rec_line"), pl.col("step").alias("rec_step"))
    joined = cont.drop("step").join_asof(
        anchors, left_on="line", right_on="rec_line", strategy="backward"
    )
    # lines between the record and the continuation that are neither blank nor continuations
    all_lines = lines.filter(pl.col("text").str.strip_chars().str.len_bytes() > 0).select("line")
    marks = all_lines.join(cont.select("line", pl.lit(True).alias("c")), on="line", how="left")
    marks = marks.join(recs.select("line", pl.lit(True).alias("r")), on="line", how="left")
    marks = marks.with_columns(
        (pl.col("c").is_null() & pl.col("r").is_null()).cast(pl.Int64).cum_sum().alias("other")
    )
    joined = joined.join(marks.select("line", "other"), on="line", how="left")
    joined = joined.join(
        marks.select(pl.col("line").alias("rec_line"), pl.col("other").alias("rec_other")),
        on="rec_line",
        how="left",
    )
    steps = recs["step"].drop_nulls()
    first_step = int(steps.min()) if len(steps) else None  # type: ignore[arg-type]
    indented = pl.col("body").str.contains(r"^[ \t]") | pl.col("text").str.contains(r"^[ \t]")
    step = (
        pl.when(pl.col("rec_line").is_null())
        .then(pl.lit(max(first_step - 1, 0) if first_step is not None else None))
        .when((pl.col("other") == pl.col("rec_other")) | ~indented)
        .then(pl.col("rec_step"))
        .otherwise(None)
    )
    before_first = pl.col("rec_line").is_null() & pl.col("tpl").str.contains("(?i)loss")
    joined = joined.with_columns(step.cast(pl.Int64).alias("step")).filter(
        pl.col("step").is_not_null() & (pl.col("rec_line").is_not_null() | before_first)
    )
    return pl.concat([recs, joined.select(recs.columns)]).sort("line")


def describe(
    found: dict[str, Template], ignored: int, lines: pl.DataFrame, used: set[int]
) -> list[str]:
    """What was read, for the user to check: metric <- template, lines ignored, a sample."""
    out = []
    for tpl in sorted(found.values(), key=lambda t: -t.lines):
        metrics = ", ".join(tpl.names.values())
        kind = "continuation lines" if not tpl.is_record else "lines"
        out.append(f"generic reader: {metrics} from {tpl.lines} {kind} like '{tpl.shown()[:160]}'")
    if ignored:
        rest = lines.filter(
            ~pl.col("line").is_in(pl.Series(list(used), dtype=pl.Int64).implode())
            & (pl.col("text").str.strip_chars().str.len_bytes() > 0)
        ).head(_SAMPLES)
        sample = " / ".join(f"{r[0]}: '{r[1].strip()[:80]}'" for r in rest.iter_rows())
        out.append(
            f"generic reader: {ignored} lines ignored (no step and metric found), e.g. {sample}"
        )
    return out


def read_generic(path: Path, text: str) -> ReadResult:
    lines = line_frame(text)
    notes: list[str] = []
    rows, found, ignored = extract(lines, notes)
    if rows.height == 0:
        raise InputError(
            path,
            "no line with a step counter and a named number",
            expected="lines like 'step 10 | loss 2.31' or 'iter 10: loss=2.31'",
        )
    notes = describe(found, ignored, lines, set(rows["line"].to_list())) + notes
    return ReadResult(metrics=rows.select("step", "raw_name", "value", "wall_time"), warnings=notes)


def has_records(lines: list[str], *, min_lines: int = 2) -> bool:
    """Sniff: at least `min_lines` record lines among `lines` (a log head)."""
    if not lines:
        return False
    frame = pl.DataFrame({"text": lines}, schema={"text": pl.Utf8}).with_row_index("line", 1)
    frame = frame.with_columns(pl.col("line").cast(pl.Int64))
    rows, _, _ = extract(frame, [], with_time=False)
    return rows["line"].n_unique() >= min_lines


@register
class GenericTextReader(Reader):
    name = "generic_text"
    structured = False  # numbers parsed back from printed text
    description = "any line-oriented log with a step counter and named numbers (inferred)"
    priority = 95  # after every named format and the named line patterns

    def sniff(self, path: Path, head: str) -> bool:
        if not looks_like_text_log(path, head.lstrip("\ufeff")):
            return False
        if has_records(head_lines(head)):
            return True
        return scan_beyond_head(path, lambda chunk: has_records(chunk.splitlines()))

    def read(self, path: Path) -> ReadResult:
        return read_generic(path, read_text(path))
