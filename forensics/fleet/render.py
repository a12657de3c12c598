"""Print a Fleet: recurrences first (one line each), then runs x incidents."""

from __future__ import annotations

import os

from rich import box
from rich.console import Console
from rich.table import Table

from forensics.fleet.summary import Fleet, cause_label
from forensics.report.fmt import plural

SHOWN_RECURRENCES = 15


def short_names(run_ids: list[str]) -> dict[str, str]:
    """Run ids without the prefix they all share (records__track_1_short__...)."""
    prefix = os.path.commonprefix(run_ids) if len(run_ids) > 1 else ""
    return {r: r[len(prefix) :] or r for r in run_ids}


def print_fleet(fleet: Fleet, console: Console) -> None:
    names = short_names([r.run_id for r in fleet.runs])
    n_inc = sum(len(r.incidents) for r in fleet.runs)
    console.print(
        f"{plural(len(fleet.runs), 'run')}, {plural(n_inc, 'incident')}, "
        f"{plural(len(fleet.recurrences), 'spike')} recurring across runs",
        highlight=False,
    )
    for r in fleet.recurrences[:SHOWN_RECURRENCES]:
        runs = ", ".join(f"{names.get(run, run)} @ {peak}" for run, peak in r.runs) + "".join(
            f", {names.get(run, run)} @ {peak} (tracks {names.get(twin, twin)})"
            for run, peak, twin in r.repeats
        )
        console.print(f"  recurrence {r.id}: {r.verdict}", highlight=False, markup=False)
        console.print(f"      runs: {runs}", highlight=False, markup=False)
    if len(fleet.recurrences) > SHOWN_RECURRENCES:
        rest = len(fleet.recurrences) - SHOWN_RECURRENCES
        console.print(f"  ... {rest} more (table `recurrences`)", highlight=False)
    table = Table(
        title="Runs x incidents (* = the spike recurs in another run)", box=box.SIMPLE_HEAD
    )
    table.add_column("run", overflow="fold")
    table.add_column("steps", justify="right")
    table.add_column("incidents (peak: cause, confidence)", overflow="fold")
    for run in fleet.runs:
        cells = [
            f"{'*' if i.recurrence_id else ''}{i.peak_step}: {i.cause}"
            + ("" if i.cause == "unknown" else f" ({i.confidence:.2f})")
            + (f" [recurrence {i.recurrence_id}]" if i.recurrence_id else "")
            for i in run.incidents
        ]
        table.add_row(names[run.run_id], str(run.last_step), "\n".join(cells) or "-")
    console.print(table)
    causes = sorted({i.cause for r in fleet.runs for i in r.incidents})
    for c in causes:
        if cause_label(c) != c:
            console.print(f"{c}: {cause_label(c)}", highlight=False, markup=False)
    if fleet.figure is not None:
        console.print(f"figure: {fleet.figure_png or fleet.figure}", highlight=False)
