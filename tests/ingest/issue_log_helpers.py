"""What the ingest stores for a log quoted in an issue: the one helper of the issue-format tests."""

from __future__ import annotations

import tempfile
from pathlib import Path

from forensics.ingest import ingest
from forensics.store import open_store


def stored(tmp_path: Path, text: str, name: str = "train.log") -> tuple[str, dict, list[str]]:
    """(format, {metric: {step: value}}, warnings) of `text` ingested from a file (in a
    folder of its own, so that a test may ingest several)."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / name
    path.write_text(text, encoding="utf-8")
    with open_store(folder / "t.duckdb") as store:
        (summary,) = ingest(store, [path])
        (source,) = summary.sources
        long = store.metrics_long(summary.run)
    out: dict[str, dict[int, float]] = {}
    for step, metric, value, _ in long.iter_rows():
        out.setdefault(metric, {})[step] = value
    return source.format, out, source.warnings
