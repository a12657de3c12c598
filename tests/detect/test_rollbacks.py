"""Rollbacks: the attempt a resumed run went back from is kept, detected and reported.

A run resumed from a checkpoint logs the steps after the checkpoint again. The earlier
values are usually why someone rolled the run back (tr8-104B: loss 6.4 -> 11.4, rolled
back to 6210; GLM-130B: restarts with skipped ranges). They used to be dropped at ingest;
now they stay in `conflicts`, each attempt is detected on its own trajectory (`rollbacks`),
and the README says what the attempt held and what the run did at that step.

The logs are written by TensorBoard's own SummaryWriter (a resumed run opens a new writer
on the same log dir: two event files that both hold the steps after the checkpoint) and as
llm.c text logs split over two files.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

import pytest

from forensics.analyze import AnalyzeOptions, analyze
from forensics.detect import detect
from forensics.ingest import ingest
from forensics.store import conflicts, open_store

REPORT_TESTS = Path(__file__).resolve().parents[1] / "report"
if str(REPORT_TESTS) not in sys.path:
    sys.path.insert(0, str(REPORT_TESTS))

from consistency import check_report  # noqa: E402

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")

tensorboard = pytest.importorskip("torch.utils.tensorboard")

RESUME, ABANDONED, END = 1001, 1200, 3000


def _loss(rng: random.Random, step: int) -> float:
    return 6 * step**-0.15 * math.exp(rng.gauss(0, 0.01))


def _diverged(step: int, value: float) -> float:
    """The abandoned attempt: the loss climbs from 1150 and is NaN from 1180."""
    if step < 1150:
        return value
    return value * (1 + (step - 1149) * 0.3) if step < 1180 else float("nan")


def _spiked(step: int, value: float) -> float:
    """A one-step spike at 1150: the batch of that step (in both attempts)."""
    return value * 2.0 if step == 1150 else value


def _write(w, rng: random.Random, steps: range, shape) -> None:  # type: ignore[no-untyped-def]
    """Loss and grad norm; a batch that lifts the loss lifts its gradient with it."""
    for s in steps:
        plain = _loss(rng, s)
        loss = shape(s, plain)
        lift = (loss / plain) ** 2 if math.isfinite(loss) else 1.0
        w.add_scalar("train/loss", loss, s)
        w.add_scalar("train/grad_norm", 0.5 * lift * math.exp(rng.gauss(0, 0.05)), s)


def _write_tb(folder: Path, first_attempt, second_attempt) -> Path:  # type: ignore[no-untyped-def]
    rng = random.Random(1)
    w = tensorboard.SummaryWriter(str(folder))
    _write(w, rng, range(1, ABANDONED + 1), first_attempt)
    w.close()
    time.sleep(1.1)  # a resumed process: its event file is named by a later time
    w = tensorboard.SummaryWriter(str(folder))
    _write(w, rng, range(RESUME, END + 1), second_attempt)
    w.close()
    return folder


def _keep(_step: int, value: float) -> float:
    return value


def test_abandoned_attempt_is_kept_and_detected(tmp_path: Path) -> None:
    logs = _write_tb(tmp_path / "tb", _diverged, _keep)
    out = tmp_path / "out"
    analyze(logs, out, options=None)
    with open_store(out / "forensics.duckdb") as store:
        run = store.run_names()[0]
        loss = store.metrics_long(run, ["loss"])
        assert loss["step"].is_unique().all() and loss.height == END
        assert not loss["value"].is_nan().any()  # the run's trajectory is the later values
        kept = store.query(
            "SELECT count(*) AS n, count(*) FILTER (isnan(value)) AS nan, min(step) AS lo, "
            "max(step) AS hi FROM conflicts WHERE metric = 'loss' AND rule = ?",
            [conflicts.REWOUND],
        ).to_dicts()[0]
        assert kept == {"n": 200, "nan": 21, "lo": RESUME, "hi": ABANDONED}  # NaN kept
        (row,) = store.query("SELECT * FROM rollbacks").to_dicts()
        assert (row["resumed_step"], row["abandoned_step"], row["steps_again"]) == (
            RESUME,
            ABANDONED,
            200,
        )
        assert row["incident_type"] == "divergent" and row["first_nonfinite_step"] == 1180
        assert 1140 <= row["onset_step"] <= 1152 and row["run_incident_id"] is None
        at_peak = loss.filter(loss["step"] == row["peak_step"])["value"][0]
        assert row["run_value"] == pytest.approx(at_peak)
        assert check_report(out, store, run) == []
    readme = (out / "README.md").read_text()
    assert "the log goes back 1 time" in readme
    assert "the abandoned attempt holds an incident" in readme
    assert "| 1001 | 200 (1001–1200) | divergent: onset" in readme
    assert "loss non-finite from step 1180 (21 of 200 points)" in readme
    assert "no incident: the rollback got past it" in readme
    assert "Not counted above: 200 steps were trained twice" in readme
    doc = json.loads((out / "incidents.json").read_text())
    assert doc["rollbacks"][0]["steps_again"] == 200
    overview = (out / "figures" / "run-overview.html").read_text()
    assert "abandoned attempt (steps 1001-1200), NaN\\u002fInf from step 1180" in overview


def test_reingest_keeps_the_attempt_once(tmp_path: Path) -> None:
    logs = _write_tb(tmp_path / "tb", _diverged, _keep)
    db = tmp_path / "f.duckdb"
    for _ in range(2):
        with open_store(db) as store:
            ingest(store, [logs], run="r")
            detect(store, "r")
            n = store.con.execute("SELECT count(*) FROM conflicts").fetchall()[0][0]
            assert n == 2 * 200  # loss and grad_norm of steps 1001-1200, once
            assert store.con.execute("SELECT count(*) FROM rollbacks").fetchall()[0][0] == 1


def test_spike_that_comes_again_after_the_rollback(tmp_path: Path) -> None:
    """The same one-step spike in the abandoned attempt and after the resume: the batch met
    twice. rollback_recurrence raises batch-driven and rules out a transient fault."""
    logs = _write_tb(tmp_path / "tb", _spiked, _spiked)
    out = tmp_path / "out"
    analyze(logs, out, options=AnalyzeOptions(min_severity="minor"))
    with open_store(out / "forensics.duckdb") as store:
        (row,) = store.query("SELECT * FROM rollbacks").to_dicts()
        inc = store.query("SELECT incident_id, peak_step, features FROM incidents").to_dicts()
        assert row["peak_step"] == 1150 and row["incident_type"] == "recoverable"
        assert [i["peak_step"] for i in inc] == [1150]
        assert row["run_incident_id"] == inc[0]["incident_id"]
        assert json.loads(inc[0]["features"])["rollback_recurrence"] == 1
        assert check_report(out, store, store.run_names()[0]) == []
    readme = (out / "README.md").read_text()
    assert "spiked again: incident 1 holds step 1150" in readme
    page = next((out / "postmortems").glob("spike-01*.md")).read_text()
    assert "It came in the attempt the run went back from too:" in page
    assert "that attempt logged steps 1001–1200" in page


def test_rollback_recurrence_feature(tmp_path: Path) -> None:
    """Missing where no attempt logged the step; 0 where one did and passed it cleanly."""
    logs = _write_tb(tmp_path / "tb", _keep, _spiked)  # the spike only after the resume
    with open_store(tmp_path / "f.duckdb") as store:
        ingest(store, [logs], run="r")
        (det,) = detect(store, "r")
    (inc,) = det.incidents
    assert inc.peak_step == 1150 and inc.features["rollback_recurrence"] == 0


def _llmc(path: Path, steps: range, shape) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f"step {s:5d}/{END} | train loss {shape(s, _loss(rng, s)):.6f} | norm 0.5000 | "
        f"lr 3.00e-04 | (100.00 ms | 50000 tok/s)"
        for s in steps
    ]
    path.write_text("\n".join(lines) + "\n")


def test_attempt_in_an_earlier_file(tmp_path: Path) -> None:
    """A resume that writes a new log file: the earlier file's steps after the resume point
    lose to the later file (rule RESUMED), and are that file's abandoned attempt."""
    _llmc(tmp_path / "run" / "part1.log", range(1, ABANDONED + 1), _diverged)
    _llmc(tmp_path / "run" / "part2.log", range(RESUME, END + 1), _keep)
    with open_store(tmp_path / "f.duckdb") as store:
        ingest(store, [tmp_path / "run"])
        (run,) = store.run_names()
        detect(store, run)
        (row,) = store.query("SELECT * FROM rollbacks").to_dicts()
    assert row["source"].endswith("part1.log")
    assert (row["resumed_step"], row["steps_again"], row["nonfinite_points"]) == (RESUME, 200, 21)
    assert row["incident_type"] == "divergent"


def test_a_log_without_rewinds_has_no_rollbacks(tmp_path: Path) -> None:
    _llmc(tmp_path / "main.log", range(1, END + 1), _keep)
    out = tmp_path / "out"
    analyze(tmp_path / "main.log", out)
    with open_store(out / "forensics.duckdb") as store:
        assert store.con.execute("SELECT count(*) FROM rollbacks").fetchall()[0][0] == 0
    assert "Rollbacks" not in (out / "README.md").read_text()


def test_a_step_logged_again_at_once_is_no_attempt(tmp_path: Path) -> None:
    """torchtitan prints each step once per rank, a progress bar redraws its line: the
    repeats are kept in `conflicts` (rule REPEATED), and no rollback is made of them."""
    one = tmp_path / "one.log"
    _llmc(one, range(1, END + 1), _keep)
    lines = one.read_text().splitlines()
    twice = tmp_path / "ranks.log"
    twice.write_text("\n".join(x for line in lines for x in (line, line)) + "\n")
    with open_store(tmp_path / "f.duckdb") as store:
        (summary,) = ingest(store, [twice], run="r")
        detect(store, "r")
        rules = store.con.execute("SELECT rule, count(*) FROM conflicts GROUP BY 1").fetchall()
        assert store.con.execute("SELECT count(*) FROM rollbacks").fetchall()[0][0] == 0
        assert store.metrics_long("r", ["loss"]).height == END
    assert rules == [(conflicts.REPEATED, END * 4)]  # loss, norm, lr, tok/s
    (warning,) = [w for w in summary.sources[0].warnings if "again" in w]
    assert warning.startswith(f"{END * 4} (step, metric) rows logged again at once")


def _megatron(it: int, loss: float, gn: float) -> str:
    return (
        f" iteration {it:8d}/    3000 | consumed samples: {it * 4:12d} | elapsed time per "
        f"iteration (ms): 1354.9 | learning rate: 1.500E-04 | global batch size:     4 | "
        f"lm loss: {loss:.6E} | loss scale: 32768.0 | grad norm: {gn:.3f} | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def test_megatron_log_appended_after_a_restart(tmp_path: Path) -> None:
    """A Megatron job restarted from the checkpoint at 1000 into the same output file (SLURM
    `--open-mode=append`), logging every 10 iterations: the first step logged again is 1010,
    but steps 1001-1200 were all trained twice."""
    rng = random.Random(3)
    lines = []
    for it in range(10, ABANDONED + 10, 10):
        lift = 1 + (it - 1140) * 0.2 if it >= 1150 else 1.0
        lines.append(_megatron(it, _loss(rng, it) * lift, 20.0 if lift > 1 else 1.0))
    lines.append(" > loading checkpoint from /ckpt at iteration 1000")
    lines += [_megatron(it, _loss(rng, it), 1.0) for it in range(1010, END + 10, 10)]
    log = tmp_path / "train.out"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    analyze(log, out)
    with open_store(out / "forensics.duckdb") as store:
        (row,) = store.query("SELECT * FROM rollbacks").to_dicts()
        assert (row["resumed_step"], row["again_from_step"], row["steps_again"]) == (
            1010,
            1001,
            200,
        )
        assert row["incident_type"] == "divergent" and row["run_incident_id"] is None
        assert check_report(out, store, store.run_names()[0]) == []
    assert "| 1010 | 200 (1001–1200) | divergent: onset" in (out / "README.md").read_text()
