"""A garbage batch's loss is near that of uniform predictions, ln(vocab size); a fine-tune's
initial loss is not that level.

The garbage and shard rules read "near random tokens" as near the run's initial loss, which
holds for pre-training from scratch (it starts at ln V). A fine-tune starts at ~2.2 nats:
a rare-token batch that lifts it back there was named corrupt data at 85%. With the vocab
size in the config, `peak_vs_uniform` (peak / ln V) tells the two apart. Logs are written by
torch's SummaryWriter, the config as a Hugging Face model config.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import stored_incidents

pytest.importorskip("torch.utils.tensorboard")


def _write(folder: Path, *, vocab: int | None, garbage: bool = False) -> Path:
    """A fine-tune logged every step: 2.2 -> 1.8 nats; at step 600 one batch lifts the loss
    back to its initial level (or, `garbage`, to ln V) and the gradient 13x; the next step
    is still 12% up."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, 2001):
            loss = (1.8 + 0.4 * math.exp(-step / 300)) * math.exp(rng.normal(0, 0.01))
            grad = 0.5 * math.exp(rng.normal(0, 0.05))
            if step == 600:
                loss, grad = (math.log(vocab or 50257) * 1.1 if garbage else 2.2), grad * 13
            elif step == 601:
                loss *= 1.12
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/grad_norm", grad, step)
            w.add_scalar("train/learning_rate", 2e-5, step)
    config = {"adam_beta2": 0.95, "max_grad_norm": 1.0, "model_type": "llama"}
    if vocab:
        config["vocab_size"] = vocab
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_rare_token_batch_back_at_a_fine_tunes_initial_loss_is_no_garbage(
    tmp_path: Path,
) -> None:
    found = stored_incidents(_write(tmp_path / "run", vocab=128256), tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "rare_tokens")]


def test_without_the_vocab_size_the_initial_loss_stands_in(tmp_path: Path) -> None:
    """What the log alone says (the behaviour before the vocab size was read)."""
    found = stored_incidents(_write(tmp_path / "run", vocab=None), tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "data_corruption")]


def test_a_batch_at_the_random_token_level_stays_garbage(tmp_path: Path) -> None:
    found = stored_incidents(_write(tmp_path / "run", vocab=128256, garbage=True), tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "data_corruption")]
