"""Prints what the fuzz examples came to (reads, clean errors) per reader."""

from __future__ import annotations

from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.fuzz.test_fuzz_readers import COUNTS, EXAMPLES

    if not COUNTS:
        return
    terminalreporter.write_line(f"fuzz outcomes ({EXAMPLES} examples per reader requested):")
    for reader, outcomes in sorted(COUNTS.items()):
        total = sum(outcomes.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        terminalreporter.write_line(f"  {reader:14s} {total:6d} examples: {parts}")
