"""A Hugging Face Trainer fp16 run logs `grad_norm: inf` (or nan) at every step its loss
scaler skipped: the start-up search for a scale and each overflow after a growth. Those are
routine, and a post-mortem that calls them hardware faults sends a team hunting a bad GPU.

tests/fixtures/hf_fp16_overflow/trainer_state.json was written by the real Trainer
(transformers 5.17, accelerate 1.15, torch 2.11+cu130) on an NVIDIA H100 by
bench/hf_fp16_run.py: a tiny Llama trained in fp16 for 400 steps, its scaler started at 2^24
and doubling every 50 clean steps. Its grad norm is non-finite at steps 1-6, 8, 159, 178,
248 and 272, and its loss never left its trend.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from forensics.analyze import AnalyzeOptions, analyze
from forensics.store import open_store

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hf_fp16_overflow"
SKIPPED = [1, 159, 178, 248, 272]  # the start-up search (1-8) is one cluster


def _detect(folder: Path, tmp_path: Path) -> tuple[list[dict], list[dict]]:
    db = tmp_path / "f.duckdb"
    result = analyze([folder], out=None, db=db, options=AnalyzeOptions(replay=False, report=False))
    with open_store(db, read_only=True) as store:
        inc = store.query(
            "SELECT onset_step, peak_step, cause FROM incidents WHERE run_id = ?",
            [result.run_id],
        ).to_dicts()
        nm = store.query(
            "SELECT step, metric, value, detail FROM near_misses WHERE run_id = ? ORDER BY step",
            [result.run_id],
        ).to_dicts()
    return inc, nm


def _with_config(tmp_path: Path, precision: str) -> Path:
    run = tmp_path / f"hf_{precision}"
    shutil.copytree(FIXTURE, run)
    (run / "config.json").write_text(json.dumps({"precision": precision}))
    return run


def test_real_trainer_fp16_overflow_steps_are_not_incidents(tmp_path: Path) -> None:
    incidents, near = _detect(FIXTURE, tmp_path)
    assert incidents == []  # main before this change: 5, four of them "hardware fault 80%"
    skipped = [m for m in near if "skipped update" in m["detail"]]
    assert [m["step"] for m in skipped] == SKIPPED
    assert "7 logged steps from step 1" in skipped[0]["detail"]
    assert all(m["metric"] == "grad_norm" for m in skipped)


def test_fp16_in_the_config_names_the_scaler(tmp_path: Path) -> None:
    incidents, near = _detect(_with_config(tmp_path, "fp16"), tmp_path)
    assert incidents == []
    said = [m["detail"] for m in near if m["step"] in SKIPPED]
    assert len(said) == len(SKIPPED)
    assert all("an fp16 loss scaler's overflow step, skipped" in d for d in said)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_without_a_scaler_a_skipped_inf_gradient_is_a_fault(tmp_path: Path, precision: str) -> None:
    """bf16 and fp32 never overflow a loss scale: an inf gradient a guard skipped is still
    the flipped bit or bad kernel the hardware-fault rule is for."""
    incidents, _ = _detect(_with_config(tmp_path, precision), tmp_path)
    peaks = {i["peak_step"] for i in incidents}
    assert {159, 178, 248, 272} <= peaks
    assert {i["cause"] for i in incidents if i["peak_step"] == 159} == {"hardware_fault"}


def test_an_inf_gradient_the_loss_felt_stays_an_incident(tmp_path: Path) -> None:
    """An applied inf update: the loss goes NaN on the next step. No scaler skipped it."""
    run = tmp_path / "applied"
    shutil.copytree(FIXTURE, run)
    state = json.loads((run / "trainer_state.json").read_text())
    for h in state["log_history"]:
        if 248 < h.get("step", 0) <= 260 and "loss" in h:
            h["loss"] = float("nan")
    (run / "trainer_state.json").write_text(json.dumps(state))
    incidents, _ = _detect(run, tmp_path)
    assert any(i["onset_step"] <= 249 <= max(i["peak_step"], 249) for i in incidents)


def _edited(tmp_path: Path, name: str, first: int, loss: float | None, last: int = 400) -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURE, run)
    state = json.loads((run / "trainer_state.json").read_text())
    for h in state["log_history"]:
        if first <= h.get("step", 0) <= last and "grad_norm" in h:
            h["grad_norm"] = float("nan")
            if loss is not None:
                h["loss"] = loss
    (run / "trainer_state.json").write_text(json.dumps(state))
    return run


@pytest.mark.parametrize("last", [400, 330])
def test_a_long_streak_of_nan_gradients_is_not_a_skip(tmp_path: Path, last: int) -> None:
    """xtuner#187 (mmengine, fp16): `loss: 2.5128 grad_norm: nan`, then nan on every line:
    the scaler skips every update from there on (to the end of the log), and the loss, still
    finite, no longer learns. 31 skipped steps in a row (300-330) is a scale collapsing, not
    its routine probe. Either is an incident."""
    incidents, near = _detect(_edited(tmp_path, f"stalled{last}", 300, None, last), tmp_path)
    assert any(i["onset_step"] <= 300 <= i["peak_step"] + 1 for i in incidents)
    assert not any(m["step"] >= 300 and "skipped update" in m["detail"] for m in near)


def test_a_loss_logged_as_zero_beside_a_nan_gradient_is_not_a_skip(tmp_path: Path) -> None:
    """jiahe7ay/MINI_LLM#17 and sunwei925/LMM-EVQA#2: the Trainer logs `loss: 0.0` with
    `grad_norm: nan` once the run is broken. A finite loss, but not one a skipped step
    leaves, even when the loss comes back after: the incident stays."""
    incidents, _ = _detect(_edited(tmp_path, "zero", 300, 0.0, 303), tmp_path)
    assert any(i["onset_step"] <= 300 <= i["peak_step"] + 1 for i in incidents)


def test_a_skip_read_at_the_local_log_interval(tmp_path: Path) -> None:
    """A run logs every 4 steps, then every step from 2900 (its interval reads 1). The
    scaler grew at 2000 and overflowed at 2003: the logged scale never moved, the grad norm
    is inf at 2004 and the loss is on its level at 2008, the next point. That next point is
    one local interval on, not 1 step: a skip, not a hardware fault (main before: one)."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    run = tmp_path / "run"
    steps = [*range(4, 2900, 4), *range(2900, 5000)]
    with SummaryWriter(str(run)) as w:
        for step in steps:
            w.add_scalar(
                "train/loss", 2.5 + 3 * (step / 50 + 1) ** -0.5 + rng.normal(0, 0.01), step
            )
            grad = math.inf if step == 2004 else 0.8 * math.exp(rng.normal(0, 0.1))
            w.add_scalar("train/grad_norm", grad, step)
            w.add_scalar("train/loss_scale", 32768.0, step)
    (run / "config.json").write_text(json.dumps({"precision": "fp16"}))
    incidents, near = _detect(run, tmp_path)
    assert incidents == []
    assert [m["step"] for m in near if "overflow step, skipped" in m["detail"]] == [2004]
