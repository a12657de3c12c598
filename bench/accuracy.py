"""Labelled accuracy of `forensics detect` on generated runs (bench/synth_runs.py).

Each run is written as JSONL, CSV, Megatron text or TensorBoard (with its config), ingested
through the real pipeline into DuckDB, detected, and scored against its truth:

- location: a detected incident is a true positive when one of its peaks lies within
  max(10 steps, 3 log intervals) of a true peak, or its peak lies inside a true incident's
  span (onset .. recovery, or the end of the run); a true incident is found when some
  detected incident matches it. Precision, recall and F1 follow.
- type / cause accuracy: over found incidents, the matched detected incident that holds
  the truth's last peak (the outcome decides the type; else the closest peak) has the true
  type / the expected cause. The expected cause is the injected
  cause, or `unknown` when the metrics that distinguish it were not logged (a loss-only log
  cannot show a gradient spike).
- false alarms: incidents detected in runs with nothing injected. An injection the second
  generator calls too faint for its log (below +15% noise-free at every logged point) is
  neither a truth nor, when noise lifts it over the threshold, a false alarm.

Two seed sets: development seeds (what thresholds were looked at while building) and
held-out seeds (never used while choosing thresholds; --heldout-base picks a fresh set
nobody has looked at). Runs under
sample_logs/<scenario>/ with a truth.json (the PyTorch simulator's) are scored too.

    python bench/accuracy.py [--runs 120] [--heldout 120] [--direct] [--jobs 2]
    python bench/accuracy.py --clean-scan 20000 [--heldout-base S]   # false alarms at scale

A third generator, written without looking at the detector (bench/synth_runs_v.py: real
writers, benign features of clean runs), is `--generator synth_runs_v` (or `all`): its runs
are written by their writer, ingested and detected (--direct: the writer's rows as frames),
and so is its clean scan (about 0.3 s a clean run). `--dump FILE` keeps every scored run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import synth_runs_t, synth_runs_v  # noqa: E402
from bench.synth_runs import CAUSES, SynthRun, logged_rows, make_run, write_run  # noqa: E402
from forensics.detect import detect, detect_data, load_rules, run_data  # noqa: E402
from forensics.detect.data import RunData  # noqa: E402
from forensics.detect.store import incidents_json  # noqa: E402
from forensics.ingest import ingest  # noqa: E402
from forensics.nonfinite import to_json  # noqa: E402
from forensics.store import open_store  # noqa: E402

DEV_SEEDS = 0
HELDOUT_SEEDS = 100_000


@dataclass
class Scored:
    """Per-run outcome: matched pairs and counts."""

    name: str
    n_truth: int
    n_detected: int
    tp_truth: int
    tp_detected: int
    pairs: list[dict[str, Any]] = field(default_factory=list)  # truth + detected per found
    missed: list[dict[str, Any]] = field(default_factory=list)
    false: list[dict[str, Any]] = field(default_factory=list)
    clean: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # the run's layout (third generator)


def _tol(interval: int) -> int:
    return max(10, 3 * interval)


def _span(t: dict[str, Any], last_step: int) -> tuple[int, int]:
    end = t.get("end") or (last_step if t["type"] == "divergent" else max(t["peaks"]) + 500)
    return int(t["onset"]), int(end)


def _matches(det: dict[str, Any], t: dict[str, Any], tol: int, last_step: int) -> float | None:
    """Distance between the closest peaks when `det` matches truth `t`, else None."""
    dpeaks = [p["step"] for p in det["peaks"]] or [det["peak_step"]]
    best = min(abs(a - b) for a in dpeaks for b in t["peaks"])
    lo, hi = _span(t, last_step)
    if best <= tol or lo - tol <= det["peak_step"] <= hi + tol:
        return float(best)
    return None


def _last_peak_distance(det: dict[str, Any], t: dict[str, Any]) -> int:
    """0 when the truth's last peak lies inside the detected incident, else the distance."""
    last = max(t["peaks"])
    dpeaks = [p["step"] for p in det["peaks"]] or [det["peak_step"]]
    end = det.get("end_step") or max(dpeaks)
    if det["onset_step"] <= last <= max(end, max(dpeaks)):
        return 0
    return min(abs(a - last) for a in dpeaks)


def score(truth: dict[str, Any], detected: list[dict[str, Any]], last_step: int) -> Scored:
    tol = _tol(int(truth["interval"]))
    incidents = truth["incidents"]
    faint = truth.get("faint", [])
    # a detection of an injected incident the truth calls too faint to see is not scored
    detected = [
        d for d in detected if not any(_matches(d, t, tol, last_step) is not None for t in faint)
    ]
    s = Scored(truth["run"], len(incidents), len(detected), 0, 0, clean=not incidents and not faint)
    used: set[int] = set()
    for t in incidents:
        cands = [(d, _matches(d, t, tol, last_step)) for d in detected]
        hits = [(dist, d["id"], d) for d, dist in cands if dist is not None]
        if not hits:
            s.missed.append(t)
            continue
        s.tp_truth += 1
        # the type is the outcome: judge the detected incident nearest the truth's last peak
        det = min(hits, key=lambda h: _last_peak_distance(h[2], t))[2]
        used |= {h[1] for h in hits}
        s.pairs.append({"truth": t, "detected": det})
    s.tp_detected = len(used)
    s.false = [d for d in detected if d["id"] not in used]
    return s


# ----- running detection -------------------------------------------------------------------
def _detect_pipeline(run: SynthRun, rules: list[Any], workdir: Path) -> tuple[list[dict], int]:
    folder = write_run(run, workdir)
    db = workdir / f"{run.name}.duckdb"
    with open_store(db) as store:
        ingest(store, [folder], run=run.name)
        det = detect(store, run.name, rules=rules)[0]
        doc = incidents_json(store, run.name)
    return doc["incidents"], det.last_step


def _run_data(run: SynthRun) -> RunData:
    """The first generator's run as detection reads it (frames, no files)."""
    steps, vals = logged_rows(run)
    frame = pl.DataFrame({"step": steps, **vals})
    cfg = {"beta2": run.config.get("adam_beta2"), "peak_lr": run.config["lr"],
           "warmup_steps": run.config["warmup_steps"], "precision": run.config["precision"],
           "grad_clip": 1.0, "world_size": run.config["world_size"]}  # fmt: skip
    return run_data(frame, cfg, run.name)


def _run_data_t(run: synth_runs_t.TRun) -> RunData:
    """The second generator's run as detection reads it (frames, no files)."""
    frame = pl.DataFrame({"step": run.steps, **run.values})
    c = run.config
    cfg = {"beta2": c.get("adam_beta2"), "peak_lr": c["peak_lr"], "precision": c["precision"],
           "warmup_steps": c["warmup_steps"]}  # fmt: skip
    return run_data(frame, cfg, run.name)


def _detect_direct(run: SynthRun, rules: list[Any]) -> tuple[list[dict], int]:
    det = detect_data(_run_data(run), rules)
    return _rows(det), det.last_step


def _rows(det: Any) -> list[dict[str, Any]]:
    """A direct detection's incidents as incidents.json gives them (the fields scored, and
    the features and evidence a --dump keeps for reading a miss)."""
    return [
        to_json({"id": i.id, "peak_step": i.peak_step, "onset_step": i.onset_step,
               "end_step": i.end_step, "type": i.type, "cause": i.cause,
               "confidence": i.confidence, "recovery": i.recovery,
               "peaks": [{"step": s, "value": v} for s, v in i.peaks],
               "features": i.features, "evidence": [e.as_dict() for e in i.evidence]})
        for i in det.incidents
    ]  # fmt: skip


def evaluate_seed_t(seed: int, direct: bool) -> Scored:
    """The second generator (bench/synth_runs_t.py): its own noise, schedules and formats."""
    run = synth_runs_t.make_run(seed)
    truth = {"run": run.name, "interval": run.interval, "incidents": run.truth, "faint": run.faint}
    rules = load_rules()
    if direct:
        det = detect_data(_run_data_t(run), rules)
        detected = _rows(det)
        last = det.last_step
    else:
        with tempfile.TemporaryDirectory() as tmp:
            folder = synth_runs_t.write_run(run, Path(tmp))
            with open_store(Path(tmp) / "t.duckdb") as store:
                ingest(store, [folder], run=run.name)
                last = detect(store, run.name, rules=rules)[0].last_step
                detected = incidents_json(store, run.name)["incidents"]
    s = score(truth, detected, last)
    for p in s.pairs:
        p["format"], p["interval"] = run.fmt, run.interval
    return s


def _v_frame(run: synth_runs_v.VRun) -> RunData:
    """The third generator's run as its writer logs it, without the files (--direct)."""
    rows = synth_runs_v.logged_rows(run)
    frame = pl.DataFrame(rows, infer_schema_length=None)
    c = run.config
    cfg = {"beta2": c["adam_beta2"], "peak_lr": c["lr"], "precision": c["precision"],
           "warmup_steps": c["warmup_steps"], "grad_clip": 1.0}  # fmt: skip
    return run_data(frame, cfg, run.name)


def _v_detect(
    run: synth_runs_v.VRun, rules: list[Any], direct: bool
) -> tuple[list[dict], int, Any]:
    """Detected incidents of a third-generator run: written by its writer, ingested and
    detected (formats are that generator's point), or from frames with --direct."""
    if direct:
        det = detect_data(_v_frame(run), rules)
        detected = _rows(det)
        return detected, det.last_step, det
    with tempfile.TemporaryDirectory() as tmp:
        folder = synth_runs_v.write_run(run, Path(tmp))
        with open_store(Path(tmp) / "v.duckdb") as store:
            ingest(store, [folder], run=run.name)
            det = detect(store, run.name, rules=rules)[0]
            detected = incidents_json(store, run.name)["incidents"]
    return detected, det.last_step, det


def evaluate_seed_v(seed: int, direct: bool) -> Scored:
    """The third generator (bench/synth_runs_v.py): real writers (TensorBoard, HF Trainer
    state, Lightning CSVLogger, Megatron text), benign features of clean runs."""
    run = synth_runs_v.make_run(seed)
    truth = {"run": run.name, "interval": run.interval, "incidents": run.truth, "faint": run.faint}
    detected, last, _ = _v_detect(run, load_rules(), direct)
    s = score(truth, detected, last)
    for p in s.pairs:
        p["format"], p["interval"] = run.writer, run.interval
    s.info = {"seed": seed, "writer": run.writer, "interval": run.interval,
              "segments": run.segments, "gap": run.gap, "kind": run.kind,
              "loss_mode": run.loss_mode, "n_steps": run.n_steps, "benign": run.benign,
              "faint": run.faint, "precision": run.config["precision"],
              "logged": {k: v for k, v in run.writer_opts.items() if k.endswith("_logged")},
              "detected": detected}  # fmt: skip
    return s


def evaluate_seed(seed: int, direct: bool, generator: str = "synth_runs") -> Scored:
    if generator == "synth_runs_t":
        return evaluate_seed_t(seed, direct)
    if generator == "synth_runs_v":
        return evaluate_seed_v(seed, direct)
    run = make_run(seed)
    rules = load_rules()
    truth = {
        "run": run.name,
        "interval": run.interval,
        "incidents": [t.as_dict() for t in run.truth],
    }
    if direct:
        detected, last = _detect_direct(run, rules)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            detected, last = _detect_pipeline(run, rules, Path(tmp))
    s = score(truth, detected, last)
    for p in s.pairs:
        p["format"], p["interval"] = run.fmt, run.interval
    return s


def evaluate_sample_logs(root: Path) -> list[Scored]:
    """Simulator runs: sample_logs/<scenario>/ with truth.json (cause/type/onset/peak)."""
    out = []
    rules = load_rules()
    for truth_file in sorted(root.glob("*/truth.json")):
        t = json.loads(truth_file.read_text())
        truth = _sim_truth(truth_file.parent.name, t)
        with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "x.duckdb") as store:
            ingest(store, [truth_file.parent], run=truth["run"])
            det = detect(store, truth["run"], rules=rules)[0]
            doc = incidents_json(store, truth["run"])
        out.append(score(truth, doc["incidents"], det.last_step))
    return out


def _sim_truth(name: str, t: dict[str, Any]) -> dict[str, Any]:
    """Normalise the simulator's truth.json to the scorer's shape."""
    items = t.get("expected", t.get("incidents", []))
    incidents = []
    for it in items:
        peaks = it.get("peaks") or [it.get("peak", it.get("peak_step", it.get("onset")))]
        peaks = [p["step"] if isinstance(p, dict) else p for p in peaks if p is not None]
        incidents.append({
            "cause": it.get("cause"), "expected_cause": it.get("expected_cause", it.get("cause")),
            "type": it.get("type"), "onset": it.get("onset", it.get("onset_step", peaks[0])),
            "peaks": peaks, "end": it.get("end", it.get("end_step")),
        })  # fmt: skip
    return {
        "run": name,
        "interval": int(t.get("log_interval", t.get("interval", 1))),
        "incidents": incidents,
    }


# ----- reporting ----------------------------------------------------------------------------
def summarise(results: list[Scored]) -> dict[str, Any]:
    tp_t = sum(r.tp_truth for r in results)
    n_t = sum(r.n_truth for r in results)
    tp_d = sum(r.tp_detected for r in results)
    n_d = sum(r.n_detected for r in results)
    prec = tp_d / n_d if n_d else 1.0
    rec = tp_t / n_t if n_t else 1.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    pairs = [p for r in results for p in r.pairs]
    type_ok = sum(p["truth"]["type"] == p["detected"]["type"] for p in pairs)
    cause_ok = sum(p["truth"]["expected_cause"] == p["detected"]["cause"] for p in pairs)
    clean_runs = [r for r in results if r.clean]
    return {
        "runs": len(results), "truth": n_t, "detected": n_d, "precision": prec, "recall": rec,
        "f1": f1, "type_acc": type_ok / len(pairs) if pairs else 1.0,
        "cause_acc": cause_ok / len(pairs) if pairs else 1.0,
        "clean_runs": len(clean_runs), "false_alarms_clean": sum(r.n_detected for r in clean_runs),
    }  # fmt: skip


def per_cause(results: list[Scored]) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in results:
        for t in r.missed:
            rows[t["cause"]]["n"] += 1
        for p in r.pairs:
            row = rows[p["truth"]["cause"]]
            row["n"] += 1
            row["found"] += 1
            row["type_ok"] += p["truth"]["type"] == p["detected"]["type"]
            row["cause_ok"] += p["truth"]["expected_cause"] == p["detected"]["cause"]
            row["named"] += p["truth"]["expected_cause"] != "unknown"
            row["named_ok"] += (
                p["truth"]["expected_cause"] != "unknown"
                and p["truth"]["expected_cause"] == p["detected"]["cause"]
            )
    return rows


def print_table(title: str, results: list[Scored]) -> None:
    s = summarise(results)
    print(f"\n## {title}")
    print(
        f"runs {s['runs']} (clean {s['clean_runs']}), true incidents {s['truth']}, "
        f"detected {s['detected']}"
    )
    print(
        f"location  precision {s['precision']:.3f}  recall {s['recall']:.3f}  F1 {s['f1']:.3f}"
        f"   type acc {s['type_acc']:.3f}   cause acc {s['cause_acc']:.3f}"
        f"   false alarms on clean runs {s['false_alarms_clean']}"
    )
    print(
        f"{'cause':16s} {'n':>4s} {'recall':>7s} {'type':>6s} {'cause':>6s} "
        f"{'named':>6s} {'named ok':>9s}"
    )
    for cause in (*CAUSES, *sorted(set(per_cause(results)) - set(CAUSES))):
        row = per_cause(results).get(cause)
        if not row:
            continue
        n, found = row["n"], row["found"] or 1
        named = row["named"]
        print(
            f"{cause:16s} {int(n):4d} {row['found'] / n:7.3f} {row['type_ok'] / found:6.3f} "
            f"{row['cause_ok'] / found:6.3f} {int(named):6d} "
            f"{(row['named_ok'] / named) if named else float('nan'):9.3f}"
        )


def run_seeds(
    seeds: list[int], direct: bool, jobs: int, generator: str = "synth_runs"
) -> list[Scored]:
    if jobs <= 1:
        return [evaluate_seed(s, direct, generator) for s in seeds]
    with ProcessPoolExecutor(jobs) as pool:
        n = len(seeds)
        return list(pool.map(evaluate_seed, seeds, [direct] * n, [generator] * n))


GENERATORS = ("synth_runs", "synth_runs_t", "synth_runs_v")
BOTH = ("synth_runs", "synth_runs_t")  # --generator both: the first two, as before


# ----- false alarms on clean runs, at scale -------------------------------------------------
def clean_alarms(seed: int, generator: str = "synth_runs") -> list[dict[str, Any]] | None:
    """The incidents detected in the seed's run when nothing was injected into it (its false
    alarms), each with its noise_tail finding (how routine the jump is for the run's own
    loss noise) when it has one; None when the run is not clean. Frames only, so thousands
    of seeds take minutes: a false alarm comes about once in hundreds of clean runs."""
    if generator == "synth_runs_v":
        return _clean_alarms_v(seed)
    if generator == "synth_runs_t":
        trun = synth_runs_t.make_run(seed)
        if trun.truth or trun.faint or not trun.name.endswith("-clean"):
            return None
        data, layout = _run_data_t(trun), f"{trun.fmt}/{trun.interval}"
    else:
        run = make_run(seed)
        if run.truth or not run.name.endswith("-clean"):
            return None
        data, layout = _run_data(run), f"{run.fmt}/{run.interval}"
    det = detect_data(data, load_rules())
    out = []
    for inc in det.incidents:
        tail = next((e for e in inc.evidence if e.key == "noise_tail"), None)
        out.append({
            "run": data.run_id, "layout": layout, "logged": sorted(["loss", *data.aux]),
            "peak_step": inc.peak_step, "type": inc.type, "cause": inc.cause,
            "rise": inc.features.get("rise"),
            "noise_tail": None if tail is None else {"chance": tail.value, "note": tail.note},
        })  # fmt: skip
    return out


def _clean_alarms_v(seed: int) -> list[dict[str, Any]] | None:
    """clean_alarms for the third generator: through its writer's files (its benign
    features include how each writer logs), so slower than frames (about 0.3 s a run)."""
    run = synth_runs_v.make_run(seed)
    if run.truth or run.faint or not run.name.endswith("-clean"):
        return None
    _, _, det = _v_detect(run, load_rules(), direct=False)
    layout = f"{run.writer}/{'+'.join(str(e) for _, e in run.segments)}"
    out = []
    for inc in det.incidents:
        tail = next((e for e in inc.evidence if e.key == "noise_tail"), None)
        out.append({
            "run": run.name, "layout": layout, "logged": sorted(["loss", *(
                k[: -len("_logged")] for k, v in run.writer_opts.items()
                if k.endswith("_logged") and v)]),
            "peak_step": inc.peak_step, "type": inc.type, "cause": inc.cause,
            "rise": inc.features.get("rise"),
            "noise_tail": None if tail is None else {"chance": tail.value, "note": tail.note},
            "benign": run.benign,
        })  # fmt: skip
    return out


def scan_clean(seeds: list[int], generator: str, jobs: int) -> None:
    """Print the false-alarm rate over the clean runs among `seeds`, and every alarm."""
    if jobs <= 1:
        found = [clean_alarms(s, generator) for s in seeds]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            found = list(pool.map(clean_alarms, seeds, [generator] * len(seeds), chunksize=16))
    runs = [f for f in found if f is not None]
    alarmed = [f for f in runs if f]
    rate = f"1 in {len(runs) / len(alarmed):.0f}" if alarmed else "none"
    print(f"\n## false alarms on clean runs: {generator}, seeds {seeds[0]}..{seeds[-1]}")
    print(f"clean runs {len(runs)}, with a false alarm {len(alarmed)} ({rate})")
    for alarms in alarmed:
        for a in alarms:
            rise = f"{a['rise']:+.1%}" if isinstance(a["rise"], float) else "?"
            tail = a["noise_tail"]
            why = f"noise_tail {tail['chance']}: {tail['note']}" if tail else "no noise_tail"
            print(f"  {a['run']} [{a['layout']} {'+'.join(a['logged'])}] peak {a['peak_step']} "
                  f"{a['type']} {a['cause']} {rise}; {why}")  # fmt: skip
            if a.get("benign"):
                print(f"    benign: {'; '.join(a['benign'])}")


def side_by_side(rows: dict[str, list[Scored]]) -> None:
    """One column per (generator, seed set): the numbers the issue asks to compare."""
    cols = {k: summarise(v) for k, v in rows.items()}
    print("\n## side by side")
    print(f"{'':22s}" + "".join(f"{k:>26s}" for k in cols))
    for key, label in (("precision", "location precision"), ("recall", "location recall"),
                       ("f1", "location F1"), ("type_acc", "type accuracy"),
                       ("cause_acc", "cause accuracy")):  # fmt: skip
        print(f"{label:22s}" + "".join(f"{c[key]:26.3f}" for c in cols.values()))
    alarms = "".join(f"{c['false_alarms_clean']:26d}" for c in cols.values())
    print(f"{'false alarms (clean)':22s}{alarms}")
    sizes = "".join(f"{str(c['runs']) + ' / ' + str(c['truth']):>26s}" for c in cols.values())
    print(f"{'runs / true incidents':22s}{sizes}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=120, help="development runs")
    ap.add_argument("--heldout", type=int, default=120, help="held-out runs")
    ap.add_argument(
        "--heldout-base",
        type=int,
        default=None,
        help=f"first held-out seed (default: fresh each time, printed; was {HELDOUT_SEEDS})",
    )
    ap.add_argument("--direct", action="store_true", help="skip writing/ingesting (frames only)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--generator",
        choices=[*GENERATORS, "both", "all"],
        default="both",
        help="both: synth_runs and synth_runs_t (as before); all: the three",
    )
    ap.add_argument("--dump", metavar="FILE", help="write every scored run as JSON lines")
    ap.add_argument("--show-errors", action="store_true")
    ap.add_argument(
        "--clean-scan",
        type=int,
        default=0,
        metavar="N",
        help="instead: N held-out seeds per generator, clean runs only (frames), every false alarm",
    )
    args = ap.parse_args(argv)
    t0 = time.time()
    heldout = args.heldout_base
    if heldout is None:
        heldout = int(time.time()) % 10_000_000 + 1_000_000  # fresh: nobody has looked at it
    gens = {"both": BOTH, "all": GENERATORS}.get(args.generator, (args.generator,))
    if args.clean_scan:
        for gen in gens:
            scan_clean(list(range(heldout, heldout + args.clean_scan)), gen, args.jobs)
        how = "files for synth_runs_v, frames otherwise" if "synth_runs_v" in gens else "frames"
        print(f"\n({time.time() - t0:.0f} s, {how})")
        return 0
    sets = [("development seeds", DEV_SEEDS, args.runs), ("held-out seeds", heldout, args.heldout)]
    columns: dict[str, list[Scored]] = {}
    for gen in gens:
        for title, base, n in sets:
            if n <= 0:
                continue
            results = run_seeds(list(range(base, base + n)), args.direct, args.jobs, gen)
            print_table(f"{gen}: {title} {base}..{base + n - 1}", results)
            columns[f"{gen} {title.split()[0]}"] = results
            if args.show_errors:
                show_errors(results)
            if args.dump:
                with open(args.dump, "a") as fh:
                    for r in results:
                        row = {"set": title, "generator": gen, **asdict(r)}
                        fh.write(json.dumps(row, default=str) + "\n")
    if len(columns) > 1:
        side_by_side(columns)
    samples = REPO / "sample_logs"
    if samples.is_dir() and any(samples.glob("*/truth.json")):
        sim = evaluate_sample_logs(samples)
        print_table("simulator runs (sample_logs/)", sim)
        if args.show_errors:
            show_errors(sim)
    print(f"\n({time.time() - t0:.0f} s, {'frames' if args.direct else 'written + ingested'})")
    return 0


def show_errors(results: list[Scored]) -> None:
    for r in results:
        for t in r.missed:
            print(f"  MISSED {r.name}: {t['cause']} {t['type']} peaks {t['peaks'][:4]}")
        for d in r.false:
            print(f"  FALSE  {r.name}: peak {d['peak_step']} {d['type']} {d['cause']}")
        for p in r.pairs:
            t, d = p["truth"], p["detected"]
            if t["type"] != d["type"] or t["expected_cause"] != d["cause"]:
                print(
                    f"  WRONG  {r.name} [{p.get('format')}/{p.get('interval')}] "
                    f"peak {t['peaks'][0]}: "
                    f"type {t['type']}->{d['type']} cause {t['expected_cause']}->{d['cause']} "
                    f"({d['confidence']})"
                )


if __name__ == "__main__":
    raise SystemExit(main())
