"""Spikes recurring across the runs of one store: the data at that step."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.detect.recurrence import RunSpikes, data_order, find, same_order, tokens_per_step
from forensics.store import open_store

MODDED = "KellerJordan__modded-nanogpt/records__track_1_short__"
AT_946 = [
    "2024-10-09_SOAP__5bdc3988-496c-4232-b4ef-53764cb81c92.txt",
    "2024-10-10_Muon__eb5659d0-fb6a-49e5-a311-f1f89412f726.txt",
    "2024-12-04_ValueEmbed__75a3af7b-f1a6-47dc-a989-d95e4419ff31.txt",
    "2024-12-04_ValueEmbed__51faed93-0804-418c-9057-0d94c3f94a9c.txt",
]
CLEAN = "2024-06-06_AdamW__f66d43d7-e449-4029-8adf-e8537bab49ea.log"


def _run(name: str, peaks: tuple[int, ...], tps: float | None = None, order=None) -> RunSpikes:  # type: ignore[no-untyped-def]
    return RunSpikes(name, peaks, 1, 10_000, 1.0, tps, order)


def test_same_step_across_runs_is_a_recurrence_and_other_steps_are_not() -> None:
    runs = [_run("a", (946, 3000)), _run("b", (947, 5000)), _run("c", (945,)), _run("d", (7000,))]
    (rec,) = find(runs)
    assert sorted(r for r, _ in rec.runs) == ["a", "b", "c"]
    assert rec.absent == ["d"] and rec.by_chance < 1e-3


def test_same_tokens_consumed_with_different_batch_sizes_is_a_recurrence() -> None:
    # run b reads twice as many tokens a step: its step 500 is run a's step 1000
    runs = [_run("a", (1000,), tps=4096.0), _run("b", (500,), tps=8192.0)]
    assert len(find(runs)) == 1
    assert find([_run("a", (1000,)), _run("b", (500,))]) == []  # unknown batch: steps only


def test_data_order_from_the_configs() -> None:
    cfg = {"data_path": "/d/fineweb", "seed": 1234, "global_batch_size": 512, "seq_length": 1024}
    assert data_order(cfg) == ("/d/fineweb", "1234", "512") and tokens_per_step(cfg) == 512 * 1024
    a, b = _run("a", (), order=data_order(cfg)), _run("b", (), order=data_order({**cfg, "seed": 7}))
    assert same_order(a, a) is True and same_order(a, b) is False
    assert same_order(a, _run("c", ())) is None and data_order({}) is None


@pytest.fixture(scope="module")
def fleet(real_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The four modded-nanogpt runs that spike at 946/947 and a clean one, one --db, via the CLI."""
    db = tmp_path_factory.mktemp("fleet") / "fleet.duckdb"
    runner = CliRunner()
    for name in [*AT_946, CLEAN]:
        res = runner.invoke(app, ["ingest", str(real_logs / (MODDED + name)), "--db", str(db)])
        assert res.exit_code == 0, res.output
    out = db.parent / "out"
    res = runner.invoke(app, ["compare", "--db", str(db), "--out", str(out), "--no-png"])
    assert res.exit_code == 0, res.output
    return db, res.output


def test_the_946_spike_is_attributed_to_the_data_across_runs(fleet) -> None:  # type: ignore[no-untyped-def]
    db, output = fleet
    with open_store(db, read_only=True) as store:
        recs = store.query("SELECT * FROM recurrences WHERE step BETWEEN 944 AND 948")
        incs = store.query(
            "SELECT run_id, cause, confidence, features FROM incidents "
            "WHERE list_contains(json_extract(peaks, '$[*].step')::BIGINT[], 946) "
            "OR list_contains(json_extract(peaks, '$[*].step')::BIGINT[], 947)"
        )
    # four runs spike there, but Muon's loss tracks SOAP's (0.03 of its step-to-step change
    # before the spike) and one ValueEmbed run the other's (0.05): two states met the batch
    assert recs.height == 4 and set(recs["n_runs"]) == {2}
    assert {r.split("_")[7] for r in recs["run_id"]} == {"SOAP", "Muon", "ValueEmbed"}
    repeats = {
        r.split("_")[7]: t.split("_")[7] for r, t in recs.select("run_id", "repeat_of").rows() if t
    }
    assert repeats == {"Muon": "SOAP", "ValueEmbed": "ValueEmbed"}
    assert recs["by_chance"][0] < 1e-2
    assert incs.height == 4 and set(incs["cause"]) == {"batch_driven"}
    assert min(incs["confidence"]) >= 0.9  # 0.7 alone, + the other state
    assert {json.loads(f)["cross_runs"] for f in incs["features"]} == {1.0}
    # labelled by the steps its runs peak at (946 and 947), never one step alone
    peaks = sorted(set(recs["peak_step"]))
    span = f"steps {peaks[0]}–{peaks[-1]}" if len(peaks) > 1 else f"step {peaks[0]}"
    assert "2 runs" in output and f"spike at {span}" in output and "the data at this step" in output
    assert "2 more runs spike there with a loss that tracked one of these" in output
    assert "AdamW" in output  # the clean run is listed, with no incident


def test_compare_writes_the_overlay_figure(fleet) -> None:  # type: ignore[no-untyped-def]
    db, _ = fleet
    html = (db.parent / "out").glob("recurrence-*.html")
    text = next(html).read_text()
    assert "Loss of 2 runs around step" in text and "2 more tracking them" in text
    assert "(no spike)" in text and "(tracks " in text
    # runs that lie on top of each other stay apart: each spiking run its own dash pattern
    dashes = re.findall(r'"dash":"(\w+)"', text)
    assert len(set(dashes) - {"dot"}) >= 3 and {"solid", "dash", "dashdot"} <= set(dashes)
    # it loads the plotly.min.js beside it (it embedded its own 4.8 MB copy before)
    assert 'src="plotly.min.js"' in text and len(text) < 100_000
    assert (db.parent / "out" / "plotly.min.js").stat().st_size > 1_000_000


def test_compare_on_an_empty_store_fails_clearly(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["compare", "--db", str(tmp_path / "none.duckdb")])
    assert res.exit_code != 0 and "error" in res.output.lower()


def test_analyzing_a_folder_of_runs_lists_the_recurrences_in_its_index(
    real_logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15 item 2, as part of analyzing several runs: the index (OUT/README.md) names
    the steps where runs spike together, with the runs and the overlay figure; the runs'
    figures and the overlay share one OUT/plotly.min.js."""
    from forensics.analyze import AnalyzeOptions, analyze
    from forensics.report import export

    monkeypatch.setattr(export, "find_chromium", lambda: (None, "no browser in this test"))
    folder = tmp_path / "runs"  # a folder of four runs (discovery follows no link out of it)
    folder.mkdir()
    for name in [*AT_946[:3], CLEAN]:
        shutil.copyfile(real_logs / (MODDED + name), folder / name)
    out = tmp_path / "out"
    result = analyze(folder, out, options=AnalyzeOptions(replay=False))
    index = (out / "README.md").read_text()
    section = index[index.index("## Spikes that recur across runs") :]
    row = next(ln for ln in section.splitlines() if ln.startswith("| 946"))
    label = row.split("|")[1].strip()  # the steps the linked runs peak at, as the row lists them
    listed = sorted({int(p) for p in re.findall(r"\]\([^)]*\) (\d+)", row)})
    assert label == (f"{listed[0]}–{listed[-1]}" if len(listed) > 1 else str(listed[0]))
    assert row.count("](") == 3 and "AdamW" not in row  # the three runs, not the clean one
    assert "the data at this step" in row and "1 run covering the step does not spike" in row
    assert "2 runs" in row and re.search(r"Muon[^|]*\]\([^)]*\) 947 \(tracks [^)]*SOAP", row)
    assert "figures/recurrence-1.html" in section
    with open_store(result.db) as store:
        (n,) = store.con.execute("SELECT count(*) FROM recurrences WHERE step = 946").fetchone()  # type: ignore[misc]
    assert n == 3
    assert [p.relative_to(out).as_posix() for p in out.rglob("plotly.min.js")] == ["plotly.min.js"]


def test_a_spike_over_the_level_the_loss_is_at_is_found_and_recurs(fleet) -> None:  # type: ignore[no-untyped-def]
    # SOAP's point at 3361 (4.168) stood 7.8 noise scales above its 21-point trend (3.476),
    # which sat above the falling loss, and 8.9 above the level the loss was at (3.385, the
    # median of the 3 points before): a spike. Before, it was a near-miss while Muon spiked
    # at the same step: no recurrence.
    # Muon's loss tracks SOAP's there (one state), so the two make no recurrence
    db, _ = fleet
    with open_store(db, read_only=True) as store:
        incs = store.query("SELECT run_id FROM incidents WHERE peak_step BETWEEN 3359 AND 3363")
        recs = store.query("SELECT run_id FROM recurrences WHERE step BETWEEN 3359 AND 3363")
    assert {r.split("_")[7] for r in incs["run_id"]} == {"SOAP", "Muon"} and recs.height == 0


def _two_loggers(root: Path) -> Path:
    """Lightning with a CSVLogger and a TensorBoardLogger: one fit written to version_0/
    (CSV) and version_1/ (events, float32), a spike at 304."""
    import math

    import polars as pl
    from torch.utils.tensorboard import SummaryWriter

    steps = list(range(4, 600, 5))
    loss = [2.0 + math.exp(-s / 150) + 0.01 * math.sin(s) for s in steps]
    loss[steps.index(304)] *= 1.8
    logs = root / "lightning_logs"
    (logs / "version_0").mkdir(parents=True)
    pl.DataFrame({"step": steps, "epoch": [0] * len(steps), "train_loss_step": loss}).write_csv(
        logs / "version_0" / "metrics.csv"
    )
    writer = SummaryWriter(str(logs / "version_1"))
    for s, v in zip(steps, loss, strict=True):
        writer.add_scalar("train_loss_step", v, s)
    writer.close()
    return logs


def test_one_run_logged_twice_is_no_recurrence(tmp_path: Path) -> None:
    # read as two runs, its spike at 304 "recurred in 2 runs", and each incident counted
    # the other as a run that spiked there too
    from forensics.detect import detect
    from forensics.ingest import ingest

    logs = _two_loggers(tmp_path)
    with open_store(tmp_path / "t.duckdb") as store:
        ingest(store, [logs / "version_0", logs / "version_1"])
        dets = detect(store)
        recs = store.query("SELECT * FROM recurrences")
    assert sorted(i.peak_step for d in dets for i in d.incidents) == [304, 304]
    assert recs.height == 0
    assert all(i.features.get("cross_runs") in (None, 0.0) for d in dets for i in d.incidents)


def test_the_folder_index_says_a_run_is_logged_twice(tmp_path: Path) -> None:
    from forensics.analyze import AnalyzeOptions, analyze

    out = tmp_path / "out"
    analyze(_two_loggers(tmp_path), out, options=AnalyzeOptions(replay=False, report=False))
    index = (out / "README.md").read_text()
    assert "| version_1 (the same loss as version_0: one run logged twice" in index
    assert "spike at step 304" not in index


def test_runs_come_from_the_store_in_name_order(tmp_path: Path) -> None:
    # DuckDB's hash aggregate hands its groups back in any order: CI once read version_1 as
    # the first of a run's two copies and version_0 as the copy
    import polars as pl

    from forensics.detect.recurrence import copies, run_spikes

    names = [f"run_{i:02d}" for i in range(40)]
    with open_store(tmp_path / "t.duckdb") as store:
        for n in names:
            store.upsert_run(n, n, "csv", {})
            store.insert_metrics(
                pl.DataFrame(
                    {"run_id": [n] * 5, "step": list(range(5)), "metric": ["loss"] * 5}
                    | {"value": [2.0, 1.9, 1.8, 1.7, 1.6], "wall_time": [None] * 5}
                    | {"raw_name": ["loss"] * 5, "source": [n] * 5}
                )
            )
        runs = run_spikes(store)
    assert [r.run_id for r in runs] == names
    assert copies(runs) == {n: "run_00" for n in names[1:]}


def _fleet_losses(steps: np.ndarray) -> dict[str, np.ndarray]:
    """Three runs reading one data order (a shared per-batch difficulty): `a`, `a2` (a
    repeated: the same curve, GPU-nondeterministic noise 0.03 of the batch's), and `b` (other
    weights: a curve that starts higher and crosses a's at step 1500). All spike at 1500."""
    rng = np.random.default_rng(7)
    batch = rng.normal(0, 0.1, len(steps))  # what every run sees at a step
    curve_a = 3 + 2 * np.exp(-steps / 400)
    curve_b = curve_a + 0.4 * (1 - steps / 1500)
    out = {
        "a": curve_a + batch,
        "a2": curve_a + batch + rng.normal(0, 0.003, len(steps)),
        "b": curve_b + batch,
    }
    for v in out.values():
        v[steps == 1500] += 2.0
    return out


def _spikes(name: str, steps: np.ndarray, loss: np.ndarray, width: int = 50) -> RunSpikes:
    from forensics.detect.recurrence import profile, window

    win = {1500: window(steps, loss, 1500, 1.0)}
    return RunSpikes(
        name, (1500,), 0, 2999, 1.0, None, None, None, win, profile(steps, loss, width), width
    )


def test_a_run_repeated_counts_once_and_a_crossing_run_of_the_same_data_counts() -> None:
    steps = np.arange(3000)
    losses = _fleet_losses(steps)
    runs = [_spikes(n, steps, v) for n, v in losses.items()]
    (rec,) = find(runs)
    assert [r for r, _ in rec.runs] == ["a", "b"] and rec.repeats == [("a2", 1500, "a")]
    assert rec.covering == ["a", "b"] and rec.absent == []
    # b's loss is a's there (the curves cross at 1500), but not over their history before it
    from forensics.detect.recurrence import same_history, tracks

    a, a2, b = runs
    assert tracks(a.windows[1500], b.windows[1500]) and not same_history(a.profile, b.profile, 30)
    assert tracks(a.windows[1500], a2.windows[1500]) and same_history(a.profile, a2.profile, 30)


def test_cross_runs_counts_one_run_per_state() -> None:
    from types import SimpleNamespace

    from forensics.detect.recurrence import RunLoss, cross_features

    steps = np.arange(3000)
    losses = _fleet_losses(steps)
    others = [_spikes(n, steps, losses[n]) for n in ("a2", "b")]
    inc: Any = SimpleNamespace(peak_step=1500, peaks=[(1500, float(losses["a"][1500]))])
    mine = RunLoss(steps, losses["a"])
    assert cross_features(inc, 1.0, None, others, loss=mine)["cross_runs"] == 1.0  # b alone
    assert cross_features(inc, 1.0, None, others)["cross_runs"] == 2.0  # no loss: both count
    # from b's side: a and a2 are one state, one run
    others = [_spikes(n, steps, losses[n]) for n in ("a", "a2")]
    mine = RunLoss(steps, losses["b"])
    assert cross_features(inc, 1.0, None, others, loss=mine)["cross_runs"] == 1.0
