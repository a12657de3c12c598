"""TFRecord framing and CRC-32C for TensorBoard event files, vectorised with numpy.

A record is: u64 data length, u32 masked CRC-32C of those 8 bytes, the data, u32 masked
CRC-32C of the data. The file is held as one numpy byte buffer followed by PAD zero bytes,
so fixed-width gathers near EOF stay in bounds; every function here works on arrays of byte
offsets, one element per record, so that a million records cost a few numpy calls rather
than a million Python iterations.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import InputError
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

PAD = 64
HEADER = 12  # u64 data length + u32 masked CRC of it
_CHUNK = 1 << 22  # bytes scanned per step when looking for record starts
_CRC_ROWS = 1 << 16  # records per vectorised CRC batch
_SMALL = 1 << 16  # record lengths below this have their length CRC looked up


# ----- CRC-32C (Castagnoli), as TFRecord masks it ------------------------------------------
def _crc_list() -> list[int]:
    table: list[int] = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_LIST = _crc_list()  # plain ints: importing a reader must not load numpy


@lru_cache(maxsize=1)
def crc_table() -> np.ndarray:
    return np.asarray(_CRC_LIST, dtype=np.uint32)


def mask(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masking of a CRC (rotate right by 15, add a constant)."""
    return ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)


def masked_crc(rows: np.ndarray) -> np.ndarray:
    """Masked CRC-32C of each row of an (n, w) uint8 matrix: one pass per column."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    table = crc_table()
    for col in np.ascontiguousarray(rows.T):
        crc = table[(crc ^ col) & 0xFF] ^ (crc >> 8)
    return mask(crc ^ np.uint32(0xFFFFFFFF))


def crc_raw(data: bytes) -> int:
    """Unmasked CRC-32C of one byte string (plain Python: no per-call numpy overhead)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_LIST[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc_py(data: bytes) -> int:
    crc = crc_raw(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@lru_cache(maxsize=4)
def shift_tables(depth: int) -> np.ndarray:
    """Row d, column b: the CRC-32C contribution of byte b followed by d-1 zero bytes.

    CRC is linear over XOR, so records that differ from a template only in a few bytes have
    CRC(record) = CRC(template) ^ XOR over those bytes j of row[len - j][record[j] ^ t[j]].
    """
    out = np.zeros((depth + 1, 256), dtype=np.uint32)
    table = crc_table()
    state = table.copy()
    for d in range(1, depth + 1):
        out[d] = state
        state = table[state & 0xFF] ^ (state >> 8)
    return out


@lru_cache(maxsize=1)
def _length_crcs() -> np.ndarray:
    """Masked CRC of the 8-byte little-endian encoding of every length below _SMALL."""
    lengths = np.arange(_SMALL, dtype="<u8")
    return masked_crc(lengths.view(np.uint8).reshape(-1, 8))


# ----- fixed-width gathers ------------------------------------------------------------------
def _at_every_byte(buf: np.ndarray, dtype: str) -> np.ndarray:
    """`buf` seen as one `dtype` item starting at every byte offset (stride 1, no copy).

    Fancy-indexing this copies one whole item per offset, several times faster than
    indexing a (n, width) sliding window byte by byte.
    """
    item = np.dtype(dtype)
    count = buf.size - item.itemsize + 1
    return np.ndarray(shape=(count,), dtype=item, buffer=buf, strides=(1,))


def rows_at(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The `width` bytes at each offset as an (n, width) matrix."""
    return _at_every_byte(buf, f"V{width}")[pos].view(np.uint8).reshape(-1, width)


def u32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _at_every_byte(buf, "<u4")[pos]


def u64(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _at_every_byte(buf, "<u8")[pos]


def f32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _at_every_byte(buf, "<f4")[pos].astype(np.float64)


def f64(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _at_every_byte(buf, "<f8")[pos]


def varints(buf: np.ndarray, pos: np.ndarray, width: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints at each offset: (value, bytes used; 0 where none ends within `width`).

    Byte by byte over the rows still going, so the common one-byte case costs one pass.
    """
    byte = buf[pos]
    value = (byte & 0x7F).astype(np.uint64)
    nbytes = np.ones(pos.size, dtype=np.int64)
    going = np.flatnonzero(byte >= 0x80)
    for i in range(1, width):
        if going.size == 0:
            break
        byte = buf[pos[going] + i]
        value[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        nbytes[going] += 1
        going = going[byte >= 0x80]
    nbytes[going] = 0
    return value, nbytes


def bytes_equal(buf: np.ndarray, pos: np.ndarray, want: bytes) -> np.ndarray:
    return (rows_at(buf, pos, len(want)) == np.frombuffer(want, dtype=np.uint8)).all(axis=1)


# ----- framing ------------------------------------------------------------------------------
@dataclass
class Frames:
    starts: np.ndarray  # byte offset of each complete record's header
    lengths: np.ndarray  # its data length
    torn_at: int | None = None  # byte offset of a torn last record


def load(path: Path) -> tuple[np.ndarray, int]:
    """The file's bytes in one read, followed by PAD zero bytes."""
    size = path.stat().st_size
    buf = np.zeros(size + PAD, dtype=np.uint8)
    with open(path, "rb") as fh:
        got = fh.readinto(buf.data[:size])
    if got != size:
        raise InputError(path, f"read {got} of {size} bytes", expected="a file not being written")
    return buf, size


def frame(buf: np.ndarray, size: int, path: Path) -> Frames:
    """Split the file into records (length CRCs checked); report a torn tail.

    Runs of records found by the vectorised candidate scan are taken whole; a record the scan
    missed (its Event does not start with wall_time) is stepped over by `_step`.
    """
    cand = _candidates(buf, size)
    nxt = cand + 16 + u64(buf, cand).astype(np.int64)
    breaks = np.flatnonzero(nxt[:-1] != cand[1:])
    runs: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    pos, torn_at = 0, None
    while pos < size:
        i = int(np.searchsorted(cand, pos))
        if i < cand.size and cand[i] == pos:
            k = int(np.searchsorted(breaks, i))
            last = int(breaks[k]) if k < breaks.size else cand.size - 1
            runs.append(cand[i : last + 1])
            pos = int(nxt[last])
            continue
        after = _step(buf, size, pos, path)
        if after is None:
            torn_at = pos
            break
        runs.append(np.array([pos], dtype=np.int64))
        pos = after
    starts = np.concatenate(runs)
    return Frames(starts, u64(buf, starts).astype(np.int64), torn_at)


def _candidates(buf: np.ndarray, size: int) -> np.ndarray:
    """Offsets whose data would begin with Event.wall_time (0x09) and whose length CRC holds.

    Scanned in chunks so that no file-sized temporary is allocated.
    """
    found = [np.zeros(0, dtype=np.int64)]
    scratch = np.empty(_CHUNK, dtype=bool)
    for lo in range(0, max(size - 16, 0), _CHUNK):
        hits = scratch[: min(_CHUNK, size - 16 - lo)]
        np.equal(buf[lo + HEADER : lo + HEADER + hits.size], 0x09, out=hits)
        cand = np.flatnonzero(hits) + lo
        cand = cand[u64(buf, cand) <= (size - 16 - cand).astype(np.uint64)]
        found.append(cand[_length_crc_ok(buf, cand)])
    return np.concatenate(found)


def _length_crc_ok(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    lengths = u64(buf, pos)
    stored = u32(buf, pos + 8)
    small = lengths < _SMALL
    ok = np.zeros(pos.size, dtype=bool)
    ok[small] = _length_crcs()[lengths[small]] == stored[small]
    big = np.flatnonzero(~small)
    ok[big] = masked_crc(rows_at(buf, pos[big], 8)) == stored[big]
    return ok


def _step(buf: np.ndarray, size: int, pos: int, path: Path) -> int | None:
    """The offset after the record at `pos`; None when it is torn (cut short by EOF)."""
    if size - pos < HEADER:
        return None
    (length,) = struct.unpack_from("<Q", buf.data, pos)
    (stored,) = struct.unpack_from("<I", buf.data, pos + 8)
    if masked_crc_py(bytes(buf[pos : pos + 8])) != stored:
        raise InputError(
            path,
            f"record at byte offset {pos}: length checksum mismatch",
            expected="a TFRecord-framed TensorBoard event file; this one is corrupt",
        )
    return None if pos + 16 + length > size else pos + 16 + length


def bad_data_crcs(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> list[int]:
    """Offsets of records whose data CRC does not match, vectorised per record length."""
    order = np.argsort(lengths, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(lengths[order])) + 1)
    bad: list[int] = []
    for group in groups:
        length = int(lengths[group[0]]) if group.size else 0
        for lo in range(0, group.size, _CRC_ROWS):
            idx = group[lo : lo + _CRC_ROWS]
            data = starts[idx] + HEADER
            crc = masked_crc(rows_at(buf, data, length) if length else np.zeros((idx.size, 0)))
            bad.extend(starts[idx[crc != u32(buf, data + length)]].tolist())
    return bad
