"""How much of an incident's damage an amplifier's fix removes, measured as it is defined.

An engineer who suspects a stale beta2 restarts from a checkpoint before the incident with
beta2 = 0.95 on the same batches (the trigger included) and asks how much of the damage is
gone. The damage is the loss the incident added on the *ordinary* batches that follow the
trigger, above where the run would have been without it. So, all three from one checkpoint
(`Checkpoint choice` below) through the window's last step, on the logged batches:

- the original: the run's own settings (the rows the runner replayed, when it restored that
  checkpoint; else re-run);
- the trigger-free continuation: the same run with the trigger taken out: the optimizer step
  of every *hard* batch is skipped (its gradients are dropped: no update, Adam's moments and
  step count untouched, the LR schedule moves on), as engineers skip bad batches. A hard
  batch is one whose own cost b(t), its loss on the counterfactual window-start model, is
  more than the noise allowance a above the pre-spike trend (or not finite): the batches
  `measure` leaves out of its ordinary ones (counterfactual.py);
- the fix: beta2 = 0.95 alone (no second-moment reset), every batch.

With d(t) = loss(t) - clean(t) on each ordinary batch after the first hard one (the same
batch in both runs, so its own difficulty cancels; a non-finite loss where the clean run is
finite counts as BIG): damage = max d over the original, damage_fixed = max d over the fix,
share removed = 1 - damage_fixed / damage (the simulator's `attribute` and
docs/definitions.md). It is not measured (None) when the original's damage is within the
noise allowance (the trigger leaves no echo to remove) or no ordinary batch follows it.

Checkpoint choice: the latest checkpoint at least SETTLE = 1 / (1 - 0.95) = 20 steps before
the first step of the incident, when the run has one no more than MAX_BACK = 4 x SETTLE steps
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
from dataclasses import dataclass, field
from typing import Any

from forensics.replay.context import Checkpoint
from forensics.replay.plan import BIG
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
from forensics.replay.verdicts import share_text
from forensics.sim.model import GPT

FIX_BETA2 = 0.95
SETTLE = round(1.0 / (1.0 - FIX_BETA2))  # steps for beta2 = 0.95's v to forget the old one
MAX_BACK = 4 * SETTLE  # no settled checkpoint further back than this: the restored one


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

    def _diffs(self, losses: list[float]) -> list[float]:
        return [added(x, c) for x, c in zip(losses, self.clean, strict=True)]

    def _peak(self, losses: list[float]) -> tuple[float, int | None]:
        d = self._diffs(losses)
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
        hurt, left = self.damage[0], self.damage_fixed[0]
        if not self.steps or hurt <= self.a:
            return None
        return 1.0 - left / hurt

    def numbers(self) -> dict[str, Any]:
        (hurt, at), (left, at_fixed) = self.damage, self.damage_fixed
        return {
            "fix_checkpoint_step": self.checkpoint_step, "fix_end_step": self.end_step,
            "fix_changes": self.changes, "fix_hard_steps": self.hard_steps,
            "fix_steps": self.steps, "fix_original_loss": self.original,
            "fix_fixed_loss": self.fixed, "fix_trigger_free_loss": self.clean,
            "fix_damage": hurt, "fix_damage_step": at, "fix_damage_fixed": left,
            "fix_damage_fixed_step": at_fixed, "fix_noise_allowance": self.a,
            "fix_share_removed": self.share,
        }  # fmt: skip

    def sentence(self) -> str:
        (hurt, at), (left, at_fixed) = self.damage, self.damage_fixed
        hard = _span(self.hard_steps)
        head = (
            f"restarted from the checkpoint of step {self.checkpoint_step} with beta2 = "
            f"{self.changes.get('beta2', FIX_BETA2):g} alone on the same batches, "
        )
        if self.share is None:
            why = "no ordinary batch follows the trigger in the window" if not self.steps else (
                f"the trigger adds {hurt:.3g} at most above the run without it (batches "
                f"{hard} skipped), within the noise allowance {self.a:.3g}"
            )  # fmt: skip
            return head + f"the fix's share is not measured: {why}"
        return head + (
            f"the fix removes {share_text(self.share)} of the damage: the largest loss above "
            f"the run without the trigger (batches {hard} skipped) on the ordinary batches through "
            f"step {self.end_step} is {left:.3g} (step {at_fixed}) instead of {hurt:.3g} "
            f"(step {at})"
        )


def added(loss: float, clean: float) -> float:
    """loss(t) - clean(t) on one batch; a non-finite loss above a finite clean one is BIG."""
    if not math.isfinite(clean):
        return 0.0
    if not math.isfinite(loss):
        return BIG
    return loss - clean


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])
    return ", ".join(str(t) for t in steps)


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


def measure_fix(s: Session, changes: dict[str, Any]) -> FixShare | None:
    """The fix's share of the damage (module doc); None when no checkpoint can be used (the
    state could not be rebuilt, or the run is replayed through its own trainer)."""
    ckpt = fix_checkpoint(s)
    if ckpt is None or s.start is None or s.replayer is not None:
        return None
    end = s.plan.end
    window = list(range(ckpt.step + 1, end + 1))
    costs = batch_costs(s, window)
    hard = [t for t in window if not is_ordinary(s, costs[t])]
    if s.resumed_step == ckpt.step and all(t in s.rows for t in window):
        original = {t: s.rows[t] for t in window}
    else:
        original = _from(s, ckpt, {}, [])
    fixed = _from(s, ckpt, changes, [])
    clean = _from(s, ckpt, {}, hard)
    after = [t for t in window if hard and t > hard[0] and t not in hard]
    steps = [t for t in after if t in original and t in fixed and t in clean]

    def loss(rows: dict[int, StepRow]) -> list[float]:
        return [float(rows[t]["loss"]) for t in steps]

    return FixShare(
        ckpt.step, end, hard, steps, loss(original), loss(fixed), loss(clean),
        noise_allowance(s), changes,
    )  # fmt: skip


def _from(
    s: Session, ckpt: Checkpoint, changes: dict[str, Any], skip: list[int]
) -> dict[int, StepRow]:
    """The window from `ckpt` through plan.end with `changes`, the `skip` steps skipped."""
    state = set_hparams(restore(ckpt, s.device), **changes)
    rows = advance(state, s.data, s.plan.end, [SkipUpdate(t) for t in skip])
    return {int(r["step"]): r for r in rows}
