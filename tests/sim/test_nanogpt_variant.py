"""The nanoGPT-compatible variant loads a nanoGPT `ckpt.pt` and computes what nanoGPT computes.

`Reference` below is a transcription of karpathy/nanoGPT's model.py (GPT, Block, MLP,
CausalSelfAttention with flash attention, LayerNorm with optional bias), trimmed to the
forward pass. A checkpoint is written the way nanoGPT's train.py writes one (`model`,
`optimizer`, `model_args`, `iter_num`, `best_val_loss`, `config`), from a model compiled
with the `_orig_mod.` prefix; the bundled variant must give bit-identical logits and loss.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from forensics.sim.model import GPT, load_nanogpt_checkpoint, preset

ARGS = {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 32, "bias": True,
        "vocab_size": 300, "dropout": 0.0}  # fmt: skip


class RefLayerNorm(nn.Module):
    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class RefAttention(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class RefBlock(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        self.ln_1 = RefLayerNorm(c["n_embd"], bias=c["bias"])
        self.attn = RefAttention(c)
        self.ln_2 = RefLayerNorm(c["n_embd"], bias=c["bias"])
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.mlp.gelu = nn.GELU()
        self.mlp.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        m = self.mlp
        return x + m.c_proj(m.gelu(m.c_fc(self.ln_2(x))))


class Reference(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            drop=nn.Dropout(c["dropout"]),
            h=nn.ModuleList([RefBlock(c) for _ in range(c["n_layer"])]),
            ln_f=RefLayerNorm(c["n_embd"], bias=c["bias"]),
        ))  # fmt: skip
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        for p in self.parameters():  # non-trivial values everywhere, biases included
            nn.init.normal_(p, std=0.2 / math.sqrt(p.shape[-1]))

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def test_nanogpt_checkpoint_loads_and_reproduces_exactly(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ref = Reference(ARGS)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    x = torch.randint(0, ARGS["vocab_size"], (3, 32))
    y = torch.randint(0, ARGS["vocab_size"], (3, 32))
    _, loss = ref(x, y)
    loss.backward()
    opt.step()
    state = {f"_orig_mod.{k}": v for k, v in ref.state_dict().items()}  # torch.compile'd
    path = tmp_path / "ckpt.pt"
    torch.save({"model": state, "optimizer": opt.state_dict(), "model_args": ARGS,
                "iter_num": 1, "best_val_loss": torch.tensor(9.9), "config": {"batch_size": 3}},
               path)  # fmt: skip
    model, raw = load_nanogpt_checkpoint(path)
    assert raw["iter_num"] == 1 and raw["optimizer"]["state"]
    with torch.no_grad():
        want_logits, want_loss = ref(x, y)
        logits, got_loss = model(x, y)
        _, per_token = model(x, y, reduction="none")
    assert torch.equal(logits, want_logits) and torch.equal(got_loss, want_loss)
    assert per_token is not None and per_token.shape == (3, 32)
    assert torch.allclose(per_token.mean(), want_loss)
    assert model.cfg.to_dict()["arch"] == "nanogpt" and len(model.blocks) == 2


def test_the_bundled_preset_is_untouched() -> None:
    """The variant is a separate class: the reference model keeps RMSNorm/SwiGLU/rotary."""
    model = GPT(preset("tiny"))
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert model.cfg.to_dict()["arch"] == "forensics-gpt"
