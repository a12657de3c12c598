"""ForensicsCallback with the real transformers Trainer: a tiny Llama built from a config
(nothing downloaded), an LR jump at a known step, checkpoints saved; analyze finds the spike
and replays it from the recorder's manifest (rows by sample index, hashes checked); the
manifest's sample indices and hashes name exactly the rows the Trainer fed; where the
Trainer's averaged trainer_state.json and the recorder's exact rows disagree, the recorder's
values are the stored ones and the conflicts table says why."""

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

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")

V, T, B, STEPS, RARE, LOG, SAVE = 128, 32, 4, 50, 38, 5, 30


def _args(run: Path) -> TrainingArguments:
    """Checkpoints at SAVE and STEPS; the Trainer logs the loss averaged over LOG steps."""
    return TrainingArguments(
        output_dir=str(run), max_steps=STEPS, per_device_train_batch_size=B,
        save_strategy="steps", save_steps=SAVE, report_to=[], logging_steps=LOG,
        disable_tqdm=True, use_cpu=True, seed=0, max_grad_norm=1.0, learning_rate=3e-3,
        lr_scheduler_type="constant", adam_beta2=0.95,
    )  # fmt: skip


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rows the Trainer's seeded sampler puts in step RARE are rare-band tokens."""
    from forensics.replay.hf_data import index_steps

    run = tmp_path_factory.mktemp("hf") / "hf_run"
    lang = Language(vocab_size=V, seed=3)
    # 8 times the rows the run reads: the rare band stays rare in the dataset's counts
    ids = lang.generate(8 * STEPS * B * T).reshape(-1, T).astype(np.int64)
    plain = datasets.Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    (rare_rows,) = index_steps(_args(run), plain, RARE).steps[RARE]  # the sampler's, not ours
    ids[rare_rows] = np.random.default_rng(0).integers(lang.rare_start, V, (B, T))
    rows = ids.tolist()
    datasets.Dataset.from_dict({"input_ids": rows, "labels": rows}).save_to_disk(run / "data")
    (run.parent / "rare_rows.json").write_text(json.dumps(rare_rows))  # outside the run folder
    ds = datasets.load_from_disk(str(run / "data"))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=T,
    )  # fmt: skip
    callback = ForensicsCallback(log_every=10, stats_every=1, layers_every=10)
    trainer = Trainer(
        model=LlamaForCausalLM(cfg), args=_args(run), train_dataset=ds,
        data_collator=default_data_collator, callbacks=[callback],
    )  # fmt: skip
    trainer.train()
    trainer.save_state()  # <run>/trainer_state.json, as the transformers example scripts do
    history = [h for h in trainer.state.log_history if "loss" in h]
    (run.parent / "log_history.json").write_text(json.dumps(history))
    return run


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_files_and_statistics(hf_run: Path) -> None:
    rows = _rows(hf_run / "forensics" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    spike = rows[RARE - 1]
    assert spike["loss"] > 1.5 * max(r["loss"] for r in rows[RARE - 11 : RARE - 1])
    assert all(r["lr"] == pytest.approx(3e-3) for r in rows)
    assert {"act_norm/1", "max_attn_logit/1", "adam_v_max"} <= set(rows[9])
    cfg = json.loads((hf_run / "forensics" / "config.json").read_text())
    assert cfg["framework"] == "transformers" and cfg["grad_clip"] == 1.0
    assert cfg["model"]["model_type"] == "llama" and cfg["data"]["train_dataset"] == str(
        hf_run / "data"
    )


def test_loss_and_grad_norm_are_what_the_trainer_logs(hf_run: Path) -> None:
    """The Trainer's own log (every LOG steps: the loss averaged over them, the last step's
    grad norm and LR) and the recorder's per-step rows agree."""
    history = json.loads((hf_run.parent / "log_history.json").read_text())
    rows = {r["step"]: r for r in _rows(hf_run / "forensics" / "metrics.jsonl")}
    assert [h["step"] for h in history] == list(range(LOG, STEPS + 1, LOG))
    for logged in history:
        step = logged["step"]
        ours = rows[step]
        mean = np.mean([rows[t]["loss"] for t in range(step - LOG + 1, step + 1)])
        assert mean == pytest.approx(float(logged["loss"]), abs=1e-3)
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
    assert len(set(seen)) == len(seen) == STEPS * B  # no row twice (within one epoch)
    rare = json.loads((hf_run.parent / "rare_rows.json").read_text())
    assert records[RARE - 1]["sample_indices"] == rare


def test_analyze_finds_and_replays_the_spike_from_the_manifest(
    hf_run: Path, tmp_path: Path
) -> None:
    """With no flag: the spike is found; replay rebuilds its batch from forensics/batches.jsonl
    (sample indices into the dataset folder the manifest names, hashes re-checked), resumes
    the run's own Trainer from checkpoint-SAVE, reproduces the logged steps and confirms the
    rare-token batch on the run's own model (tier 3)."""
    result = analyze(hf_run, tmp_path / "out", options=AnalyzeOptions(device="cpu"))
    with open_store(result.db) as store:
        incidents = store.query("SELECT incident_id, onset_step, peak_step FROM incidents")
        replays = store.query("SELECT incident_id, probe, verdict, detail, numbers FROM replays")
        n_batches = store.query("SELECT count(*) AS n FROM batches")["n"][0]
    assert n_batches == STEPS
    (inc,) = [r for r in incidents.iter_rows(named=True) if r["onset_step"] <= RARE <= r[
        "peak_step"]]  # fmt: skip
    mine = [r for r in replays.iter_rows(named=True) if r["incident_id"] == inc["incident_id"]]
    rows = {r["probe"]: r for r in mine}
    assert json.loads(rows["data_corruption"]["numbers"])["step"] == RARE
    repro = json.loads(rows["reproduce"]["numbers"])
    assert repro["checkpoint_step"] == SAVE and repro["prefix_max_abs_diff_loss"] < 1e-3, repro
    assert rows["reproduce"]["verdict"] == "confirmed", rows["reproduce"]
    assert rows["rare_tokens"]["verdict"] == "confirmed", rows["rare_tokens"]
    assert json.loads(rows["rare_tokens"]["numbers"])["model"] == "the run's own (tier 3)"


def test_replay_refuses_a_dataset_whose_rows_changed(hf_run: Path, tmp_path: Path) -> None:
    """The dataset folder no longer holds the rows the run trained on (re-shuffled): the
    rebuilt batches' hashes differ, and every replay row says so instead of probing batches
    the run never saw."""
    import shutil

    run = tmp_path / "hf_run"
    shutil.copytree(hf_run, run, ignore=shutil.ignore_patterns("data"))
    ds = datasets.load_from_disk(str(hf_run / "data"))
    ds.select(list(range(1, len(ds))) + [0]).save_to_disk(run / "data")
    result = analyze(run, tmp_path / "out", options=AnalyzeOptions(device="cpu"))
    with open_store(result.db) as store:
        details = store.query("SELECT detail FROM replays")["detail"].to_list()
    assert details and all(
        d.startswith(f"not run: batches not rebuilt: the batch rebuilt from {run / 'data'} for ")
        and "does not match the recorder's hash" in d
        for d in details
    ), details


def test_manifest_index_checks_the_hashes_it_is_asked_to(hf_run: Path, tmp_path: Path) -> None:
    from forensics.replay.hf_data import DataUnavailable
    from forensics.replay.manifest_source import manifest_index, recorded_batches

    opts = AnalyzeOptions(replay=False, report=False)
    with open_store(analyze(hf_run, tmp_path / "o", options=opts).db) as s:
        rec = recorded_batches(s, "hf_run")
        moved = recorded_batches(s, "hf_run", tmp_path)  # --dataset: a folder that moved
    assert (
        rec is not None
        and rec.path == hf_run / "data"
        and sorted(rec.steps) == list(range(1, STEPS + 1))
    )
    assert moved is not None and moved.path == tmp_path and moved.steps == rec.steps
    ds = datasets.load_from_disk(str(hf_run / "data"))
    manifest_index(rec, ds, [RARE, RARE + 1])
    assert rec.checked == 2
    shuffled = ds.select(list(range(1, len(ds))) + [0])
    with pytest.raises(DataUnavailable, match=r"for step 1 \(micro-batch 0\) does not match"):
        manifest_index(rec, shuffled, [1])


def test_recorder_rows_win_over_trainer_state(hf_run: Path, tmp_path: Path) -> None:
    """trainer_state.json (loss averaged over LOG steps) and forensics/metrics.jsonl (exact)
    both log steps LOG, 2*LOG...: the exact value is stored, the average is in `conflicts`."""
    exact = {r["step"]: r["loss"] for r in _rows(hf_run / "forensics" / "metrics.jsonl")}
    result = analyze(hf_run, tmp_path / "out", options=AnalyzeOptions(replay=False, report=False))
    with open_store(result.db) as store:
        loss = dict(
            store.query("SELECT step, value FROM metrics WHERE metric = 'loss'").iter_rows()
        )
        lost = store.query(
            "SELECT step, value, source, kept_value, kept_source, rule FROM conflicts "
            "WHERE metric = 'loss' ORDER BY step"
        )
    assert loss == pytest.approx(exact)  # every step, exact, once
    assert lost["step"].to_list() == list(range(LOG, STEPS + 1, LOG))
    assert set(lost["rule"]) == {"recorder"}
    assert all(s.endswith("trainer_state.json") for s in lost["source"])
    assert all(s.endswith("forensics/metrics.jsonl") for s in lost["kept_source"])
    history = {h["step"]: h["loss"] for h in json.loads((hf_run.parent / "log_history.json")
                                                         .read_text())}  # fmt: skip
    for row in lost.iter_rows(named=True):
        assert row["value"] == pytest.approx(history[row["step"]])  # the Trainer's average
        assert row["kept_value"] == pytest.approx(exact[row["step"]])
