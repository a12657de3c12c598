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


def sq_sum(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """Sum of squares of every element, as one fp32 scalar on the first tensor's device."""
    if not tensors:
        return None
    device = tensors[0].device
    norms = torch._foreach_norm([t.detach() for t in tensors], 2)  # one kernel per dtype group
    stacked = torch.stack([n.float().to(device, non_blocking=True) for n in norms])
    return stacked.pow(2).sum()


def grads_of(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [p.grad for p in params if p.grad is not None]


def snapshot(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """A copy of the parameters, to measure the update the optimizer applies next."""
    return [p.detach().clone() for p in params]


def update_sq(params: Sequence[torch.Tensor], before: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """Squared norm of (after - before), the update the optimizer step applied."""
    if not before:
        return None
    deltas = torch._foreach_sub([p.detach() for p in params], list(before))
    return sq_sum(deltas)


def adam_moments(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Sums over Adam's state: v (exp_avg_sq) sum, sum of squares, max, count; m sum of squares.

    Empty for an optimizer without Adam state (SGD) or before its first step.
    """
    vs = [s["exp_avg_sq"] for s in optimizer.state.values() if "exp_avg_sq" in s]
    ms = [s["exp_avg"] for s in optimizer.state.values() if "exp_avg" in s]
    if not vs:
        return {}
    device = vs[0].device
    v_sum = torch.stack([v.float().sum().to(device) for v in vs]).sum()
    v_max = torch.stack([v.float().max().to(device) for v in vs if v.numel()]).max()
    count = torch.tensor(float(sum(v.numel() for v in vs)), device=device)
    out = {"v_sum": v_sum, "v_sq": sq_sum(vs), "v_max": v_max, "v_count": count}
    m_sq = sq_sum(ms)
    if m_sq is not None:
        out["m_sq"] = m_sq
    return {k: v for k, v in out.items() if v is not None}


def loss_scale_of(scaler: object | None) -> torch.Tensor | None:
    """The current scale of a `torch.amp.GradScaler` (a device tensor), None when off."""
    if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
        return None
    scale = getattr(scaler, "_scale", None)
    if isinstance(scale, torch.Tensor):
        return scale.detach().float().reshape(()).clone()
    return torch.tensor(float(scaler.get_scale()))  # type: ignore[attr-defined]
