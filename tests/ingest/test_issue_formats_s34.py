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


# ----- mmengine: `Epoch(val) [E][N/N]` results between `Epoch(train)` lines ----------------------
# The evaluation's lines quoted as printed in https://github.com/AILab-CVC/YOLO-World/issues/359
# (with the first training line of epoch 114); the training line of epoch 113 before them is
# made in its shape.
MMENGINE_YOLO_359 = """\
2024/05/22 11:07:50 - mmengine - INFO - Epoch(train) [113][50/61]  base_lr: 2.0000e-04 lr: 5.2160e-05  eta: 0:06:40  time: 0.1880  data_time: 0.0130  memory: 3342  grad_norm: 88.0000  loss: 15.2000  loss_cls: 1.4300  loss_bbox: 1.4700  loss_dfl: 12.3000
2024/05/22 11:08:03 - mmengine - INFO - Epoch(val) [113][350/416]    eta: 0:00:00  time: 0.0114  data_time: 0.0001  memory: 758  
2024/05/22 11:08:04 - mmengine - INFO - Epoch(val) [113][400/416]    eta: 0:00:00  time: 0.0111  data_time: 0.0001  memory: 758  
2024/05/22 11:08:04 - mmengine - INFO - Evaluating bbox...
2024/05/22 11:08:04 - mmengine - INFO - bbox_mAP_copypaste: 0.753 0.987 0.865 -1.000 0.680 0.753
2024/05/22 11:08:04 - mmengine - INFO - Epoch(val) [113][416/416]    coco/bbox_mAP: 0.7530  coco/bbox_mAP_50: 0.9870  coco/bbox_mAP_75: 0.8650  coco/bbox_mAP_s: -1.0000  coco/bbox_mAP_m: 0.6800  coco/bbox_mAP_l: 0.7530  data_time: 0.0002  time: 0.0115
2024/05/22 11:08:13 - mmengine - INFO - Epoch(train) [114][50/61]  base_lr: 2.0000e-04 lr: 5.2160e-05  eta: 0:06:33  time: 0.1873  data_time: 0.0129  memory: 3342  grad_norm: 90.1231  loss: 15.0982  loss_cls: 1.4217  loss_bbox: 1.4694  loss_dfl: 12.2071
"""  # noqa: E501, W291

# ----- mmcv 1.x: `Epoch(val) [E][n]` after mmcv's own ProgressBar, which printed no newline -------
# Quoted as printed in https://github.com/open-mmlab/mmpretrain/issues/360 (mmcls on mmcv 1.x).
MMCV_MMCLS_360 = """\
2021-07-14 13:52:26,135 - mmcls - INFO - Epoch [1][10/35]	lr: 1.000e-02, eta: 0:10:35, time: 0.611, data_time: 0.212, memory: 2962, loss: 1.4048
2021-07-14 13:52:30,150 - mmcls - INFO - Epoch [1][20/35]	lr: 1.000e-02, eta: 0:08:41, time: 0.402, data_time: 0.022, memory: 2962, loss: 0.4855
2021-07-14 13:52:34,172 - mmcls - INFO - Epoch [1][30/35]	lr: 1.000e-02, eta: 0:08:00, time: 0.402, data_time: 0.022, memory: 2962, loss: 0.3445
2021-07-14 13:52:35,974 - mmcls - INFO - Saving checkpoint at 1 epochs
[>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>] 50/50, 163.1 task/s, elapsed: 0s, ETA:     0s2021-07-14 13:52:36,901 - mmcls - INFO - Epoch(val) [1][2]	accuracy_top-1: 22.0000, accuracy_top-3: 38.0000
2021-07-14 13:52:43,027 - mmcls - INFO - Epoch [2][10/35]	lr: 1.000e-02, eta: 0:07:28, time: 0.592, data_time: 0.213, memory: 2962, loss: 0.3629
"""  # noqa: E501
# mmdet on mmcv 1.x: the training line quoted as printed in
# https://github.com/open-mmlab/mmdetection/issues/9415; the `Epoch(val)` line after it is
# made in the shape mmcv's TextLoggerHook prints (`Epoch(val) [E][n]\t` then `k: v, ...`), with
# the evaluation's own `loss`.
MMDET_9415 = """\
2022-11-23 14:15:21,465 - mmdet - INFO - Epoch [6][150/228]	lr: 2.500e-03, eta: 0:10:25, time: 0.437, data_time: 0.004, memory: 3129, loss_cls: 0.2660, loss_bbox: 0.2997, loss_centerness: 0.6076, loss: 1.1732, grad_norm: 6.0425
2022-11-23 14:15:42,943 - mmdet - INFO - Epoch [6][200/228]	lr: 2.500e-03, eta: 0:10:03, time: 0.430, data_time: 0.004, memory: 3129, loss_cls: 0.2677, loss_bbox: 0.3056, loss_centerness: 0.6136, loss: 1.1869, grad_norm: 5.5391
2022-11-23 14:16:00,000 - mmdet - INFO - Epoch(val) [6][500]	bbox_mAP: 0.3500, bbox_mAP_50: 0.5500, loss: 1.9000
2022-11-23 14:16:18,574 - mmdet - INFO - Epoch [7][50/228]	lr: 2.500e-03, eta: 0:09:20, time: 0.471, data_time: 0.046, memory: 3160, loss_cls: 0.2271, loss_bbox: 0.3726, loss_centerness: 0.6143, loss: 1.2141, grad_norm: 6.3334
"""  # noqa: E501


def test_mmengine_evaluation_results_keep_an_evaluation_name(tmp_path: Path) -> None:
    # before: the results were stored under the metric's own name (`coco/bbox_map` at step
    # 6882), as if the training loop had logged them
    fmt, m, _ = _stored(tmp_path, MMENGINE_YOLO_359)
    assert fmt == "generic_text"
    assert m["loss"] == {6882: 15.2, 6943: 15.0982} and m["grad_norm"][6943] == 90.1231
    assert m["val/coco/bbox_map"] == {6882: 0.753} and m["val/coco/bbox_map_s"] == {6882: -1.0}
    assert not any(k.startswith("coco/") for k in m)
    assert m["time"] == {6882: 0.188, 6943: 0.1873}  # the loop's timings: no training value


def test_mmcv_evaluation_results_keep_an_evaluation_name(tmp_path: Path) -> None:
    # before: mmcls's `Epoch(val)` line, glued to mmcv's ProgressBar (`ETA:     0s2021-...`),
    # was ignored, its accuracies lost; mmdet's was taken for the epoch's training summary:
    # `epoch/bbox_map`, and its evaluation loss `epoch/loss`, a training name
    fmt, m, _ = _stored(tmp_path, MMCV_MMCLS_360)
    assert fmt == "generic_text"
    assert m["loss"] == {10: 1.4048, 20: 0.4855, 30: 0.3445, 45: 0.3629}
    assert m["val/accuracy_top_1"] == {30: 22.0} and m["val/accuracy_top_3"] == {30: 38.0}
    fmt, m, _ = _stored(tmp_path, MMDET_9415)
    assert fmt == "generic_text"
    assert m["loss"] == {1290: 1.1732, 1340: 1.1869, 1418: 1.2141}
    assert m["val_loss"] == {1340: 1.9} and m["val/bbox_map"] == {1340: 0.35}
    assert not any(k.startswith("epoch/") for k in m)


# ----- Keras model.fit: `N/N [====] - 192s 454ms/step - loss: ...` at each epoch's end ------------
# Quoted as printed in https://github.com/keras-team/keras/issues/10506 (its first 3 epochs).
KERAS_10506 = """\
Epoch 1/100
423/423 [==============================] - 192s 454ms/step - loss: 1.8386 - mean_squared_error: 0.0049 - acc: 0.6136
Epoch 2/100
423/423 [==============================] - 186s 439ms/step - loss: 1.8087 - mean_squared_error: 0.0043 - acc: 0.6201
Epoch 3/100
423/423 [==============================] - 184s 436ms/step - loss: 1.3863 - mean_squared_error: 0.0037 - acc: 0.6445
"""  # noqa: E501


def test_keras_epoch_wall_time_is_no_metric(tmp_path: Path) -> None:
    # before: the epoch's wall time was a metric `s` ({423: 192, 846: 186, 1269: 184}); the
    # per-step time `ms/step`, which Keras prints beside it, is a metric and stays one (in
    # seconds, `iter_time_s`, since session 37: Keras changes its unit from epoch to epoch)
    fmt, m, _ = _stored(tmp_path, KERAS_10506)
    assert fmt == "generic_text"
    assert "s" not in m
    assert m["loss"] == {423: 1.8386, 846: 1.8087, 1269: 1.3863}
    assert m["iter_time_s"] == {423: 0.454, 846: 0.439, 1269: 0.436}
    assert m["acc"][1269] == 0.6445


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
