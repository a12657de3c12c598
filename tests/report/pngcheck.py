"""Is a PNG a real picture? Decoded with Pillow when installed, else with zlib/struct."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    assert data[:8] == SIGNATURE, "not a PNG signature"
    out, i = [], 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        kind, body = data[i + 4 : i + 8], data[i + 8 : i + 8 + n]
        crc = struct.unpack(">I", data[i + 8 + n : i + 12 + n])[0]
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        out.append((kind, body))
        i += 12 + n
    return out


def size(path: Path) -> tuple[int, int]:
    """(width, height) from IHDR, after checking every chunk's CRC."""
    found = dict(chunks(path.read_bytes()))
    width, height = struct.unpack(">II", found[b"IHDR"][:8])
    return width, height


def content_spread(path: Path) -> float:
    """Standard deviation of grey levels (0 for a blank image)."""
    try:
        from PIL import Image, ImageStat
    except ImportError:
        return _spread_without_pillow(path)
    with Image.open(path) as img:
        img.load()
        return float(ImageStat.Stat(img.convert("L")).stddev[0])


def _spread_without_pillow(path: Path) -> float:
    """Proxy without unfiltering: spread of the decompressed (filtered) scanline bytes.

    A blank image filters to (almost) all zeros; a plot does not.
    """
    raw = zlib.decompress(b"".join(b for k, b in chunks(path.read_bytes()) if k == b"IDAT"))
    nonzero = sum(1 for b in raw[::97] if b)
    return 100.0 * nonzero / max(1, len(raw[::97]))
