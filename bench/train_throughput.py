"""Training throughput of the simulator's reference model (tokens/s, and MFU on a GPU).

    python bench/train_throughput.py              # tiny on CPU; small on GPU when there is one
    python bench/train_throughput.py --steps 200  # longer timing window

- `tiny` on the CPU (1 thread, what `forensics simulate` uses): fp32 and bf16/fp16 steps.
- `small` on CUDA (bf16, 16 x 512 tokens): tokens/s and model FLOPs utilisation, counting
  6*N*T (N parameters, T tokens) plus attention 12*L*d*S*T (L layers, d width, S sequence
  length; PaLM appendix B) against the GPU's dense bf16 peak (H100/H200 SXM: 989 TFLOP/s).
- Without a GPU: `small` on the CPU for a few steps at batch 1 x 512, as a reference only.

Timings exclude the first steps (allocator and kernel warm-up) and the per-layer stats pass.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from forensics.sim.data import prepare_data
from forensics.sim.model import preset
from forensics.sim.trainer import TrainConfig, build_state, sampled_batches, train_steps

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def time_steps(cfg: TrainConfig, steps: int, warmup: int) -> tuple[float, float]:
    """(tokens/s, seconds/step) over `steps` steps after `warmup` steps."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        prepare_data(run_dir, cfg.model.vocab_size, cfg.data_tokens, cfg.data_seed)
        state = build_state(cfg, run_dir)
        batches = sampled_batches(cfg, cfg.data_tokens)
        train_steps(state, warmup, batches)
        if state.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_steps(state, steps, batches)
        if state.device.type == "cuda":
            torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / steps
    tokens = cfg.batch_size * cfg.grad_accum * cfg.seq_len
    return tokens / dt, dt


def flops_per_token(cfg: TrainConfig, n_params: int) -> float:
    """Training FLOPs per token: 6N for the matmuls plus 12*L*d*S for attention scores."""
    m = cfg.model
    return 6 * n_params + 12 * m.n_layer * m.n_embd * cfg.seq_len


def peak_flops() -> tuple[str, float | None]:
    name = torch.cuda.get_device_name()
    return name, next((v for k, v in PEAK_BF16.items() if k in name), None)


def bench_tiny(steps: int) -> None:
    base = TrainConfig(device="cpu", log_layers_every=0, total_steps=10_000, threads=1)
    for precision in ("fp32", "bf16", "fp16"):
        tps, dt = time_steps(replace(base, precision=precision), steps, warmup=10)
        print(f"tiny  cpu  {precision}: {tps:9.0f} tokens/s  {dt * 1e3:6.1f} ms/step "
              f"(batch {base.batch_size}x{base.seq_len}, 1 thread)")  # fmt: skip


def bench_small(device: str, steps: int) -> None:
    from forensics.sim.model import GPT

    model = preset("small")
    with torch.device("meta"):
        n_params = GPT(model).num_params()
    cfg = TrainConfig(
        model=model, preset="small", device=device, log_layers_every=0, total_steps=10_000,
        batch_size=16, seq_len=512, precision="bf16", data_tokens=1 << 21, threads=0,
    )  # fmt: skip
    if device == "cpu":
        cfg = replace(cfg, batch_size=1, precision="fp32", threads=os.cpu_count() or 1)
        tps, dt = time_steps(cfg, steps=3, warmup=1)
        threads = torch.get_num_threads()
        print(f"small cpu  fp32: {tps:9.0f} tokens/s  {dt:6.2f} s/step (batch 1x512, "
              f"{threads} threads; reference only, {n_params / 1e6:.1f}M params)")  # fmt: skip
        return
    tps, dt = time_steps(cfg, steps, warmup=10)
    name, peak = peak_flops()
    achieved = tps * flops_per_token(cfg, n_params)
    mfu = f"MFU {achieved / peak:.1%} of {peak / 1e12:.0f} TFLOP/s" if peak else "peak unknown"
    print(f"small {name} bf16: {tps:9.0f} tokens/s  {dt * 1e3:6.1f} ms/step  "
          f"{achieved / 1e12:.1f} TFLOP/s  {mfu}  ({n_params / 1e6:.1f}M params)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="timed steps per measurement")
    args = parser.parse_args()
    bench_tiny(args.steps)
    if torch.cuda.is_available():
        bench_small("cuda", args.steps)
    else:
        bench_small("cpu", args.steps)


if __name__ == "__main__":
    main()
