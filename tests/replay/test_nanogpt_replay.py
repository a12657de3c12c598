"""A nanoGPT run replayed through its own `ckpt.pt` (tier 3).

The run (nanogpt_run.py) is written the way nanoGPT's train.py writes one, reading its
`train.bin` in order; `forensics analyze` with the loader settings must rebuild its batches,
resume from the checkpoint, reproduce the logged loss, confirm the injected rare tokens and
refute the optimizer causes. Without loader settings it must say in one line why nanoGPT's
batches cannot be rebuilt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fix_share_checks import check_ordinary_substitutes
from nanogpt_run import CKPT_ITER, COMMON, RARE_ITER, VOCAB, B, T, build_nanogpt_run
from typer.testing import CliRunner

from forensics.cli import app
from forensics.replay.nanogpt import restore, train_iter
from forensics.replay.probes import optimizer
from forensics.store import open_store

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")


@pytest.fixture(scope="module")
def nano(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("nanogpt")
    info = build_nanogpt_run(root)
    info["tokenizer"] = _tokenizer(root / "tokenizer.json")
    return info


def _tokenizer(path: Path) -> Path:
    pytest.importorskip("tokenizers", reason="the [hf] extra is not installed")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return path


def _analyze(nano: dict[str, Any], out: Path, *flags: str) -> str:
    args = ["analyze", str(nano["run"]), "--out", str(out), "--device", "cpu", *flags]
    res = CliRunner().invoke(app, args, terminal_width=400)
    assert res.exit_code == 0, res.output
    return res.output


def test_nanogpt_checkpoint_replays_the_rare_batch(nano: dict[str, Any], tmp_path: Path) -> None:
    loader = ["--shards", str(nano["shard"]), "--loader", "llmc", "--batch-size", str(B),
              "--seq-len", str(T), "--tokenizer", str(nano["tokenizer"])]  # fmt: skip
    text = _analyze(nano, tmp_path / "out", *loader)
    assert "tier 3 ran" in text
    with open_store(tmp_path / "out" / "forensics.duckdb") as store:
        (onset, peak), *_ = store.query("SELECT onset_step, peak_step FROM incidents").rows()
        rows = {p: (v, json.loads(n), d) for p, v, n, d in store.query(
            "SELECT probe, verdict, numbers, detail FROM replays").rows()}  # fmt: skip
    assert onset <= RARE_ITER <= peak
    verdict, n, detail = rows["reproduce"]
    assert verdict == "confirmed", detail
    # ckpt.pt was saved at the top of iteration CKPT_ITER: the state after CKPT_ITER - 1
    assert n["checkpoint_step"] == CKPT_ITER - 1 and n["offending_step"] == RARE_ITER
    assert n["replayed_loss"] == pytest.approx(nano["losses"][RARE_ITER], abs=1e-6)
    assert n["logged_loss"] == pytest.approx(nano["losses"][RARE_ITER], abs=5e-5)  # %.4f
    assert rows["rare_tokens"][0] == "confirmed", rows["rare_tokens"][2]
    assert rows["rare_tokens"][1]["model"].startswith("the run's own nanoGPT")
    assert rows["hardware"][0] == "refuted" and rows["overflow"][0] == "refuted"
    for probe in ("stale_beta2", "lr_too_high"):
        verdict, n, detail = rows[probe]
        assert verdict == "refuted" and "do not produce the spike" in detail, detail
        assert n["start_step"] == CKPT_ITER - 1 and RARE_ITER in n["hard_batch_steps"]
    assert rows["stale_beta2"][1]["run_beta2"] == 0.99
    data = rows["data_corruption"][1]
    assert data["tokenizer"] == f"{nano['tokenizer'].parent.name}/tokenizer.json"
    rare = [int(w[1:]) for w in data["excerpts"][0].split()]
    assert len(rare) == T and all(i >= COMMON for i in rare)  # an injected row, decoded
    assert "reference_judge" not in rows


def test_the_fix_share_is_measured_through_the_nanogpt_loop(
    nano: dict[str, Any], tmp_path: Path, monkeypatch: Any
) -> None:
    """The fix share (fix_share.measure_fix, the bundled trainer's measure) through the
    nanoGPT loop from its ckpt.pt: the run without the trigger trains ordinary batches read
    after the window at the hard steps. beta2 is not stale here, so its verdict is forced to
    confirmed to reach the fix (what follows a confirmation is under test, not the verdict)."""
    from forensics.replay.nanogpt import NanoReplayer

    monkeypatch.setattr(optimizer, "decide_beta2", lambda w: ("confirmed", "forced"))
    seen: dict[str, Any] = {}
    rerun = NanoReplayer.rerun

    def spy(self: NanoReplayer, *args: Any, **kw: Any) -> dict[int, Any]:
        rows = rerun(self, *args, **kw)
        if kw.get("substitute") and "clean" not in seen:  # the first draw decides
            seen["clean"], seen["sub"], seen["s"] = rows, kw["substitute"], self.s
        return rows

    monkeypatch.setattr(NanoReplayer, "rerun", spy)
    loader = ["--shards", str(nano["shard"]), "--loader", "llmc", "--batch-size", str(B),
              "--seq-len", str(T), "--no-report"]  # fmt: skip
    _analyze(nano, tmp_path / "out", *loader)
    with open_store(tmp_path / "out" / "forensics.duckdb") as store:
        verdict, n, detail = next(
            (v, json.loads(x), d) for p, v, x, d in store.query(
                "SELECT probe, verdict, numbers, detail FROM replays").rows() if p == "stale_beta2"
        )  # fmt: skip
    assert verdict == "confirmed"
    assert n["fix_checkpoint_step"] == CKPT_ITER - 1 and RARE_ITER in n["fix_hard_steps"]
    check_ordinary_substitutes(n)
    assert n["fix_original_loss"] == pytest.approx([nano["losses"][t] for t in n["fix_steps"]],
                                                   abs=1e-6)  # fmt: skip
    assert "replaced by the ordinary batches of steps" in detail
    # the substituted steps trained the other steps' batches: the state before the first
    # hard step, re-run by hand on them, gives the same losses
    s, sub, clean = seen["s"], seen["sub"], seen["clean"]
    st = restore(Path(s.data.checkpoints[-1].path), s.device)
    for it in range(st.it, s.plan.end + 1):
        row = train_iter(st, s.batch(sub.get(it, it)))
        assert row["loss"] == clean[it]["loss"], it
    assert [clean[t]["loss"] for t in n["fix_steps"]] == n["fix_trigger_free_loss"]


def test_without_loader_settings_says_why(nano: dict[str, Any], tmp_path: Path) -> None:
    text = _analyze(nano, tmp_path / "out", "--no-report")
    line = next(x for x in text.splitlines() if x.startswith("note: replay"))
    assert "nanoGPT's get_batch samples random offsets" in line and "--loader llmc" in line
