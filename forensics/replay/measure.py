"""Measurements of one batch on one model state: per-token loss, how the gradient splits
between groups of tokens, and a per-layer trace of a forward/backward pass in a given dtype.

Every function works on its own copy of the model or clears what it leaves behind (grads,
input_scale), so measuring never perturbs the replayed training state.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from forensics.sim.model import GPT

Batch = list[tuple[torch.Tensor, torch.Tensor, float]]  # (x, y, input_scale) per micro-batch


def as_dtype(master: GPT, dtype: torch.dtype) -> GPT:
    """A detached copy of the fp32 master model in `dtype` (how the run's compute copy is made)."""
    model = copy.deepcopy(master)
    model.zero_grad(set_to_none=True)
    return model.to(dtype)


@contextmanager
def scaled(model: GPT, scale: float) -> Iterator[GPT]:
    """Set the batch's input_scale (fp16_overflow batches carry one) for the duration."""
    model.input_scale = scale
    try:
        yield model
    finally:
        model.input_scale = 1.0


@torch.no_grad()
def token_losses(model: GPT, batch: Batch) -> torch.Tensor:
    """Per-position loss of every micro-batch, flattened to (N,) fp32 on the CPU."""
    out = []
    for x, y, s in batch:
        with scaled(model, s):
            _, tok = model(x, y, reduction="none")
        assert tok is not None
        out.append(tok.float().flatten().cpu())
    return torch.cat(out)


def group_grad_norms(model: GPT, batch: Batch, masks: list[torch.Tensor]) -> list[float]:
    """L2 norm of the gradient of each group's share of the batch loss (sum over the group's
    positions / all positions), one backward per group: how much of the update each group
    of tokens drives."""
    n = sum(int(y.numel()) for _, y, _ in batch)
    norms = []
    for mask in masks:
        model.zero_grad(set_to_none=True)
        offset = 0
        for x, y, s in batch:
            m = mask[offset : offset + y.numel()].to(x.device)
            offset += y.numel()
            if not bool(m.any()):
                continue
            with scaled(model, s):
                _, tok = model(x, y, reduction="none")
            assert tok is not None
            (tok.flatten()[m].sum() / n).backward()
        norms.append(grad_norm(model))
    model.zero_grad(set_to_none=True)
    return norms


@torch.no_grad()
def grad_norm(model: nn.Module) -> float:
    grads = [p.grad.float().norm() for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(grads))) if grads else 0.0


@dataclass
class Trace:
    """One forward/backward pass of a batch in one dtype, per layer (block)."""

    dtype: str
    loss: float
    embed_max_abs: float
    max_abs: list[float]  # largest |activation| at each block's output
    max_attn_logit: list[float]  # largest pre-softmax attention logit in each block
    act_norm: list[float]  # mean L2 norm of each block's output (model.stats)
    logits_max_abs: float
    first_nonfinite: str | None  # "embed", "block i", "logits", "loss" or None (forward)
    grad_nonfinite: list[str] = field(default_factory=list)  # blocks with a non-finite grad

    @property
    def finite(self) -> bool:
        return self.first_nonfinite is None and not self.grad_nonfinite

    def numbers(self) -> dict[str, Any]:
        return {
            "loss": self.loss,
            "max_abs_act": self.max_abs,
            "max_attn_logit": self.max_attn_logit,
            "embed_max_abs": self.embed_max_abs,
            "logits_max_abs": self.logits_max_abs,
            "first_nonfinite": self.first_nonfinite,
            "grad_nonfinite": self.grad_nonfinite,
        }


class _Recorder:
    """Forward hooks that keep the largest |value| seen at each watched module, in order."""

    def __init__(self, model: GPT) -> None:
        self.values: dict[str, float] = {}
        self.handles = [model.blocks[0].register_forward_pre_hook(self._pre)]
        for i, block in enumerate(model.blocks):
            self.handles.append(block.register_forward_hook(self._hook(f"block {i}")))
        self.handles.append(model.lm_head.register_forward_hook(self._hook("logits")))

    def _pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        self._keep("embed", args[0])

    def _hook(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
            self._keep(name, out)

        return hook

    def _keep(self, name: str, t: torch.Tensor) -> None:
        v = float(t.detach().float().abs().max())
        old = self.values.get(name, 0.0)
        if not math.isnan(old) and (math.isnan(v) or v > old):  # a NaN, once seen, stays
            self.values[name] = v
        else:
            self.values[name] = old

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def trace(master: GPT, batch: Batch, dtype: torch.dtype, loss_scale: float = 1.0) -> Trace:
    """Forward (recording activations and attention logits) and backward of `batch` on a
    copy of `master` in `dtype`, the loss multiplied by `loss_scale` as a loss scaler would."""
    model = as_dtype(master, dtype)
    rec = _Recorder(model)
    losses, attn, norms = [], [], []
    try:
        for x, y, s in batch:
            with scaled(model, s):
                _, loss = model(x, y, record=True)
            assert loss is not None
            (loss * (loss_scale / len(batch))).backward()
            losses.append(float(loss.detach()))
            attn.append(model.stats.get("max_attn_logit", []))
            norms.append(model.stats.get("act_norm", []))
    finally:
        rec.close()
    n_layer = len(model.blocks)
    return Trace(
        dtype=str(dtype).removeprefix("torch."),
        loss=sum(losses) / len(losses),
        embed_max_abs=rec.values.get("embed", math.nan),
        max_abs=[rec.values.get(f"block {i}", math.nan) for i in range(n_layer)],
        max_attn_logit=[_max(a[i] for a in attn) for i in range(n_layer)],
        act_norm=[sum(a[i] for a in norms) / len(norms) for i in range(n_layer)],
        logits_max_abs=rec.values.get("logits", math.nan),
        first_nonfinite=_first_nonfinite(rec.values, n_layer, losses),
        grad_nonfinite=_grad_nonfinite(model),
    )


def _max(values: Any) -> float:
    vals = list(values)
    return math.nan if any(math.isnan(v) for v in vals) else max(vals)


def _first_nonfinite(values: dict[str, float], n_layer: int, losses: list[float]) -> str | None:
    for name in ["embed", *(f"block {i}" for i in range(n_layer)), "logits"]:
        if not math.isfinite(values.get(name, 0.0)):
            return name
    return None if all(math.isfinite(v) for v in losses) else "loss"


@torch.no_grad()
def _grad_nonfinite(model: GPT) -> list[str]:
    bad = []
    groups: list[tuple[str, nn.Module]] = [("embed", model.wte)]
    groups += [(f"block {i}", b) for i, b in enumerate(model.blocks)]
    groups.append(("ln_f", model.ln_f))
    for name, module in groups:
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        if any(not bool(torch.isfinite(g).all()) for g in grads):
            bad.append(name)
    return bad
