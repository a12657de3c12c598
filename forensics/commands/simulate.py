"""`forensics simulate`: training runs with injected faults, as sample logs with ground truth."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from forensics.cli import app, err_console, out_console, rich_console
from forensics.errors import SimulationError

if TYPE_CHECKING:
    from rich.progress import TaskID

    from forensics.sim.simulate import SimResult

# The scenario names, for --help without importing the simulator (torch); a test checks
# they match forensics.sim.scenarios.SCENARIOS.
SCENARIO_NAMES = (
    "clean",
    "rare_tokens",
    "stale_beta2",
    "lr_too_high",
    "fp16_overflow",
    "data_corruption",
    "hardware_fault",
)


@app.command()
def simulate(
    scenario: str | None = typer.Argument(
        None, help=f"One of: {', '.join(SCENARIO_NAMES)}.", show_default=False
    ),
    out: Path = typer.Option(..., "--out", help="Run folder (with --all: parent folder)."),
    all_scenarios: bool = typer.Option(False, "--all", help="Every scenario, one folder each."),
    steps: int | None = typer.Option(None, "--steps", help="Training steps (tiny: 1600)."),
    preset: str = typer.Option("tiny", "--preset", help="Model preset: tiny (CPU) or small (GPU)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    seed: int = typer.Option(1337, "--seed", help="Seed of model init and batch sampling."),
    at: int | None = typer.Option(
        None, "--at", help="Step of the injection (default per scenario)."
    ),
    strength: float | None = typer.Option(
        None, "--strength", help="Size of the fault; its meaning depends on the scenario."
    ),
) -> None:
    """Train the bundled reference model with a known fault injected; write its run folder.

    The folder holds metrics, a batch manifest, checkpoints, truth.json, loss.png and a
    README.

    Example: forensics simulate rare_tokens --out runs/rare --steps 1000 --at 600
    Example: forensics simulate --all --out sample_logs/
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from forensics.sim.simulate import simulate as run_simulation
    from forensics.sim.simulate import simulate_all

    if all_scenarios == (scenario is not None):
        raise SimulationError("name one SCENARIO or pass --all (not both)")
    kwargs: dict[str, Any] = {"steps": steps, "preset_name": preset, "device": device, "seed": seed}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=rich_console(stderr=True), transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def tick(name: str, step: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=step)

        if all_scenarios:
            results = simulate_all(out, at=at, strength=strength, progress=tick, **kwargs)
        else:
            assert scenario is not None
            results = [
                run_simulation(scenario, out, at=at, strength=strength, progress=tick, **kwargs)
            ]
    _print(results)


def _print(results: list[SimResult]) -> None:
    from rich.table import Table

    table = Table("scenario", "cause", "type", "onset", "peak", "final loss", "seconds")
    for r in results:
        exp = r.truth["expected"] or [{}]
        for e in exp:
            table.add_row(
                r.scenario, e.get("cause", "-"), e.get("type", "-"),
                str(e.get("onset_step", "-")), str(e.get("peak_step", "-")),
                f"{r.final_loss:.3f}", f"{r.seconds:.0f}",
            )  # fmt: skip
    out_console.print(table)
    for r in results:
        err_console.print(f"wrote {r.run_dir}", highlight=False)


__all__ = ["simulate"]
