"""The incident record that every detection module fills in, and its vocabularies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the vocabularies here stay free of numpy
    from forensics.detect.events import Event
    from forensics.detect.typing import Shape, Trend

CAUSES = (
    "rare_tokens",
    "stale_beta2",
    "lr_too_high",
    "fp16_overflow",
    "data_corruption",
    "hardware_fault",
    # The parent of rare_tokens and data_corruption: the batch caused it, but the log
    # cannot say which of the two (no gradient norm, no batch tokens). See BATCH_DRIVEN.
    "batch_driven",
    "unknown",
)
# Causes a coarser cause stands for: naming the child is more precise, never a contradiction.
PARENT = {"rare_tokens": "batch_driven", "data_corruption": "batch_driven"}
CAUSE_TITLES = {
    "batch_driven": "batch-driven (rare tokens or corrupt data: not separable from this log)",
}
STATUSES = ("supported", "against", "not_evaluable")
RECOVERIES = ("continue", "skip_batch", "restart_from_checkpoint", "lower_lr", "data_swap")

FeatureValue = float | str | None


@dataclass
class Evidence:
    """One number (or string) a verdict used: rendered by the report as key = value (note)."""

    key: str
    value: float | str | None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "note": self.note}


@dataclass
class Finding:
    """One rule evaluated on one incident, triggered or not."""

    rule_id: str
    cause: str
    triggered: bool
    confidence: float
    recovery: str | None
    evidence: list[Evidence] = field(default_factory=list)
    # the condition was neither true nor false (three-valued: it turns on a missing feature)
    undecided: bool = False


@dataclass
class Hypothesis:
    """One cause for one incident, weighed on the evidence the log has.

    status: supported (a rule for it fired), against (the log refutes it), not_evaluable
    (what would decide it was not logged: `needs` names it)."""

    cause: str
    status: str
    confidence: float
    rule_id: str
    reason: str
    needs: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    rank: int = 0


@dataclass
class LogNext:
    """A metric whose absence kept causes apart, and which causes it would separate."""

    metric: str
    separates: list[str]
    why: str


@dataclass
class Incident:
    id: int
    metric: str
    origin: str  # "loss": a loss excursion; "events": non-finite values / scaler events only
    onset_step: int
    peak_step: int
    peaks: list[tuple[int, float]]  # (step, value) of every peak merged into the incident
    trend: Trend
    sigma: float
    shape: Shape
    pre_value: float | None = None
    peak_value: float | None = None
    events: list[Event] = field(default_factory=list)
    breakpoints: list[int] = field(default_factory=list)
    settle_step: int | None = None
    climb: bool = False  # holds a warm-up climb (detector.warmup_rise)
    grad_norm_peak: float | None = None
    grad_norm_peak_step: int | None = None
    grad_norm_baseline: float | None = None  # median grad norm of the precursor window
    features: dict[str, FeatureValue] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    reports: list[Evidence] = field(default_factory=list)  # the log's own lines (events.py)
    hypotheses: list[Hypothesis] = field(default_factory=list)
    log_next: list[LogNext] = field(default_factory=list)
    cause: str = "unknown"
    confidence: float = 0.0
    recovery: str = "continue"
    restart_checkpoint_step: int | None = None
    steps_lost: int | None = None
    tokens_lost: float | None = None
    gpu_hours_lost: float | None = None
    cost_usd: float | None = None
    # Decided once here (docs/definitions.md) and only rendered by the report:
    recovery_step: int | None = None  # first step back on the pre-spike trend (type 1 only)
    # Stretches off the pre-spike trend, (first step, first step back) each; back is None for
    # the last one of a lingering/divergent incident. Steps lost is their total (recovery.py).
    off_trend: list[tuple[int, int | None]] = field(default_factory=list)
    severity: str = "minor"  # minor < moderate < major < critical, from the cost
    # warm-up, end of warm-up, peak, decay, constant, after warm-up (config: no schedule), unknown
    lr_phase: str = "unknown"
    lr_at_onset: float | None = None
    lr_peak_step: int | None = None
    seconds_per_step: float | None = None  # the factors the cost was priced with
    tokens_per_step: float | None = None
    world_size: float | None = None

    @property
    def type(self) -> str:
        return self.shape.type

    @property
    def end_step(self) -> int | None:
        return self.shape.end_step

    @property
    def post_value(self) -> float | None:
        return self.shape.post_value

    @property
    def last_peak_step(self) -> int:
        return max(s for s, _ in self.peaks) if self.peaks else self.peak_step

    @property
    def span_end(self) -> float:
        """Last step that belongs to the incident: recovery, else the end of its window."""
        return float(self.end_step) if self.end_step is not None else self.shape.window_end


@dataclass
class NearMiss:
    step: int
    metric: str
    value: float
    baseline: float
    ratio: float
    detail: str


@dataclass
class Detection:
    """Everything detect found in one run."""

    run_id: str
    incidents: list[Incident]
    near_misses: list[NearMiss]
    missing_metrics: list[str]
    last_step: int
    notes: list[str] = field(default_factory=list)
    coverage: Any = None  # coverage.Coverage: what the screen did not look at
    cost: Any = None  # recovery.RunCost: the compute lost, each step counted once
    rollbacks: list[Any] = field(default_factory=list)  # rollbacks.Rollback per attempt
    unread: list[Any] = field(default_factory=list)  # unread.Unread: logged, not read
