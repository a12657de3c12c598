"""HF's `logging_nan_inf_filter` writes `loss: 0.0` for a logging window whose every loss was
NaN/Inf (with `grad_norm: nan`), as users paste it (AnswerDotAI/ModernBERT#233):

    {'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.774074342405685e-06, 'epoch': 0.53}
    {'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.773696745450087e-06, 'epoch': 0.53}

Read as a loss of 0 it is a dip that drags the whole log out of log space and reads as
"corrupt data (a batch far below trend)". The runs here are written by the real Trainer
(transformers, the [hf] extra) with a model whose loss turns NaN from a known step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
from hf_toy import STEPS, Regressor, train  # noqa: E402

from forensics.detect import detect, load_rules  # noqa: E402
from forensics.ingest import ingest  # noqa: E402
from forensics.ingest.readers.hf_trainer import HfTrainerReader  # noqa: E402
from forensics.store import open_store  # noqa: E402

NAN_FROM = 45


@pytest.fixture(scope="module")
def diverged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(tmp_path_factory.mktemp("hf") / "diverged", Regressor(NAN_FROM))


def _history(state: Path) -> list[dict[str, Any]]:
    return [e for e in json.loads(state.read_text())["log_history"] if "loss" in e]


def test_the_trainer_really_logs_zero_for_nan(diverged: Path) -> None:
    """What the Trainer wrote: loss 0.0 with a NaN grad norm from the first NaN step."""
    after = [e for e in _history(diverged) if e["step"] >= NAN_FROM]
    assert after and all(e["loss"] == 0.0 for e in after)
    assert all(math.isnan(float(e["grad_norm"])) for e in after)
    assert all(e["loss"] > 0.5 for e in _history(diverged) if e["step"] < NAN_FROM)


def test_zero_losses_with_nan_grad_norm_read_as_nan(diverged: Path) -> None:
    res = HfTrainerReader().read(diverged)
    loss = res.metrics.filter(res.metrics["raw_name"] == "loss").sort("step")
    values = dict(zip(loss["step"].to_list(), loss["value"].to_list(), strict=True))
    assert all(math.isnan(v) for s, v in values.items() if s >= NAN_FROM)
    assert all(v > 0.5 for s, v in values.items() if s < NAN_FROM)
    (note,) = [w for w in res.warnings if "read as NaN" in w]
    assert f"{STEPS - NAN_FROM + 1} 'loss: 0.0' entries (steps {NAN_FROM}..{STEPS})" in note


def test_the_divergence_is_found_not_a_dip(diverged: Path, tmp_path: Path) -> None:
    with open_store(tmp_path / "f.duckdb") as store:
        ingest(store, [diverged.parent.parent], run="diverged")
        (res,) = detect(store, "diverged", rules=load_rules())
    (inc,) = res.incidents
    assert inc.type == "divergent" and inc.cause != "data_corruption"
    assert inc.features["nonfinite_loss"] >= STEPS - NAN_FROM
    assert inc.features["pre_dip"] is None or inc.features["pre_dip"] > -0.15


def test_one_nan_step_in_a_window_stays_a_finite_mean(tmp_path: Path) -> None:
    """At logging_steps 5 one NaN step is replaced by the window's running mean: the window
    logs a finite loss (a dip of about 1/5), which is not a stand-in and is kept as logged."""
    state = train(tmp_path / "one", Regressor(None, nan_at=(23,)), logging_steps=5)
    res = HfTrainerReader().read(state)
    loss = res.metrics.filter(res.metrics["raw_name"] == "loss")["value"].to_list()
    assert all(math.isfinite(v) and v > 0 for v in loss)
    assert not [w for w in res.warnings if "read as NaN" in w]


def test_a_real_zero_loss_beside_a_finite_grad_norm_is_kept(tmp_path: Path) -> None:
    """A loss rounded to 0.0 (under 5e-5) with a finite grad norm is a loss, not a NaN."""
    history = [
        {"step": s, "loss": 0.0002 if s < 3 else 0.0, "grad_norm": 1e-4, "epoch": s / 10}
        for s in range(1, 6)
    ]
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": history, "max_steps": 5}))
    res = HfTrainerReader().read(state)
    loss = res.metrics.filter(res.metrics["raw_name"] == "loss")["value"].to_list()
    assert loss == [0.0002, 0.0002, 0.0, 0.0, 0.0] and not res.warnings


def test_without_grad_norm_a_fall_from_a_real_loss_is_the_stand_in(tmp_path: Path) -> None:
    """Older Trainers log no grad norm: a 0.0 right after a loss of 2.3 cannot be a loss."""
    losses = [2.4, 2.3, 0.0, 0.0]
    history = [{"step": i + 1, "loss": v, "epoch": i / 10} for i, v in enumerate(losses)]
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": history, "max_steps": 4}))
    metrics = HfTrainerReader().read(state).metrics
    loss = metrics.filter(metrics["raw_name"] == "loss")["value"].to_list()
    assert loss[:2] == [2.4, 2.3] and all(math.isnan(v) for v in loss[2:4])


def test_the_report_says_how_the_zeros_were_read(diverged: Path, tmp_path: Path) -> None:
    """The excerpt shows NaN where the file says 0.0: the run summary's Sources says why,
    and the post-mortem's Sources line points there."""
    from forensics.analyze import AnalyzeOptions, analyze
    from forensics.report import write_report

    db = tmp_path / "f.duckdb"
    res = analyze([diverged.parent.parent], out=None, db=db,
                  options=AnalyzeOptions(replay=False, report=False))  # fmt: skip
    with open_store(db, read_only=True) as store:
        write_report(store, res.run_id, tmp_path / "out", png=False)
    readme = (tmp_path / "out" / "README.md").read_text()
    sources = readme.split("## Sources")[1]
    assert (
        f"read: {STEPS - NAN_FROM + 1} 'loss: 0.0' entries (steps {NAN_FROM}..{STEPS}) " in sources
    )
    assert str(tmp_path) not in readme
    (page,) = (tmp_path / "out" / "postmortems").glob("spike-*.md")
    text = page.read_text()
    assert "how it was read: [run summary](../README.md#sources)" in text
    # checkpoint-60 was ingested; what is missing is one before the onset at 45
    assert "no checkpoint ingested for this run lies before it" in text
