"""Replay of a tiny run with a known rare-token batch: reproduction, verdicts, re-ranking."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from replay_helpers import RARE_STEP, RUN

from forensics.errors import ReplayError
from forensics.replay import apply_verdicts, replay_run, replayable
from forensics.replay.context import load_run
from forensics.replay.state import advance, pick_checkpoint, restore
from forensics.sim.run import read_metrics
from forensics.store import open_store


def test_replayed_loss_matches_the_log_before_any_probe(db: Path, tiny_run: Path) -> None:
    logged = {r["step"]: r for r in read_metrics(tiny_run)}
    with open_store(db) as store:
        data = load_run(store, RUN)
    ckpt = pick_checkpoint(data, RARE_STEP)
    assert ckpt.step == 20
    state = restore(ckpt, torch.device("cpu"))
    rows = advance(state, data, RARE_STEP)
    assert [r["step"] for r in rows] == list(range(21, RARE_STEP + 1))
    for r in rows:
        assert r["loss"] == pytest.approx(logged[r["step"]]["loss"], rel=1e-6, abs=1e-6)
        assert r["grad_norm"] == pytest.approx(logged[r["step"]]["grad_norm"], rel=1e-5)
    assert rows[-1]["loss"] > rows[-2]["loss"] + 0.5  # the spike itself is reproduced


@pytest.fixture(scope="module")
def replayed(master_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replayed") / "tiny.duckdb"
    shutil.copy(master_db, path)
    with open_store(path) as store:
        replay_run(store, RUN, device="cpu", k=6)
    return path


def _rows(db: Path, sql: str) -> list[dict[str, Any]]:
    with open_store(db, read_only=True) as store:
        return store.query(sql, [RUN]).to_dicts()


def _verdicts(db: Path) -> dict[str, str]:
    rows = _rows(db, "SELECT probe, verdict FROM replays WHERE run_id = ?")
    return {r["probe"]: r["verdict"] for r in rows}


def test_reproduce_row_records_the_match(replayed: Path) -> None:
    (row,) = _rows(replayed, "SELECT * FROM replays WHERE run_id = ? AND probe = 'reproduce'")
    nums = json.loads(row["numbers"])
    assert row["verdict"] == "confirmed" and row["hypothesis"] == "reproduction"
    assert nums["offending_step"] == RARE_STEP and nums["checkpoint_step"] == 20
    assert nums["replayed_loss"] == pytest.approx(nums["logged_loss"], rel=1e-6)
    assert nums["prefix_max_abs_diff_loss"] <= 1e-6
    assert row["device"] == "cpu" and row["wall_s"] > 0


def test_rare_batch_is_confirmed_and_wrong_causes_refuted(replayed: Path) -> None:
    v = _verdicts(replayed)
    assert v["rare_tokens"] == "confirmed"
    assert v["hardware"] == "refuted"  # a deterministic replay reproduces the spike
    assert v["overflow"] == "refuted"  # an fp32 run
    assert v["stale_beta2"] == "refuted" and v["lr_too_high"] == "refuted"
    assert v["data_corruption"] in ("refuted", "inconclusive")  # rare, but valid, tokens


def test_rare_tokens_numbers_feed_the_report(replayed: Path) -> None:
    rows = _rows(replayed, "SELECT probe, numbers FROM replays WHERE run_id = ?")
    nums = {r["probe"]: json.loads(r["numbers"]) for r in rows}
    hist = nums["rare_tokens"]["token_histogram"]
    assert len(hist["token_ids"]) == len(hist["counts"]) == len(hist["train_freq"]) > 0
    assert min(hist["token_ids"]) >= 240  # the rare band of a 256-token language
    acts = nums["overflow"]["act_norms"]
    assert len(acts["layer"]) == len(acts["value"]) == len(acts["control"]) == 2


def test_verdicts_rerank_the_incident(replayed: Path) -> None:
    (inc,) = _rows(replayed, "SELECT * FROM incidents WHERE run_id = ?")
    assert inc["cause"] == "rare_tokens" and inc["replay"] == "confirmed"
    assert inc["recovery"] == "recover-rare_tokens"
    found = {r["cause"]: r for r in _rows(replayed, "SELECT * FROM findings WHERE run_id = ?")}
    assert found["rare_tokens"]["replay"] == "confirmed"
    assert found["rare_tokens"]["confidence"] == pytest.approx(0.5)
    assert found["data_corruption"]["replay"] in ("refuted", "inconclusive")
    assert found["lr_too_high"]["replay"] == "refuted"
    assert found["lr_too_high"]["confidence"] == pytest.approx(0.15)
    keys = [e["key"] for e in json.loads(found["lr_too_high"]["evidence"])]
    assert "replay.lr_too_high" in keys and "replay_prior_confidence" in keys


def test_apply_verdicts_is_idempotent(replayed: Path, tmp_path: Path) -> None:
    path = tmp_path / "again.duckdb"
    shutil.copy(replayed, path)
    before = _rows(path, "SELECT * FROM findings WHERE run_id = ? ORDER BY rule_id")
    with open_store(path) as store:
        apply_verdicts(store, RUN)
        apply_verdicts(store, RUN)
    after = _rows(path, "SELECT * FROM findings WHERE run_id = ? ORDER BY rule_id")
    assert [r["confidence"] for r in after] == [r["confidence"] for r in before]
    assert [r["evidence"] for r in after] == [r["evidence"] for r in before]
    (inc,) = _rows(path, "SELECT cause, confidence FROM incidents WHERE run_id = ?")
    assert inc == {"cause": "rare_tokens", "confidence": pytest.approx(0.5)}


def test_replayable_says_what_is_missing(db: Path) -> None:
    with open_store(db) as store:
        assert replayable(store, RUN) is None
        store.con.execute("DELETE FROM checkpoints")
        assert "checkpoint" in (replayable(store, RUN) or "")
        store.con.execute("DELETE FROM batches")
        said = replayable(store, RUN) or ""
        assert "manifest" in said  # and every way to unlock tier 1 (docs/replay.md)
        assert all(flag in said for flag in ("--shards", "--loader", "--dataset"))
        long_name = "tests__functional_tests__" + "x" * 70  # Megatron golden-value run names
        assert not str(ReplayError(replayable(store, long_name) or "")).endswith("…")
        with pytest.raises(ReplayError, match="no batch manifest"):
            replay_run(store, RUN, device="cpu")


def test_run_without_incidents_has_nothing_to_replay(db: Path) -> None:
    with open_store(db) as store:
        store.con.execute("DELETE FROM incidents")
        assert replay_run(store, RUN, device="cpu") == []
