"""A minimal protobuf wire-format decoder for TensorBoard `Event` records, one at a time.

The TensorBoard reader decodes regular records in bulk (`_tfevent`); this module handles the
rest and tells the bulk decoder where the fields of a template record lie. Only the fields
scalars need are read:

    Event:        wall_time double = 1, step int64 = 2, summary Summary = 5
    Summary:      value Value = 1 (repeated)
    Value:        tag string = 1, simple_value float = 2, tensor TensorProto = 8,
                  metadata SummaryMetadata = 9 (plugin_data = 1 -> plugin_name = 1)
    TensorProto:  dtype = 1, tensor_shape = 2 (dim = 2 -> size = 1), tensor_content = 4,
                  float_val = 5, double_val = 6, int_val = 7, int64_val = 10, half_val = 13
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

PLUGIN_NONE, PLUGIN_SCALARS, PLUGIN_OTHER = 0, 1, 2
SCALARS = b"scalars"
_SCALAR_EVENT_FIELDS = {1, 2, 5}
_NON_SCALAR_VALUE_FIELDS = {3, 4, 5, 6}  # obsolete histogram, image, histo, audio

# TensorProto dtype -> (numpy dtype of tensor_content, field number of repeated values)
DTYPES: dict[int, tuple[str, int]] = {
    1: ("<f4", 5),  # DT_FLOAT: float_val
    2: ("<f8", 6),  # DT_DOUBLE: double_val
    3: ("<i4", 7),  # DT_INT32: int_val
    9: ("<i8", 10),  # DT_INT64: int64_val
    19: ("<f2", 13),  # DT_HALF: half_val (bits in a varint)
    14: ("bf16", 13),  # DT_BFLOAT16: half_val (bits in a varint)
}


class Malformed(Exception):
    """A record's bytes are not a valid Event message."""


Field = tuple[int, int, int, int]  # field number, wire type, start, end of its payload


def fields(data: bytes, pos: int, end: int) -> Iterator[Field]:
    """Each field of the message in data[pos:end]; a varint's span is its own bytes."""
    while pos < end:
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, stop = varint(data, pos)
        elif wire == 2:
            size, pos = varint(data, pos)
            stop = pos + size
        elif wire in (1, 5):
            stop = pos + (8 if wire == 1 else 4)
        else:
            raise Malformed(f"unsupported wire type {wire} for field {number}")
        if stop > end:
            raise Malformed(f"field {number} runs past the end of its message")
        yield number, wire, pos, stop
        pos = stop


def varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Malformed("truncated varint")
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return result, pos


def _int64(data: bytes, pos: int) -> int:
    value = varint(data, pos)[0]
    return value - (1 << 64) if value >= 1 << 63 else value


# ----- whole events -------------------------------------------------------------------------
ScalarValue = tuple[str, float, bool, int]  # tag, value, is a tensor, plugin flag


def parse_event(data: bytes) -> tuple[float, int, list[ScalarValue]]:
    """Event -> (wall_time, step, scalar values). Non-scalar values are left out."""
    wall, step, values = 0.0, 0, []
    for number, wire, a, b in fields(data, 0, len(data)):
        if (number, wire) == (1, 1):
            (wall,) = struct.unpack_from("<d", data, a)
        elif (number, wire) == (2, 0):
            step = _int64(data, a)
        elif (number, wire) == (5, 2):
            for vn, vw, va, vb in fields(data, a, b):
                value = summary_value(data, va, vb) if (vn, vw) == (1, 2) else None
                if value is not None:
                    values.append(value)
    return wall, step, values


def summary_value(data: bytes, pos: int, end: int) -> ScalarValue | None:
    tag, simple, tensor, plugin = "", None, None, PLUGIN_NONE
    for number, wire, a, b in fields(data, pos, end):
        if (number, wire) == (1, 2):
            tag = data[a:b].decode("utf-8", errors="replace")
        elif (number, wire) == (2, 5):
            (simple,) = struct.unpack_from("<f", data, a)
        elif (number, wire) == (8, 2):
            tensor = tensor_scalar(data, a, b)
        elif (number, wire) == (9, 2):
            plugin = plugin_flag(data, a, b)
    if simple is not None:
        return tag, float(simple), False, PLUGIN_NONE
    if tensor is not None:
        return tag, tensor, True, plugin
    return None


def plugin_flag(data: bytes, pos: int, end: int) -> int:
    """SummaryMetadata -> PLUGIN_SCALARS when its plugin_data names 'scalars'."""
    for number, wire, a, b in fields(data, pos, end):
        if (number, wire) == (1, 2):
            for pn, pw, pa, pb in fields(data, a, b):
                if (pn, pw) == (1, 2):
                    return PLUGIN_SCALARS if data[pa:pb] == SCALARS else PLUGIN_OTHER
    return PLUGIN_OTHER


def tensor_scalar(data: bytes, pos: int, end: int) -> float | None:
    """A one-element TensorProto of a numeric dtype as a float; None for anything else."""
    found = _tensor_value(data, pos, end)
    return None if found is None else found[0]


def _tensor_value(data: bytes, pos: int, end: int) -> tuple[float, int, int] | None:
    """(value, start, end of its bytes when they are a plain float/double) of a 1-element
    tensor; start is -1 when the value is not at a fixed place (varints, ints)."""
    parts = list(fields(data, pos, end))
    dtype = next((varint(data, a)[0] for n, w, a, _ in parts if (n, w) == (1, 0)), 0)
    if dtype not in DTYPES:
        return None
    fmt, repeated = DTYPES[dtype]
    numel, spans = 1, []
    for number, wire, a, b in parts:
        if (number, wire) == (2, 2):
            numel = _numel(data, a, b)
        elif (number, wire) == (4, 2) or number == repeated:
            spans.append((number, wire, a, b))
    if numel != 1 or len(spans) != 1:
        return None
    number, wire, a, b = spans[0]
    if number == 4 or (fmt in ("<f4", "<f8") and wire != 0):
        values = from_bits(data[a:b], dtype)
        fixed = fmt in ("<f4", "<f8")
        return (float(values[0]), a if fixed else -1, b) if values.size == 1 else None
    ints = [varint(data, a)[0]] if wire == 0 else _packed(data, a, b) if wire == 2 else []
    if len(ints) != 1:
        return None
    if fmt in ("<f2", "bf16"):
        bits = np.asarray([ints[0] & 0xFFFF], dtype="<u2").tobytes()
        return float(from_bits(bits, dtype)[0]), -1, -1
    width = 32 if fmt == "<i4" else 64
    value = ints[0] - (1 << 64) if ints[0] >= 1 << (width - 1) else ints[0]
    return float(value), -1, -1


def _numel(data: bytes, pos: int, end: int) -> int:
    numel = 1
    for number, wire, a, b in fields(data, pos, end):
        if (number, wire) == (2, 2):  # TensorShapeProto.dim
            for dn, dw, da, _ in fields(data, a, b):
                if (dn, dw) == (1, 0):
                    numel *= varint(data, da)[0]
    return numel


def _packed(data: bytes, pos: int, end: int) -> list[int]:
    out = []
    while pos < end:
        value, pos = varint(data, pos)
        out.append(value)
    return out


def from_bits(raw: bytes, dtype: int) -> np.ndarray:
    fmt = DTYPES[dtype][0]
    if fmt == "bf16":
        if len(raw) % 2:
            raise Malformed("bfloat16 content is not a whole number of elements")
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    if len(raw) % np.dtype(fmt).itemsize:
        raise Malformed("tensor content is not a whole number of elements")
    return np.frombuffer(raw, dtype=fmt).astype(np.float64)


# ----- template layouts ---------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Where the per-event fields of a template record lie; all other bytes are the tag's.

    Records of the same length whose other bytes equal the template's, and whose step
    varint has the same byte count, decode exactly like the template.
    """

    wall: int  # offset of the 8 wall_time bytes, -1 when absent (zero)
    step: tuple[int, int]  # (offset, byte count) of the step varint; (-1, 0) when absent
    value: tuple[int, int]  # (offset, 4 or 8 bytes) of the value; (-1, 0): nothing to keep
    tag: str
    tensor: bool
    plugin: int

    def varying(self) -> list[int]:
        """Byte offsets that may differ from the template's."""
        out = list(range(self.wall, self.wall + 8)) if self.wall >= 0 else []
        out += list(range(self.step[0], self.step[0] + self.step[1]))
        return out + list(range(self.value[0], self.value[0] + self.value[1]))


def layout(data: bytes) -> Layout | None:
    """The layout of a record with one fixed-width scalar (or with nothing to keep); None
    when the record is not of that shape (several values, varint or int tensors...) or does
    not parse: the other tiers then deal with it."""
    try:
        return _event_layout(data)
    except Malformed:
        return None


def _event_layout(data: bytes) -> Layout | None:
    top = list(fields(data, 0, len(data)))
    wall = next((a for n, w, a, _ in top if (n, w) == (1, 1)), -1)
    step = next(((a, b - a) for n, w, a, b in top if (n, w) == (2, 0)), (-1, 0))
    summaries = [(a, b) for n, w, a, b in top if (n, w) == (5, 2)]
    others = [n for n, _, _, _ in top if n not in _SCALAR_EVENT_FIELDS]
    if len(top) != len(others) + len(summaries) + (wall >= 0) + (step[1] > 0):
        return None  # a repeated or mistyped field
    if not summaries:  # file_version, graph, session_log...: nothing to keep
        return Layout(wall, step, (-1, 0), "", False, PLUGIN_NONE)
    if others or len(summaries) > 1:
        return None
    values = list(fields(data, *summaries[0]))
    if len(values) != 1 or values[0][:2] != (1, 2):
        return None
    return _value_layout(data, values[0][2], values[0][3], wall, step)


def _value_layout(
    data: bytes, pos: int, end: int, wall: int, step: tuple[int, int]
) -> Layout | None:
    parts = list(fields(data, pos, end))
    numbers = [n for n, _, _, _ in parts]
    tag = next((data[a:b] for n, w, a, b in parts if (n, w) == (1, 2)), b"")
    meta = next(((a, b) for n, w, a, b in parts if (n, w) == (9, 2)), None)
    plugin = plugin_flag(data, *meta) if meta else PLUGIN_NONE
    text = tag.decode("utf-8", errors="replace")
    if len(set(numbers)) != len(numbers):
        return None
    simple = next((a for n, w, a, _ in parts if (n, w) == (2, 5)), -1)
    if simple >= 0:
        return Layout(wall, step, (simple, 4), text, False, PLUGIN_NONE)
    tensor = next(((a, b) for n, w, a, b in parts if (n, w) == (8, 2)), None)
    if tensor is not None:
        found = _tensor_value(data, *tensor)
        if found is not None and found[1] >= 0:
            return Layout(wall, step, (found[1], found[2] - found[1]), text, True, plugin)
        return Layout(wall, step, (-1, 0), text, True, plugin) if plugin == PLUGIN_OTHER else None
    if _NON_SCALAR_VALUE_FIELDS & set(numbers):
        return Layout(wall, step, (-1, 0), text, False, PLUGIN_NONE)
    return None
