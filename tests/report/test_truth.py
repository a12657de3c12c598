"""Issue 11: one test per defect listed under Why (each fails on the code before it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from reportdb import build_store
from typer.testing import CliRunner

from forensics.cli import app
from forensics.detect.store import NotDetectedError, require_detected
from forensics.replay import verdicts
from forensics.replay.result import CONFIRMED, REFUTED
from forensics.report.classify import competitors
from forensics.report.fmt import cell, code, gpu_hours, steps_after, text
from forensics.report.knowledge import Knowledge
from forensics.report.locate import templates_dir
from forensics.report.model import Finding, Incident, Replay
from forensics.store import open_store

runner = CliRunner()


def test_refuting_every_hypothesis_leaves_the_cause_unknown() -> None:
    t = {"lr_too_high": verdicts.Tested(REFUTED, []), "rare_tokens": verdicts.Tested(REFUTED, [])}
    best = {"lr_too_high": (0.65, True, "lower_lr"), "rare_tokens": (0.0, False, None)}
    cause, conf, _ = verdicts.choose("lr_too_high", 0.65, "lower_lr", t, best)
    assert (cause, conf) == ("unknown", 0.0)


def test_a_refuted_cause_is_never_kept_when_another_fired() -> None:
    t = {"lr_too_high": verdicts.Tested(REFUTED, [])}
    best = {"lr_too_high": (0.65, True, "lower_lr"), "rare_tokens": (0.2, True, "continue")}
    assert verdicts.choose("lr_too_high", 0.65, "lower_lr", t, best)[0] == "rare_tokens"


def _incident(**kw: object) -> Incident:
    base = dict(
        incident_id=1, metric="loss", onset_step=100, peak_step=101, end_step=110,
        pre_value=3.0, peak_value=9.0, post_value=3.0, grad_norm_peak=2.0, type="recoverable",
        cause="lr_too_high", confidence=0.6, recovery="continue", restart_checkpoint_step=None,
        peaks=[], evidence=[], features={}, replay="refuted", steps_lost=10, tokens_lost=None,
        gpu_hours_lost=None, cost_usd=None,
    )  # fmt: skip
    base.update(kw)
    return Incident(**base)  # type: ignore[arg-type]


def _kb() -> Knowledge:
    path = templates_dir() / "lessons.yaml"
    return Knowledge.from_text(path.read_text(), str(path))


def test_a_hypothesis_replay_confirmed_is_not_called_ruled_out() -> None:
    inc = _incident(
        findings=[
            Finding("lr-too-high", "lr_too_high", True, 0.6, "lower_lr", [], REFUTED),
            Finding("rare-tokens", "rare_tokens", False, 0.0, None, [], CONFIRMED),
            Finding(
                "fp16",
                "fp16_overflow",
                False,
                0.0,
                None,
                [{"key": "scale_halvings", "value": None, "note": "missing"}],
                "not_run",
            ),
        ],  # fmt: skip
        replays=[Replay("rare_tokens", "rare_tokens", CONFIRMED, {}, "rare ids", None, None)],
    )
    by_cause = {h.cause: h for h in competitors(inc, _kb(), None)}
    rare = by_cause["rare-token / bad-data batch"]
    assert rare.status == "confirmed" and "rule did not fire" not in rare.why
    fp16 = by_cause["fp16 overflow / loss-scale collapse"]
    assert fp16.status == "not evaluated" and "loss_scale" in fp16.evaluate


def test_wording() -> None:
    assert steps_after(0) == "at the onset step itself"
    assert steps_after(1) == "1 step after the onset"
    assert "e-" not in gpu_hours(6.111e-06) and "GPU-seconds" in gpu_hours(6.111e-06)
    assert gpu_hours(0.00382) == "0.004"
    assert (
        cell("entropy -0.00 bits vs 5.90, slope -0.001")
        == "entropy 0.00 bits vs 5.90, slope -0.001"
    )


@pytest.mark.parametrize(
    "name", ["run`with`ticks", "a\n# Injected", "<img src=x onerror=alert(1)>", "p|q"]
)
def test_user_text_is_escaped(name: str) -> None:
    c = code(name)
    assert c.count("`") == 2 and "\n" not in c and "|" not in c.replace("\\|", "")
    t = text(name)
    assert "<img" not in t and "\n" not in t and not t.startswith("#")
    assert "# Injected" not in t.replace("\\#", "")


def test_escaped_run_name_in_the_summary(tmp_path: Path) -> None:
    from forensics.detect import detect
    from forensics.report import write_report

    db = build_store(tmp_path / "r.duckdb")
    with open_store(db) as store:
        rid = "x\n# Injected <img src=x onerror=alert(1)>`"
        for table in ("runs", "metric_columns", "sources", "events", "checkpoints"):
            store.con.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = 'clean-350m'", [rid])
        store.con.execute("UPDATE runs SET name = ? WHERE run_id = ?", [rid, rid])
        detect(store, rid)
        write_report(store, rid, tmp_path / "out", png=False)
    readme = (tmp_path / "out" / "README.md").read_text()
    assert not any(line.startswith("# Injected") for line in readme.splitlines())
    assert readme.splitlines()[0].count("`") == 2


def test_report_and_replay_before_detect_are_errors(tmp_path: Path) -> None:
    db = build_store(tmp_path / "r.duckdb")
    with open_store(db) as store:
        store.con.execute("DELETE FROM incidents WHERE run_id = 'clean-350m'")
        store.con.execute("DELETE FROM meta WHERE key LIKE 'detected_at:%'")
        with pytest.raises(NotDetectedError, match="forensics detect"):
            require_detected(store, "clean-350m")
    res = runner.invoke(app, ["report", "--db", str(db), "--run", "clean-350m",
                              "--out", str(tmp_path / "o")])  # fmt: skip
    assert res.exit_code != 0 and "forensics detect" in res.output
    assert not (tmp_path / "o" / "README.md").exists()
    res = runner.invoke(app, ["replay", "--db", str(db), "--run", "clean-350m"])
    assert res.exit_code != 0 and "never detected" in res.output


def test_detect_again_drops_the_replays_of_replaced_incidents(tmp_path: Path) -> None:
    from forensics.detect import detect

    db = build_store(tmp_path / "r.duckdb")
    with open_store(db) as store:
        assert store.con.execute("SELECT count(*) FROM replays").fetchone()[0] > 0  # type: ignore[index]
        for run in store.run_names():
            detect(store, run)
        left = store.con.execute("SELECT count(*) FROM replays").fetchall()[0][0]
    assert left == 0


def test_a_warning_is_said_once_per_command(capsys: pytest.CaptureFixture[str]) -> None:
    from forensics.commands import report as report_cmd

    report_cmd._warned.clear()
    for _ in range(7):  # the demo writes seven reports, each would warn "no Chrome"
        report_cmd.warn("no Chrome/Chromium found; fix: run `plotly_get_chrome`")
    err = capsys.readouterr().err
    assert err.count("no Chrome/Chromium found") == 1 and "plotly_get_chrome" in err


def test_no_chrome_warning_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics.report.export import _try_pngs

    monkeypatch.setattr("forensics.report.export.find_chromium", lambda: (None, "no Chrome"))
    said: list[str] = []
    _try_pngs({tmp_path / "a.png": None}, said.append)  # type: ignore[dict-item]
    assert len(said) == 1 and "plotly_get_chrome" in said[0] and "apt-get install" in said[0]
