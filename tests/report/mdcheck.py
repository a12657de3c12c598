"""Checks on rendered Markdown shared by the report tests: sections, tables, links."""

from __future__ import annotations

import re
from pathlib import Path

POSTMORTEM_SECTIONS = [
    "Symptoms",
    "Evidence",
    "Classification",
    "Recovery action",
    "Outcome",
    "Cost of incident",
    "Lessons / follow-ups",
]
SUMMARY_SECTIONS = ["Incidents", "Metrics coverage", "Near-misses", "Totals", "Sources"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
LEAKS = [re.compile(p) for p in (r"\bNone\b", r"\bnan\b", r"\{\{", r"\{%", r"\{#", r"Undefined")]


def sections(text: str) -> dict[str, str]:
    """`## Title` -> the text up to the next `## ` heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def leaks(text: str) -> list[str]:
    """Template artefacts and Python reprs that must never reach a report."""
    return [m.group(0) for p in LEAKS for m in p.finditer(text)]


def bad_tables(text: str) -> list[str]:
    """Table rows whose cell count differs from their header's."""
    bad, width = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line))
        if width is None:
            width = cells
        elif cells != width:
            bad.append(line)
    return bad


def relative_links(text: str) -> list[str]:
    return [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "#"))]


def broken_links(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    return [t for t in relative_links(text) if not (doc.parent / t).is_file()]
