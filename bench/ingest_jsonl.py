"""Benchmark: ingest of a large JSONL metric log vs DuckDB's own `read_json` of the same file.

    python bench/ingest_jsonl.py                 # 1,000,000 steps x 8 metrics, best of 5
    python bench/ingest_jsonl.py --steps 100000 --repeat 3
    python bench/ingest_jsonl.py --process-only  # the whole-process pairs only (issue 11)

Two files are generated in a temporary folder (never in the repo), by a subprocess so that
this script stays small (see peak RSS below): a clean one, and one with bare `NaN` /
`Infinity` tokens on a few steps (what Python's json.dumps writes for a diverged run).

The issue-11 figure is the whole process, as a user at a shell waits for it: interpreter
start, imports, work, exit. Two commands, each writing a fresh DuckDB file, interleaved
(a busy moment hurts both alike), best and median of --repeat:

* ours:      `python -m forensics ingest FILE --db DB`, its stdout and stderr pipes (as in
             a script, a CI job or `> log`): forensics prints its summary as tab-separated
             lines there and shows no spinner; on a terminal it draws a rich table instead
* reference: `python -c` running `CREATE TABLE t AS SELECT * FROM read_json(FILE)` on a
             DuckDB file, then closing it (the wide table DuckDB infers, nothing checked)

and the same pair on a 2 MB prefix of the file, which is mostly their fixed start-up cost,
and on a prefix just under 256 MB: ingest fingerprints a source to know it again
(forensics/ingest/identity.py), by a SHA-256 of all of it up to 256 MB and of 64 windows
above, so the 284 MB file of 1M steps is sampled while a 250 MB log is read once more in
full (~0.2 s here); that prefix shows the dearer side of the limit.
With --tty, ours runs a third time with stdout and stderr on a pseudo-terminal (the rich
table and spinner a user at a terminal sees). Ours does more than the reference: it finds
what the file is, fingerprints it, checks every key and value against DuckDB's sampled
types, judges steps and clock, and stores one row per step in the store's schema in one
transaction (see forensics/ingest/readers/_jsonl_stage.py).

Unless --process-only, three library calls are timed too, each in a fresh subprocess:
forensics.ingest.ingest() alone (no CLI), the same read_json, and a floor: DuckDB alone
writing the store's layout (read_json straight into `metric_rows` plus the 8
`metric_columns` rows; none of our checks).

Peak RSS: of a whole process, the child's ru_maxrss from wait4 (Linux keeps the larger
of a child's own peak and its parent's RSS when it was forked, hence the small parent);
of a library call, VmHWM read by the child itself. Load averages are printed before and
after: figures taken at a load above ~1 on a 2-core machine are not comparable.

The package is byte-compiled first, as `pip install` does (with PYTHONDONTWRITEBYTECODE set,
every run would otherwise compile ~100 modules from source: the compiler, not the ingest).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

REPO = Path(__file__).resolve().parents[1]
METRICS = ["loss", "grad_norm", "lr", "loss_scale", "tokens_per_s", "iter_time_ms",
           "param_norm", "val_loss"]  # fmt: skip


def generate(path: Path, steps: int, with_nan: bool, seed: int = 0) -> None:
    """Realistic per-step values, written as one json.dumps-style object per line."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    s = np.arange(steps)
    cols = {
        "loss": 2.0 + 9.0 * np.exp(-s / 2e4) + rng.normal(0, 0.05, steps),
        "grad_norm": rng.lognormal(-1.0, 0.4, steps),
        "lr": 3e-4 * np.minimum(1.0, (s + 1) / 2000) * (0.1 + 0.9 * (1 - s / steps)),
        "loss_scale": 2.0 ** rng.integers(10, 17, steps),
        "tokens_per_s": rng.normal(1.2e6, 2e4, steps),
        "iter_time_ms": rng.normal(850.0, 15.0, steps),
        "param_norm": 250.0 + s * 1e-4 + rng.normal(0, 0.01, steps),
        "val_loss": 2.1 + 9.0 * np.exp(-s / 2e4) + rng.normal(0, 0.02, steps),
    }
    if with_nan:
        cols["loss"][s % 50_000 == 1234] = np.nan
        cols["grad_norm"][s % 100_000 == 777] = np.inf
    frame = pl.DataFrame({"step": s, "time": 1.7e9 + s * 0.85, **cols})
    parts = [pl.lit('{"step": '), pl.col("step").cast(pl.Utf8)]
    parts += [pl.lit(', "time": '), _json_number("time")]
    for name in METRICS:
        parts += [pl.lit(f', "{name}": '), _json_number(name)]
    parts.append(pl.lit("}"))
    lines = frame.select(pl.concat_str(parts).alias("line"))["line"]
    with open(path, "w") as fh:
        for start in range(0, steps, 100_000):
            fh.write("\n".join(lines.slice(start, 100_000).to_list()) + "\n")


def _json_number(name: str) -> pl.Expr:
    """Float as Python's json writes it: shortest repr, bare NaN / Infinity / -Infinity."""
    import polars as pl

    col = pl.col(name)
    return (
        pl.when(col.is_nan())
        .then(pl.lit("NaN"))
        .when(col == float("inf"))
        .then(pl.lit("Infinity"))
        .when(col == float("-inf"))
        .then(pl.lit("-Infinity"))
        .otherwise(col.cast(pl.Float64).cast(pl.Utf8))
    )


def generate_in_child(path: Path, steps: int, with_nan: bool) -> None:
    """`generate` in a subprocess: numpy, polars and the frames never enter this process."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "from pathlib import Path; from ingest_jsonl import generate; "
        f"generate(Path({str(path)!r}), {steps}, {with_nan})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def write_prefix(src: Path, dst: Path, nbytes: int) -> None:
    """The whole lines within the first `nbytes` of `src`, copied to `dst` a block at a
    time (read whole, a 250 MB prefix would raise this process's RSS, and so the peak
    RSS reported for every command started after it)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        left = nbytes
        while left > 0 and (block := fin.read(min(1 << 20, left))):
            left -= len(block)
            if left <= 0:  # the last block: up to its last full line (lines are short)
                block = block[: block.rfind(b"\n") + 1]
            fout.write(block)


_CHILD = {
    "ours": """
        from pathlib import Path
        from forensics.ingest import ingest
        from forensics.store import open_store
        t0 = time.perf_counter()
        with open_store(DB) as store:
            rows = ingest(store, [Path(SRC)])[0].metric_rows
        seconds = time.perf_counter() - t0
    """,
    "read_json": """
        import duckdb
        t0 = time.perf_counter()
        con = duckdb.connect(DB)
        con.execute("SET enable_progress_bar = false")
        con.execute(f"CREATE TABLE t AS SELECT * FROM read_json('{SRC}')")
        rows = con.execute("SELECT count(*) FROM t").fetchone()[0]
        con.close()
        seconds = time.perf_counter() - t0
    """,
    "floor": """
        import duckdb
        from forensics.store.schema import INGEST_DDL, METRICS_VIEW
        con = duckdb.connect(DB)
        con.execute("SET enable_progress_bar = false")
        for ddl in [*INGEST_DDL, METRICS_VIEW]:
            con.execute(ddl)
        t0 = time.perf_counter()
        names = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_json('{SRC}')").fetchall()]
        names = [n for n in names if n not in ("step", "time")]
        con.executemany(
            "INSERT INTO metric_columns VALUES (1, ?, 'run', ?, ?, ?)",
            [[slot, SRC, n, n] for slot, n in enumerate(names, start=1)],
        )
        values = ", ".join(f'"{n}"' for n in names)
        con.execute(
            f"INSERT INTO metric_rows SELECT 1, step, time, [{values}] FROM read_json('{SRC}')"
        )
        rows = con.execute("SELECT count(*) FROM metrics").fetchone()[0]
        con.close()
        seconds = time.perf_counter() - t0
    """,
}


_PEAK_RSS = """
    def peak_rss_mb():
        try:
            with open("/proc/self/status") as fh:
                hwm = next(ln for ln in fh if ln.startswith("VmHWM:"))
            return int(hwm.split()[1]) / 1024
        except (OSError, StopIteration):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""


def run_child(kind: str, src: Path, workdir: Path) -> dict[str, float]:
    db = workdir / f"{kind}.duckdb"
    db.unlink(missing_ok=True)
    code = "import json, resource, time\n"
    code += f"DB, SRC = {str(db)!r}, {str(src)!r}\n"
    code += textwrap.dedent(_CHILD[kind])
    code += textwrap.dedent(_PEAK_RSS)
    code += "print(json.dumps({'seconds': seconds, 'rows': rows, 'rss_mb': peak_rss_mb()}))\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    if out.returncode:
        raise SystemExit(f"{kind} failed:\n{out.stderr}")
    db.unlink(missing_ok=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


READ_JSON_PROCESS = (
    "import duckdb, sys; con = duckdb.connect(sys.argv[2]); "
    'con.execute("SET enable_progress_bar = false"); '
    "con.execute(f\"CREATE TABLE t AS SELECT * FROM read_json('{sys.argv[1]}')\"); con.close()"
)


def _process_command(kind: str, src: Path, db: Path) -> list[str]:
    if kind.startswith("ours"):
        return [sys.executable, "-m", "forensics", "ingest", str(src), "--db", str(db)]
    return [sys.executable, "-c", READ_JSON_PROCESS, str(src), str(db)]


def run_process(kind: str, src: Path, workdir: Path) -> dict[str, float]:
    """Wall time and peak RSS of a whole command, start to exit, as a user at a shell sees it:
    stdout and stderr are pipes, or (ours_tty) a pseudo-terminal."""
    db = workdir / f"{kind}.duckdb"
    db.unlink(missing_ok=True)
    cmd = _process_command(kind, src, db)
    t0 = time.perf_counter()
    if kind == "ours_tty":
        status, usage, output = _run_on_pty(cmd)
    else:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        output = proc.stdout.read()  # a summary of a few lines: no deadlock on a full pipe
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, for its rusage
        proc.returncode = status
    seconds = time.perf_counter() - t0
    if status:
        raise SystemExit(f"{kind} failed:\n{output.decode(errors='replace')}")
    db.unlink(missing_ok=True)
    return {"seconds": seconds, "rows": 0.0, "rss_mb": usage.ru_maxrss / 1024}


def _run_on_pty(cmd: list[str]) -> tuple[int, os.struct_rusage, bytes]:
    """Run `cmd` with stdout and stderr on a pseudo-terminal, draining it as it writes."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = status
    reader.join(timeout=5)
    os.close(master)
    return status, usage, b"".join(chunks)


PROCESSES = ("ours_process", "read_json_process")


def bench(
    src: Path, workdir: Path, repeat: int, kinds: tuple[str, ...]
) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for _ in range(repeat):  # interleaved, so a busy moment hurts every contender alike
        for kind in kinds:
            got = (
                run_child(kind, src, workdir) if kind in _CHILD else run_process(kind, src, workdir)
            )
            runs[kind].append(got)
    return runs


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    return min(runs, key=lambda r: r["seconds"])


def _median(runs: list[dict[str, float]]) -> float:
    return statistics.median(r["seconds"] for r in runs)


def report(label: str, size_mb: float, runs: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n{label} ({size_mb:.0f} MB)")
    if "ours" in runs:
        ours, base, floor = (_best(runs[k]) for k in ("ours", "read_json", "floor"))
        print("  library calls (best):")
        for name, r in (("ours (forensics.ingest.ingest)", ours), ("DuckDB read_json (wide)", base),
                        ("DuckDB-only block insert", floor)):  # fmt: skip
            print(f"    {name:<30} {r['seconds']:7.2f} s  {r['rows']:>11,.0f} rows")
        print(f"    ratio ours / read_json         {ours['seconds'] / base['seconds']:7.2f} x")
        print(f"    ratio ours / floor             {ours['seconds'] / floor['seconds']:7.2f} x")
        print(f"    peak RSS of our ingest         {ours['rss_mb']:7.0f} MB")  # fmt: skip
    ref = runs["read_json_process"]
    print("  whole process:                        best   median  peak RSS   best/ref  median/ref")
    names = {"ours_process": "forensics ingest (piped)", "ours_tty": "forensics ingest (terminal)",
             "read_json_process": "python -c read_json (ref)"}  # fmt: skip
    for kind in (k for k in ("ours_process", "ours_tty", "read_json_process") if k in runs):
        best, med = _best(runs[kind]), _median(runs[kind])
        print(
            f"    {names[kind]:<30} {best['seconds']:7.3f} s {med:7.3f} s {best['rss_mb']:6.0f} MB"
            f"   {best['seconds'] / _best(ref)['seconds']:6.2f} x   {med / _median(ref):6.2f} x"
        )


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--process-only", action="store_true", help="Time only the whole-process pairs."
    )
    parser.add_argument(
        "--tty", action="store_true", help="Also time ours on a pseudo-terminal (rich output)."
    )
    args = parser.parse_args()
    import forensics
    from forensics.ingest.identity import _FULL_BYTES

    compileall.compile_dir(Path(forensics.__file__).parent, quiet=1)
    processes = (*PROCESSES[:1], *(("ours_tty",) if args.tty else ()), *PROCESSES[1:])
    kinds = processes if args.process_only else (*_CHILD, *processes)
    print(f"load average before: {_load()}  (cores: {os.cpu_count()})")
    with tempfile.TemporaryDirectory(prefix="forensics-bench-") as tmp:
        work = Path(tmp)
        for label, with_nan in (("clean floats", False), ("with NaN/Infinity tokens", True)):
            run_dir = work / ("nan" if with_nan else "clean")
            run_dir.mkdir()
            src = run_dir / "metrics.jsonl"
            generate_in_child(src, args.steps, with_nan)
            runs = bench(src, work, args.repeat, kinds)
            report(f"{args.steps:,} steps x {len(METRICS)} metrics, {label}",
                   src.stat().st_size / 1e6, runs)  # fmt: skip
        below = _FULL_BYTES - (6 << 20)
        if src.stat().st_size > below:  # ours hashes all of it (the 1M-step file is sampled)
            hashed = work / "hashed" / "metrics.jsonl"
            write_prefix(src, hashed, below)
            runs = bench(hashed, work, args.repeat, processes)
            size = hashed.stat().st_size / 1e6
            report("a prefix under the full-hash limit (content fingerprint)", size, runs)
            hashed.unlink()
        small = work / "small" / "metrics.jsonl"  # the fixed cost: start-up, schema, exit
        write_prefix(src, small, 2_000_000)
        runs = bench(small, work, args.repeat, processes)
        report("the first 2 MB of that file (start-up cost)", small.stat().st_size / 1e6, runs)
    print(f"\nload average after: {_load()}")


if __name__ == "__main__":
    main()
