"""The post-mortem's decoded-excerpt block: untrusted corpus text shown as it is, never as
Markdown or HTML, and picked out of what replay stored (never recomputed)."""

from __future__ import annotations

import re

from forensics.report.context import stored_excerpts
from forensics.report.fmt import EXCERPT_CHARS, excerpt
from forensics.report.model import Replay


def _span(md: str) -> str:
    """The text a CommonMark code span shows: the fence, then one padding space each side."""
    m = re.fullmatch(r"(`+)(.*?)\1( … \(\+.*\))?", md, flags=re.S)
    assert m, md
    body = m.group(2)
    if body.startswith(" ") and body.endswith(" ") and body.strip():
        body = body[1:-1]
    return body


def test_markup_and_html_stay_text() -> None:
    for raw in (
        "<script>alert(1)</script>",
        "**bold** [x](http://e.vil) # h",
        "a | b",
        "</details>",
    ):
        md = excerpt(raw)
        assert _span(md) == raw
        assert "\n" not in md


def test_backticks_cannot_close_the_span() -> None:
    for raw in ("`", "a ``b`` c", "```python", "x`", "`x"):
        md = excerpt(raw)
        fence = re.match(r"`+", md).group(0)  # type: ignore[union-attr]
        assert fence not in _span(md)  # no run inside as long as the fence
        assert _span(md) == raw


def test_newlines_controls_and_bidi_are_drawn_not_obeyed() -> None:
    md = excerpt("line one\nline two\tx\r\x00\u202eevil\u200b")
    assert "\n" not in md and "\r" not in md and "\u202e" not in md and "\u200b" not in md
    assert _span(md) == "line one⏎line two⇥x\\u000d\\u0000\\u202eevil\\u200b"


def test_long_lines_are_cut_and_counted() -> None:
    md = excerpt("w " * 500)
    assert md.endswith(f"(+{1000 - EXCERPT_CHARS} characters)")
    assert len(_span(md)) <= EXCERPT_CHARS
    assert excerpt("   ") == "(blank: 3 characters)"


def _replay(numbers: dict[str, object]) -> Replay:
    return Replay("data_corruption", "data_corruption", "refuted", numbers, "", "cpu", 1.0)


def test_block_comes_from_the_stored_numbers() -> None:
    n = {"step": 115, "excerpt_rows": [3, 0], "excerpts": ["r1 r2", "r3"],
         "excerpt_tokens": [2, 1], "row_tokens": 32, "excerpt_order": "rarest rows first",
         "tokenizer": "/abs/where/run/tokenizer.json"}  # fmt: skip
    x = stored_excerpts([_replay({"step": 115}), _replay(n)])
    assert x is not None and x["step"] == 115 and x["order"] == "rarest rows first"
    assert x["how"] == "decoded with run/tokenizer.json"  # never the machine's absolute path
    assert [(r["row"], r["text"], r["tokens"]) for r in x["rows"]] == [
        (3, "r1 r2", 2),
        (0, "r3", 1),
    ]
    note = "no tokenizer.json found (looked at /a)"
    ids = {"step": 9, "excerpt_rows": [1], "excerpt_ids": [[5, 6]], "excerpts_note": note}
    raw = stored_excerpts([_replay(ids)])
    assert raw is not None and raw["rows"][0]["text"] == "5 6"
    assert raw["how"] == "raw token ids, no tokenizer.json found"
    assert stored_excerpts([_replay({"step": 1})]) is None
