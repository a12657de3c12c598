"""The bundled reference model: a small decoder-only GPT you can read in one sitting.

Pre-LN transformer with RMSNorm, SwiGLU MLPs and rotary positions (LLaMA-style), written in
plain PyTorch after nanoGPT. The simulator trains it to produce runs with known faults, and
the replay stage re-runs the offending batches through it, so it exposes what forensics needs:

- `forward(idx, targets=None, reduction="mean") -> (logits, loss)`; `reduction="none"` gives
  the per-token loss (B, T) so replay can attribute a spike to tokens and backprop one token's
  loss at a time to get its share of the gradient.
- `forward(..., record=True)` fills `model.stats` with per-layer activation L2 norms and max
  attention logits (attention is then computed explicitly; otherwise it uses SDPA).
- Stabilisers that are OFF by default (qk_norm, z_loss, post_norm, attn_softcap) so a replay can
  ask "would this option have prevented the spike?".
- `GPTConfig.to_dict()` carries `"arch": "forensics-gpt"`; checkpoints store it, so
  `forensics.sim.checkpoint.load_checkpoint(path)` alone rebuilds the model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

ARCH = "forensics-gpt"


def known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The entries of `data` that are fields of dataclass `cls` (a checkpoint's config dict
    carries `arch` and, from other versions, keys this one does not know)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class GPTConfig:
    vocab_size: int = 512  # token ids the model embeds and predicts (rows of wte / lm_head)
    block_size: int = 64  # longest sequence accepted; also the length of the rotary table
    n_layer: int = 2  # transformer blocks
    n_head: int = 4  # attention heads per block; n_embd must divide by it
    n_embd: int = 64  # width of the residual stream
    mlp_hidden: int = 0  # SwiGLU hidden width; 0 means 8/3 * n_embd rounded up to 16
    rope_base: float = 10000.0  # rotary frequency base (theta)
    norm_eps: float = 1e-5  # epsilon inside every RMSNorm
    init_std: float = 0.02  # std of weight init; residual projections get /sqrt(2 * n_layer)
    tie_embeddings: bool = True  # lm_head shares the token-embedding matrix (nanoGPT/GPT-2)
    qk_norm: bool = False  # stabiliser: RMSNorm on q and k per head before the dot product
    z_loss: float = 0.0  # stabiliser: coefficient of z-loss, mean(logsumexp(logits)^2); 0 = off
    post_norm: bool = False  # stabiliser: extra RMSNorm after attn/MLP output projections
    attn_softcap: float = 0.0  # stabiliser: logits -> c*tanh(logits/c) with c = this; 0 = off

    def __post_init__(self) -> None:
        assert self.n_embd % self.n_head == 0, (
            f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}"
        )
        assert (self.n_embd // self.n_head) % 2 == 0, "head size must be even for rotary"
        assert self.vocab_size > 0 and self.block_size > 0 and self.n_layer > 0

    @property
    def hidden(self) -> int:
        """SwiGLU hidden width (resolved from mlp_hidden)."""
        if self.mlp_hidden:
            return self.mlp_hidden
        return 16 * math.ceil(8 * self.n_embd / 3 / 16)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict with `arch` so checkpoint indexers recognise the bundled model."""
        return {"arch": ARCH, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPTConfig:
        """Inverse of to_dict; ignores `arch` and unknown keys so old checkpoints still load."""
        return cls(**known_fields(cls, data))


# Presets. `tiny` trains a few thousand steps on a 2-core CPU in about a minute (~0.13M params);
# `small` (~51M params) is meant for a GPU.
PRESETS: dict[str, GPTConfig] = {
    "tiny": GPTConfig(vocab_size=512, block_size=64, n_layer=2, n_head=4, n_embd=64),
    "small": GPTConfig(vocab_size=4096, block_size=512, n_layer=10, n_head=10, n_embd=640),
}


def preset(name: str, **overrides: Any) -> GPTConfig:
    """A copy of a preset config with some fields replaced."""
    assert name in PRESETS, f"unknown preset {name!r}; choose one of {sorted(PRESETS)}"
    return GPTConfig.from_dict({**asdict(PRESETS[name]), **overrides})


def _cpu_fp16(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype == torch.float16


class Linear(nn.Linear):
    """nn.Linear (no bias) that, for fp16 on CPU, multiplies in fp32 and rounds the result to
    fp16 -- what a GPU fp16 GEMM with fp32 accumulation does -- because CPU fp16 GEMM is ~10x
    slower. Overflow past 65504 still becomes inf, exactly as on a GPU."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(n_in, n_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _cpu_fp16(x):
            return F.linear(x.float(), self.weight.float()).to(x.dtype)
        return super().forward(x)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 so fp16 activations cannot overflow in x**2."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def rotary_table(cfg: GPTConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (block_size, head_size/2)."""
    hs = cfg.n_embd // cfg.n_head
    inv_freq = 1.0 / (cfg.rope_base ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
    angles = torch.outer(torch.arange(cfg.block_size, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x1, x2) of the head dimension; x is (B, nh, T, hs), cos/sin (T, hs/2)."""
    x1, x2 = x.float().chunk(2, dim=-1)  # (B, nh, T, hs/2) each
    out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (B, nh, T, hs)
    return out.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_head, self.hs = cfg.n_head, cfg.n_embd // cfg.n_head
        self.qkv = Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = Linear(cfg.n_embd, cfg.n_embd)
        self.q_norm = RMSNorm(self.hs, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.hs, cfg.norm_eps) if cfg.qk_norm else None

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, stats: list[float] | None
    ) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q = q.view(B, T, self.n_head, self.hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, self.hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, self.hs).transpose(1, 2)  # (B, nh, T, hs)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if stats is None and not self.cfg.attn_softcap and _cpu_fp16(q):
            y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
            y = y.to(q.dtype)  # (B, nh, T, hs); fp32 math for speed, as for Linear
        elif stats is None and not self.cfg.attn_softcap:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        else:
            y = self._explicit(q, k, v, stats)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.proj(y)

    def _explicit(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, stats: list[float] | None
    ) -> torch.Tensor:
        """Attention spelled out, so the logits can be soft-capped and their max recorded."""
        T = q.size(2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))  # (B, nh, T, T)
        if self.cfg.attn_softcap:
            cap = self.cfg.attn_softcap
            att = cap * torch.tanh(att / cap)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # (T, T)
        if stats is not None:
            stats.append(float(att.detach().float().masked_fill(~mask, -math.inf).max()))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att.float(), dim=-1).to(v.dtype)  # (B, nh, T, T)
        return att @ v  # (B, nh, T, hs)


class SwiGLU(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.gate = Linear(cfg.n_embd, cfg.hidden)
        self.up = Linear(cfg.n_embd, cfg.hidden)
        self.down = Linear(cfg.hidden, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))  # (B, T, hidden) -> (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ln_2 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)
        self.post_1 = RMSNorm(cfg.n_embd, cfg.norm_eps) if cfg.post_norm else nn.Identity()
        self.post_2 = RMSNorm(cfg.n_embd, cfg.norm_eps) if cfg.post_norm else nn.Identity()

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, stats: list[float] | None
    ) -> torch.Tensor:
        x = x + self.post_1(self.attn(self.ln_1(x), cos, sin, stats))  # (B, T, C)
        return x + self.post_2(self.mlp(self.ln_2(x)))  # (B, T, C)


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.lm_head = Linear(cfg.n_embd, cfg.vocab_size)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        cos, sin = rotary_table(cfg)
        # Not persistent: rebuilt from the config, so checkpoints hold parameters only.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # Filled by forward(record=True): {"act_norm": [per layer], "max_attn_logit": [...]}.
        self.stats: dict[str, list[float]] = {}
        # Multiplies the token embeddings; 1.0 normally. The trainer sets it from a batch's
        # manifest record (`input_scale`), which is how the fp16_overflow scenario feeds
        # activations past 65504 reproducibly.
        self.input_scale = 1.0
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.down.weight")):
                nn.init.normal_(p, mean=0.0, std=cfg.init_std / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=self.cfg.init_std)

    def num_params(self) -> int:
        """Parameter count (a tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        reduction: str = "mean",
        record: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) int64 -> logits (B, T, V) and the loss when targets (B, T) are given.

        reduction="mean": scalar fp32 loss (targets == -1 are ignored); "none": (B, T) per-token
        loss. record=True fills self.stats (slower: explicit attention).
        """
        B, T = idx.shape
        assert self.cfg.block_size >= T, f"sequence length {T} > block_size {self.cfg.block_size}"
        assert reduction in ("mean", "none"), f"reduction must be 'mean' or 'none', not {reduction}"
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # type: ignore[index]  # (T, hs/2)
        x = self.wte(idx)  # (B, T, C)
        if self.input_scale != 1.0:
            x = x * self.input_scale
        attn_max: list[float] | None = [] if record else None
        act_norm: list[float] = []
        for block in self.blocks:
            x = block(x, cos, sin, attn_max)  # (B, T, C)
            if record:
                act_norm.append(float(x.detach().float().norm(dim=-1).mean()))
        if record:
            self.stats = {"act_norm": act_norm, "max_attn_logit": attn_max or []}
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        return logits, self.loss(logits, targets, reduction)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, reduction: str) -> torch.Tensor:
        """Cross-entropy in fp32 (+ z-loss when enabled); per token when reduction='none'."""
        assert targets.shape == logits.shape[:2], "targets must be (B, T) like idx"
        flat = logits.float().view(-1, logits.size(-1))  # (B*T, V)
        tok = F.cross_entropy(flat, targets.view(-1), ignore_index=-1, reduction="none")  # (B*T,)
        if self.cfg.z_loss:
            tok = tok + self.cfg.z_loss * torch.logsumexp(flat, dim=-1).pow(2)
        valid = (targets.view(-1) != -1).float()  # (B*T,)
        tok = tok * valid
        if reduction == "none":
            return tok.view(targets.shape)  # (B, T)
        return tok.sum() / valid.sum().clamp(min=1.0)


# ---------------------------------------------------------------------------- nanoGPT variant
# karpathy/nanoGPT's GPT-2 architecture, module for module (LayerNorm with optional bias, GELU
# MLP, learned positions, fused qkv), so that a nanoGPT `ckpt.pt` loads with its own state-dict
# keys and computes exactly what nanoGPT computes. It exposes the interface replay measures
# through (`cfg.vocab_size`, `blocks`, `wte`, `ln_f`, `lm_head`, `input_scale`, `stats`,
# `forward(idx, targets, reduction)`); unlike nanoGPT's forward, inference returns the logits
# of every position, not only the last one.
NANOGPT_ARCH = "nanogpt"


@dataclass
class NanoGPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # bias in Linears and LayerNorms, like GPT-2

    def to_dict(self) -> dict[str, Any]:
        return {"arch": NANOGPT_ARCH, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NanoGPTConfig:
        return cls(**known_fields(cls, data))


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's cannot drop only the bias)."""

    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class NanoAttention(nn.Module):
    def __init__(self, cfg: NanoGPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.n_head, self.n_embd, self.dropout = cfg.n_head, cfg.n_embd, cfg.dropout
        self.record = False  # set by NanoGPT.forward(record=True): keep max_logit
        self.max_logit = math.nan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # (B, T, C) each
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.record:  # a side computation: the output below is nanoGPT's, untouched
            with torch.no_grad():
                att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))  # (B, nh, T, T)
                causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                self.max_logit = float(att.float().masked_fill(~causal, -math.inf).max())
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class NanoMLP(nn.Module):
    def __init__(self, cfg: NanoGPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class NanoBlock(nn.Module):
    def __init__(self, cfg: NanoGPTConfig) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = NanoAttention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = NanoMLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, cfg: NanoGPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(cfg.vocab_size, cfg.n_embd),
                "wpe": nn.Embedding(cfg.block_size, cfg.n_embd),
                "drop": nn.Dropout(cfg.dropout),
                "h": nn.ModuleList(NanoBlock(cfg) for _ in range(cfg.n_layer)),
                "ln_f": LayerNorm(cfg.n_embd, bias=cfg.bias),
            }
        )
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as nanoGPT does
        self.input_scale = 1.0
        self.stats: dict[str, list[float]] = {}
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @property
    def blocks(self) -> nn.ModuleList:
        return cast(nn.ModuleList, self.transformer["h"])

    @property
    def wte(self) -> nn.Embedding:
        return cast(nn.Embedding, self.transformer["wte"])

    @property
    def ln_f(self) -> nn.Module:
        return self.transformer["ln_f"]

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        reduction: str = "mean",
        record: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) -> logits (B, T, V) and nanoGPT's loss (ignore_index=-1) when targets
        are given; reduction="none" gives it per token (B, T)."""
        B, T = idx.shape
        assert self.cfg.block_size >= T, f"sequence length {T} > block_size {self.cfg.block_size}"
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)  # (T,)
        tok = self.wte(idx)
        if self.input_scale != 1.0:
            tok = tok * self.input_scale
        x = self.transformer["drop"](tok + self.transformer["wpe"](pos))  # (B, T, C)
        norms: list[float] = []
        attns = [cast(NanoAttention, b.attn) for b in self.blocks]
        for block, attn in zip(self.blocks, attns, strict=True):
            attn.record = record
            x = block(x)
            if record:
                norms.append(float(x.detach().float().norm(dim=-1).mean()))
        if record:
            logit_max = [a.max_logit for a in attns]
            self.stats = {"act_norm": norms, "max_attn_logit": logit_max}
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        flat = F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1, reduction="none"
        )
        if reduction == "none":
            return logits, flat.view(targets.shape)
        return logits, F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
        )


def load_nanogpt_checkpoint(path: Any) -> tuple[NanoGPT, dict[str, Any]]:
    """A nanoGPT `ckpt.pt` (`model_args`, `model` state dict, `optimizer`, `iter_num`...) as
    a NanoGPT with its weights, and the raw checkpoint. Keys compiled models prefix with
    `_orig_mod.` are unprefixed, and the causal-mask buffers (`attn.bias`) that nanoGPT saves
    without flash attention are dropped, as nanoGPT itself does when it resumes."""
    raw = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(raw, dict) or "model_args" not in raw or "model" not in raw:
        raise ValueError(f"{path}: not a nanoGPT checkpoint (needs model_args and model)")
    model = NanoGPT(NanoGPTConfig.from_dict(dict(raw["model_args"])))
    state = {k.removeprefix("_orig_mod."): v for k, v in raw["model"].items()}
    state = {k: v for k, v in state.items() if not k.endswith(".attn.bias")}
    model.load_state_dict(state)
    return model, raw
