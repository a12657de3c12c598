"""Tier 1 on token shards: the batch of a logged step is exactly what the run's loader read.

The reference loaders below are line-for-line NumPy transcriptions of modded-nanogpt's
`DistributedDataLoader` (train_gpt2.py, 2024) and of llm.c's `dataloader.h` without
shuffling; replay's records are reconstructed from the settings alone and must name the same
tokens, rank by rank and micro-batch by micro-batch, across shard boundaries.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.errors import ReplayError
from forensics.replay.sources import Settings, Sources, loader_records, read_tokens, settings
from forensics.replay.state import read_span
from forensics.sim.data import write_shard


class ModdedLoader:
    """modded-nanogpt's DistributedDataLoader, with its shard files already sorted."""

    def __init__(self, files: list[Path], B: int, T: int, rank: int, world: int) -> None:
        self.files, self.B, self.T, self.rank, self.world = files, B, T, rank, world
        self.current_shard = 0
        self.current_position = rank * B * T
        self.tokens = read_tokens(files[0])

    def advance(self) -> None:
        self.current_shard = (self.current_shard + 1) % len(self.files)
        self.current_position = self.rank * self.B * self.T
        self.tokens = read_tokens(self.files[self.current_shard])

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        B, T = self.B, self.T
        buf = np.asarray(self.tokens[self.current_position : self.current_position + B * T + 1])
        x, y = buf[:-1].reshape(B, T), buf[1:].reshape(B, T)
        self.current_position += B * T * self.world
        if self.current_position + (B * T * self.world + 1) > len(self.tokens):
            self.advance()
        return x, y


class LlmcLoader:
    """llm.c dataloader.h (should_shuffle = 0): sample i of a shard, rank r."""

    def __init__(self, files: list[Path], B: int, T: int, rank: int, world: int) -> None:
        self.files, self.B, self.T, self.rank, self.world = files, B, T, rank, world
        self.shard, self.sample = 0, 0
        self.tokens = read_tokens(files[0])

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        B, T, W = self.B, self.T, self.world
        if self.sample >= (len(self.tokens) - 1) // (W * B * T):
            self.shard, self.sample = (self.shard + 1) % len(self.files), 0
            self.tokens = read_tokens(self.files[self.shard])
        start = self.sample * W * B * T + self.rank * B * T
        buf = np.asarray(self.tokens[start : start + B * T + 1])
        self.sample += 1
        return buf[:-1].reshape(B, T), buf[1:].reshape(B, T)


def _shards(tmp: Path, sizes: list[int], header: bool = True) -> list[Path]:
    rng = np.random.default_rng(0)
    out = []
    for i, n in enumerate(sizes):
        path = tmp / f"fineweb_train_{i:06d}.bin"
        tokens = rng.integers(0, 50257, size=n).astype(np.uint16)
        if header:
            write_shard(path, tokens)
        else:
            tokens.tofile(path)
        out.append(path)
    return out


@pytest.mark.parametrize(
    ("kind", "loader", "header"),
    [("modded", ModdedLoader, True), ("llmc", LlmcLoader, True), ("llmc", LlmcLoader, False)],
)
def test_batch_at_each_step_is_what_the_loader_read(
    tmp_path: Path, kind: str, loader: type, header: bool
) -> None:
    B, T, W, GA, first = 2, 16, 2, 3, 1
    files = _shards(tmp_path, [1000, 700, 1300], header)  # several wrap-arounds in 60 steps
    st = Settings(B, T, W, GA, kind, first)
    records = loader_records(files, st, 60)
    refs = [loader(files, B, T, r, W) for r in range(W)]
    for step in range(first, 61):
        recs = records[step]
        assert [r.micro for r in recs] == list(range(GA * W))
        for a in range(GA):
            for r in range(W):
                x, y = refs[r].next_batch()
                got_x, got_y = read_span(recs[a * W + r])
                assert np.array_equal(got_x.numpy(), x), (step, a, r)
                assert np.array_equal(got_y.numpy(), y), (step, a, r)


def test_settings_come_from_flags_or_config_and_say_what_is_missing() -> None:
    st = settings(Sources(seq_len=64), {"device_batch_size": 8, "ddp_world_size": 4})
    assert (st.batch_size, st.seq_len, st.world_size, st.grad_accum, st.first_step) == (
        8, 64, 4, 1, 1,
    )  # fmt: skip
    assert settings(Sources(batch_size=1, seq_len=2, loader="llmc"), {}).first_step == 0
    with pytest.raises(ReplayError, match="--batch-size B --seq-len T"):
        settings(Sources(), {})
    with pytest.raises(ReplayError, match="--loader"):
        settings(Sources(batch_size=1, seq_len=2, loader="random"), {})


def test_modded_log_and_shards_replay_tier1_from_the_cli(tmp_path: Path) -> None:
    """A modded-nanogpt log with a spike + shards: `replay --step` finds the batch the loader
    read at that step (stored in `batches`), runs the data probe and says tier 1 ran."""
    run = tmp_path / "run"
    run.mkdir()
    B, T = 4, 32
    files = _shards(tmp_path / "data", [40_000, 40_000])
    lines = [f"step:{s}/300 train_loss:{3.5 - s / 300:.4f} train_time:{s}ms" for s in range(1, 301)]
    lines[199] = "step:200/300 train_loss:7.9000 train_time:200ms"
    (run / "train.log").write_text("\n".join(lines) + "\n")
    db = tmp_path / "a.duckdb"
    cli = CliRunner()
    res = cli.invoke(app, ["ingest", str(run), "--db", str(db)])
    assert res.exit_code == 0, res.output
    args = ["replay", "--db", str(db), "--step", "200", "--device", "cpu", "--no-judge",
            "--shards", str(tmp_path / "data" / "fineweb_train_*.bin"),
            "--batch-size", str(B), "--seq-len", str(T)]  # fmt: skip
    res = cli.invoke(app, args, terminal_width=400)
    assert res.exit_code == 0, res.output
    assert "tier 1 ran" in res.output and "tier 3 needs: no checkpoint" in res.output
    from forensics.store import open_store

    with open_store(db) as store:
        row = store.query(
            "SELECT source, token_offset, n_tokens, manifest FROM batches WHERE step = 200"
        ).row(0)
        probes = store.query("SELECT probe, verdict FROM replays").rows()
    ref = ModdedLoader(files, B, T, 0, 1)
    for _ in range(199):
        ref.next_batch()
    x, _ = ref.next_batch()
    tokens = np.asarray(read_tokens(Path(row[0]))[row[1] : row[1] + row[2]])
    assert np.array_equal(tokens[:-1].reshape(B, T), x) and row[3] == "loader:modded"
    assert ("data_corruption", "refuted") in probes  # random tokens vs random tokens
