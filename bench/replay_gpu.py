"""Benchmark replay on a `small`-preset incident: wall time per probe and tokens/s.

Generates a short faulted run with the simulator API (a batch of rare-band tokens injected at
3/4 of the run, one checkpoint at half-way) in a temp folder, ingests it, records the
incident, replays it, and prints one line per probe plus the re-run throughput.

    python bench/replay_gpu.py                  # GPU defaults (small preset, 8 x 512 tokens)
    python bench/replay_gpu.py --device cpu --quick   # a CPU-sized run (a few minutes)

--quick (or smaller --steps/--batch-size/--seq-len) keeps the small model but shortens the
run and the batches so that a CPU finishes; the numbers printed say what was used.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from forensics.ingest import ingest
from forensics.replay import replay_run
from forensics.replay.result import ReplayResult
from forensics.sim.data import INJECT_SHARD, BatchRecord, prepare_data, write_shard
from forensics.sim.model import preset
from forensics.sim.run import train_run
from forensics.sim.trainer import TrainConfig, resolve_device
from forensics.store import Store, open_store

RUN = "bench_small"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="auto", help="auto | cuda | cpu (generation and replay)")
    p.add_argument("--steps", type=int, default=200, help="training steps of the faulted run")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--k", type=int, default=20, help="counterfactual window (replay --k)")
    p.add_argument("--quick", action="store_true", help="CPU-sized: 16 steps of 2 x 128, k=4")
    p.add_argument("--keep", type=Path, default=None, help="keep the run folder here")
    args = p.parse_args()
    if args.quick:
        args.steps, args.batch_size, args.seq_len, args.k = 16, 2, 128, 4
    return args


def make_run(run_dir: Path, args: argparse.Namespace, device: str) -> tuple[int, float]:
    """Train the faulted run; returns (the injected step, training tokens/s)."""
    model = preset("small")
    lang = prepare_data(run_dir, model.vocab_size, 1_048_576, 1234)
    span = args.batch_size * args.seq_len + 1
    rare = np.random.default_rng(0).integers(lang.rare_start, model.vocab_size, span)
    write_shard(run_dir / INJECT_SHARD, rare.astype(np.uint16))
    bad = max(3, (3 * args.steps) // 4)
    cfg = TrainConfig(
        model=model, preset="small", total_steps=args.steps, batch_size=args.batch_size,
        seq_len=args.seq_len, warmup_steps=max(1, args.steps // 4), peak_lr=1e-3, min_lr=1e-4,
        ckpt_steps=[args.steps // 2], log_layers_every=0, device=device, threads=0,
        data_tokens=1_048_576,
    )  # fmt: skip
    rec = BatchRecord(bad, 0, INJECT_SHARD, 0, span, args.seq_len, args.batch_size)
    t0 = time.perf_counter()
    train_run(cfg, run_dir, {bad: [rec]})
    dt = time.perf_counter() - t0
    return bad, args.steps * args.batch_size * args.seq_len / dt


def record_incident(store: Store, step: int) -> None:
    """The incident detection would report for the injected batch (detect is not benched)."""
    store.con.execute(
        "INSERT INTO incidents (run_id, incident_id, metric, onset_step, peak_step, end_step, "
        "cause, confidence, evidence) VALUES (?, 1, 'loss', ?, ?, ?, 'rare_tokens', 0.8, '[]')",
        [RUN, step, step, step + 1],
    )


def report(
    rows: list[ReplayResult], args: argparse.Namespace, total: float, train_tps: float
) -> None:
    repro = next(r for r in rows if r.probe == "reproduce")
    n_steps = int(repro.numbers.get("steps_replayed") or 0)
    tokens = n_steps * args.batch_size * args.seq_len
    print(f"device: {rows[0].device}  torch {torch.__version__}")
    shape = f"{args.batch_size} x {args.seq_len} tokens"
    print(f"run: small preset, {args.steps} steps of {shape}, k={args.k}")
    print(f"{'probe':<16} {'verdict':<13} {'wall_s':>8}")
    for r in rows:
        print(f"{r.probe:<16} {r.verdict:<13} {r.wall_s or 0.0:8.2f}")
    print(f"total replay wall: {total:.2f} s")
    rate = tokens / repro.wall_s if repro.wall_s else float("nan")
    print(f"re-run: {n_steps} steps from the checkpoint, {rate:,.0f} tokens/s "
          f"(restore included); training throughput {train_tps:,.0f} tokens/s")  # fmt: skip
    summary = {r.probe: {"verdict": r.verdict, "wall_s": r.wall_s} for r in rows}
    print(json.dumps({"replay_tokens_per_s": rate, "probes": summary}))


def main() -> None:
    args = parse()
    device = str(resolve_device(args.device))
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.keep or Path(tmp) / RUN
        run_dir.mkdir(parents=True, exist_ok=True)
        bad, train_tps = make_run(run_dir, args, device)
        with open_store(Path(tmp) / "bench.duckdb") as store:
            ingest(store, [run_dir], run=RUN)
            record_incident(store, bad)
            t0 = time.perf_counter()
            rows = replay_run(store, RUN, device=device, k=args.k)
            total = time.perf_counter() - t0
        report(rows, args, total, train_tps)


if __name__ == "__main__":
    main()
