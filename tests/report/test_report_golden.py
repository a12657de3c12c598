"""Snapshot tests: the fixed runs render to the committed Markdown, byte for byte.

Regenerate after an intended change with `FORENSICS_UPDATE_GOLDEN=1 pytest tests/report`,
then review the diff of tests/report/golden/ like code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from consistency import check_report
from reportdb import RUNS, render_docs

from forensics.store.db import Store

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("FORENSICS_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("run", RUNS)
def test_markdown_matches_golden(store: Store, run: str) -> None:
    docs = render_docs(store, run)
    folder = GOLDEN / run
    if UPDATE:
        for old in folder.rglob("*.md"):
            old.unlink()
        for rel, text in docs.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text, encoding="utf-8")
    expected = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.md"))
    assert sorted(docs) == expected, "documents differ from the golden set"
    for rel, text in docs.items():
        golden = (folder / rel).read_text(encoding="utf-8")
        assert text == golden, f"{run}/{rel} differs from its golden file (see module doc)"


def test_rendering_is_deterministic(store: Store) -> None:
    assert render_docs(store, RUNS[0]) == render_docs(store, RUNS[0])


@pytest.mark.parametrize("run", RUNS)
def test_golden_files_agree_with_their_store(store: Store, run: str) -> None:
    """The goldens are what a reader receives: every number they quote is the stored or
    logged one (tests/report/consistency.py). A hand-set fixture value that its own curve
    contradicts (a grad-norm peak quoted at a step whose logged value is another) fails here,
    not only in a reader's eyes."""
    assert check_report(GOLDEN / run, store, run) == []
