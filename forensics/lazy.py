"""Heavy libraries bound at import, loaded on first use.

Why: `forensics formats` lists the readers (their name and description, class attributes),
and importing a reader module must not cost polars, DuckDB, numpy and pyarrow (~0.3-0.5 s
and ~100 MB) when nothing is read. A reader module binds its libraries with

    if TYPE_CHECKING:
        import polars as pl
    else:
        pl = lazy_module("polars")

so the type checker sees the real module and the first `pl.<attribute>` at run time
imports it. Nothing is put in `sys.modules` before that first use (libraries such as
DuckDB look there to decide what they may convert), and after it the proxy holds the
module's own attributes, so a lookup costs what a module attribute costs. A module-level
constant built from such a library (a polars schema) would load it at import: write it as
a function instead.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _LazyModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        # Only called for attributes not yet in the proxy's __dict__: the first use.
        module = importlib.import_module(self.__name__)
        self.__dict__.update(vars(module))
        return getattr(module, attr)


def lazy_module(name: str) -> Any:
    """A stand-in for `import name` that imports it on the first attribute access."""
    return _LazyModule(name)


def lazy_exports(package: str, where: dict[str, str]) -> Any:
    """A package's module-level `__getattr__` (PEP 562) that imports an exported name's
    module on its first use: `where` maps each name to the module that defines it.

    Why: a package __init__ that imported its submodules would make `forensics formats` or
    `analyze --no-replay` pay for torch, polars or DuckDB through a light neighbour.
    """

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
