"""TensorBoard event files (`events.out.tfevents.*`) and folders of them.

Why not EventAccumulator or tbparse: they build one Python protobuf object per event and
check CRCs in pure Python, which takes minutes on a million-step run. Scalar events from one
writer are byte-for-byte regular, so this reader reads the file once into a numpy buffer and
works on all records at once:

1. Framing (TFRecord: u64 length, u32 masked CRC-32C of the length, data, u32 masked CRC-32C
   of the data). Candidate record starts are the bytes where an Event begins (0x09, its
   wall_time field) whose length CRC checks out; when they chain from byte 0 onwards the file
   is framed without a Python loop, and a plain loop walks whatever is left.
2. Decoding, in three tiers (`_tfevent`). Records of one length that are byte-for-byte the
   same as a template record except for wall_time, step and value (one tag from one writer)
   are decoded by slicing fixed columns. Other records in the layouts real writers produce
   (one value per event: legacy `simple_value`, or a float/double tensor of the `scalars`
   plugin as `SummaryWriter.add_scalar(new_style=True)` and TF2 write it) are parsed
   field by field over arrays of offsets. The rest (several values per event, unusual field
   order, half/int tensors) goes through a small per-record wire-format decoder.
(`_tfrecord`: framing and CRCs; `_tfevent`: the decoding tiers; `_tfproto`: wire format.)

CRC policy: every record's length CRC and data CRC are checked, vectorised (for template
records the data CRC is the template's corrected for the bytes that differ, since CRC is
linear); this is about a fifth of the read time. A mismatch in a complete record is an
InputError naming the file and the record's byte offset: the file is corrupt, not merely
cut short. A torn last record (its header or data cut off by EOF, as when a writer is
killed) is dropped with a warning and a `torn_record` event; the records before it are kept.

Tensor values count as scalars when their tag's plugin is `scalars`; as in TensorBoard, a
tag's plugin is taken from the first of its events that carries metadata (TF2 may write it
once). Legacy `simple_value`s are always scalars.

Folders: a folder whose files are all event files (plus TensorBoard's own `.pbtxt` files and
`plugins/` trees) is one source; its event files are read in the order of the timestamp in
their names, so a resumed run's later values come last. A subfolder name becomes part of
the raw name in two cases only: a split name (`train/`, `eval/`, `validation/`...) gives
`train/loss`; a `SummaryWriter.add_scalars("loss", {"a": ..})` folder `loss_a/` gives
`loss/a`. Any other folder name (timestamps, restarts) is not a prefix, so a resumed run's
curves stay one series.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, event_schema, metric_schema, register
from forensics.ingest.readers import _tfevent, _tfrecord
from forensics.ingest.readers.hf_trainer import long_standins
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

EVENT_PREFIX = "events.out.tfevents"
SPLIT_NAMES = frozenset(
    {"train", "training", "eval", "evaluation", "val", "valid", "validation", "test", "dev"}
)
_MAX_DEPTH = 3


@register
class TensorBoardReader(Reader):
    name = "tensorboard"
    description = "TensorBoard event files (events.out.tfevents.*) or a folder of them"
    priority = 10  # a file name this specific never belongs to another format

    def sniff(self, path: Path, head: str) -> bool:
        if path.is_dir():
            return bool(event_files(path, strict=True))
        # a copied or renamed event file keeps the marker inside its name, and every event
        # file starts with the `brain.Event:N` file-version record
        return EVENT_PREFIX in path.name or "brain.Event:" in head[:64]

    def read(self, path: Path) -> ReadResult:
        files = event_files(path, strict=False) if path.is_dir() else [path]
        if not files:
            raise InputError(path, "no TensorBoard event file found", expected=EVENT_PREFIX + "*")
        parts = [read_event_file(f) for f in files]
        frames = [p.metrics for p in parts if p.metrics.height]
        events = [p.events for p in parts if p.events.height]
        warnings = [w for p in parts for w in p.warnings]
        metrics = pl.concat(frames) if frames else pl.DataFrame(schema=metric_schema())
        return ReadResult(
            metrics=long_standins(megatron_tags(metrics, warnings), warnings),
            warnings=warnings,
            events=pl.concat(events) if events else pl.DataFrame(schema=event_schema()),
        )


# Megatron(-DeepSpeed) writes each scalar as `<group>/<name>` and again against samples and
# tokens consumed (`<group>/<name> vs samples`): the step of those is not an iteration.
_OFF_AXIS = r"(?: vs (?:samples|tokens)$|^steps-vs-(?:samples|tokens)/y=steps,)"
_MEGATRON_TAGS = {
    "lm-loss-training/lm loss": "lm loss",
    "lm-loss-validation/lm loss validation": "lm loss value",
    "lm-loss-validation/lm loss validation ppl": "lm loss PPL",
    "lm-loss-validation/lm loss test": "test lm loss value",
    "lm-loss-validation/lm loss test ppl": "test lm loss PPL",
    "steps-vs-samples/y=samples,x=steps": "consumed samples",
    "steps-vs-tokens/y=tokens,x=steps": "consumed tokens",
}


def megatron_tags(metrics: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """Drop series whose step axis is samples or tokens (saying so), and give Megatron's
    `<group>/<name>` tags the names its text log prints (`lm-loss-training/lm loss` ->
    `lm loss`, `grad-norm/grad-norm` -> `grad-norm`), which the alias table knows."""
    off = metrics.filter(pl.col("raw_name").str.contains(_OFF_AXIS))
    if off.height:
        tags = sorted(off["raw_name"].unique().to_list())
        shown = ", ".join(tags[:4]) + (f" and {len(tags) - 4} more" if len(tags) > 4 else "")
        warnings.append(
            f"{len(tags)} series logged against samples or tokens consumed, not iterations, "
            f"were left out ({off.height} values: {shown}); the same scalars per iteration are kept"
        )
        metrics = metrics.filter(~pl.col("raw_name").str.contains(_OFF_AXIS))
    names = metrics["raw_name"].unique().to_list()
    rename = {n: _megatron_name(n) for n in names}
    rename = {k: v for k, v in rename.items() if v != k}
    if rename:
        metrics = metrics.with_columns(pl.col("raw_name").replace(rename))
    return metrics


def _megatron_name(tag: str) -> str:
    if tag in _MEGATRON_TAGS:
        return _MEGATRON_TAGS[tag]
    group, _, name = tag.partition("/")
    return name if name and group == name.replace(" ", "-").replace("_", "-") else tag


def event_files(folder: Path, *, strict: bool) -> list[Path]:
    """Event files under `folder` (depth <= 3), oldest writer first.

    With `strict`, an empty list when anything but TensorBoard's own files lives there, so a
    run folder that also holds configs or checkpoints is walked file by file instead.
    """
    found: list[Path] = []
    stack = [(folder, 0)]
    while stack:
        current, depth = stack.pop()
        for entry in os.scandir(current):
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                if entry.name != "plugins" and depth < _MAX_DEPTH:
                    stack.append((Path(entry.path), depth + 1))
            elif entry.name.startswith(EVENT_PREFIX):
                found.append(Path(entry.path))
            elif strict and not entry.name.endswith(".pbtxt"):
                return []
    return sorted(found, key=_writer_order)


def several_runs(folder: Path) -> bool:
    """Does a TensorBoard log dir hold one run per subfolder (`logdir/run1/`, `logdir/run2/`)?

    Event files directly in the folder make it one run (its subfolders are then
    `add_scalars` series or splits); otherwise each first-level subfolder that is not a
    split name (`train/`, `eval/`...) is a run of its own."""
    keys = set()
    for f in event_files(folder, strict=False):
        rel = f.parent.relative_to(folder).parts
        if not rel:
            return False
        keys.add("" if rel[0].lower() in SPLIT_NAMES else rel[0])
    return len(keys - {""}) >= 2


def _writer_order(path: Path) -> tuple[int, str]:
    """Event files are named events.out.tfevents.<unix time>.<host>...: sort by that time."""
    parts = path.name.split(".")
    stamp = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else 0
    return stamp, str(path)


def raw_name(tag: str, folder: str) -> str:
    """The metric's raw name: the tag, prefixed by a split folder or an add_scalars folder."""
    if folder.lower() in SPLIT_NAMES and not tag.startswith(folder + "/"):
        return f"{folder}/{tag}"
    stem = tag.replace("/", "_") + "_"
    if folder.startswith(stem) and len(folder) > len(stem):
        return f"{tag}/{folder[len(stem) :]}"
    return tag


@dataclass
class FileResult:
    metrics: pl.DataFrame
    warnings: list[str]
    events: pl.DataFrame


def read_event_file(path: Path) -> FileResult:
    """Every scalar of one event file, in file order."""
    buf, size = _tfrecord.load(path)
    frames = _tfrecord.frame(buf, size, path)
    rows, warnings = _tfevent.decode(buf, frames, path)
    del buf  # the rows are copies: the file's bytes can go before the frame is built
    names = [raw_name(t, path.parent.name) for t in rows.names]
    metrics = pl.DataFrame(
        {
            "step": rows.step,
            "raw_name": pl.Series(names, dtype=pl.Utf8).gather(rows.tag),
            "value": rows.value,
            "wall_time": rows.wall,
        }
    )
    events = pl.DataFrame(schema=event_schema())
    if frames.torn_at is not None:
        warnings.append(
            f"{path}: torn last record at byte offset {frames.torn_at} "
            f"({size - frames.torn_at} bytes) dropped; the {frames.starts.size} records "
            "before it were kept"
        )
        last = int(rows.step[-1]) if rows.step.size else None
        detail = f"{path.name}: torn record at byte offset {frames.torn_at}"
        events = pl.DataFrame(
            [{"step": last, "kind": "torn_record", "detail": detail}], schema=event_schema()
        )
    if not frames.starts.size:
        warnings.append(f"{path}: no complete event record")
    elif not rows.step.size:
        warnings.append(f"{path}: {frames.starts.size} events but no scalar values")
    return FileResult(metrics, warnings, events)
