"""`forensics demo`: analyze every bundled sample run and write its report.

Each scenario folder of `sample_logs/` (made by the simulator) becomes
`<out>/<scenario>/` holding its DuckDB, README.md, postmortems/ and figures/. The analyze
pipeline is looked up at call time so this module imports even before it exists.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.detect.store import write_json
from forensics.errors import ForensicsError
from forensics.report.export import PLOTLY_JS, browser_session
from forensics.report.render import environment
from forensics.report.writer import ReportResult, write_report
from forensics.store import Store, open_store

AnalyzeFn = Callable[..., Any]
DB_NAME = "forensics.duckdb"
INDEX_TEMPLATE = "demo.md.j2"
# The demo exists to show each kind of post-mortem: every incident gets one, whatever its
# severity (`forensics report` writes them from `moderate` up by default).
DEMO_MIN_SEVERITY = "minor"
ONSET_SLACK = 50  # steps between injected and found onsets that still count as the same


class DemoError(ForensicsError):
    """The demo cannot run: no sample runs, or no analyze pipeline."""


@dataclass
class DemoRun:
    scenario: str
    db: Path
    report: ReportResult
    row: dict[str, str]  # this run's line of the index (forensics-demo/README.md)


@dataclass
class DemoResult:
    runs: list[DemoRun]
    index: Path  # out/README.md: every run, what was injected and what was found


def scenarios(samples: Path) -> list[Path]:
    """The scenario folders of `samples`, by name (hidden and cache folders skipped)."""
    found = sorted(
        p for p in samples.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))
    )
    if not found:
        raise DemoError(
            f'"{samples}" holds no sample run (one folder per scenario); generate them with '
            "the simulator first, or pass --samples DIR"
        )
    return found


def load_analyze() -> AnalyzeFn:
    """`forensics.analyze.analyze`: ingest + detect + replay of one run into a DuckDB.

    Called as `analyze([folder], db=..., run=..., progress=...)`; without `out` it writes
    only the database, and the demo writes the report itself.
    """
    try:
        from forensics.analyze import analyze
    except ImportError as exc:
        raise DemoError(
            f"the analyze pipeline is not available ({exc}); `forensics demo` needs "
            "forensics.analyze.analyze"
        ) from exc
    return analyze


def run_demo(
    samples: Path,
    out: Path,
    *,
    analyze: AnalyzeFn | None = None,
    gpu_hour_cost: float | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
    warn: Callable[[str], None] | None = None,
) -> DemoResult:
    """Analyze each scenario into `out/<scenario>/`, write its report and incidents.json
    there, and an index of all of them (injected vs found) in `out/README.md`."""
    folders = scenarios(samples)  # first: "no sample runs" is the likelier problem
    fn = analyze or load_analyze()
    with browser_session():
        runs = [_one(folder, out, fn, gpu_hour_cost, progress, warn) for folder in folders]
    index = out / "README.md"
    text = environment().get_template(INDEX_TEMPLATE).render(runs=[r.row for r in runs])
    index.write_text(text)
    return DemoResult(runs, index)


def _one(
    folder: Path,
    out: Path,
    analyze: AnalyzeFn,
    gpu_hour_cost: float | None,
    progress: Callable[[str], None],
    warn: Callable[[str], None] | None,
) -> DemoRun:
    dest = out / folder.name
    dest.mkdir(parents=True, exist_ok=True)
    db = _fresh_db(dest)
    progress(f"analyzing {folder.name}")
    analyze([folder], db=db, run=folder.name, progress=progress)
    progress(f"writing the report of {folder.name}")
    with open_store(db, read_only=True) as store:
        run_id = store.resolve_run(folder.name)
        report = write_report(
            store,
            run_id,
            dest,
            gpu_hour_cost=gpu_hour_cost,
            warn=warn,
            min_severity=DEMO_MIN_SEVERITY,
            plotly_js=out / PLOTLY_JS,
        )
        write_json(store, run_id, dest / "incidents.json")
        row = _index_row(store, run_id, folder, report)
    compact(db)
    return DemoRun(folder.name, db, report, row)


def compact(db: Path) -> None:
    """Rewrite the finished database with 16 KB blocks: DuckDB's default 256 KB block per
    table makes a 1,600-step run's store 4.7 MB; this one is ~0.6 MB, same content (and it
    stays writable: `forensics detect --db` on it works)."""
    import duckdb

    tmp = db.with_name(db.name + ".compact")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect()
    try:
        quote = lambda p: str(p).replace("'", "''")  # noqa: E731 - a path inside SQL text
        con.execute(f"ATTACH '{quote(db)}' AS old (READ_ONLY)")
        con.execute(f"ATTACH '{quote(tmp)}' AS new (BLOCK_SIZE 16384)")
        con.execute("COPY FROM DATABASE old TO new")
    finally:
        con.close()
    tmp.replace(db)


def _index_row(store: Store, run_id: str, folder: Path, report: ReportResult) -> dict[str, str]:
    """What the truth file says was injected beside what analyze found."""
    found = store.query(
        "SELECT onset_step, peak_step, end_step, type, cause, replay FROM incidents "
        "WHERE run_id = ? "
        "ORDER BY onset_step",
        [run_id],
    ).to_dicts()
    return {
        "scenario": folder.name,
        "agrees": agreement(_expected(folder / "truth.json"), found),
        "injected": _injected(folder / "truth.json"),
        "found": "; ".join(f"step {i['onset_step']} ({i['type']})" for i in found) or "nothing",
        "causes": ", ".join(sorted({str(i["cause"]) for i in found})) or "—",
        "replay": ", ".join(sorted({str(i["replay"]) for i in found})) or "—",
        "link": report.readme.relative_to(report.out_dir.parent).as_posix(),
    }


def _expected(truth: Path) -> list[dict[str, Any]] | None:
    if not truth.is_file():
        return None
    try:
        expected = json.loads(truth.read_text()).get("expected", [])
    except (json.JSONDecodeError, AttributeError):
        return None
    return [e for e in expected if isinstance(e, dict)]


def same_incident(onset: int, found: dict[str, Any], slack: int) -> bool:
    """A found incident is the injected one whose onset is `onset` when their onsets are within
    `slack` steps, or when `onset` lies inside it (from its onset to its end, or to its peak
    when it never recovered): a too-high LR's climb starts in warm-up, well before the first
    loss 30% above it that truth.json calls the onset, and is still the same incident."""
    start = int(found["onset_step"])
    if abs(start - onset) <= slack:
        return True
    last = found.get("end_step") or found.get("peak_step")
    return last is not None and start <= onset <= int(last)


def agreement(expected: list[dict[str, Any]] | None, found: list[dict[str, Any]]) -> str:
    """ "yes" when every injected incident was found with its type and cause and nothing
    else was found; otherwise "≠" and what differs."""
    if expected is None:
        return "no truth.json"
    diffs: list[str] = []
    left = list(found)
    for e in expected:
        near = [f for f in left if same_incident(int(e["onset_step"]), f, ONSET_SLACK)]
        if not near:
            diffs.append(f"injected {e['cause']} at step {e['onset_step']} not found")
            continue
        f = near[0]
        left.remove(f)
        if str(f["type"]) != str(e["type"]):
            diffs.append(f"type: found {f['type']}, injected {e['type']}")
        if str(f["cause"]) != str(e["cause"]):
            diffs.append(f"cause: found {f['cause']}, injected {e['cause']}")
    if left:
        steps = ", ".join(str(f["onset_step"]) for f in left)
        diffs.append(f"also found at step {steps}")
    return "yes" if not diffs else "≠ " + "; ".join(diffs)


def _injected(truth: Path) -> str:
    """`cause at step N (type)` per expected incident of a simulator truth.json."""
    if not truth.is_file():
        return "unknown (no truth.json)"
    try:
        expected = json.loads(truth.read_text()).get("expected", [])
    except (json.JSONDecodeError, AttributeError) as exc:
        raise DemoError(f"{truth}: not a simulator truth file ({exc})") from exc
    items = [f"{e['cause']} at step {e['onset_step']} ({e['type']})" for e in expected]
    return "; ".join(items) or "nothing (clean)"


def _fresh_db(dest: Path) -> Path:
    """The scenario's database path, with any earlier demo's database removed."""
    db = dest / DB_NAME
    for path in (db, db.with_name(DB_NAME + ".wal")):
        path.unlink(missing_ok=True)
    return db
