"""Choose an incident's cause from the rules' findings, honestly.

Every rule is evaluated (findings keep the ones that did not fire too, so a report can
show why a hypothesis was ruled out). The cause is the triggered rule with the highest
confidence, lowered when a rule naming another cause comes close:

    confidence = best - 0.5 * max(0, runner_up - (best - 0.2))

Below `min_confidence`, or with no triggered rule, the cause is `unknown`, confidence 0,
and the evidence lists every hypothesis with its confidence and the metrics that were not
logged (with which the causes could have been told apart).
"""

from __future__ import annotations

from forensics.detect.config import DetectConfig
from forensics.detect.model import Evidence, Finding, Incident
from forensics.detect.rules import Rule

COMPETE_MARGIN = 0.2


def choose(findings: list[Finding]) -> tuple[Finding | None, float, list[Finding]]:
    """The best triggered finding, its adjusted confidence, and the competing ones."""
    hits = sorted((f for f in findings if f.triggered), key=lambda f: -f.confidence)
    if not hits:
        return None, 0.0, []
    best = hits[0]
    others = [f for f in hits[1:] if f.cause != best.cause]
    conf = best.confidence
    if others:
        conf -= 0.5 * max(0.0, others[0].confidence - (best.confidence - COMPETE_MARGIN))
    return best, round(conf, 3), others


def classify(
    inc: Incident, rules: list[Rule], cfg: DetectConfig, missing_metrics: list[str]
) -> None:
    """Fill inc.findings, inc.cause, inc.confidence and the cause part of inc.evidence."""
    inc.findings = [r.evaluate(inc.features) for r in rules]
    best, conf, others = choose(inc.findings)
    if best is not None and conf >= cfg.min_confidence:
        inc.cause, inc.confidence = best.cause, conf
        inc.evidence.append(Evidence("rule", best.rule_id, f"cause {best.cause}"))
        inc.evidence.extend(best.evidence)
    else:
        inc.cause, inc.confidence = "unknown", 0.0
        note = "no rule fired" if best is None else f"best hypothesis below {cfg.min_confidence}"
        inc.evidence.append(Evidence("rule", None, note))
        if best is not None:
            others = [best, *others]
    for f in others:
        how = "also fired" if inc.cause != "unknown" else "fired with too little evidence"
        inc.evidence.append(
            Evidence(f"hypothesis:{f.cause}", f.confidence, f"rule {f.rule_id} {how}")
        )
    if missing_metrics:
        inc.evidence.append(
            Evidence(
                "missing_metrics",
                ", ".join(missing_metrics),
                "not logged: the causes that need them cannot be told apart",
            )
        )
