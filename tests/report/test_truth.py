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
from forensics.report.context import unscreened_near
from forensics.report.fmt import back_after, cell, code, gpu_hours, steps_after, text
from forensics.report.knowledge import Knowledge
from forensics.report.locate import templates_dir
from forensics.report.model import Finding, Incident, LogNext, Replay, StoredHypothesis
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


def _hyp(rank: int, cause: str, status: str, reason: str = "", needs: list[str] | None = None):  # type: ignore[no-untyped-def]
    return StoredHypothesis(rank, cause, status, 0.0, cause.replace("_", "-"), reason, needs or [])


def test_a_hypothesis_replay_confirmed_is_not_called_ruled_out() -> None:
    """Statuses come from the stored hypotheses; replay's verdict outranks the log's."""
    inc = _incident(
        findings=[
            Finding("lr-too-high", "lr_too_high", True, 0.6, "lower_lr", [], REFUTED),
            Finding("rare-tokens", "rare_tokens", False, 0.0, None, [], CONFIRMED),
        ],
        replays=[Replay("rare_tokens", "rare_tokens", CONFIRMED, {}, "rare ids", None, None)],
        cause="rare_tokens",
        hypotheses=[
            _hyp(1, "batch_driven", "supported", "single_point_peaks=1"),
            _hyp(2, "rare_tokens", "against", "condition not met with its inputs logged: x=1"),
            _hyp(3, "lr_too_high", "supported", "grad_drift=1.4"),
            _hyp(
                4,
                "fp16_overflow",
                "not_evaluable",
                "needs loss_scale; from the log: x=1",
                ["loss_scale"],
            ),  # fmt: skip
            _hyp(
                5,
                "stale_beta2",
                "against",
                "refuted by the log (beta2 < 0.99 or (a == 1)): beta2=0.95",
            ),  # fmt: skip
        ],
        log_next=[LogNext(1, "loss_scale", ["fp16_overflow"], "log the fp16 loss scale")],
    )
    by_key = {h.key: h for h in competitors(inc, _kb())}
    assert "rare_tokens" not in by_key  # the stated cause is not its own competitor
    assert by_key["lr_too_high"].status == "refuted by replay"
    assert by_key["batch_driven"].status == "supported by the log"
    fp16 = by_key["fp16_overflow"]
    assert fp16.status == "not evaluated" and "`loss_scale`" in fp16.why
    assert fp16.evaluate == "log the fp16 loss scale"  # from log_next, not the report
    stale = by_key["stale_beta2"]
    assert stale.status == "ruled out by the log" and stale.why.endswith("beta2=0.95")
    assert list(by_key) == ["batch_driven", "lr_too_high", "fp16_overflow", "stale_beta2"]


def test_every_detect_cause_has_a_lessons_entry() -> None:
    from forensics.detect.model import CAUSE_TITLES, CAUSES

    kb = _kb()
    for cause in CAUSES:
        entry = kb.cause(cause)
        assert "no description" not in entry.description, f"{cause} lacks a lessons.yaml entry"
        assert entry.lessons and entry.title, cause
        if cause != "unknown":
            assert entry.fields.get("evaluate"), f"{cause}: what would evaluate it?"
        assert entry.title == CAUSE_TITLES.get(cause, entry.title), cause


def test_unscreened_stretch_is_stated_near_the_start_up() -> None:
    screen = {"note": "the first 20 of 900 points were not screened", "screened_from_step": 21,
              "unscreened_points": 20, "unscreened_to_step": 20, "first_step": 1,
              "short_log": False}  # fmt: skip
    assert unscreened_near(_incident(onset_step=30), screen) == screen["note"]
    assert unscreened_near(_incident(onset_step=500), screen) is None
    assert unscreened_near(_incident(onset_step=500), {**screen, "short_log": True})
    assert unscreened_near(_incident(onset_step=500), {**screen, "screened_from_step": None})
    assert unscreened_near(_incident(onset_step=30), None) is None


def test_wording() -> None:
    assert steps_after(0) == "at the onset step itself"
    assert steps_after(1) == "1 step after the onset"
    # the appendix's recovery_steps counts from the last peak: the prose names both counts
    assert back_after(110, 100, 6.0) == "10 steps after the onset and 6 steps after the last peak"
    assert back_after(110, 100, 10.0) == "10 steps after the onset"
    assert back_after(110, 100, None) == "10 steps after the onset"
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


def test_unknown_cause_with_an_inconclusive_probe_is_not_called_all_refuted(
    tmp_path: Path,
) -> None:
    """Issue 12 review: an HF LR-jump run read "Replay refuted every hypothesis it tested"
    while lr_too_high's probe was inconclusive; the page must say what each verdict was."""
    from reportdb import add_finding, add_replay, build_b, build_c, build_gpt, finish, render_docs

    with open_store(tmp_path / "r.duckdb") as store:
        build_gpt(store)
        build_b(store)
        run = "llm-13b-bf16"
        add_finding(store, run, 2, "lr-too-high", "lr_too_high", False, None, [])
        add_finding(store, run, 2, "rare-tokens", "rare_tokens", False, None, [])
        add_replay(store, run, 2, "lr_too_high", "lr_too_high", "inconclusive", {}, "halved LR")
        add_replay(store, run, 2, "rare_tokens", "rare_tokens", "refuted", {}, "common tokens")
        build_c(store)
        finish(store)
        page = render_docs(store, run, png=False)["postmortems/spike-02.md"]
    assert "refuted every hypothesis" not in page
    assert "Replay confirmed none of the hypotheses it tested (inconclusive: " in page
    assert "; refuted: " in page


def test_the_figure_window_holds_logged_points_in_a_sparse_log() -> None:
    # timm logs every 50 steps: 50 steps of context before a NaN at 18114 were one logged
    # point, and the figure drew no loss line before the NaN
    import types

    import polars as pl

    from forensics.report.incident import WINDOW_POINTS, window

    steps = list(range(15012, 20015, 50))
    frame = pl.DataFrame({"step": steps, "loss": [6.7] * len(steps)})
    inc = _incident(onset_step=18112, peak_step=18112, end_step=None, type="divergent")
    lo, hi = window(inc, types.SimpleNamespace(recovery=None), frame)  # type: ignore[arg-type]
    assert sum(lo <= s < 18112 for s in steps) >= WINDOW_POINTS
    assert sum(18112 < s <= hi for s in steps) >= WINDOW_POINTS - 1
    # every step logged: the 50-step context as before
    dense = pl.DataFrame({"step": list(range(0, 400)), "loss": [3.0] * 400})
    assert window(_incident(), types.SimpleNamespace(recovery=None), dense) == (50, 160)  # type: ignore[arg-type]
