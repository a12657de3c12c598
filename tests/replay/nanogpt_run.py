"""A nanoGPT run written the way karpathy/nanoGPT's train.py writes one: the replay's test
subject for nanoGPT checkpoints.

The loop below is a transcription of train.py (get_lr, configure_optimizers' decay groups,
gradient accumulation with loss / GA, clip_grad_norm_, AdamW), with one change nanoGPT users
make when they want reproducible data: batches are read in order from a headerless uint16
`train.bin` (llm.c's sequential rule) instead of `get_batch`'s random offsets. `ckpt.pt` is
saved at the top of iteration CKPT_ITER with nanoGPT's keys (`model` with the `_orig_mod.`
prefix of a compiled model, `optimizer`, `model_args`, `iter_num`, `best_val_loss`,
`config`), and the log is nanoGPT's `iter N: loss ...` lines. Half the rows of iteration
RARE_ITER's batch are token ids that appear nowhere else in the stream.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from forensics.sim.model import NanoGPT, NanoGPTConfig

B, T, GA = 8, 32, 1
VOCAB, COMMON = 256, 96  # ids >= COMMON only in the injected batch
ITERS, CKPT_ITER, RARE_ITER = 80, 40, 55
CONFIG: dict[str, Any] = {
    "out_dir": "out", "eval_interval": CKPT_ITER, "log_interval": 1, "eval_iters": 10,
    "always_save_checkpoint": True, "dataset": "synthetic", "batch_size": B, "block_size": T,
    "gradient_accumulation_steps": GA, "n_layer": 2, "n_head": 2, "n_embd": 32, "dropout": 0.0,
    "bias": True, "learning_rate": 3e-3, "max_iters": ITERS, "weight_decay": 0.1, "beta1": 0.9,
    "beta2": 0.99, "grad_clip": 1.0, "decay_lr": True, "warmup_iters": 10,
    "lr_decay_iters": ITERS, "min_lr": 3e-4, "device": "cpu", "dtype": "float32",
    "compile": False,
}  # fmt: skip


def stream(seed: int = 3) -> np.ndarray:
    """A learnable token stream (each id mostly followed by one of two successors) with one
    injected batch of rare ids at RARE_ITER (rows 0-3 of its B rows)."""
    rng = np.random.default_rng(seed)
    succ = rng.integers(0, COMMON, size=(COMMON, 2))
    n = (ITERS * GA + 1) * B * T + 1  # train.py prefetches one batch past the last iteration
    out = np.empty(n, dtype=np.uint16)
    w = 0
    for i in range(n):
        out[i] = w
        w = int(succ[w, rng.integers(0, 2)]) if rng.random() < 0.95 else int(rng.integers(COMMON))
    start = RARE_ITER * GA * B * T
    out[start : start + (B // 2) * T] = rng.integers(COMMON, VOCAB, size=(B // 2) * T)
    return out


def get_lr(it: int) -> float:
    c = CONFIG
    if it < c["warmup_iters"]:
        return c["learning_rate"] * (it + 1) / (c["warmup_iters"] + 1)
    if it > c["lr_decay_iters"]:
        return c["min_lr"]
    ratio = (it - c["warmup_iters"]) / (c["lr_decay_iters"] - c["warmup_iters"])
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return c["min_lr"] + coeff * (c["learning_rate"] - c["min_lr"])


def build_nanogpt_run(root: Path) -> dict[str, Any]:
    """Train ITERS iterations; returns the run folder, the shard and the logged losses."""
    run = root / "run"
    run.mkdir(parents=True)
    data = stream()
    data.tofile(run / "train.bin")
    torch.manual_seed(1337)
    args = {k: CONFIG[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "bias", "dropout")}
    model_args = args | {"vocab_size": VOCAB}
    model = NanoGPT(NanoGPTConfig(**model_args))
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": CONFIG["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    betas = (CONFIG["beta1"], CONFIG["beta2"])
    opt = torch.optim.AdamW(groups, lr=CONFIG["learning_rate"], betas=betas)
    pos = 0

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal pos
        span = torch.from_numpy(data[pos : pos + B * T + 1].astype(np.int64))
        pos += B * T
        return span[:-1].view(B, T), span[1:].view(B, T)

    lines, losses = [], {}
    t0 = time.perf_counter()
    x, y = get_batch()
    for it in range(ITERS):
        lr = get_lr(it)
        for g in opt.param_groups:
            g["lr"] = lr
        if it == CKPT_ITER:
            torch.save({
                "model": {f"_orig_mod.{k}": v for k, v in model.state_dict().items()},
                "optimizer": opt.state_dict(), "model_args": model_args, "iter_num": it,
                "best_val_loss": 9.9, "config": CONFIG,
            }, run / "ckpt.pt")  # fmt: skip
        for _ in range(GA):
            _, loss = model(x, y)
            assert loss is not None
            loss = loss / GA
            x, y = get_batch()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CONFIG["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        lossf = loss.item() * GA
        losses[it] = lossf
        lines.append(f"iter {it}: loss {lossf:.4f}, time 12.34ms, mfu -100.00%")
    train_s = time.perf_counter() - t0
    (run / "train.log").write_text("\n".join(lines) + "\n")
    return {"run": run, "shard": run / "train.bin", "losses": losses, "train_s": train_s}
