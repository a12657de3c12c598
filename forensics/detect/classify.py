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

import numpy as np

from forensics.detect.config import DetectConfig
from forensics.detect.data import RunData, logged_lr_top, number
from forensics.detect.model import Evidence, Finding, Incident
from forensics.detect.rules import Rule

COMPETE_MARGIN = 0.2
# "end of warm-up": the onset is within this fraction of the warm-up length (at least
# END_OF_WARMUP_MIN_STEPS) of the step where the LR first reached its peak.
END_OF_WARMUP_FRACTION = 0.1
END_OF_WARMUP_MIN_STEPS = 20
PEAK_LR_FRACTION = 0.98  # "at its peak": within 2% of the run's highest LR
# After the peak, the LR is in its decay below this share of the peak: the band the
# features' `lr_phase` and the lr-too-high rule call "at its peak", so that a page never
# says "decay" beside evidence that says "peak".
DECAY_FRACTION = 0.9


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


def lr_phase(inc: Incident, data: RunData) -> None:
    """Where the LR schedule was at the onset: inc.lr_phase, lr_at_onset, lr_peak_step.

    warm-up (LR still rising, onset well before the peak), end of warm-up (onset within
    10% of the warm-up length, >= 20 steps, of the first step at the peak LR), peak (at
    90% of the peak LR or more after that, or anywhere at that level when the logged LR
    starts at its top: no warm-up in the log), decay (LR below 90% of its peak after it),
    constant (the LR never changed), unknown (no `lr` logged and no `warmup_steps` in the
    config). A logged LR that does not cover the onset (data.lr_covers: a value printed
    once, or a log of it that stopped) counts as not logged there. With the LR known from
    the config only, past the warm-up the schedule the config names decides peak or decay
    (the `lr_frac` feature, read from it before this); a config without one gives "after
    warm-up": a cosine run had been called at its "peak" at 57% of it.
    """
    warm_cfg = number(data.config.get("warmup_steps"))
    if not data.lr_covers(inc.onset_step):
        if warm_cfg:
            inc.lr_peak_step = int(warm_cfg)
            inc.lr_phase = _config_phase(inc, warm_cfg)
        return
    lr = data.aux["lr"]
    ok = np.isfinite(lr.values)
    if not ok.any():
        return
    st, v = lr.steps[ok], lr.values[ok]
    at = lr.at_or_before(inc.onset_step)
    inc.lr_at_onset = at
    found = logged_lr_top(lr, PEAK_LR_FRACTION)
    if found is None:  # the log ends while the LR still climbs: its peak is past the log
        inc.lr_phase = "warm-up"
        return
    top, peak_step = found
    inc.lr_peak_step = peak_step
    if float(v.min()) >= PEAK_LR_FRACTION * top:
        inc.lr_phase = "constant"
    elif at is not None and inc.onset_step > peak_step and at < DECAY_FRACTION * top:
        inc.lr_phase = "decay"
    elif peak_step == int(st[0]) and inc.onset_step >= peak_step:
        # the logged LR starts at its top and only falls (a log that begins after the
        # warm-up, a schedule without one): no warm-up in sight, so none ending here
        inc.lr_phase = "peak"
    else:
        inc.lr_phase = _phase_by_step(inc.onset_step, float(peak_step))


def _config_phase(inc: Incident, warm: float) -> str:
    """Past the warm-up, the phase of the LR the features read from the config's schedule
    at the onset (`lr_frac`, features._optimizer): one reading for the page and the rules."""
    phase = _phase_by_step(inc.onset_step, warm)
    if phase != "peak":
        return phase
    frac = inc.features.get("lr_frac")
    if not isinstance(frac, int | float):
        return "after warm-up"
    return "peak" if frac >= DECAY_FRACTION else "decay"


def _phase_by_step(onset: int, peak_step: float) -> str:
    near = max(END_OF_WARMUP_MIN_STEPS, END_OF_WARMUP_FRACTION * peak_step)
    if abs(onset - peak_step) <= near:
        return "end of warm-up"
    return "warm-up" if onset < peak_step else "peak"
