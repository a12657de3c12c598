"""An llm.c-format run end to end, tiers 1 and 2: shards read in order, a log, no checkpoint.

The bundled GPT is trained on llm.c `.bin` shards read by llm.c's sequential loader rule
(from the loader's own records), one step's span overwritten with tokens that appear nowhere
else, and the loss written as llm.c's main.log (`s:N trl:X norm:Y`, 0-based). `analyze` on
the folder, told only B and T, must find the spike, rebuild the batch the loader read at that
step, run the data probes, and have the bundled model (trained afresh on the run's own
stream, never the run's weights) confirm the rare tokens as a proxy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from forensics.analyze import AnalyzeOptions, analyze
from forensics.replay.sources import Settings, Sources, loader_records
from forensics.replay.state import read_span
from forensics.sim.data import write_shard
from forensics.sim.model import GPT, preset
from forensics.store import open_store

B, T, STEPS, RARE_STEP, COMMON, RARE_ROWS = 8, 32, 150, 110, 200, 5


def _stream(n: int, rng: np.random.Generator) -> np.ndarray:
    succ = rng.integers(0, COMMON, size=(COMMON, 3)).tolist()
    pick, jump, rand = (
        rng.integers(0, 3, n).tolist(),
        (rng.random(n) < 0.1).tolist(),
        rng.integers(0, COMMON, n).tolist(),
    )
    out, w = [], 0
    for i in range(n):
        out.append(w)
        w = rand[i] if jump[i] else succ[w][pick[i]]
    return np.asarray(out, dtype=np.int64)


@pytest.fixture(scope="module")
def llmc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("llmc_run")
    rng = np.random.default_rng(3)
    files = [run / "tiny_train_000000.bin", run / "tiny_train_000001.bin"]
    stream = _stream(60_000, rng)  # one language, cut in two shards
    write_shard(files[0], stream[:30_000])
    write_shard(files[1], stream[30_000:])
    st = Settings(B, T, 1, 1, "llmc", 0)
    records = loader_records(files, st, STEPS - 1)
    rec = records[RARE_STEP][0]  # 5 of that batch's 8 rows: tokens seen nowhere else
    tokens = np.fromfile(rec.source, dtype=np.uint16, offset=1024).astype(np.int64)
    tokens[rec.token_offset : rec.token_offset + RARE_ROWS * T] = rng.integers(
        COMMON, 512, RARE_ROWS * T
    )
    write_shard(Path(rec.source), tokens)
    torch.manual_seed(0)
    model = GPT(preset("tiny", vocab_size=512, block_size=T))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    lines = []
    for step in range(STEPS):
        x, y = read_span(records[step][0])
        _, loss = model(x, y)
        assert loss is not None
        opt.zero_grad()
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        lines.append(f"s:{step} trl:{float(loss.detach()):.4f} lr:0.003000 norm:{norm:.4f}")
    (run / "main.log").write_text("\n".join(lines) + "\n")
    return run


def test_analyze_finds_rebuilds_and_judges_the_rare_batch(llmc_run: Path, tmp_path: Path) -> None:
    src = Sources(batch_size=B, seq_len=T, loader="llmc")
    opts = AnalyzeOptions(device="cpu", report=False, sources=src)
    result = analyze(llmc_run, tmp_path / "out", options=opts)
    note = next(n for n in result.notes if n.startswith("replay:"))
    assert "tier 2 ran" in note and "tier 3 needs: no checkpoint" in note
    with open_store(result.db) as store:
        inc = store.query("SELECT incident_id, onset_step, peak_step, cause FROM incidents").rows()
        rows = {
            r[0]: r[1:]
            for r in store.query("SELECT probe, verdict, numbers, detail FROM replays").rows()
        }
        batch = store.query(
            "SELECT source, token_offset, manifest FROM batches WHERE step = ?", [RARE_STEP]
        ).row(0)
    assert [(onset <= RARE_STEP <= peak, cause) for _, onset, peak, cause in inc] == [
        (True, "rare_tokens")
    ]
    # the stored batch of that step is the span the loader read (and that we overwrote)
    assert batch[2] == "loader:llmc" and batch[1] == RARE_STEP * B * T
    verdict, numbers, detail = rows["reference_judge"]
    assert verdict == "confirmed" and detail.startswith("proxy")
    assert '"proxy": true' in numbers
    assert rows["data_corruption"][0] in ("refuted", "confirmed", "inconclusive")
    assert rows["rare_tokens"][2].startswith("not run: no checkpoint")
