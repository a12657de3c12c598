"""`forensics replay` from the command line: exit codes, output, and what it stores."""

from __future__ import annotations

from pathlib import Path

from replay_helpers import RUN
from typer.testing import CliRunner

from forensics.cli import app
from forensics.store import open_store

runner = CliRunner()


def test_replay_command_stores_verdicts(db: Path) -> None:
    args = ["replay", "--db", str(db), "--run", RUN, "--incident", "1", "--device", "cpu"]
    result = runner.invoke(app, [*args, "--k", "4"])
    assert result.exit_code == 0, result.output
    assert "rare_tokens" in result.output and "confirmed" in result.output
    with open_store(db, read_only=True) as store:
        rows = store.query("SELECT probe, verdict FROM replays WHERE run_id = ?", [RUN])
        inc = store.query("SELECT cause, replay FROM incidents WHERE run_id = ?", [RUN])
    assert rows.height == 7
    assert inc.to_dicts() == [{"cause": "rare_tokens", "replay": "confirmed"}]


def test_replay_step_without_incident_is_an_adhoc_replay(db: Path) -> None:
    args = ["replay", "--db", str(db), "--step", "25", "--device", "cpu", "--k", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with open_store(db, read_only=True) as store:
        rows = store.query("SELECT DISTINCT incident_id FROM replays WHERE run_id = ?", [RUN])
    assert rows["incident_id"].to_list() == [-1]


def test_replay_errors_are_one_line(db: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["replay", "--db", str(db), "--incident", "7"])
    assert result.exit_code == 1 and "no incident 7" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["replay", "--db", str(db), "--device", "tpu"])
    assert result.exit_code == 1 and "--device" in result.output
    result = runner.invoke(app, ["replay", "--db", str(db), "--run", "nope"])
    assert result.exit_code == 1 and "nope" in result.output


def test_help_has_an_example() -> None:
    result = runner.invoke(app, ["replay", "--help"])
    assert result.exit_code == 0 and "Example" in result.output
