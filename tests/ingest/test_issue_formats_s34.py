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

# ----- PyTorch Lightning: `v_num` and a carried `val_loss` in the bar's postfix -------------------
# The first two bars quoted as printed in https://github.com/Lightning-AI/pytorch-lightning/issues/14094
# (`self.log(..., prog_bar=True)` adds `acc=`); the next epochs are made in their shape, with
# the `val_loss=` the bar shows after each validation (2.65 after epoch 0, 2.45 after epoch 1).
LIGHTNING_14094 = """\
Epoch 0:  92%|█████████████████████████████████▉   | 932/1016 [00:33<00:03, 27.70it/s, loss=0.223, v_num=77, acc=0.875]
Epoch 0:  92%|█████████████████████████████████▉   | 933/1016 [00:33<00:02, 27.71it/s, loss=0.223, v_num=77, acc=0.875]
"""  # noqa: E501
LIGHTNING_VAL = """\
Epoch 0: 100%|██████████| 1016/1016 [00:37<00:00, 27.40it/s, loss=0.221, v_num=77, acc=0.875, val_loss=2.65]
Epoch 1:  45%|████▌     | 450/1016 [00:16<00:20, 27.40it/s, loss=0.201, v_num=77, acc=0.880, val_loss=2.65]
Epoch 1:  90%|█████████ | 900/1016 [00:32<00:04, 27.40it/s, loss=0.190, v_num=77, acc=0.890, val_loss=2.65]
Epoch 1: 100%|██████████| 1016/1016 [00:37<00:00, 27.40it/s, loss=0.185, v_num=77, acc=0.890, val_loss=2.45]
Epoch 2:  45%|████▌     | 450/1016 [00:16<00:20, 27.40it/s, loss=0.170, v_num=77, acc=0.900, val_loss=2.45]
"""  # noqa: E501


def test_lightning_bar_v_num_is_no_metric_and_val_loss_is_stored_once(tmp_path: Path) -> None:
    # before: `v_num` was a metric (77 at every step), and `val_loss` was stored at every
    # bar after the validation: {1016: 2.65, 1466: 2.65, 1916: 2.65, 2032: 2.45, 2482: 2.45},
    # a flat validation curve with a point at each training step
    fmt, m, w = _stored(tmp_path, LIGHTNING_14094 + LIGHTNING_VAL)
    assert fmt == "generic_text"
    assert "v_num" not in m
    assert m["loss"] == {932: 0.223, 933: 0.223, 1016: 0.221, 1466: 0.201, 1916: 0.19,
                         2032: 0.185, 2482: 0.17}  # fmt: skip
    assert m["val_loss"] == {1016: 2.65, 2032: 2.45}
    assert m["acc"][1916] == 0.89  # a training value of the bar: every step keeps it
    assert any("val_loss" in x and "once" in x for x in w)


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
