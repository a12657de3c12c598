"""The run store: one DuckDB file per analysis, read and written by every stage.

`Store` and `open_store` load DuckDB on first use, so that importing a light part of the
store (forensics.store.blocks, for the reader registry of `forensics formats`) does not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forensics.store.db import Store, open_store
    from forensics.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Store", "open_store"]
_FROM = {"Store": "db", "open_store": "db", "SCHEMA_VERSION": "schema"}


def __getattr__(name: str) -> Any:
    if name in _FROM:
        return getattr(importlib.import_module(f"forensics.store.{_FROM[name]}"), name)
    raise AttributeError(f"module 'forensics.store' has no attribute {name!r}")
