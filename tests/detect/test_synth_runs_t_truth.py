"""The second generator's truth says what its log shows (bench/synth_runs_t.py): a garbage
batch averaged into a mean-logged window is visible, and an injection below the +15% bar at
every logged point is `faint`, which the scorer counts neither as a miss nor, when noise lifts
it over the threshold, as a false alarm."""

from __future__ import annotations

from bench import synth_runs_t  # type: ignore[import-not-found]
from bench.accuracy import score  # type: ignore[import-not-found]


def test_a_garbage_batch_averaged_into_its_window_is_a_visible_incident() -> None:
    run = synth_runs_t.make_run(123)  # wandb, mean of every 8 steps, corrupt batch at 3275
    assert run.interval == 8 and run.fmt == "wandb"
    (t,) = run.truth
    assert t["cause"] == "data_corruption" and t["onset"] == 3275
    assert t["expected_cause"] == "batch_driven"  # averaged: not separable from rare tokens


def test_a_faint_injection_is_neither_a_miss_nor_a_false_alarm() -> None:
    run = synth_runs_t.make_run(159)  # rare_tokens at 2141: +14.3% noise-free at 2144
    assert [f["onset"] for f in run.faint] == [2141]
    truth = {"run": run.name, "interval": run.interval, "incidents": run.truth,
             "faint": run.faint}  # fmt: skip
    found = {"id": 2, "peak_step": 2144, "onset_step": 2144, "peaks": [{"step": 2144}]}
    hw = {"id": 1, "peak_step": 964, "onset_step": 964, "peaks": [{"step": 964}]}
    s = score(truth, [hw, found], int(run.steps[-1]))
    assert s.false == [] and s.n_detected == 1 and s.tp_truth == 1 and not s.clean
