"""Ingest stage: every log format into the run store.

`ingest` and its summaries load on first use, so that `forensics formats` (which needs only
the reader registry, forensics.ingest.base) does not pay for the pipeline.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forensics.ingest.pipeline import RunSummary, SourceSummary, ingest

__all__ = ["RunSummary", "SourceSummary", "ingest"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("forensics.ingest.pipeline"), name)
    raise AttributeError(f"module 'forensics.ingest' has no attribute {name!r}")
