"""The log's own words on the page: a non-finite-loss report or the loss scaler's overflow
lines inside an incident are quoted in its Symptoms, as detect stored them (before, they
fed detection but no page said what the log said)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from consistency import check_report

from forensics.analyze import AnalyzeOptions, analyze
from forensics.report import export
from forensics.store import open_store

# detectron2's writer line and its anomaly check (facebookresearch/detectron2#214, #838):
# `_detect_anomaly` raises with the iteration; the final writer line after it is finite
D2_LINE = (
    "[11/01 20:{m:02d}:{s:02d} d2.utils.events]: eta: 5:42:02  iter: {it}  total_loss: {loss:.3f}"
    "  loss_cls: {cls:.3f}  loss_box_reg: 0.488  time: 0.2301  data_time: 0.0033  lr: 0.020000"
    "  max_mem: 3782M"
)
D2_TAIL = """\
Traceback (most recent call last):
  File "/home/user/detectron2/detectron2/engine/train_loop.py", line 132, in train
    self.run_step()
  File "/home/user/detectron2/detectron2/engine/train_loop.py", line 239, in _detect_anomaly
    self.iter, loss_dict
FloatingPointError: Loss became infinite or NaN at iteration=2137!
loss_dict = {'loss_cls': tensor(nan, device='cuda:0', grad_fn=<NllLossBackward>)}
"""


def _detectron2_log(path: Path) -> Path:
    lines = []
    for k, it in enumerate(range(19, 2120, 20)):
        loss = 1.6 * math.exp(-it / 1500) + 0.9 + 0.01 * math.sin(it)
        if it >= 2019:
            loss = 1.75 * 1.5 ** ((it - 2019) / 20)  # climbs to ~12 by 2119
        lines.append(D2_LINE.format(m=k // 60 % 60, s=k % 60, it=it, loss=loss, cls=0.7 * loss))
    path.mkdir(parents=True)
    log = path / "log.txt"
    log.write_text("\n".join(lines) + "\n" + D2_TAIL)
    return log


@pytest.fixture
def no_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "find_chromium", lambda: (None, "no browser in this test"))


def test_a_nan_report_with_its_iteration_is_quoted_at_that_step(
    tmp_path: Path, no_browser: None
) -> None:
    # before: the FloatingPointError line was read as a metric `Loss became infinite or`
    # (NaN at 2137), and no page said it
    log = _detectron2_log(tmp_path / "d2")
    result = analyze(log.parent, tmp_path / "out", options=AnalyzeOptions(replay=False))
    with open_store(result.db, read_only=True) as store:
        events = store.con.execute("SELECT step, kind, detail FROM events").fetchall()
        metrics = {
            m for (m,) in store.con.execute("SELECT DISTINCT metric FROM metrics").fetchall()
        }
        incidents = store.con.execute("SELECT onset_step, type, evidence FROM incidents").fetchall()
    # the report after the last metric line (2119) belongs to the divergence, not a new incident
    assert [(o, t) for o, t, _ in incidents] == [(2019, "divergent")]
    evidence = incidents[0][2]
    assert events == [(2137, "nonfinite_loss", "Loss became infinite or NaN at iteration=2137!")]
    assert not any("became" in m for m in metrics)
    with open_store(result.db, read_only=True) as store:
        assert check_report(tmp_path / "out", store, "d2") == []  # the quote is the stored event
    said = [e for e in json.loads(evidence) if e["key"] == "logged_report"]
    assert [(e["value"], e["note"]) for e in said] == [(2137, events[0][2])]
    page = next((tmp_path / "out" / "postmortems").glob("*.md")).read_text()
    assert "The log reports at step 2137: `Loss became infinite or NaN at iteration=2137!`." in page


# DeepSpeed's fp16 loss scaler (ymcui/Chinese-LLaMA-Alpaca#534 layout: HF Trainer dicts with
# DeepSpeed's OVERFLOW lines between them)
OVERFLOW = "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}"


def test_overflow_reports_are_counted_and_the_first_quoted(
    tmp_path: Path, no_browser: None
) -> None:
    out, scale = [], 65536
    for step in range(1, 401):
        loss = 2.5 * math.exp(-step / 300) + 1.2 + 0.01 * math.sin(step)
        if 300 <= step < 306:
            out.append(OVERFLOW.format(a=scale, b=scale // 2))
            scale //= 2
            loss *= 1.0 + 0.5 * (step - 299)
        out.append(
            f"{{'loss': {loss:.4f}, 'grad_norm': 1.0, 'learning_rate': 1e-05, "
            f"'epoch': {step / 400:.2f}}}"
        )
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "train.log").write_text("\n".join(out) + "\n")
    result = analyze(folder, tmp_path / "out", options=AnalyzeOptions(replay=False))
    with open_store(result.db, read_only=True) as store:
        said = store.con.execute(
            "SELECT step, detail FROM events WHERE kind = 'overflow' ORDER BY step"
        ).fetchall()
        rows = store.con.execute("SELECT onset_step, evidence FROM incidents").fetchall()
    steps = [s for s, _ in said]
    assert len(steps) == 6 and "Attempted loss scale: 65536, reducing to 32768" in said[0][1]
    found = [
        (e["value"], e["note"])
        for _, ev in rows
        for e in json.loads(ev)
        if e["key"] in ("logged_overflows", "logged_overflow_first")
    ]
    assert found == [(6, f"steps {steps[0]}-{steps[-1]}"), (steps[0], said[0][1])]
    pages = " ".join(p.read_text() for p in (tmp_path / "out" / "postmortems").glob("*.md"))
    assert (
        f"The log reports 6 loss-scale overflows (steps {steps[0]}-{steps[-1]}); at "
        f"step {steps[0]}: `{said[0][1]}`." in pages
    )


def test_overflow_reports_without_words_are_counted_not_quoted_blank(
    tmp_path: Path, no_browser: None
) -> None:
    # ColossalAI's `found inf during ShardedOptimV2 step` wrapped by rich after `found`
    # (hpcaitech/ColossalAI#1375): the event has no text; before, the page quoted
    # "(blank: 0 characters)"
    out = []
    for step in range(1, 401):
        loss = 2.5 * math.exp(-step / 300) + 1.2 + 0.01 * math.sin(step)
        if 300 <= step < 304:
            out.append(
                "[09/30/22 02:45:43] WARNING  colossalai - ShardedOptimizerV2 - WARNING: found"
            )
            out.append("                             inf during ShardedOptimV2 step")
            loss *= 2.0
        out.append(f"step {step} | loss {loss:.4f} | lr 2.5e-05")
    folder = tmp_path / "cai"
    folder.mkdir()
    (folder / "train.log").write_text("\n".join(out) + "\n")
    analyze(folder, tmp_path / "out", options=AnalyzeOptions(replay=False))
    pages = " ".join(p.read_text() for p in (tmp_path / "out" / "postmortems").glob("*.md"))
    assert "blank" not in pages and "The log reports 4 loss-scale overflows (steps" in pages


# DeepSpeed-Chat step 3 (deepspeedai/DeepSpeedExamples#444): an RLHF actor and critic, no
# `loss`; the lines 3183-3185 verbatim, the steps around them in the same syntax
DSCHAT = """\
|E2E latency=2.10s |Gather latency=0.00s (0.00%) |Generate time=1.60s (75.20%) |Training time=0.42s (19.70%) |Others=0.10 (5.10%)|CurSamplesPerSec=1.88 |AvgSamplesPerSec=1.95
epoch: 0|step: {step}|ppo_ep: 1|act_loss: {act}|cri_loss: {cri}|unsuper_loss: 0.0
average reward score: -7.64842212
-------------------------------------------------------------------------------------
"""  # noqa: E501


def test_nan_inf_in_metrics_no_check_reads_are_said_not_denied(
    tmp_path: Path, no_browser: None
) -> None:
    # before: "No incident ...: no NaN/Inf value" while act_loss and cri_loss were inf from 3184
    blocks = []
    for step in range(3120, 3200):
        act, cri = (0.17 + 0.01 * (step % 3), 0.27) if step < 3183 else ("inf", "inf")
        if step == 3183:
            act, cri = 30.921875, 30.515625
        blocks.append(DSCHAT.format(step=step, act=act, cri=cri))
    folder = tmp_path / "dschat"
    folder.mkdir()
    (folder / "training.log").write_text("".join(blocks))
    analyze(folder, tmp_path / "out", options=AnalyzeOptions(replay=False))
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "no NaN/Inf value" not in readme
    assert (
        "The log holds NaN/Inf values the checks do not read, in `act_loss` (16, from step "
        "3184), `cri_loss` (16, from step 3184)" in readme
    )
    assert "| `act_loss` | 80 | 3120–3199 | every 1 step | 16 from step 3184 |" in readme


def test_llmc_token_out_of_vocabulary_is_reported_in_the_summary(
    real_logs: Path, tmp_path: Path, no_browser: None
) -> None:
    # HectorFCardenas/llm.c gpt2_train.11685414.log, line 19761: llm.c prints
    # `Error: Token out of vocabulary at train_gpt2.cu:675` (Token: 678715752, Vocab: 50257)
    # inside its step 19528 line and trains on. Before, only a parser note said it and the
    # README called the run clean
    log = real_logs / "HectorFCardenas__llm.c" / "gpt2_train.11685414.log"
    result = analyze(log, tmp_path / "out", options=AnalyzeOptions(replay=False))
    with open_store(result.db, read_only=True) as store:
        said = store.con.execute(
            "SELECT step, detail FROM events WHERE kind = 'data_error'"
        ).fetchall()
        (loss,) = store.con.execute(
            "SELECT value FROM metrics WHERE metric = 'loss' AND step = 19528"
        ).fetchone()  # type: ignore[misc]
    assert said == [(19528, "Error: Token out of vocabulary at train_gpt2.cu:675")]
    assert loss == 3.329409  # the record the error was printed into is still read
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "**The log reports data the model cannot take**" in readme
    assert "- step 19528: `Error: Token out of vocabulary at train_gpt2.cu:675`" in readme
