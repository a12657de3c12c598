"""Ingest pipeline: run naming, idempotence, several runs in one DB, atomic failure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from forensics.errors import InputError, UnknownFormatError
from forensics.ingest import ingest
from forensics.store import open_store


def _write_jsonl(path: Path, losses: list[float]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for i, loss in enumerate(losses):
            fh.write(json.dumps({"step": i, "loss": loss, "grad_norm": 0.5}) + "\n")
    return path


def test_run_folder_ingest_is_idempotent(tmp_path: Path, tmp_db: Path) -> None:
    run = tmp_path / "myrun"
    _write_jsonl(run / "metrics.jsonl", [3.0, 2.5, math.nan, 2.0])
    (run / "config.json").write_text(json.dumps({"optimizer": {"betas": [0.9, 0.95]}}))
    with open_store(tmp_db) as store:
        ingest(store, [run])
        first = store.metrics_long("myrun").height
        ingest(store, [run])
        assert store.metrics_long("myrun").height == first == 8
        assert store.run_names() == ["myrun"]
        assert store.run_config("myrun")["beta2"] == 0.95


def test_two_runs_share_one_db(tmp_path: Path, tmp_db: Path) -> None:
    a = _write_jsonl(tmp_path / "a" / "metrics.jsonl", [3.0, 2.0])
    b = _write_jsonl(tmp_path / "b" / "metrics.jsonl", [4.0, 3.0, 2.0])
    with open_store(tmp_db) as store:
        ingest(store, [a])
        ingest(store, [b])
        assert store.run_names() == ["a", "b"]
        assert store.metrics_frame("b")["loss"].to_list() == [4.0, 3.0, 2.0]


def test_failed_ingest_loses_nothing_already_stored(tmp_path: Path, tmp_db: Path) -> None:
    good = _write_jsonl(tmp_path / "r" / "metrics.jsonl", [3.0, 2.0])
    with open_store(tmp_db) as store:
        ingest(store, [good])
        good.write_text(
            '{"step": 0, "loss": 1.0}\n{"step": 1, "loss": \n{"step": 2, "loss": 1.0}\n'
        )
        with pytest.raises(InputError, match=r"metrics\.jsonl:2"):
            ingest(store, [good], run="r")
        assert store.metrics_frame("r")["loss"].to_list() == [3.0, 2.0]


def test_unknown_format_lists_what_was_tried(tmp_path: Path, tmp_db: Path) -> None:
    odd = tmp_path / "notes.xyz"
    odd.write_text("nothing numeric here\n")
    with open_store(tmp_db) as store, pytest.raises(UnknownFormatError, match="tried: .*jsonl"):
        ingest(store, [odd])


def test_runs_index_says_coverage_in_one_short_cell(tmp_path: Path) -> None:
    """Issue 11: `analyze FOLDER` with several runs writes one index line per run; the
    screen's coverage is a short cell (from detect's stored row), explained once below."""
    from forensics.analyze import AnalyzeOptions, analyze
    from forensics.detect.coverage import read

    for name, n in (("a", 3000), ("b", 2000), ("c", 2)):
        _write_jsonl(tmp_path / "runs" / name / "metrics.jsonl",
                     [2.0 + 8.0 / (1 + s / 50) for s in range(n)])  # fmt: skip
    out = tmp_path / "out"
    result = analyze(tmp_path / "runs", out, options=AnalyzeOptions(replay=False, report=False))
    text = (out / "README.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert sorted(r.split(" | ")[0] for r in rows) == ["| a", "| b", "| c"]
    with open_store(result.db) as store:
        for row in rows:
            cov = read(store, row.split(" | ")[0].removeprefix("| "))
            assert cov is not None
            cell = row.split(" | ")[3]
            if cov["screened_from_step"] is None:
                assert cell == f"not screened ({cov['points']} points)"
            else:
                assert cov["unscreened_points"]  # a start-up was left out
                kept = int(cov["points"]) - int(cov["unscreened_points"])  # type: ignore[call-overload]
                assert (
                    cell
                    == f"from step {cov['screened_from_step']} ({kept} of {cov['points']} points)"
                )
            assert len(row) < 200
    assert text.count("Non-finite values, gradient") == 1
    assert "were screened only for jumps" not in text  # the long note is not repeated


def test_runs_index_says_a_note_shared_by_runs_once(tmp_path: Path) -> None:
    """A folder of runs without batch manifests: the long "no batch manifest" note was
    written once per run (in OUT/README.md and on stderr); it is said once, with the runs."""
    from forensics.analyze import AnalyzeOptions, analyze

    for name, n in (("a", 800), ("b", 700), ("c", 600)):
        losses = [2.0 + 8.0 / (1 + s / 50) + (4.0 if 400 <= s < 404 else 0.0) for s in range(n)]
        _write_jsonl(tmp_path / "runs" / name / "metrics.jsonl", losses)
    out = tmp_path / "out"
    result = analyze(tmp_path / "runs", out, options=AnalyzeOptions(report=False, device="cpu"))
    text = (out / "README.md").read_text()
    assert text.count("no batch manifest") == 1
    (line,) = [ln for ln in text.splitlines() if "no batch manifest" in ln]
    runs = line.removeprefix("- 3 runs (").split("): ")[0]
    assert sorted(runs.split(", ")) == ["a", "b", "c"], line
    assert "): replay: not run (each run has no batch manifest" in line
    (said,) = [n for n in result.notes if "no batch manifest" in n]
    assert said == line.removeprefix("- ")


def test_grouped_notes_keep_a_single_runs_name() -> None:
    from forensics.analyze import grouped_notes

    per_run = [
        ("a", ['x (run "a" has no manifest)', "only a"]),
        ("b", ['x (run "b" has no manifest)']),
    ]
    assert grouped_notes(per_run) == [
        (["a", "b"], "x (each run has no manifest)"), (["a"], "only a")
    ]  # fmt: skip
    assert grouped_notes([("a", ['x (run "a" has no manifest)'])]) == [
        (["a"], 'x (run "a" has no manifest)')
    ]


def test_several_runs_share_one_plotly_js(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 11: a folder of runs got a 4.8 MB plotly.min.js in every run's figures/ (53 MB
    of the 62 MB written for the 11 modded-nanogpt logs); one copy at OUT/ serves them all."""
    from forensics.analyze import AnalyzeOptions, analyze
    from forensics.report import export

    monkeypatch.setattr(export, "find_chromium", lambda: (None, "no browser in this test"))
    for name, n in (("a", 600), ("b", 500)):  # different files: identical ones are one run
        losses = [2.0 + 8.0 / (1 + s / 50) for s in range(n)]
        _write_jsonl(tmp_path / "runs" / name / "metrics.jsonl", losses)
    out = tmp_path / "out"
    analyze(tmp_path / "runs", out, options=AnalyzeOptions(replay=False))
    assert [p.relative_to(out).as_posix() for p in out.rglob("plotly.min.js")] == ["plotly.min.js"]
    pages = sorted(out.glob("*/figures/*.html"))
    assert {p.parts[-3] for p in pages} == {"a", "b"}
    for page in pages:
        text = page.read_text()
        assert 'src="../../plotly.min.js"' in text and len(text) < 100_000


def test_analyze_min_severity_writes_the_minor_post_mortems(
    real_logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`analyze --min-severity minor` (only `report` had it): the Mixtral run's two spikes
    get post-mortems; by default only the x2.1 one at 4050 (moderate: the loss doubled,
    though it was back in 20 steps; before, both were minor and no page was written), the
    x1.24 one at 2425 is one line; a bad value fails first."""
    from forensics.analyze import AnalyzeOptions, analyze
    from forensics.errors import ReportOptionError
    from forensics.report import export

    monkeypatch.setattr(export, "find_chromium", lambda: (None, "no browser in this test"))
    log = real_logs / (
        "NVIDIA__Megatron-LM/tests__functional_tests__test_cases__mixtral__"
        "mixtral_8x7b_alltoall_tp2pp4ep4_release__golden_values_lts_dgx_a100.json"
    )
    analyze(log, tmp_path / "all", options=AnalyzeOptions(replay=False, min_severity="minor"))
    assert sorted(p.name for p in (tmp_path / "all" / "postmortems").glob("*.md")) == [
        "spike-01.md",
        "spike-02.md",
    ]
    analyze(log, tmp_path / "default", options=AnalyzeOptions(replay=False))
    summary = (tmp_path / "default" / "README.md").read_text()
    pages = sorted(p.name for p in (tmp_path / "default" / "postmortems").glob("*.md"))
    assert pages == ["spike-02.md"]
    assert "| 2 | moderate | 4050 |" in summary and "| 1 | minor | 2425 |" in summary
    assert "`--min-severity minor`" in summary
    with pytest.raises(ReportOptionError, match="expected one of minor"):
        analyze(log, tmp_path / "bad", options=AnalyzeOptions(min_severity="bogus"))
    assert not (tmp_path / "bad").exists()  # failed before any work
