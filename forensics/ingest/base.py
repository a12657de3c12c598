"""The one interface every log-format reader implements, and the registry that finds them.

A reader turns one file (or folder, for MLflow) into long-form rows: step, raw metric
name, value, wall time. Canonical names, run bookkeeping and the DB are not its business:
`forensics.ingest.pipeline` does those once for all formats.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import polars as pl

from forensics.errors import UnknownFormatError

# Schema of ReadResult.metrics. value keeps NaN/+Inf/-Inf; wall_time is seconds since epoch or null.
METRIC_SCHEMA: dict[str, Any] = {
    "step": pl.Int64,
    "raw_name": pl.Utf8,
    "value": pl.Float64,
    "wall_time": pl.Float64,
}
# Schema of ReadResult.events: things a log says that are not a number per step
# (DeepSpeed "OVERFLOW! ... reducing to X", a step counter that went backwards, a torn record).
EVENT_SCHEMA: dict[str, Any] = {"step": pl.Int64, "kind": pl.Utf8, "detail": pl.Utf8}

HEAD_BYTES = 65536


@dataclass
class ReadResult:
    metrics: pl.DataFrame
    config: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    events: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=EVENT_SCHEMA))

    def __post_init__(self) -> None:
        missing = set(METRIC_SCHEMA) - set(self.metrics.columns)
        if "wall_time" in missing:
            self.metrics = self.metrics.with_columns(pl.lit(None, pl.Float64).alias("wall_time"))
            missing.discard("wall_time")
        assert not missing, f"reader returned metrics without columns {missing}"
        self.metrics = self.metrics.select([pl.col(c).cast(t) for c, t in METRIC_SCHEMA.items()])


class Reader(ABC):
    """Subclass, set `name`, implement `sniff` and `read`, decorate with @register."""

    name: ClassVar[str]
    description: ClassVar[str]
    # Lower sniffs first: specific formats (Megatron golden JSON) before generic ones (JSONL).
    priority: ClassVar[int] = 50

    @abstractmethod
    def sniff(self, path: Path, head: str) -> bool:
        """True when `path` is in this format; `head` is its first 64 KiB ('' for a folder)."""

    @abstractmethod
    def read(self, path: Path) -> ReadResult:
        """Read the whole source. Raise forensics.errors.InputError on malformed input;
        keep the good part of a truncated/torn file and say so in `warnings`."""


_REGISTRY: dict[str, Reader] = {}


def register(cls: type[Reader]) -> type[Reader]:
    _REGISTRY[cls.name] = cls()
    return cls


def readers() -> list[Reader]:
    """All readers, in sniffing order."""
    import forensics.ingest.readers  # noqa: F401  (populates the registry)

    return sorted(_REGISTRY.values(), key=lambda r: (r.priority, r.name))


def get_reader(name: str) -> Reader:
    names = [r.name for r in readers()]
    if name not in _REGISTRY:
        raise UnknownFormatError(f"--format {name}", names)
    return _REGISTRY[name]


def read_head(path: Path) -> str:
    if path.is_dir():
        return ""
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES).decode("utf-8", errors="replace")


def sniff_format(path: Path) -> Reader | None:
    head = read_head(path)
    for reader in readers():
        if reader.sniff(path, head):
            return reader
    return None


def detect_format(path: Path) -> Reader:
    reader = sniff_format(path)
    if reader is None:
        raise UnknownFormatError(path, [r.name for r in readers()])
    return reader
