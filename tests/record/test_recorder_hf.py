"""ForensicsCallback with the real transformers Trainer: a tiny Llama built from a config
(nothing downloaded), an LR jump at a known step; analyze finds the spike, and the manifest's
sample indices and hashes name exactly the rows the Trainer fed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

from forensics.analyze import AnalyzeOptions, analyze  # noqa: E402
from forensics.record import ForensicsCallback  # noqa: E402
from forensics.sim.data import Language  # noqa: E402
from forensics.store import open_store  # noqa: E402

V, T, B, STEPS, JUMP = 128, 32, 4, 50, 38


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("hf") / "hf_run"
    ids = Language(vocab_size=V, seed=3).generate(STEPS * B * T).reshape(-1, T).astype(np.int64)
    rows = ids.tolist()
    datasets.Dataset.from_dict({"input_ids": rows, "labels": rows}).save_to_disk(run / "data")
    ds = datasets.load_from_disk(str(run / "data"))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=T,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    # LambdaLR counts from 0: factor 150 applies to optimizer step JUMP (1-based).
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 150.0 if s == JUMP - 1 else 1.0)
    args = TrainingArguments(
        output_dir=str(run), max_steps=STEPS, per_device_train_batch_size=B, save_strategy="no",
        report_to=[], logging_steps=1, disable_tqdm=True, use_cpu=True, seed=0,
        max_grad_norm=1.0,
    )  # fmt: skip
    callback = ForensicsCallback(log_every=10, stats_every=1, layers_every=10)
    trainer = Trainer(
        model=model, args=args, train_dataset=ds, data_collator=default_data_collator,
        optimizers=(opt, sched), callbacks=[callback],
    )  # fmt: skip
    trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    (run.parent / "log_history.json").write_text(json.dumps(history))  # outside the run folder
    return run


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_files_and_statistics(hf_run: Path) -> None:
    rows = _rows(hf_run / "forensics" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    jump = rows[JUMP - 1]
    assert jump["lr"] == pytest.approx(0.45) and rows[JUMP - 2]["lr"] == pytest.approx(3e-3)
    before = np.median([r["update_norm"] for r in rows[JUMP - 11 : JUMP - 1]])
    assert jump["update_norm"] > 20 * before  # the jump shows in the update, not yet the loss
    assert {"act_norm/1", "max_attn_logit/1", "adam_v_max"} <= set(rows[9])
    cfg = json.loads((hf_run / "forensics" / "config.json").read_text())
    assert cfg["framework"] == "transformers" and cfg["grad_clip"] == 1.0
    assert cfg["model"]["model_type"] == "llama" and cfg["data"]["train_dataset"] == str(
        hf_run / "data"
    )


def test_loss_and_grad_norm_are_what_the_trainer_logs(hf_run: Path) -> None:
    """The Trainer's own per-step log (logging_steps=1) and the recorder agree."""
    history = json.loads((hf_run.parent / "log_history.json").read_text())
    rows = {r["step"]: r for r in _rows(hf_run / "forensics" / "metrics.jsonl")}
    assert len(history) == STEPS
    for logged in history:
        ours = rows[logged["step"]]
        assert ours["loss"] == pytest.approx(float(logged["loss"]), abs=1e-3)
        assert ours["grad_norm"] == pytest.approx(float(logged["grad_norm"]), rel=1e-3)
        assert ours["lr"] == pytest.approx(float(logged["learning_rate"]), rel=1e-6)


def test_manifest_names_the_rows_the_trainer_fed(hf_run: Path) -> None:
    ds = datasets.load_from_disk(str(hf_run / "data"))
    records = _rows(hf_run / "forensics" / "batches.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    seen = []
    for rec in records:
        ids = np.asarray(ds[rec["sample_indices"]]["input_ids"], dtype="<i8")
        assert "sha256:" + hashlib.sha256(ids.tobytes()).hexdigest() == rec["hash"]
        assert rec["source"] == "../data" and rec["lengths"] == [T] * B
        seen += rec["sample_indices"]
    assert len(set(seen)) == len(seen) == STEPS * B  # one epoch, each row once


def test_analyze_finds_the_lr_spike(hf_run: Path, tmp_path: Path) -> None:
    result = analyze(hf_run, tmp_path / "out", options=AnalyzeOptions(replay=False))
    with open_store(result.db) as store:
        incidents = store.query("SELECT onset_step, peak_step FROM incidents")
        n_batches = store.query("SELECT count(*) AS n FROM batches")["n"][0]
    assert n_batches == STEPS
    # The update of step JUMP first shows in the loss of step JUMP + 1.
    spans = incidents.iter_rows()
    assert any(onset <= JUMP + 1 <= peak <= JUMP + 3 for onset, peak in spans), incidents
