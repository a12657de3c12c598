"""The LR a run's config implies (detect/schedule.py), for runs that log no LR: checked
against the LR real writers did log (the real HF Trainer's schedulers; a real Megatron log,
whose scheduler does not advance on skipped fp16 iterations), then used as lr_frac."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from detect_helpers import stored_features, stored_incidents

from forensics.analyze import AnalyzeOptions, analyze
from forensics.detect.schedule import config_lr_frac, schedule_step
from forensics.detect.store import load_run
from forensics.ingest import ingest
from forensics.ingest.config import add_canonical
from forensics.store import open_store

BIGSCIENCE = (
    "bigscience-workshop__bigscience/"
    "experiments__gpt2-meg__meg_gpt2_base_n4_dp1_tp4_pp4-1809579.out"
)


def _config_and_lr(db: Path, run: str) -> tuple[dict[str, object], list[tuple[int, float]]]:
    with open_store(db, read_only=True) as store:
        raw = store.query("SELECT config FROM runs WHERE run_id = ?", [run])["config"][0]
        cfg = json.loads(raw)
        rows = store.con.execute(
            "SELECT step, value FROM metrics WHERE run_id = ? AND metric = 'lr' ORDER BY step",
            [run],
        ).fetchall()
    return cfg, rows


@pytest.mark.parametrize(
    ("kind", "warmup"), [("cosine", 10), ("linear", 10), ("constant_with_warmup", 15)]
)
def test_hf_schedules_match_what_the_trainer_logged(kind: str, warmup: int, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from hf_toy import Regressor, train

    state = train(tmp_path / kind, Regressor(None), lr_scheduler_type=kind, warmup_steps=warmup)
    db = tmp_path / "f.duckdb"
    with open_store(db) as store:
        ingest(store, [state.parent.parent], run=kind)
    cfg, logged = _config_and_lr(db, kind)
    assert cfg["lr_schedule"] == kind.split("_")[0] and cfg["warmup_steps"] == warmup
    assert len(logged) == 60
    for step, lr in logged:  # the Trainer logs at step s the LR update s used: schedule(s - 1)
        frac = config_lr_frac(step - 1, cfg)
        assert frac is not None and frac * float(cfg["peak_lr"]) == pytest.approx(lr, abs=1e-6)


def test_megatron_cosine_matches_the_real_log_once_skips_are_taken_off(
    real_logs: Path, tmp_path: Path
) -> None:
    """The bigscience GPT-2 run: lr 1.5e-4, min_lr 1e-5, cosine over lr_decay_iters 800, 1% of
    it warm-up; its fp16 scaler skipped 19 of the first 30 iterations, and the LR it logs is
    the schedule at (iteration - skipped iterations)."""
    db = tmp_path / "f.duckdb"
    with open_store(db) as store:
        ingest(store, [real_logs / BIGSCIENCE], run="bs")
        data = load_run(store, "bs")
    cfg, logged = _config_and_lr(db, "bs")
    assert (cfg["lr_schedule"], cfg["warmup_steps"], cfg["lr_decay_steps"]) == ("cosine", 8, 800)
    assert len(logged) == 20
    for step, lr in logged:
        frac = config_lr_frac(schedule_step(data, step), cfg)
        assert frac is not None and frac * 1.5e-4 == pytest.approx(lr, rel=2e-3, abs=1e-8)
    # without the skips the schedule runs ahead: at iteration 10 it would be at its peak
    assert config_lr_frac(10, cfg) == pytest.approx(1.0, abs=1e-4) and logged[0] == (10, 0.0)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"lr_scheduler_type": "cosine_with_min_lr"}, "cosine"),
        ({"lr_decay_style": "inverse-square-root"}, "inverse_sqrt"),
        ({"scheduler": {"name": "WSD"}}, "wsd"),
        ({"lr_scheduler_type": "cosine_with_restarts"}, None),  # rises again mid-run
        ({"scheduler": {"name": "one_cycle"}}, None),
        # a continued pre-training run re-warms at its start: its warm-up, then the cosine
        ({"scheduler": {"name": "rewarm_cosine"}}, "cosine"),
        ({"lr_scheduler_type": "polynomial"}, None),
    ],
)
def test_schedule_names(raw: dict[str, object], expected: str | None) -> None:
    flat = {f"{k}.name" if isinstance(v, dict) else k: v.get("name") if isinstance(v, dict) else v
            for k, v in raw.items()}  # fmt: skip
    assert add_canonical(flat).get("lr_schedule") == expected


def test_what_the_config_cannot_say_stays_unknown() -> None:
    base = {"warmup_steps": 100, "total_steps": 1000, "peak_lr": 1e-3}
    assert config_lr_frac(50, base | {"lr_schedule": None}) is None  # no schedule name
    assert config_lr_frac(50, {"lr_schedule": "cosine", "total_steps": 1000}) is None
    assert config_lr_frac(50, base | {"lr_schedule": "cosine"}) == 0.5  # warm-up
    assert config_lr_frac(400, base | {"lr_schedule": "wsd"}) == 1.0  # surely stable
    assert config_lr_frac(900, base | {"lr_schedule": "wsd"}) is None  # decay start unknown
    assert config_lr_frac(400, base | {"lr_schedule": "inverse_sqrt"}) == pytest.approx(0.5)
    assert config_lr_frac(500, {"lr_schedule": "cosine", "warmup_steps": 100}) is None


def test_lr_frac_comes_from_the_config_when_the_lr_is_not_logged(tmp_path: Path) -> None:
    """A loss-only TensorBoard log with a config.yaml naming the schedule: an incident's
    lr_frac and lr_phase come from it, and lr_source says so."""
    pytest.importorskip("torch.utils.tensorboard")
    import math

    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(
        "optimizer: {lr: 3.0e-4}\n"
        "scheduler: {name: cosine, warmup_steps: 200, min_lr: 3.0e-5}\n"
        "trainer: {max_steps: 3000}\n"
    )
    w = SummaryWriter(str(run))
    for s in range(1, 3001):
        loss = 6.0 * (s + 10) ** -0.12 * (1 + 0.004 * math.sin(s * 1.7))
        w.add_scalar("train/loss", loss * (1.8 if s == 1500 else 1.0), s)
    w.close()
    db = tmp_path / "f.duckdb"
    res = analyze([run], out=None, db=db, options=AnalyzeOptions(replay=False, report=False))
    with open_store(db, read_only=True) as store:
        (row,) = store.query(
            "SELECT peak_step, features FROM incidents WHERE run_id = ?", [res.run_id]
        ).to_dicts()
    f = json.loads(row["features"])
    assert row["peak_step"] == 1500 and f["lr_source"] == "config"
    schedule = {"lr_schedule": "cosine", "warmup_steps": 200, "total_steps": 3000,
                "peak_lr": 3e-4, "min_lr": 3e-5}  # fmt: skip
    expected = config_lr_frac(1500, schedule)
    assert expected is not None and 0.6 < expected < 0.9
    assert f["lr_frac"] == pytest.approx(expected, rel=1e-6) and f["lr_phase"] == "decay"


def test_a_log_that_starts_at_its_top_lr_has_no_warm_up_ending_in_it(tmp_path: Path) -> None:
    """A Megatron log resumed at iteration 3300 (epfLLM/Megatron-LLM#33's lines), its LR
    falling from the first line: a spike 40 steps in was "end of warm-up" because it was near
    "the first step at the peak LR", which was just the first logged step."""
    from detect_helpers import stored_features

    line = (
        "iteration {s:>9}/    8000 | consumed samples: {c:>12} | elapsed time per iteration "
        "(ms): 7830.4 | learning rate: {lr:.3E} | global batch size:    64 | lm loss: "
        "{loss:E} | loss scale: 1.0 | grad norm: {g:.3f} | number of skipped iterations:   0 "
        "| number of nan iterations:   0 |\n"
    )  # the layout of the issue's `iteration     3383/    8000 | ...` lines
    text = "".join(
        line.format(
            s=s, c=s * 64, lr=7.0e-06 * (1 - (s - 3300) / 500),
            loss=2.2 if s == 3340 else 0.73 + 0.01 * ((s * 7) % 5), g=9.0 if s == 3340 else 0.75,
        )
        for s in range(3300, 3400)
    )  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(text)
    from detect_helpers import stored_incidents

    (inc,) = stored_incidents(run, tmp_path)
    assert inc["onset_step"] == 3340
    (f,) = stored_features(tmp_path)
    with open_store(tmp_path / "detect.duckdb", read_only=True) as store:
        (phase,) = store.query("SELECT lr_phase FROM incidents").row(0)
    assert phase == f["lr_phase"] == "peak"  # the page's phase and the rules' agree


# DeepSpeed prints the optimizer's LR once, before its scheduler steps; quoted from the ZeRO-1
# run log in https://github.com/hwang2006/large-scale-lm-tutorials/blob/013391eba2e0f88b43f436a32b7ab0358dbcb223/docs/07_zero_redundancy_optimization.md
DS_STEP0 = (
    "[2024-09-15 00:13:21,397] [INFO] [logging.py:96:log_dist] [Rank 0] step=0, skipped=0, "
    "lr=[3e-05], mom=[(0.9, 0.999)]\n"
)
DS_CONFIG = {  # that run's ds_config: WarmupDecayLR, 30 warm-up steps of 300
    "train_batch_size": 16,
    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 300,
                  "warmup_min_lr": 0, "warmup_max_lr": 3e-05, "warmup_num_steps": 30}},
    "fp16": {"enabled": True},
}  # fmt: skip


def test_an_lr_printed_once_is_no_schedule(tmp_path: Path) -> None:
    """The LR printed once at step 0 was read as the LR of the whole run: a spike at step
    120 of a WarmupDecayLR run (linear decay from step 30 to 300: 67% of the peak there)
    was at a "constant" LR that "first reached its peak at step 0". The config's schedule
    says where the LR was; one logged value says nothing of later steps."""
    run = tmp_path / "ds"
    run.mkdir()
    loss = [(2.0 + 3.5 * (1 + s / 10) ** -0.7) * (1.9 if s == 120 else 1.0) for s in range(300)]
    lines = [f"step:{s}, loss:{v * (1 + 0.01 * ((s * 7919) % 13 - 6) / 6):.6f}\n"
             for s, v in enumerate(loss)]  # fmt: skip
    (run / "train.log").write_text(DS_STEP0 + "".join(lines))
    (run / "ds_config.json").write_text(json.dumps(DS_CONFIG))
    rows = stored_incidents(run, tmp_path, ("lr_phase", "lr_peak_step"))
    assert [r["peak_step"] for r in rows] == [120], rows
    feats = stored_features(tmp_path)[0]
    assert (rows[0]["lr_phase"], rows[0]["lr_peak_step"]) == ("decay", 30), rows
    assert feats["lr_source"] == "config" and feats["lr_frac"] == pytest.approx(2 / 3, abs=0.01)
