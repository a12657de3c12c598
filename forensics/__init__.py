"""forensics: post-hoc forensics for finished LLM training runs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("forensics")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+src"
