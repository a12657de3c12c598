"""How `forensics detect` scales with the run's length: seconds at 10k, 100k and 1M steps.

For each length a run (power-law loss with noise, ten injected spikes, a grad norm and an
LR logged every step) is written as JSONL, then timed:

- detect only: `forensics.detect.detect(store, run)` on the already-ingested store, i.e.
  the work of `forensics detect` (read the run from DuckDB, screen, refine, type, classify,
  write incidents/findings); the in-memory part (`detect_data`) is shown beside it;
- ingest + detect: `forensics.ingest.ingest` of the JSONL file, then detect.

Imports (ruptures, scipy) are warmed once before timing, as a long-lived process would.

    python bench/detect_scaling.py [--steps 10000 100000 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forensics.detect import detect, detect_data, load_rules  # noqa: E402
from forensics.detect.store import load_run  # noqa: E402
from forensics.ingest import ingest  # noqa: E402
from forensics.store import open_store  # noqa: E402


def make_frame(n: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1)
    loss = (2.0 + 9.0 * (1 + t / 100) ** -0.5) * np.exp(rng.normal(0, 0.01, n))
    for s in rng.choice(np.arange(n // 10, n - 1000), 10, replace=False):
        loss[s : s + 30] *= 1 + 0.5 * np.exp(-np.arange(30) / 5)
    grad = 0.3 * np.exp(rng.normal(0, 0.1, n))
    lr = np.minimum(1.0, t / 1000) * 3e-4
    return pl.DataFrame({"step": t, "loss": loss, "grad_norm": grad, "lr": lr})


def _warm(rules: list) -> None:  # type: ignore[type-arg]
    detect_data_frame = make_frame(3000)
    from forensics.detect import run_data

    detect_data(run_data(detect_data_frame, {}, "warm"), rules)


def time_one(n: int, rules: list, work: Path) -> dict[str, float]:  # type: ignore[type-arg]
    folder = work / f"run{n}"
    folder.mkdir()
    make_frame(n).write_ndjson(folder / "metrics.jsonl")
    db = work / f"run{n}.duckdb"
    out: dict[str, float] = {}
    with open_store(db) as store:
        t0 = time.perf_counter()
        ingest(store, [folder / "metrics.jsonl"], run="r")
        out["ingest"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        det = detect(store, "r", rules=rules)[0]
        out["detect"] = time.perf_counter() - t0
        data = load_run(store, "r")
        t0 = time.perf_counter()
        detect_data(data, rules)
        out["in_memory"] = time.perf_counter() - t0
    out["incidents"] = float(len(det.incidents))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = ap.parse_args(argv)
    rules = load_rules()
    _warm(rules)
    print(f"{'steps':>10s} {'detect (s)':>11s} {'in-memory (s)':>14s} {'ingest (s)':>11s} "
          f"{'ingest+detect (s)':>18s} {'incidents':>10s}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.steps:
            r = time_one(n, rules, Path(tmp))
            print(
                f"{n:>10,d} {r['detect']:>11.2f} {r['in_memory']:>14.2f} {r['ingest']:>11.2f} "
                f"{r['ingest'] + r['detect']:>18.2f} {int(r['incidents']):>10d}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
