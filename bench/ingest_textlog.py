"""Benchmark: the generic text-log reader vs the named-pattern reader on the same big log.

    python bench/ingest_textlog.py                    # 5,000,000 lines, best of 2
    python bench/ingest_textlog.py --lines 500000 --repeat 1

One log is generated in a temporary folder (never in the repo): llm.c `main.log` lines
(`s:N trl:X lr:Y norm:Z`, which a named pattern in line_patterns.yaml knows), a validation
line (`s:N tel:X`) every 250 steps, a few NaN/Inf losses, and 2% of other lines
(checkpoint messages). Both readers read the whole file in-process (`Reader.read`), best
of --repeat; the figures are lines per second and the ratio generic / named. Both must
return the same training losses, which the script checks before it prints a time.

A second table times a llm.c *stdout* log (`step N/M | loss X (+nanz)| norm ...`), which
no named pattern knows: the generic reader alone, as lines per second.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from forensics.ingest.readers.generic import GenericTextReader
from forensics.ingest.readers.textlog import TextLogReader


def _write(path: Path, lines: pl.Series) -> None:
    path.write_text("\n".join(lines.to_list()) + "\n")


def generate_main_log(path: Path, n: int, seed: int = 0) -> int:
    """llm.c main.log with ~n lines; returns the number of training-loss lines."""
    rng = np.random.default_rng(seed)
    steps = np.arange(int(n * 0.976))
    loss = 2.5 + 8.0 * np.exp(-steps / 2e5) + rng.normal(0, 0.03, len(steps))
    loss[steps % 100_003 == 777] = np.nan
    loss[steps % 200_003 == 999] = np.inf
    frame = pl.DataFrame(
        {
            "s": steps,
            "trl": loss,
            "lr": 6e-4 * np.minimum(1.0, (steps + 1) / 700),
            "norm": rng.lognormal(-1.2, 0.3, len(steps)),
        }
    )
    train = frame.select(
        pl.col("s"),
        pl.lit(0, pl.Int32).alias("k"),
        pl.format(
            "s:{} trl:{} lr:{} norm:{}",
            "s",
            pl.col("trl").round(4),
            pl.col("lr").round(6),
            pl.col("norm").round(2),
        ).alias("text"),
    )
    val = frame.filter(pl.col("s") % 250 == 0).select(
        pl.col("s"),
        pl.lit(-1, pl.Int32).alias("k"),
        pl.format("s:{} tel:{}", "s", pl.col("trl").round(4)).alias("text"),
    )
    other = frame.filter(pl.col("s") % 50 == 7).select(
        pl.col("s"),
        pl.lit(1, pl.Int32).alias("k"),
        pl.format("saving checkpoint at step {}", "s").alias("text"),
    )
    lines = pl.concat([train, val, other]).sort(["s", "k"])["text"]
    _write(path, lines)
    return len(steps)


def generate_stdout_log(path: Path, n: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    frame = pl.DataFrame(
        {
            "s": steps,
            "loss": 2.5 + 8.0 * np.exp(-steps / 2e5) + rng.normal(0, 0.03, n),
            "norm": rng.lognormal(-1.2, 0.3, n),
            "ms": rng.normal(4200, 50, n),
        }
    )
    lines = frame.select(
        pl.format(
            "step {}/{} | loss {} (+nanz)| norm {} (+nanz)| lr 6.00e-04 | {} ms | "
            "31.9% bf16 MFU | 123917 tok/s",
            pl.col("s").cast(pl.Utf8).str.pad_start(7),
            pl.lit(n),
            pl.col("loss").round(6),
            pl.col("norm").round(4),
            pl.col("ms").round(2),
        )
    ).to_series()
    _write(path, lines)


def best(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    named, generic = TextLogReader(), GenericTextReader()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "main.log"
        n_train = generate_main_log(path, args.lines)
        n_lines = sum(1 for _ in path.open())
        mb = path.stat().st_size / 1e6
        t_named, r_named = best(lambda: named.read(path), args.repeat)
        t_generic, r_generic = best(lambda: generic.read(path), args.repeat)
        a = r_named.metrics.filter(pl.col("raw_name") == "trl")  # type: ignore[attr-defined]
        b = r_generic.metrics.filter(pl.col("raw_name") == "trl")  # type: ignore[attr-defined]
        assert a.height == b.height == n_train, (a.height, b.height, n_train)
        assert a["value"].equals(b["value"], check_names=False) or np.allclose(
            a["value"].to_numpy(), b["value"].to_numpy(), equal_nan=True
        )
        print(f"llm.c main.log: {n_lines:,} lines, {mb:.0f} MB, {n_train:,} training losses")
        print(f"{'reader':<28}{'seconds':>10}{'lines/s':>14}")
        print(f"{'named patterns (textlog)':<28}{t_named:>10.2f}{n_lines / t_named:>14,.0f}")
        print(f"{'generic (inferred)':<28}{t_generic:>10.2f}{n_lines / t_generic:>14,.0f}")
        print(f"ratio generic / named: {t_generic / t_named:.2f}x")
        path.unlink()
        out = Path(tmp) / "stdout.log"
        n_out = args.lines // 5
        generate_stdout_log(out, n_out)
        t_out, r_out = best(lambda: generic.read(out), args.repeat)
        got = r_out.metrics.filter(pl.col("raw_name") == "loss").height  # type: ignore[attr-defined]
        assert got == n_out, (got, n_out)
        print(
            f"llm.c stdout (no named pattern), {n_out:,} lines: generic {t_out:.2f} s, "
            f"{n_out / t_out:,.0f} lines/s"
        )


if __name__ == "__main__":
    main()
