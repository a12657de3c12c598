"""A garbage shard's flat top at the loss of random tokens is data, whatever beta2 says.

A run of batches the model cannot predict at all (a shard of random bytes) holds the loss
at ln V while it lasts and lets go the moment it ends; the damage those batches did then
decays. In a run whose config says beta2 = 0.999 (PyTorch's and the HF Trainer's default)
the stale-beta2 rule used to fire too (a gradient jump, the loss top 30 steps after it)
and outranked the shard's rule: third-generator runs (a shard of 36 batches at 10.1 nats,
beta2 0.999) read "stale Adam second moment". Amplified updates climb and decay; they do
not hold a flat top at the level of uniform guessing. Written by torch's SummaryWriter,
with the run's config beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

VOCAB = 32000
SHARD = range(1790, 1826)  # 36 batches of random tokens


def _run(folder: Path, start: float, level: float) -> None:
    """Loss from `start` nats down a power law; the shard at `level` x ln V."""
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True)
    config = {"optimizer": {"lr": 3e-4, "betas": [0.9, 0.999]}, "vocab_size": VOCAB}
    (folder / "config.yaml").write_text(yaml.safe_dump({**config, "precision": "bf16"}))
    rng = np.random.default_rng(7)
    with SummaryWriter(str(folder / "tb")) as w:
        for step in range(10, 3001, 10):
            loss = start * (step / 10 + 1) ** -0.12 * math.exp(rng.normal(0, 0.01))
            grad = 0.5 * math.exp(rng.normal(0, 0.05))
            if step in SHARD:
                loss, grad = level * math.log(VOCAB) * math.exp(rng.normal(0, 0.005)), 8 * grad
            elif step > SHARD[-1]:
                loss *= 1 + 0.3 * math.exp(-(step - SHARD[-1]) / 60)
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/grad_norm", grad, step)


@pytest.mark.parametrize(("start", "level"), [(6.0, 0.97), (10.0, 0.85)])
def test_a_flat_top_at_random_token_loss_is_the_shard_not_beta2(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]], start: float, level: float
) -> None:
    """At 0.97 ln V the top is three times its trend (3.2 nats). Where the trend is still
    high (5.4 nats) a top at 0.85 ln V is under twice it, so not "the loss of random
    tokens" by the random-level test, yet no amplified update holds a flat top there:
    third-generator runs (a shard of 17 batches at 0.80 ln V, beta2 0.99, seed 14600140)
    still read "stale Adam second moment"."""
    _run(tmp_path / "run", start, level)
    _, db = analyzed(tmp_path / "run", min_severity="minor")
    with open_store(db, read_only=True) as store:
        rows = store.query("SELECT * FROM incidents WHERE onset_step >= 1700").to_dicts()
        (inc,) = rows
        fired = store.query(
            "SELECT rule_id FROM findings WHERE run_id = ? AND incident_id = ? AND triggered",
            [inc["run_id"], inc["incident_id"]],
        )["rule_id"].to_list()
    assert inc["cause"] == "data_corruption", (inc["cause"], fired)
    assert "data-corruption-shard" in fired and "stale-beta2" not in fired
