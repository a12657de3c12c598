"""Lines the generic reader reads only once rewritten (PaddleOCR's padded NaN: see
`unpadded_nonfinite`), and YOLOv5's and Ultralytics' training console: a header of column
names, then one row per epoch under it, its values aligned under the names and a tqdm bar
after them.

    Epoch   gpu_mem       box       obj       cls    labels  img_size
     1/99     2.64G         nan       nan       nan         4       416: 100%|###| 7/7 [...]

(ultralytics/yolov5 `train.py`; Ultralytics' trainer prints `Epoch GPU_mem box_loss cls_loss
dfl_loss Instances Size`.) No name stands beside its value, so the generic reader read the
bar's counter as the step and its rate as the only metric: the losses, NaN and all, were
lost. Such a row is rewritten as `Epoch: 1 | gpu_mem (G): 2.64 | box_loss: nan | ...` before
the generic reader reads it: the epoch as printed is the step, YOLOv5's `box`, `obj`, `cls`
are its `box_loss`, `obj_loss`, `cls_loss` (its results.csv names) and its `total` is the
training loss; the last batch's label count and the image size are no metrics. A row the
bar redrew (`\r`, one line each) counts once, its last drawing kept.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from forensics.ingest.readers._text import NUMBER
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

_HEADER = re.compile(r"^\s*Epoch\s+(?:gpu_mem|GPU_mem)((?:\s+[A-Za-z_]+)+)\s*$")
_ROW = re.compile(r"^\s*(\d+)/\d+\s+(\d+(?:\.\d+)?)G\s+([^:|]*?)\s*(?::.*)?$")
_VALUE = re.compile(rf"^{NUMBER}$")
_RENAMED = {"box": "box_loss", "obj": "obj_loss", "cls": "cls_loss", "total": "loss"}
_NO_METRIC = {"labels", "targets", "instances", "img_size", "size"}
_SNIFF = re.compile(r"(?m)^\s*Epoch\s+(?:gpu_mem|GPU_mem)\s")


def yolo_rows(text: str, lines: pl.DataFrame) -> pl.DataFrame:
    """`lines` with each YOLO epoch row under its header written as named fields."""
    if not _SNIFF.search(text):
        return lines
    out: list[str] = []
    columns: list[str] | None = None
    last: tuple[int, str] | None = None  # the last row rewritten: (index, epoch)
    for line in lines["text"].to_list():
        head = _HEADER.match(line)
        if head:
            columns = head.group(1).split()
        row = _ROW.match(line) if columns and not head else None
        cells = row.group(3).split() if row else []
        if row and columns and len(cells) == len(columns) and all(map(_VALUE.match, cells)):
            fields = [f"Epoch: {row.group(1)}", f"gpu_mem (G): {row.group(2)}"]
            for name, cell in zip(columns, cells, strict=True):
                if name.lower() not in _NO_METRIC:
                    fields.append(f"{_RENAMED.get(name, name)}: {cell}")
            line = " | ".join(fields)
            if last is not None and last[0] == len(out) - 1 and last[1] == row.group(1):
                out[-1] = ""  # a redraw of the bar (after `\r`): the last one holds the epoch's
            last = (len(out), row.group(1))
        out.append(line)
    return lines.with_columns(pl.Series("text", out, dtype=pl.Utf8))


# PaddleOCR prints its values as `'{}: {:x<6f}'`: a NaN or Inf is padded with `x` to six
# characters (`loss: nanxxx`, `reader_cost: Nanxxx`, `-infxx`), which read as no number at
# all (the NaN loss was dropped); a finite value prints six decimals, no padding.
_PADDED = r"(?i)(^|[^\w.])(-?(?:nan|inf))x+\b"
_PADDED_SNIFF = re.compile(r"(?i)(?:nan|inf)x")


def unpadded_nonfinite(text: str, lines: pl.DataFrame) -> pl.DataFrame:
    """`lines` with PaddleOCR's `nanxxx` (`{:x<6f}` of a NaN) written `nan`."""
    if not _PADDED_SNIFF.search(text):
        return lines
    return lines.with_columns(pl.col("text").str.replace_all(_PADDED, "${1}${2}"))
