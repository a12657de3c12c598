"""Benchmark: our TensorBoard reader vs tbparse on a 1,000,000-step event file.

Writes the event files once with TensorBoard's own protos and record writer (the same
framing SummaryWriter uses, minus its per-event queue), caches them in a temp folder, then
times, each in a fresh subprocess so that peak RSS is that of one reader alone:

- ours: `forensics.ingest.readers.tensorboard.read_event_file`,
- ours + store: full `forensics ingest` of the file into a new DuckDB database,
- tbparse: `tbparse.SummaryReader(path).scalars`.

Usage: python bench/ingest_tensorboard.py [--steps 1000000] [--tags 1 8] [--no-tbparse]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CACHE = Path(tempfile.gettempdir()) / "forensics-bench-tensorboard"
TAGS = [
    "train/loss",
    "train/lr",
    "train/grad_norm",
    "val/loss",
    "tokens_per_s",
    "loss_scale",
    "param_norm",
    "train/update_ratio",
]


def write_events(path: Path, steps: int, tags: list[str]) -> None:
    """One writer's scalar events: every tag at every step, a few NaN/Inf values."""
    import random

    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    rng = random.Random(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as fh:
        writer = RecordWriter(fh)
        start = time.time()
        first = event_pb2.Event(wall_time=start, step=0, file_version="brain.Event:2")
        writer.write(first.SerializeToString())
        for step in range(steps):
            for tag in tags:
                value = rng.gauss(3.0, 0.1)
                if step % 100_003 == 7:
                    value = math.nan if step % 2 else math.inf
                summary = summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]
                )
                event = event_pb2.Event(wall_time=start + step * 0.25, step=step, summary=summary)
                writer.write(event.SerializeToString())
    tmp.rename(path)


def event_file(steps: int, n_tags: int) -> Path:
    path = CACHE / f"{steps}x{n_tags}" / "events.out.tfevents.1700000000.bench.1.0"
    if not path.exists():
        print(f"writing {path} ({steps:,} steps x {n_tags} tags; cached) ...", file=sys.stderr)
        t0 = time.perf_counter()
        write_events(path, steps, TAGS[:n_tags])
        print(f"  written in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def child(kind: str, path: Path) -> dict[str, float]:
    """Run one reader in this process; report wall and CPU seconds, rows, peak RSS (MiB).

    CPU time is reported beside wall time because the machine may be shared: it is what the
    reader itself spent, whatever else was running.
    """
    if kind == "ours":
        from forensics.ingest.readers.tensorboard import read_event_file

        t0, c0 = time.perf_counter(), time.process_time()
        rows = read_event_file(path).metrics.height
    elif kind == "ingest":
        from forensics.ingest import ingest
        from forensics.store import open_store

        db = Path(tempfile.mkdtemp()) / "bench.duckdb"
        t0, c0 = time.perf_counter(), time.process_time()
        with open_store(db) as store:
            ingest(store, [path], run="bench")
            rows = store.query("SELECT count(*) AS n FROM metrics")["n"][0]
    elif kind == "imports":
        import forensics.ingest.readers.tensorboard  # noqa: F401

        t0, c0, rows = time.perf_counter(), time.process_time(), 0
    else:
        from tbparse import SummaryReader

        t0, c0 = time.perf_counter(), time.process_time()
        rows = len(SummaryReader(str(path)).scalars)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "cpu": cpu, "rows": int(rows), "rss_mib": rss}


def measure(kind: str, path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(path)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _line(label: str, m: dict[str, float]) -> str:
    return (
        f"  {label:22s}{m['seconds']:8.2f} s wall {m['cpu']:8.2f} s CPU "
        f"{m['rows']:>11,} rows  peak RSS {m['rss_mib']:6.0f} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--tags", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--no-tbparse", action="store_true", help="skip tbparse (it takes minutes)")
    ap.add_argument(
        "--tbparse-tags", type=int, nargs="+", default=[1], help="tag counts tbparse runs on"
    )
    ap.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return
    for n_tags in args.tags:
        path = event_file(args.steps, n_tags)
        size = path.stat().st_size / 2**20
        print(f"\n{args.steps:,} steps x {n_tags} tag(s): {path.name}, {size:.1f} MiB")
        base = measure("imports", path)
        print(f"  (interpreter + imports alone: peak RSS {base['rss_mib']:.0f} MiB)")
        ours = measure("ours", path)
        print(_line("ours (reader)", ours))
        print(_line("ours (ingest+DuckDB)", measure("ingest", path)))
        if args.no_tbparse or n_tags not in args.tbparse_tags:
            continue
        tb = measure("tbparse", path)
        print(_line("tbparse .scalars", tb))
        print(
            f"  speed-up of our reader over tbparse: {tb['seconds'] / ours['seconds']:.1f}x "
            f"wall, {tb['cpu'] / ours['cpu']:.1f}x CPU"
        )
    print(f"\n(load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
