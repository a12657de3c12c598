"""The Classification section: which rule won, which lost and why, what replay said.

A post-mortem is only convincing if it shows the alternatives that were considered and the
number that ruled each one out, so every finding and probe is listed with its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.report.fmt import cell, pct
from forensics.report.knowledge import Knowledge
from forensics.report.model import Finding, Incident

CONFIRMED, REFUTED, INCONCLUSIVE, NOT_EVALUATED = (
    "confirmed",
    "refuted",
    "inconclusive",
    "not evaluated",
)


@dataclass
class Hypothesis:
    """One competing cause, once, with its status as stored by detect and replay.

    status: the replay verdict when replay tested it (findings.replay); otherwise refuted
    when a rule for it was evaluated on logged inputs and did not fire, inconclusive when
    it fired but lost, not evaluated when the inputs its rules need were not logged.
    """

    cause: str  # display title
    rules: list[str]
    status: str
    why: str
    evaluate: str = ""  # for "not evaluated": what log or data would evaluate it
    confidence: float | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)


def root_finding(inc: Incident, kb: Knowledge) -> Finding | None:
    """The triggered finding for the incident's cause with the highest confidence."""
    want = kb.cause(inc.cause).key
    for f in inc.findings:  # strongest first
        if f.triggered and kb.cause(f.cause).key == want:
            return f
    return None


def competitors(inc: Incident, kb: Knowledge, root: Finding | None) -> list[Hypothesis]:
    """Every other cause once (its findings grouped), with its status and the reason."""
    own = kb.cause(inc.cause).key
    by_cause: dict[str, list[Finding]] = {}
    for f in inc.findings:
        if kb.cause(f.cause).key != own:
            by_cause.setdefault(kb.cause(f.cause).key, []).append(f)
    return [_hypothesis(fs, inc, kb) for fs in by_cause.values()]


def _hypothesis(fs: list[Finding], inc: Incident, kb: Knowledge) -> Hypothesis:
    entry = kb.cause(fs[0].cause)
    rules = [f.rule_id for f in fs]
    verdicts = {f.replay for f in fs if f.replay in (CONFIRMED, REFUTED, INCONCLUSIVE)}
    probes = [r for r in inc.replays if kb.cause(r.hypothesis).key == entry.key]
    detail = "; ".join(f"`{r.probe}`: {r.detail}" for r in probes if r.detail)
    fired = [f for f in fs if f.triggered]
    conf = max((f.confidence or 0.0 for f in fired), default=None)
    evaluate = str(entry.fields.get("evaluate", ""))
    if verdicts:
        status = next(v for v in (CONFIRMED, REFUTED, INCONCLUSIVE) if v in verdicts)
        said = {CONFIRMED: "replay confirmed it", REFUTED: "replay refuted it"}
        why = said.get(status, "replay was inconclusive") + (f" ({detail})" if detail else "")
        return Hypothesis(entry.title, rules, status, why, "", conf, fs[0].evidence)
    if fired:
        why = (
            f"rule fired at {pct(conf)}, below the root cause's {pct(inc.confidence)}; not replayed"
        )
        return Hypothesis(entry.title, rules, INCONCLUSIVE, why, evaluate, conf, fired[0].evidence)
    logged = [f for f in fs if not _mostly_missing(f)]
    missing = sorted({e["key"] for f in fs for e in f.evidence if e.get("note") == "missing"})
    if logged:
        shown = [e for e in logged[0].evidence if e.get("note") != "missing"][:3]
        facts = "; ".join(_evidence_text(e) for e in shown)
        why = "its rule did not fire on the logged values" + (f" ({facts})" if facts else "")
        if missing:
            why += f"; not logged: {', '.join(missing)}"
        return Hypothesis(entry.title, rules, REFUTED, why, "", None, logged[0].evidence)
    why = "its rule needs inputs this run did not log" + (
        f" ({', '.join(missing)})" if missing else ""
    )
    return Hypothesis(entry.title, rules, NOT_EVALUATED, why, evaluate, None, fs[0].evidence)


def _mostly_missing(f: Finding) -> bool:
    """At least half the inputs the rule reads were not logged: its silence says nothing."""
    gone = sum(1 for e in f.evidence if e.get("note") == "missing")
    return not f.evidence or 2 * gone >= len(f.evidence)


def refuted_causes(inc: Incident, kb: Knowledge) -> list[str]:
    """Titles of the causes replay refuted (findings.replay = refuted), by title."""
    return sorted({kb.cause(f.cause).title for f in inc.findings if f.replay == REFUTED})


def _evidence_text(e: dict[str, Any]) -> str:
    text = f"{e['key']} = {cell(e['value'])}"
    return text + (f", {e['note']}" if e.get("note") else "")


PLOTTED = ("token_histogram", "act_norms")  # replay numbers drawn as figures, not tabled


def scalar_numbers(numbers: dict[str, Any]) -> list[tuple[str, str]]:
    """The probe's numbers that fit in a table cell, sorted by key; plotted series left out."""
    return [(k, cell(numbers[k])) for k in sorted(numbers) if k not in PLOTTED]
