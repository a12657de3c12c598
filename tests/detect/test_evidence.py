"""Causes as hypotheses: supported / against / not evaluable, the stated cause, what to log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from detect_helpers import curve, spike

from forensics.detect import detect, detect_data, run_data
from forensics.detect.evidence import choose, log_next, per_cause, weigh
from forensics.detect.model import CAUSE_TITLES, Hypothesis
from forensics.detect.rules import load_rule, run_fixtures
from forensics.store import open_store

RULE = """id: t
title: T
status: test
description: What it detects, Why it matters, What to do
references: [x]
cause: stale_beta2
condition: beta2 >= 0.99 and echo_count >= 1
against: beta2 < 0.99 or single_point_peaks == 1
needs: [beta2|adam_v_mean, grad_norm]
confidence: 0.8
recovery: continue
level: low
falsepositives: [x]
fixtures:
  trigger: [{beta2: 0.999, echo_count: 2}]
  no_trigger: [{beta2: 0.9, echo_count: 2}]
"""


@pytest.fixture
def rule(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "t.yaml"
    path.write_text(RULE)
    return load_rule(path)


def test_a_rule_weighs_to_each_of_the_three_statuses(rule) -> None:  # type: ignore[no-untyped-def]
    on = {"beta2", "grad_norm"}
    assert weigh(rule, {"beta2": 0.999, "echo_count": 2}, on).status == "supported"
    refuted = weigh(rule, {"beta2": 0.95, "echo_count": 2}, on)
    assert refuted.status == "against" and "refuted" in refuted.reason
    # no beta2 anywhere, no echo: the log cannot say; it names what would
    open_ = weigh(rule, {"echo_count": 0}, {"grad_norm"})
    assert open_.status == "not_evaluable" and open_.needs == ["beta2"]
    # everything it needs was logged and it still does not hold: against
    assert weigh(rule, {"beta2": 0.999, "echo_count": 0}, on).status == "against"
    # either alternative of beta2|adam_v_mean evaluates it
    assert weigh(rule, {"echo_count": 0}, {"adam_v_mean", "grad_norm"}).status == "against"


def _h(cause: str, status: str, conf: float = 0.0, needs: list[str] | None = None) -> Hypothesis:
    return Hypothesis(cause, status, conf, cause, "", needs or [])


def test_a_child_as_well_supported_as_its_parent_is_named_and_does_not_compete() -> None:
    ranked = per_cause([_h("batch_driven", "supported", 0.7), _h("rare_tokens", "supported", 0.7)])
    top, conf = choose(ranked)
    assert top is not None and (top.cause, conf) == ("rare_tokens", 0.7)
    top, conf = choose(
        per_cause([_h("batch_driven", "supported", 0.9), _h("rare_tokens", "supported", 0.5)])
    )
    assert top is not None and top.cause == "batch_driven" and conf == 0.9


def test_an_unrelated_rival_lowers_the_confidence() -> None:
    top, conf = choose(
        per_cause([_h("batch_driven", "supported", 0.6), _h("lr_too_high", "supported", 0.65)])
    )
    assert top is not None and top.cause == "lr_too_high" and conf == pytest.approx(0.575)


def test_log_next_names_what_opens_the_most_causes() -> None:
    ranked = per_cause(
        [
            _h("rare_tokens", "not_evaluable", needs=["grad_norm"]),
            _h("stale_beta2", "not_evaluable", needs=["beta2", "grad_norm"]),
            _h("fp16_overflow", "not_evaluable", needs=["precision"]),
            _h("batch_driven", "supported", 0.7),
        ]
    )
    nxt = log_next(ranked)
    assert [n.metric for n in nxt] == ["grad_norm", "beta2"]
    assert nxt[0].separates == ["rare_tokens", "stale_beta2"]
    assert "gradient norm" in nxt[0].why and "rare tokens and stale beta2" in nxt[0].why


def test_with_the_gradient_logged_a_batch_spike_is_rare_tokens_not_batch_driven(
    frame, rules
) -> None:  # type: ignore[no-untyped-def]
    loss = curve(4000)
    loss[2500] *= 1.6
    g = 0.3 * np.exp(np.random.default_rng(2).normal(0, 0.05, 4000))
    g[2499] = 30.0
    inc = detect_data(run_data(frame(loss, grad_norm=g), {"beta2": 0.95}, "t"), rules).incidents[0]
    assert inc.cause == "rare_tokens" and inc.confidence >= 0.8
    status = {h.cause: h.status for h in inc.hypotheses}
    assert status["batch_driven"] == "supported"  # the parent holds too, and does not compete
    assert status["stale_beta2"] == status["lr_too_high"] == "against"
    assert status["data_corruption"] == "not_evaluable"  # needs the batch's tokens


def test_a_spike_with_no_gradient_jump_is_not_a_batch(frame, rules) -> None:  # type: ignore[no-untyped-def]
    g = 0.3 * np.exp(np.random.default_rng(2).normal(0, 0.05, 4000))
    f = frame(spike(curve(4000), 2500, 0.6, 15), grad_norm=g)
    inc = detect_data(run_data(f, {"beta2": 0.95}, "t"), rules).incidents[0]
    status = {h.cause: h.status for h in inc.hypotheses}
    assert status["batch_driven"] == "against" and inc.cause != "batch_driven"


def test_hypotheses_and_log_next_are_stored_and_replaced(tmp_path: Path, rules) -> None:  # type: ignore[no-untyped-def]
    loss = curve(3000)
    loss[2000] *= 1.7
    path = tmp_path / "run.jsonl"
    path.write_text(
        "".join(json.dumps({"step": i + 1, "loss": float(v)}) + "\n" for i, v in enumerate(loss))
    )
    with open_store(tmp_path / "x.duckdb") as store:
        from forensics.ingest import ingest

        ingest(store, [path], run="r")
        for _ in range(2):  # re-running replaces, never duplicates
            det = detect(store, "r", rules=rules)[0]
        hyps = store.query("SELECT * FROM hypotheses ORDER BY rank")
        nxt = store.query("SELECT * FROM log_next ORDER BY rank")
        cause = store.query("SELECT cause, confidence FROM incidents").row(0)
    assert len(det.incidents) == 1 and cause == ("batch_driven", pytest.approx(0.7))
    assert hyps.height == len({r.cause for r in rules})
    assert hyps.row(0, named=True)["cause"] == "batch_driven"
    assert hyps.row(0, named=True)["status"] == "supported"
    statuses = dict(zip(hyps["cause"], hyps["status"], strict=True))
    assert statuses["rare_tokens"] == "not_evaluable"
    needs = hyps.filter(pl.col("cause") == "rare_tokens")["needs"][0]
    assert json.loads(needs) == ["grad_norm_every_step"]
    assert nxt["metric"].to_list()[0] == "grad_norm" and nxt.height <= 2
    assert "not separable" in CAUSE_TITLES["batch_driven"]


def test_every_shipped_rule_has_a_real_log_fixture_that_passes(rules, real_logs: Path) -> None:  # type: ignore[no-untyped-def]
    for rule in rules:
        real = [f for k in ("trigger", "no_trigger") for f in rule.fixtures[k] if "real_log" in f]
        assert real, f"{rule.id} has no real-log fixture"
    results = [r for r in run_fixtures(rules, real_logs) if "real_log" in r.features]
    assert results and all(r.passed and r.skipped is None for r in results), [
        (r.rule_id, r.kind, r.index) for r in results if not r.passed or r.skipped
    ]
