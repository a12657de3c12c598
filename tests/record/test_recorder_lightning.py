"""ForensicsLightningCallback with a real Lightning Trainer: the bundled model in a
LightningModule, two micro-batches per step, a micro-batch of rare-band tokens at a known
step; analyze finds the spike and the manifest names the rare rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

L = pytest.importorskip("lightning.pytorch")
datasets = pytest.importorskip("datasets")

from forensics.analyze import AnalyzeOptions, analyze  # noqa: E402
from forensics.record import ForensicsLightningCallback  # noqa: E402
from forensics.sim.data import Language  # noqa: E402
from forensics.sim.model import GPT, GPTConfig  # noqa: E402
from forensics.store import open_store  # noqa: E402

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")

V, T, B, ACCUM, STEPS, RARE_STEP = 256, 32, 4, 2, 45, 35
# Rows of the rare micro-batch: the second micro-batch of RARE_STEP (shuffle off).
RARE_ROWS = list(range(((RARE_STEP - 1) * ACCUM + 1) * B, ((RARE_STEP - 1) * ACCUM + 2) * B))


def tokens_dataset(folder: Path) -> Any:
    """Rows of T + 1 tokens in a `datasets.save_to_disk` folder; the rare micro-batch's rows
    hold rare-band tokens only."""
    lang = Language(vocab_size=V, seed=7)
    n = 8 * STEPS * ACCUM * B  # the run reads the first eighth: the rare band stays rare
    rows = lang.generate(n * (T + 1)).reshape(n, T + 1).astype(np.int64)
    rows[RARE_ROWS] = np.random.default_rng(0).integers(lang.rare_start, V, (B, T + 1))
    datasets.Dataset.from_dict({"input_ids": rows.tolist()}).save_to_disk(folder)
    return datasets.load_from_disk(str(folder)).with_format("torch")


class TinyLM(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters({"lr": 1e-2, "vocab_size": V})
        self.model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=32))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        ids = batch["input_ids"]  # (B, T + 1)
        _, loss = self.model(ids[:, :-1].contiguous(), ids[:, 1:].contiguous())
        assert loss is not None
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2, betas=(0.9, 0.95))


@pytest.fixture(scope="module")
def pl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("pl") / "pl_run"
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(tokens_dataset(run / "data"), batch_size=B, shuffle=False)
    trainer = L.Trainer(
        default_root_dir=run, max_steps=STEPS, accumulate_grad_batches=ACCUM,
        gradient_clip_val=1.0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
        callbacks=[ForensicsLightningCallback(log_every=10, stats_every=1, layers_every=10,
                                              data_source=run / "data")],
    )  # fmt: skip
    trainer.fit(TinyLM(), loader)
    return run


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_files(pl_run: Path) -> None:
    rows = _rows(pl_run / "forensics" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert {"grad_norm", "update_norm", "adam_v_mean", "act_norm/0", "max_attn_logit/1"} <= set(
        rows[9]
    )
    records = _rows(pl_run / "forensics" / "batches.jsonl")
    assert [(r["step"], r["micro"]) for r in records[:4]] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    rare = [r for r in records if r["step"] == RARE_STEP]
    assert rare[1]["sample_indices"] == RARE_ROWS
    cfg = json.loads((pl_run / "forensics" / "config.json").read_text())
    assert cfg["framework"] == "lightning" and cfg["gradient_accumulation_steps"] == ACCUM
    assert cfg["grad_clip"] == 1.0 and cfg["beta2"] == 0.95 and cfg["model"]["lr"] == 1e-2


def test_analyze_finds_and_replays_the_rare_batch(pl_run: Path, tmp_path: Path) -> None:
    """The spike is found; replay rebuilds the step's two micro-batches from the manifest
    (sample indices into the dataset folder, hashes checked): tier 1's data probe and tier 2's
    reference judge run on them; tier 3 says what it needs (a Lightning run has no
    checkpoint replay)."""
    result = analyze(pl_run, tmp_path / "out", options=AnalyzeOptions(device="cpu"))
    with open_store(result.db) as store:
        incidents = store.query("SELECT incident_id, onset_step, peak_step FROM incidents")
        replays = store.query("SELECT incident_id, probe, verdict, detail, numbers FROM replays")
    (inc,) = [r for r in incidents.iter_rows(named=True) if r["onset_step"] <= RARE_STEP <= r[
        "peak_step"]]  # fmt: skip
    mine = [r for r in replays.iter_rows(named=True) if r["incident_id"] == inc["incident_id"]]
    rows = {r["probe"]: r for r in mine}
    print({k: (v["verdict"], v["detail"]) for k, v in rows.items()})
    assert json.loads(rows["data_corruption"]["numbers"])["step"] == RARE_STEP
    assert not rows["data_corruption"]["detail"].startswith("not run")
    judge = rows["reference_judge"]
    assert judge["verdict"] == "confirmed", judge
    assert rows["reproduce"]["detail"].startswith("not run: no checkpoint")
