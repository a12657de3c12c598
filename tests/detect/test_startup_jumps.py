"""The start-up is screened only for jumps to twice the level of the 3 points before.

A run logged every 20 steps spends its first 400 steps in the 20 points the screen leaves to
the start-up (the initial descent, the fp16 scale search). A shard of random tokens there
puts the loss back near ln V, over twice where the descent had brought it, and was missed;
the descent itself, however steep and noisy, never doubles the loss in one point. Logs are
written by torch's SummaryWriter (`train/loss`, `train/lr`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import stored_incidents

pytest.importorskip("torch.utils.tensorboard")

EVERY, STEPS, VOCAB = 20, 3000, 50257


def _write(folder: Path, seed: int, garbage_at: int | None) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(seed)
    with SummaryWriter(str(folder)) as w:
        for step in range(EVERY, STEPS + 1, EVERY):
            # ln V at step 0, a fast descent to ~3.2, then slow: a pre-training start-up
            loss = 3.2 + (math.log(VOCAB) - 3.2) * math.exp(-step / 120) + 0.3 * step**-0.3
            loss *= math.exp(rng.normal(0, 0.02 + 0.04 * math.exp(-step / 300)))
            if garbage_at is not None and step == garbage_at:
                loss = math.log(VOCAB) * math.exp(rng.normal(0, 0.01))  # random tokens
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/lr", 3e-4 * min(1.0, step / 400), step)
    return folder


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_garbage_shard_in_the_start_up_is_found(tmp_path: Path, seed: int) -> None:
    found = stored_incidents(_write(tmp_path / "run", seed, garbage_at=200), tmp_path)
    assert [i["peak_step"] for i in found] == [200]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_a_steep_noisy_start_up_alone_is_no_incident(tmp_path: Path, seed: int) -> None:
    assert stored_incidents(_write(tmp_path / "run", seed, garbage_at=None), tmp_path) == []
