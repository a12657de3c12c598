"""Benchmark: ingest cost with many distinct metric names (issue 14), beside a long log.

    python bench/ingest_many_metrics.py                  # 10,000 metrics; 1M-row reference
    python bench/ingest_many_metrics.py --metrics 2000 --reference-rows 100000

Three files are generated in a temporary folder, each ingested by forensics.ingest.ingest()
into a fresh DuckDB file in a fresh subprocess (best of --repeat):

* sparse JSONL: one line per step, each line logging ONE of --metrics distinct names
  (a sweep that logs a different probe per step): rows = metrics, distinct = metrics
* wide CSV: 200 rows x (--metrics + 1) columns (a per-layer/per-head dump)
* reference: the 1M-row x 8-metric JSONL of bench/ingest_jsonl.py (--reference-rows)

Printed: seconds, values stored, and microseconds per stored value, with each many-metric
figure as a ratio to the reference's per-value cost. Before issue 14, 1,000 sparse lines
took 292 s (Store._dense_groups compared columns pairwise) and the 10,001-column CSV did
not finish in 10 minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ingest_jsonl import generate  # noqa: E402


def write_sparse(path: Path, metrics: int) -> None:
    with open(path, "w") as fh:
        for i in range(metrics):
            fh.write(json.dumps({"step": i, f"probe/m{i:05d}": 1.0 + i * 1e-3}) + "\n")


def write_wide(path: Path, metrics: int, rows: int = 200) -> None:
    with open(path, "w") as fh:
        fh.write("step," + ",".join(f"layer{i:05d}/norm" for i in range(metrics)) + "\n")
        for r in range(rows):
            fh.write(f"{r}," + ",".join(f"{r + i * 1e-3:.6g}" for i in range(metrics)) + "\n")


def run_child(src: Path, workdir: Path) -> dict[str, float]:
    code = textwrap.dedent(
        f"""
        import json, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from forensics.ingest import ingest
        from forensics.store import open_store
        db = Path({str(workdir)!r}) / "bench.duckdb"
        db.unlink(missing_ok=True)
        t = time.perf_counter()
        with open_store(db) as store:
            ingest(store, [Path({str(src)!r})], run="bench")
            values = store.con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
            names = store.con.execute("SELECT count(DISTINCT metric) FROM metrics").fetchall()
        seconds = time.perf_counter() - t
        hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
        print(json.dumps({{"s": seconds, "values": values, "names": names[0][0],
                          "rss_mb": int(hwm.split()[1]) / 1024}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=1800
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def best(src: Path, workdir: Path, repeat: int) -> dict[str, float]:
    runs = [run_child(src, workdir) for _ in range(repeat)]
    return min(runs, key=lambda r: r["s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", type=int, default=10_000)
    parser.add_argument("--reference-rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forensics-bench-") as tmp:
        work = Path(tmp)
        files = {
            f"sparse JSONL ({args.metrics:,} lines, 1 metric each)": work / "sparse.jsonl",
            f"wide CSV (200 rows x {args.metrics + 1:,} columns)": work / "wide.csv",
            f"reference JSONL ({args.reference_rows:,} rows x 8 metrics)": work / "ref.jsonl",
        }
        paths = list(files.values())
        write_sparse(paths[0], args.metrics)
        write_wide(paths[1], args.metrics)
        generate(paths[2], args.reference_rows, with_nan=False)
        results = {label: best(path, work, args.repeat) for label, path in files.items()}
    ref = list(results.values())[-1]
    ref_us = ref["s"] / ref["values"] * 1e6
    print(f"{'file':52s} {'s':>8s} {'values':>11s} {'metrics':>8s} {'us/value':>9s} "
          f"{'x ref':>6s} {'peak MB':>8s}")  # fmt: skip
    for label, r in results.items():
        us = r["s"] / r["values"] * 1e6
        print(f"{label:52s} {r['s']:8.2f} {r['values']:11,d} {r['names']:8,d} {us:9.2f} "
              f"{us / ref_us:6.1f} {r['rss_mb']:8.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
