"""Overflow: does the offending batch leave the range of the run's half-precision dtype?

On the state before the offending step, the batch (with its manifest `input_scale`) goes
forward and backward on copies of the fp32 master weights in fp32, bf16 and fp16 (fp16 with
the run's loss scale, as its scaler would). Per layer the probe records the largest
|activation| at each block's output, the largest attention logit, and the first place the
forward goes non-finite (embedding, block i, logits, loss) plus the blocks whose gradients are
non-finite. Control batches are traced in the run's dtype. It also stores
numbers["act_norms"]: per-layer mean activation norms (fp32) of the offending batch against the
mean of the controls.

Rule: a run computing in fp32 is refuted when the fp32 pass is finite (nothing to overflow;
inconclusive when even fp32 is non-finite). For fp16/bf16 runs: confirmed when the batch goes
non-finite in the run's dtype while the fp32 pass and every control in the run's dtype stay
finite; inconclusive when fp32 is non-finite too (not a range problem) or the controls
overflow as well (the state overflows everywhere: an upstream blow-up, not this batch);
refuted when the batch stays finite with the largest value below half the dtype's maximum;
inconclusive when it stays finite within 2x of the maximum.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from forensics.replay.measure import Batch, Trace, trace
from forensics.replay.plan import fmt_num
from forensics.replay.probes.base import Session, mean
from forensics.replay.result import CONFIRMED, INCONCLUSIVE, REFUTED, ReplayResult
from forensics.sim.model import GPT

PROBE, HYPOTHESIS = "overflow", "fp16_overflow"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def dtype_max(name: str) -> float:
    return float(torch.finfo(DTYPES[name]).max)


def run(s: Session) -> ReplayResult:
    t0 = time.perf_counter()
    got = s.offending(PROBE, HYPOTHESIS)
    if isinstance(got, ReplayResult):
        return got
    state, off = got
    scale = state.scaler.scale if state.scaler.enabled else None
    verdict, detail, numbers = evaluate(
        state.model, state.cfg.precision, scale, off, s.control_batches()
    )
    numbers = {"step": s.plan.offending} | numbers
    res = s.result(PROBE, HYPOTHESIS, verdict, numbers, detail)
    res.wall_s = time.perf_counter() - t0
    return res


def evaluate(
    master: GPT, prec: str, loss_scale: float | None, off: Batch, ctrls: list[Batch]
) -> tuple[str, str, dict[str, Any]]:
    """Verdict, detail and numbers for `off` on the fp32 `master` weights (see module doc).

    `loss_scale`: the run's fp16 loss scale at that step (None when it had no scaler).
    """

    def scale(name: str) -> float:
        return loss_scale if name == "fp16" and loss_scale is not None else 1.0

    offs = {n: trace(master, off, d, scale(n)) for n, d in DTYPES.items()}
    ctrl_run = [trace(master, c, DTYPES[prec], scale(prec)) for c in ctrls]
    ctrl_fp32 = ctrl_run
    if prec != "fp32":
        ctrl_fp32 = [trace(master, c, torch.float32) for c in ctrls]
    numbers: dict[str, Any] = {"run_precision": prec, "loss_scale": loss_scale}
    for name, tr in offs.items():
        numbers |= {f"{name}_{k}": v for k, v in tr.numbers().items()}
        numbers[f"{name}_range_used"] = largest(tr) / dtype_max(name)
    numbers["control_nonfinite"] = sum(not t.finite for t in ctrl_run)
    numbers["control_max_abs_act"] = per_layer_mean([t.max_abs for t in ctrl_run])
    numbers["act_norms"] = {
        "layer": list(range(len(offs["fp32"].act_norm))),
        "value": offs["fp32"].act_norm,
        "control": per_layer_mean([t.act_norm for t in ctrl_fp32]),
    }
    verdict, detail = decide(prec, offs, ctrl_run)
    return verdict, detail, numbers


def per_layer_mean(rows: list[list[float]]) -> list[float]:
    """Mean over batches of each layer's value ([] without batches)."""
    return [mean([r[i] for r in rows]) for i in range(len(rows[0]))] if rows else []


def largest(tr: Trace) -> float:
    """Largest magnitude seen anywhere in the pass (NaN/Inf make it infinite)."""
    vals = [tr.embed_max_abs, tr.logits_max_abs, *tr.max_abs, *map(abs, tr.max_attn_logit)]
    return math.inf if any(not math.isfinite(v) for v in vals) else max(vals)


def decide(prec: str, offs: dict[str, Trace], ctrls: list[Trace]) -> tuple[str, str]:
    fp32 = offs["fp32"]
    if not fp32.finite:
        return INCONCLUSIVE, (
            f"the batch is non-finite even in fp32 (at {fp32.first_nonfinite or 'backward'}): "
            "not a precision-range problem"
        )
    if prec == "fp32":
        return REFUTED, (
            f"the run computed in fp32 (max {dtype_max('fp32'):.3g}); largest value "
            f"{fmt_num(largest(fp32))}"
        )
    tr = offs[prec]
    where = tr.first_nonfinite or f"backward ({', '.join(tr.grad_nonfinite)})"
    if not tr.finite:
        if any(not c.finite for c in ctrls):
            return INCONCLUSIVE, (
                f"the batch overflows in {prec} at {where}, but so do "
                f"{sum(not c.finite for c in ctrls)} of {len(ctrls)} control batches"
            )
        return CONFIRMED, (
            f"the batch overflows in {prec} at {where} (fp32 largest value "
            f"{fmt_num(largest(fp32))} vs {prec} max {dtype_max(prec):.4g}); controls stay finite"
        )
    used = largest(tr) / dtype_max(prec)
    if used < 0.5:
        return REFUTED, f"the batch stays finite in {prec}, using {used:.2%} of its range"
    return INCONCLUSIVE, f"the batch stays finite in {prec} but uses {used:.0%} of its range"
