"""The formats added to ../shared/real_logs in SOURCES.md section 1.5, and the whole folder.

Loss counts are taken from the files with plain string tests (not the readers' regexes);
NaN entries count as entries and must come back as NaN.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from forensics.ingest import ingest
from forensics.ingest.base import sniff_format
from forensics.store import open_store

OLMO = "AntonioLopardo__OLMo/training.log"
LLMC = "HectorFCardenas__llm.c/gpt2_train.11685414.log"
MDS = "microsoft__Megatron-DeepSpeed"


def _ingest(db: Path, path: Path) -> tuple[str, dict[str, pl.DataFrame], list[str]]:
    """(format, {metric: rows}, warnings) of one file through the whole pipeline."""
    with open_store(db) as store:
        (summary,) = ingest(store, [path])
        source = next(s for s in summary.sources if s.kind == "metrics")
        long = store.metrics_long(summary.run)
    frames = {name: long.filter(pl.col("metric") == name) for name in long["metric"].unique()}
    return source.format, frames, source.warnings


def _count(path: Path, test: callable) -> tuple[int, int]:  # type: ignore[valid-type]
    """(loss entries, NaN loss entries) by a plain string test on each line."""
    hits = [
        line
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if test(line)
    ]
    return len(hits), sum("nan" in h.lower().split("loss", 1)[1][:12] for h in hits)


def test_olmo_trainer_log(real_logs: Path, tmp_db: Path) -> None:
    path = real_logs / OLMO
    expected, nans = _count(path, lambda s: s.startswith("    train/CrossEntropyLoss="))
    fmt, m, warnings = _ingest(tmp_db, path)
    assert fmt == "generic_text"
    loss = m["loss"]
    assert loss.height == expected == 1010
    assert int(loss["value"].is_nan().sum()) == nans
    assert loss["step"].min() == 1 and loss["step"].max() == 1010
    first = dict(zip(loss["step"], loss["value"], strict=True))
    assert first[1] == 2.998 and first[2] == 2.919
    assert m["grad_norm"].height == 1010
    # thousands separators: 2,097,152 tokens after step 1 (the run's token counter)
    tokens = m["consumed_tokens"].sort("step")
    assert tokens["value"][0] == 2_097_152
    assert m["tokens_per_s_device"].height == 1009  # per device: not the run's tokens_per_s
    assert any("train/CrossEntropyLoss" in w and "continuation" in w for w in warnings)


def test_llmc_train_gpt2cu_stdout(real_logs: Path, tmp_db: Path) -> None:
    path = real_logs / LLMC
    expected, nans = _count(path, lambda s: s.startswith("step ") and "| loss " in s)
    fmt, m, warnings = _ingest(tmp_db, path)
    assert fmt == "generic_text"
    loss = m["loss"]
    assert loss.height == expected == 19560
    assert int(loss["value"].is_nan().sum()) == nans == 0  # `(+nanz)` is not a NaN loss
    assert loss["step"].is_unique().all()
    got = dict(zip(loss["step"], loss["value"], strict=True))
    assert got[1] == 11.009662 and got[19560] == 3.253402
    val = m["val_loss"]
    assert val.filter(pl.col("step") == 0)["value"].to_list() == [11.007921]
    assert m["grad_norm"].height == 19560
    assert any("lines ignored" in w for w in warnings)


def test_megatron_deepspeed_tensorboard(real_logs: Path, tmp_db: Path) -> None:
    (path,) = (real_logs / MDS).iterdir()
    fmt, m, warnings = _ingest(tmp_db, path)
    assert fmt == "tensorboard"
    assert m["loss"].height == 5
    assert m["loss"]["step"].to_list() == [1, 2, 3, 4, 5]
    # the `vs samples` / `vs tokens` copies never reach the step axis
    for frame in m.values():
        assert frame["step"].max() <= 5
    assert any("samples or tokens consumed" in w for w in warnings)
    assert m["consumed_tokens"]["value"].max() == 40960
    assert "val_loss" in m


# every file in real_logs: claimed by a reader, with its exact number of training losses
EXPECTED_LOSS = {
    OLMO: 1010,
    LLMC: 19560,
    "aigoncharov__trainer_state_viz/trainer_state.json": 30,
    "bigscience-workshop__bigscience/experiments__gpt2-meg__meg_gpt2_base_n4_dp1_tp4_pp4"
    "-1809579.out": 19,
}


def test_no_file_in_real_logs_is_refused(real_logs: Path) -> None:
    refused = []
    for path in sorted(real_logs.rglob("*")):
        if path.is_file() and path.name != "SOURCES.md" and sniff_format(path) is None:
            refused.append(path.name)
    assert not refused


@pytest.mark.parametrize("rel", list(EXPECTED_LOSS), ids=lambda r: r.split("/")[0])
def test_loss_counts(real_logs: Path, tmp_db: Path, rel: str) -> None:
    _, m, _ = _ingest(tmp_db, real_logs / rel)
    assert m["loss"].height == EXPECTED_LOSS[rel]
    assert not any(math.isinf(v) for v in m["loss"]["value"])
