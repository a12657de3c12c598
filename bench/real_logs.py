"""Every real log's incidents, each log alone, then the folders that hold several runs.

Issue 15's first check: on the public logs in ../shared/real_logs, every incident names a
cause (none reads unknown where grad norm or the loss scale is logged), and the runs of one
folder that spike at the same step are found in one store (cross-run recurrence). Prints
two Markdown tables: one row per log (detect alone), then one row per run of each folder
ingested into one store, with the steps that recur across runs.

    python bench/real_logs.py [--root ../shared/real_logs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forensics.detect import detect  # noqa: E402
from forensics.detect.model import Incident  # noqa: E402
from forensics.ingest import ingest  # noqa: E402
from forensics.store import open_store  # noqa: E402

KEY_METRICS = ("grad_norm", "loss_scale", "lr", "skipped_iters", "nan_iters")


def _row(name: str, incidents: list[Incident], metrics: list[str]) -> str:
    types = Counter(i.type for i in incidents)
    causes = Counter(i.cause for i in incidents)
    confs = [i.confidence for i in incidents if i.confidence is not None]
    conf = f"{min(confs):.2f}–{max(confs):.2f}" if confs else ""
    unknown = sum(1 for i in incidents if i.cause in ("unknown", None))
    key = ", ".join(m for m in KEY_METRICS if m in metrics)
    return (
        f"| {name} | {len(incidents)} | {dict(types) or ''} | {dict(causes) or ''} | {conf} "
        f"| {unknown} | {key} |"
    )


def _short(path: Path) -> str:
    owner = path.parent.name.split("__")[-1]
    return f"{owner}/{path.name[-56:]}"


def each_alone(files: list[Path], tmp: Path) -> None:
    print("| log | incidents | types | causes | confidence | unknown | cause metrics logged |")
    print("|---|---:|---|---|---|---:|---|")
    for n, f in enumerate(files):
        with open_store(tmp / f"alone{n}.duckdb") as store:
            ingest(store, [f], run="r")
            det = detect(store, "r")[0]
            rows = store.con.execute("select distinct metric from metrics").fetchall()
        metrics = [m for (m,) in rows]
        print(_row(_short(f), det.incidents, metrics))


def folders(root: Path, tmp: Path) -> None:
    for n, folder in enumerate(sorted(p for p in root.iterdir() if p.is_dir())):
        runs = [p for p in folder.iterdir() if p.is_file()]
        if len(runs) < 2:
            continue
        with open_store(tmp / f"folder{n}.duckdb") as store:
            ingest(store, [folder])
            dets = detect(store)
            recurring = store.con.execute(  # counted runs, and runs that repeat one of them
                "select step, count(distinct run_id) filter (repeat_of is null) as runs, "
                "count(distinct run_id) filter (repeat_of is not null) as again "
                "from recurrences group by step having runs > 1 "
                "order by runs desc, again desc, step limit 10"
            ).fetchall()
        print(f"\n### {folder.name}: {len(dets)} runs in one store")
        print("| run | incidents | types | causes | confidence | unknown | |")
        print("|---|---:|---|---|---|---:|---|")
        for d in dets:
            print(_row(d.run_id[-56:], d.incidents, []))
        shown = (
            ", ".join(
                f"{s} in {k} runs" + (f" (+{a} repeated)" if a else "") for s, k, a in recurring
            )
            or "none"
        )
        print(f"\nsteps that recur across runs: {shown}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=REPO.parent / "shared" / "real_logs")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        print(f"no real logs at {args.root}", file=sys.stderr)
        return 2
    files = sorted(p for p in args.root.rglob("*") if p.is_file() and p.suffix != ".md")
    with tempfile.TemporaryDirectory() as td:
        each_alone(files, Path(td))
        folders(args.root, Path(td))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
