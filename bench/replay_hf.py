"""Replay time of a Hugging Face Trainer run (tier 3) and of the bundled judge (tier 2).

Builds the tiny Llama run of the test suite (tests/replay/hf_run.py: real Trainer, CPU), then
replays its incident with `--device auto` (CUDA when present, else CPU) and prints, side by
side with the reference measured in the same process -- the Trainer's own training throughput
on the same model and data (`train_runtime` in its log) --

- the re-run's tokens/s (the resumed Trainer from the checkpoint to the end of the window)
  and its ratio to the original training's tokens/s;
- the whole incident's replay wall time (batches rebuilt, re-run, every probe);
- the reproduction error |replayed - logged| loss at the offending step;
- the optimizer counterfactuals' wall time (beta2 = 0.95 and half the LR: each one more
  resumed re-run of the same window) against the original re-run's;
- the bundled judge's training tokens/s (tier 2, its CPU or GPU preset);
- a nanoGPT run (tests/replay/nanogpt_run.py: train.py's loop, ckpt.pt, a sequential
  train.bin) replayed through its own checkpoint: re-run tokens/s against the original
  training loop's, measured in the same process;
- with CUDA: the bundled `small` preset's training tokens/s and MFU (bench/train_throughput.py
  `bench_small`, bf16, 16 x 512 tokens, against the GPU's dense bf16 peak).

Usage: python bench/replay_hf.py [--device auto|cpu|cuda] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "replay"))
sys.path.insert(0, str(REPO / "bench"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--keep", type=Path, default=None, help="Build the run here (kept).")
    ns = parser.parse_args()
    import torch
    from hf_run import BATCH, SEQ, build_hf_run

    from forensics.analyze import AnalyzeOptions, analyze
    from forensics.replay.judge import train_judge
    from forensics.replay.runner import pick_device, replay_run
    from forensics.replay.sources import Sources
    from forensics.store import open_store

    root = ns.keep or Path(tempfile.mkdtemp(prefix="bench-replay-hf-"))
    t0 = time.perf_counter()
    info = build_hf_run(root)
    build_s = time.perf_counter() - t0
    state = json.loads((info["out"] / "trainer_state.json").read_text())
    summary = next(e for e in state["log_history"] if "train_runtime" in e)
    steps = int(state["global_step"])
    train_tps = steps * BATCH * SEQ / float(summary["train_runtime"])

    result = analyze(info["out"], root / "out", options=AnalyzeOptions(replay=False, report=False))
    device = pick_device(ns.device)
    with open_store(result.db) as store:
        t0 = time.perf_counter()
        rows = replay_run(
            store, result.run_id, device=ns.device, sources=Sources(dataset=info["dataset"])
        )
        replay_s = time.perf_counter() - t0
    repro = next(r for r in rows if r.probe == "reproduce")
    n = repro.numbers
    rerun_steps = int(n["steps_replayed"]) + (
        int(n["resumed_from_step"]) - int(n["checkpoint_step"])
    )
    rerun_tps = rerun_steps * BATCH * SEQ / float(repro.wall_s or float("nan"))
    err = abs(float(n["replayed_loss"]) - float(n["logged_loss"]))

    stream = torch.tensor(sum(info["fed"].values(), [])).flatten().numpy()
    t0 = time.perf_counter()
    _, judge = train_judge(stream, int(stream.max()) + 1, SEQ - 1, device)
    judge_s = time.perf_counter() - t0
    judge_tps = judge["judge_tokens_seen"] / judge_s

    print(f"device: {device} ({torch.get_num_threads()} CPU threads); run built in {build_s:.1f}s")
    print(f"{'measure':<44}{'value':>14}{'reference':>14}{'ratio':>8}")
    print(f"{'re-run tokens/s (resumed Trainer, tier 3)':<44}{rerun_tps:>14,.0f}"
          f"{train_tps:>14,.0f}{rerun_tps / train_tps:>8.2f}")  # fmt: skip
    print(f"{'  reference: the original training tokens/s':<44}")
    print(f"{'re-run steps (checkpoint -> window end)':<44}{rerun_steps:>14}")
    print(f"{'re-run wall s':<44}{repro.wall_s:>14.2f}")
    print(f"{'whole incident replay wall s':<44}{replay_s:>14.2f}")
    print(f"{'reproduction |replayed - logged| loss':<44}{err:>14.3g}")
    print(f"{'judge training tokens/s (tier 2)':<44}{judge_tps:>14,.0f}"
          f"{train_tps:>14,.0f}{judge_tps / train_tps:>8.2f}")  # fmt: skip
    print(f"{'judge wall s':<44}{judge_s:>14.2f}")
    for r in rows:
        if r.probe in ("stale_beta2", "lr_too_high") and r.wall_s is not None:
            print(f"{r.probe + ' counterfactual wall s':<44}{r.wall_s:>14.2f}"
                  f"{repro.wall_s:>14.2f}{r.wall_s / float(repro.wall_s or 1):>8.2f}")  # fmt: skip
    verdicts = {r.probe: r.verdict for r in rows}
    print("verdicts:", ", ".join(f"{k}={v}" for k, v in verdicts.items()))
    nanogpt(root / "nanogpt", ns.device)
    if device.type == "cuda":
        from train_throughput import bench_small

        bench_small("cuda", 100)
    else:
        print("no CUDA device: GPU figures (and the bundled `small` preset's MFU) not measured")


def nanogpt(root: Path, device: str) -> None:
    """Replay of the nanoGPT test run through its ckpt.pt, against its training loop."""
    from nanogpt_run import GA, ITERS, B, T, build_nanogpt_run

    from forensics.analyze import AnalyzeOptions, analyze
    from forensics.replay.runner import replay_run
    from forensics.replay.sources import Sources
    from forensics.store import open_store

    info = build_nanogpt_run(root)
    train_tps = ITERS * GA * B * T / info["train_s"]
    result = analyze(info["run"], root / "out", options=AnalyzeOptions(replay=False, report=False))
    src = Sources(shards=[info["shard"]], loader="llmc", batch_size=B, seq_len=T, grad_accum=GA)
    with open_store(result.db) as store:
        t0 = time.perf_counter()
        rows = replay_run(store, result.run_id, device=device, sources=src)
        replay_s = time.perf_counter() - t0
    repro = next(r for r in rows if r.probe == "reproduce")
    steps = int(repro.numbers.get("steps_replayed") or 0)
    tps = steps * GA * B * T / float(repro.wall_s or float("nan"))
    print(f"{'nanoGPT re-run tokens/s (ckpt.pt, tier 3)':<44}{tps:>14,.0f}"
          f"{train_tps:>14,.0f}{tps / train_tps:>8.2f}")  # fmt: skip
    print(f"{'  reference: its train.py loop tokens/s':<44}")
    print(f"{'nanoGPT whole incident replay wall s':<44}{replay_s:>14.2f}")
    print("nanoGPT verdicts:", ", ".join(f"{r.probe}={r.verdict}" for r in rows))


if __name__ == "__main__":
    main()
