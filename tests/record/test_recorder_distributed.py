"""torchrun --nproc_per_node 2 on CPU (gloo): rank 0 writes, statistics are global."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("ddp_script.py")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def dist_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", str(SCRIPT), str(out)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_rank_zero_writes_global_statistics(dist_run: Path) -> None:
    expected = json.loads((dist_run / "expected.json").read_text())
    rows = _rows(dist_run / "ddp" / "forensics" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    for row, want in zip(rows, expected["ddp"], strict=True):
        assert row["loss"] == pytest.approx(want["loss"], rel=1e-6)  # mean over the ranks
        assert row["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5)
    assert "act_norm/0" in rows[1] and "max_attn_logit/1" in rows[3]
    config = json.loads((dist_run / "ddp" / "forensics" / "config.json").read_text())
    assert config["world_size"] == 2 and config["model"]["class"] == "GPT"


def test_every_ranks_batches_in_one_manifest(dist_run: Path) -> None:
    records = _rows(dist_run / "ddp" / "forensics" / "batches.jsonl")
    assert [(r["step"], r["rank"]) for r in records[:4]] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert len(records) == 10
    assert records[3]["sample_indices"] == [1020, 1021]
    assert len({r["hash"] for r in records}) == 10  # every rank saw its own tokens


def test_sharded_norms_are_summed_across_ranks(dist_run: Path) -> None:
    want = json.loads((dist_run / "expected.json").read_text())["sharded"]
    (row,) = _rows(dist_run / "sharded" / "forensics" / "metrics.jsonl")
    for key in ("grad_norm", "param_norm", "update_norm"):
        assert row[key] == pytest.approx(want[key], rel=1e-6), key
