"""Bars, evaluation loops and epoch lines (session 34), one test per style.

Lightning's bar prints its experiment version `v_num` and, once a validation ran, the last
validation value on every later redraw; mmcv / mmengine print an evaluation loop's results
on an `Epoch(val)` line between training lines; Keras prints the epoch's wall time before
its per-step time; fairseq prints an epoch's averages under the per-iteration names. Each
fixture quotes the lines as printed where they were found (URL beside it; lines made in
their shape are said to be); each test says what the reader stored before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored
from test_issue_formats_s33 import FAIRSEQ_010, FAIRSEQ_514

# ----- fairseq: an epoch's `gnorm` beside the per-iteration `gnorm` -------------------------------
# The fixtures of test_issue_formats_s33 (fairseq#514 and a fairseq >= 0.10 log), whose
# per-iteration `gnorm=` is the gradient norm.


def test_fairseq_epoch_gnorm_is_named_as_the_iteration_gnorm(tmp_path: Path) -> None:
    # before: the per-iteration `gnorm` was `grad_norm`, the epoch's `epoch/gnorm`: a name
    # of its own for the same quantity
    _, m, _ = _stored(tmp_path, FAIRSEQ_514)
    assert m["grad_norm"] == {22897: 1.242, 23897: 1.242, 25634: 1.279}
    assert m["epoch/grad_norm"] == {24633: 1.241} and "epoch/gnorm" not in m
    assert m["epoch/loss"] == {24633: 6.233}
    _, m, _ = _stored(tmp_path, FAIRSEQ_010)
    assert m["epoch/grad_norm"] == {18950: 0.619} and m["epoch/lr"] == {18950: 0.000229718}
    assert math.isnan(m["loss"][18950])
