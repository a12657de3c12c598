"""A garbage batch's loss is near that of uniform predictions, ln(vocab size); a fine-tune's
initial loss is not that level.

The garbage and shard rules read "near random tokens" as near the run's initial loss, which
holds for pre-training from scratch (it starts at ln V). A fine-tune starts at ~2.2 nats:
a rare-token batch that lifts it back there was named corrupt data at 85%. With the vocab
size in the config, `peak_vs_uniform` (peak / ln V) tells the two apart; without it, ln V is
estimated as the larger of the initial loss and ln 32000 (no common LLM tokenizer is
smaller), so a fine-tune's initial level is still no garbage (that needs 0.75 ln V), and a
batch at ln V is, even when the next step is back on its trend (data-corruption-random-level),
unless its gradient jumped 15x or more (a few rare ids' rows). Logs are written by torch's
SummaryWriter, the config as a Hugging Face model config.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import stored_features, stored_incidents

from forensics.report import write_report
from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")


def _write(
    folder: Path,
    *,
    vocab: int | None,
    level: float | None = None,
    jump: float = 13.0,
    after: float = 1.12,
    echoes: tuple[int, ...] = (),
) -> Path:
    """A fine-tune logged every step: 2.2 -> 1.8 nats; at step 600 one batch lifts the loss
    back to its initial level (or to `level`) and the gradient `jump` x; the next step is
    `after` x its trend; at each step of `echoes` a +50% spike builds over 3 steps and
    decays over ~5."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, 2001):
            loss = (1.8 + 0.4 * math.exp(-step / 300)) * math.exp(rng.normal(0, 0.01))
            grad = 0.5 * math.exp(rng.normal(0, 0.05))
            if step == 600:
                loss, grad = (level or 2.2), grad * jump
            elif step == 601:
                loss *= after
            loss *= math.exp(sum(_echo(step - e) for e in echoes))
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/grad_norm", grad, step)
            w.add_scalar("train/learning_rate", 2e-5, step)
    config = {"adam_beta2": 0.95, "max_grad_norm": 1.0, "model_type": "llama"}
    if vocab:
        config["vocab_size"] = vocab
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _echo(k: int) -> float:
    """Log excess of an echo spike `k` steps from its top: up over 3 steps, down over ~5."""
    if k <= -3:
        return 0.0
    return 0.4 * ((k + 3) / 3 if k <= 0 else math.exp(-k / 5))


def test_a_rare_token_batch_back_at_a_fine_tunes_initial_loss_is_no_garbage(
    tmp_path: Path,
) -> None:
    found = stored_incidents(_write(tmp_path / "run", vocab=128256), tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "rare_tokens")]


def test_without_the_vocab_size_a_fine_tunes_initial_level_is_still_no_garbage(
    tmp_path: Path,
) -> None:
    """ln 32000 stands in for ln V: 2.2 nats is 0.21 of it (the initial loss used to)."""
    found = stored_incidents(_write(tmp_path / "run", vocab=None), tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "rare_tokens")]
    f = stored_features(tmp_path)[0]
    assert f["uniform_source"] == "estimate"
    assert f["peak_vs_uniform"] == pytest.approx(2.2 / math.log(32000), rel=0.02)


def test_a_batch_at_the_random_token_level_stays_garbage(tmp_path: Path) -> None:
    level = math.log(128256) * 1.1
    found = stored_incidents(_write(tmp_path / "run", vocab=128256, level=level), tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "data_corruption")]


def test_a_jump_to_ln_v_that_rings_afterwards_is_not_garbage(tmp_path: Path) -> None:
    """The same jump to 1.1 ln V, then two echo spikes 40 and 80 steps on: the loss of one
    garbage batch leaves with it and its update's damage decays; echoes tens of steps later
    are an optimizer ringing (a stale second moment's kick reaches ln V early in training
    too), so the garbage rule does not claim it."""
    level = math.log(128256) * 1.1
    run = _write(tmp_path / "run", vocab=128256, level=level, echoes=(640, 680))
    found = stored_incidents(run, tmp_path)
    assert [i["peak_step"] for i in found] == [600]
    assert stored_features(tmp_path)[0]["echo_count"] >= 1
    assert found[0]["cause"] != "data_corruption"
    with open_store(tmp_path / "detect.duckdb", read_only=True) as store:
        fired = store.query("SELECT rule_id FROM findings WHERE triggered").rows()
    assert ("data-corruption-garbage",) not in fired


@pytest.mark.parametrize("vocab", [None, 50257])
def test_one_batch_at_ln_v_back_on_trend_at_once_is_garbage(
    tmp_path: Path, vocab: int | None
) -> None:
    """No damage after it (the garbage rule's evidence): the level alone says random tokens,
    with the vocab size or without it (ln 32000 = 10.37; the batch scores 10.6)."""
    run = _write(tmp_path / "run", vocab=vocab, level=10.6, jump=6.0, after=1.0)
    found = stored_incidents(run, tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "data_corruption")]
    f = stored_features(tmp_path)[0]
    assert (f["random_level"], f["uniform_source"]) == (1.0, "config" if vocab else "estimate")
    assert f["uniform_loss"] == pytest.approx(math.log(vocab or 32000))
    with open_store(tmp_path / "detect.duckdb") as store:
        run_id = store.query("SELECT run_id FROM runs").item()
        write_report(store, run_id, tmp_path / "report", png=False, min_severity="minor")
    page = (tmp_path / "report" / "postmortems" / "spike-01.md").read_text()
    said = f"That is {f['peak_vs_uniform']:.4g} × the loss of guessing uniformly over the "
    said += f"vocabulary, ln V = {f['uniform_loss']:.4g} nats ("
    assert said in page
    assert ("vocab_size from the config" if vocab else "the config gives no vocab_size") in page


def test_at_ln_v_a_gradient_piled_onto_a_few_rows_is_rare_tokens(tmp_path: Path) -> None:
    run = _write(tmp_path / "run", vocab=None, level=10.6, jump=40.0, after=1.0)
    found = stored_incidents(run, tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "rare_tokens")]


def test_a_damaging_batch_at_well_under_ln_v_is_not_garbage(tmp_path: Path) -> None:
    """6.2 nats in a fine-tune at 1.9: 2.8x its initial loss but 0.6 ln V (ln 32000), the
    next step still +30% (the damage the garbage rule reads), the gradient 8x: text the
    model can partly predict, a batch of rare tokens, not random ones."""
    run = _write(tmp_path / "run", vocab=32000, level=6.2, jump=8.0, after=1.3)
    found = stored_incidents(run, tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "rare_tokens")]
    f = stored_features(tmp_path)[0]
    assert f["peak_vs_initial"] > 2.5 and f["peak_vs_uniform"] == pytest.approx(0.6, abs=0.01)
    assert f["next_excess"] > 0.2


def test_a_rare_token_batch_far_below_ln_v_is_not_garbage(tmp_path: Path) -> None:
    """Twice the trend (3.8 nats), back at once, the vocab unknown: no random-token level."""
    run = _write(tmp_path / "run", vocab=None, level=3.8, jump=6.0, after=1.0)
    found = stored_incidents(run, tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "rare_tokens")]


def test_a_value_five_times_ln_v_alone_is_a_corrupted_value(tmp_path: Path) -> None:
    """55 nats in a fine-tune at 1.9 (25x its initial loss, under the 30x that marks a value
    absurd), the gradient norm 8x at that step (a corrupted step corrupts both), every loss
    around it on trend: 5.3 ln V, which no batch of text scores (random tokens ~ln V, a
    ruled-out band 2-3 ln V)."""
    run = _write(tmp_path / "run", vocab=None, level=55.0, jump=8.0, after=1.0)
    found = stored_incidents(run, tmp_path)
    assert [(i["peak_step"], i["cause"]) for i in found] == [(600, "hardware_fault")]
    assert stored_features(tmp_path)[0]["transient_bad"] == 1.0
