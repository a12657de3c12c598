"""How much of an incident's damage an amplifier's fix removes, measured as it is defined.

An engineer who suspects a stale beta2 restarts from a checkpoint before the incident with
beta2 = 0.95 on the same batches (the trigger included) and asks how much of the damage is
gone. The damage is the loss the incident added on the *ordinary* batches that follow the
trigger, above where the run would have been without it. So, all three from one checkpoint
(`Checkpoint choice` below) through the window's last step, on the logged batches:

- the original: the run's own settings (the rows the runner replayed, when it restored that
  checkpoint; else re-run);
- the run without the trigger: the same run with an *ordinary* batch of the run's own data
  trained at each *hard* step instead of the hard batch, batch for batch, as the definition's
  run without the burst trains the ordinary batches its loader gives there
  (docs/definitions.md).
  A hard batch is one whose own cost b(t), its loss on the counterfactual window-start model,
  is more than the noise allowance a above the pre-spike trend (or not finite): the batches
  `measure` leaves out of its ordinary ones (counterfactual.py). The ordinary batches come
  from the steps right after the window (`ordinary_batches`): none of the three re-runs
  trains them, so, like the batches the run without the burst sees, they are new to the
  model. Only where the source has no ordinary batch left is the hard step's optimizer update
  skipped instead (its gradients dropped: no update, Adam's moments and step count untouched,
  the LR schedule moves on), and the stored row says which baseline it was (`fix_baseline`);
- the fix: beta2 = 0.95 alone (no second-moment reset), every batch.

With d(t) = loss(t) - clean(t) on each ordinary batch after the first hard one (the same
batch in both runs, so its own difficulty cancels; a non-finite loss where the clean run is
finite counts as BIG): damage = max d over the original, damage_fixed = max d over the fix,
share removed = 1 - damage_fixed / damage (the simulator's `attribute` and
docs/definitions.md). It is not measured (None) when the original's damage is within the
noise allowance (the trigger leaves no echo to remove) or no ordinary batch follows it.
Which ordinary batches stand in for the trigger moves the share by a few points, so the run
without the trigger is trained with up to DRAWS sets of them (the next ordinary batches each
time; only sets that need no skipped update): the first set's share decides, as before, and
the spread over the draws is stored (`fix_share_draws`, `fix_share_spread`) and printed,
saying so when the draws fall on both sides of half (the batch and beta2 matter about
equally: which is stated root cause is then within the measurement's own spread). All
three re-runs go through one trainer: the bundled one (`restore` + `advance`), or the run's
own (`Replayer.rerun`: its Hugging Face Trainer, the nanoGPT loop); `measure_fix` measures
the share for every path.

Checkpoint choice (a run's own trainer restarts from the checkpoint its replay restored, the
window's start): the latest checkpoint at least SETTLE = 1 / (1 - 0.95) = 20 steps before the
first step of the incident, when the run has one no more than MAX_BACK = 4 x SETTLE steps
before it (an older one would cost three long re-runs, and the fixed run's own trajectory
would drift from the original's before the trigger comes), else the one the runner restored. A
run restarted with beta2 = 0.95 keeps the old run's second moment, an average over ~1000
steps whose bias correction jumps at once from 1 - 0.999**t to 1 - 0.95**t; it takes about
1 / (1 - 0.95) steps for v to become the fixed run's own average. A restart two steps before
the trigger measures that switch, not the fixed optimizer the engineer would be running when
the trigger comes again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forensics.replay.context import Checkpoint
from forensics.replay.hf_data import DataUnavailable
from forensics.replay.plan import BIG, fmt_steps
from forensics.replay.probes.base import Session
from forensics.replay.probes.counterfactual import batch_costs, is_ordinary, noise_allowance
from forensics.replay.state import (
    StateUnavailable,
    StepRow,
    advance,
    pick_checkpoint,
    restore,
    set_hparams,
    usable,
)
from forensics.replay.verdicts import share_text, spread_text
from forensics.sim.model import GPT

FIX_BETA2 = 0.95
SETTLE = round(1.0 / (1.0 - FIX_BETA2))  # steps for beta2 = 0.95's v to forget the old one
MAX_BACK = 4 * SETTLE  # no settled checkpoint further back than this: the restored one
LOOK = 4  # ordinary batches are looked for among LOOK x (hard steps) steps on each side
# Which ordinary batches stand in for the trigger moves the share by a few points (62-69% on
# the stale_beta2 sample): it is measured with DRAWS sets of stand-ins, the first decides,
# and the page gives the spread (FixShare.spread).
DRAWS = 3

# One re-run from the fix's checkpoint through plan.end: (config changes, hard step -> the
# step whose logged batch it trains instead, hard steps whose update is skipped) -> rows.
Rerun = Callable[[dict[str, Any], Mapping[int, int], list[int]], dict[int, StepRow]]


@dataclass
class SkipUpdate:
    """A trainer `Fault` that drops every gradient at `step`: the optimizer makes no update
    (AdamW leaves a parameter without a gradient untouched, moments and step count
    included), the batch's loss is still computed and logged."""

    step: int

    def apply(self, model: GPT) -> dict[str, Any]:
        for p in model.parameters():
            p.grad = None
        return {"skipped_update": True}


@dataclass
class Baseline:
    """How the run without the trigger replaces each hard step: by the ordinary batch logged
    at another step (`substitute`: hard step -> that step), or, where the source has no
    ordinary batch left, by skipping the step's update (`skipped`)."""

    substitute: dict[int, int] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.substitute and self.skipped:
            return "ordinary batches and skipped updates"
        return "skipped updates" if self.skipped else "ordinary batches"

    def text(self) -> str:
        parts = []
        if self.substitute:
            hard, used = fmt_steps(list(self.substitute)), fmt_steps([*self.substitute.values()])
            parts.append(f"batches {hard} replaced by the ordinary batches of steps {used}")
        if self.skipped:
            parts.append(
                f"the updates of batches {fmt_steps(self.skipped)} skipped (no ordinary batch left)"
            )
        return " and ".join(parts) or "no hard batch"


@dataclass
class FixShare:
    """The numbers behind the share (module doc); the lists are aligned with `steps`."""

    checkpoint_step: int
    end_step: int
    hard_steps: list[int]
    steps: list[int]  # the ordinary batches compared: after the first hard one
    original: list[float]
    fixed: list[float]
    clean: list[float]
    a: float
    changes: dict[str, Any] = field(default_factory=dict)
    baseline: Baseline = field(default_factory=Baseline)
    other_clean: list[list[float]] = field(default_factory=list)  # the other draws' runs

    def _diffs(self, losses: list[float], clean: list[float]) -> list[float]:
        return [added(x, c) for x, c in zip(losses, clean, strict=True)]

    def _peak(
        self, losses: list[float], clean: list[float] | None = None
    ) -> tuple[float, int | None]:
        """The largest loss above the run without the trigger (this baseline's, or another
        draw's `clean`) and its step."""
        d = self._diffs(losses, self.clean if clean is None else clean)
        if not d:
            return 0.0, None
        i = max(range(len(d)), key=d.__getitem__)
        return max(0.0, d[i]), self.steps[i]

    @property
    def damage(self) -> tuple[float, int | None]:
        return self._peak(self.original)

    @property
    def damage_fixed(self) -> tuple[float, int | None]:
        return self._peak(self.fixed)

    @property
    def share(self) -> float | None:
        return self._share(self.clean)

    def _share(self, clean: list[float]) -> float | None:
        hurt = self._peak(self.original, clean)[0]
        if not self.steps or hurt <= self.a:
            return None
        return 1.0 - self._peak(self.fixed, clean)[0] / hurt

    @property
    def draws(self) -> list[float | None]:
        """The share with each set of stand-ins, this baseline's first (DRAWS)."""
        return [self._share(c) for c in (self.clean, *self.other_clean)]

    @property
    def spread(self) -> tuple[float, float] | None:
        """Lowest and highest share over the draws (clipped as verdicts.share stores them),
        when more than one was measured."""
        got = [min(1.0, max(0.0, x)) for x in self.draws if x is not None]
        return (min(got), max(got)) if len(got) > 1 else None

    def numbers(self) -> dict[str, Any]:
        (hurt, at), (left, at_fixed) = self.damage, self.damage_fixed
        return {
            "fix_checkpoint_step": self.checkpoint_step, "fix_end_step": self.end_step,
            "fix_changes": self.changes, "fix_hard_steps": self.hard_steps,
            "fix_baseline": self.baseline.kind,
            "fix_substitutes": {str(t): u for t, u in self.baseline.substitute.items()},
            "fix_skipped_steps": self.baseline.skipped,
            "fix_steps": self.steps, "fix_original_loss": self.original,
            "fix_fixed_loss": self.fixed, "fix_trigger_free_loss": self.clean,
            "fix_damage": hurt, "fix_damage_step": at, "fix_damage_fixed": left,
            "fix_damage_fixed_step": at_fixed, "fix_noise_allowance": self.a,
            "fix_share_removed": self.share, "fix_share_draws": self.draws,
            "fix_share_spread": None if self.spread is None else list(self.spread),
        }  # fmt: skip

    def sentence(self) -> str:
        (hurt, at), (left, at_fixed) = self.damage, self.damage_fixed
        without = f"the run without the trigger ({self.baseline.text()})"
        head = (
            f"restarted from the checkpoint of step {self.checkpoint_step} with beta2 = "
            f"{self.changes.get('beta2', FIX_BETA2):g} alone on the same batches, "
        )
        if self.share is None:
            why = "no ordinary batch follows the trigger in the window" if not self.steps else (
                f"the trigger adds {hurt:.3g} at most above {without}, within the noise "
                f"allowance {self.a:.3g}"
            )  # fmt: skip
            return head + f"the fix's share is not measured: {why}"
        removes = (
            f"the fix removes {share_text(self.share)} of the damage"
            if self.share > 0
            else "the fix removes none of the damage (0%; it did as much or more)"
        )
        return (
            head
            + (
                f"{removes}: the largest loss above {without} on the ordinary batches through "
                f"step {self.end_step} is {left:.3g} (step {at_fixed}) instead of {hurt:.3g} "
                f"(step {at})"
            )
            + spread_text(self.spread, len(self.draws))
        )


def added(loss: float, clean: float) -> float:
    """loss(t) - clean(t) on one batch; a non-finite loss above a finite clean one is BIG."""
    if not math.isfinite(clean):
        return 0.0
    if not math.isfinite(loss):
        return BIG
    return loss - clean


def fix_checkpoint(s: Session) -> Checkpoint | None:
    """The checkpoint the fix restarts from (module doc): the latest usable one at least
    SETTLE (and at most MAX_BACK) steps before the incident's first step, else the one the
    runner restored."""
    first = min(s.plan.incident.onset, s.plan.offending)
    try:
        settled = pick_checkpoint(s.data, first - SETTLE + 1)
        if settled.step >= first - MAX_BACK:
            return settled
    except StateUnavailable:
        pass
    restored = [c for c in s.data.checkpoints if c.step == s.checkpoint_step and usable(c)]
    return restored[-1] if restored else None


def ordinary_batches(s: Session, hard: list[int], first: int, end: int, skip: int = 0) -> Baseline:
    """The run without the trigger's batch at each hard step (module doc): the ordinary
    batches logged right after the re-runs' last step `end` (none of them trains them),
    nearest first, then those right before their first step `first`; a hard step left
    without one is skipped. Ordinary as `measure` means it: b(t) within the noise
    allowance of the pre-spike trend. `skip`: the first ordinary batches found are passed
    over (another draw of stand-ins, `DRAWS`)."""
    n = LOOK * len(hard) + skip
    later = range(end + 1, end + 1 + n)
    earlier = range(first - 1, max(0, first - 1 - n), -1)
    picked: list[int] = []
    for t in [*later, *earlier]:
        if len(picked) == len(hard) + skip:
            break
        if t not in s.data.records:
            continue
        try:
            cost = batch_costs(s, [t])[t]
        except (StateUnavailable, DataUnavailable):  # a batch the source cannot give
            continue
        if is_ordinary(s, cost):
            picked.append(t)
    picked = picked[skip:]
    return Baseline(dict(zip(hard, picked, strict=False)), hard[len(picked) :])


def measure_fix(s: Session, changes: dict[str, Any]) -> FixShare | None:
    """The fix's share of the damage (module doc), through whichever trainer replays the run;
    None when no checkpoint can be used (the state could not be rebuilt)."""
    runner = _runner(s)
    if runner is None:
        return None
    start, rerun = runner
    end = s.plan.end
    window = list(range(start + 1, end + 1))
    costs = batch_costs(s, window)
    hard = [t for t in window if not is_ordinary(s, costs[t])]
    if s.resumed_step == start and all(t in s.rows for t in window):
        original = {t: s.rows[t] for t in window}
    else:
        original = rerun({}, {}, [])
    fixed = rerun(changes, {}, [])
    base = ordinary_batches(s, hard, start + 1, end)
    clean = rerun({}, base.substitute, base.skipped)
    others = [rerun({}, b.substitute, []) for b in other_draws(s, hard, start + 1, end, base)]
    after = [t for t in window if hard and t > hard[0] and t not in hard]
    runs = (original, fixed, clean, *others)
    steps = [t for t in after if all(t in r and "loss" in r[t] for r in runs)]

    def loss(rows: dict[int, StepRow]) -> list[float]:
        return [float(rows[t]["loss"]) for t in steps]

    return FixShare(
        start, end, hard, steps, loss(original), loss(fixed), loss(clean),
        noise_allowance(s), changes, base, [loss(r) for r in others],
    )  # fmt: skip


def other_draws(
    s: Session, hard: list[int], first: int, end: int, base: Baseline
) -> list[Baseline]:
    """Up to DRAWS - 1 more sets of stand-ins, the next ordinary batches after those `base`
    took; only complete ones (no skipped update) and only when `base` is one."""
    if not hard or base.skipped:
        return []
    out = []
    for i in range(1, DRAWS):
        b = ordinary_batches(s, hard, first, end, skip=i * len(hard))
        if b.skipped:
            break
        out.append(b)
    return out


def _runner(s: Session) -> tuple[int, Rerun] | None:
    """The step the fix's re-runs start after, and how to re-run from there: the run's own
    trainer from the checkpoint its replay restored (the window's start), else the bundled
    trainer from `fix_checkpoint`."""
    replayer = s.replayer
    if replayer is not None:

        def own(
            changes: dict[str, Any], sub: Mapping[int, int], skip: list[int]
        ) -> dict[int, StepRow]:
            return replayer.rerun(changes.get("beta2"), 1.0, None, substitute=sub, skip=skip)

        return s.plan.start, own
    ckpt = fix_checkpoint(s)
    if ckpt is None or s.start is None:
        return None

    def bundled(
        changes: dict[str, Any], sub: Mapping[int, int], skip: list[int]
    ) -> dict[int, StepRow]:
        state = set_hparams(restore(ckpt, s.device), **changes)
        rows = advance(state, s.data, s.plan.end, [SkipUpdate(t) for t in skip], substitute=sub)
        return {int(r["step"]): r for r in rows}

    return ckpt.step, bundled
