"""Logs users bring, read wrong or not at all before (session 42), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it); a fixture says so where lines are constructed in the shape of quoted ones, and a
fixture quoted by an earlier session is imported from its test. Each test says what the
reader stored before.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from issue_log_helpers import stored as _stored
from test_issue_formats_s33 import TF_43014

from forensics.store import open_store

# ----- PccAI: validation batches printed like training batches ---------------------------
# PccAI's pccai/pipelines/train.py opens every epoch with `Training at epoch %d (total %d)
# with lr ...` and, every `val_freq` epochs, after the epoch's summary and checkpoint, logs
# `'Validation at epoch %d' % epoch`, then validate_one_epoch() prints each batch with the
# training loop's own format (`'    batch count: %d/%d, iter: %d, ' % (batch_id, len_data,
# batch_id)` then `'%s: %f, '` per loss, no aux_loss), then `'Validation --- '` and
# `'avg_val_%s: %f, '` per loss. The training lines, the epoch summary, the checkpoint line
# and the `Training at epoch 2` line are quoted as printed in
# https://github.com/InterDigitalInc/PccAI/issues/1 ("NaN during training of example
# model"; epoch 2's two lines with their timestamps moved on by the validation's time).
# Constructed in PccAI's format: the `Training at epoch 1` line (in the shape of the issue's
# epoch 2 line) and the validation block (as with `--val_freq 1`; the example script's
# VAL_FREQ is 5, and the issue's paste of its validations is not quoted here).
PCCAI_VALIDATION = """\
[2023-03-10 19:53:05,113] Training at epoch 1 (total 1) with lr 0.0008 and aux_lr 0.005
[2023-03-10 19:55:41,356]     batch count: 260/308, iter: 260, bpp_loss_y: 0.042916, bpp_loss: 0.042916, xyz_loss: 0.083523, loss: 0.126439, aux_loss: 1284.993164
[2023-03-10 19:55:49,779]     batch count: 280/308, iter: 280, bpp_loss_y: 0.041586, bpp_loss: 0.041586, xyz_loss: 0.078944, loss: 0.120530, aux_loss: 1206.581177
[2023-03-10 19:56:08,349]     batch count: 300/308, iter: 300, bpp_loss_y: 0.039092, bpp_loss: 0.039092, xyz_loss: 0.079439, loss: 0.118532, aux_loss: 1128.780273
[2023-03-10 19:56:29,560] Epoch: 1/1 --- time: 1067.101541, lr: 0.000800, avg_bpp_loss_y: 0.058304, avg_bpp_loss: 0.058304, avg_xyz_loss: 0.087006, avg_loss: 0.145311

[2023-03-10 19:56:30,760] Current checkpoint saved to results/train_mdlnet/epoch_1.pth.

[2023-03-10 19:56:30,766] Validation at epoch 1
[2023-03-10 19:56:31,020]     batch count: 0/77, iter: 0, bpp_loss_y: 0.040117, bpp_loss: 0.040117, xyz_loss: 0.091203, loss: 0.131320
[2023-03-10 19:56:33,410]     batch count: 20/77, iter: 20, bpp_loss_y: 0.039870, bpp_loss: 0.039870, xyz_loss: 0.102447, loss: 0.142317
[2023-03-10 19:56:35,801]     batch count: 40/77, iter: 40, bpp_loss_y: 0.041052, bpp_loss: 0.041052, xyz_loss: 0.088120, loss: 0.129172
[2023-03-10 19:56:38,190]     batch count: 60/77, iter: 60, bpp_loss_y: 0.040498, bpp_loss: 0.040498, xyz_loss: 0.095316, loss: 0.135814
[2023-03-10 19:56:40,212] Validation --- avg_val_bpp_loss_y: 0.040382, avg_val_bpp_loss: 0.040382, avg_val_xyz_loss: 0.094275, avg_val_loss: 0.134657

[2023-03-10 19:56:40,224] Training at epoch 2 (total 2) with lr 0.0008 and aux_lr 0.005
[2023-03-10 19:56:40,569]     batch count: 0/308, iter: 0, bpp_loss_y: 0.038502, bpp_loss: 0.038502, xyz_loss: 0.098219, loss: 0.136720, aux_loss: 1100.362549
"""  # noqa: E501


def test_pccai_validation_batches_are_no_training_steps(tmp_path: Path) -> None:
    # before: the four validation batches were training steps 0, 20, 40, 60 (counted with
    # the validation's total, 77) and their losses joined `loss`, the training series
    fmt, m, w = _stored(tmp_path, PCCAI_VALIDATION)
    assert fmt == "generic_text"
    assert m["loss"] == {260: 0.126439, 280: 0.12053, 300: 0.118532, 308: 0.13672}
    assert m["xyz_loss"] == {260: 0.083523, 280: 0.078944, 300: 0.079439, 308: 0.098219}
    assert sorted(m["aux_loss"]) == [260, 280, 300, 308]
    # the validation's values, at the training step it ran after: its printed averages
    assert m["val_loss"] == {300: 0.134657} and m["val_xyz_loss"] == {300: 0.094275}
    assert any("under `Validation at epoch E`" in x for x in w)


def test_pccai_epoch_summary_is_the_epochs_average(tmp_path: Path) -> None:
    # before: the `Epoch: 1/1 --- time: ..., lr: ..., avg_loss: 0.145311` line was ignored
    # (no name the table knows as the loss): the epoch's average loss was lost
    _, m, _ = _stored(tmp_path, PCCAI_VALIDATION)
    assert m["epoch/loss"] == {300: 0.145311}  # at the epoch's last step printed
    assert m["epoch/xyz_loss"] == {300: 0.087006} and m["epoch/bpp_loss"] == {300: 0.058304}
    assert m["epoch/lr"] == {300: 0.0008}
    assert m["loss"] == {260: 0.126439, 280: 0.12053, 300: 0.118532, 308: 0.13672}  # as before
    # its `time` counts from the training's start, and an `epoch` at the epoch's last step
    # would mark a new epoch there (schedule_shifts): neither is stored
    assert not {"epoch", "time", "epoch/time", "epoch/epoch"} & set(m)


def _conflicts(tmp_path: Path) -> list[tuple]:
    """The `conflicts` rows (step, metric, value) of the one store `_stored` made."""
    (db,) = tmp_path.rglob("t.duckdb")
    with open_store(db) as store:
        return store.con.execute("SELECT step, metric, value FROM conflicts").fetchall()


def test_pccai_validation_is_its_printed_averages(tmp_path: Path) -> None:
    # before: the four batches were four values of each `val_` metric at step 300: the store
    # kept the last batch's (val_loss 0.135814) and put the other 12 in `conflicts`, warning
    # of "(step, metric) rows logged again at once"; the `Validation ---` line was ignored
    _, m, w = _stored(tmp_path, PCCAI_VALIDATION)
    assert m["val_loss"] == {300: 0.134657}
    assert m["val_xyz_loss"] == {300: 0.094275}
    assert m["val_bpp_loss"] == {300: 0.040382} and m["val_bpp_loss_y"] == {300: 0.040382}
    assert _conflicts(tmp_path) == []
    assert not any("logged again" in x for x in w)
    assert any("avg_val_loss: <val loss>" in x for x in w)  # the line read, not ignored


# A log cut off before its `Validation ---` line (made up: PCCAI_VALIDATION up to its
# fourth validation batch, as when the job is killed during the validation)
PCCAI_CUT = PCCAI_VALIDATION[: PCCAI_VALIDATION.index("[2023-03-10 19:56:40,212] Validation")]


def test_pccai_validation_without_its_averages_is_the_batches_mean(tmp_path: Path) -> None:
    # before: val_loss was the last batch's (0.135814), the other three in `conflicts`
    _, m, w = _stored(tmp_path, PCCAI_CUT)
    assert m["val_loss"] == {300: pytest.approx((0.131320 + 0.142317 + 0.129172 + 0.135814) / 4)}
    assert m["val_xyz_loss"] == {
        300: pytest.approx((0.091203 + 0.102447 + 0.088120 + 0.095316) / 4)
    }
    assert m["loss"] == {260: 0.126439, 280: 0.12053, 300: 0.118532}  # as before
    assert _conflicts(tmp_path) == []
    assert not any("logged again" in x for x in w)
    assert any("mean of its printed batch lines" in x for x in w)


def test_pccai_nan_validation_batch_without_averages_is_nan(tmp_path: Path) -> None:
    # made up: the cut-off log's second validation batch printed `loss: nan` (PccAI's `%f`
    # of a NaN loss). before: val_loss was the last batch's finite 0.135814, the NaN went
    # to `conflicts`: the validation's NaN vanished from its series
    text = PCCAI_CUT.replace("xyz_loss: 0.102447, loss: 0.142317", "xyz_loss: 0.102447, loss: nan")
    assert text != PCCAI_CUT
    _, m, _ = _stored(tmp_path, text)
    assert math.isnan(m["val_loss"][300]) and list(m["val_loss"]) == [300]
    assert m["val_xyz_loss"] == {
        300: pytest.approx((0.091203 + 0.102447 + 0.088120 + 0.095316) / 4)
    }
    assert _conflicts(tmp_path) == []


def test_pccai_printed_nan_average_is_stored_as_printed(tmp_path: Path) -> None:
    # made up: the `Validation ---` line says `avg_val_loss: nan` (every batch printed is
    # finite). before: the line was ignored and val_loss the last batch's finite 0.135814
    text = PCCAI_VALIDATION.replace("avg_val_loss: 0.134657", "avg_val_loss: nan")
    assert text != PCCAI_VALIDATION
    _, m, _ = _stored(tmp_path, text)
    assert math.isnan(m["val_loss"][300]) and list(m["val_loss"]) == [300]
    assert m["val_xyz_loss"] == {300: 0.094275}
    assert _conflicts(tmp_path) == []


# ----- TensorFlow's `global_step/sec: 0.803899`: the training rate ------------------------
# TF1's StepCounterHook prints the steps per second over the last report's steps on a line
# of its own, before the Estimator's `loss = ..., step = 100 (124.394 sec)` of the same run
# (100 / 0.803899 = 124.39). TF_43014 (tensorflow/tensorflow#43014) ends with a rate line
# whose record the quote does not hold.


def test_tf_estimator_steps_per_second(tmp_path: Path) -> None:
    # before: the `global_step/sec` lines were ignored (no step): the run's rate was lost
    fmt, m, _ = _stored(tmp_path, TF_43014)
    assert fmt == "generic_text"
    assert m["steps_per_sec"] == {100: 0.803899}  # the last, after every record: not stored
    assert m["loss"] == {0: 96.96749, 100: 4.264659}  # as before
    assert not {"sec", "global_step/sec", "global_step", "global_steps"} & set(m)


# TF-slim's training loop under a Supervisor, whose step counter thread prints the rate on a
# timer; TensorFlow 1.x's logger printed every line twice here. Quoted as printed in
# https://github.com/tensorflow/models/issues/2980 ("what is global step and loss?").
TF_SLIM_2980 = """\
INFO:tensorflow:Recording summary at step 0.
INFO:tensorflow:Recording summary at step 0.
INFO:tensorflow:global step 1: loss = 79.3501 (57.126 sec/step)
INFO:tensorflow:global step 1: loss = 79.3501 (57.126 sec/step)
INFO:tensorflow:global step 2: loss = 72.8609 (17.053 sec/step)
INFO:tensorflow:global step 2: loss = 72.8609 (17.053 sec/step)
INFO:tensorflow:global step 3: loss = 67.3308 (16.534 sec/step)
INFO:tensorflow:global step 3: loss = 67.3308 (16.534 sec/step)
INFO:tensorflow:global step 4: loss = 64.2655 (16.926 sec/step)
INFO:tensorflow:global step 4: loss = 64.2655 (16.926 sec/step)
INFO:tensorflow:Recording summary at step 4.
INFO:tensorflow:Recording summary at step 4.
INFO:tensorflow:global_step/sec: 0.0339311
INFO:tensorflow:global_step/sec: 0.0339311
INFO:tensorflow:global step 5: loss = 62.5264 (20.205 sec/step)
INFO:tensorflow:global step 5: loss = 62.5264 (20.205 sec/step)
INFO:tensorflow:global step 6: loss = 60.8808 (17.060 sec/step)
INFO:tensorflow:global step 6: loss = 60.8808 (17.060 sec/step)
"""


def test_tf_slim_steps_per_second_between_step_lines(tmp_path: Path) -> None:
    # before: the two `global_step/sec` lines were ignored; the step's time was stored
    fmt, m, _ = _stored(tmp_path, TF_SLIM_2980)
    assert fmt == "generic_text"
    assert m["steps_per_sec"] == {5: 0.0339311}  # the step of the record after it
    assert m["loss"] == {1: 79.3501, 2: 72.8609, 3: 67.3308, 4: 64.2655, 5: 62.5264, 6: 60.8808}
    assert m["iter_time_s"][5] == 20.205  # as before: `sec/step` is the step's own time
    assert not {"sec", "global_step/sec"} & set(m)
