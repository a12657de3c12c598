"""`forensics demo`: the whole pipeline on every bundled sample run."""

from __future__ import annotations

from pathlib import Path

import typer

from forensics.cli import app, out_console, status
from forensics.commands.report import warn


@app.command()
def demo(
    out: Path = typer.Option(
        Path("forensics-demo"), "--out", help="Folder that receives one sub-folder per run."
    ),
    samples: Path | None = typer.Option(
        None, "--samples", help="Folder of sample runs (default: the bundled sample_logs/)."
    ),
    gpu_hour_cost: float | None = typer.Option(
        None, "--gpu-hour-cost", help="Dollars per GPU-hour, to price each incident."
    ),
) -> None:
    """Analyze every bundled sample run and write its report into ./forensics-demo/<run>/.

    Example: forensics demo && open forensics-demo/rare_tokens/README.md
    """
    from forensics.report.demo import run_demo
    from forensics.report.locate import sample_logs_dir

    folder = samples if samples is not None else sample_logs_dir()
    with status("running the demo") as spinner:
        result = run_demo(
            folder,
            out,
            gpu_hour_cost=gpu_hour_cost,
            progress=lambda msg: spinner.update(msg),
            warn=warn,
        )
    for r in result.runs:
        n = len(r.report.postmortems)
        out_console.print(
            f"{r.scenario}: {n} incident{'s' if n != 1 else ''} → {r.report.readme}",
            highlight=False,
        )
    out_console.print(f"Open {result.index} to start.", highlight=False)


__all__ = ["demo"]
