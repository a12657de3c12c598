"""Issue 15: the share of the damage stale_beta2's fix removes, measured as the truth defines
it (forensics/replay/probes/fix_share.py): beta2 = 0.95 restarted from a checkpoint before the
incident, the damage being the largest loss above the run *without the trigger* (ordinary
batches of the run's own data trained at the trigger's steps; its updates skipped only where
none is left) on the ordinary batches that follow it. Replay used to measure it from five
steps before the onset, as the loss added above each batch's own cost, and stated beta2 where
its fix removes 14-44% (truth) because that measure gave 52-84%."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from replay_helpers import RUN, B, T, V, add_incident, tiny_config  # type: ignore[import-not-found]

from bench.scenario_truth import check, train  # type: ignore[import-not-found]
from forensics.ingest import ingest
from forensics.replay.context import Checkpoint, load_run, select_incidents
from forensics.replay.plan import BIG, make_plan
from forensics.replay.probes.base import Session
from forensics.replay.probes.fix_share import (
    Baseline,
    FixShare,
    SkipUpdate,
    fix_checkpoint,
    measure_fix,
    ordinary_batches,
)
from forensics.replay.runner import rebuild
from forensics.replay.verdicts import share
from forensics.sim.data import INJECT_SHARD, BatchRecord, prepare_data, write_shard
from forensics.sim.run import train_run
from forensics.sim.trainer import manifest_batches, resume, train_step, train_steps
from forensics.store import open_store

BURST = range(35, 38)


def _window(**kw: Any) -> FixShare:
    base: dict[str, Any] = {
        "checkpoint_step": 10, "end_step": 45, "hard_steps": [35, 36, 37],
        "steps": [38, 39, 40], "original": [5.0, 4.6, 4.2], "fixed": [4.3, 4.4, 4.1],
        "clean": [4.0, 4.1, 4.0], "a": 0.1, "baseline": Baseline({35: 50, 36: 51, 37: 53}),
    }  # fmt: skip
    return FixShare(**(base | kw))


def test_share_is_one_minus_the_fixed_damage_over_the_damage() -> None:
    w = _window()
    assert w.damage == (1.0, 38)  # the largest loss above the trigger-free run
    assert w.damage_fixed == (pytest.approx(0.3), 39)  # wherever the fix's is largest
    assert w.share == pytest.approx(0.7)
    n = w.numbers()
    assert n["fix_share_removed"] == pytest.approx(0.7) and n["fix_damage_step"] == 38
    assert share("stale_beta2", json.loads(json.dumps(n)))[0] == pytest.approx(0.7)
    assert share("stale_beta2", n)[1].endswith(
        ", 1 at step 38, 0.3 with beta2 = 0.95 alone from the checkpoint of step 10"
    )
    assert n["fix_baseline"] == "ordinary batches" and n["fix_skipped_steps"] == []
    assert json.loads(json.dumps(n))["fix_substitutes"] == {"35": 50, "36": 51, "37": 53}
    assert "removes 70% of the damage" in w.sentence()
    assert "batches 35-37 replaced by the ordinary batches of steps 50, 51, 53" in w.sentence()
    # where the source has no ordinary batch left, the update is skipped, and the row says so
    w = _window(baseline=Baseline({35: 50}, [36, 37]))
    assert w.numbers()["fix_baseline"] == "ordinary batches and skipped updates"
    assert "the updates of batches 36-37 skipped (no ordinary batch left)" in w.sentence()
    assert _window(baseline=Baseline({}, [35, 36, 37])).numbers()["fix_baseline"] == (
        "skipped updates"
    )


def test_a_fix_that_did_more_harm_removes_none_of_the_damage() -> None:
    """The fixed run's damage above the trigger-free run exceeds the original's (stale beta2
    draw 369036 at step 160: 2.32 against 1.27): the share is below zero, and the page says
    the fix removes none of it, as the stored (clipped) share and the draws' spread do, not
    "removes -82%" beside "0% to 0%"."""
    w = _window(fixed=[5.9, 4.4, 4.1], other_clean=[[4.1, 4.2, 4.0]])
    assert w.share == pytest.approx(-0.9)
    assert share("stale_beta2", w.numbers())[0] == 0.0
    text = w.sentence()
    assert "the fix removes none of the damage (0%; it did as much or more)" in text
    assert "is 1.9 (step 38) instead of 1 (step 38)" in text
    assert "-" not in text.split("removes")[1].split(":")[0]
    assert "; 0% to 0% over 2 draws" in text


def test_other_stand_ins_give_the_share_its_spread() -> None:
    """Other ordinary batches in the run without the trigger move the share a few points:
    the first draw decides, the spread is stored and printed, and a spread over both sides
    of half says that the batch and beta2 matter about equally."""
    w = _window(other_clean=[[4.1, 4.2, 4.0], [3.9, 4.0, 4.0]])
    # damages 0.9 (fixed 0.2) and 1.1 (fixed 0.4) above the other two runs without it
    assert w.draws == [pytest.approx(0.7), pytest.approx(1 - 0.2 / 0.9), pytest.approx(7 / 11)]
    assert w.share == pytest.approx(0.7)
    assert w.spread == (pytest.approx(7 / 11), pytest.approx(1 - 0.2 / 0.9))
    n = json.loads(json.dumps(w.numbers()))
    assert n["fix_share_spread"] == [pytest.approx(7 / 11), pytest.approx(1 - 0.2 / 0.9)]
    assert "; 64% to 78% over 3 draws of the ordinary batches" in w.sentence()
    assert share("stale_beta2", n)[1].endswith("64% to 78% over 3 draws of the ordinary "
                                               "batches that stand in for the trigger")  # fmt: skip
    assert "both sides" not in w.sentence()
    # damages 0.65 (fixed 0.3) and 0.55 (fixed 0.3): 54% and 45%, on both sides of half
    w = _window(fixed=[4.3, 4.4, 4.1], clean=[4.35, 4.1, 4.0], other_clean=[[4.45, 4.1, 4.0]])
    assert w.spread == (pytest.approx(1 - 0.3 / 0.55), pytest.approx(1 - 0.3 / 0.65))
    assert "(on both sides of half: the batch and beta2 matter about equally)" in w.sentence()
    assert _window().spread is None and "draws" not in _window().sentence()


def test_the_ordinary_batches_come_after_the_window_then_before_it_else_a_skip() -> None:
    """Fresh batches first (none of the re-runs trains the steps after `end`), nearest first,
    hard ones (b(t) above trend + a, or not finite) passed over; then those before the first
    re-run step; a hard step left over is skipped."""
    costs = {t: 4.0 for t in range(1, 61)} | {46: 9.0, 47: math.nan}
    s = SimpleNamespace(data=SimpleNamespace(records=dict.fromkeys(range(1, 49))), costs=costs,
                        plan=SimpleNamespace(trend=4.0, noise=0.1), replayer=None)  # fmt: skip
    base = ordinary_batches(s, [35, 36, 37], 11, 45)  # type: ignore[arg-type]
    assert base.substitute == {35: 48, 36: 10, 37: 9} and base.skipped == []
    s.data.records = dict.fromkeys(range(11, 48))  # nothing before step 11, 46-47 hard
    base = ordinary_batches(s, [35, 36, 37], 11, 45)  # type: ignore[arg-type]
    assert base.substitute == {} and base.skipped == [35, 36, 37]


def test_a_diverged_original_counts_as_unbounded_damage() -> None:
    w = _window(original=[math.nan, 4.6, 4.2], fixed=[4.3, 4.4, 4.1])
    assert w.damage[0] == BIG and w.share == pytest.approx(1.0)
    w = _window(original=[math.inf, 4.6, 4.2], fixed=[math.nan, 4.4, 4.1])
    assert w.share == 0.0
    # a step where the trigger-free run itself is not finite is not compared
    assert _window(clean=[math.nan, 4.1, 4.0]).damage == (pytest.approx(0.5), 39)


def test_no_share_without_damage_above_the_noise_or_without_ordinary_batches() -> None:
    w = _window(original=[4.05, 4.15, 4.0])
    assert w.share is None and "within the noise allowance" in w.sentence()
    w = _window(steps=[], original=[], fixed=[], clean=[])
    assert w.share is None and "no ordinary batch follows" in w.sentence()
    assert share("stale_beta2", w.numbers()) == (None, share("stale_beta2", w.numbers())[1])


def _session(checkpoints: list[int], onset: int, restored: int) -> Any:
    ckpts = [Checkpoint(c, f"c{c}.pt", True, True, "forensics-gpt") for c in checkpoints]
    plan = SimpleNamespace(incident=SimpleNamespace(onset=onset), offending=onset)
    return SimpleNamespace(data=SimpleNamespace(checkpoints=ckpts), plan=plan,
                           checkpoint_step=restored)  # fmt: skip


def test_the_fix_restarts_where_beta2_0_95_has_settled() -> None:
    """20 steps (1 / (1 - 0.95)) before the incident when the run has such a checkpoint no
    more than 80 steps back: a restart two steps before the trigger measures the beta2
    switch's transient."""
    assert fix_checkpoint(_session([30, 60, 132, 150], 152, 150)).step == 132
    assert fix_checkpoint(_session([30, 60, 150], 152, 150)).step == 150  # 60: 92 steps back
    assert fix_checkpoint(_session([30, 90, 150], 152, 150)).step == 90
    assert fix_checkpoint(_session([140, 150], 152, 150)).step == 150  # none 20 steps back


def test_a_skipped_update_leaves_weights_and_adam_untouched(tmp_path: Path) -> None:
    run = _stale_run(tmp_path)
    state = resume(run, 10)
    rec = train_steps(state, 1)  # step 11, updated
    weights = [p.detach().clone() for p in state.model.parameters()]
    moments = [st["exp_avg_sq"].clone() for st in state.optimizer.state.values()]
    counts = [float(st["step"]) for st in state.optimizer.state.values()]

    row = train_step(state, manifest_batches(run)(12), [SkipUpdate(12)])
    assert state.step == 12 and row["update_norm"] == 0.0 and math.isfinite(row["loss"])
    assert all(torch.equal(a, b) for a, b in zip(weights, state.model.parameters(), strict=True))
    after = list(state.optimizer.state.values())
    assert all(torch.equal(m, st["exp_avg_sq"]) for m, st in zip(moments, after, strict=True))
    assert counts == [float(st["step"]) for st in after]
    assert rec[0]["update_norm"] > 0


def _stale_run(tmp_path: Path) -> Path:
    """A tiny beta2 = 0.999 run of 60 steps with a burst of rare-band batches at steps 35-37
    and checkpoints after steps 10 and 30."""
    run = tmp_path / "run"
    if (run / "metrics.jsonl").is_file():
        return run
    lang = prepare_data(run, V, 32768, 7)
    n = B * T + 1
    rare = np.random.default_rng(0).integers(lang.rare_start, V, n * len(BURST))
    write_shard(run / INJECT_SHARD, rare.astype(np.uint16))
    burst = {t: [BatchRecord(t, 0, INJECT_SHARD, i * n, n, T, B)] for i, t in enumerate(BURST)}
    train_run(tiny_config(beta2=0.999, ckpt_steps=[10, 30], total_steps=60), run, burst)
    return run


def test_the_fix_is_measured_from_the_settled_checkpoint_against_the_run_without_the_burst(
    tmp_path: Path,
) -> None:
    run = _stale_run(tmp_path)
    with open_store(tmp_path / "s.duckdb") as store:
        ingest(store, [run], run=RUN)
        add_incident(store, 1, BURST[0], "stale_beta2", 0.5, [], peak=BURST[-1])
        data = load_run(store, RUN)
    s = Session(data, make_plan(data, select_incidents(data, 1, None)[0], 8), torch.device("cpu"))
    rebuild(s, None, {})
    assert s.checkpoint_step == 30  # the runner restores the latest checkpoint
    fix = measure_fix(s, {"beta2": 0.95})
    assert fix is not None and fix.checkpoint_step == 10  # the fix: 20 steps before the burst
    assert fix.hard_steps[:3] == list(BURST)  # the rare-band batches are the trigger
    assert fix.steps and min(fix.steps) > BURST[-1] and not set(fix.steps) & set(fix.hard_steps)
    # the original is the run as logged; the trigger-free run is the same run with ordinary
    # batches of its own data, logged after the window, trained at the burst's steps
    logged = {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").open())}
    assert fix.original == [logged[t] for t in fix.steps]
    sub = fix.baseline.substitute
    assert fix.baseline.kind == "ordinary batches" and sorted(sub) == fix.hard_steps
    assert list(sub.values()) == sorted(sub.values()) and min(sub.values()) > s.plan.end
    state = resume(run, 10)
    batches = manifest_batches(run)
    clean = {}
    while state.step < s.plan.end:
        t = state.step + 1
        clean[t] = train_step(state, batches(sub.get(t, t)))
    assert fix.clean == [clean[t]["loss"] for t in fix.steps]
    # the other draws train the next ordinary batches after those at the burst's steps
    assert len(fix.draws) == len(fix.other_clean) + 1 and fix.draws[0] == fix.share
    if fix.spread is not None:
        assert fix.spread[0] <= min(1.0, max(0.0, fix.share or 0.0)) <= fix.spread[1]
    hurt = max(o - c for o, c in zip(fix.original, fix.clean, strict=True))
    left = max(f - c for f, c in zip(fix.fixed, fix.clean, strict=True))
    assert fix.damage[0] == pytest.approx(max(hurt, 0.0))
    if fix.share is not None:
        assert fix.share == pytest.approx(1.0 - max(left, 0.0) / hurt)


@pytest.mark.slow
def test_a_pair_whose_fix_removes_little_states_the_trigger(tmp_path: Path) -> None:
    """stale_beta2 792177 @184 (300 steps): restarting from the checkpoint before the burst
    with beta2 = 0.95 removes 14% of the echo (truth.json), so the root cause is the burst,
    rare_tokens. The old measure (from 5 steps before the onset, loss above each batch's own
    cost) gave beta2 = 0.95 alone 56% and stated stale_beta2."""
    # the simulated truth decides whether this machine has the case: read it before the
    # (slower) analysis with replay, which a machine without the case need not run
    run_dir = train("stale_beta2", 792177, 184, 300, tmp_path)
    truth = json.loads((run_dir / "truth.json").read_text())
    share_truth = truth["expected"][0]["attribution"]["share_removed"]
    if truth["expected"][0]["cause"] != "rare_tokens":
        # CPU kernels differ between machines and this burst is chaotic: on an AMD EPYC
        # host the same seed's fix removes 50%, not 14%, and the case is not this one
        pytest.skip(
            f"on this machine the simulated fix removes {share_truth:.1%} (>= 50%), not 14%"
        )
    row = check("stale_beta2", 792177, 184, 300, tmp_path, trained=True)
    assert row["injected"] == "rare_tokens", row
    assert row["ok"], row
    assert row["amplifier"].startswith("stale_beta2"), row  # confirmed, kept with its role
    with open_store(tmp_path / "stale_beta2-792177-184-out" / "forensics.duckdb") as store:
        got = store.query(
            "SELECT r.numbers, c.share_removed FROM replays r JOIN contributions c USING "
            "(run_id, incident_id) WHERE r.probe = 'stale_beta2' AND c.cause = 'stale_beta2'"
        ).to_dicts()[0]
    numbers = json.loads(got["numbers"])
    assert got["share_removed"] == pytest.approx(numbers["fix_share_removed"])
    assert got["share_removed"] < 0.5
    assert numbers["fix_checkpoint_step"] == 164  # 20 steps before the burst, as the truth
