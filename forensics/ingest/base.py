"""The one interface every log-format reader implements, and the registry that finds them.

A reader turns one file (or folder, for MLflow) into long-form rows: step, raw metric
name, value, wall time. Canonical names, run bookkeeping and the DB are not its business:
`forensics.ingest.pipeline` does those once for all formats.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from forensics.errors import UnknownFormatError
from forensics.lazy import lazy_module
from forensics.store.blocks import MetricBlock, block_to_long, blocks_from_long, long_schema

if TYPE_CHECKING:
    import duckdb
    import polars as pl
else:
    duckdb = lazy_module("duckdb")
    pl = lazy_module("polars")


def metric_schema() -> dict[str, Any]:
    """Schema of ReadResult.metrics: step, raw_name, value (NaN/+Inf/-Inf kept), wall_time
    (seconds since epoch or null). The long rows of forensics/store/blocks.py."""
    return long_schema()


def event_schema() -> dict[str, Any]:
    """Schema of ReadResult.events: what a log says that is not a number per step (DeepSpeed
    "OVERFLOW! ... reducing to X", a step counter that went backwards, a torn record)."""
    return {"step": pl.Int64, "kind": pl.Utf8, "detail": pl.Utf8}


HEAD_BYTES = 65536


class ReadResult:
    """What a reader found in one source: metric values, config, warnings, events.

    A reader gives its metric values either as long rows (`metrics`, metric_schema()) or as
    blocks (`blocks`: series side by side, see forensics/store/blocks.py). Each form is
    derived from the other on first use, so a wide log goes to the store without ever
    becoming 8M long rows, while tests and callers can still read `metrics`.
    `release()` frees what a reader staged in DuckDB; call it once the result is stored.
    """

    def __init__(
        self,
        metrics: pl.DataFrame | None = None,
        config: dict[str, Any] | None = None,
        warnings: list[str] | None = None,
        events: pl.DataFrame | None = None,
        *,
        blocks: list[MetricBlock] | None = None,
        release: Callable[[], None] | None = None,
    ) -> None:
        if (metrics is None) == (blocks is None):
            raise ValueError("give either long metric rows or metric blocks")
        self._long = _long_schema(metrics) if metrics is not None else None
        self._blocks = blocks
        self.config = config if config is not None else {}
        self.warnings = warnings if warnings is not None else []
        self._events = events  # None: no events (the empty frame is built on first use)
        self._release = release
        # rows a resume wrote over in this source (pipeline._drop_repeated_steps): long rows
        # plus `attempt`, the file segment each was logged in
        self.superseded: pl.DataFrame | None = None

    @property
    def events(self) -> pl.DataFrame:
        """Events (event_schema()); empty when the log said none."""
        if self._events is None:
            self._events = pl.DataFrame(schema=event_schema())
        return self._events

    @events.setter
    def events(self, frame: pl.DataFrame) -> None:
        self._events = frame

    @property
    def has_events(self) -> bool:
        """Are there events? Without building an empty frame (no polars for a plain log)."""
        return self._events is not None and self._events.height > 0

    @property
    def metrics(self) -> pl.DataFrame:
        """Long rows: step, raw_name, value (NaN/Inf kept), wall_time."""
        if self._long is None:
            assert self._blocks is not None
            parts = [block_to_long(b) for b in self._blocks]
            long = (
                pl.concat(parts, rechunk=False) if parts else pl.DataFrame(schema=metric_schema())
            )
            self._long = _long_schema(long)
        return self._long

    @metrics.setter
    def metrics(self, long: pl.DataFrame) -> None:
        self._long, self._blocks = _long_schema(long), None

    @property
    def blocks(self) -> list[MetricBlock]:
        """The values as blocks, one per set of series logged on the same rows."""
        if self._blocks is None:
            self._blocks = [b for b, _ in blocks_from_long(self.metrics, ["raw_name"])]
        return self._blocks

    def release(self) -> None:
        """Drop anything staged for this result (idempotent)."""
        if self._release is not None:
            release, self._release = self._release, None
            release()


def _long_schema(long: pl.DataFrame) -> pl.DataFrame:
    schema = metric_schema()
    missing = set(schema) - set(long.columns)
    if "wall_time" in missing:
        long = long.with_columns(pl.lit(None, pl.Float64).alias("wall_time"))
        missing.discard("wall_time")
    assert not missing, f"reader returned metrics without columns {missing}"
    return long.select([pl.col(c).cast(t) for c, t in schema.items()])


class Reader(ABC):
    """Subclass, set `name`, implement `sniff` and `read`, decorate with @register."""

    name: ClassVar[str]
    description: ClassVar[str]
    # Lower sniffs first: specific formats (Megatron golden JSON) before generic ones (JSONL).
    priority: ClassVar[int] = 50
    # False for logs whose numbers are printed text parsed back (a structured source wins
    # over such a log when both give a (step, metric): forensics/store/conflicts.py).
    structured: ClassVar[bool] = True

    @abstractmethod
    def sniff(self, path: Path, head: str) -> bool:
        """True when `path` is in this format; `head` is its first 64 KiB ('' for a folder)."""

    @abstractmethod
    def read(self, path: Path) -> ReadResult:
        """Read the whole source. Raise forensics.errors.InputError on malformed input;
        keep the good part of a truncated/torn file and say so in `warnings`."""

    def read_with(self, con: duckdb.DuckDBPyConnection, path: Path) -> ReadResult:
        """`read`, free to stage big tables on `con` (the store's connection) and return
        blocks that are relations on it. `con` must not be inside a transaction: a failed
        statement would abort it. Readers without such a path just `read`."""
        del con
        return self.read(path)


_REGISTRY: dict[str, Reader] = {}


def register(cls: type[Reader]) -> type[Reader]:
    _REGISTRY[cls.name] = cls()
    return cls


def readers() -> list[Reader]:
    """All readers, in sniffing order."""
    import forensics.ingest.readers  # noqa: F401  (populates the registry)

    return sorted(_REGISTRY.values(), key=lambda r: (r.priority, r.name))


def text_formats() -> frozenset[str]:
    """The readers whose numbers (and clock) are printed text parsed back: a structured
    source wins over them (store/conflicts.py), and their times carry no zone."""
    return frozenset(r.name for r in readers() if not r.structured)


def get_reader(name: str) -> Reader:
    names = [r.name for r in readers()]
    if name not in _REGISTRY:
        raise UnknownFormatError(f"--format {name}", names)
    return _REGISTRY[name]


def read_head(path: Path) -> str:
    if path.is_dir():
        return ""
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    # A UTF-8 byte-order mark (Windows editors, PowerShell's Out-File) is not content.
    return head.removeprefix(b"\xef\xbb\xbf").decode("utf-8", errors="replace")


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
