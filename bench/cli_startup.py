"""Benchmark: start-up time and peak RSS of the light commands, against bare Python.

    python bench/cli_startup.py            # best of 5 per command

`forensics --help`, `forensics formats` and `forensics rules list` should start in
<= 0.3 s and <= 100 MB on an idle machine (issue 11): only the command that runs imports
its stage (torch, scipy, plotly, polars, duckdb load where a command needs them). Each
figure is printed beside `python -c pass` measured in the same run, since absolute times
depend on the machine and its load. Two more references frame the figures: `import typer,
rich` (the floor of any command of this CLI) and `import duckdb` (what the first stage
that touches the store costs). Output goes to /dev/null (not a terminal), so the tables
of `formats` and `rules list` are what a pipe gets. Load averages are printed: figures
taken at a load above ~1 on a 2-core machine are not comparable.
"""

from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import time
from pathlib import Path

GOAL_S, GOAL_MB = 0.3, 100
REFERENCE = "python -c pass (reference)"
COMMANDS = {
    REFERENCE: [sys.executable, "-c", "pass"],
    "import typer, rich (reference)": [sys.executable, "-c", "import typer, rich.console"],
    "import duckdb (reference)": [sys.executable, "-c", "import duckdb"],
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


def compile_package() -> None:
    """Byte-compile forensics first, as `pip install` does: with PYTHONDONTWRITEBYTECODE set
    (or a read-only tree) every run would otherwise compile ~100 modules from source, which
    measures the compiler, not the start-up a user sees. Third-party packages are compiled."""
    import forensics

    compileall.compile_dir(Path(forensics.__file__).parent, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--no-compile", action="store_true", help="Measure without byte-compiling first."
    )
    args = parser.parse_args()
    if not args.no_compile:
        compile_package()
    best: dict[str, tuple[float, float]] = {}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for _ in range(args.repeat):  # interleaved: a busy moment hurts every command alike
        for name, cmd in COMMANDS.items():
            got = measure(cmd)
            if name not in best or got[0] < best[name][0]:
                best[name] = got
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ref = best[REFERENCE][0]
    duck = best["import duckdb (reference)"][0]
    print(f"goal: <= {GOAL_S} s and <= {GOAL_MB} MB on an idle machine (best of {args.repeat})")
    print(
        f"{'command':<32} {'seconds':>8} {'- python':>9} {'x python':>9} {'x duckdb':>9} "
        f"{'peak MB':>8}"
    )
    for name, (secs, rss) in best.items():
        print(
            f"{name:<32} {secs:8.3f} {secs - ref:9.3f} {secs / ref:9.2f} {secs / duck:9.2f} "
            f"{rss:8.0f}"
        )


if __name__ == "__main__":
    main()
