"""`analyze`: the whole pipeline, step by step, in one call.

    ingest -> detect -> replay -> report -> incidents.json

A folder may hold several runs (discovery decides, see forensics/ingest/discover.py): each
is analysed into a sub-folder of its own (OUT/<run>/) and one index over all of them,
OUT/README.md (templates/runs_index.md.j2), lists the runs, their incidents and links.

Each step is a function of the shared AnalyzeContext, listed in STEPS in order. A new
stage is one more entry (or pass `steps=` to run a different list); a step reads what the
previous ones stored in the DuckDB file, so steps never call each other. incidents.json is
written last so that it carries the replay verdicts the replay step stored.

Without an output folder (`out=None`, as `forensics demo` calls it) only the database is
written: the report and incidents.json steps need a folder and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from forensics.detect import DetectConfig, Detection, detect
from forensics.detect.recovery import SEVERITIES
from forensics.detect.store import write_json
from forensics.errors import ReplayError, ReportOptionError, StoreError
from forensics.ingest import ingest
from forensics.store import Store, open_store

Progress = Callable[[str], None]


@dataclass
class AnalyzeOptions:
    run: str | None = None  # run name (default: from the path)
    replay: bool = True  # --no-replay turns the replay step off
    report: bool = True
    device: str = "auto"  # replay device
    rules_dirs: list[Path] = field(default_factory=list)  # extra rule folders (--rules)
    config: DetectConfig | None = None  # detection thresholds (None: the defaults)
    gpu_hour_cost: float | None = None  # $ per GPU-hour, for the cost of each incident
    min_severity: str | None = None  # full post-mortems from it up (None: the report's default)
    fmt: str | None = None  # force a reader (--format)
    sources: Any = None  # forensics.replay.sources.Sources: dataset, tokenizer, shard loader


@dataclass
class AnalyzeContext:
    paths: list[Path]
    out: Path | None
    db: Path
    options: AnalyzeOptions
    store: Store
    progress: Progress
    run_id: str = ""
    run_ids: list[str] = field(default_factory=list)  # every run the ingest found
    ingest_notes: dict[str, list[str]] = field(default_factory=dict)
    detection: Detection | None = None
    notes: list[str] = field(default_factory=list)  # what a step skipped, and why
    outputs: list[Path] = field(default_factory=list)
    plotly_js: Path | None = None  # several runs share OUT/plotly.min.js (None: one per report)


Step = Callable[[AnalyzeContext], None]


def ingest_step(ctx: AnalyzeContext) -> None:
    run = ctx.options.run
    if run is None and len(ctx.paths) > 1:
        run = ctx.paths[0].resolve().name  # several paths are one run
    summaries = ingest(ctx.store, ctx.paths, run=run, fmt=ctx.options.fmt, progress=ctx.progress)
    ctx.run_ids = [s.run for s in summaries]
    ctx.ingest_notes = {s.run: s.notes for s in summaries}
    ctx.run_id = summaries[0].run


def detect_step(ctx: AnalyzeContext) -> None:
    ctx.progress(f"{ctx.run_id}: detecting incidents")
    ctx.detection = detect(
        ctx.store,
        ctx.run_id,
        config=ctx.options.config,
        rules_dirs=ctx.options.rules_dirs,
        gpu_hour_cost=ctx.options.gpu_hour_cost,
    )[0]


def replay_step(ctx: AnalyzeContext) -> None:
    """Replay each incident's batches; a run that cannot be replayed keeps `not_run`."""
    if not ctx.options.replay:
        ctx.notes.append("replay: skipped (--no-replay)")
        return
    if ctx.detection is not None and not ctx.detection.incidents:
        ctx.notes.append("replay: nothing to replay (no incident)")
        return
    from forensics.replay import replay_run
    from forensics.replay.tiers import describe

    try:
        rows = replay_run(ctx.store, ctx.run_id, device=ctx.options.device,
                          progress=ctx.progress, sources=ctx.options.sources)  # fmt: skip
        ctx.notes.append(f"replay: {describe(rows)}")
    except ReplayError as exc:
        ctx.notes.append(f"replay: not run ({exc})")


def report_step(ctx: AnalyzeContext) -> None:
    if not ctx.options.report or ctx.out is None:
        return
    from forensics.report import write_report
    from forensics.report.context import DEFAULT_MIN_SEVERITY

    ctx.progress(f"{ctx.run_id}: writing the report")
    result = write_report(
        ctx.store,
        ctx.run_id,
        ctx.out,
        gpu_hour_cost=ctx.options.gpu_hour_cost,
        warn=lambda msg: ctx.notes.append(f"report: {msg}"),
        min_severity=ctx.options.min_severity or DEFAULT_MIN_SEVERITY,
        plotly_js=ctx.plotly_js,
    )
    ctx.outputs += [result.readme, *result.postmortems]


def json_step(ctx: AnalyzeContext) -> None:
    if ctx.out is None:
        return
    ctx.outputs.append(write_json(ctx.store, ctx.run_id, ctx.out / "incidents.json"))


STEPS: list[tuple[str, Step]] = [
    ("ingest", ingest_step),
    ("detect", detect_step),
    ("replay", replay_step),
    ("report", report_step),
    ("incidents.json", json_step),
]


@dataclass
class AnalyzeResult:
    run_id: str  # the first run (the only one, for a single run)
    db: Path
    detection: Detection | None
    outputs: list[Path]
    notes: list[str]
    runs: list[AnalyzeResult] = field(default_factory=list)  # one per run when several
    index: Path | None = None  # OUT/README.md over several runs

    @property
    def detections(self) -> list[Detection]:
        found = [r.detection for r in self.runs] if self.runs else [self.detection]
        return [d for d in found if d is not None]


def analyze(
    path: Path | Sequence[Path],
    out: Path | None = None,
    *,
    db: Path | None = None,
    run: str | None = None,
    options: AnalyzeOptions | None = None,
    steps: list[tuple[str, Step]] | None = None,
    progress: Progress | None = None,
) -> AnalyzeResult:
    """Run every step on the logs at `path`. The database defaults to out/forensics.duckdb;
    `run` overrides options.run. Several runs found under `path` are each analysed into
    out/<run>/, with an index at out/README.md."""
    if out is None and db is None:
        raise StoreError("analyze needs an output folder or a database (--out or --db)")
    opts = options or AnalyzeOptions()
    if opts.min_severity is not None and opts.min_severity not in SEVERITIES:
        raise ReportOptionError(  # before any work, not after ingest and detect
            f"--min-severity {opts.min_severity!r}: expected one of {', '.join(SEVERITIES)}"
        )
    paths = [Path(path)] if isinstance(path, str | Path) else [Path(p) for p in path]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    db = db or out / "forensics.duckdb"  # type: ignore[operator]
    if run is not None:
        opts = replace(opts, run=run)
    todo = steps or STEPS
    say = progress or (lambda _msg: None)
    with open_store(db) as store:
        ctx = AnalyzeContext(paths, out, db, opts, store, say)
        first, rest = todo[:1], todo[1:]
        for name, step in first:
            ctx.progress(name)
            step(ctx)
        if len(ctx.run_ids) <= 1:
            for name, step in rest:
                ctx.progress(name)
                step(ctx)
            said = [f"ingest: {n}" for n in ctx.ingest_notes.get(ctx.run_id, [])]
            return AnalyzeResult(ctx.run_id, db, ctx.detection, ctx.outputs, said + ctx.notes)
        detected = _detect_all(ctx) if any(n == "detect" for n, _ in rest) else {}
        rest = [(n, s) for n, s in rest if n != "detect"] if detected else rest
        results = [_one_run(ctx, run_id, rest, detected.get(run_id)) for run_id in ctx.run_ids]
        index = _write_index(ctx, results) if out is not None else None
    outputs = ([index] if index else []) + [p for r in results for p in r.outputs]
    per_run = [(r.run_id, r.notes) for r in results]
    notes = ctx.notes + [f"{runs_label(runs)}: {text}" for runs, text in grouped_notes(per_run)]
    first_result = results[0]
    return AnalyzeResult(
        first_result.run_id, db, first_result.detection, outputs, notes, results, index
    )


def stored_tables(result: AnalyzeResult) -> list[tuple[Detection, dict[int, str]]]:
    """Each run's detection as the store holds it after replay, with the replay verdict of
    each incident's cause (detect.store.as_stored): what the terminal table prints."""
    from forensics.detect.store import as_stored

    with open_store(result.db, read_only=True) as store:
        return [as_stored(store, d) for d in result.detections]


def _detect_all(ctx: AnalyzeContext) -> dict[str, Detection]:
    """Detect every run of the store at once, so each run's cross-run evidence (stored in
    its hypotheses) knows all the others and agrees with the `recurrences` table. Runs the
    store held before keep the replay verdicts of incidents detected where they were."""
    from forensics.replay.kept import redetect

    ctx.progress("detect (every run, with cross-run evidence)")
    opts = ctx.options
    dets, note = redetect(
        ctx.store,
        lambda: detect(
            ctx.store,
            None,
            config=opts.config,
            rules_dirs=opts.rules_dirs,
            gpu_hour_cost=opts.gpu_hour_cost,
        ),
    )
    if note:
        ctx.notes.append(note)
    return {d.run_id: d for d in dets}


def _one_run(
    ctx: AnalyzeContext,
    run_id: str,
    steps: list[tuple[str, Step]],
    detection: Detection | None = None,
) -> AnalyzeResult:
    """The steps after ingest (and detect) on one of several runs, into out/<run>/."""
    sub = shared_js = None
    if ctx.out is not None:
        from forensics.report.export import PLOTLY_JS

        sub = ctx.out / safe_folder_name(run_id)
        sub.mkdir(parents=True, exist_ok=True)
        shared_js = ctx.out / PLOTLY_JS  # one 4.8 MB copy for every run's figures
    one = replace(
        ctx, out=sub, run_id=run_id, detection=detection, notes=[], outputs=[], plotly_js=shared_js
    )
    for name, step in steps:
        one.progress(f"{run_id}: {name}")
        step(one)
    return AnalyzeResult(run_id, ctx.db, one.detection, one.outputs, one.notes)


def grouped_notes(per_run: list[tuple[str, list[str]]]) -> list[tuple[list[str], str]]:
    """Each note once, with the runs it applies to, in first-seen order. Notes that differ
    only by the run's own name (`run "a" has no batch manifest`) are one note, which then
    says `each run`; a note of one run keeps its name."""
    groups: dict[str, tuple[list[str], str]] = {}
    for run, notes in per_run:
        for note in notes:
            key = note.replace(f'run "{run}"', "\0")
            runs, _ = groups.setdefault(key, ([], note))
            if run not in runs:
                runs.append(run)
    return [
        (runs, note if len(runs) == 1 else key.replace("\0", "each run"))
        for key, (runs, note) in groups.items()
    ]


def runs_label(runs: list[str]) -> str:
    """`a` for one run, `2 runs (a, b)` for several."""
    return runs[0] if len(runs) == 1 else f"{len(runs)} runs ({', '.join(runs)})"


def safe_folder_name(run_id: str) -> str:
    """A run name as a folder name (no separators, no leading dot)."""
    name = re.sub(r"[^\w.\-]+", "_", run_id).strip("._") or "run"
    return name[:120]


def _write_index(ctx: AnalyzeContext, results: list[AnalyzeResult]) -> Path:
    """OUT/README.md: one line per run with its incidents and a link to its report."""
    import jinja2

    from forensics.detect import recurrence
    from forensics.detect.coverage import read as read_coverage
    from forensics.report.locate import templates_dir

    assert ctx.out is not None
    copy_of = recurrence.copies(recurrence.run_spikes(ctx.store))
    rows = []
    for r in results:
        det = r.detection
        incidents = det.incidents if det is not None else []
        folder = safe_folder_name(r.run_id)
        readme = ctx.out / folder / "README.md"
        rows.append(
            {
                "run": r.run_id,
                "folder": folder,
                "report": f"{folder}/README.md" if readme.exists() else None,
                "incidents": [
                    {
                        "id": i.id,
                        "type": i.type,
                        "cause": i.cause,
                        "onset": i.onset_step,
                        "peak": i.peak_step,
                    }
                    for i in incidents
                ],
                "last_step": det.last_step if det is not None else None,
                "coverage": read_coverage(ctx.store, r.run_id),  # detect's row, shown short
                "copy_of": copy_of.get(r.run_id),  # the same loss logged by another run
            }
        )
    notes = [
        {"runs": runs, "label": runs_label(runs), "text": text}
        for runs, text in grouped_notes(
            [(r.run_id, ctx.ingest_notes.get(r.run_id, [])
              + [n for n in r.notes if "(--no-replay)" not in n]) for r in results]
        )
    ]  # fmt: skip
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    recurrences, figure = _recurrences(ctx, [r.run_id for r in results])
    text = env.get_template("runs_index.md.j2").render(
        # the folder's name, not where it sits on this machine: the index is sent around
        paths=[p.resolve().name or str(p) for p in ctx.paths],
        runs=rows,
        recurrences=recurrences,
        figure=figure,
        notes=notes,
    )
    index = ctx.out / "README.md"
    index.write_text(text, encoding="utf-8")
    return index


def _recurrences(
    ctx: AnalyzeContext, run_ids: list[str]
) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
    """The cross-run recurrences detect stored among these runs (most shared first), for the
    index, and the overlay of the runs around the first one (OUT/figures/)."""
    from forensics.fleet.render import short_names
    from forensics.fleet.summary import read as read_fleet

    assert ctx.out is not None
    ours = set(run_ids)
    names = short_names(run_ids)
    recs = [r for r in read_fleet(ctx.store).recurrences if len(ours & {n for n, _ in r.runs}) > 1]
    rows = [
        {
            "step": r.step,
            "span": r.span.removeprefix("steps ").removeprefix("step "),
            "verdict": r.verdict,
            "runs": [(_label(names.get(n, n)), safe_folder_name(n), peak, "") for n, peak in r.runs]
            + [
                (_label(names.get(n, n)), safe_folder_name(n), peak, _label(names.get(t, t)))
                for n, peak, t in r.repeats
            ],
        }
        for r in recs
    ]
    if not recs or not ctx.options.report:
        return rows, None
    from forensics.fleet.figure import write_overlay
    from forensics.report.export import PLOTLY_JS

    html, png, note = write_overlay(
        ctx.store, recs[0], ctx.out / "figures", plotly_js=ctx.out / PLOTLY_JS
    )
    if note:
        ctx.notes.append(f"index figure: {note}")
    figure = {"html": html.relative_to(ctx.out).as_posix(), "step": str(recs[0].step)}
    if png is not None:
        figure["png"] = png.relative_to(ctx.out).as_posix()
    return rows, figure


def _label(name: str, width: int = 28) -> str:
    """A run's short name for a table cell (the link still goes to its folder)."""
    return name if len(name) <= width else name[: width - 1] + "…"
