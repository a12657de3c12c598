"""Tier 3 for a nanoGPT run: its own `ckpt.pt`, re-trained by a transcription of nanoGPT's
`train.py` loop on the batches its loader read.

nanoGPT's own `get_batch` samples random offsets (`torch.randint`) and records none, so its
batches cannot be rebuilt: replay needs a run that read its token shards in order, described
with `--shards train.bin --loader llmc --batch-size B --seq-len T [--grad-accum GA]`
(sources.py). When that is not how the run read its data, the re-run does not match the log
and the `reproduce` row says so (refuted): nothing is guessed.

Numbering: nanoGPT prints `iter N: loss ...` and saves `ckpt.pt` at the top of iteration N,
before its update, with `iter_num = N`; so the checkpoint is the state the run started
iteration N with (replay's "after step N - 1"), and the re-run covers iterations N..end.

Each iteration, as train.py does it: the LR from `get_lr(it)` (or `learning_rate` when
`decay_lr` is off), GA micro-batches whose loss / GA is back-propagated (under autocast in the
run's dtype on CUDA, in fp32 on the CPU as nanoGPT does), the gradient clipped to `grad_clip`,
one AdamW step with `configure_optimizers`' decay / no-decay groups restored from the
checkpoint. The logged loss is the last micro-batch's (nanoGPT prints `loss.item() * GA`), and
so is the replayed one. Dropout > 0 draws from an RNG the checkpoint does not hold: such a
re-run cannot match the log and `reproduce` says so.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from forensics.replay.context import Checkpoint, RunData
from forensics.replay.measure import Batch, token_losses
from forensics.replay.plan import excess, prefer_lead
from forensics.replay.probes import data_corruption, optimizer, overflow, rare_tokens
from forensics.replay.probes.base import Session
from forensics.replay.probes.counterfactual import raise_second_moment
from forensics.replay.probes.reproduce import hardware, reproduce
from forensics.replay.result import INCONCLUSIVE, ReplayResult
from forensics.replay.state import StateUnavailable, StepRow
from forensics.sim.model import NanoGPT, load_nanogpt_checkpoint

RANDOM_GET_BATCH = (
    "nanoGPT's get_batch samples random offsets and records none, so its batches cannot be "
    "rebuilt: replay needs a run that read its shards in order (--shards train.bin --loader "
    "llmc --batch-size B --seq-len T [--grad-accum GA])"
)
PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def nanogpt_checkpoint(
    data: RunData, offending: int, before: int | None = None
) -> Checkpoint | None:
    """The latest nanoGPT `ckpt.pt` the run can resume from for `offending` (iter_num <=
    offending), preferring one with iter_num <= `before` (plan.restore_before: the state
    after step iter_num - 1 at or before the window's start), else None (also when the run
    has no nanoGPT checkpoint at all)."""
    usable = [c for c in data.checkpoints if c.step <= offending and is_nanogpt(Path(c.path))]
    if not usable:
        return None
    return usable[-1] if before is None else prefer_lead(usable, before + 1)


def has_nanogpt_checkpoint(data: RunData) -> bool:
    return any(is_nanogpt(Path(c.path)) for c in data.checkpoints)


def is_nanogpt(path: Path) -> bool:
    """A torch file holding nanoGPT's keys (model_args, model, iter_num)."""
    if not (path.is_file() and path.suffix in (".pt", ".pth")):
        return False
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not a torch file, or one weights_only refuses
        return False
    return isinstance(raw, dict) and {"model_args", "model", "iter_num"} <= set(raw)


@dataclass
class NanoState:
    """A live nanoGPT run: model, AdamW, grad scaler, config, the next iteration to run."""

    model: NanoGPT
    optimizer: torch.optim.AdamW
    scaler: torch.amp.GradScaler
    config: dict[str, Any]
    it: int
    device: torch.device


def restore(path: Path, device: torch.device) -> NanoState:
    """The state a nanoGPT `ckpt.pt` holds; StateUnavailable naming what is missing."""
    try:
        model, raw = load_nanogpt_checkpoint(path)
    except (ValueError, RuntimeError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StateUnavailable(f"{path}: not loadable as a nanoGPT checkpoint ({first})") from exc
    if not raw.get("optimizer"):
        raise StateUnavailable(f"{path} has no optimizer state (replay needs AdamW's moments)")
    cfg = dict(raw.get("config") or {})
    model.to(device).train()
    opt = configure_optimizers(model, cfg)
    try:
        opt.load_state_dict(raw["optimizer"])
    except (ValueError, KeyError) as exc:
        raise StateUnavailable(f"{path}: optimizer state does not fit the model ({exc})") from exc
    enabled = cfg.get("dtype") == "float16" and device.type == "cuda"
    scaler = torch.amp.GradScaler(device.type, enabled=enabled)
    return NanoState(model, opt, scaler, cfg, int(raw["iter_num"]), device)


def configure_optimizers(model: NanoGPT, cfg: dict[str, Any]) -> torch.optim.AdamW:
    """nanoGPT's GPT.configure_optimizers: matrices decay, biases and norms do not."""
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    decay = float(cfg.get("weight_decay", 0.1))
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    betas = (float(cfg.get("beta1", 0.9)), float(cfg.get("beta2", 0.95)))
    return torch.optim.AdamW(groups, lr=float(cfg.get("learning_rate", 6e-4)), betas=betas)


def get_lr(cfg: dict[str, Any], it: int) -> float:
    """nanoGPT's get_lr: linear warmup, cosine decay to min_lr, then min_lr."""
    lr = float(cfg.get("learning_rate", 6e-4))
    if not cfg.get("decay_lr", True):
        return lr
    warmup, decay = int(cfg.get("warmup_iters", 2000)), int(cfg.get("lr_decay_iters", 600000))
    min_lr = float(cfg.get("min_lr", 6e-5))
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay:
        return min_lr
    ratio = (it - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def train_iter(
    st: NanoState, batch: Batch, lr_factor: float = 1.0, reset: bool = False, skip: bool = False
) -> StepRow:
    """One nanoGPT iteration on `batch` (its GA micro-batches); the row replay compares.
    `skip`: the loss is computed, the gradients are dropped before AdamW's step (no update,
    its moments and step count untouched)."""
    it, cfg, opt = st.it, st.config, st.optimizer
    lr = get_lr(cfg, it) * lr_factor
    for g in opt.param_groups:
        g["lr"] = lr
    ga = len(batch)
    loss = torch.zeros(())
    for x, y, _ in batch:
        with _autocast(st):
            _, loss = st.model(x, y)
        assert loss is not None
        st.scaler.scale(loss / ga).backward()
    clip = float(cfg.get("grad_clip", 1.0))
    st.scaler.unscale_(opt)
    params = [p for p in st.model.parameters() if p.grad is not None]
    norm = float(torch.nn.utils.clip_grad_norm_(params, clip if clip else math.inf))
    if reset:
        raise_second_moment(opt, {p: p.grad for p in params if p.grad is not None}, 1.0)
    if skip:
        opt.zero_grad(set_to_none=True)
    before = [p.detach().clone() for p in st.model.parameters()]
    st.scaler.step(opt)
    st.scaler.update()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        deltas = [
            (p - b).float().norm() for p, b in zip(st.model.parameters(), before, strict=True)
        ]
        update = float(torch.linalg.vector_norm(torch.stack(deltas)))
    st.it += 1
    return {"step": it, "loss": float(loss.detach()), "grad_norm": norm, "lr": lr,
            "update_norm": update}  # fmt: skip


def _autocast(st: NanoState) -> Any:
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(st.config.get("dtype", ""))
    if st.device.type == "cpu" or dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=st.device.type, dtype=dtype)


def advance(st: NanoState, s: Session, last: int, **kw: Any) -> list[StepRow]:
    return [train_iter(st, s.batch(st.it), **kw) for _ in range(st.it, last + 1)]


class NanoReplayer:
    """The optimizer counterfactuals through the nanoGPT loop: from the same checkpoint, on
    the same batches, with AdamW's beta2 changed or every iteration's LR scaled."""

    def __init__(self, ckpt: Checkpoint, s: Session, beta2: float) -> None:
        self.ckpt, self.s = ckpt, s
        self.beta2: float | None = beta2
        self.lr_note = "the schedule (nanoGPT's get_lr)"
        self._start: NanoState | None = None

    def rerun(
        self,
        beta2: float | None,
        lr_factor: float,
        reset_at: int | None,
        *,
        substitute: Mapping[int, int] | None = None,
        skip: Collection[int] = (),
    ) -> dict[int, Any]:
        st = restore(Path(self.ckpt.path), self.s.device)
        if beta2 is not None:
            for g in st.optimizer.param_groups:
                g["betas"] = (g["betas"][0], beta2)
        rows, sub = [], substitute or {}
        while st.it <= self.s.plan.end:
            it = st.it
            batch = self.s.batch(sub.get(it, it))
            rows.append(train_iter(st, batch, lr_factor, reset=it == reset_at, skip=it in skip))
        return {int(r["step"]): r for r in rows}

    @torch.no_grad()
    def cost(self, step: int) -> float:
        """The last micro-batch's loss on the window-start model (the micro-batch nanoGPT's
        logged loss is of)."""
        if self._start is None:
            self._start = restore(Path(self.ckpt.path), self.s.device)
            self._start.model.eval()
        return float(token_losses(self._start.model, self.s.batch(step)[-1:]).mean())  # type: ignore[arg-type]


def replay_nanogpt_incident(
    s: Session, ckpt: Checkpoint, tokenizer: Path | None, judge: bool
) -> list[ReplayResult]:
    """Every probe of one incident through the run's own nanoGPT checkpoint (tier 3; the
    bundled judge, tier 2, when the checkpoint cannot be resumed)."""
    from forensics.replay.freq import train_freq
    from forensics.replay.runner import arbitrate, confound, downgrade, judge_batch

    results = [_data_probe(s, tokenizer)]
    t0 = time.perf_counter()
    pre: NanoGPT | None = None
    try:
        st = restore(Path(ckpt.path), s.device)
        s.plan.start = s.checkpoint_step = s.resumed_step = st.it - 1
        s.plan.end = max(s.plan.end, s.plan.offending)
        while s.plan.end > s.plan.offending and s.plan.end not in s.data.records:
            s.plan.end -= 1
        rows = advance(st, s, s.plan.offending - 1)
        pre = copy.deepcopy(st.model).eval()
        rows += advance(st, s, s.plan.end)
        s.rows = {int(r["step"]): r for r in rows}
        beta2 = float(st.optimizer.param_groups[0]["betas"][1])
        s.replayer = NanoReplayer(ckpt, s, beta2)
    except StateUnavailable as exc:
        s.unavailable = str(exc)
    results += [reproduce(s, time.perf_counter() - t0), hardware(s)]
    if pre is None:
        results += [
            s.result(p, h, INCONCLUSIVE, {}, f"not run: {s.unavailable}")
            for p, h in (("rare_tokens", "rare_tokens"), ("overflow", "fp16_overflow"),
                         ("stale_beta2", "stale_beta2"), ("lr_too_high", "lr_too_high"))
        ]  # fmt: skip
        if judge:
            results.append(judge_batch(s))
        return downgrade(arbitrate(confound(results, s)))
    off, ctrls = s.batch(s.plan.offending), s.control_batches()
    freq = train_freq(s.data, s.data.records[s.plan.offending][0].source)
    if freq is None or not ctrls:
        why = "no token counts and no readable shard" if freq is None else "no control batch"
        results.append(s.result("rare_tokens", "rare_tokens", INCONCLUSIVE, {}, f"not run: {why}"))
    else:
        logged = excess(s.data.value("loss", s.plan.offending), s.plan.trend)
        verdict, detail, numbers = rare_tokens.evaluate(pre, off, ctrls, freq, logged)  # type: ignore[arg-type]
        numbers = {"step": s.plan.offending, "freq_source": freq.source,
                   "model": "the run's own nanoGPT checkpoint (tier 3)"} | numbers  # fmt: skip
        results.append(s.result("rare_tokens", "rare_tokens", verdict, numbers, detail))
    results.append(_overflow(s, pre, st.config, off, ctrls))
    results += [optimizer.stale_beta2(s), optimizer.lr_too_high(s)]
    return downgrade(arbitrate(confound(results, s)))


def _overflow(
    s: Session, pre: NanoGPT, cfg: dict[str, Any], off: Batch, ctrls: list[Batch]
) -> ReplayResult:
    """The bundled overflow probe on the nanoGPT model, in the dtype the run computed in
    (nanoGPT's `dtype` on CUDA; fp32 on the CPU). nanoGPT does not save its fp16 scaler, so
    an fp16 run is traced without a loss scale."""
    device = str(cfg.get("device", "cuda"))
    prec = "fp32" if device.startswith("cpu") else PRECISION.get(cfg.get("dtype", ""), "fp32")
    verdict, detail, numbers = overflow.evaluate(pre, prec, None, off, ctrls)  # type: ignore[arg-type]
    numbers = {"step": s.plan.offending} | numbers
    return s.result(overflow.PROBE, overflow.HYPOTHESIS, verdict, numbers, detail)


def _data_probe(s: Session, tokenizer: Path | None) -> ReplayResult:
    """data_corruption on the loader's batches, with decoded excerpts (or raw ids) of the
    offending batch's rarest rows."""
    from forensics.replay.freq import train_freq
    from forensics.replay.tokenizer import excerpts

    res = data_corruption.run(s)
    try:
        rows = np.concatenate([x.cpu().numpy() for x, _, _ in s.batch(s.plan.offending)])
    except StateUnavailable:
        return res
    freq = train_freq(s.data, s.data.records[s.plan.offending][0].source)
    res.numbers |= excerpts(rows, freq, [tokenizer] if tokenizer else [])
    return res
