"""Heavy-tailed loss noise and the fp16 scaler's routine probe: what is not an incident.

A Student-t micro-batch loss can throw one +15% point (and its AR echo) with no batch behind
it; a batch hard enough to lift the loss lifts its own gradient. When the gradient norm is
logged every step and stays within its own noise, the jump is a near-miss. And the scaler's
single halving a window before an overflow cascade is not the cascade's onset.
"""

from __future__ import annotations

import numpy as np
from detect_helpers import curve

from bench import synth_runs_t  # type: ignore[import-not-found]
from forensics.detect import detect, detect_data, load_rules, run_data
from forensics.ingest import ingest
from forensics.store import open_store


def _jump(n: int = 4000, at: int = 3000) -> np.ndarray:
    """A clean curve with one +18% point decaying like AR(1) noise (0.75 per step)."""
    loss = curve(n, noise=0.006, seed=3)
    loss[at:] *= np.exp(0.17 * 0.75 ** np.arange(n - at))
    return loss


def _grad(n: int = 4000, seed: int = 4) -> np.ndarray:
    return 0.3 * np.exp(np.random.default_rng(seed).normal(0, 0.08, n))


def test_a_lone_jump_with_a_quiet_gradient_is_a_near_miss(frame, rules) -> None:  # type: ignore[no-untyped-def]
    det = detect_data(run_data(frame(_jump(), grad_norm=_grad()), {}, "t"), rules)
    assert det.incidents == []
    (miss,) = [m for m in det.near_misses if m.metric == "loss"]
    assert miss.step == 3001 and 1.14 < miss.ratio < 1.22
    assert "no gradient counterpart" in miss.detail


def test_the_same_jump_with_its_gradient_is_an_incident(frame, rules) -> None:  # type: ignore[no-untyped-def]
    g = _grad()
    g[3000] *= 5  # the batch's own gradient, logged at its step
    det = detect_data(run_data(frame(_jump(), grad_norm=g), {}, "t"), rules)
    assert [i.peak_step for i in det.incidents] == [3001]


# Written by the real HF Trainer with forensics.record (tests/record's recorded run, 50 steps,
# a rare-token batch at step 38): per-step loss and pre-clip gradient norm, 3 decimals.
HF_LOSS = [
    4.833, 4.795, 4.737, 4.651, 4.498, 4.432, 4.453, 4.355, 4.323, 4.235, 4.152, 4.075, 4.049,
    4.045, 4.002, 4.012, 3.979, 3.742, 3.839, 3.732, 3.667, 3.911, 3.929, 3.762, 3.527, 3.711,
    3.721, 3.646, 3.5, 3.733, 3.682, 3.649, 3.748, 3.42, 3.581, 3.892, 3.73, 7.624, 3.749,
    3.514, 3.773, 3.317, 3.883, 3.769, 3.72, 3.593, 3.329, 3.561, 3.74, 3.909,
]  # fmt: skip
HF_GRAD = [
    1.069, 1.41, 1.276, 1.332, 1.615, 1.686, 1.779, 1.182, 1.203, 1.358, 1.152, 1.178, 1.138,
    1.01, 0.996, 0.926, 0.727, 1.164, 1.44, 1.157, 0.828, 0.7, 0.633, 0.513, 0.838, 0.556,
    0.528, 0.606, 7.817, 0.541, 0.543, 0.637, 0.474, 0.719, 0.619, 0.773, 0.74, 3.621, 0.685,
    0.732, 0.531, 0.966, 0.838, 3.95, 1.133, 3.644, 0.807, 0.587, 0.948, 0.871,
]  # fmt: skip


def test_a_batch_gradient_early_in_training_is_not_read_as_noise(frame, rules) -> None:  # type: ignore[no-untyped-def]
    # The gradient norm falls from ~1.7 to ~0.6 over the first 30 steps; then the rare-token
    # batch doubles the loss and lifts the gradient 5x. A spread taken around one median of
    # the falling precursor read that as "within its own noise" and filed a near-miss.
    det = detect_data(
        run_data(frame(np.array(HF_LOSS), grad_norm=np.array(HF_GRAD)), {}, "t"), rules
    )
    assert 38 in [i.peak_step for i in det.incidents]
    assert not [m for m in det.near_misses if m.metric == "loss" and m.step == 38]


def test_a_jump_is_kept_when_the_gradient_cannot_speak(frame, rules) -> None:  # type: ignore[no-untyped-def]
    # loss only, or a gradient logged every 4th step (a batch's one-step gradient falls
    # between the points): the log cannot tell noise from a batch, so it stays an incident
    loss = _jump()
    assert [i.peak_step for i in detect_data(run_data(frame(loss), {}, "t"), rules).incidents] == [
        3001
    ]
    g = _grad()
    sparse = np.where(np.arange(1, 4001) % 4 == 0, g, np.nan)
    det = detect_data(run_data(frame(loss, grad_norm=sparse), {}, "t"), rules)
    assert [i.peak_step for i in det.incidents] == [3001]


def test_a_scaler_probe_before_an_overflow_cascade_is_not_its_onset(frame, rules) -> None:  # type: ignore[no-untyped-def]
    n = 400
    loss = curve(n, noise=0.01, seed=5)
    g = _grad(n)
    scale = np.full(n, 16384.0)
    skipped = np.zeros(n)
    g[137], skipped[137] = np.inf, 1  # step 138: one overflow, one skipped step ...
    scale[138:] /= 2  # ... and the halved scale printed at step 139
    loss[159:163], g[159:163], skipped[159:163] = np.nan, np.nan, 1  # steps 160-163
    for k in range(4):
        scale[160 + k :] /= 2
    cols = {"grad_norm": g, "loss_scale": scale, "skipped_iters": skipped}
    det = detect_data(run_data(frame(loss, **cols), {"precision": "fp16"}, "t"), rules)
    (inc,) = det.incidents
    assert inc.onset_step == 160
    assert {e.step for e in inc.events} >= {138, 160}  # the probe is still listed beside it


def test_the_second_generators_noise_alarm_is_a_stored_near_miss(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # trun-6471187: a clean W&B-style JSONL run whose Student-t loss noise throws +15.3% at
    # step 4955 (grad norm logged every step, flat): written, ingested, detected, stored
    run = synth_runs_t.make_run(6471187)
    folder = synth_runs_t.write_run(run, tmp_path)
    with open_store(tmp_path / "x.duckdb") as store:
        ingest(store, [folder], run=run.name)
        (det,) = detect(store, run.name, rules=load_rules())
        assert det.incidents == []
        rows = store.query(
            "SELECT step, metric, detail FROM near_misses WHERE run_id = ? AND metric = 'loss'",
            [run.name],
        ).to_dicts()
    assert [r["step"] for r in rows] == [4955]
    assert "no gradient counterpart" in rows[0]["detail"]
