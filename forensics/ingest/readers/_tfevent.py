"""Decode the scalar values of framed TensorBoard records, in three tiers.

1. Templates. Scalar events from one writer are byte-for-byte alike: records of one length
   and one tag differ only in wall_time, the step varint and the value. Per record length,
   the first record is decoded as a template (`_tfproto.layout`) and every record whose other
   bytes equal it is decoded by slicing fixed columns; its data CRC is the template's
   corrected for the differing bytes only.
2. Columns. What no template covers is parsed field by field over arrays of offsets, for the
   layouts real writers produce (one value per summary; legacy simple_value; float/double
   scalar tensors with or without metadata). Data CRCs are checked per record length.
3. Records. The rest (several values per summary, unusual field order, half/int tensors)
   goes through the per-record wire decoder `_tfproto.parse_event`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import InputError
from forensics.ingest.readers import _tfproto as proto
from forensics.ingest.readers._tfrecord import (
    HEADER,
    Frames,
    bad_data_crcs,
    bytes_equal,
    crc_raw,
    f32,
    f64,
    mask,
    rows_at,
    shift_tables,
    u64,
    varints,
)
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

_BATCH = 1 << 17  # records decoded per batch: temporaries small enough to be reused
_MIN_GROUP = 64  # records of one length below which no template is tried
_MIN_MATCH = 16  # a template matching fewer records than this is weak
_MAX_WEAK = 4  # weak templates (or undecodable first rows) that end the search in a batch
_MAX_TEMPLATES = 32  # per batch of one record length
_MAX_TEMPLATE_LEN = 1024
_NON_SUMMARY = (0x1A, 0x22, 0x32, 0x3A, 0x42, 0x4A)  # Event's other oneof members
_NON_SCALAR_VALUES = (0x1A, 0x22, 0x2A, 0x32)  # histo (old), image, histo, audio
NONE, SCALARS, OTHER = proto.PLUGIN_NONE, proto.PLUGIN_SCALARS, proto.PLUGIN_OTHER


@dataclass
class Rows:
    """One row per scalar value, in file order; `tag` indexes `names`."""

    step: np.ndarray
    wall: np.ndarray
    value: np.ndarray
    tag: np.ndarray
    names: list[str]


@dataclass
class _Out:
    """One slot per record, filled in place by the tiers (no concatenation, no re-sorting:
    fresh memory is slow to fault in). `tag` -1 marks a record without a scalar; the extra
    values of records holding several go to `more`."""

    step: np.ndarray
    wall: np.ndarray
    value: np.ndarray
    tag: np.ndarray
    tensor: np.ndarray
    plugin: np.ndarray
    more: list[tuple[int, int, float, float, int, bool, int]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> _Out:
        return cls(
            step=np.empty(n, dtype=np.int64),
            wall=np.empty(n, dtype=np.float64),
            value=np.empty(n, dtype=np.float64),
            tag=np.full(n, -1, dtype=np.int32),
            tensor=np.zeros(n, dtype=np.bool_),
            plugin=np.zeros(n, dtype=np.int8),
        )

    def tag_id(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
        return self.index[name]

    def put(self, records: np.ndarray, **cols: np.ndarray | float | int | bool) -> None:
        for key, values in cols.items():
            getattr(self, key)[records] = values


def decode(buf: np.ndarray, frames: Frames, path: Path) -> tuple[Rows, list[str]]:
    """All scalar values of the framed records, and warnings about values left out.

    Raises InputError at the first record (by offset) whose data CRC does not match.
    """
    out = _Out.empty(frames.starts.size)
    rest, bad = _decode_templates(buf, frames, out)
    bad += bad_data_crcs(buf, frames.starts[rest], frames.lengths[rest])
    if bad:
        raise InputError(
            path,
            f"record at byte offset {min(bad)}: data checksum mismatch",
            expected="an intact TensorBoard event file; this one is corrupt",
        )
    slow = [
        _decode_columns(buf, frames, rest[lo : lo + _BATCH], out)
        for lo in range(0, rest.size, _BATCH)
    ]
    _decode_records(buf, frames, np.concatenate([rest[:0], *slow]), out, path)
    return _merge(out, path)


# ----- tier 1: templates --------------------------------------------------------------------
def _decode_templates(buf: np.ndarray, frames: Frames, out: _Out) -> tuple[np.ndarray, list[int]]:
    """Decode records that match a template; return the others and CRC-mismatch offsets."""
    lengths = frames.lengths
    if lengths.size == 0:
        return lengths, []
    keys = lengths.astype(np.uint16) if lengths.max() < 1 << 16 else lengths
    order = np.argsort(keys, kind="stable")  # a radix sort for uint16
    groups = np.split(order, np.flatnonzero(np.diff(keys[order])) + 1)
    left, bad = [lengths[:0]], []
    for group in groups:
        length = int(lengths[group[0]])
        if group.size < _MIN_GROUP or length > _MAX_TEMPLATE_LEN:
            left.append(group)
            continue
        for lo in range(0, group.size, _BATCH):
            idx = group[lo : lo + _BATCH]
            rest, mismatched = _match(buf, frames.starts[idx] + HEADER, length, idx, out)
            left.append(rest)
            bad.extend(mismatched)
    return np.sort(np.concatenate(left)), bad


def _match(
    buf: np.ndarray, data: np.ndarray, length: int, records: np.ndarray, out: _Out
) -> tuple[np.ndarray, list[int]]:
    """Peel templates off records of one length: (records left, offsets with a bad CRC).

    The first remaining row is the next template; rows that match it are decoded and
    removed. A few templates that match almost nothing end the search (irregular records).
    """
    width = (length + 4 + 7) // 8 * 8  # the data, its CRC, padding to whole words
    block = rows_at(buf, data, width)
    idx = np.arange(records.size)
    left, bad, weak = [idx[:0]], [], 0
    for _ in range(_MAX_TEMPLATES):
        if idx.size == 0 or weak >= _MAX_WEAK:
            break
        lay = proto.layout(bytes(block[0, :length]))
        if lay is None:
            left.append(idx[:1])
            block, idx, weak = block[1:], idx[1:], weak + 1
            continue
        same = _same_as(block, lay, length)
        hits = block if same.all() else block[same]
        crc_ok = _template_crcs(hits, lay, length)
        bad.extend((data[idx[same][~crc_ok]] - HEADER).tolist())
        _emit(hits if crc_ok.all() else hits[crc_ok], lay, records[idx[same][crc_ok]], out)
        weak += int(hits.shape[0] < _MIN_MATCH)
        block, idx = block[~same], idx[~same]
    return records[np.concatenate([idx, *left])], bad


def _same_as(block: np.ndarray, lay: proto.Layout, length: int) -> np.ndarray:
    """Rows equal to row 0 (the template) outside its varying bytes, with as long a step."""
    keep = np.zeros(block.shape[1], dtype=np.uint8)
    keep[:length] = 0xFF
    keep[lay.varying()] = 0
    words = block.view("<u8")
    same = ~((words ^ words[0]) & keep.view("<u8")).any(axis=1)
    offset, size = lay.step
    for i in range(size):  # continuation bits: set on all but the last byte
        more = block[:, offset + i] >= 0x80
        same &= more if i < size - 1 else ~more
    return same


def _template_crcs(hits: np.ndarray, lay: proto.Layout, length: int) -> np.ndarray:
    """Data CRC check of rows matching row 0, from the bytes in which they differ from it."""
    tables = shift_tables(_MAX_TEMPLATE_LEN)
    acc = np.full(hits.shape[0], crc_raw(bytes(hits[0, :length])), dtype=np.uint32)
    for j in lay.varying():
        acc ^= tables[length - j][hits[:, j] ^ hits[0, j]]
    stored = np.ascontiguousarray(hits[:, length : length + 4]).view("<u4").ravel()
    return mask(acc) == stored


def _emit(hits: np.ndarray, lay: proto.Layout, records: np.ndarray, out: _Out) -> None:
    """Slice wall time, step and value out of the matched rows."""
    offset, size = lay.value
    if size == 0 or hits.shape[0] == 0:
        return  # an event with nothing to keep (file_version, histogram...)
    n = hits.shape[0]
    value = np.ascontiguousarray(hits[:, offset : offset + size]).view(f"<f{size}").ravel()
    wall = np.zeros(n)
    if lay.wall >= 0:
        wall = np.ascontiguousarray(hits[:, lay.wall : lay.wall + 8]).view("<f8").ravel()
    step = np.zeros(n, dtype=np.uint64)
    for i in range(lay.step[1]):
        step |= (hits[:, lay.step[0] + i] & 0x7F).astype(np.uint64) << np.uint64(7 * i)
    out.put(records, step=step.view(np.int64), wall=wall, value=value, tag=out.tag_id(lay.tag))
    if lay.tensor:  # the zero defaults are left unwritten: untouched pages cost nothing
        out.put(records, tensor=True, plugin=lay.plugin)


# ----- tier 2: columns ----------------------------------------------------------------------
def _decode_columns(buf: np.ndarray, frames: Frames, records: np.ndarray, out: _Out) -> np.ndarray:
    """Decode the records in a regular layout; return those that need the record decoder."""
    start = frames.starts[records] + HEADER
    end = start + frames.lengths[records]
    wall, step, pos, ok = _event_header(buf, start, end)
    other = ok & ((pos == end) | np.isin(buf[pos], _NON_SUMMARY))
    pos, ok = _enter(buf, pos, end, 0x2A, ok & ~other)  # Event.summary fills the rest
    pos, ok = _enter(buf, pos, end, 0x0A, ok)  # ... and holds exactly one Value
    tag_len, k = varints(buf, pos + 1, 2)
    tag_start = pos + 1 + k
    tag_end = tag_start + tag_len.astype(np.int64)
    ok &= (buf[pos] == 0x0A) & (k > 0) & (tag_end < end)
    rec = np.flatnonzero(ok)
    value, kind, plugin, slow = _decode_values(buf, tag_end[rec], end[rec])
    keep = kind >= 0
    kept = rec[keep]
    out.put(
        records[kept],
        step=step[kept],
        wall=wall[kept],
        value=value[keep],
        tag=_tag_ids(buf, tag_start[kept], tag_len[kept].astype(np.int64), out),
        tensor=kind[keep] == 1,
        plugin=plugin[keep],
    )
    return records[np.union1d(np.flatnonzero(~ok & ~other), rec[slow])]


def _event_header(
    buf: np.ndarray, pos: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Event.wall_time and Event.step (both optional: proto3 omits zeros), and what follows."""
    has_wall = (buf[pos] == 0x09) & (pos + 9 <= end)
    wall = np.where(has_wall, f64(buf, pos + 1), 0.0)
    pos = pos + 9 * has_wall
    has_step = (pos < end) & (buf[pos] == 0x10)
    step, k = varints(buf, pos + 1)
    pos = pos + np.where(has_step, 1 + k, 0)
    ok = ~has_step | (k > 0)
    return wall, np.where(has_step, step.view(np.int64), 0), pos, ok & (pos <= end)


def _enter(
    buf: np.ndarray, pos: np.ndarray, end: np.ndarray, key: int, ok: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Step into a length-delimited field `key` that must fill the rest of its parent."""
    size, k = varints(buf, pos + 1, 5)
    inner = pos + 1 + k
    ok = ok & (buf[pos] == key) & (k > 0) & (inner + size.astype(np.int64) == end)
    return np.where(ok, inner, pos), ok


def _decode_values(
    buf: np.ndarray, pos: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What follows a Value's tag: (value, kind 0 simple / 1 tensor / -1 none, plugin, slow)."""
    first = buf[pos]
    value = np.zeros(pos.size, dtype=np.float64)
    kind = np.full(pos.size, -1, dtype=np.int8)
    plugin = np.zeros(pos.size, dtype=np.int8)
    simple = (first == 0x15) & (pos + 5 <= end)
    value[simple] = f32(buf, pos[simple] + 1)
    kind[simple] = 0
    tens = np.flatnonzero(first == 0x42)
    t_value, t_plugin, t_ok = _decode_tensors(buf, pos[tens], end[tens])
    value[tens[t_ok]] = t_value[t_ok]
    kind[tens[t_ok]] = 1
    plugin[tens] = t_plugin
    slow = ~simple & ~np.isin(first, _NON_SCALAR_VALUES)
    # A tensor that is not a float scalar is skipped here when its metadata names another
    # plugin (text, histograms, images); otherwise the record decoder looks at it.
    slow[tens] = ~t_ok & (t_plugin != OTHER)
    return value, kind, plugin, slow


def _decode_tensors(
    buf: np.ndarray, pos: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Value.tensor as a float/double scalar: (value, plugin flag, decoded)."""
    size, k = varints(buf, pos + 1, 3)
    ts = pos + 1 + k
    te = ts + size.astype(np.int64)
    ok = (k > 0) & (te <= end) & (buf[ts] == 0x08)
    dtype = buf[ts + 1]
    q = ts + 2
    q = q + 2 * ((buf[q] == 0x12) & (buf[q + 1] == 0x00))  # an empty shape: a scalar
    head, width = buf[q], buf[q + 1]
    layouts = (  # (matches, offset of the value, reader)
        ((dtype == 1) & np.isin(head, (0x2A, 0x22)) & (width == 4) & (q + 6 == te), 2, f32),
        ((dtype == 1) & (head == 0x2D) & (q + 5 == te), 1, f32),
        ((dtype == 2) & np.isin(head, (0x32, 0x22)) & (width == 8) & (q + 10 == te), 2, f64),
        ((dtype == 2) & (head == 0x31) & (q + 9 == te), 1, f64),
    )
    value = np.zeros(pos.size, dtype=np.float64)
    matched = np.zeros(pos.size, dtype=bool)
    for hits, offset, reader in layouts:
        hits &= ok
        value[hits] = reader(buf, q[hits] + offset)
        matched |= hits
    plugin, meta_ok = _plugin_flags(buf, np.where(ok, te, end), end)
    return value, plugin, matched & meta_ok


def _plugin_flags(
    buf: np.ndarray, pos: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Value.metadata (the last field) at `pos`: which plugin it names, and whether it parsed."""
    absent = pos == end
    meta, ok = _enter(buf, pos, end, 0x4A, ~absent)
    data_len, k1 = varints(buf, meta + 1, 3)
    data = meta + 1 + k1
    ok &= (buf[meta] == 0x0A) & (k1 > 0) & (data + data_len.astype(np.int64) <= end)
    name_len, k2 = varints(buf, data + 1, 2)
    ok &= (buf[data] == 0x0A) & (k2 > 0) & (data + 1 + k2 + name_len.astype(np.int64) <= end)
    named = ok & (name_len == len(proto.SCALARS)) & bytes_equal(buf, data + 1 + k2, proto.SCALARS)
    flag = np.where(named, SCALARS, np.where(ok, OTHER, NONE))
    return flag.astype(np.int8), absent | ok


def _tag_ids(buf: np.ndarray, start: np.ndarray, length: np.ndarray, out: _Out) -> np.ndarray:
    """A tag id per row; rows with identical tag bytes share it (checked exactly)."""
    if start.size == 0:
        return np.zeros(0, dtype=np.int64)
    words = _tag_words(buf, start, length)
    firsts, group = _group_keys(_mix(words))
    if not (words == words[firsts[group]]).all():  # a 64-bit hash collision: group exactly
        _, firsts, group = np.unique(words, axis=0, return_index=True, return_inverse=True)
        group = group.ravel()
    ids = [out.tag_id(_text(buf, int(start[i]), int(length[i]))) for i in firsts]
    return np.asarray(ids, dtype=np.int64)[group]


def _tag_words(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Each tag as a row of uint64 words (bytes past its end zeroed), its length in column 0."""
    n_words = (int(length.max()) + 7) // 8
    words = np.empty((start.size, n_words + 1), dtype=np.uint64)
    words[:, 0] = length.astype(np.uint64)
    for j in range(n_words):
        left = np.clip(length - 8 * j, 0, 8).astype(np.uint64)
        keep = np.where(left >= 8, ~np.uint64(0), (np.uint64(1) << (left * 8)) - np.uint64(1))
        words[:, j + 1] = u64(buf, np.where(left > 0, start + 8 * j, 0)) & keep
    return words


def _mix(words: np.ndarray) -> np.ndarray:
    key = np.zeros(words.shape[0], dtype=np.uint64)
    for col in words.T:
        key ^= col
        key *= np.uint64(0xBF58476D1CE4E5B9)
        key ^= key >> np.uint64(31)
    return key


def _group_keys(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct key, group of each row), groups in order of appearance.

    A log has few distinct tags, so groups are peeled off one at a time (no sort); past 16
    the rest is grouped by np.unique.
    """
    group = np.zeros(key.size, dtype=np.int64)
    firsts: list[int] = []
    todo = np.arange(key.size)
    while todo.size and len(firsts) < 16:
        same = key[todo] == key[todo[0]]
        group[todo[same]] = len(firsts)
        firsts.append(int(todo[0]))
        todo = todo[~same]
    if todo.size:
        _, first, inverse = np.unique(key[todo], return_index=True, return_inverse=True)
        group[todo] = len(firsts) + inverse
        firsts.extend(todo[first].tolist())
    order = np.argsort(firsts)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return np.asarray(firsts, dtype=np.int64)[order], rank[group]


def _text(buf: np.ndarray, start: int, length: int) -> str:
    return bytes(buf[start : start + length]).decode("utf-8", errors="replace")


# ----- tier 3: one record at a time ---------------------------------------------------------
def _decode_records(
    buf: np.ndarray, frames: Frames, records: np.ndarray, out: _Out, path: Path
) -> None:
    for i in records.tolist():
        start = int(frames.starts[i]) + HEADER
        data = bytes(buf[start : start + int(frames.lengths[i])])
        try:
            wall, step, values = proto.parse_event(data)
        except proto.Malformed as exc:
            raise InputError(
                path,
                f"record at byte offset {int(frames.starts[i])}: {exc}",
                expected="a TensorBoard Event protobuf",
            ) from exc
        for k, (tag, value, tensor, plugin) in enumerate(values):
            tag_id = out.tag_id(tag)
            if k:
                out.more.append((i, step, wall, value, tag_id, tensor, plugin))
                continue
            slot = np.array([i])
            out.put(
                slot, step=step, wall=wall, value=value, tag=tag_id, tensor=tensor, plugin=plugin
            )


# ----- merging ------------------------------------------------------------------------------
def _merge(out: _Out, path: Path) -> tuple[Rows, list[str]]:
    """File order; simple values, and tensors of tags whose first metadata names 'scalars'."""
    cols = _with_more(out)
    step, wall, value, tag, tensor, plugin = cols
    keep = tag >= 0
    warnings: list[str] = []
    if tensor.any():
        tag_plugin = np.zeros(len(out.names) + 1, dtype=np.int8)  # [-1]: no tag
        with_meta = np.flatnonzero(keep & (plugin != NONE))
        tags_seen, first = np.unique(tag[with_meta], return_index=True)
        tag_plugin[tags_seen] = plugin[with_meta[first]]
        unresolved = keep & tensor & (tag_plugin[tag] == NONE)
        warnings = _unresolved(out.names, tag[unresolved], path)
        keep &= ~tensor | (tag_plugin[tag] == SCALARS)
    step, wall, value, tag = _kept(keep, step, wall, value, tag)
    return Rows(step=step, wall=wall, value=value, tag=tag, names=out.names), warnings


def _kept(keep: np.ndarray, *cols: np.ndarray) -> list[np.ndarray]:
    """The kept rows: views when they are one contiguous run (records without a scalar are
    usually just the file_version event at the start), else copies."""
    where = np.flatnonzero(keep)
    if where.size and where[-1] - where[0] + 1 == where.size:
        return [c[where[0] : where[-1] + 1] for c in cols]
    return [c[keep] for c in cols]


def _with_more(out: _Out) -> tuple[np.ndarray, ...]:
    """The slot columns, with the extra values of multi-value records slotted in after their
    record's first (a stable sort by record, needed only when there are any)."""
    cols = (out.step, out.wall, out.value, out.tag, out.tensor, out.plugin)
    if not out.more:
        return cols
    record = np.concatenate([np.arange(out.step.size), [r[0] for r in out.more]])
    order = np.argsort(record, kind="stable")
    extra = list(zip(*(r[1:] for r in out.more), strict=True))
    return tuple(
        np.concatenate([c, np.asarray(e, dtype=c.dtype)])[order]
        for c, e in zip(cols, extra, strict=True)
    )


def _unresolved(names: list[str], tags: np.ndarray, path: Path) -> list[str]:
    if tags.size == 0:
        return []
    which = ", ".join(names[t] for t in np.unique(tags)[:5])
    return [
        f"{path}: {tags.size} tensor values of tags with no plugin metadata skipped ({which}); "
        "scalars need the 'scalars' plugin"
    ]
