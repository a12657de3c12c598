"""Fault-injection scenarios: each produces its failure FOR REAL through the training dynamics.

A scenario changes the run's config and/or feeds it different batches (written to
`data/inject_000.bin` and named by the manifest) and/or acts on one step from outside (a bit
flip in a gradient). Nothing edits a logged number. After the run, `expected()` reads the
logged rows to place the incident (onset, peak) for `truth.json`; its type is not declared
but measured against the run's clean twin (`twin_config`), by detection's own rule
(forensics/sim/twin.py).

| scenario        | injected at `at`                                   | strength means           |
|-----------------|----------------------------------------------------|--------------------------|
| clean           | nothing                                            | unused                   |
| rare_tokens     | one batch from the never-trained rare id band      | fraction of rare tokens  |
| stale_beta2     | beta2 = 0.999, then a burst of rare-band batches   | batches in the burst     |
| lr_too_high     | peak LR x strength (at = end of warmup)            | LR multiplier            |
| fp16_overflow   | fp16; 4 batches with embeddings scaled past 65504  | embedding scale          |
| data_corruption | a run of degenerate batches (end-of-text only)     | batches in the run       |
| hardware_fault  | one bit flipped in one gradient element            | bit index (30: exponent) |

docs/simulate.md explains the mechanism behind each failure and what the sample runs show.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from forensics.errors import SimulationError
from forensics.sim.data import (
    INJECT_SHARD,
    SEP,
    TRAIN_SHARD,
    BatchRecord,
    Language,
    read_shard,
    sample_record,
    write_shard,
)
from forensics.sim.model import GPT
from forensics.sim.trainer import Fault, TrainConfig

CAUSES = (
    "rare_tokens", "stale_beta2", "lr_too_high", "fp16_overflow", "data_corruption",
    "hardware_fault",
)  # fmt: skip
TYPES = ("recoverable", "lingering", "divergent")


@dataclass
class Plan:
    """What a scenario does during the run (config changes were applied before it)."""

    overrides: dict[int, list[BatchRecord]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    injected: list[dict[str, Any]] = field(default_factory=list)  # truth.json "injected"


class InjectShard:
    """Collects injected batches and writes them to data/inject_000.bin, so the manifest can
    point at them and replay can rebuild them like any other batch."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.parts: list[np.ndarray] = []
        self.n = 0

    def add(self, step: int, tokens: np.ndarray) -> BatchRecord:
        span = self.cfg.batch_size * self.cfg.seq_len + 1
        assert tokens.shape == (span,), f"an injected batch is {span} tokens, got {tokens.shape}"
        rec = BatchRecord(
            step, 0, INJECT_SHARD, self.n, span, self.cfg.seq_len, self.cfg.batch_size
        )
        self.parts.append(tokens.astype(np.uint16))
        self.n += span
        return rec

    def write(self, run_dir: Path) -> None:
        if self.parts:
            write_shard(run_dir / INJECT_SHARD, np.concatenate(self.parts))


@dataclass
class GradBitFlip:
    """A faulty GPU: flips one bit of the largest-magnitude gradient element of `param`."""

    step: int
    param: str
    bit: int
    done: dict[str, Any] = field(default_factory=dict)

    def apply(self, model: GPT) -> dict[str, Any]:
        p = dict(model.named_parameters())[self.param]
        assert p.grad is not None, f"{self.param} has no gradient at step {self.step}"
        flat = p.grad.view(-1)
        index = int(flat.abs().argmax())
        before = np.array([float(flat[index])], dtype=np.float32)
        after = (before.view(np.uint32) ^ np.uint32(1 << self.bit)).view(np.float32)
        flat[index] = float(after[0])
        # update in place: the Plan's truth record holds this same dict
        self.done.update(
            param=self.param, index=index, bit=self.bit, before=float(before[0]),
            after=float(after[0]),
        )  # fmt: skip
        return self.done


# ---------------------------------------------------------------------------- helpers


def _finite(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    vals = np.array([float(r.get(key, math.nan)) for r in rows])
    return np.where(np.isfinite(vals), vals, -np.inf)


def peak_step(rows: list[dict[str, Any]], lo: int, hi: int) -> int:
    """Step of the highest loss in [lo, hi]; a non-finite loss counts as the highest."""
    window = [r for r in rows if lo <= r["step"] <= hi]
    assert window, f"no logged steps in [{lo}, {hi}]"
    for r in window:
        if not math.isfinite(r["loss"]):
            return int(r["step"])
    return int(window[int(np.argmax(_finite(window, "loss")))]["step"])


def _normal_text(run_dir: Path, cfg: TrainConfig, step: int) -> np.ndarray:
    """The span the run would have read at `step` (to mix normal text into a batch)."""
    shard = read_shard(run_dir / TRAIN_SHARD)
    rec = sample_record(step, 0, cfg.seed, shard.size, cfg.batch_size, cfg.seq_len)
    return np.asarray(shard[rec.token_offset : rec.token_offset + rec.n_tokens], np.int64)


def _rare_batch(run_dir: Path, cfg: TrainConfig, lang: Language, step: int, frac: float):
    """Normal text whose last `frac` of tokens are drawn uniformly from the rare band."""
    tokens = _normal_text(run_dir, cfg, step)
    rng = np.random.default_rng([cfg.seed, step, 99])
    k = int(round(frac * tokens.size))
    if k:
        tokens[tokens.size - k :] = rng.integers(lang.rare_start, lang.vocab_size, k)
    return tokens


def _expect(cause: str, onset: int, peak: int) -> dict[str, Any]:
    return {"cause": cause, "onset_step": onset, "peak_step": peak}


# ---------------------------------------------------------------------------- scenarios


class Scenario(ABC):
    """One named failure. Subclasses set the class attributes and implement `plan`."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line: what is injected and what follows
    strength_help: ClassVar[str]  # what --strength means
    default_strength: ClassVar[float]
    at_fraction: ClassVar[float] = 0.5  # default `at` as a fraction of total_steps
    cause: ClassVar[str | None] = None
    burst: ClassVar[bool] = False  # strength is a count of consecutive batches

    def default_at(self, cfg: TrainConfig) -> int:
        return max(2, int(cfg.total_steps * self.at_fraction))

    def n_steps(self, strength: float) -> int:
        """How many consecutive steps are injected."""
        return int(strength) if self.burst else 1

    def check(self, cfg: TrainConfig, at: int, strength: float) -> None:
        """Raise SimulationError when `at`/`strength` cannot work for this run."""
        last = at + self.n_steps(strength) - 1
        if at < 21 or last > cfg.total_steps - 10:
            raise SimulationError(
                f"scenario {self.name}: --at {at} must leave 20 steps before it and 10 after "
                f"the injection in a {cfg.total_steps}-step run"
            )
        if self.burst and (strength < 1 or strength != int(strength)):
            raise SimulationError(
                f"scenario {self.name}: --strength is {self.strength_help}; got {strength}"
            )

    def ckpt_before(self, at: int) -> int:
        """The checkpoint replay starts from: a few steps before the incident."""
        return at - 20

    def configure(self, cfg: TrainConfig, at: int, strength: float) -> TrainConfig:
        ckpts = sorted({self.ckpt_before(at), cfg.total_steps})
        return replace(cfg, ckpt_steps=ckpts)

    def twin_config(self, base: TrainConfig, cfg: TrainConfig) -> TrainConfig:
        """The configured run `cfg` without the fault (`base`: the healthy run it started
        from). By default the fault is all in the batches/step faults, so the config stays."""
        return cfg

    def injection_end(self, at: int, strength: float) -> int:
        """The last injected step: recovery is judged after it (or after a later peak)."""
        return at + self.n_steps(strength) - 1

    # A fault made of a trigger (an event in the data) and an amplifier (a setting): the
    # amplifier is the root cause only where fixing it from the checkpoint before the
    # injection, trigger kept, removes at least half of the damage (simulate.attribute);
    # else the trigger is.
    trigger: ClassVar[str | None] = None

    def fix(self, base: TrainConfig) -> dict[str, Any] | None:
        """TrainConfig changes that fix the amplifier (the trigger kept); None: none."""
        return None

    def damage_window(self, at: int, strength: float) -> tuple[int, int]:
        """Steps the amplifier's damage is measured over (its ordinary batches)."""
        end = self.injection_end(at, strength)
        return end + 1, end + 30

    @abstractmethod
    def plan(
        self, run_dir: Path, cfg: TrainConfig, lang: Language, at: int, strength: float
    ) -> Plan: ...

    def expected(
        self, rows: list[dict[str, Any]], at: int, strength: float
    ) -> list[dict[str, Any]]:
        """Cause, onset and peak of each injected incident (its type comes from the twin)."""
        assert self.cause
        end = at + self.n_steps(strength) - 1
        return [_expect(self.cause, at, peak_step(rows, at, end))]


class Clean(Scenario):
    name = "clean"
    summary = "no fault: the reference run every detector must stay quiet on"
    strength_help = "unused"
    default_strength = 0.0

    def check(self, cfg: TrainConfig, at: int, strength: float) -> None:
        return None

    def configure(self, cfg: TrainConfig, at: int, strength: float) -> TrainConfig:
        return replace(cfg, ckpt_steps=sorted({cfg.total_steps // 2, cfg.total_steps}))

    def plan(
        self, run_dir: Path, cfg: TrainConfig, lang: Language, at: int, strength: float
    ) -> Plan:
        return Plan()

    def expected(
        self, rows: list[dict[str, Any]], at: int, strength: float
    ) -> list[dict[str, Any]]:
        return []


class RareTokens(Scenario):
    name = "rare_tokens"
    summary = "one batch of never-trained token ids: loss and grad-norm spike, back next step"
    strength_help = "the fraction of the batch's tokens drawn from the rare band (0-1]"
    default_strength = 1.0
    at_fraction = 0.6
    cause = "rare_tokens"

    def check(self, cfg: TrainConfig, at: int, strength: float) -> None:
        super().check(cfg, at, strength)
        if not 0 < strength <= 1:
            raise SimulationError(
                f"scenario rare_tokens: --strength must be in (0, 1], not {strength}"
            )

    def plan(
        self, run_dir: Path, cfg: TrainConfig, lang: Language, at: int, strength: float
    ) -> Plan:
        shard = InjectShard(cfg)
        rec = shard.add(at, _rare_batch(run_dir, cfg, lang, at, strength))
        shard.write(run_dir)
        band = f"[{lang.rare_start}, {lang.vocab_size})"
        what = f"batch with {strength:.0%} tokens from the rare band {band}"
        return Plan(
            overrides={at: [rec]},
            injected=[{"step": at, "what": what, "params": {"fraction": strength}}],
        )


class StaleBeta2(Scenario):
    name = "stale_beta2"
    summary = "beta2=0.999 + a burst of rare-band batches: over-large updates, slow recovery"
    strength_help = "the number of consecutive rare-band batches (an integer >= 1)"
    default_strength = 8.0
    at_fraction = 0.3
    cause, burst = "stale_beta2", True

    def configure(self, cfg: TrainConfig, at: int, strength: float) -> TrainConfig:
        return replace(super().configure(cfg, at, strength), beta2=0.999)

    def twin_config(self, base: TrainConfig, cfg: TrainConfig) -> TrainConfig:
        return replace(cfg, beta2=base.beta2)  # the stale beta2 is part of the fault

    trigger = "rare_tokens"

    def fix(self, base: TrainConfig) -> dict[str, Any]:
        """beta2 = 0.95 (the healthy run's) with the same burst."""
        return {"beta2": base.beta2}

    def plan(
        self, run_dir: Path, cfg: TrainConfig, lang: Language, at: int, strength: float
    ) -> Plan:
        shard = InjectShard(cfg)
        n = int(strength)
        overrides = {
            s: [shard.add(s, _rare_batch(run_dir, cfg, lang, s, 1.0))] for s in range(at, at + n)
        }
        shard.write(run_dir)
        return Plan(
            overrides=overrides,
            injected=[
                {
                    "step": at,
                    "what": "adam beta2 = 0.999 for the whole run",
                    "params": {"beta2": 0.999},
                },
                {
                    "step": at,
                    "what": f"{n} consecutive batches from a new source using rare-band ids "
                    f"[{lang.rare_start}, {lang.vocab_size}) whose Adam second moments are ~0",
                    "params": {"batches": n},
                },
            ],
        )

    def expected(
        self, rows: list[dict[str, Any]], at: int, strength: float
    ) -> list[dict[str, Any]]:
        return [_expect("stale_beta2", at, peak_step(rows, at, at + int(strength) + 30))]


class LrTooHigh(Scenario):
    name = "lr_too_high"
    summary = "peak LR far too high: spikes from the end of warmup on, recurring"
    strength_help = "the factor applied to the peak (and min) learning rate"
    default_strength = 100.0
    cause = "lr_too_high"

    def default_at(self, cfg: TrainConfig) -> int:
        """End of warmup: a tenth of the run, but >= 100 steps so the model has learned
        something the spikes can destroy (capped at half the run)."""
        return min(cfg.total_steps // 2, max(100, cfg.total_steps // 10))

    def check(self, cfg: TrainConfig, at: int, strength: float) -> None:
        if strength <= 1:
            raise SimulationError(f"scenario lr_too_high: --strength must be > 1, not {strength}")
        if not 8 <= at <= cfg.total_steps // 2:
            raise SimulationError(
                f"scenario lr_too_high: --at (the end of warmup) must be in [8, "
                f"{cfg.total_steps // 2}] for a {cfg.total_steps}-step run, not {at}"
            )

    def ckpt_before(self, at: int) -> int:
        return max(1, at * 3 // 4)

    def configure(self, cfg: TrainConfig, at: int, strength: float) -> TrainConfig:
        cfg = super().configure(cfg, at, strength)
        return replace(
            cfg, peak_lr=cfg.peak_lr * strength, min_lr=cfg.min_lr * strength, warmup_steps=at
        )

    def twin_config(self, base: TrainConfig, cfg: TrainConfig) -> TrainConfig:
        """The same warmup (it ends at `at`) with the sane LR."""
        return replace(cfg, peak_lr=base.peak_lr, min_lr=base.min_lr)

    def injection_end(self, at: int, strength: float) -> int:
        return at  # the LR is too high from the start: recovery counts from the peak

    def plan(
        self, run_dir: Path, cfg: TrainConfig, lang: Language, at: int, strength: float
    ) -> Plan:
        what = f"peak LR {cfg.peak_lr:g} ({strength:g}x the sane {cfg.peak_lr / strength:g})"
        return Plan(injected=[{"step": at, "what": what, "params": {"peak_lr": cfg.peak_lr}}])

    def expected(
        self, rows: list[dict[str, Any]], at: int, strength: float
    ) -> list[dict[str, Any]]:
        """Onset: first loss 30% above the loss of the second quarter of warmup (a baseline
        the spikes cannot contaminate); peak: the highest loss in the 200 steps after it."""
        losses = _finite(rows, "loss")
        base = lr_baseline(rows, at)
        late = [i for i in range(at * 3 // 4, len(rows)) if not losses[i] <= 1.3 * base]
        onset = int(rows[late[0]]["step"]) if late else at
        peak = peak_step(rows, onset, min(int(rows[-1]["step"]), onset + 200))
        return [_expect("lr_too_high", onset, peak)]


def lr_baseline(rows: list[dict[str, Any]], at: int) -> float:
    """Median loss over steps [at/2, 3at/4): late warmup, before a too-high LR bites."""
    window = _finite([r for r in rows if at // 2 <= r["step"] < at * 3 // 4], "loss")
    return float(np.median(window))


class Fp16Overflow(Scenario):
    name = "fp16_overflow"
    summary = "fp16 run; 4 batches with embeddings scaled past 65504: halvings + skipped steps"
    strength_help = "the factor on the token embeddings of the 4 faulty batches"
    default_strength = 3e5
    burst_len: ClassVar[int] = 4

    cause = "fp16_overflow"

    def n_steps(self, strength: float) -> int:
        return self.burst_len

    def check(self, cfg: TrainConfig, at: int, strength: float) -> None:
        super().check(cfg, at, strength)
        if strength <= 1:
            raise SimulationError(f"scenario fp16_overflow: --strength must be > 1, not {strength}")

    def configure(self, cfg: TrainConfig, at: int, strength: float) -> TrainConfig:
        return replace(super().configure(cfg, at, strength), precision="fp16")

    def plan(
        self, run_dir: Path, cfg: TrainConfig, lang: Language, at: int, strength: float
    ) -> Plan:
        n = read_shard(run_dir / TRAIN_SHARD).size
        overrides = {}
        for s in range(at, at + self.burst_len):
            rec = sample_record(s, 0, cfg.seed, n, cfg.batch_size, cfg.seq_len)
            overrides[s] = [replace(rec, input_scale=strength)]
        what = (
            f"{self.burst_len} batches whose token embeddings are multiplied by {strength:g} "
            "(manifest field input_scale): fp16 activations overflow"
        )
        return Plan(
            overrides=overrides,
            injected=[
                {
                    "step": at,
                    "what": what,
                    "params": {"input_scale": strength, "steps": self.burst_len},
                }
            ],
        )

    def expected(
        self, rows: list[dict[str, Any]], at: int, strength: float
    ) -> list[dict[str, Any]]:
        return [_expect("fp16_overflow", at, peak_step(rows, at, at + self.burst_len - 1))]


class DataCorruption(Scenario):
    name = "data_corruption"
    summary = "a run of degenerate batches: loss far below trend, then a spike on real data"
    strength_help = "the number of consecutive degenerate batches (an integer >= 1)"
    default_strength = 30.0
    at_fraction = 0.4
    cause, burst = "data_corruption", True

    def plan(
        self, run_dir: Path, cfg: TrainConfig, lang: Language, at: int, strength: float
    ) -> Plan:
        shard = InjectShard(cfg)
        n = int(strength)
        span = cfg.batch_size * cfg.seq_len + 1
        overrides = {s: [shard.add(s, np.full(span, SEP))] for s in range(at, at + n)}
        shard.write(run_dir)
        what = f"{n} consecutive batches of nothing but the end-of-sentence token {SEP}"
        return Plan(
            overrides=overrides, injected=[{"step": at, "what": what, "params": {"batches": n}}]
        )

    def expected(
        self, rows: list[dict[str, Any]], at: int, strength: float
    ) -> list[dict[str, Any]]:
        end = at + int(strength)  # first clean batch after the degenerate run
        return [_expect("data_corruption", at, peak_step(rows, end, end + 10))]


class HardwareFault(Scenario):
    name = "hardware_fault"
    summary = "one bit flipped in one gradient element: non-finite grad norm, step skipped"
    strength_help = "the bit of the fp32 gradient element to flip (0-31; 30 = top exponent bit)"
    default_strength = 30.0
    cause = "hardware_fault"
    param: ClassVar[str] = "blocks.1.mlp.down.weight"

    def check(self, cfg: TrainConfig, at: int, strength: float) -> None:
        super().check(cfg, at, strength)
        if strength != int(strength) or not 0 <= strength <= 31:
            raise SimulationError(
                f"scenario hardware_fault: --strength is a bit index 0-31, not {strength}"
            )

    def plan(
        self, run_dir: Path, cfg: TrainConfig, lang: Language, at: int, strength: float
    ) -> Plan:
        param = self.param if cfg.model.n_layer > 1 else "blocks.0.mlp.down.weight"
        fault = GradBitFlip(at, param, int(strength))
        what = f"bit {int(strength)} flipped in the largest gradient element of {param}"
        return Plan(faults=[fault], injected=[{"step": at, "what": what, "params": fault.done}])


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Clean(), RareTokens(), StaleBeta2(), LrTooHigh(), Fp16Overflow(), DataCorruption(),
        HardwareFault(),
    )
}  # fmt: skip


def get_scenario(name: str) -> Scenario:
    """The scenario called `name`, or a SimulationError listing the valid names."""
    if name not in SCENARIOS:
        raise SimulationError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    return SCENARIOS[name]
