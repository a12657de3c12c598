"""A plain PyTorch loop over the bundled model with the recorder on (shared by the tests and
the overhead benchmark): the simulator's step, written out as a user would write it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from forensics.record import Recorder
from forensics.sim.data import (
    INJECT_SHARD,
    TRAIN_SHARD,
    BatchRecord,
    prepare_data,
    read_batch,
    write_shard,
)
from forensics.sim.model import GPTConfig
from forensics.sim.trainer import (
    TrainConfig,
    build_state,
    lr_at,
    sampled_batches,
    save_state,
    shard_tokens,
)

B, T, V = 4, 32, 256
RARE_STEP = 35


def tiny_config(**overrides: Any) -> TrainConfig:
    model = GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=32)
    base: dict[str, Any] = {
        "model": model, "total_steps": 45, "batch_size": B, "seq_len": T, "warmup_steps": 5,
        "ckpt_steps": [20, 40], "log_layers_every": 0, "device": "cpu", "data_tokens": 32768,
    }  # fmt: skip
    return TrainConfig(**(base | overrides))


def prepare(run_dir: Path, rare_step: int | None = RARE_STEP) -> dict[int, list[BatchRecord]]:
    """Data of the run (shard, counts) and the batch overrides: rare-band ids at rare_step."""
    lang = prepare_data(run_dir, V, 32768, 7)
    if rare_step is None:
        return {}
    rare = np.random.default_rng(0).integers(lang.rare_start, V, B * T + 1)
    write_shard(run_dir / INJECT_SHARD, rare.astype(np.uint16))
    return {rare_step: [BatchRecord(rare_step, 0, INJECT_SHARD, 0, B * T + 1, T, B)]}


def train(
    run_dir: Path,
    cfg: TrainConfig,
    overrides: dict[int, list[BatchRecord]],
    recorder: Recorder | None,
) -> list[float]:
    """Train like `forensics.sim.trainer.train_step`, calling the recorder's two hooks."""
    state = build_state(cfg, run_dir)
    model, opt = state.model, state.optimizer
    batches = sampled_batches(cfg, shard_tokens(run_dir, TRAIN_SHARD), overrides)
    losses = []
    for step in range(1, cfg.total_steps + 1):
        records = batches(step)
        opt.zero_grad(set_to_none=True)
        total, fed = 0.0, []
        for rec in records:
            x, y = read_batch(run_dir, rec)
            _, loss = model(x, y)
            assert loss is not None
            (loss * (1.0 / len(records))).backward()
            total += float(loss.detach())
            fed.append({
                "input_ids": x, "source": str(run_dir / rec.source),
                "token_offset": rec.token_offset, "n_tokens": rec.n_tokens,
                "seq_len": rec.seq_len, "batch_size": rec.batch_size,
            })  # fmt: skip
        if recorder is not None:
            recorder.after_backward(model)
        params = [p for p in model.parameters() if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip, error_if_nonfinite=False)
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        opt.step()
        state.step = step
        if recorder is not None:
            recorder.after_step(model, opt, total / len(records), batch=fed)
        if step in cfg.ckpt_steps:
            save_state(state)
        losses.append(total / len(records))
    return losses
