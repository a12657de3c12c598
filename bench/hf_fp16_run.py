"""Write a real Hugging Face Trainer fp16 run on a GPU: what its log holds at overflow steps.

The fp16 loss scaler (torch.amp.GradScaler, through accelerate) skips a step whose scaled
gradients overflow and halves its scale; the Trainer still logs that step, with the
gradient norm it measured: `inf` or `nan`. forensics must read those as routine skipped
steps, not as hardware faults. A tiny Llama (built from a config, nothing downloaded) trains
on random tokens with fp16; the scaler starts high (2^24) and doubles every 50 clean steps,
so it overflows every few dozen steps, as a long run does every growth_interval (2000).

    python bench/hf_fp16_run.py OUT_DIR [--steps 400]     # needs CUDA

OUT_DIR gets the Trainer's output folder (checkpoint-N/trainer_state.json) and prints the
steps whose logged grad_norm is not finite. tests/fixtures/hf_fp16_overflow/ holds one such
trainer_state.json, written by this script on an H100.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--cpu-smoke", action="store_true", help="fp32 on the CPU: API check only")
    args = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=128)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    # a skewed token distribution: something to learn, so the loss falls as a real run's
    weights = 1.0 / torch.arange(1, 513, dtype=torch.float) ** 1.1
    rows = [torch.multinomial(weights, 64, replacement=True, generator=g) for _ in range(4096)]
    data = [{"input_ids": r, "labels": r.clone()} for r in rows]
    targs = TrainingArguments(
        output_dir=str(args.out), max_steps=args.steps, per_device_train_batch_size=8,
        learning_rate=1e-3, warmup_steps=40, lr_scheduler_type="cosine", logging_steps=1,
        save_steps=args.steps, report_to=[], fp16=not args.cpu_smoke, max_grad_norm=1.0,
        seed=42, use_cpu=args.cpu_smoke, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = Trainer(model=model, args=targs, train_dataset=data)
    if not args.cpu_smoke:  # overflow every few dozen steps, as a long run's scaler does
        trainer.accelerator.scaler = torch.amp.GradScaler(
            "cuda", init_scale=2.0**24, growth_interval=50
        )
    trainer.train()
    hist = [h for h in trainer.state.log_history if "grad_norm" in h]
    bad = [h["step"] for h in hist if not math.isfinite(float(h["grad_norm"]))]
    print(f"{len(hist)} logged steps; grad_norm not finite at {len(bad)}: {bad}")
    losses = [h["loss"] for h in hist]
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")


if __name__ == "__main__":
    main()
