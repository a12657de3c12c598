"""A gradient-norm near miss says what clipping did with it, from the logged (pre-clip) norm
against the configured clip, never that clipping acted when the norm sat under it."""

from __future__ import annotations

from pathlib import Path

from forensics.analyze import AnalyzeOptions, analyze
from forensics.store import open_store


def test_olmo_grad_norm_under_the_clip_is_not_said_to_be_clipped(
    real_logs: Path, tmp_path: Path
) -> None:
    # OLMo's step 42: `optim/total_grad_norm=0.8963`, 5.6x its trailing median, with
    # max_grad_norm 1.0 in the printed config. Before: "clipping at 1.0 absorbed it"
    log = real_logs / "AntonioLopardo__OLMo" / "training.log"
    result = analyze(log, tmp_path / "out", options=AnalyzeOptions(replay=False, report=False))
    with open_store(result.db, read_only=True) as store:
        rows = store.con.execute(
            "SELECT step, value, detail FROM near_misses WHERE metric = 'grad_norm'"
        ).fetchall()
    assert rows, "OLMo's grad-norm near misses"
    for step, value, detail in rows:
        if value <= 1.0:
            assert "under the clip at 1.0: clipping did not act" in detail, (step, detail)
        else:
            assert "above the clip at 1.0: clipping scaled that update down" in detail
    assert any(s == 42 and v < 1.0 for s, v, _ in rows)
