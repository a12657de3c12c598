"""Consistency of the Classification and Evidence lines that render detect's explanation.

Read back from a post-mortem: the competing-hypotheses table, the "What to log next" line
and the cross-run lines; each is compared with the `hypotheses`, `findings`/`replays`,
`log_next` and `recurrences` rows of the store. The expected status is worked out here
from the raw rows (independently of forensics/report/classify.py), so a tampered page or
a renderer that drifts from docs/definitions.md both fail.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from forensics.report.knowledge import Knowledge
from forensics.report.locate import templates_dir
from forensics.store.db import Store

LOG_STATUS = {
    "supported": "supported by the log",
    "against": "ruled out by the log",
    "not_evaluable": "not evaluated",
}
ROW = re.compile(r"^\| (.+?) \| (confirmed by replay|refuted by replay|supported by the log|"
                 r"ruled out by the log|not evaluated|[a-z ]+) \| (.*) \|$", re.M)  # fmt: skip


@cache
def kb() -> Knowledge:
    path = templates_dir() / "lessons.yaml"
    return Knowledge.from_text(path.read_text(encoding="utf-8"), str(path))


def rows(store: Store, table: str, run_id: str, n: int | None = None) -> list[dict[str, Any]]:
    """The run's (incident's) rows of a table; none when the database predates it."""
    have = store.con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]
    ).fetchall()[0][0]
    if not have:
        return []
    sql, args = f"SELECT * FROM {table} WHERE run_id = ?", [run_id]
    if n is not None:
        sql, args = sql + " AND incident_id = ?", [run_id, n]
    return store.query(sql, args).to_dicts()


def _replay(store: Store, run_id: str, n: int, cause: str) -> str | None:
    key = kb().cause(cause).key
    applied = {
        f["replay"] for f in rows(store, "findings", run_id, n) if kb().cause(f["cause"]).key == key
    }
    for v in ("confirmed", "refuted"):
        if v in applied:
            return v
    probes = {
        r["verdict"]
        for r in rows(store, "replays", run_id, n)
        if kb().cause(r["hypothesis"]).key == key
    }
    if ("confirmed" in probes) != ("refuted" in probes) and not applied - {None, "not_run"}:
        return "confirmed" if "confirmed" in probes else "refuted"
    return None


def expected(store: Store, run_id: str, row: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """Title -> (status, needs) of every competing cause, from the stored rows."""
    n, own = row["incident_id"], kb().cause(row["cause"]).key
    out: dict[str, tuple[str, list[str]]] = {}
    for h in sorted(rows(store, "hypotheses", run_id, n), key=lambda h: h["rank"]):
        entry = kb().cause(h["cause"])
        if entry.key == own or entry.title in out:
            continue
        verdict = _replay(store, run_id, n, h["cause"])
        needs = json.loads(h["needs"] or "[]")
        status = f"{verdict} by replay" if verdict else LOG_STATUS[h["status"]]
        out[entry.title] = (status, needs if status == "not evaluated" else [])
    for r in rows(store, "replays", run_id, n):  # causes replay tested that detect did not weigh
        entry = kb().cause(r["hypothesis"])
        verdict = _replay(store, run_id, n, r["hypothesis"])
        if (
            entry.key != own
            and entry.title not in out
            and verdict
            and r["hypothesis"] != ("reproduction")
        ):
            out[entry.title] = (f"{verdict} by replay", [])
    return out


def check(text: str, row: dict[str, Any], store: Store, run_id: str) -> list[str]:
    body = text.split("<details>")[0]
    return (
        _hypotheses(body, row, store, run_id)
        + _log_next(body, row, store, run_id)
        + (_cross_run(body, row, store, run_id))
    )


def _hypotheses(body: str, row: dict[str, Any], store: Store, run_id: str) -> list[str]:
    if "| competing hypothesis |" not in body:
        return ["no competing-hypotheses table"]
    table = body.split("| competing hypothesis |")[1].split("\n\n")[0]
    shown = {m.group(1): (m.group(2), m.group(3)) for m in ROW.finditer(table)}
    shown.pop("(none)", None)
    want = expected(store, run_id, row)
    out = []
    for title, (status, why) in shown.items():
        if title not in want:
            out.append(f"hypothesis {title!r} is not a stored competing hypothesis")
            continue
        if status != want[title][0]:
            out.append(f"hypothesis {title!r} shown {status!r}, stored {want[title][0]!r}")
        out += [f"hypothesis {title!r}: needs {n!r} not named" for n in want[title][1]
                if _named(n) not in why and not _unread_named(n, why)]  # fmt: skip
    out += [f"stored hypothesis {t!r} has no row" for t in want if t not in shown]
    return out


def _log_next(body: str, row: dict[str, Any], store: Store, run_id: str) -> list[str]:
    """The line names the stored rows in rank order, leaving out exactly those whose every
    separated cause replay has since confirmed or refuted (worked out here from the rows)."""
    n = row["incident_id"]
    stored = sorted(rows(store, "log_next", run_id, n), key=lambda r: r["rank"])
    out = []
    for r in stored:
        causes = json.loads(r["separates"] or "[]")
        decided = bool(causes) and all(_replay(store, run_id, n, c) for c in causes)
        if bool(r.get("settled_by_replay")) != decided:
            out.append(f"log next {r['metric']}: settled {r.get('settled_by_replay')}, "
                       f"but replay decided {causes}: {decided}")  # fmt: skip
    want = [r["metric"] for r in stored if not r.get("settled_by_replay")][:2]
    line = re.search(r"^\*\*What to log next:\*\* (.*)$", body, re.M)
    shown = re.findall(r"`([^`]+)`: ", line.group(1)) if line else []
    if shown != want:
        out.append(f"log next shows {shown}, stored log_next {want}")
    return out


def _cross_run(body: str, row: dict[str, Any], store: Store, run_id: str) -> list[str]:
    groups = {r["peak_step"]: r for r in rows(store, "recurrences", run_id)}
    out = []
    for step, k in re.findall(r"^- step (\d+): (?:the same )?(\d+) (?:other )?runs?\b", body, re.M):
        g = groups.get(int(step))
        if g is None:
            out.append(f"cross-run line at step {step}: no stored recurrence of this run there")
        elif int(k) != g["n_runs"] - 1:
            out.append(f"cross-run line at step {step}: {k} other runs, stored {g['n_runs'] - 1}")
    return out


def _unread_named(need: str, why: str) -> bool:
    """A metric the run logs but detection could not read (NaN/Inf where the loss is
    finite) is named as logged-but-unread, by its metric."""
    metric = need.partition("_every_step")[0]
    return "not read:" in why and f"`{metric}`" in why.split("not read:", 1)[1]


def _named(need: str) -> str:
    """How a page names a rule input: `grad_norm_every_step` is `grad_norm` at every step."""
    metric, every, _ = need.partition("_every_step")
    return f"`{metric}` at every step" if every else f"`{need}`"
