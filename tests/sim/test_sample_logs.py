"""The committed sample_logs/: complete, small, and replayable (a checkpoint shortly before
every incident)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from forensics.sim.checkpoint import list_checkpoints
from forensics.sim.run import read_metrics
from forensics.sim.scenarios import SCENARIOS, get_scenario
from forensics.sim.twin import expected_shape

SAMPLES = Path(__file__).resolve().parents[2] / "sample_logs"
FILES = ("README.md", "truth.json", "config.json", "metrics.jsonl", "batches.jsonl", "loss.png")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sample_run_is_complete(name: str) -> None:
    run = SAMPLES / name
    for f in FILES + ("data/train_000.bin", "data/token_counts.npy"):
        assert (run / f).is_file(), f"{run / f} is missing; run `forensics simulate --all`"
    truth = json.loads((run / "truth.json").read_text())
    assert truth["scenario"] == name
    steps = list_checkpoints(run)
    assert 2 <= len(steps) <= 4
    for exp in truth["expected"]:
        before = [s for s in steps if s < exp["onset_step"]]
        assert before and exp["onset_step"] - before[-1] <= 50, (name, steps, exp)
    ckpt = torch.load(run / "checkpoints" / f"ckpt_{steps[0]:06d}.pt", weights_only=True)
    assert ckpt["optimizer"]["state"], "the checkpoint must carry Adam's moments"


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n != "clean"])
def test_sample_truth_type_is_the_rule_against_the_twin(name: str) -> None:
    """truth.json's type is what detection's rule says against the committed clean twin:
    recomputed here from the committed files, so a stale truth.json fails."""
    run = SAMPLES / name
    truth = json.loads((run / "truth.json").read_text())
    twin_path = SAMPLES / truth["twin"]
    assert twin_path.is_file(), f"{twin_path}: the twin truth.json names is not committed"
    rows = read_metrics(run)
    twin = (
        read_metrics(twin_path.parent)
        if twin_path.name == "metrics.jsonl"
        else [json.loads(line) for line in twin_path.read_text().splitlines()]
    )
    scen = get_scenario(name)
    for exp in truth["expected"]:
        last = max(exp["peak_step"], scen.injection_end(truth["at"], truth["strength"]))
        shape = expected_shape(rows, twin, exp["onset_step"], last)
        assert shape.type == exp["type"], (name, shape, exp)
        assert shape.end_step == exp["typing"]["recovery_step"]


def test_sample_logs_stay_small() -> None:
    total = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert total < 30e6, f"sample_logs/ is {total / 1e6:.1f} MB"
