"""Replay of a Hugging Face Trainer run: tiers 1-3 on the run's own dataset and checkpoints.

Per incident: the batches are rebuilt by the run's own Trainer dataloader (hf_data); the data
probe compares the offending batch (and the steps of the incident before it) with control
batches; the run is resumed by its own Trainer from the latest `checkpoint-N/` before the
offending step and re-run to the end of the window (hf_model), which gives the reproduction
and hardware rows; the rare-token and overflow probes measure the offending batch on the
model as it was just before the offending step. When the model cannot be replayed, the
bundled judge (tier 2) scores the batch instead. Every probe that cannot run says why in one
line, and the others still run.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from forensics.detect.recovery import skip_steps
from forensics.replay import judge as tier2
from forensics.replay.context import Checkpoint, Incident, RunData
from forensics.replay.freq import Freq
from forensics.replay.hf_data import (
    DataUnavailable,
    StepIndex,
    index_steps,
    load_dataset,
    load_training_args,
    run_collator,
    unigram_counts,
)
from forensics.replay.hf_model import (
    CausalLMProbe,
    Change,
    is_hf_checkpoint,
    layer_trace,
    load_model,
    probe_batch,
    rerun,
)
from forensics.replay.manifest_source import load_recorded, recorded_batches
from forensics.replay.measure import Batch, token_losses
from forensics.replay.plan import (
    Plan,
    excess,
    make_plan,
    noted,
    prefer_lead,
    reachable,
    restore_before,
)
from forensics.replay.probes import data_corruption as dc
from forensics.replay.probes import optimizer, rare_tokens
from forensics.replay.probes.base import Session
from forensics.replay.probes.reproduce import hardware, reproduce
from forensics.replay.result import CONFIRMED, INCONCLUSIVE, REFUTED, ReplayResult
from forensics.replay.sources import Sources
from forensics.replay.state import StateUnavailable
from forensics.replay.tokenizer import excerpts
from forensics.sim.data import BatchRecord
from forensics.store.db import Store

STATE_PROBES = (("rare_tokens", "rare_tokens"), ("overflow", "fp16_overflow"),
                ("stale_beta2", "stale_beta2"), ("lr_too_high", "lr_too_high"))  # fmt: skip


def hf_checkpoints(data: RunData) -> list[Checkpoint]:
    return [c for c in data.checkpoints if is_hf_checkpoint(Path(c.path))]


def is_hf_run(data: RunData, sources: Sources) -> bool:
    return sources.dataset is not None or bool(hf_checkpoints(data))


class HFRun:
    """The run's arguments, dataset and step index, loaded once for all its incidents."""

    def __init__(self, store: Store, data: RunData, sources: Sources) -> None:
        self.data, self.sources, self.store = data, sources, store
        self.ckpts = hf_checkpoints(data)
        self.why: str | None = None  # why the batches cannot be rebuilt
        self.index: StepIndex | None = None
        self.dataset: Any = None
        self.args: Any = None
        self.collator: Any = None
        self.freq: Freq | None = None
        self.own_rows = False  # index.steps holds rows of the user's dataset (not a manifest's)
        try:
            self._load()
        except DataUnavailable as exc:
            self.why = str(exc)

    def _load(self) -> None:
        folder = self.sources.dataset  # forensics.record's manifest, read from --dataset if given
        recorded = recorded_batches(self.store, self.data.run_id, folder)
        if not self.ckpts and recorded is None:
            raise DataUnavailable(
                "no Hugging Face checkpoint-N/ folder ingested (its training_args.bin is needed)"
            )
        if self.ckpts:
            self.args = load_training_args(Path(self.ckpts[-1].path) / "training_args.bin")
        if recorded is not None and self.sources.dataset is None:
            self.sources = replace(self.sources, dataset=recorded.path)
        if recorded is not None and self.args is not None:  # recorded losses are per step
            self.args = replace(self.args, logging_steps=1)
        if recorded is not None:
            self.dataset, self.index = load_recorded(
                self.store, self.data.run_id, self.data.incidents, folder
            )
            self.collator = self.index.collate
        else:
            self.own_rows = True
            self.dataset = load_dataset(self.sources.dataset)
            last = max(self.data.steps_logged("loss"), default=0)
            folders = [Path(c.path) for c in reversed(self.ckpts)]
            self.collator = run_collator(self.dataset, [*folders, folders[0].parent])
            self.index = index_steps(self.args, self.dataset, last, self.collator)
        seq, src = len(self.dataset[0]["input_ids"]), str(self.sources.dataset)
        for step, micro in self.index.steps.items():  # the plan picks controls among these
            self.data.records[step] = [
                BatchRecord(step, i, src, 0, len(rows) * seq + 1, seq, len(rows))
                for i, rows in enumerate(micro)
            ]
        self.freq = self._freq()

    def _freq(self) -> Freq:
        """Unigram counts over the dataset, computed once and cached in `token_counts`."""
        if self.data.token_counts is not None:
            return Freq(self.data.token_counts, "token_counts")
        counts = unigram_counts(self.dataset)
        nz = np.flatnonzero(counts)
        frame = pl.DataFrame({"run_id": [self.data.run_id] * nz.size, "token": nz.astype(np.int32),
                              "count": counts[nz].astype(np.int64),
                              "source": [f"replay:{self.sources.dataset}"] * nz.size})  # fmt: skip
        self.store.insert_frame("token_counts", frame)
        self.data.token_counts = counts.astype(np.float64)
        name = Path(str(self.sources.dataset)).name
        return Freq(self.data.token_counts, f"unigram counts of the dataset at {name}/")

    def tokenizer_paths(self) -> list[Path]:
        paths = [self.sources.tokenizer] if self.sources.tokenizer else []
        paths += [Path(c.path) / "tokenizer.json" for c in reversed(self.ckpts)]
        if self.ckpts:
            paths.append(Path(self.ckpts[-1].path).parent / "tokenizer.json")
        return [p for p in paths if p is not None]

    def logged_lr(self) -> dict[int, float]:
        """The LR the run logged at each step (the HF log's `learning_rate`)."""
        for name in ("learning_rate", "lr"):
            if self.data.logged.get(name):
                return dict(self.data.logged[name])
        return {}

    def vocab(self) -> int | None:
        import json

        for c in reversed(self.ckpts):
            try:
                return int(json.loads((Path(c.path) / "config.json").read_text())["vocab_size"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return None


def replay_hf_incident(
    run: HFRun, inc: Incident, device: torch.device, k: int
) -> list[ReplayResult]:
    data = run.data
    if run.why is not None or run.index is None:
        return _all_not_run(data, inc, device, f"batches not rebuilt: {run.why}")
    plan = reachable(data, make_plan(data, inc, k), lambda p: _has_checkpoint(run, p))
    s = Session(data, plan, device)
    index = run.index
    results = [_data_probe(run, s)]
    results[0].numbers |= _skip_rows(run, inc)
    ctrls = [probe_batch(index.batch(t), device) for t in s.plan.controls]
    off = probe_batch(index.batch(s.plan.offending), device)
    try:
        ckpt = _checkpoint(run, s.plan)
        s.checkpoint_step = s.resumed_step = ckpt.step
        end = s.plan.offending
        while end < s.plan.end and end + 1 in data.logged.get("loss", {}):
            end += 1
        s.plan.end = end
        s.plan.start = ckpt.step  # the counterfactual window starts at the checkpoint
        lrs = run.logged_lr()
        re = rerun(Path(ckpt.path), ckpt.step, run.args, run.dataset, s.plan.offending, end,
                   device, logged_lr=lrs, collator=run.collator)  # fmt: skip
        s.rows = {t: r for t, r in re.rows.items() if "loss" in r}
        s.replayer = HFReplayer(run, ckpt, s, re.beta2, "the logged LR" if lrs else "the schedule")
        results += [reproduce(s, re.wall_s), hardware(s)]
        pre: torch.nn.Module | None = re.pre
    except StateUnavailable as exc:
        s.unavailable = str(exc)
        results += [reproduce(s, None), hardware(s)]
        pre = None
    results += _state_probes(run, s, pre, off, ctrls)
    if pre is None and run.sources.judge:
        results.append(_judge(run, s, off, ctrls))
    from forensics.replay.runner import arbitrate, confound, downgrade

    return downgrade(arbitrate(confound(noted(results, s.plan), s)))


def _has_checkpoint(run: HFRun, plan: Plan) -> bool:
    return bool(_older(run, plan))


def _older(run: HFRun, plan: Plan) -> list[Checkpoint]:
    """The run's checkpoints saved before the offending step (the state replay needs)."""
    return [c for c in run.ckpts if c.step < plan.offending]


def _checkpoint(run: HFRun, plan: Plan) -> Checkpoint:
    """The latest checkpoint at or before the window's start (plan.restore_before says why:
    one inside the lead cuts out the updates that made the spike), else the latest before
    the offending step."""
    older = _older(run, plan)
    if not older:
        have = ", ".join(str(c.step) for c in run.ckpts) or "none"
        raise StateUnavailable(
            f"no checkpoint before step {plan.offending} (checkpoints at: {have})"
        )
    return prefer_lead(older, restore_before(plan))


def _state_probes(
    run: HFRun, s: Session, pre: torch.nn.Module | None, off: Batch, ctrls: list[Batch]
) -> list[ReplayResult]:
    if pre is None:
        return [
            s.result(p, h, INCONCLUSIVE, {}, f"not run: {s.unavailable}") for p, h in STATE_PROBES
        ]
    vocab = run.vocab() or int(run.freq.counts.size if run.freq is not None else 0)
    out = []
    if run.freq is None or not ctrls:
        out.append(
            s.result(
                "rare_tokens",
                "rare_tokens",
                INCONCLUSIVE,
                {},
                "not run: no token counts or no control batch",
            )
        )
    else:
        model = CausalLMProbe(pre, vocab)
        logged = excess(s.data.value("loss", s.plan.offending), s.plan.trend)
        verdict, detail, numbers = rare_tokens.evaluate(model, off, ctrls, run.freq, logged)  # type: ignore[arg-type]
        numbers = {
            "step": s.plan.offending,
            "freq_source": run.freq.source,
            "model": "the run's own (tier 3)",
        } | numbers
        out.append(s.result("rare_tokens", "rare_tokens", verdict, numbers, detail))
    out.append(_overflow(run, s, pre, off))
    out += [optimizer.stale_beta2(s), optimizer.lr_too_high(s)]
    return out


class HFReplayer:
    """The optimizer counterfactuals through the run's own Trainer: resumed from the same
    checkpoint on the same rebuilt batches, with AdamW's beta2 changed (set in the restored
    optimizer's groups, since optimizer.pt overrides training_args) or every step's LR scaled
    (the logged LR when the run logged one, else the restored schedule's)."""

    def __init__(
        self, run: HFRun, ckpt: Checkpoint, s: Session, beta2: float | None, lr_note: str
    ) -> None:
        self.run, self.ckpt, self.s = run, ckpt, s
        self.beta2, self.lr_note = beta2, lr_note
        self._start: CausalLMProbe | None = None

    def rerun(
        self,
        beta2: float | None,
        lr_factor: float,
        reset_at: int | None,
        *,
        substitute: Mapping[int, int] | None = None,
        skip: Collection[int] = (),
    ) -> dict[int, Any]:
        s, run = self.s, self.run
        assert run.index is not None
        batches = {t: run.index.batch(u) for t, u in (substitute or {}).items()}
        change = Change(beta2, lr_factor, reset_at, batches, frozenset(skip))
        re = rerun(Path(self.ckpt.path), self.ckpt.step, run.args, run.dataset, s.plan.offending,
                   s.plan.end, s.device, logged_lr=run.logged_lr(), change=change,
                   collator=run.collator)  # fmt: skip
        return {t: r for t, r in re.rows.items() if "loss" in r}

    @torch.no_grad()
    def cost(self, step: int) -> float:
        if self._start is None:
            vocab = self.run.vocab() or 0
            self._start = CausalLMProbe(load_model(Path(self.ckpt.path), self.s.device), vocab)
        assert self.run.index is not None
        batch = probe_batch(self.run.index.batch(step), self.s.device)
        return float(token_losses(self._start, batch).mean())  # type: ignore[arg-type]


def _overflow(run: HFRun, s: Session, pre: torch.nn.Module, off: Batch) -> ReplayResult:
    """Per-layer maxima through forward hooks in fp32, bf16, fp16 on the pre-step model."""
    run_dtype = (
        "fp16"
        if getattr(run.args, "fp16", False)
        else "bf16"
        if getattr(run.args, "bf16", False)
        else "fp32"
    )
    traces = {
        n: layer_trace(pre, off, d)
        for n, d in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16))
    }
    numbers: dict[str, Any] = {"run_dtype": run_dtype, "step": s.plan.offending}
    numbers |= {f"{n}_{k}": v for n, t in traces.items() for k, v in t.items()}
    f32, mine = traces["fp32"], traces[run_dtype]
    if f32["first_nonfinite"] is not None:
        return s.result(
            "overflow",
            "fp16_overflow",
            INCONCLUSIVE,
            numbers,
            f"even fp32 goes non-finite at {f32['first_nonfinite']}: not a range problem",
        )
    if run_dtype == "fp32":
        top = max(f32["max_abs_act"], default=0.0)
        return s.result(
            "overflow",
            "fp16_overflow",
            REFUTED,
            numbers,
            f"the run computes in fp32 and the batch's fp32 pass is finite (largest layer "
            f"output {top:.3g})",
        )
    limit = float(torch.finfo(torch.float16 if run_dtype == "fp16" else torch.bfloat16).max)
    if mine["first_nonfinite"] is not None:
        return s.result(
            "overflow",
            "fp16_overflow",
            CONFIRMED,
            numbers,
            f"the batch goes non-finite in {run_dtype} at {mine['first_nonfinite']} while fp32 "
            "stays finite",
        )
    peak = max([*mine["max_abs_act"], mine["logits_max_abs"]])
    verdict = REFUTED if peak < 0.5 * limit else INCONCLUSIVE
    return s.result(
        "overflow",
        "fp16_overflow",
        verdict,
        numbers,
        f"largest value {peak:.3g} in {run_dtype} (max {limit:.3g})",
    )


def _data_probe(run: HFRun, s: Session) -> ReplayResult:
    """data_corruption on the rebuilt batches, with decoded excerpts of the rarest rows."""
    assert run.index is not None
    vocab = run.vocab()
    rare = run.freq.rare_ids() if run.freq is not None else np.zeros(0, dtype=np.int64)
    sample, n_rows = _stream(run)
    known = dc.Known.of(sample, vocab)

    def stats(step: int) -> dict[str, Any]:
        tokens = run.index.tokens(step)  # type: ignore[union-attr]
        own = _own_pairs(run, step, n_rows, known)
        return dc.batch_stats(tokens, s.data.records[step], vocab, rare, known, own)

    cs = [stats(t) for t in s.plan.controls]
    if not cs:
        return s.result(dc.PROBE, dc.HYPOTHESIS, INCONCLUSIVE, {}, "no readable control batch")
    examined = {s.plan.offending: stats(s.plan.offending)}
    for t in dc.examined_steps(s):
        examined[t] = stats(t)
    res = dc.judge(s, examined, cs, list(s.plan.controls))
    res.numbers |= excerpts(run.index.tokens(s.plan.offending), run.freq, run.tokenizer_paths())
    return res


def _skip_rows(run: HFRun, inc: Incident) -> dict[str, Any]:
    """The dataset rows the Trainer's sampler put into the steps a skip_batch advice skips
    (recovery.skip_steps), step by step, so the post-mortem can name the rows to drop."""
    if not run.own_rows or run.index is None:
        return {}
    first, last = skip_steps(inc.recovery, inc.onset, inc.peak)
    rows = {str(t): sorted(i for micro in run.index.steps[t] for i in micro)
            for t in range(first, last + 1) if t in run.index.steps}  # fmt: skip
    name = Path(str(run.sources.dataset)).name
    return {"dataset_rows": rows, "dataset_name": name} if rows else {}


def _stream(run: HFRun, limit: int = 2_000_000) -> tuple[np.ndarray, int]:
    """A sample of the run's token stream: the dataset's rows in order (first `limit` tokens),
    and how many rows it holds."""
    rows, n = [], 0
    for chunk in run.dataset.iter(batch_size=1024):
        for r in chunk["input_ids"]:
            rows.append(np.asarray(r, dtype=np.int64))
            n += rows[-1].size
        if n >= limit:
            break
    return (np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)), len(rows)


def _own_pairs(run: HFRun, step: int, n_rows: int, known: dc.Known | None) -> np.ndarray | None:
    """Pair codes of the step's dataset rows that the bigram sample holds: a batch must not
    count as its own support (probes/data_corruption.py)."""
    if known is None or run.index is None:
        return None
    rows = [i for micro in run.index.steps.get(step, []) for i in micro if i < n_rows]
    ids = [np.asarray(run.dataset[i]["input_ids"], dtype=np.int64) for i in rows]
    own = [dc.pair_codes(r, known.v) for r in ids if r.size > 1]
    return np.concatenate(own) if own else None


def _judge(run: HFRun, s: Session, off: Batch, ctrls: list[Batch]) -> ReplayResult:
    assert run.index is not None
    skip = set(sum(run.index.steps[s.plan.offending], []))
    rows = [
        np.asarray(run.dataset[i]["input_ids"], dtype=np.int64)
        for i in range(min(len(run.dataset), 20_000))
        if i not in skip
    ]
    stream = np.concatenate(rows) if rows else None
    return tier2.judge(
        s.run_id,
        s.incident_id,
        stream,
        off,
        ctrls,
        run.freq,
        s.device,
        s.unavailable or "the run's model is not available",
    )


def _all_not_run(
    data: RunData, inc: Incident, device: torch.device, why: str
) -> list[ReplayResult]:
    rows = [
        ("data_corruption", "data_corruption"),
        ("reproduce", "reproduction"),
        ("hardware", "hardware_fault"),
        *STATE_PROBES,
    ]
    return [
        ReplayResult(
            data.run_id, inc.incident_id, p, h, INCONCLUSIVE, {}, f"not run: {why}", str(device)
        )
        for p, h in rows
    ]


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
