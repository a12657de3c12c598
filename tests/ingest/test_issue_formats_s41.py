"""Logs users bring, read wrong or not at all before (session 41), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it); a fixture says so where lines are constructed in the shape of quoted ones, and a
fixture quoted by an earlier session is imported from its test. Each test says what the
reader stored before.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from issue_log_helpers import stored as _stored
from test_issue_formats_more import TF_SLIM_6
from test_issue_formats_s28 import IMDLBENCO_LOCAL_REDUCED
from test_issue_formats_s40 import TIMM_814_TEST, XIAOTUDUI_1, _nan_at

# ----- top-k accuracy meters: `Acc@1:  0.0000 (20.4420)`, `Acc@1   0.09 (  0.09)` -------------
# timm's validate() prints `Acc@1: {top1.val:>7.4f} ({top1.avg:>7.4f})` and the PyTorch ImageNet
# example's AverageMeter `Acc@1 {val:6.2f} ({avg:6.2f})`: the k of the top-k is part of the
# name, which the template made a number of its own.


def test_timm_test_lines_keep_their_top_k_accuracies(tmp_path: Path) -> None:
    # before: no accuracy at all (the value after `Acc@1:` had no name), only the loss and
    # time of the `Test:` and `Test (EMA):` lines
    _, m, _ = _stored(tmp_path, TIMM_814_TEST)
    end = 3 * 5004 - 1
    assert m["test/acc1"] == {end: 20.442} and m["test/acc5"] == {end: 43.014}
    assert m["test_ema/acc1"] == {end: 0.1} and m["test_ema/acc5"] == {end: 0.5}
    assert m["test_loss"] == {end: 3.984}  # as before
    assert not any(k.startswith("acc") for k in m)  # no evaluation's accuracy as training's


# Quoted as printed in https://github.com/facebookresearch/AlphaNet/issues/6 (the PyTorch ImageNet
# example's train(): `Epoch: [0][ 100/7176]`, tab-separated, each meter `val (avg)`); the last
# line is constructed in their shape, with the NaN loss the issue reports.
ALPHANET_6 = (
    "Epoch: [0][   0/7176]\tTime 71.193 (71.193)\tData 66.870 (66.870)\tLoss 2.8784e-01 (2.8784e-01)\tAcc@1   0.09 (  0.09)\tAcc@5   0.09 (  0.09)\n"  # noqa: E501
    "Epoch: [0][ 100/7176]\tTime  1.870 ( 2.728)\tData  0.000 ( 0.662)\tLoss 4.6225e-02 (-7.6008e-02)\tAcc@1   0.08 (  0.11)\tAcc@5   0.08 (  0.11)\n"  # noqa: E501
    "Epoch: [0][ 200/7176]\tTime  1.931 ( 2.363)\tData  0.000 ( 0.333)\tLoss 4.9116e-01 (7.5377e-02)\tAcc@1   0.09 (  0.11)\tAcc@5   0.09 (  0.11)\n"  # noqa: E501
    "Epoch: [0][ 300/7176]\tTime  1.860 ( 2.250)\tData  0.000 ( 0.222)\tLoss 2.0824e-01 (2.0263e-01)\tAcc@1   0.10 (  0.11)\tAcc@5   0.10 (  0.11)\n"  # noqa: E501
    "Epoch: [0][ 400/7176]\tTime  2.271 ( 2.200)\tData  0.000 ( 0.167)\tLoss 8.5119e-01 (3.0746e-01)\tAcc@1   0.12 (  0.11)\tAcc@5   0.12 (  0.11)\n"  # noqa: E501
    "Epoch: [0][ 500/7176]\tTime  2.010 ( 2.180)\tData  0.000 ( 0.140)\tLoss        nan (       nan)\tAcc@1   0.00 (  0.09)\tAcc@5   0.00 (  0.09)\n"  # noqa: E501
)


def test_imagenet_example_train_lines_keep_their_top_k_accuracies(tmp_path: Path) -> None:
    # before: `loss`, `time` and `data` only; `Acc@1 0.09` had no name and was dropped
    _, m, _ = _stored(tmp_path, ALPHANET_6)
    assert m["acc1"] == {0: 0.09, 100: 0.08, 200: 0.09, 300: 0.1, 400: 0.12, 500: 0.0}
    assert m["acc5"] == {0: 0.09, 100: 0.08, 200: 0.09, 300: 0.1, 400: 0.12, 500: 0.0}
    assert m["loss"][100] == 0.046225 and _nan_at(m["loss"]) == [500]  # the batch's own


# ----- a CJK phrase naming the test set: `整体测试集上的Loss: 262.6` ----------------------
# xiaotudui/pytorch-tutorial's train.py prints, after each epoch, `整体测试集上的Loss: {}` ("the
# Loss on the whole test set": the sum of the test batches' losses); the last two lines are
# constructed in their shape, a NaN test loss with the full-width colon of the training lines.
XIAOTUDUI_1_TEST = XIAOTUDUI_1 + "整体测试集上的Loss：nan\n整体测试集上的正确率：0.1\n"


def test_a_chinese_test_loss_is_the_test_loss(tmp_path: Path) -> None:
    # before: the test loss was dropped (`整体测试集上的Loss` was no key); it was never the
    # training loss either
    _, m, _ = _stored(tmp_path, XIAOTUDUI_1_TEST)
    assert list(m["test_loss"]) == [700, 900]
    assert m["test_loss"][700] == 262.62046909332275 and _nan_at(m["test_loss"]) == [900]
    assert list(m["loss"]) == [100 * k for k in range(1, 10)]  # as before
    assert _nan_at(m["loss"]) == [900]


# ----- Keras' timings: Keras 3's bar, `verbose=2`, per-sample times ------------------------------
# Constructed in the shape of the Keras 3 lines quoted in
# https://github.com/keras-team/keras/issues/20568 (`115/6740 ━━━━━━━━━━━━━━━━━━━━ 2:01:30
# 1s/step - iou: nan - loss: 0.0234`): an epoch's last line prints its wall time, not an ETA.
KERAS3_BAR = """\
Epoch 1/3
100/100 ━━━━━━━━━━━━━━━━━━━━ 3s 30ms/step - iou: 0.4100 - loss: 0.5200 - val_loss: nan
Epoch 2/3
100/100 ━━━━━━━━━━━━━━━━━━━━ 150s 2s/step - iou: nan - loss: 0.4100 - val_loss: 0.3900
Epoch 3/3
100/100 ━━━━━━━━━━━━━━━━━━━━ 1s 9ms/step - iou: nan - loss: nan - val_loss: nan
"""
# Keras' Progbar with `verbose=2` (TF 2.x): `{n}/{N} - {elapsed}s - {metrics} - {t}s/epoch -
# {t}ms/step`, constructed in that shape
KERAS_VERBOSE2 = """\
Epoch 1/3
100/100 - 3s - loss: 0.5200 - val_loss: nan - 3s/epoch - 30ms/step
Epoch 2/3
100/100 - 150s - loss: 0.4100 - val_loss: 0.3900 - 150s/epoch - 2s/step
Epoch 3/3
100/100 - 1s - loss: nan - val_loss: nan - 1s/epoch - 9ms/step
"""
# TF 2.0-2.1 count numpy input by samples (`- 2s 265us/sample`): test_issue_formats_s37's
# KERAS_SYCL lines, constructed with that unit
KERAS_PER_SAMPLE = """\
Train on 7500 samples, validate on 2500 samples
Epoch 1/3
7500/7500 [==============================] - 3s 400us/sample - loss: 0.5200 - val_loss: nan
Epoch 2/3
7500/7500 [==============================] - 15s 2ms/sample - loss: 0.4100 - val_loss: 0.3900
Epoch 3/3
7500/7500 [==============================] - 1s 133us/sample - loss: nan - val_loss: nan
"""


def test_keras3_bar_wall_time_is_no_metric(tmp_path: Path) -> None:
    # before: a metric `s` = {100: 3, 200: 150, 300: 1}, the epochs' wall times
    _, m, _ = _stored(tmp_path, KERAS3_BAR)
    assert "s" not in m
    assert m["iter_time_s"] == pytest.approx({100: 0.03, 200: 2.0, 300: 0.009})
    assert m["loss"] == {100: 0.52, 200: 0.41, 300: m["loss"][300]} and _nan_at(m["loss"]) == [300]
    assert _nan_at(m["val_loss"]) == [100, 300] and _nan_at(m["iou"]) == [200, 300]


def test_keras_verbose2_times_are_seconds(tmp_path: Path) -> None:
    # before: `s` = the elapsed seconds, and `s/epoch` in the unit printed
    _, m, w = _stored(tmp_path, KERAS_VERBOSE2)
    assert "s" not in m and "s/epoch" not in m
    assert m["epoch_time_s"] == {100: 3.0, 200: 150.0, 300: 1.0}
    assert m["iter_time_s"] == pytest.approx({100: 0.03, 200: 2.0, 300: 0.009})
    assert _nan_at(m["loss"]) == [300] and _nan_at(m["val_loss"]) == [100, 300]
    assert any("per-step time" in x and "`epoch_time_s`" in x for x in w)


def test_keras_per_sample_time_is_one_series_in_seconds(tmp_path: Path) -> None:
    # before: `us/sample` {7500: 400, 22500: 133} and `ms/sample` {15000: 2}, each in the
    # unit of its epoch, with gaps where the other was printed
    _, m, _ = _stored(tmp_path, KERAS_PER_SAMPLE)
    assert not {"us/sample", "ms/sample"} & set(m)
    assert m["sample_time_s"] == pytest.approx({7500: 0.0004, 15000: 0.002, 22500: 0.000133})
    assert _nan_at(m["loss"]) == [22500] and _nan_at(m["val_loss"]) == [7500, 22500]


# ----- IMDLBenCo: `Averaged stats: ... predict_loss: [local: 0.6859 | reduced: 0.6930]` ----------
# IMDLBenCo's SmoothedValue prints `[local: {median:.4f} | reduced: {global_avg:.4f}]` (its
# training_scripts/utils/misc.py): MAE's `{median} ({global_avg})`. Only after
# synchronize_between_processes(), which the epoch's `Averaged stats:` line follows, is the
# reduced value the mean over all ranks; on an iteration line it is this rank's running mean.


def test_imdlbenco_averaged_stats_store_the_reduced_mean(tmp_path: Path) -> None:
    # before: the `Averaged stats:` line was ignored (its loss, `predict_loss`, is no name the
    # reader knows as the training loss, so no epoch summary was looked for)
    _, m, w = _stored(tmp_path, IMDLBENCO_LOCAL_REDUCED)
    assert m["epoch/predict_loss"] == {459: 0.693} and m["epoch/lr"] == {459: 0.0001}
    loss = m["predict_loss"]  # the iteration lines keep their local value, as before
    assert loss == {440: 0.6921, 459: 0.6859, 460: 0.7095, 480: 0.6847, 500: loss[500]}
    assert _nan_at(loss) == [500]
    assert any("no training loss: predict_loss keeps its name" in x for x in w)


# ----- TF-slim's train_step: `global step 2458: loss = nan (2.34 sec/step)` ----------------------
# Quoted in test_issue_formats_more from https://github.com/ardiya/HashtagPrediction/issues/6
# (TF-slim's learning.py logs `global step %d: loss = %.4f (%.3f sec/step)`).


def test_tf_slim_step_time_in_parentheses(tmp_path: Path) -> None:
    # before: the loss only; the number in parentheses was taken for an annotation of the
    # loss and dropped, with the slower first NaN step (2.34 s)
    _, m, w = _stored(tmp_path, TF_SLIM_6)
    times = [1.61, 1.61, 1.61, 1.61, 2.34, 1.5, 1.61, 1.59, 1.59, 1.61]
    assert m["iter_time_s"] == dict(zip(range(2454, 2464), times, strict=True))
    assert _nan_at(m["loss"]) == list(range(2458, 2464)) and m["loss"][2457] == 0.6953
    assert "sec/step" not in m and any("(sec/step) stored in seconds" in x for x in w)


# ----- an epoch's progress in brackets: `Epoch 1 complete [10%]    Loss: 2.799116` -------------
# Quoted as printed in https://github.com/mira-ai-lab/MUSIC-AVQA-R/issues/1 (each line ends in a
# blank).
AVQA_R_1 = """\
[2024-07-06 06:40:53,097]-[engine.py line:95]:Train epoch 1 begin\x20
[2024-07-06 06:40:54,438]-[engine.py line:78]:Epoch 1 complete [0%]     Loss: 3.709857\x20
[2024-07-06 06:41:25,455]-[engine.py line:78]:Epoch 1 complete [10%]    Loss: 2.799116\x20
[2024-07-06 06:41:56,752]-[engine.py line:78]:Epoch 1 complete [20%]    Loss: 1.711389\x20
[2024-07-06 06:42:28,170]-[engine.py line:78]:Epoch 1 complete [30%]    Loss: 1.510960\x20
[2024-07-06 06:42:59,614]-[engine.py line:78]:Epoch 1 complete [40%]    Loss: 1.390983\x20
[2024-07-06 06:43:31,148]-[engine.py line:78]:Epoch 1 complete [50%]    Loss: 1.554311\x20
[2024-07-06 06:44:02,712]-[engine.py line:78]:Epoch 1 complete [60%]    Loss: 1.583764\x20
[2024-07-06 06:44:34,306]-[engine.py line:78]:Epoch 1 complete [70%]    Loss: 1.141079\x20
[2024-07-06 06:45:05,900]-[engine.py line:78]:Epoch 1 complete [80%]    Loss: 1.516035\x20
"""


def test_bracketed_progress_percent_is_no_metric(tmp_path: Path) -> None:
    # before: a metric `complete` = {1: 0, 2: 10, ..., 9: 80}, the epoch's progress
    _, m, _ = _stored(tmp_path, AVQA_R_1)
    assert set(m) == {"loss"}
    losses = [3.709857, 2.799116, 1.711389, 1.51096, 1.390983, 1.554311, 1.583764, 1.141079]
    assert m["loss"] == dict(zip(range(1, 10), [*losses, 1.516035], strict=True))
