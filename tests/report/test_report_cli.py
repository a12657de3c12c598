"""`forensics report` and `forensics demo` through the CLI, checked through the library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from reportdb import build_b, build_c, finish
from typer.testing import CliRunner

from forensics.cli import app
from forensics.report.demo import DemoError, run_demo, scenarios
from forensics.store import open_store

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_png(monkeypatch: pytest.MonkeyPatch) -> None:
    """PNG export is covered by test_report_write; here it would only cost time."""
    monkeypatch.setenv("FORENSICS_CHROMIUM", "off")


def test_report_command_writes_one_postmortem_per_incident(report_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    result = runner.invoke(
        app,
        [
            "report",
            "--db",
            str(report_db),
            "--out",
            str(out),
            "--run",
            "gpt-1b-fp16",
            "--gpu-hour-cost",
            "2.5",
            "--world-size",
            "128",
        ],
    )
    assert result.exit_code == 0, result.output
    with open_store(report_db, read_only=True) as store:
        ids = store.query("SELECT incident_id FROM incidents WHERE run_id = 'gpt-1b-fp16'")
    written = sorted(p.name for p in (out / "postmortems").glob("*.md"))
    assert written == [f"spike-{i:02d}.md" for i in sorted(ids["incident_id"].to_list())]
    assert "× 128 GPUs (--world-size)" in (out / "postmortems" / "spike-01.md").read_text()
    assert str(out / "README.md") in result.stdout


def test_report_command_names_an_unknown_run(report_db: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["report", "--db", str(report_db), "--out", str(tmp_path), "--run", "nope"]
    )
    assert result.exit_code == 1
    assert 'no run named "nope"' in result.output and "Traceback" not in result.output


def test_report_command_needs_run_when_several(report_db: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--db", str(report_db), "--out", str(tmp_path)])
    assert result.exit_code == 1 and "pass --run NAME" in result.output


def fake_analyze(paths: list[Path], *, db: Path, run: str, **_: Any) -> None:
    """Stands in for forensics.analyze.analyze: stores the fixture run named like the folder."""
    build = {"llm-13b-bf16": build_b, "clean-350m": build_c}[run]
    with open_store(db) as store:
        build(store)
        finish(store)


def test_demo_writes_a_report_per_sample_run(tmp_path: Path) -> None:
    samples = tmp_path / "sample_logs"
    for name in ("llm-13b-bf16", "clean-350m", "__pycache__"):
        (samples / name).mkdir(parents=True)
    seen: list[str] = []
    result = run_demo(
        samples, tmp_path / "demo", analyze=fake_analyze, progress=seen.append, warn=lambda _m: None
    )
    runs = result.runs
    assert [r.scenario for r in runs] == ["clean-350m", "llm-13b-bf16"]
    assert len(runs[1].report.postmortems) == 2 and not runs[0].report.postmortems
    assert (tmp_path / "demo" / "llm-13b-bf16" / "README.md").is_file()
    assert "analyzing clean-350m" in seen
    index = result.index.read_text()
    assert "| `llm-13b-bf16` | unknown (no truth.json) |" in index
    assert "(llm-13b-bf16/README.md)" in index
    assert (tmp_path / "demo" / "llm-13b-bf16" / "incidents.json").is_file()
    (samples / "llm-13b-bf16").rmdir()
    again = run_demo(samples, tmp_path / "demo", analyze=fake_analyze, warn=lambda _m: None)
    assert "31 logged steps" in again.runs[0].report.readme.read_text()  # fresh DB, no doubled rows


def test_demo_without_sample_runs_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DemoError, match="holds no sample run"):
        scenarios(tmp_path)
    result = runner.invoke(app, ["demo", "--samples", str(tmp_path), "--out", str(tmp_path)])
    assert result.exit_code == 1 and "holds no sample run" in result.output


def test_demo_calls_analyze_with_the_expected_signature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    def spy(paths: list[Path], *, db: Path, run: str, progress: Any) -> None:
        calls.append({"paths": paths, "db": db, "run": run})
        assert callable(progress)
        fake_analyze(paths, db=db, run=run)

    monkeypatch.setattr("forensics.report.demo.load_analyze", lambda: spy)
    (tmp_path / "s" / "clean-350m").mkdir(parents=True)
    result = runner.invoke(
        app, ["demo", "--samples", str(tmp_path / "s"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    assert calls == [
        {
            "paths": [tmp_path / "s" / "clean-350m"],
            "db": tmp_path / "o" / "clean-350m" / "forensics.duckdb",
            "run": "clean-350m",
        }
    ]
    assert "clean-350m: 0 incidents" in result.stdout


def test_report_warning_is_plain_text(
    report_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The no-browser warning printed rich's markup as text ("[yellow]warning:[/yellow]"):
    report's once-per-command warn printed with markup off. It now goes through cli.warn."""
    monkeypatch.setenv("FORENSICS_CHROMIUM", str(tmp_path / "no-such-browser"))
    result = runner.invoke(
        app,
        ["report", "--db", str(report_db), "--out", str(tmp_path / "r"), "--run", "gpt-1b-fp16"],
    )
    assert result.exit_code == 0, result.output
    assert "warning: FORENSICS_CHROMIUM=" in result.stderr
    assert "[yellow]" not in result.stderr
