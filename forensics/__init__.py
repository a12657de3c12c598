"""forensics: post-hoc forensics for finished LLM training runs."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # `__version__` is looked up on first use (importlib.metadata scans the installed
    # distributions: ~15 ms that no command but `--version` needs at start-up).
    if name != "__version__":
        raise AttributeError(f"module 'forensics' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("forensics")
    except PackageNotFoundError:  # running from a source tree that was not installed
        found = "0.0.0+src"
    globals()["__version__"] = found
    return found
