"""Sampled per-layer statistics every N steps: `act_norm/<i>`, `act_max/<i>`, `max_attn_logit/<i>`.

Same definitions as the bundled model's `forward(record=True)` (`forensics.sim.model`):
`act_norm/<i>` is the mean over tokens of the L2 norm of block i's output (the residual
stream); `max_attn_logit/<i>` the largest pre-softmax attention logit of block i over heads,
batch and causal positions. `act_max/<i>` is the largest |element| of block i's output (what
overflows fp16 at 65504; replay's overflow probe measures the same). They are measured on
the step's first micro-batch during its own training forward (forward hooks, armed only on
sampled steps), so the weights are those the step started from.

Blocks are found without knowing the architecture: the largest `nn.ModuleList` whose
children all have one class (`model.blocks`, `model.model.layers`, `transformer.h`...).
Attention logits need q and k after rotary embedding, which fused kernels (SDPA, flash) never
materialise, so they are recomputed on sampled steps for the two attention layouts we know:
the bundled model's `Attention` and Llama-family attention in transformers (q_proj, k_proj,
`position_embeddings` passed in; Llama, Mistral, Qwen2/3, Gemma...). Other models get
`act_norm` only.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

_ATTN_NAMES = ("attn", "self_attn", "attention", "self_attention")


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks in order, or [] when no homogeneous ModuleList is found."""
    best: list[nn.Module] = []
    best_params = 0
    for module in model.modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        kinds = {type(m) for m in module}
        if len(kinds) != 1:
            continue
        n = sum(p.numel() for p in module.parameters())
        if n > best_params:
            best, best_params = list(module), n
    return best


def _attention_of(block: nn.Module) -> nn.Module | None:
    for name in _ATTN_NAMES:
        child = getattr(block, name, None)
        if isinstance(child, nn.Module):
            return child
    return None


def _causal_max(q: torch.Tensor, k: torch.Tensor, scale: float, cap: float = 0.0) -> torch.Tensor:
    """Largest logit (q @ k^T) * scale over causal positions; q, k (B, nh, T, hs)."""
    att = (q.float() @ k.float().transpose(-2, -1)) * scale  # (B, nh, T, T)
    if cap:
        att = cap * torch.tanh(att / cap)
    T = q.size(-2)
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # (T, T)
    return att.masked_fill(~mask, -math.inf).max()


def _bundled_logits(module: Any, args: tuple[Any, ...]) -> torch.Tensor | None:
    """forensics.sim.model.Attention.forward(x, cos, sin, stats)."""
    from forensics.sim.model import apply_rotary

    x, cos, sin = args[0], args[1], args[2]
    B, T, C = x.shape
    q, k, _ = module.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
    q = q.view(B, T, module.n_head, module.hs).transpose(1, 2)  # (B, nh, T, hs)
    k = k.view(B, T, module.n_head, module.hs).transpose(1, 2)  # (B, nh, T, hs)
    if module.q_norm is not None and module.k_norm is not None:
        q, k = module.q_norm(q), module.k_norm(k)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    return _causal_max(q, k, 1.0 / math.sqrt(module.hs), module.cfg.attn_softcap)


def _llama_logits(
    module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> torch.Tensor | None:
    """Llama-family attention: hidden_states and position_embeddings=(cos, sin) as inputs."""
    hidden = kwargs.get("hidden_states", args[0] if args else None)
    pos = kwargs.get("position_embeddings", args[1] if len(args) > 1 else None)
    rotate = getattr(sys.modules.get(type(module).__module__), "apply_rotary_pos_emb", None)
    if hidden is None or pos is None or rotate is None:
        return None
    head_dim = int(module.head_dim)
    B, T, _ = hidden.shape
    q = module.q_proj(hidden).view(B, T, -1, head_dim).transpose(1, 2)  # (B, nh, T, hd)
    k = module.k_proj(hidden).view(B, T, -1, head_dim).transpose(1, 2)  # (B, nkv, T, hd)
    if getattr(module, "q_norm", None) is not None and getattr(module, "k_norm", None) is not None:
        q = module.q_norm(q.transpose(1, 2)).transpose(1, 2)
        k = module.k_norm(k.transpose(1, 2)).transpose(1, 2)
    cos, sin = pos
    q, k = rotate(q, k, cos, sin)
    k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)  # GQA: (B, nh, T, hd)
    scale = float(getattr(module, "scaling", head_dim**-0.5))
    return _causal_max(q, k, scale, float(getattr(module.config, "attn_logit_softcapping", 0) or 0))


def _logit_fn(attn: nn.Module) -> Callable[..., torch.Tensor | None] | None:
    if type(attn).__module__ == "forensics.sim.model" and hasattr(attn, "qkv"):
        return lambda m, a, kw: _bundled_logits(m, a)
    if all(hasattr(attn, n) for n in ("q_proj", "k_proj", "head_dim")):
        return _llama_logits
    return None


class LayerProbe:
    """Forward hooks on each block, registered only while a sampled step is armed (a module
    with hooks takes PyTorch's slower call path, so they are not left on between samples);
    they measure while the model trains."""

    def __init__(self, model: nn.Module) -> None:
        self._armed = False
        self.act: dict[int, torch.Tensor] = {}
        self.act_max: dict[int, torch.Tensor] = {}
        self.logit: dict[int, torch.Tensor] = {}
        self.handles: list[Any] = []
        self.blocks = find_blocks(model)
        self.n_blocks = len(self.blocks)

    @property
    def armed(self) -> bool:
        return self._armed

    @armed.setter
    def armed(self, on: bool) -> None:
        if on and not self.handles:
            self._register()
        elif not on and self.handles:
            self.remove()
        self._armed = on

    def _register(self) -> None:
        for i, block in enumerate(self.blocks):
            self.handles.append(block.register_forward_hook(self._act_hook(i)))
            attn = _attention_of(block)
            fn = _logit_fn(attn) if attn is not None else None
            if attn is not None and fn is not None:
                hook = self._logit_hook(i, fn)
                self.handles.append(attn.register_forward_pre_hook(hook, with_kwargs=True))

    def _live(self, module: nn.Module) -> bool:
        return self.armed and module.training and torch.is_grad_enabled()

    def _act_hook(self, i: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not self._live(module) or i in self.act:
                return
            x = output[0] if isinstance(output, tuple | list) else output
            if isinstance(x, torch.Tensor) and x.dim() == 3:
                xf = x.detach().float()
                self.act[i] = xf.norm(dim=-1).mean()
                self.act_max[i] = xf.abs().max()

        return hook

    def _logit_hook(self, i: int, fn: Callable[..., torch.Tensor | None]) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if not self._live(module) or i in self.logit:
                return
            with torch.no_grad():
                try:
                    value = fn(module, args, kwargs)
                except (RuntimeError, ValueError, TypeError, AttributeError):
                    value = None  # an attention variant we do not know: act_norm only
            if value is not None:
                self.logit[i] = value

        return hook

    def take(self) -> dict[str, torch.Tensor]:
        """What the armed forward measured, as `act_norm/<i>` / `max_attn_logit/<i>`; disarms."""
        out = {f"act_norm/{i}": v for i, v in sorted(self.act.items())}
        out.update({f"act_max/{i}": v for i, v in sorted(self.act_max.items())})
        out.update({f"max_attn_logit/{i}": v for i, v in sorted(self.logit.items())})
        self.act, self.act_max, self.logit = {}, {}, {}
        self.armed = False
        return out

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
