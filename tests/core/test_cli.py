"""The CLI front door: help for every command, version, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from forensics import __version__
from forensics.cli import app

runner = CliRunner()


def _commands(group: typer.Typer, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for cmd in group.registered_commands:
        name = cmd.name or (cmd.callback.__name__ if cmd.callback else "")
        found.append((*prefix, name.replace("_", "-")))
    for sub in group.registered_groups:
        assert sub.typer_instance is not None and sub.name
        found.extend(_commands(sub.typer_instance, (*prefix, sub.name)))
    return found


def test_every_command_has_help_with_an_example() -> None:
    commands = _commands(app)
    assert ("ingest",) in commands
    for cmd in commands:
        result = runner.invoke(app, [*cmd, "--help"])
        assert result.exit_code == 0, (cmd, result.output)
        assert "Example" in result.output, f"`forensics {' '.join(cmd)} --help` has no example"


def test_help_paragraphs_are_not_broken_where_the_source_wraps() -> None:
    """Each paragraph of a command's description reads as one line on a terminal wide
    enough for it: the docstring's own line breaks are the source's, not the reader's."""
    wide = CliRunner(env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    for cmd in _commands(app):
        result = wide.invoke(app, [*cmd, "--help"])
        assert result.exit_code == 0, (cmd, result.output)
        lines = [" ".join(line.split()) for line in result.output.splitlines()]
        for para in (_callback(cmd).__doc__ or "").split("\n\n"):
            text = " ".join(para.split())
            if text and len(text) < 300:
                assert any(text in line for line in lines), (cmd, text)


def _callback(cmd: tuple[str, ...]) -> typer.models.CommandFunctionType:
    group: typer.Typer = app
    for name in cmd[:-1]:
        group = next(g.typer_instance for g in group.registered_groups if g.name == name)
    for info in group.registered_commands:
        name = info.name or (info.callback.__name__ if info.callback else "")
        if name.replace("_", "-") == cmd[-1] and info.callback:
            return info.callback
    raise AssertionError(cmd)


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_python_dash_m() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "forensics", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and __version__ in out.stdout


def test_missing_path_is_a_one_line_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["ingest", str(tmp_path / "nope.jsonl"), "--db", str(tmp_path / "x.duckdb")]
    )
    assert result.exit_code != 0
    assert "nope.jsonl" in result.output and "Traceback" not in result.output


def test_unknown_run_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    db.write_bytes(b"")
    db.unlink()
    from forensics.store import open_store

    with open_store(db) as store:
        store.upsert_run("a", "a", "jsonl", {})
    result = runner.invoke(app, ["runs", "--db", str(db)])
    assert result.exit_code == 0 and "a" in result.output


def _ingest_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool) -> str:
    import forensics.cli

    monkeypatch.setattr(forensics.cli, "is_terminal", lambda stream: terminal)
    log = tmp_path / "metrics[0].jsonl"  # brackets: rich markup if printed as markup
    log.write_text("".join(f'{{"step": {i}, "loss": {2 + i / 10}}}\n' for i in range(5)))
    result = runner.invoke(app, ["ingest", str(log), "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code == 0, result.output
    return result.output


def test_ingest_prints_tab_separated_rows_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Piped (a script, CI), the summary is one header and one line per source, tab-separated,
    the numbers as stored; rich is not needed for it."""
    lines = _ingest_sample(tmp_path, monkeypatch, terminal=False).splitlines()
    assert lines == [
        "run\tsource\tkind\tformat\trows\twarnings",
        "metrics[0]\tmetrics[0].jsonl\tmetrics\tjsonl\t5\t",
    ]


def test_ingest_draws_a_table_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal the same summary is a rich table, cells shown as text (not markup)."""
    output = _ingest_sample(tmp_path, monkeypatch, terminal=True)
    assert "ingested into" in output and "┃ run" in output
    assert "metrics[0].jsonl" in output and "\t" not in output
