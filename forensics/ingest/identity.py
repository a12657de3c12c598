"""What makes two sources the same source: their real path, and their content.

Re-ingest must be idempotent whatever the spelling of a path (relative or absolute, through
a symlinked folder, `./a/../a`): a source is stored under its real path (symlinks resolved),
so every spelling clears and replaces the same rows. A copy of a file under another name
(`metrics.jsonl` and `metrics (1).jsonl`, a run folder copied into itself) has another real
path but the same content: its fingerprint says so, and it is stored once.

The fingerprint is a SHA-256 of the content for files up to `_FULL_BYTES`; of bigger files
(checkpoints, token shards) of the size plus `_SAMPLES` evenly spaced 64 KiB windows
(first and last included), which tells apart any two real checkpoints or shards without
reading gigabytes. A folder source (an MLflow tree, a sharded safetensors checkpoint) is
fingerprinted by the names and fingerprints of its files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_FULL_BYTES = 256 << 20
_WINDOW = 64 << 10
_SAMPLES = 64
_MAX_FOLDER_FILES = 10_000


def real_path(path: Path) -> Path:
    """The path with every symlink and `..` resolved (the source's stored name)."""
    return path.resolve()


def fingerprint(path: Path) -> str:
    """A content fingerprint of a file or folder source (see the module docstring)."""
    digest = hashlib.sha256()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
        for f in files[:_MAX_FOLDER_FILES]:
            digest.update(f.relative_to(path).as_posix().encode("utf-8", "surrogateescape"))
            digest.update(_file_digest(f).encode())
        return "dir:" + digest.hexdigest()
    return _file_digest(path)


@contextmanager
def remembered() -> Iterator[None]:
    """Within this block each file is hashed once: discovery and ingest both ask for its
    fingerprint (a folder's copies, then each source's identity), and a 250 MB log takes
    ~0.2 s to hash. Scoped to one ingest, so a file rewritten later is read again."""
    global _MEMO
    outer, _MEMO = _MEMO, {} if _MEMO is None else _MEMO
    try:
        yield
    finally:
        _MEMO = outer


_MEMO: dict[tuple[str, int, int, int], str] | None = None


def _file_digest(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if _MEMO is not None and key in _MEMO:
        return _MEMO[key]
    digest = _digest_of(path, st.st_size)
    if _MEMO is not None:
        _MEMO[key] = digest
    return digest


def _digest_of(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        if size <= _FULL_BYTES:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
            return "sha256:" + digest.hexdigest()
        digest.update(str(size).encode())
        step = (size - _WINDOW) // (_SAMPLES - 1)
        for i in range(_SAMPLES):
            fh.seek(i * step)
            digest.update(fh.read(_WINDOW))
    return f"sampled-sha256:{size}:" + digest.hexdigest()
