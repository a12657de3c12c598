"""A batch of random in-vocabulary ids in a run shorter than the bigram sample.

The data probe's bigram sample is the first 2M tokens of the shard, which holds every batch of
a small run, the offending one included: before the batch's own pairs were left out, each
batch supported itself, a batch of random ids scored support 1.0 and `data_corruption` was
refuted on a garbage batch (found on a nanoGPT run: the post-mortem said "undetermined").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from forensics.cli import app
from forensics.store import open_store

B, T, STEPS, BAD, COMMON, VOCAB = 8, 32, 120, 90, 300, 512


def _train_bin(path: Path) -> None:
    """nanoGPT's prepare.py writer (`ndarray.tofile`, headerless uint16): a learnable stream,
    each id mostly followed by one of three successors, with the batch of iteration BAD
    replaced by uniform random ids over the vocabulary."""
    rng = np.random.default_rng(0)
    succ = rng.integers(0, COMMON, size=(COMMON, 3))
    out, w = np.empty((STEPS + 2) * B * T + 1, dtype=np.uint16), 0
    for i in range(out.size):
        out[i] = w
        w = int(succ[w, rng.integers(3)]) if rng.random() < 0.9 else int(rng.integers(COMMON))
    out[BAD * B * T : (BAD + 1) * B * T] = rng.integers(0, VOCAB, size=B * T)
    out.tofile(path)


def test_random_ids_batch_is_corrupt_though_the_sample_holds_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _train_bin(run / "train.bin")
    loss = {i: 3.0 - i / 200 for i in range(STEPS)} | {BAD: 7.5}
    lines = [f"iter {i}: loss {v:.4f}, time 10.00ms, mfu -100.00%" for i, v in loss.items()]
    (run / "train.log").write_text("\n".join(lines) + "\n")
    db, cli = tmp_path / "a.duckdb", CliRunner()
    assert cli.invoke(app, ["ingest", str(run / "train.log"), "--db", str(db)]).exit_code == 0
    args = ["replay", "--db", str(db), "--step", str(BAD), "--device", "cpu", "--no-judge",
            "--shards", str(run / "train.bin"), "--loader", "llmc", "--batch-size", str(B),
            "--seq-len", str(T)]  # fmt: skip
    res = cli.invoke(app, args, terminal_width=400)
    assert res.exit_code == 0, res.output
    with open_store(db) as store:
        verdict, detail = store.query(
            "SELECT verdict, detail FROM replays WHERE probe = 'data_corruption'"
        ).row(0)
    assert verdict == "confirmed" and "bigram support" in detail, detail
