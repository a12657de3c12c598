"""Cause choice, honest unknowns, recovery advice and cost."""

from __future__ import annotations

import numpy as np
import pytest
from detect_helpers import curve, spike

from forensics.detect import DetectConfig, detect_data, run_data
from forensics.detect.classify import choose
from forensics.detect.model import Finding
from forensics.detect.recovery import Checkpoint, restart_checkpoint

CFG = DetectConfig()


def _f(rule: str, cause: str, conf: float, hit: bool = True) -> Finding:
    return Finding(rule, cause, hit, conf, "continue")


def test_best_rule_wins_and_a_close_rival_lowers_confidence() -> None:
    best, conf, others = choose([_f("a", "rare_tokens", 0.85), _f("b", "data_corruption", 0.8)])
    assert best is not None and best.cause == "rare_tokens"
    assert conf == pytest.approx(0.85 - 0.5 * (0.8 - 0.65)) and others[0].rule_id == "b"
    best, conf, _ = choose([_f("a", "rare_tokens", 0.85), _f("b", "stale_beta2", 0.3)])
    assert conf == 0.85
    assert choose([_f("a", "rare_tokens", 0.9, hit=False)])[0] is None


def _one_spike_frame(frame, **metrics):  # type: ignore[no-untyped-def]
    loss = spike(curve(4000), 2500, 0.6, 15)
    return frame(loss, **metrics)


def test_loss_only_one_point_spike_is_batch_driven_with_what_to_log(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = curve(4000)
    loss[2500] *= 1.6  # one point, back at once: the modded-nanogpt shape
    inc = detect_data(run_data(frame(loss), {}, "t"), rules).incidents[0]
    assert inc.cause == "batch_driven" and inc.confidence == pytest.approx(0.7)
    keys = {e.key: e for e in inc.evidence}
    assert keys["hypothesis:rare_tokens"].note == "not_evaluable"
    assert "grad_norm" in str(keys["missing_metrics"].value)
    assert inc.log_next[0].metric == "grad_norm"
    assert len(inc.findings) == len(rules)  # every rule evaluated, triggered or not


def test_rare_tokens_with_a_gradient_spike_and_sane_beta2(frame, rules) -> None:  # type: ignore[no-untyped-def]
    g = 0.3 * np.exp(np.random.default_rng(2).normal(0, 0.05, 4000))
    g[2498] = 30.0  # 100x, two steps before the loss peak
    f = _one_spike_frame(frame, grad_norm=g, lr=np.full(4000, 3e-4))
    inc = detect_data(run_data(f, {"beta2": 0.95}, "t"), rules).incidents[0]
    assert (inc.cause, inc.type, inc.recovery) == ("rare_tokens", "recoverable", "continue")
    assert inc.confidence >= 0.8 and inc.features["grad_lead"] == 2
    assert inc.grad_norm_peak == 30.0


def test_same_spike_with_stale_beta2_and_echoes(frame, rules) -> None:  # type: ignore[no-untyped-def]
    g = 0.3 * np.exp(np.random.default_rng(2).normal(0, 0.05, 4000))
    g[2499] = 30.0
    loss = spike(spike(curve(4000), 2500, 0.6, 120, offset=0.1), 2540, 0.4, 5)
    inc = detect_data(run_data(frame(loss, grad_norm=g), {"beta2": 0.999}, "t"), rules).incidents[0]
    assert inc.cause == "stale_beta2" and float(inc.features["echo_count"] or 0) >= 1
    assert inc.type == "lingering" and inc.recovery == "restart_from_checkpoint"


def test_isolated_nan_is_a_hardware_fault(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = curve(4000)
    loss[2500] = np.nan
    det = detect_data(run_data(frame(loss), {"precision": "bf16"}, "t"), rules)
    (inc,) = det.incidents
    assert (inc.cause, inc.type, inc.recovery) == ("hardware_fault", "recoverable", "continue")
    assert inc.origin == "events" and inc.onset_step == 2501


def test_degenerate_batches_twice_call_for_a_data_swap(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = curve(6000)
    for at in (2500, 4500):
        loss[at] *= 0.5
        loss = spike(loss, at + 1, 0.5, 10)
    det = detect_data(run_data(frame(loss), {}, "t"), rules)
    assert [i.cause for i in det.incidents] == ["data_corruption", "data_corruption"]
    assert {i.recovery for i in det.incidents} == {"data_swap"}


def test_restart_checkpoint_gap_scales_with_the_run() -> None:
    ckpts = [Checkpoint(s, True) for s in (500, 1000, 1500, 1900)]
    ck, gap = restart_checkpoint(2000, ckpts, 100_000, CFG)
    assert gap == 1000 and ck is not None and ck.step == 1000
    ck, gap = restart_checkpoint(2000, ckpts, 2_000, CFG)
    assert gap == 200 and ck is not None and ck.step == 1500
    with_opt = [Checkpoint(900, True), Checkpoint(1000, False)]
    ck, _ = restart_checkpoint(2000, with_opt, 100_000, CFG)
    assert ck is not None and ck.step == 900  # optimizer state preferred
    assert restart_checkpoint(500, ckpts, 100_000, CFG)[0] is None


def test_lingering_incident_gets_a_checkpoint_and_a_cost(frame, rules) -> None:  # type: ignore[no-untyped-def]
    loss = spike(curve(6000), 4000, 0.6, 30, offset=0.1)
    f = frame(loss, iter_time_ms=np.full(6000, 2000.0))
    cfg = {"world_size": 64, "global_batch_size": 512, "seq_len": 2048}
    det = detect_data(
        run_data(f, cfg, "t"), rules, None, [Checkpoint(2000, True), Checkpoint(3500, True)], 2.0
    )
    (inc,) = det.incidents
    assert inc.type == "lingering" and inc.restart_checkpoint_step == 2000
    assert inc.steps_lost == (6000 - 4001) + (4001 - 2000)
    assert inc.tokens_lost == inc.steps_lost * 512 * 2048
    assert inc.gpu_hours_lost == pytest.approx(inc.steps_lost * 2.0 * 64 / 3600)
    assert inc.cost_usd == pytest.approx((inc.gpu_hours_lost or 0) * 2.0)


def test_tokens_per_step_from_the_logs_token_counter(frame, rules) -> None:  # type: ignore[no-untyped-def]
    """No batch size in the config, but the log counts the tokens consumed (OLMo's
    `throughput/total_tokens`, 2,097,152 per step, stored as `consumed_tokens`): the cost is
    priced in tokens from what the counter gains per step, a resume's jump aside."""
    loss = spike(curve(6000), 4000, 0.6, 30, offset=0.1)
    tokens = np.arange(1, 6001) * 2_097_152.0
    tokens[3000:] += 50 * 2_097_152.0  # a jump: the counter went on from a later checkpoint
    f = frame(loss, consumed_tokens=tokens)
    det = detect_data(run_data(f, {}, "t"), rules, None, [Checkpoint(2000, True)], None)
    (inc,) = det.incidents
    assert inc.tokens_per_step == 2_097_152
    assert inc.tokens_lost == inc.steps_lost * 2_097_152
