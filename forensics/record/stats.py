"""Per-step statistics as device tensors: nothing here calls `.item()` or moves data to the host.

The definitions are the simulator's (`forensics.sim.trainer`), so a recorded run and a
simulated one mean the same thing by each name: `grad_norm` is the global L2 norm of the
gradients before clipping, `param_norm` that of the parameters after the step, `update_norm`
that of (parameters after - parameters before), `adam_v_mean` the mean of Adam's `exp_avg_sq`
over every element. Norms are kept squared (sums of squares) until the logging interval, so
that a sharded model's pieces can be summed across ranks before the square root.
"""

from __future__ import annotations

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
    return [p.detach().clone() for p in params]


@torch.no_grad()
def update_sq(params: Sequence[torch.Tensor], before: list[torch.Tensor]) -> torch.Tensor | None:
    """Squared norm of (after - before), the update the optimizer step applied.

    The difference is taken in place in `before` (the snapshot is not used again), so no
    second copy of the parameters is allocated.
    """
    if not before:
        return None
    torch._foreach_sub_(before, list(params))
    return sq_sum(before)


def _max_of(vs: list[torch.Tensor]) -> torch.Tensor:
    """The largest element over tensors (fused where torch has `_foreach_max`).

    Not `_foreach_norm(vs, inf)`: on CPU it costs ten times an L2 norm; v >= 0 anyway.
    """
    fused = getattr(torch, "_foreach_max", None)
    parts = fused(vs) if fused is not None else [v.max() for v in vs]
    return _stacked(parts).max()


@torch.no_grad()
def adam_moments(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Sums over Adam's state: v (exp_avg_sq) sum, sum of squares, max, count; m sum of squares.

    v is non-negative, so its sum is a plain sum and its max its inf-norm. Empty for an
    optimizer without Adam state (SGD) or before its first step.
    """
    vs: list[torch.Tensor] = []
    ms: list[torch.Tensor] = []
    for s in optimizer.state.values():
        v = s.get("exp_avg_sq")
        if isinstance(v, torch.Tensor) and v.numel():
            vs.append(v)
        m = s.get("exp_avg")
        if isinstance(m, torch.Tensor) and m.numel():
            ms.append(m)
    if not vs:
        return {}
    count = float(sum(v.numel() for v in vs))
    out = {
        "v_sum": _stacked([v.sum() for v in vs]).sum(),
        "v_sq": sq_sum(vs),
        "v_max": _max_of(vs),
        "v_count": torch.full((), count, device=vs[0].device),
    }
    m_sq = sq_sum(ms)
    if m_sq is not None:
        out["m_sq"] = m_sq
    return out  # type: ignore[return-value]


def loss_scale_of(scaler: object | None) -> torch.Tensor | None:
    """The current scale of a `torch.amp.GradScaler` (a device tensor), None when off."""
    if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
        return None
    scale = getattr(scaler, "_scale", None)
    if isinstance(scale, torch.Tensor):
        return scale.detach().float().reshape(()).clone()
    return torch.tensor(float(scaler.get_scale()))  # type: ignore[attr-defined]
