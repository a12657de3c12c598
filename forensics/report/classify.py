"""The Classification section: which rule won, which lost and why, what replay said.

A post-mortem is only convincing if it shows the alternatives that were considered and the
number that ruled each one out, so every finding and probe is listed with its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.report.fmt import cell, pct
from forensics.report.knowledge import Knowledge
from forensics.report.model import Finding, Incident, Replay


@dataclass
class Hypothesis:
    """One finding seen from the report: the cause it argues for and its fate."""

    rule_id: str
    cause: str  # display title
    triggered: bool
    confidence: float | None
    why: str  # why it was ruled out (or, for the root cause, why it won)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    replay: str | None = None


def root_finding(inc: Incident, kb: Knowledge) -> Finding | None:
    """The triggered finding for the incident's cause with the highest confidence."""
    want = kb.cause(inc.cause).key
    for f in inc.findings:  # strongest first
        if f.triggered and kb.cause(f.cause).key == want:
            return f
    return None


def competitors(inc: Incident, kb: Knowledge, root: Finding | None) -> list[Hypothesis]:
    """Every other finding, with the reason it lost."""
    return [
        Hypothesis(
            rule_id=f.rule_id,
            cause=kb.cause(f.cause).title,
            triggered=f.triggered,
            confidence=f.confidence,
            why=ruled_out(f, inc, kb),
            evidence=f.evidence,
            replay=f.replay,
        )
        for f in inc.findings
        if f is not root
    ]


def ruled_out(f: Finding, inc: Incident, kb: Knowledge) -> str:
    reasons = []
    refuted = [r for r in inc.replays if _same_cause(r, f, kb) and r.verdict == "refuted"]
    for r in refuted:
        reasons.append(
            f"replay probe `{r.probe}` refuted it" + (f": {r.detail}" if r.detail else "")
        )
    if not f.triggered:
        facts = "; ".join(_evidence_text(e) for e in f.evidence[:3])
        reasons.append("the rule did not fire" + (f" ({facts})" if facts else ""))
    elif kb.cause(f.cause).key == kb.cause(inc.cause).key:
        reasons.append("same cause as the root cause, weaker rule")
    else:
        reasons.append(
            f"fired with confidence {pct(f.confidence)}, below the root cause's "
            f"{pct(inc.confidence)}"
        )
    return "; ".join(reasons)


def _same_cause(r: Replay, f: Finding, kb: Knowledge) -> bool:
    return kb.cause(r.hypothesis).key == kb.cause(f.cause).key or r.hypothesis == f.rule_id


def _evidence_text(e: dict[str, Any]) -> str:
    text = f"{e['key']} = {cell(e['value'])}"
    return text + (f", {e['note']}" if e.get("note") else "")


PLOTTED = ("token_histogram", "act_norms")  # replay numbers drawn as figures, not tabled


def scalar_numbers(numbers: dict[str, Any]) -> list[tuple[str, str]]:
    """The probe's numbers that fit in a table cell, sorted by key; plotted series left out."""
    return [(k, cell(numbers[k])) for k in sorted(numbers) if k not in PLOTTED]
