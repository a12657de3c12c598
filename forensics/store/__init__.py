"""The run store: one DuckDB file per analysis, read and written by every stage.

`Store` and `open_store` load DuckDB on first use, so that importing a light part of the
store (forensics.store.blocks, for the reader registry of `forensics formats`) does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.lazy import lazy_exports

if TYPE_CHECKING:
    from forensics.store.db import Store, open_store
    from forensics.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Store", "open_store"]
_DB, _SCHEMA = "forensics.store.db", "forensics.store.schema"
__getattr__ = lazy_exports(__name__, {"Store": _DB, "open_store": _DB, "SCHEMA_VERSION": _SCHEMA})
