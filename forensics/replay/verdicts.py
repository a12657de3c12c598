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
  not test it, not_run when nothing was replayed);
- trigger and amplifier: every confirmed cause gets a `contributions` row with its role and
  the share of the damage its counterfactual removes (`roles()`). A *trigger* is an event in
  the data or the hardware (rare tokens, corrupt data, an overflowing batch, a bit flip); an
  *amplifier* is an optimizer setting whose counterfactual, re-run on the same batches
  trigger included, removes the damage (stale beta2, LR too high). When both are confirmed
  the stated cause is the amplifier with the largest share removed when that share is at
  least half (PREVENTS; stale_beta2's share is that of beta2 = 0.95 alone restarted from a
  checkpoint, against the run without the trigger: share()) -- its fix prevents the
  incident, while the trigger batch will come again in any real data -- else the trigger (the
  fix would not prevent it); at the confidence of the stronger of the two (replay confirmed
  the mechanism as a pair); the trigger is kept in `contributions` and named in the
  `replay.roles` evidence entry. A confirmed cause with no partner is stored with role
  `cause`. An optimizer setting confirmed beside a trigger whose fix, measured, removes none
  of the damage (its share <= 0: the fixed run did as much harm or more) amplified nothing:
  it gets no row, the trigger is the cause, and the stated one when detection had named the
  setting (the hypothesis stays confirmed, with the probe's numbers, in `findings`).

The confidences before replay are kept in the evidence (`replay_prior_*`), so applying the
verdicts again (a second `forensics replay`) starts from the detector's numbers, not from the
already-adjusted ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from forensics.detect.model import PARENT
from forensics.replay.plan import BIG
from forensics.replay.result import CONFIRMED, INCONCLUSIVE, NOT_RUN, REFUTED, REPRODUCTION
from forensics.store.db import Store

PRIOR = "replay_prior_"
UNKNOWN = "unknown"
TRIGGERS = ("rare_tokens", "data_corruption", "fp16_overflow", "hardware_fault")
AMPLIFIERS = ("stale_beta2", "lr_too_high")
PREVENTS = 0.5  # an amplifier is stated when its fix removes at least half of the damage
TRIGGER, AMPLIFIER, SOLE = "trigger", "amplifier", "cause"


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
    shares: dict[str, tuple[float | None, str]] = field(default_factory=dict)
    # probe -> (share of the damage its counterfactual removes, what that share measures)


@dataclass
class Contribution:
    """One `contributions` row: a confirmed cause, its role and the damage it accounts for."""

    cause: str
    role: str
    share_removed: float | None
    probe: str
    measure: str


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def _clip(x: float | None) -> float | None:
    return None if x is None else min(1.0, max(0.0, x))


def share(probe: str, numbers: dict[str, Any]) -> tuple[float | None, str]:
    """The share of the damage a probe's counterfactual removes, and what it is a share of.

    - stale_beta2, as the share is defined (probes/fix_share.py): restarted from a
      checkpoint before the incident with beta2 = 0.95 alone (no reset), the share of the
      damage (the largest loss above the run without the trigger, ordinary batches trained
      at its steps, on the ordinary batches after it) that the fix no longer does:
      `fix_share_removed`, through whichever trainer replays the run. Where no checkpoint
      could be restored for it, 1 - kept_plain (the window re-run from its start with
      beta2 = 0.95 alone, measured as lr_too_high's);
    - lr_too_high: 1 - kept, the share of the loss the updates added on ordinary batches
      (above the noise) that the re-run with the halved LR no longer adds
      (probes/counterfactual.py);
    - rare_tokens: the offending batch's own loss excess over the controls on the pre-spike
      state, as a share of the logged spike at that step: what removing the batch removes
      at the step it hits (it does not count the echoes of the update it causes);
    - hardware: 1 - the share of the logged spike a faithful replay (no fault) reproduces.
    Other probes (data_corruption, overflow) decide on a signature, not a counterfactual:
    no share (None)."""
    if probe == "stale_beta2" and "fix_share_removed" in numbers:  # the fix, as defined
        return _clip(_num(numbers["fix_share_removed"])), fix_measure(numbers)
    plain = _num(numbers.get("kept_plain"))
    if probe == "stale_beta2" and plain is not None:  # the fix alone, not the reset
        return _clip(1.0 - plain), "added loss on ordinary batches (beta2 = 0.95 alone)"
    if probe in AMPLIFIERS:
        kept = _num(numbers.get("kept"))
        return _clip(None if kept is None else 1.0 - kept), "added loss on ordinary batches"
    if probe == "rare_tokens":
        loss, ctrl = _num(numbers.get("loss")), _num(numbers.get("control_loss"))
        logged = _num(numbers.get("logged_excess"))
        ok = loss is not None and ctrl is not None and logged is not None and 0 < logged < BIG
        value = (loss - ctrl) / logged if ok else None  # type: ignore[operator]
        return _clip(value), "logged spike at the offending step"
    if probe == "hardware":
        frac = _num(numbers.get("reproduced_fraction"))
        return _clip(None if frac is None else 1.0 - frac), "logged spike"
    return None, ""


def fix_measure(numbers: dict[str, Any]) -> str:
    """What stale_beta2's fix share is a share of, with the two damages it compares
    (probes/fix_share.py), e.g. "largest loss above the run without the trigger on the
    ordinary batches, 1.38 at step 168, 0.552 with beta2 = 0.95 alone from the checkpoint of
    step 140"."""
    hurt, left = _num(numbers.get("fix_damage")), _num(numbers.get("fix_damage_fixed"))
    what = "largest loss above the run without the trigger on the ordinary batches"
    if hurt is None or left is None:
        return what
    beta2 = (numbers.get("fix_changes") or {}).get("beta2", 0.95)
    spread = numbers.get("fix_share_spread")
    draws = len(numbers.get("fix_share_draws") or [])
    return (
        f"{what}, {hurt:.3g} at step {numbers.get('fix_damage_step')}, {left:.3g} with beta2 = "
        f"{beta2:g} alone from the checkpoint of step {numbers.get('fix_checkpoint_step')}"
    ) + spread_text(tuple(spread) if spread else None, draws)


def spread_text(spread: tuple[float, float] | None, draws: int) -> str:
    """'; 47% to 53% over 3 draws of the ordinary batches ...' (probes/fix_share.py), and when the
    draws fall on both sides of PREVENTS, that the share cannot tell which of the trigger and
    the amplifier prevents the incident."""
    if spread is None:
        return ""
    lo, hi = spread
    text = (
        f"; {share_text(lo)} to {share_text(hi)} over {draws} draws of the ordinary batches that "
        "stand in for the trigger"
    )
    if lo < PREVENTS <= hi:
        text += " (on both sides of half: the batch and beta2 matter about equally)"
    return text


def tested(rows: list[dict[str, Any]]) -> dict[str, Tested]:
    """Hypothesis -> combined verdict, one evidence entry per probe, and the share of the
    damage each confirming probe's counterfactual removes."""
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
            {
                r["probe"]: share(r["probe"], _numbers(r.get("numbers")))
                for r in rs
                if r["verdict"] == CONFIRMED
            },
        )  # fmt: skip
        for h, rs in out.items()
    }


def verdict_of(cause: str, t: dict[str, Tested]) -> str:
    """Replay's verdict on a cause. A parent cause that no probe tests (batch_driven) takes
    its children's: confirmed when one is, refuted when every child was refuted, else
    inconclusive; so a page never says "ruled out" beside a confirmed child."""
    if cause in t:
        return t[cause].verdict
    kids = [t[c].verdict if c in t else NOT_RUN for c, p in PARENT.items() if p == cause]
    if CONFIRMED in kids:
        return CONFIRMED
    if kids and all(v == REFUTED for v in kids):
        return REFUTED
    return INCONCLUSIVE if any(v != NOT_RUN for v in kids) else NOT_RUN


def _children_note(cause: str, t: dict[str, Tested]) -> list[dict[str, Any]]:
    kids = [c for c, p in PARENT.items() if p == cause and c in t]
    if cause in t or not kids:
        return []
    note = "from its children: " + ", ".join(f"{c} {t[c].verdict}" for c in kids)
    return [{"key": "replay.children", "value": verdict_of(cause, t), "note": note}]


def _numbers(raw: Any) -> dict[str, Any]:
    value = json.loads(raw) if isinstance(raw, str) and raw else raw
    return value if isinstance(value, dict) else {}


def roles(t: dict[str, Tested]) -> list[Contribution]:
    """The confirmed causes with their role: trigger, amplifier (when a trigger is confirmed
    too), or the sole cause. Amplifiers first, the largest share removed first."""
    confirmed = {c: x for c, x in t.items() if x.verdict == CONFIRMED}
    best = {
        c: max(x.shares.items(), key=lambda kv: -1.0 if kv[1][0] is None else kv[1][0])
        for c, x in confirmed.items()
    }
    has_trigger = any(c in TRIGGERS for c in confirmed)
    # an optimizer setting whose fix, run beside a confirmed trigger, removes none of the
    # damage did not amplify it: no contribution, whatever its own probe confirmed
    removed = {c: best[c][1][0] for c in confirmed if c in AMPLIFIERS}
    inert = {c for c, v in removed.items() if has_trigger and v is not None and v <= 0}
    has_amplifier = any(c in AMPLIFIERS for c in confirmed if c not in inert)
    out = []
    for c in confirmed:
        if c in inert:
            continue
        if c in TRIGGERS:
            role = TRIGGER if has_amplifier else SOLE
        else:
            role = AMPLIFIER if has_trigger and c in AMPLIFIERS else SOLE
        probe, (value, measure) = best[c]
        out.append(Contribution(c, role, value, probe, measure))
    rank = {AMPLIFIER: 0, SOLE: 1, TRIGGER: 2}

    def order(k: Contribution) -> tuple[int, float, str]:
        weak = k.role == AMPLIFIER and k.share_removed is not None and k.share_removed < PREVENTS
        return (3 if weak else rank[k.role], -(k.share_removed or 0.0), k.cause)

    return sorted(out, key=order)  # the stated one first (choose)


def share_text(value: float) -> str:
    """A share as a percentage that never reads as the other side of PREVENTS: 0.498 is
    "49.8%", not "50%" beside a trigger stated as the root cause (and 0.5 stays "50%")."""
    for digits in range(4):
        text = f"{value * 100:.{digits}f}"
        if (float(text) >= PREVENTS * 100) == (value >= PREVENTS):
            return f"{text}%"
    return f"{value * 100:.6f}%"


def roles_sentence(contribs: list[Contribution]) -> str:
    """ "trigger rare_tokens (removes 100% of the logged spike ...); amplifier ..."."""
    parts = []
    for k in contribs:
        how = "share not measured" if k.share_removed is None else (
            f"its counterfactual removes {share_text(k.share_removed)} of the {k.measure}"
        )  # fmt: skip
        parts.append(f"{k.role} {k.cause} ({how}; probe {k.probe})")
    return "; ".join(parts)


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
        "SELECT incident_id, probe, hypothesis, verdict, detail, numbers FROM replays "
        "WHERE run_id = ?",
        [run_id],
    ).to_dicts()
    by_incident: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_incident.setdefault(int(r["incident_id"]), []).append(r)
    with store.transaction():
        for incident_id, inc_rows in by_incident.items():
            t = tested(inc_rows)
            best = _update_findings(store, run_id, incident_id, t)
            contribs = roles(t)
            _write_contributions(store, run_id, incident_id, contribs)
            _update_incident(store, run_id, incident_id, t, best, contribs)
            _settle_log_next(store, run_id, incident_id, t)


def _settle_log_next(store: Store, run_id: str, incident_id: int, t: dict[str, Tested]) -> None:
    """Mark the incident's `log_next` rows whose every separated cause replay has confirmed
    or refuted: detect asked for the metric to tell those causes apart (often the batch
    tokens, "for replay"), and replay has since told them apart, so the post-mortem must not
    still ask for it. Recomputed from detect's rows each time (idempotent)."""
    rows = store.con.execute(
        "SELECT rank, separates FROM log_next WHERE run_id = ? AND incident_id = ?",
        [run_id, incident_id],
    ).fetchall()
    for rank, separates in rows:
        causes = json.loads(separates) if separates else []
        settled = bool(causes) and all(verdict_of(c, t) in (CONFIRMED, REFUTED) for c in causes)
        store.con.execute(
            "UPDATE log_next SET settled_by_replay = ? "
            "WHERE run_id = ? AND incident_id = ? AND rank = ?",
            [settled, run_id, incident_id, rank],
        )


def _write_contributions(
    store: Store, run_id: str, incident_id: int, contribs: list[Contribution]
) -> None:
    store.con.execute(
        "DELETE FROM contributions WHERE run_id = ? AND incident_id = ?", [run_id, incident_id]
    )
    for k in contribs:
        store.con.execute(
            "INSERT INTO contributions (run_id, incident_id, cause, role, share_removed, probe, "
            "measure) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [run_id, incident_id, k.cause, k.role, k.share_removed, k.probe, k.measure],
        )


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
        verdict = verdict_of(f["cause"], t)
        conf = adjust(conf0, verdict)
        if verdict != NOT_RUN:
            evidence += [{"key": PRIOR + "confidence", "value": conf0, "note": "before replay"}]
            evidence += hit.notes if hit else _children_note(f["cause"], t)
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
    contribs: list[Contribution],
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
    cause, conf, rec = choose(cause0, conf0, rec0, t, best, contribs)
    verdict = t[cause].verdict if cause in t else INCONCLUSIVE
    evidence += [
        {"key": PRIOR + "cause", "value": cause0, "note": "cause before replay"},
        {"key": PRIOR + "confidence", "value": conf0, "note": "before replay"},
        {"key": PRIOR + "recovery", "value": rec0, "note": "before replay"},
        {"key": "replay.summary", "value": verdict, "note": summary(t)},
    ]
    if any(k.role != SOLE for k in contribs):
        value = [
            {"cause": k.cause, "role": k.role, "share_removed": k.share_removed,
             "measure": k.measure, "probe": k.probe}
            for k in contribs
        ]  # fmt: skip
        evidence += [{"key": "replay.roles", "value": value, "note": roles_sentence(contribs)}]
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
    contribs: list[Contribution] | None = None,
) -> tuple[str, float, str | None]:
    """The incident's cause, confidence and recovery after replay (see the module doc)."""
    v0 = verdict_of(cause0, t)
    own = (cause0, adjust(conf0, v0), rec0)
    if any(k.role == AMPLIFIER for k in contribs or []):
        # a confirmed trigger and amplifier: roles() put first the one whose fix prevents it
        amp = next(k for k in contribs or [] if k.role != SOLE)
        floor = adjust(0.0, CONFIRMED)
        pair = [best.get(k.cause, (floor, False, None))[0] for k in contribs or []]
        pair += [own[1]] if v0 == CONFIRMED else []
        _, _, rec = best.get(amp.cause, (floor, False, None))
        return amp.cause, max(pair), rec if rec is not None else rec0
    # a confirmed optimizer setting that roles() left out (beside a confirmed trigger its fix
    # removes none of the damage) is not kept: the other confirmed causes are weighed below
    named = {k.cause for k in contribs or []}
    inert = cause0 in AMPLIFIERS and bool(named) and cause0 not in named
    if v0 == CONFIRMED and cause0 in t and not inert:
        return own  # a parent confirmed through a child names the child
    confirmed = [c for c, x in t.items() if x.verdict == CONFIRMED and c != cause0]
    if confirmed:
        c = max(confirmed, key=lambda c: best.get(c, (0.5, False, None))[0])
        conf, _, rec = best.get(c, (adjust(0.0, CONFIRMED), False, None))
        return c, conf, rec if rec is not None else rec0
    if v0 == REFUTED:
        alive = [
            (conf, c, rec)
            for c, (conf, trig, rec) in best.items()
            if trig and c not in (cause0, UNKNOWN) and verdict_of(c, t) != REFUTED
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
