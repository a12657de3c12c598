"""The run store: one DuckDB file per analysis, read and written by every stage."""

from forensics.store.db import Store, open_store
from forensics.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Store", "open_store"]
