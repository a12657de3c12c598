"""Causes as ranked hypotheses, each weighed on the evidence the log actually has.

Every rule is a hypothesis about one cause. On one incident it is

- supported      its condition holds (confidence: the rule's, lowered for what is missing),
- against        its `against` expression holds (the log refutes it), or its condition
                 is false although everything it `needs` was logged,
- not_evaluable  its condition fails and something it `needs` was not logged (`needs`
                 then lists it: what to log to decide), or its condition is neither true
                 nor false (three-valued: it turns on a feature this log does not give,
                 e.g. rare tokens' beta2 after a slow recovery): undecided, not refuted.

A cause with several rules takes its strongest status (supported > not_evaluable >
against). The stated cause is the supported hypothesis with the highest confidence,
lowered when an unrelated cause is close behind (classify.choose's margin); a child cause
(rare_tokens, data_corruption) is preferred to its parent (batch_driven) when it is as
well supported, and neither competes with the other. Below min_confidence, or with nothing
supported, the cause is `unknown`, and the hypotheses still say what was evaluated.

What to log next: the missing evidence sources that would evaluate the most causes still
open (not evaluable), at most two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from forensics.detect.classify import COMPETE_MARGIN
from forensics.detect.config import DetectConfig
from forensics.detect.data import EVIDENCE_SOURCES
from forensics.detect.model import (
    CAUSE_TITLES,
    PARENT,
    Evidence,
    Hypothesis,
    Incident,
    LogNext,
)
from forensics.detect.rules import Rule, _plain
from forensics.nonfinite import TOKENS, spell

_ORDER = {"supported": 0, "not_evaluable": 1, "against": 2}


def weigh(rule: Rule, features: Mapping[str, object], have: set[str]) -> Hypothesis:
    """One rule's hypothesis on one incident (see the module doc)."""
    finding = rule.evaluate(features)
    shown = [e for e in finding.evidence if e.value is not None]
    values = ", ".join(f"{e.key}={_short(e.value)}" for e in shown) or "no feature computable"
    if finding.triggered:
        return Hypothesis(
            rule.cause, "supported", finding.confidence, rule.id, values, [], finding.evidence
        )
    if rule.against is not None and rule.against.evaluate(features) is True:
        reason = f"refuted by the log ({' '.join(rule.against.text.split())}): {values}"
        return Hypothesis(rule.cause, "against", 0.0, rule.id, reason, [], finding.evidence)
    missing = [alts[0] for alts in rule.needs if not set(alts) & have]
    if missing:
        reason = f"needs {', '.join(missing)}; from the log: {values}"
        return Hypothesis(
            rule.cause, "not_evaluable", 0.0, rule.id, reason, missing, finding.evidence
        )
    if finding.undecided:
        # three-valued logic: the condition turns on a feature this log does not give
        absent = ", ".join(e.key for e in finding.evidence if e.value is None) or "none"
        reason = (
            "undecided on this log (the condition turns on what it does not give, among: "
            f"{absent}): {values}"
        )
        return Hypothesis(rule.cause, "not_evaluable", 0.0, rule.id, reason, [], finding.evidence)
    reason = f"condition not met with its inputs logged: {values}"
    return Hypothesis(rule.cause, "against", 0.0, rule.id, reason, [], finding.evidence)


def _short(v: object) -> str:
    if isinstance(v, str) and v in TOKENS:  # a non-finite value, spelled as pages spell it
        return spell(TOKENS[v])
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def per_cause(hyps: Iterable[Hypothesis]) -> list[Hypothesis]:
    """One hypothesis per cause (its strongest rule), ranked: supported by confidence, then
    not evaluable, then against."""
    best: dict[str, Hypothesis] = {}
    for h in hyps:
        cur = best.get(h.cause)
        if cur is None or (_ORDER[h.status], -h.confidence) < (_ORDER[cur.status], -cur.confidence):
            best[h.cause] = h
    ranked = sorted(best.values(), key=lambda h: (_ORDER[h.status], -h.confidence, h.cause))
    for i, h in enumerate(ranked, 1):
        h.rank = i
    return ranked


def _related(a: str, b: str) -> bool:
    return a == b or PARENT.get(a) == b or PARENT.get(b) == a


def choose(ranked: list[Hypothesis]) -> tuple[Hypothesis | None, float]:
    """The stated cause and its confidence (see the module doc)."""
    sup = [h for h in ranked if h.status == "supported"]
    if not sup:
        return None, 0.0
    top = sup[0]
    for h in sup[1:]:  # a child as well supported as its parent is the more precise answer
        if PARENT.get(h.cause) == top.cause and h.confidence >= top.confidence - 0.05:
            top = h
            break
    rivals = [h for h in sup if not _related(h.cause, top.cause)]
    conf = top.confidence
    if rivals:
        conf -= 0.5 * max(0.0, rivals[0].confidence - (top.confidence - COMPETE_MARGIN))
    return top, round(conf, 3)


def log_next(ranked: list[Hypothesis], limit: int = 2) -> list[LogNext]:
    """The missing evidence that would evaluate the most open causes (at most `limit`).

    Sources are grouped by what to log (`grad_norm_every_step` is the metric grad_norm,
    asked for every step), so one metric is advised once, for every cause it opens."""
    opened: dict[str, list[str]] = {}
    asked: dict[str, str] = {}
    for h in ranked:
        if h.status == "not_evaluable":
            for source in h.needs:
                metric = source.removesuffix("_every_step")
                opened.setdefault(metric, [])
                if h.cause not in opened[metric]:
                    opened[metric].append(h.cause)
                if source.endswith("_every_step") or metric not in asked:
                    asked[metric] = source
    order = [s.removesuffix("_every_step") for s in EVIDENCE_SOURCES]
    picks = sorted(opened.items(), key=lambda kv: (-len(kv[1]), order.index(kv[0])))[:limit]
    out = []
    for metric, causes in picks:
        names = [c.replace("_", " ") for c in causes]
        what = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        text = EVIDENCE_SOURCES[asked[metric]]
        out.append(LogNext(metric, causes, f"log {text} to evaluate {what}"))
    return out


def explain(
    inc: Incident, rules: list[Rule], have: set[str], cfg: DetectConfig, missing: list[str]
) -> None:
    """Fill inc.hypotheses and inc.log_next, set the stated cause from them, and append the
    cause part of inc.evidence (the detector calls it with the shape part only)."""
    ranked = per_cause(weigh(r, inc.features, have) for r in rules)
    inc.hypotheses = ranked
    inc.log_next = log_next(ranked)
    top, conf = choose(ranked)
    keep = list(inc.evidence)
    if top is not None and conf >= cfg.min_confidence:
        inc.cause, inc.confidence = top.cause, conf
        note = CAUSE_TITLES.get(top.cause, f"cause {top.cause}")
        keep.append(Evidence("rule", top.rule_id, note))
        keep.extend(top.evidence)
    else:
        inc.cause, inc.confidence = "unknown", 0.0
        note = "no hypothesis supported" if top is None else f"best below {cfg.min_confidence}"
        keep.append(Evidence("rule", None, note))
    for h in ranked:
        if h.cause != inc.cause:
            keep.append(Evidence(f"hypothesis:{h.cause}", _plain(h.confidence), h.status))
    if missing:
        keep.append(
            Evidence(
                "missing_metrics",
                ", ".join(missing),
                "not logged: the causes that need them cannot be told apart",
            )
        )
    if inc.log_next:
        keep.append(
            Evidence(
                "log_next",
                ", ".join(n.metric for n in inc.log_next),
                "; ".join(n.why for n in inc.log_next),
            )
        )
    inc.evidence = keep


__all__ = ["choose", "explain", "log_next", "per_cause", "weigh"]
