"""Ingest stage: every log format into the run store.

`ingest` and its summaries load on first use, so that `forensics formats` (which needs only
the reader registry, forensics.ingest.base) does not pay for the pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.lazy import lazy_exports

if TYPE_CHECKING:
    from forensics.ingest.pipeline import RunSummary, SourceSummary, ingest

__all__ = ["RunSummary", "SourceSummary", "ingest"]

__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "forensics.ingest.pipeline"))
