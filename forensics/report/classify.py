"""The Classification section: the stated cause, its competitors and what to log next.

Everything here is read from the store: detect's `hypotheses` rows (each cause supported,
against or not_evaluable on the log, with its reason and the evidence it `needs`) and
replay's verdicts (`findings.replay`, else the `replays` rows combined by replay's own
rule, replay/verdicts.combine). Replay outranks the log: a confirmed or refuted cause
says so; otherwise the log's status is shown. Nothing is re-decided here
(docs/definitions.md, "hypothesis status").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forensics.report.fmt import cell, pct
from forensics.report.knowledge import Knowledge
from forensics.report.model import Incident, LogNext, StoredHypothesis

# The five statuses a post-mortem shows (docs/definitions.md, "Hypothesis status").
CONFIRMED = "confirmed by replay"
REFUTED = "refuted by replay"
SUPPORTED = "supported by the log"
AGAINST = "ruled out by the log"
NOT_EVALUATED = "not evaluated"
# replay/result.REPRODUCTION, not imported (forensics.replay loads torch): the probe that
# replays the logged step itself; it checks the replay, it is not a cause.
REPRODUCTION = "reproduction"
STATUS = {"supported": SUPPORTED, "against": AGAINST, "not_evaluable": NOT_EVALUATED}
REPLAY_STATUS = {"confirmed": CONFIRMED, "refuted": REFUTED}


@dataclass
class Hypothesis:
    """One cause once, as the post-mortem's hypotheses table shows it."""

    cause: str  # display title
    key: str  # cause key (lessons.yaml)
    status: str  # one of the five statuses above
    why: str
    evaluate: str = ""  # for "not evaluated": what log or data would evaluate it
    confidence: float | None = None


def replay_verdict(inc: Incident, cause: str, kb: Knowledge) -> str | None:
    """Replay's verdict on `cause`: the one applied to its findings, else its probes'."""
    key = kb.cause(cause).key
    applied = {f.replay for f in inc.findings if kb.cause(f.cause).key == key}
    for v in ("confirmed", "refuted", "inconclusive"):
        if v in applied:
            return v
    probes = {r.verdict for r in inc.replays if kb.cause(r.hypothesis).key == key}
    if not probes:
        return None
    # replay/verdicts.combine, not imported: forensics.replay loads torch.
    if ("confirmed" in probes) != ("refuted" in probes):
        return "confirmed" if "confirmed" in probes else "refuted"
    return "inconclusive"


def stated(inc: Incident, kb: Knowledge) -> StoredHypothesis | None:
    """The stored hypothesis row of the incident's stated cause, if detect weighed it."""
    key = kb.cause(inc.cause).key
    return next((h for h in inc.hypotheses if kb.cause(h.cause).key == key), None)


def competitors(inc: Incident, kb: Knowledge) -> list[Hypothesis]:
    """Every cause other than the stated one, once, in detect's rank order; then causes
    replay tested that detect did not weigh."""
    own = kb.cause(inc.cause).key
    seen = {own}
    out = []
    for h in inc.hypotheses:
        key = kb.cause(h.cause).key
        if key in seen:
            continue
        seen.add(key)
        out.append(_from_row(h, inc, kb))
    for r in inc.replays:
        key = kb.cause(r.hypothesis).key
        verdict = replay_verdict(inc, r.hypothesis, kb)
        if key in seen or r.hypothesis == REPRODUCTION or verdict not in REPLAY_STATUS:
            continue
        seen.add(key)
        entry = kb.cause(r.hypothesis)
        out.append(Hypothesis(entry.title, key, REPLAY_STATUS[verdict], _probes(inc, key, kb)))
    return out


def _from_row(h: StoredHypothesis, inc: Incident, kb: Knowledge) -> Hypothesis:
    entry = kb.cause(h.cause)
    verdict = replay_verdict(inc, h.cause, kb)
    if verdict in REPLAY_STATUS:
        return Hypothesis(
            entry.title, entry.key, REPLAY_STATUS[verdict], _probes(inc, entry.key, kb)
        )
    status = STATUS.get(h.status, h.status.replace("_", " "))
    why, evaluate = shown_reason(h, inc.unread), ""
    if status == SUPPORTED and h.confidence:
        # with no stated cause, this one was too weak to be stated (detect's min_confidence)
        weak = "too weak to be" if kb.cause(inc.cause).key == "unknown" else "below"
        why = f"{pct(h.confidence)}, {weak} the stated cause" + (f": {why}" if why else "")
    if status == NOT_EVALUATED:
        # the cause's general advice names the metrics it reads: only for a hypothesis
        # that lacks one (undecided with them logged, it would ask for what is there)
        fallback = entry.fields.get("evaluate") if h.needs else None
        evaluate = what_evaluates(h, inc.log_next, fallback)
    if verdict == "inconclusive":
        why += "; replay was inconclusive"
    return Hypothesis(entry.title, entry.key, status, why, evaluate, h.confidence)


def shown_reason(h: StoredHypothesis, unread: dict[str, Any] | None = None) -> str:
    """detect's stored reason, without the rule's expression (it is in rules/*.yaml):
    the feature values it read, or for a cause not evaluated, what was not logged (or
    logged but not read: `unread_metrics`)."""
    if h.status == "not_evaluable" and h.needs:
        absent = [n for n in h.needs if _metric(n) not in (unread or {})]
        present = [n for n in h.needs if n not in absent]
        said = []
        if absent:
            said.append("not logged: " + ", ".join(_needed(n) for n in absent))
        if present:
            said.append(
                "logged but NaN/Inf where the loss is finite, not read: "
                + ", ".join(f"`{_metric(n)}`" for n in present)
            )
        return "; ".join(said)
    if h.reason.startswith("refuted by the log (") and "): " in h.reason:
        return "its `against` test holds on " + h.reason.rsplit("): ", 1)[1]
    return h.reason


def _metric(need: str) -> str:
    """The metric a rule input names (`grad_norm_every_step` is `grad_norm`)."""
    return need.partition("_every_step")[0]


def _needed(name: str) -> str:
    """A rule input as the page names it: `grad_norm_every_step` is the metric `grad_norm`,
    logged at every step (no metric of that name exists)."""
    return f"`{_metric(name)}` at every step" if name != _metric(name) else f"`{name}`"


def what_evaluates(h: StoredHypothesis, log_next: list[LogNext], fallback: Any) -> str:
    """detect's log-next sentence for this cause when it has one, else lessons.yaml's."""
    for n in log_next:
        if h.cause in n.separates:
            return n.why
    return str(fallback or "")


def _probes(inc: Incident, key: str, kb: Knowledge) -> str:
    detail = "; ".join(
        f"`{r.probe}`: {r.detail}"
        for r in inc.replays
        if kb.cause(r.hypothesis).key == key and r.detail
    )
    if detail:
        return detail
    # A parent cause no probe tests (batch_driven) takes its children's verdict; replay
    # stored which, as the finding's `replay.children` evidence.
    notes = [
        str(e.get("note") or "")
        for f in inc.findings
        if kb.cause(f.cause).key == key
        for e in f.evidence
        if e.get("key") == "replay.children"
    ]
    return notes[0] if notes else "replay's verdict"


def causes_with_verdict(inc: Incident, kb: Knowledge, verdict: str) -> list[str]:
    """Titles of the causes whose stored replay verdict (findings.replay) is `verdict`.

    Why: a cause left `unknown` after replay is worded from these lists: "refuted every
    hypothesis it tested" is only true when none stayed inconclusive.
    """
    return sorted({kb.cause(f.cause).title for f in inc.findings if f.replay == verdict})


PLOTTED = ("token_histogram", "act_norms")  # replay numbers drawn as figures, not tabled


def scalar_numbers(numbers: dict[str, Any]) -> list[tuple[str, str]]:
    """The probe's numbers that fit in a table cell, sorted by key; plotted series left out."""
    return [(k, cell(numbers[k])) for k in sorted(numbers) if k not in PLOTTED]
