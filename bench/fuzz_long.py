"""The long fuzz run of issue 14: tests/fuzz with many examples per reader.

    python bench/fuzz_long.py                    # 10,000 examples per reader, every reader
    python bench/fuzz_long.py --examples 2000 -k jsonl

Runs pytest on tests/fuzz with FORENSICS_FUZZ_EXAMPLES set (same fixed seed as CI, which
runs a few dozen per reader) and prints, per reader, how the examples ended: read (values
round-tripped), read_prefix (a truncated file: only values that were written), error (one
clean ForensicsError). Any other exception, silent change or hang fails the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000, help="examples per reader")
    parser.add_argument("-k", default=None, help="pytest -k expression (which readers)")
    parser.add_argument("--counts", type=Path, default=Path("fuzz_counts.json"),
                        help="where the per-reader outcome counts are kept (JSON)")  # fmt: skip
    args = parser.parse_args()
    env = {**os.environ, "FORENSICS_FUZZ_EXAMPLES": str(args.examples)}
    env["FORENSICS_FUZZ_COUNTS"] = str(args.counts.resolve())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fuzz"]
    if args.k:
        cmd += ["-k", args.k]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, check=False)
    print(f"fuzz: {args.examples} examples per reader, {time.perf_counter() - start:.0f} s")
    if args.counts.is_file():
        for reader, outcomes in sorted(json.loads(args.counts.read_text()).items()):
            parts = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            print(f"  {reader:14s} {sum(outcomes.values()):6d} examples: {parts}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
