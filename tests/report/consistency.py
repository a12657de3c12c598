"""The consistency checker: a rendered report read back against the store it came from.

`check_report(folder, store, run_id)` parses README.md and every postmortems/spike-NN.md
and returns one line per contradiction:

- every quoted (step, value) — the symptoms' peak, grad-norm peak and recovery, the excerpt
  table's rows — matches the incident row and the logged metrics;
- steps lost, recovery and advice agree with the type and with each other (a recoverable
  incident is never told to restart; a named restart checkpoint is the stored one; steps
  lost is recovery − onset when the incident recovered);
- steps lost charges no step at which the loss was back on its trend: every incident's
  charged stretches (its peaks' stored `from`/`back`, else onset to recovery) hold no logged
  point that, with the median of the 9 points from it, is within the stored tolerance of the
  stored pre-spike trend (a merged incident whose loss came back between two blips is not
  charged for the steps between them), and steps lost is their total; a quoted return ("back
  at step N") is a stored one;
- no cause that replay refuted is named as the root cause;
- every competing-hypothesis row has the status the `hypotheses` and replay tables give it
  (replay's confirmed / refuted first, else supported / ruled out / not evaluated by the
  log, naming what it `needs`), and every stored hypothesis has its row;
- the "What to log next" line names the stored `log_next` metrics, in rank order;
- each cross-run line is a stored `recurrences` group of this run, with its run count;
- a run whose screen left steps unjudged (`screen_coverage`) is never called clean;
- no path outside the report folder (absolute paths, links that leave the folder);
- none of the known wording defects ("in 0 steps", "-0.00", exponents in GPU-hours).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import explained

from forensics.detect.data import AUX_METRICS, LOSS_METRICS
from forensics.detect.recovery import RESTARTS
from forensics.report.fmt import sentence
from forensics.store import conflicts
from forensics.store.db import Store

NUM = r"([-+]?(?:\d[\d,]*\.?\d*(?:e[-+]?\d+)?|NaN|[+-]?Inf))"
ABS_PATH = re.compile(r"(?<![\w.])(?:/(?:work|home|tmp|root|Users|mnt|var)/|[A-Z]:\\)")
LINK = re.compile(r"\]\(([^)]+)\)")
BAD_WORDING = [
    (re.compile(r"\bin 0 steps\b"), "'in 0 steps'"),
    # a clause the template opened without its first words: "(peak ( the LR first ...)"
    (re.compile(r"\*\* \( "), "a space after an opening parenthesis"),
    (re.compile(r"-0\.0+\b"), "negative zero"),
    (re.compile(r"\d e-\d+ GPU-hours|\de-\d+ GPU-hours"), "exponent in GPU-hours"),
    (
        re.compile(r"×nan|NaN its pre-spike median|\(×[\d.]+ its pre-spike median[^)]*\) .*NaN"),
        "ratio of a non-finite value",
    ),  # fmt: skip
]


def number(text: str) -> float:
    t = text.replace(",", "")
    if t == "NaN":
        return math.nan
    if t.endswith("Inf"):
        return -math.inf if t.startswith("-") else math.inf
    return float(t)


def close(quoted: float, stored: float | None) -> bool:
    """A 4-significant-digit rendering of `stored` reads back as `quoted`."""
    if stored is None:
        return False
    if math.isnan(quoted) or math.isinf(quoted):
        return not math.isfinite(stored)
    return math.isclose(quoted, stored, rel_tol=2e-3, abs_tol=1e-9)


def check_report(folder: Path, store: Store, run_id: str) -> list[str]:
    problems: list[str] = []
    incidents = {
        r["incident_id"]: r
        for r in store.query("SELECT * FROM incidents WHERE run_id = ?", [run_id]).to_dicts()
    }
    findings = store.query(
        "SELECT incident_id, cause, replay FROM findings WHERE run_id = ?", [run_id]
    ).to_dicts()
    for doc in [folder / "README.md", *sorted((folder / "postmortems").glob("spike-*.md"))]:
        text = doc.read_text(encoding="utf-8")
        problems += [f"{doc.name}: {p}" for p in _paths(text, doc, folder)]
        problems += [f"{doc.name}: {why}" for rx, why in BAD_WORDING if rx.search(text)]
    problems += _summary(folder / "README.md", incidents)
    problems += _totals(folder / "README.md", incidents, store, run_id)
    problems += _coverage(folder / "README.md", store, run_id)
    problems += _rollbacks(folder / "README.md", store, run_id)
    for n, row in sorted(incidents.items()):
        problems += [f"incident {n}: {p}" for p in off_trend_problems(row, store, run_id)]
    problems += _screened(folder / "README.md", store, run_id)
    for pm in sorted((folder / "postmortems").glob("spike-*.md")):
        n = int(re.search(r"spike-(\d+)", pm.name).group(1))  # type: ignore[union-attr]
        row = incidents.get(n)
        if row is None:
            problems.append(f"{pm.name}: no incident {n} in the store")
            continue
        refuted = {
            f["cause"] for f in findings if f["incident_id"] == n and f["replay"] == "refuted"
        }
        text = pm.read_text()
        problems += [f"{pm.name}: {p}" for p in _postmortem(text, row, refuted, store, run_id)]
        problems += [f"{pm.name}: {p}" for p in explained.check(text, row, store, run_id)]
    return problems


def _screened(readme: Path, store: Store, run_id: str) -> list[str]:
    """An unscreened stretch is stated, and no incident is then not called clean."""
    rows = explained.rows(store, "screen_coverage", run_id)
    if not rows:
        return []
    cov, text = rows[0], readme.read_text()
    unjudged = cov["screened_from_step"] is None or bool(cov["unscreened_points"])
    if not unjudged:
        return []
    out = []
    if cov["note"] not in text:
        out.append("README.md: the screen_coverage note is not stated")
    if "No incident was detected in this run" in text:
        out.append("README.md: called clean although part of the log was not screened")
    return out


def _paths(text: str, doc: Path, folder: Path) -> list[str]:
    out = [f"absolute path {m.group(0)!r}" for m in ABS_PATH.finditer(text)]
    for link in LINK.findall(text):
        if link.startswith(("http://", "https://", "#")):
            continue
        target = (doc.parent / link).resolve()
        if not target.is_relative_to(folder.resolve()):
            out.append(f"link {link!r} leaves the report folder")
    return out


def _summary(readme: Path, incidents: dict[int, dict[str, Any]]) -> list[str]:
    out = []
    rows = re.findall(r"^\| (\d+) \| (\w+) \| (\d+) \|(.*)$", readme.read_text(), re.M)
    for n, severity, onset, rest in rows:
        row = incidents.get(int(n))
        if row is None:
            out.append(f"README.md: incident {n} is not in the store")
            continue
        if int(onset) != row["onset_step"]:
            out.append(f"README.md: #{n} onset {onset} != stored {row['onset_step']}")
        if severity != row["severity"]:
            out.append(f"README.md: #{n} severity {severity} != stored {row['severity']}")
        cells = [c.strip() for c in rest.split("|")]
        lost = cells[-3] if len(cells) >= 3 else ""
        if lost and lost != "n/a" and number(lost) != (row["steps_lost"] or 0):
            out.append(f"README.md: #{n} steps lost {lost} != stored {row['steps_lost']}")
    if len(rows) != len(incidents):
        out.append(f"README.md: {len(rows)} incident rows, the store has {len(incidents)}")
    return out


def _logged(store: Store, run_id: str, metric: str, step: int) -> float | None:
    rows = store.con.execute(
        "SELECT value FROM metrics WHERE run_id = ? AND metric = ? AND step = ?",
        [run_id, metric, step],
    ).fetchall()
    return None if not rows or rows[0][0] is None else float(rows[0][0])


def _postmortem(
    text: str, row: dict[str, Any], refuted: set[str], store: Store, run_id: str
) -> list[str]:
    out: list[str] = []
    body = text.split("<details>")[0]
    m = re.search(rf"(?:to|`[^`]+` peaked at) {NUM} at step (\d+)", body)
    if m and (
        int(m.group(2)) != row["peak_step"] or not close(number(m.group(1)), row["peak_value"])
    ):
        out.append(f"peak quoted ({m.group(2)}, {m.group(1)}) != stored "
                   f"({row['peak_step']}, {row['peak_value']})")  # fmt: skip
    if m and not close(number(m.group(1)), _logged(store, run_id, row["metric"], int(m.group(2)))):
        out.append(f"peak {m.group(1)} is not the logged {row['metric']} at step {m.group(2)}")
    m = re.search(rf"its last logged value, at step (\d+), is {NUM}", body)
    if m and not close(number(m.group(2)), _logged(store, run_id, row["metric"], int(m.group(1)))):
        out.append(f"last logged value {m.group(2)} is not the logged {row['metric']} at step "
                   f"{m.group(1)}")  # fmt: skip
    m = re.search(rf"gradient norm peaked at {NUM} at step (\d+)", body)
    if m:
        step, value = int(m.group(2)), number(m.group(1))
        if step != row.get("grad_norm_peak_step") or not close(value, row["grad_norm_peak"]):
            out.append(f"grad-norm peak quoted ({step}, {m.group(1)}) != stored "
                       f"({row.get('grad_norm_peak_step')}, {row['grad_norm_peak']})")  # fmt: skip
        if not close(value, _logged(store, run_id, "grad_norm", step)):
            out.append(f"grad-norm peak {m.group(1)} is not the logged grad_norm at step {step}")
    back = re.findall(r"back on its pre-spike trend (?:for good )?at step (\d+)", body)
    back += re.findall(r"back for good at step (\d+)", body)
    rec = row.get("recovery_step")
    if row["type"] != "recoverable" and back:
        out.append(f"a {row['type']} incident is said to be back at step {back[0]}")
    if any(int(b) != rec for b in back):
        out.append(f"recovery quoted at {back} != stored recovery_step {rec}")
    after_peak = re.findall(r"(\d+) steps? after the last peak", body)
    stored = (json.loads(row["features"]) if row.get("features") else {}).get("recovery_steps")
    if any(stored is None or int(a) != stored for a in after_peak):
        out.append(f"steps after the last peak quoted {after_peak} != stored {stored}")
    logged = set(store.con.execute(
        "SELECT step, detail FROM events WHERE run_id = ?", [run_id]
    ).fetchall())  # fmt: skip
    for step, line in re.findall(r"The log reports at step (\d+): `([^`]*)`", body):
        if (int(step), line) not in logged:
            out.append(f"a logged report quoted at step {step} is not in table events: {line}")
    returns = {b for _, b in stretches(row)}
    for b in re.findall(r"\bback at step (\d+)", body):
        if int(b) not in returns:
            out.append(f"a return quoted at step {b} is not a stored one ({returns})")
    lost = re.search(r"^\| steps lost \| ([\d,]+) \|", body, re.M)
    if lost and number(lost.group(1)) != row["steps_lost"]:
        out.append(f"steps lost {lost.group(1)} != stored {row['steps_lost']}")
    advice = (
        body.split("## Recovery action")[1].split("##")[0] if "## Recovery action" in body else ""
    )
    ck = re.search(r"checkpoint at step (\d+)", advice)
    if row["type"] == "recoverable" and re.search(r"\bRestart\b", advice):
        out.append("a recoverable incident is told to restart")
    if ck and int(ck.group(1)) != row["restart_checkpoint_step"]:
        out.append(f"advice restarts from {ck.group(1)}, stored checkpoint "
                   f"{row['restart_checkpoint_step']}")  # fmt: skip
    if row["cause"] in refuted:
        out.append(f"root cause {row['cause']} was refuted by replay")
    out += _tail(body, row)
    out += _excerpt(body, store, run_id)
    return out


def _tail(body: str, row: dict[str, Any]) -> list[str]:
    """A stored noise_tail finding (how routine the jump is for the run) must be stated in
    the body beside the cause, not only in the appendix: the page must not say "batch-driven"
    up front and "routine for this run" only at the bottom."""
    evidence = row["evidence"]
    items = json.loads(evidence) if isinstance(evidence, str) else evidence or []
    tail = next((e for e in items if e.get("key") == "noise_tail"), None)
    if tail is None:
        return []
    if sentence(tail["note"]) not in body:  # as the template renders it
        return ["noise_tail finding is only in the appendix, not in the body"]
    return []


def _excerpt(body: str, store: Store, run_id: str) -> list[str]:
    """Every cell of the log excerpt is the logged value at that step."""
    head = re.search(r"^\| step \| \|(.*)\|\s*$", body, re.M)
    if not head:
        return []
    cols = [c.strip().strip("`") for c in head.group(1).split("|")]
    out = []
    for line in re.findall(r"^\| (\d+) \| [a-z, ]* \|(.*)\|\s*$", body, re.M):
        step, cells = int(line[0]), [c.strip() for c in line[1].split("|")]
        for col, cell in zip(cols, cells, strict=False):
            if cell in ("", "n/a"):
                continue
            if not close(number(cell), _logged(store, run_id, col, step)):
                out.append(f"excerpt {col} at step {step} = {cell}, not the logged value")
    return out


COVERAGE_ROW = re.compile(
    r"^\| `([^`]+)`(?: \((\d+) layers?\))? \| ([\d,]+) \| (-?\d+)–(-?\d+) \|", re.M
)


def _coverage(readme: Path, store: Store, run_id: str) -> list[str]:
    """Each row of the metrics-coverage table is a stored metric with its count and span; a
    `<name>/<layer>` row folds exactly the stored `<name>/<int>` metrics (a logger's own
    slashed name is no layer)."""
    stored = {
        m: (n, a, b)
        for m, n, a, b in store.con.execute(
            "SELECT metric, count(*), min(step), max(step) FROM metrics WHERE run_id = ? "
            "GROUP BY metric",
            [run_id],
        ).fetchall()
    }
    out = []
    for name, layers, n, first, last in COVERAGE_ROW.findall(readme.read_text()):
        if name.endswith("/<layer>"):
            family = name.removesuffix("/<layer>")
            members = [m for m in stored if m.startswith(family + "/")]
            bad = [m for m in members if not m.split("/", 1)[1].isdigit()]
            if bad or not members or int(layers or 0) != len(members):
                out.append(f"README.md: coverage row {name} ({layers} layers) folds {members}")
            continue
        if name not in stored:
            out.append(f"README.md: coverage row {name} is not a stored metric")
        elif (number(n), int(first), int(last)) != stored[name]:
            out.append(f"README.md: coverage row {name} {n} {first}-{last} != {stored[name]}")
    return out


def _totals(
    readme: Path, incidents: dict[int, dict[str, Any]], store: Store, run_id: str
) -> list[str]:
    """The run's steps lost counts each step once: the union of the incidents' charged
    spans (stretches, an open one to the last logged step; everything after a restart
    checkpoint), recomputed here from the incident rows, is the stored `run_cost` total and
    the one the README's header and Totals table print."""
    cost = explained.rows(store, "run_cost", run_id)
    if not incidents or not cost or cost[0]["steps_lost"] is None:
        return []
    # the run's end as far as its logs know: a Megatron run that went NaN stops printing
    # its loss but logs the loss scale and skipped iterations to its last iteration
    read = [*LOSS_METRICS, *AUX_METRICS]
    marks = ", ".join("?" * len(read))
    last = store.con.execute(
        f"SELECT max(step) FROM metrics WHERE run_id = ? AND metric IN ({marks})", [run_id, *read]
    ).fetchone()[0]
    # a report the log printed after its last metric line (detectron2's NaN at iteration=N)
    # is still the run: the run ends there as far as its logs know
    (said,) = store.con.execute(
        "SELECT max(step) FROM events WHERE run_id = ?", [run_id]
    ).fetchone()  # fmt: skip
    last = max(last, said) if said is not None else last
    covered: set[int] = set()
    for row in incidents.values():
        restart = row.get("restart_checkpoint_step")
        if row.get("recovery_step") is None and restart is not None and row["recovery"] in RESTARTS:
            spans = [(int(restart), last)]
        else:
            spans = [(a, last if b is None else b) for a, b in stretches(row)]
        covered.update(s for a, b in spans for s in range(a, b))
    out = []
    stored = cost[0]["steps_lost"]
    if stored != len(covered):
        out.append(f"run_cost steps lost {stored} != the union of the incidents' {len(covered)}")
    text = readme.read_text()
    header = re.search(r"^Compute lost: ([\d,]+) steps?,", text, re.M)
    table = re.search(r"^\| steps lost \| ([\d,]+) \|", text, re.M)
    for name, m in (("header", header), ("Totals", table)):
        if m is None or number(m.group(1)) != stored:
            got = m.group(1) if m else "nothing"
            out.append(f"README.md: {name} steps lost {got} != stored {stored}")
    return out


def _rollbacks(readme: Path, store: Store, run_id: str) -> list[str]:
    """Every abandoned attempt the store holds (the loss values a resume wrote over, in
    `conflicts`) has its `rollbacks` row, whose step range and non-finite count are those
    values', and the README's Rollbacks table prints that row."""
    attempts = store.con.execute(
        "SELECT source, coalesce(attempt, 0), min(step), max(step), count(*) FILTER "
        "(NOT isfinite(value)) FROM conflicts WHERE run_id = ? AND metric IN ('loss', "
        "'val_loss') AND rule IN (?, ?) GROUP BY ALL ORDER BY 3",
        [run_id, conflicts.REWOUND, conflicts.RESUMED],
    ).fetchall()
    rows = explained.rows(store, "rollbacks", run_id) if attempts else []
    stored = {(r["source"], r["attempt"]): r for r in rows}
    text = readme.read_text()
    out = []
    for source, attempt, lo, hi, bad in attempts:
        r = stored.get((source, attempt))
        if r is None:
            out.append(f"no rollbacks row for attempt {attempt} of {source}")
            continue
        (prev,) = store.con.execute(
            "SELECT max(step) FROM metrics WHERE run_id = ? AND metric IN ('loss', 'val_loss') "
            "AND step < ?",
            [run_id, lo],
        ).fetchall()[0]
        start = lo if prev is None else prev + 1
        want = (lo, hi, start, hi - start + 1, bad)
        got = tuple(r[k] for k in ("resumed_step", "abandoned_step", "again_from_step",
                                   "steps_again", "nonfinite_points"))  # fmt: skip
        if got != want:
            out.append(f"rollbacks row {got} != the conflicts' {want}")
        line = f"| {lo} | {r['steps_again']:,} ({start}–{hi}) |"
        if line not in text:
            out.append(f"README.md: no Rollbacks row starting {line!r}")
    return out


def stretches(row: dict[str, Any]) -> list[tuple[int, int | None]]:
    """The stretches an incident is charged for: its peaks' stored `from`/`back`, else (a
    store without them) onset to recovery."""
    peaks = row.get("peaks")
    peaks = json.loads(peaks) if isinstance(peaks, str) else peaks or []
    pairs = sorted({(int(p["from"]), p.get("back")) for p in peaks if p.get("from") is not None},
                   key=lambda ab: ab[0])  # fmt: skip
    return pairs or [(int(row["onset_step"]), row.get("recovery_step"))]


def off_trend_problems(row: dict[str, Any], store: Store, run_id: str) -> list[str]:
    """Steps lost vs the logged loss (module doc): no charged step on the trend, the total."""
    features = json.loads(row["features"]) if row.get("features") else {}
    pre, lost = row.get("pre_value"), row.get("steps_lost")
    if features.get("origin") != "loss" or not pre or pre <= 0 or lost is None:
        return []
    pairs = stretches(row)
    out = []
    if row["type"] == "recoverable" and lost != sum(b - a for a, b in pairs if b is not None):
        out.append(f"steps lost {lost} != the total of its stretches off the trend {pairs}")
    ev = {e["key"]: e["value"] for e in json.loads(row["evidence"] or "[]")}
    tol = float(ev.get("tolerance") or 0.03)
    slope = float(ev.get("trend_slope") or 0.0)  # absent: a flat trend at pre_value
    onset = int(row["onset_step"])
    for a, b in pairs:
        if b is None:
            continue  # the open stretch of a lingering/divergent incident: to the end
        for step in _back_inside(store, run_id, row["metric"], a, b):
            trend = pre * math.exp(slope * (math.log1p(step[0]) - math.log1p(onset)))
            if step[1] <= trend * (1 + tol) and step[2] <= trend * (1 + tol):
                out.append(
                    f"loss {step[1]:.4g} at step {step[0]} (median of the next 9 {step[2]:.4g}) "
                    f"is back within {tol:.1%} of its trend {trend:.4g}, inside the stretch "
                    f"{a}-{b} charged as steps lost"
                )
                break
    return out


def _back_inside(
    store: Store, run_id: str, metric: str, a: int, b: int
) -> list[tuple[int, float, float]]:
    """(step, loss, median of the 9 logged points from it) for the logged steps in [a, b)."""
    sql = (
        "SELECT step, value FROM metrics WHERE run_id = ? AND metric = ? AND step >= ? "
        "AND step < ? AND value IS NOT NULL AND isfinite(value) ORDER BY step LIMIT ?"
    )
    rows = store.con.execute(sql, [run_id, metric, a, b, 10_000_000]).fetchall()
    rows += store.con.execute(sql, [run_id, metric, b, 2**62, 8]).fetchall()
    out = []
    for i, (step, value) in enumerate(rows):
        if step >= b:
            break
        nxt = sorted(v for _, v in rows[i : i + 9])
        out.append((int(step), float(value), float(nxt[len(nxt) // 2])))
    return out
