"""Feed replay verdicts back into the classification (`findings` and `incidents`).

Per incident, each hypothesis gets one verdict from its probes (confirmed if a probe confirmed
it and none refuted it, refuted in the mirror case, else inconclusive). Then:

- every finding whose cause was tested gets `replay` = that verdict and its confidence moved:
  confirmed halves the remaining doubt (c + (1 - c) / 2), refuted halves the confidence
  (c / 2), inconclusive leaves it; an evidence entry `replay.<probe>` says why;
- the incident keeps its cause when replay confirmed it or tested nothing better; it switches
  to the strongest confirmed cause when its own was not confirmed (a confirmed cause that no
  rule argued for enters at 0.5); a refuted cause is never kept: with nothing confirmed it
  switches to the strongest triggered finding that was not refuted, and when there is none
  the cause becomes `unknown` (confidence 0; the `replay.summary` evidence says what was
  refuted);
  `incidents.replay` is the verdict of the final cause (inconclusive when replay ran but did
  not test it, not_run when nothing was replayed).

The confidences before replay are kept in the evidence (`replay_prior_*`), so applying the
verdicts again (a second `forensics replay`) starts from the detector's numbers, not from the
already-adjusted ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from forensics.replay.result import CONFIRMED, INCONCLUSIVE, NOT_RUN, REFUTED, REPRODUCTION
from forensics.store.db import Store

PRIOR = "replay_prior_"
UNKNOWN = "unknown"


def combine(verdicts: list[str]) -> str:
    if CONFIRMED in verdicts and REFUTED not in verdicts:
        return CONFIRMED
    if REFUTED in verdicts and CONFIRMED not in verdicts:
        return REFUTED
    return INCONCLUSIVE


def adjust(conf: float, verdict: str) -> float:
    if verdict == CONFIRMED:
        return conf + (1.0 - conf) / 2.0
    if verdict == REFUTED:
        return conf / 2.0
    return conf


@dataclass
class Tested:
    verdict: str
    notes: list[dict[str, Any]]  # evidence entries, one per probe


def tested(rows: list[dict[str, Any]]) -> dict[str, Tested]:
    """Hypothesis -> combined verdict and one evidence entry per probe."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["hypothesis"] != REPRODUCTION:
            out.setdefault(r["hypothesis"], []).append(r)
    return {
        h: Tested(
            combine([r["verdict"] for r in rs]),
            [
                {"key": f"replay.{r['probe']}", "value": r["verdict"], "note": r["detail"] or ""}
                for r in rs
            ],
        )  # fmt: skip
        for h, rs in out.items()
    }


def evidence_list(text: Any) -> list[dict[str, Any]]:
    raw = json.loads(text) if isinstance(text, str) and text else (text or [])
    if isinstance(raw, dict):
        return [{"key": k, "value": v, "note": ""} for k, v in raw.items()]
    return [e for e in raw if isinstance(e, dict)]


def split_prior(evidence: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Evidence without replay's entries, and the pre-replay values replay had saved."""
    prior = {e["key"][len(PRIOR) :]: e["value"] for e in evidence if e["key"].startswith(PRIOR)}
    keep = [e for e in evidence if not str(e.get("key", "")).startswith(("replay.", PRIOR))]
    return keep, prior


def apply_verdicts(store: Store, run_id: str) -> None:
    """Update findings and incidents of the run from its `replays` rows (idempotent)."""
    rows = store.query(
        "SELECT incident_id, probe, hypothesis, verdict, detail FROM replays WHERE run_id = ?",
        [run_id],
    ).to_dicts()
    by_incident: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_incident.setdefault(int(r["incident_id"]), []).append(r)
    with store.transaction():
        for incident_id, inc_rows in by_incident.items():
            t = tested(inc_rows)
            best = _update_findings(store, run_id, incident_id, t)
            _update_incident(store, run_id, incident_id, t, best)


def _update_findings(
    store: Store, run_id: str, incident_id: int, t: dict[str, Tested]
) -> dict[str, tuple[float, bool, str | None]]:
    """Adjust every finding; return cause -> (best confidence, triggered, its recovery)."""
    frame = store.query(
        "SELECT rule_id, cause, triggered, confidence, recovery, evidence FROM findings "
        "WHERE run_id = ? AND incident_id = ?",
        [run_id, incident_id],
    )
    best: dict[str, tuple[float, bool, str | None]] = {}
    for f in frame.iter_rows(named=True):
        evidence, prior = split_prior(evidence_list(f["evidence"]))
        conf0 = float(prior.get("confidence", f["confidence"] or 0.0))
        hit = t.get(f["cause"])
        verdict = hit.verdict if hit else NOT_RUN
        conf = adjust(conf0, verdict)
        if hit:
            evidence += [{"key": PRIOR + "confidence", "value": conf0, "note": "before replay"}]
            evidence += hit.notes
        store.con.execute(
            "UPDATE findings SET replay = ?, confidence = ?, evidence = ? "
            "WHERE run_id = ? AND incident_id = ? AND rule_id = ?",
            [verdict, conf, json.dumps(evidence), run_id, incident_id, f["rule_id"]],
        )
        trig = bool(f["triggered"])
        old = best.get(f["cause"])
        if old is None or (trig, conf) > (old[1], old[0]):
            best[f["cause"]] = (conf, trig, f["recovery"])
    return best


def _update_incident(
    store: Store,
    run_id: str,
    incident_id: int,
    t: dict[str, Tested],
    best: dict[str, tuple[float, bool, str | None]],
) -> None:
    row = store.query(
        "SELECT cause, confidence, recovery, evidence FROM incidents "
        "WHERE run_id = ? AND incident_id = ?",
        [run_id, incident_id],
    ).to_dicts()
    if not row:
        return  # an ad-hoc `--step` replay has no incident row
    evidence, prior = split_prior(evidence_list(row[0]["evidence"]))
    cause0 = str(prior.get("cause", row[0]["cause"] or "unknown"))
    conf0 = float(prior.get("confidence", row[0]["confidence"] or 0.0))
    rec0 = prior.get("recovery", row[0]["recovery"])
    cause, conf, rec = choose(cause0, conf0, rec0, t, best)
    verdict = t[cause].verdict if cause in t else INCONCLUSIVE
    evidence += [
        {"key": PRIOR + "cause", "value": cause0, "note": "cause before replay"},
        {"key": PRIOR + "confidence", "value": conf0, "note": "before replay"},
        {"key": PRIOR + "recovery", "value": rec0, "note": "before replay"},
        {"key": "replay.summary", "value": verdict, "note": summary(t)},
    ]
    store.con.execute(
        "UPDATE incidents SET cause = ?, confidence = ?, recovery = ?, replay = ?, evidence = ? "
        "WHERE run_id = ? AND incident_id = ?",
        [cause, conf, rec, verdict, json.dumps(evidence), run_id, incident_id],
    )


def choose(
    cause0: str,
    conf0: float,
    rec0: str | None,
    t: dict[str, Tested],
    best: dict[str, tuple[float, bool, str | None]],
) -> tuple[str, float, str | None]:
    """The incident's cause, confidence and recovery after replay (see the module doc)."""
    v0 = t[cause0].verdict if cause0 in t else NOT_RUN
    own = (cause0, adjust(conf0, v0), rec0)
    if v0 == CONFIRMED:
        return own
    confirmed = [c for c, x in t.items() if x.verdict == CONFIRMED and c != cause0]
    if confirmed:
        c = max(confirmed, key=lambda c: best.get(c, (0.5, False, None))[0])
        conf, _, rec = best.get(c, (adjust(0.0, CONFIRMED), False, None))
        return c, conf, rec if rec is not None else rec0
    if v0 == REFUTED:
        alive = [
            (conf, c, rec)
            for c, (conf, trig, rec) in best.items()
            if trig
            and c not in (cause0, UNKNOWN)
            and (t[c].verdict if c in t else NOT_RUN) != REFUTED
        ]
        if alive:
            conf, c, rec = max(alive)
            return c, conf, rec if rec is not None else rec0
        return UNKNOWN, 0.0, rec0
    return own


def summary(t: dict[str, Tested]) -> str:
    groups = {v: sorted(h for h, x in t.items() if x.verdict == v) for v in
              (CONFIRMED, REFUTED, INCONCLUSIVE)}  # fmt: skip
    return "; ".join(f"{v}: {', '.join(hs)}" for v, hs in groups.items() if hs)
