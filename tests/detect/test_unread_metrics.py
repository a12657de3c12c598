"""A gradient norm the logger never computed is not evidence, and the pages say so.

ms-swift's console (modelscope/ms-swift#2280) prints `'grad_norm': nan` at every step from
the second while the loss trains down. Read as logged, each of those steps was a
non-finite gradient with a finite loss (an fp16 overflow at every step), a spike at step 70
had an infinite gradient ratio and read "undetermined", and its page said "The gradient norm
was NaN/Inf at step 60": the first step of its window, not of the NaNs.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pytest

from forensics.analyze import AnalyzeOptions, analyze

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")

# the first two lines (the step-1 dict, the bar glued to an ffmpeg message), then the
# same dict with the norm NaN, as the issue shows from step 2 on
_FIRST = [
    "{'loss': 2.0916357, 'token_acc': 0.47775947, 'grad_norm': 6.08488035, 'learning_rate': 1e-05, 'memory(GiB)': 65.89, 'train_speed(iter/s)': 0.014105, 'epoch': 0.0, 'global_step/max_steps': '1/2046', 'percentage': '0.05%', 'elapsed_time': '14s', 'remaining_time': '8h 17m 1s'}",  # noqa: E501
    "Train:   0%|          | 1/2046 [00:14<8:16:53, 14.58s/it][h264 @ 0x7fc648030400] mmco: unref short failure",  # noqa: E501
]
_DICT = (
    "{{'loss': {loss:.7f}, 'token_acc': 0.48320815, 'grad_norm': {grad}, 'learning_rate': "
    "1e-05, 'memory(GiB)': 65.89, 'train_speed(iter/s)': 0.025761, 'epoch': 0.00, "
    "'global_step/max_steps': '{s}/2046', 'percentage': '0.10%', 'elapsed_time': '53s', "
    "'remaining_time': '22h 8m 36s'}}"
)
_BAR = "Train:   0%|          | {s}/2046 [00:00:53<22:08:36, 40.70s/it]"


def _swift(
    folder: Path, grad: str = "nan", nan_loss_from: int | None = None, high_from: int | None = None
) -> Path:
    lines = list(_FIRST)
    for s in range(2, 121):
        loss = 1.6 + 0.4 * math.exp(-s / 20) + 0.01 * math.sin(s)
        if s == 70:
            loss = 4.93
        g = grad
        if nan_loss_from is not None and s >= nan_loss_from:
            loss, g = float("nan"), "nan"
        if high_from is not None and s >= high_from:  # diverged: updates skipped, loss high
            loss, g = 7.5 + 0.01 * math.sin(s), "nan"
        lines += [_DICT.format(loss=loss, grad=g, s=s), _BAR.format(s=s)]
    folder.mkdir()
    (folder / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _analyze(run: Path, out: Path) -> tuple[list[tuple], list[tuple]]:
    analyze(run, out, options=AnalyzeOptions(replay=False, report=True))
    with duckdb.connect(str(out / "forensics.duckdb"), read_only=True) as con:
        unread = con.execute(
            "SELECT metric, points, nonfinite, first_step FROM unread_metrics"
        ).fetchall()
        incidents = con.execute(
            "SELECT onset_step, type, cause, features FROM incidents ORDER BY onset_step"
        ).fetchall()
    return unread, incidents


def test_a_grad_norm_nan_at_every_step_is_stored_as_unread_not_as_evidence(
    tmp_path: Path,
) -> None:
    unread, incidents = _analyze(_swift(tmp_path / "swift"), tmp_path / "out")
    assert unread == [("grad_norm", 120, 119, 2)]
    ((onset, typ, cause, features),) = incidents
    assert (onset, typ) == (70, "recoverable")
    assert cause != "unknown"  # before: "undetermined", the infinite ratio refuting a batch
    assert '"grad_ratio": null' in features or "grad_ratio" not in features
    assert '"overflows"' not in features or '"overflows": null' in features


def test_the_pages_say_the_grad_norm_was_not_read_and_from_when(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _analyze(_swift(tmp_path / "swift"), out)
    readme = (out / "README.md").read_text()
    assert (
        "The log's `grad_norm` is NaN/Inf at 119 of its 120 logged steps (from step 2) while "
        "the loss is finite there"
    ) in readme
    page = next((out / "postmortems").glob("*.md")).read_text()
    assert "The gradient norm is NaN/Inf at 119 of its 120 logged steps (from step 2)" in page
    assert "NaN/Inf at step 60" not in page
    assert "not logged: `grad_norm`" not in page
    assert "logged but NaN/Inf where the loss is finite, not read: `grad_norm`" in page
    # the figure's grad-norm panel had nothing in it (no finite value, no marker, axis -1..4)
    html = (out / "figures" / "spike-01-metrics.html").read_text()
    assert "NaN\\u002fInf at every logged step shown (101): no finite value to draw" in html


def test_a_divergence_keeps_its_nan_gradient_as_evidence(tmp_path: Path) -> None:
    # the norm turns NaN with the loss: a divergence, not a logger that cannot compute it
    unread, incidents = _analyze(
        _swift(tmp_path / "swift", grad="0.85", nan_loss_from=40), tmp_path / "out"
    )
    assert unread == []
    assert incidents[0][:2] == (40, "divergent")
    assert '"nonfinite_grad": ' in incidents[0][3]


def test_a_divergence_with_a_finite_loss_keeps_its_nan_gradient(tmp_path: Path) -> None:
    # Megatron skips NaN iterations and logs the forward loss: after a divergence at 30 the
    # norm is NaN at 75% of the steps with a finite (high) loss, but it was finite before
    unread, incidents = _analyze(
        _swift(tmp_path / "swift", grad="0.85", high_from=30), tmp_path / "out"
    )
    assert unread == []
    assert incidents[0][:2] == (30, "divergent")
