"""The recorder in a plain PyTorch loop over the bundled model: what it writes, that ingest
reads it without flags, that analyze finds and replays the injected spike, and that the
recorded statistics are the simulator's own (same loop, same numbers)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bundled_loop import RARE_STEP, prepare, tiny_config, train

from forensics.analyze import analyze
from forensics.ingest import ingest
from forensics.record import Recorder
from forensics.sim.run import read_metrics, train_run
from forensics.store import open_store

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")

COMPARED = ("loss", "grad_norm", "param_norm", "update_norm", "adam_v_mean", "lr")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("recorded") / "bundled"
    run_dir.mkdir()
    overrides = prepare(run_dir)
    cfg = tiny_config()
    extra = {"grad_clip": cfg.grad_clip, "peak_lr": cfg.peak_lr, "seed": cfg.seed}
    with Recorder(run_dir, log_every=10, stats_every=1, layers_every=10, config=extra) as rec:
        train(run_dir, cfg, overrides, rec)
    return run_dir


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_statistics_are_the_simulators(recorded: Path, tmp_path: Path) -> None:
    """The same run trained by `forensics simulate`'s trainer logs the same numbers."""
    sim_dir = tmp_path / "sim"
    overrides = prepare(sim_dir)
    train_run(tiny_config(ckpt_steps=[]), sim_dir, overrides)
    sim = {r["step"]: r for r in read_metrics(sim_dir)}
    ours = {r["step"]: r for r in _rows(recorded / "forensics" / "metrics.jsonl")}
    assert sorted(ours) == sorted(sim) == list(range(1, 46))
    for step, row in ours.items():
        for key in COMPARED:
            assert row[key] == pytest.approx(sim[step][key], rel=1e-5, abs=1e-12), (step, key)
    every_10 = [s for s, r in ours.items() if "act_norm/0" in r]
    assert every_10 == [10, 20, 30, 40]
    layer_keys = {"max_attn_logit/0", "max_attn_logit/1", "act_max/0", "act_max/1"}
    assert layer_keys | {"adam_v_max", "adam_v_norm"} <= set(ours[10])
    assert ours[10]["act_max/1"] >= ours[10]["act_norm/1"] / math.sqrt(32)  # max >= rms
    assert all(r["tokens_per_s"] > 0 for r in ours.values())


def test_manifest_and_config_are_ingested_without_flags(recorded: Path, tmp_path: Path) -> None:
    with open_store(tmp_path / "db.duckdb") as store:
        ingest(store, [recorded])
        batches = store.query("SELECT * FROM batches ORDER BY step, micro")
        cfg = store.run_config("bundled")
    assert batches.height == 45
    rare = batches.filter(batches["step"] == RARE_STEP).row(0, named=True)
    assert rare["source"] == str(recorded / "data" / "inject_000.bin")
    assert (rare["token_offset"], rare["n_tokens"], rare["seq_len"]) == (0, 129, 32)
    extra = json.loads(rare["extra"])
    assert extra["batch_size"] == 4 and extra["lengths"] == [32] * 4
    assert extra["hash"].startswith("sha256:") and len(extra["hash"]) == 7 + 64
    assert cfg["beta2"] == 0.95 and cfg["peak_lr"] == 1e-2 and cfg["grad_clip"] == 1.0
    assert cfg["precision"] == "fp32" and cfg["model.arch"] == "forensics-gpt"


def test_analyze_finds_and_replays_the_injected_spike(recorded: Path, tmp_path: Path) -> None:
    result = analyze(recorded, tmp_path / "out")
    with open_store(result.db) as store:
        incidents = store.query("SELECT * FROM incidents")
        replays = store.query("SELECT probe, verdict FROM replays")
    hit = [
        r for r in incidents.iter_rows(named=True) if r["onset_step"] <= RARE_STEP <= r["peak_step"]
    ]
    assert hit, incidents
    verdicts = dict(replays.iter_rows())
    assert verdicts["reproduce"] == "confirmed"
    assert verdicts["rare_tokens"] == "confirmed"


def test_no_host_sync_between_logging_intervals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between flushes the recorder never reads a tensor value on the host."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rec = Recorder(tmp_path, model=model, log_every=5, layers_every=0)
    calls: list[str] = []
    for name in ("item", "tolist", "__float__", "__bool__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)

        def spy(self, *a, _name=name, _orig=original, **k):  # type: ignore[no-untyped-def]
            calls.append(_name)
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, spy)
    per_step = []
    for step in range(1, 11):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        batch = torch.randint(0, 9, (4, 3))
        calls.clear()
        rec.after_backward(model)
        n = len(calls)
        opt.step()  # torch's own AdamW reads its step counter on the host: not ours
        opt.zero_grad()
        calls.clear()
        rec.after_step(model, opt, loss, batch=batch)
        per_step.append((step, n + len(calls)))
    monkeypatch.undo()
    rec.close()
    assert all(n == 0 for step, n in per_step if step % 5), per_step
    assert all(n > 0 for step, n in per_step if step % 5 == 0), per_step
    assert len(_rows(tmp_path / "forensics" / "metrics.jsonl")) == 10


def test_amp_loss_scale_and_skipped_step(tmp_path: Path) -> None:
    """A GradScaler's scale is logged; an overflowing step is marked skipped and halves it."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with Recorder(tmp_path, model=model, log_every=4, layers_every=0) as rec:
        for step in range(1, 7):
            loss = model(torch.randn(2, 4)).pow(2).mean()
            if step == 3:
                loss = loss * math.inf
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            rec.after_backward(model, scaler)
            scaler.step(opt)
            scaler.update()
            rec.after_step(model, opt, loss, scaler=scaler)
            opt.zero_grad()
    rows = _rows(tmp_path / "forensics" / "metrics.jsonl")
    assert [r["skipped"] for r in rows] == [0, 0, 1, 0, 0, 0]
    assert [r["loss_scale"] for r in rows][:4] == [1024.0, 1024.0, 1024.0, 512.0]
    assert math.isinf(rows[2]["loss"]) and not math.isfinite(rows[2]["grad_norm"])


def test_import_needs_no_torch() -> None:
    code = "import sys, forensics.record; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_crashed_run_keeps_its_last_steps(tmp_path: Path) -> None:
    """A loop that dies between logging intervals, recorder never closed: exit flushes it."""
    code = f"""
import torch
from forensics.record import Recorder
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
rec = Recorder({str(tmp_path)!r}, model=model, log_every=20)
for step in range(1, 8):
    loss = model(torch.randn(2, 4)).pow(2).mean() * (float("nan") if step == 7 else 1.0)
    loss.backward()
    rec.after_backward(model)
    opt.step()
    opt.zero_grad()
    rec.after_step(model, opt, loss)
raise SystemExit("diverged")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1 and "diverged" in done.stderr
    rows = _rows(tmp_path / "forensics" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 8))
    assert math.isnan(rows[-1]["loss"]) and math.isnan(rows[-1]["grad_norm"])
