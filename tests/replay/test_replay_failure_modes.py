"""What replay does when it cannot rebuild the state: plain reasons, and the rest still runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from replay_helpers import FINDINGS, RARE_STEP, RUN, add_incident

from forensics.errors import ReplayError
from forensics.replay import replay_run
from forensics.replay.context import Checkpoint
from forensics.replay.result import ReplayResult
from forensics.replay.state import StateUnavailable, restore
from forensics.store import open_store

STATE_PROBES = ("rare_tokens", "overflow", "lr_too_high", "hardware", "reproduce")


def _replay(db: Path, sql: list[str], **kw: object) -> dict[str, ReplayResult]:
    with open_store(db) as store:
        for stmt in sql:
            store.con.execute(stmt)
        rows = replay_run(store, RUN, device="cpu", k=4, **kw)  # type: ignore[arg-type]
    return {r.probe: r for r in rows}


def _state_probes_say(rows: dict[str, ReplayResult], words: str, ordinary: bool = False) -> None:
    """Every state probe says why it could not run; on an `ordinary` batch the rare-token
    probe still refutes from the tokens alone (rare_tokens.tokens_only), saying so."""
    for probe in STATE_PROBES:
        assert words in rows[probe].detail, (probe, rows[probe].detail)
        if probe == "rare_tokens" and ordinary:
            r = rows[probe]
            assert r.verdict == "refuted" and r.numbers["state_free"], r.detail
            assert "read from the tokens alone" in r.detail, r.detail
            continue
        assert rows[probe].verdict == "inconclusive", probe
    # beta2 = 0.95 in the run's config: refuted without any state
    assert rows["stale_beta2"].verdict == "refuted"
    assert "not above the counterfactual" in rows["stale_beta2"].detail


def test_no_checkpoint_before_the_incident(db: Path) -> None:
    with open_store(db) as store:
        store.con.execute("DELETE FROM incidents WHERE run_id = 'tiny'")
        add_incident(store, 2, 12, "rare_tokens", 0.5, FINDINGS)
    rows = _replay(db, [])
    _state_probes_say(rows, "no checkpoint before step 12 (checkpoints at: 20, 40)", True)
    assert rows["data_corruption"].verdict in ("refuted", "inconclusive")
    assert "not run" not in rows["data_corruption"].detail  # needs only the batch


def test_checkpoint_without_optimizer_state(db: Path) -> None:
    rows = _replay(db, ["UPDATE checkpoints SET has_optimizer = false"])
    _state_probes_say(rows, "has no optimizer state")
    assert rows["data_corruption"].detail and "not run" not in rows["data_corruption"].detail


def test_checkpoint_of_another_architecture(db: Path) -> None:
    sql = 'UPDATE checkpoints SET reference_model = false, model_config = \'{"arch": "llama"}\''
    rows = _replay(db, [sql])
    _state_probes_say(rows, "is not the reference model (arch 'llama'")


def test_missing_shard_of_the_offending_batch(db: Path) -> None:
    sql = f"UPDATE batches SET source = '/nonexistent/shard.bin' WHERE step = {RARE_STEP}"
    rows = _replay(db, [sql])
    _state_probes_say(rows, "/nonexistent/shard.bin")
    assert rows["data_corruption"].verdict == "inconclusive"
    assert "unreadable" in rows["data_corruption"].detail


def test_missing_batch_record_between_checkpoint_and_incident(db: Path) -> None:
    rows = _replay(db, ["DELETE FROM batches WHERE step = 30"])
    _state_probes_say(rows, "no record for step 30")
    assert "not run" not in rows["data_corruption"].detail


def test_checkpoint_file_without_optimizer(tmp_path: Path, tiny_run: Path) -> None:
    raw = torch.load(tiny_run / "checkpoints" / "ckpt_000020.pt", weights_only=True)
    del raw["optimizer"]
    path = tmp_path / "ckpt_000020.pt"
    torch.save(raw, path)
    ckpt = Checkpoint(20, str(path), True, True, "forensics-gpt")
    with pytest.raises(StateUnavailable, match="no optimizer state"):
        restore(ckpt, torch.device("cpu"))


def test_bad_arguments_are_replay_errors(db: Path) -> None:
    with open_store(db) as store:
        with pytest.raises(ReplayError, match="no incident 9"):
            replay_run(store, RUN, incident_id=9, device="cpu")
        with pytest.raises(ReplayError, match="--device"):
            replay_run(store, RUN, device="tpu")
        with pytest.raises(ReplayError, match="--k"):
            replay_run(store, RUN, device="cpu", k=1)
        if not torch.cuda.is_available():
            with pytest.raises(ReplayError, match="CUDA"):
                replay_run(store, RUN, device="cuda")
