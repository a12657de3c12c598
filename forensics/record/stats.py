"""Per-step statistics as device tensors: nothing here calls `.item()` or moves data to the host.

The definitions are the simulator's (`forensics.sim.trainer`), so a recorded run and a
simulated one mean the same thing by each name: `grad_norm` is the global L2 norm of the
gradients before clipping, `param_norm` that of the parameters after the step, `update_norm`
that of (parameters after - parameters before), `adam_v_mean` the mean of Adam's `exp_avg_sq`
over every element. Norms are kept squared (sums of squares) until the logging interval, so
that a sharded model's pieces can be summed across ranks before the square root.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def _stacked(norms: Sequence[torch.Tensor]) -> torch.Tensor:
    """One fp32 vector from per-tensor norms (a single stack in the common one-device case)."""
    device = norms[0].device
    if all(n.device == device and n.dtype == torch.float32 for n in norms):
        return torch.stack(list(norms))
    return torch.stack([n.float().to(device) for n in norms])


def sq_sum(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """Sum of squares of every element, as one fp32 scalar on the first tensor's device."""
    if not tensors:
        return None
    with torch.no_grad():
        return _stacked(torch._foreach_norm(list(tensors), 2)).pow(2).sum()


def grads_of(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [p.grad for p in params if p.grad is not None]


@torch.no_grad()
def snapshot(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """A copy of the parameters, to measure the update the optimizer applies next."""
    return list(torch._foreach_mul(list(params), 1.0))


@torch.no_grad()
def update_sq(
    params: Sequence[torch.Tensor], before: Sequence[torch.Tensor]
) -> torch.Tensor | None:
    """Squared norm of (after - before), the update the optimizer step applied."""
    if not before:
        return None
    return sq_sum(torch._foreach_sub(list(params), list(before)))


@torch.no_grad()
def adam_moments(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Sums over Adam's state: v (exp_avg_sq) sum, sum of squares, max, count; m sum of squares.

    v is non-negative, so its sum is its L1 norm and its max its inf-norm: three fused
    `_foreach_norm` calls cover it. Empty for an optimizer without Adam state (SGD) or before
    its first step.
    """
    vs = [s["exp_avg_sq"] for s in optimizer.state.values() if "exp_avg_sq" in s]
    vs = [v for v in vs if v.numel()]
    ms = [s["exp_avg"] for s in optimizer.state.values() if "exp_avg" in s]
    if not vs:
        return {}
    out = {
        "v_sum": _stacked(torch._foreach_norm(vs, 1)).sum(),
        "v_sq": _stacked(torch._foreach_norm(vs, 2)).pow(2).sum(),
        "v_max": _stacked(torch._foreach_norm(vs, math.inf)).max(),
        "v_count": torch.tensor(float(sum(v.numel() for v in vs)), device=vs[0].device),
    }
    m_sq = sq_sum(ms)
    if m_sq is not None:
        out["m_sq"] = m_sq
    return out


def loss_scale_of(scaler: object | None) -> torch.Tensor | None:
    """The current scale of a `torch.amp.GradScaler` (a device tensor), None when off."""
    if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
        return None
    scale = getattr(scaler, "_scale", None)
    if isinstance(scale, torch.Tensor):
        return scale.detach().float().reshape(()).clone()
    return torch.tensor(float(scaler.get_scale()))  # type: ignore[attr-defined]
