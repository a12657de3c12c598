"""Every scenario shows its failure where it was injected, and `clean` shows none."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from forensics.errors import SimulationError
from forensics.sim.scenarios import CAUSES, SCENARIOS, TYPES, lr_baseline
from forensics.sim.simulate import base_config, simulate
from forensics.sim.twin import fixed_loss

from .conftest import TEST_STEPS, Run


def trend(run: Run, step: int) -> float:
    """Median loss of the 30 steps before `step`."""
    return float(np.median([r["loss"] for r in run.rows[max(0, step - 31) : step - 1]]))


def injected_at(run: Run) -> int:
    return int(run.truth["injected"][0]["step"])


def test_truth_json_shape(sim_run) -> None:
    for name in SCENARIOS:
        run = sim_run(name)
        truth = json.loads((run.dir / "truth.json").read_text())
        keys = {"scenario", "at", "strength", "injected", "expected", "twin"}
        assert set(truth) == keys and truth["scenario"] == name
        for exp in truth["expected"]:
            keys = {"cause", "type", "onset_step", "peak_step", "typing"}
            # a trigger + amplifier fault also says which of the two is the root cause
            assert set(exp) == keys | ({"attribution"} if name == "stale_beta2" else set())
            assert exp["cause"] in CAUSES and exp["type"] in TYPES
            assert 1 <= exp["onset_step"] <= exp["peak_step"] <= TEST_STEPS
            # the type is the rule's verdict: a recovery step exactly when recoverable
            assert (exp["typing"]["recovery_step"] is not None) == (exp["type"] == "recoverable")
        assert (truth["expected"] == []) == (name == "clean")
        assert (truth["twin"] is None) == (name == "clean")
        if name != "clean":
            assert (run.dir.parent / truth["twin"]).is_file()


def test_clean_has_no_incident(sim_run) -> None:
    run = sim_run("clean")
    warm = base_config("tiny", TEST_STEPS, "cpu", 1337).warmup_steps
    for r in run.rows[warm:]:
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) and not r["skipped"]
        assert r["loss"] < 1.5 * trend(run, r["step"]), f"clean run spikes at step {r['step']}"


@pytest.mark.parametrize("name", ["rare_tokens", "stale_beta2", "data_corruption"])
def test_spike_at_least_50_percent_above_trend(sim_run, name: str) -> None:
    run = sim_run(name)
    at = injected_at(run)
    peak = run.truth["expected"][0]["peak_step"]
    window = [run.row(s)["loss"] for s in range(at, peak + 1)]
    assert max(window) >= 1.5 * trend(run, at), (name, max(window), trend(run, at))
    before = [run.row(s)["loss"] for s in range(at - 20, at)]
    assert max(before) < 1.5 * trend(run, at), f"{name}: a spike before the injection"


def test_rare_tokens_grad_norm_spike_and_recovery(sim_run) -> None:
    run = sim_run("rare_tokens")
    at = injected_at(run)
    assert run.row(at)["grad_norm"] > 5 * run.row(at - 1)["grad_norm"]
    assert run.row(at + 1)["loss"] < 1.2 * trend(run, at)


def test_stale_beta2_over_large_update(sim_run) -> None:
    run = sim_run("stale_beta2")
    at = injected_at(run)
    assert json.loads((run.dir / "config.json").read_text())["beta2"] == 0.999
    before = np.median([run.row(s)["update_norm"] for s in range(at - 20, at)])
    assert max(run.row(s)["update_norm"] for s in range(at, at + 10)) > 2 * before


def test_stale_beta2_root_cause_is_what_the_fix_removes(sim_run) -> None:
    """The amplifier is the root cause only where restarting from the checkpoint before the
    burst with beta2 = 0.95 (the burst kept) removes half of the echo; else the trigger."""
    run = sim_run("stale_beta2")
    (exp,) = run.truth["expected"]
    a = exp["attribution"]
    assert a["fix"] == {"beta2": 0.95} and a["trigger"] == "rare_tokens"
    assert a["damage"] > 0 and a["share_removed"] == pytest.approx(
        1 - a["damage_fixed"] / a["damage"], abs=1e-3
    )
    want = "stale_beta2" if a["share_removed"] >= 0.5 else "rare_tokens"
    assert exp["cause"] == a["root_cause"] == want


def test_fixed_run_without_a_fix_is_the_run(sim_run) -> None:
    """The fixed run restarts from the checkpoint on the logged batches: with nothing
    changed it reproduces the logged losses exactly, so what a fix removes is the fix's."""
    run = sim_run("stale_beta2")
    a = run.truth["expected"][0]["attribution"]
    ckpt, hi = a["checkpoint"], a["window"][1]
    again = fixed_loss(run.rows, run.dir, ckpt, hi, {})
    assert [r["loss"] for r in again] == [r["loss"] for r in run.rows[:hi]]


def test_data_corruption_dips_below_trend_then_spikes(sim_run) -> None:
    run = sim_run("data_corruption")
    at = injected_at(run)
    end = at + int(run.truth["injected"][0]["params"]["batches"])
    assert min(run.row(s)["loss"] for s in range(at, end)) < 0.2 * trend(run, at)
    assert run.row(end)["loss"] > 1.5 * trend(run, at)


def test_lr_too_high_spikes_after_warmup(sim_run) -> None:
    run = sim_run("lr_too_high")
    at = injected_at(run)  # end of warmup
    base = lr_baseline(run.rows, at)
    assert max(r["loss"] for r in run.rows[at : at + 60]) >= 1.5 * base
    assert run.row(at)["param_norm"] > 2 * run.row(1)["param_norm"]


def test_fp16_overflow_halves_scale_and_skips(sim_run) -> None:
    run = sim_run("fp16_overflow")
    at = injected_at(run)
    n = run.truth["injected"][0]["params"]["steps"]
    assert [run.row(s)["skipped"] for s in range(at, at + n)] == [1] * n
    scales = [run.row(s)["loss_scale"] for s in range(at, at + n + 1)]
    assert all(b == a / 2 for a, b in zip(scales, scales[1:], strict=False)), scales
    assert not math.isfinite(run.row(at)["loss"])
    assert not any(r["skipped"] for r in run.rows[at + n : at + n + 20])


def test_hardware_fault_nonfinite_grad_norm_at_exactly_that_step(sim_run) -> None:
    run = sim_run("hardware_fault")
    at = injected_at(run)
    bad = [r["step"] for r in run.rows if not math.isfinite(r["grad_norm"])]
    assert bad == [at]
    assert run.row(at)["skipped"] == 1 and math.isfinite(run.row(at)["loss"])
    flip = run.truth["injected"][0]["params"]
    assert flip["bit"] == 30 and abs(flip["after"]) > 1e30


def test_bad_parameters_are_clear_errors(tmp_path) -> None:
    with pytest.raises(SimulationError, match="unknown scenario 'nope'"):
        simulate("nope", tmp_path)
    with pytest.raises(SimulationError, match="--strength must be in"):
        simulate("rare_tokens", tmp_path, steps=200, strength=3.0)
    with pytest.raises(SimulationError, match="--at 5 must leave"):
        simulate("hardware_fault", tmp_path, steps=200, at=5)
    with pytest.raises(SimulationError, match="unknown preset"):
        simulate("clean", tmp_path, preset_name="huge")


def test_plot_without_chromium_is_a_self_contained_html(tmp_path, monkeypatch) -> None:
    """No Chromium for the PNG: loss.html must open offline (plotly.js inside, no CDN)."""
    import plotly.graph_objects as go

    from forensics.sim.report import PLOT_HTML, plot_run

    def no_browser(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no Chromium")

    monkeypatch.setattr(go.Figure, "write_image", no_browser)
    rows = [{"step": s, "loss": 3.0 - s / 100, "grad_norm": 1.0} for s in range(1, 60)]
    out = plot_run(tmp_path, rows, {"scenario": "clean", "injected": []})
    html = out.read_text()
    assert out.name == PLOT_HTML
    assert 'src="https://cdn.plot.ly' not in html
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js is embedded
