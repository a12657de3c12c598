"""How far outside its own run's loss noise a lone jump is, when the gradient cannot say.

A loss-only log (or one whose gradient norm is not logged every step) cannot show a lone
jump's gradient, so the quiet-gradient test (quiet.quiet_jumps) has nothing to read.
What the log does hold is thousands of screened residuals, and they say how heavy the run's
tail is:

- the residuals of every screened point that is no candidate and lies outside every
  incident, in noise scales (z = resid / sigma, the screen's own statistic), give the
  exceedances of TAIL_Z (m of them among N points);
- a power-law (Pareto) tail fitted on them (Hill's estimator,
  alpha = m / sum(log(z_i / TAIL_Z))) extrapolates the expected number of points at least
  as high as the jump over the run's n screened points:
  lambda = m * (n / N) * (z / TAIL_Z) ** -alpha;
- the chance that the run's own variation puts such a point somewhere in it is
  1 - exp(-lambda).

This is stored as evidence on the incident (`noise_tail`), not used to drop it. On the real
logs the documented data spikes sit inside their runs' tails: modded-nanogpt's
train_loss is one micro-batch's loss, its batch-to-batch variation is heavy-tailed because
of hard batches, and the spikes that recur at the same step across runs sharing a data
order (946/947, 4454, 14221) get chances of 60-100% from this estimate. A tail test that
made such jumps near-misses would remove exactly the spikes users come for; what the
estimate can honestly say is how routine a jump is for its run, and that the gradient norm
logged every step would tell a hard batch from the run's variation.

A light-tailed run (Gaussian noise has a handful of points beyond 3 scales in ten
thousand) has fewer than MIN_EXCEEDANCES: too few to fit a tail on, nothing is said (a
power law would overstate a Gaussian tail).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forensics.detect.data import RunData
from forensics.detect.model import Evidence, Incident
from forensics.detect.quiet import gradient_speaks
from forensics.detect.screen import Screen

# The tail is fitted above this many noise scales: far enough out for a power law, close
# enough in that a run of a few thousand heavy-tailed points has tens of exceedances.
TAIL_Z = 3.0
# Hill's tail index is good to about 1/sqrt(m): ~15% from 40 exceedances.
MIN_EXCEEDANCES = 40
# Points either side of an incident's span kept out of the noise sample (its echo).
MARGIN_POINTS = 10
# From this chance the jump is routine for its run (not significant at 5%).
ROUTINE_CHANCE = 0.05


@dataclass(frozen=True)
class NoiseTail:
    """The upper tail of a run's screened loss residuals, in noise scales."""

    points: int  # noise points the tail was read from
    run_points: int  # screened points of the run (the length chance is counted over)
    exceedances: int  # points of the sample beyond TAIL_Z
    alpha: float | None  # Hill's tail index (None: fewer than MIN_EXCEEDANCES)

    def expected(self, z: float) -> float:
        """Expected number of points at least `z` over the run's screened length."""
        if self.alpha is None or not self.points:
            return 0.0
        rate = self.exceedances / self.points  # per noise point, beyond TAIL_Z
        return rate * self.run_points * (max(z, TAIL_Z) / TAIL_Z) ** -self.alpha

    def chance(self, z: float) -> float:
        """Chance that the run's own variation puts a point at least `z` somewhere in it."""
        return float(-np.expm1(-self.expected(z)))


def noise_tail(sc: Screen, incidents: list[Incident]) -> NoiseTail:
    """Fit the tail on every screened point that is no candidate, not far below the trend,
    and no part of an incident (its span, and MARGIN_POINTS either side)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = sc.lift / sc.sigma  # as the point test reads a point
    keep = np.isfinite(z) & ~sc.flagged & ~sc.low
    keep[: sc.burn_in] = False
    for inc in incidents:
        a = int(np.searchsorted(sc.steps, inc.onset_step))
        b = int(np.searchsorted(sc.steps, inc.span_end, side="right"))
        keep[max(0, a - MARGIN_POINTS) : b + MARGIN_POINTS] = False
    zz = z[keep]
    ex = zz[zz > TAIL_Z]
    alpha = None
    if len(ex) >= MIN_EXCEEDANCES:
        alpha = float(len(ex) / np.sum(np.log(ex / TAIL_Z)))
    run_points = max(0, len(z) - sc.burn_in)
    return NoiseTail(int(len(zz)), run_points, int(len(ex)), alpha)


def tail_evidence(
    sc: Screen, incidents: list[Incident], lone: list[Incident], data: RunData
) -> None:
    """Add a `noise_tail` finding to each lone jump (quiet.lone_jump) whose gradient is
    not logged every step, when the run's tail can be fitted."""
    judged = [i for i in lone if not gradient_speaks(i, data)]
    if not judged or not sc.log_space:
        return
    tail = noise_tail(sc, incidents)
    if tail.alpha is None:
        return
    for inc in judged:
        i = int(np.searchsorted(sc.steps, inc.peak_step))
        if i < len(sc.steps) and int(sc.steps[i]) == inc.peak_step:
            z = float(sc.lift[i] / sc.sigma[i])
            inc.evidence.append(_finding(z, tail))


def _finding(z: float, tail: NoiseTail) -> Evidence:
    chance, expected = tail.chance(z), tail.expected(z)
    fit = (
        f"{tail.exceedances} of {tail.points} noise points beyond {TAIL_Z:g} noise scales, "
        f"tail index {tail.alpha:.1f}"
    )
    if chance >= ROUTINE_CHANCE:
        note = (
            f"{z:.0f} noise scales above the level before it, routine for this run: its own "
            f"tail ({fit}) expects {expected:.2g} points this high over its {tail.run_points} "
            "screened "
            f"points (chance of at least one {chance:.0%}). With no gradient norm logged at "
            "this step the log cannot tell a hard batch from that heavy-tailed batch-to-batch "
            "variation (the gradient norm logged every step would)"
        )
    else:
        note = (
            f"{z:.0f} noise scales above the level before it, beyond this run's own tail "
            f"({fit}): its variation puts a point this high in a run this long with chance "
            f"{chance:.1g}"
        )
    return Evidence("noise_tail", float(f"{chance:.3g}"), note)
