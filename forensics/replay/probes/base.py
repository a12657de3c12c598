"""What every probe receives: the run's data, the plan, and the replayed states.

The runner replays the logged steps once (from the checkpoint to the end of the window) and
keeps two snapshots: the state before the offending step (`pre`, for batch probes) and the
state at the start of the counterfactual window (`start`, for optimizer probes). Probes that
need a state get `unavailable` instead when it could not be rebuilt, and say so.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from forensics.replay.context import RunData
from forensics.replay.measure import Batch
from forensics.replay.plan import Plan
from forensics.replay.result import INCONCLUSIVE, ReplayResult
from forensics.replay.state import StateUnavailable, StepRow, load_batch
from forensics.sim.trainer import TrainState


class Replayer(Protocol):
    """The optimizer counterfactuals' access to a trainer other than the bundled one (the
    run's own Hugging Face Trainer, a nanoGPT loop): the window start is `plan.start`, and
    `s.rows` hold the original re-run's rows (loss, update_norm, lr per step)."""

    beta2: float | None  # the run's AdamW beta2
    lr_note: str  # what the LR counterfactual scales ("the logged LR", "the schedule")

    def rerun(
        self,
        beta2: float | None,
        lr_factor: float,
        reset_at: int | None,
        *,
        substitute: Mapping[int, int] | None = None,
        skip: Collection[int] = (),
    ) -> dict[int, Any]:
        """The window re-run from its start with beta2 / the LR changed (rows by step); a
        step in `substitute` trains the batch of the step it maps to instead of its own, a
        step in `skip` makes no update (the fix's run without the trigger, fix_share.py)."""
        ...

    def cost(self, step: int) -> float:
        """b(t): the mean loss of step t's batch on the window-start model."""
        ...


@dataclass
class Session:
    data: RunData
    plan: Plan
    device: torch.device
    pre: TrainState | None = None  # after step plan.offending - 1
    start: TrainState | None = None  # after step plan.start
    rows: dict[int, StepRow] = field(default_factory=dict)  # replayed steps, run's settings
    checkpoint_step: int | None = None
    resumed_step: int | None = None  # the step the re-run started from (checkpoint or cache)
    unavailable: str | None = None  # why no state could be rebuilt
    costs: dict[int, float] | None = None  # window batch losses on the start state (cache)
    replayer: Replayer | None = None  # counterfactuals through the run's own trainer

    @property
    def run_id(self) -> str:
        return self.data.run_id

    @property
    def incident_id(self) -> int:
        return self.plan.incident.incident_id

    def result(
        self, probe: str, hypothesis: str, verdict: str, numbers: dict[str, Any], detail: str
    ) -> ReplayResult:
        return ReplayResult(
            self.run_id, self.incident_id, probe, hypothesis, verdict, numbers, detail,
            str(self.device),
        )  # fmt: skip

    def batch(self, step: int) -> Batch:
        return load_batch(self.data, step, self.device)

    def offending(self, probe: str, hypothesis: str) -> tuple[TrainState, Batch] | ReplayResult:
        """The state before the offending step and its batch, or the `inconclusive` row
        saying why a batch probe cannot run (no state rebuilt, batch unreadable)."""
        if self.pre is None:
            return self.result(probe, hypothesis, INCONCLUSIVE, {}, f"not run: {self.unavailable}")
        try:
            return self.pre, self.batch(self.plan.offending)
        except StateUnavailable as exc:
            return self.result(probe, hypothesis, INCONCLUSIVE, {}, f"not run: {exc}")

    def control_batches(self) -> list[Batch]:
        """The control batches that can be read (an unreadable control is just left out)."""
        out = []
        for step in self.plan.controls:
            try:
                out.append(self.batch(step))
            except StateUnavailable:
                continue
        return out


def mean(values: list[float]) -> float:
    vals = [v for v in values if math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def median(values: list[float]) -> float:
    """Median of the finite values: one odd control batch cannot move it."""
    vals = sorted(v for v in values if math.isfinite(v))
    if not vals:
        return math.nan
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else 0.5 * (vals[mid - 1] + vals[mid])


def ratio(a: float, b: float) -> float:
    """a / b, with 0 / 0 = 1 and x / 0 = inf (ratios vs control batches)."""
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b
