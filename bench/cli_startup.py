"""Benchmark: start-up time and peak RSS of the light commands, against bare Python.

    python bench/cli_startup.py            # best of 5 per command

`forensics --help`, `forensics formats` and `forensics rules list` should start in
<= 0.3 s and <= 100 MB on an idle machine (issue 11): only the command that runs imports
its stage (torch, scipy, plotly, polars, duckdb load where a command needs them). Each
figure is printed beside `python -c pass` measured in the same run, since absolute times
depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass (reference)": [sys.executable, "-c", "pass"],
    "forensics --help": [sys.executable, "-m", "forensics", "--help"],
    "forensics formats": [sys.executable, "-m", "forensics", "formats"],
    "forensics rules list": [sys.executable, "-m", "forensics", "rules", "list"],
}


def measure(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one run. RSS: the child's own peak (wait4 rusage)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if status:
        raise SystemExit(f"{' '.join(cmd)} exited with status {status}")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeat):  # interleaved: a busy moment hurts every command alike
        for name, cmd in COMMANDS.items():
            got = measure(cmd)
            if name not in best or got[0] < best[name][0]:
                best[name] = got
    ref = best["python -c pass (reference)"][0]
    print(f"{'command':<30} {'seconds':>8} {'- python':>9} {'peak MB':>8}")
    for name, (secs, rss) in best.items():
        print(f"{name:<30} {secs:8.3f} {secs - ref:9.3f} {rss:8.0f}")


if __name__ == "__main__":
    main()
