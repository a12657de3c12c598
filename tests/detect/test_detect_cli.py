"""`forensics detect`, `analyze` and `rules`: exit codes, and the DB state through the library."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import curve, spike
from typer.testing import CliRunner

from forensics.cli import app
from forensics.detect import load_rules
from forensics.detect.store import incidents_frame
from forensics.store import open_store

runner = CliRunner()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A JSONL run with one recoverable spike (with a gradient spike) and its config."""
    folder = tmp_path / "spiky"
    folder.mkdir()
    loss = spike(curve(3000), 2000, 0.6, 15)
    g = 0.3 * np.exp(np.random.default_rng(0).normal(0, 0.05, 3000))
    g[1999] = 20.0
    with open(folder / "metrics.jsonl", "w") as fh:
        for i in range(3000):
            fh.write(json.dumps({"step": i + 1, "loss": loss[i], "grad_norm": g[i]}) + "\n")
    (folder / "config.json").write_text(json.dumps({"adam_beta2": 0.95, "precision": "bf16"}))
    return folder


def _ingest(folder: Path, db: Path) -> None:
    result = runner.invoke(app, ["ingest", str(folder), "--db", str(db)])
    assert result.exit_code == 0, result.output


def test_detect_writes_incidents_and_is_idempotent(run_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    _ingest(run_dir, db)
    for _ in range(2):
        result = runner.invoke(app, ["detect", "--db", str(db), "--run", "spiky"])
        assert result.exit_code == 0, result.output
    with open_store(db, read_only=True) as store:
        rows = incidents_frame(store, "spiky")
        assert rows.height == 1
        assert rows["type"][0] == "recoverable" and rows["cause"][0] == "rare_tokens"
        n_findings = store.query("SELECT count(*) AS n FROM findings WHERE run_id='spiky'")
        # one per rule, not doubled by the second run
        assert n_findings["n"][0] == len(load_rules())
        ev = json.loads(rows["evidence"][0])
        assert all(set(e) == {"key", "value", "note"} for e in ev)


def test_detect_unknown_run_is_a_one_line_error(run_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    _ingest(run_dir, db)
    result = runner.invoke(app, ["detect", "--db", str(db), "--run", "nope"])
    assert result.exit_code != 0 and "nope" in result.output and "Traceback" not in result.output


def test_detect_with_a_broken_user_rule_names_it(run_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    _ingest(run_dir, db)
    bad = tmp_path / "myrules"
    bad.mkdir()
    (bad / "oops.yaml").write_text("id: oops\ntitle: x\n")
    result = runner.invoke(app, ["detect", "--db", str(db), "--rules", str(bad)])
    assert result.exit_code == 2 and "oops.yaml" in result.output


def test_analyze_writes_incidents_json_and_the_db(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["analyze", str(run_dir), "--out", str(out), "--no-replay", "--no-report"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "incidents.json").read_text())
    assert doc["run"] == "spiky"
    (inc,) = doc["incidents"]
    for key in ("id", "metric", "onset_step", "peak_step", "end_step", "pre_value", "peak_value",
                "post_value", "grad_norm_peak", "type", "cause", "confidence", "evidence",
                "recovery", "restart_checkpoint_step"):  # fmt: skip
        assert key in inc
    assert inc["replay"] == "not_run" and inc["peaks"][0]["step"] == inc["peak_step"]
    with open_store(out / "forensics.duckdb", read_only=True) as store:
        assert incidents_frame(store, "spiky").height == 1


def test_rules_commands(tmp_path: Path) -> None:
    assert runner.invoke(app, ["rules", "list"]).exit_code == 0
    shown = runner.invoke(app, ["rules", "show", "stale-beta2"])
    assert shown.exit_code == 0 and "What to do" in shown.output
    assert runner.invoke(app, ["rules", "show", "nope"]).exit_code == 2
    tested = runner.invoke(app, ["rules", "test"])
    assert tested.exit_code == 0 and "passed" in tested.output
    linted = runner.invoke(app, ["rules", "lint"])
    n = len(load_rules())
    assert linted.exit_code == 0 and f"validated {n} of {n}" in linted.output
    (tmp_path / "bad.yaml").write_text(
        (Path(__file__).parents[2] / "rules" / "rare-tokens.yaml")
        .read_text()
        .replace("cause: rare_tokens", "cause: gremlins")
    )
    linted = runner.invoke(app, ["rules", "lint", "--rules", str(tmp_path)])
    assert linted.exit_code == 2 and f"validated {n} of {n + 1}" in linted.output
    assert "bad.yaml" in linted.output and "field 'cause'" in linted.output


def test_rules_test_fails_on_a_wrong_fixture(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "rules" / "hardware-fault.yaml").read_text()
    (tmp_path / "hw.yaml").write_text(
        text.replace(
            "scale_halvings: 3, type: recoverable}", "scale_halvings: 0, type: recoverable}"
        )
    )
    result = runner.invoke(app, ["rules", "test", "--rules", str(tmp_path)])
    assert result.exit_code == 1 and "FAIL hardware-fault" in result.output
