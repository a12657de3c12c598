"""Ingest stage: every log format into the run store."""

from forensics.ingest.pipeline import RunSummary, SourceSummary, ingest

__all__ = ["RunSummary", "SourceSummary", "ingest"]
