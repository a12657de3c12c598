"""Training-log styles quoted in public GitHub issues (session 26), one test per style.

Each fixture quotes the lines as printed in the issue or PR (URL beside it). The tests check
what the ingest stores through the library path the CLI calls, and each says what the
reader did before.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from issue_log_helpers import stored as _stored

from forensics.ingest import ingest
from forensics.store import open_store


def _events(tmp_path: Path, text: str) -> list[tuple[int | None, str, str]]:
    """(step, kind, detail) of the events the ingest stored for `text`."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / "train.log"
    path.write_text(text, encoding="utf-8")
    with open_store(folder / "t.duckdb") as store:
        ingest(store, [path])
        rows = store.con.execute("select step, kind, detail from events order by all").fetchall()
    return [(s, k, d) for s, k, d in rows]


# ----- Caffe solver: per-output lines with their loss weight ---------------------------------
CAFFE_FRCNN = """\
I0115 14:49:27.785917 12606 solver.cpp:224] Iteration 0 (-1.27518e-43 iter/s, 0.804229s/20 iters), loss = 5.06628  [ 0 / 70000 ] -> [ -1:60 (H:M) ]
I0115 14:49:27.786006 12606 solver.cpp:243]     Train net output #0: bbox_accuracy = 0.046875
I0115 14:49:27.786028 12606 solver.cpp:243]     Train net output #1: bbox_loss = 0.369181 (* 1 = 0.369181 loss)
I0115 14:49:27.786036 12606 solver.cpp:243]     Train net output #2: cls_loss = 3.12335 (* 1 = 3.12335 loss)
I0115 14:49:27.786043 12606 solver.cpp:243]     Train net output #3: rpn_cls_loss = 0.895593 (* 1 = 0.895593 loss)
I0115 14:49:27.786051 12606 solver.cpp:243]     Train net output #4: rpn_loss_bbox = 1.12812 (* 1 = 1.12812 loss)
I0115 14:49:27.786078 12606 sgd_solver.cpp:105] Iteration 0, lr = 0.001
I0115 14:49:33.189517 12606 solver.cpp:224] Iteration 20 (3.70129 iter/s, 5.40352s/20 iters), loss = nan  [ 20 / 70000 ] -> [ 3:36 (H:M) ]
I0115 14:49:33.189579 12606 solver.cpp:243]     Train net output #0: bbox_accuracy = 1
I0115 14:49:33.189594 12606 solver.cpp:243]     Train net output #1: bbox_loss = nan (* 1 = nan loss)
I0115 14:49:33.189606 12606 solver.cpp:243]     Train net output #2: cls_loss = 87.3365 (* 1 = 87.3365 loss)
I0115 14:49:33.189617 12606 solver.cpp:243]     Train net output #3: rpn_cls_loss = 87.3365 (* 1 = 87.3365 loss)
"""  # noqa: E501  https://github.com/D-X-Y/caffe-faster-rcnn/issues/39

CAFFE_SSD = """\
I0822 20:54:57.256644 14071 solver.cpp:341]     [0.0] Iteration 2 (20.2241 s), loss = nan
I0822 20:54:57.256696 14071 solver.cpp:361]     [0.0]     Train net output #0: mbox_loss = inf (* 1 = inf loss)
I0822 20:55:01.366313 14071 solver.cpp:333]     [0.0] Iteration 10 (1.94662 iter/s, 4.10968s/8 iter), loss = nan
I0822 20:55:01.366365 14071 solver.cpp:361]     [0.0]     Train net output #0: mbox_loss = inf (* 1 = inf loss)
I0822 20:55:01.366377 14071 sgd_solver.cpp:180] [0.0] Iteration 10, lr = 0.001, m = 0.9, lrm = 0.01, wd = 0.0005, gs = 6.21
I0822 20:55:06.431057 14071 solver.cpp:333]     [0.0] Iteration 20 (1.97443 iter/s, 5.06474s/10 iter), loss = nan
I0822 20:55:06.431109 14071 solver.cpp:361]     [0.0]     Train net output #0: mbox_loss = inf (* 1 = inf loss)
I0822 20:55:06.431174 14071 sgd_solver.cpp:180] [0.0] Iteration 20, lr = 0.001, m = 0.9, lrm = 0.01, wd = 0.0005, gs = 5.23
"""  # noqa: E501  https://github.com/NVIDIA/caffe/issues/499


def test_caffe_weighted_output_losses_leave_the_solver_loss_alone(tmp_path: Path) -> None:
    # before: each output's `(* 1 = X loss)` was a value named `loss`, the last one written
    # over the solver's: loss 87.3365 at iteration 20, where the log prints `loss = nan`
    # (and 1.12812 at 0 for 5.06628); the output's index `#3` was a metric
    fmt, m, _ = _stored(tmp_path, CAFFE_FRCNN)
    assert fmt == "generic_text"
    assert m["loss"][0] == 5.06628 and math.isnan(m["loss"][20])
    assert m["cls_loss"] == {0: 3.12335, 20: 87.3365}
    assert math.isnan(m["bbox_loss"][20]) and m["rpn_loss_bbox"] == {0: 1.12812}
    assert m["lr"] == {0: 0.001}
    assert "train_net_output" not in m
    # NVIDIA/caffe's SSD: the Inf of the output was stored as the loss, the NaN lost
    _, m, _ = _stored(tmp_path, CAFFE_SSD)
    assert sorted(m["loss"]) == [2, 10, 20] and all(math.isnan(v) for v in m["loss"].values())
    assert m["mbox_loss"] == {2: math.inf, 10: math.inf, 20: math.inf}


# ----- NVIDIA tacotron2: the iteration printed before its loss ----------------------------------
TACOTRON_112 = """\
Epoch: 0
OVERFLOW! Skipping step. Attempted loss scale: 4294967296
OVERFLOW! Skipping step. Attempted loss scale: 2147483648.0
OVERFLOW! Skipping step. Attempted loss scale: 1073741824.0
OVERFLOW! Skipping step. Attempted loss scale: 536870912.0
OVERFLOW! Skipping step. Attempted loss scale: 262144.0
/home/ubuntu/tts/tacotron2/fp16_optimizer.py:173: UserWarning: torch.nn.utils.clip_grad_norm is now deprecated in favor of torch.nn.utils.clip_grad_norm_.
  return torch.nn.utils.clip_grad_norm(fp32_params, clip)
Train loss 15 47.531357 Grad Norm 11.616506 2.96s/it
Train loss 16 35.477085 Grad Norm 19.570642 2.86s/it
"""  # noqa: E501  https://github.com/NVIDIA/tacotron2/issues/112

TACOTRON_APEX_493 = """\
Epoch: 13
Validation loss 7364:  0.148571
Saving model and optimizer state at iteration 7364 to ru_ann_20_09_2019.pt
Epoch 13 time 30.405 lr 0.001
Epoch: 14
Validation loss 7890:  0.148049
Saving model and optimizer state at iteration 7890 to ru_ann_20_09_2019.pt
Epoch 14 time 30.577 lr 0.001
Epoch: 15
Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 256.0
Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 128.0
Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 64.0
Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32.0
Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16.0
Warning: NaN or Inf found in input tensor.
Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 8.0
Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 4.0
Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 2.0
Validation loss 8416:  0.711720
Saving model and optimizer state at iteration 8416 to ru_ann_20_09_2019.pt
"""  # https://github.com/NVIDIA/apex/issues/493 (a tacotron2 run)


def test_tacotron2_train_line_prints_the_iteration_before_the_loss(tmp_path: Path) -> None:
    # before: `Train loss 15 47.531357` was two values: the iteration was stored as `loss`
    # (15, 16) at steps 1, 2 numbered in file order, and the loss itself under `Grad Norm`
    fmt, m, w = _stored(tmp_path, TACOTRON_112)
    assert fmt == "generic_text"
    assert m["loss"] == {15: 47.531357, 16: 35.477085}
    assert m["grad_norm"] == {15: 11.616506, 16: 19.570642}
    assert m["overflow"] == {15: 5.0}  # the scaler's skips before the first logged step
    assert not any("in file order" in x for x in w)
    assert any("print the iteration before its loss" in x for x in w)


def test_tacotron2_validation_lines_alone_are_a_log(tmp_path: Path) -> None:
    # before: "format not recognised": `Validation loss 7364:  0.148571` gave no step
    fmt, m, _ = _stored(tmp_path, TACOTRON_APEX_493)
    assert fmt == "generic_text"
    assert m["val_loss"] == {7364: 0.148571, 7890: 0.148049, 8416: 0.71172}
    assert "loss" not in m  # an evaluation's loss never becomes the training loss
    assert m["overflow"] == {8416: 8.0} and m["loss_scale"] == {8416: 2.0}


# ----- nanoGPT lines behind a date-time stamp -------------------------------------------------
NANOGPT_215 = """\
> 2023-03-22 09:31:56 iter 2990: loss 3.8853, time 1096.65ms, mfu 15.34%
>
> 2023-03-22 09:32:32 step 3000: train loss 4.0390, val loss 4.0427
>
> saving checkpoint to out
>
> 2023-03-22 09:32:41 iter 3000: loss 4.2490, time 35392.33ms, mfu 13.85%
>
> 2023-03-22 09:32:52 iter 3010: loss nan, time 1019.95ms, mfu 14.12%
>
> 2023-03-22 09:33:02 iter 3020: loss nan, time 1015.95ms, mfu 14.36%
"""  # https://github.com/karpathy/nanoGPT/issues/215 (pasted as a Markdown quote)


def test_nanogpt_lines_behind_a_timestamp_keep_their_named_pattern(tmp_path: Path) -> None:
    # before: the stamp hid every line from the named patterns; the generic reader took
    # estimate_loss()'s `train loss 4.0390` for the training loss (a second `loss` at step
    # 3000, set aside as a conflict) and lost it as eval_train_loss
    fmt, m, w = _stored(tmp_path, NANOGPT_215)
    assert fmt == "textlog"
    assert m["loss"][2990] == 3.8853 and m["loss"][3000] == 4.249
    assert math.isnan(m["loss"][3010]) and math.isnan(m["loss"][3020])
    assert m["eval_train_loss"] == {3000: 4.039} and m["val_loss"] == {3000: 4.0427}
    assert m["iter_time_ms"][3000] == 35392.33 and m["mfu_pct"][3020] == 14.36
    assert not any("under another name" in x for x in w)


def test_nanogpt_stamped_lines_keep_their_wall_time(tmp_path: Path) -> None:
    """The named-pattern reader stores the stamp's clock, as the generic reader did."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / "train.log"
    path.write_text(NANOGPT_215, encoding="utf-8")
    with open_store(folder / "t.duckdb") as store:
        (summary,) = ingest(store, [path])
        walls = {s: t for s, n, _, t in store.metrics_long(summary.run).iter_rows() if n == "loss"}
    assert walls[3010] - walls[3000] == 11.0  # 09:32:52 - 09:32:41


# ----- Keras TerminateOnNaN ---------------------------------------------------------------------
KERAS_TUNER_442 = """\
Epoch 5/10
   1/1500 [..............................] - ETA: 0s - loss: 2.2759 - accuracy: 0.2188Batch 1: Invalid loss, terminating training
   2/1500 [..............................] - ETA: 46s - loss: nan - accuracy: 0.1719  Batch 2: Invalid loss, terminating training
   3/1500 [..............................] - ETA: 59s - loss: nan - accuracy: 0.1562Batch 3: Invalid loss, terminating training
   4/1500 [..............................] - ETA: 1:06 - loss: nan - accuracy: 0.1406Batch 4: Invalid loss, terminating training
   5/1500 [..............................] - ETA: 1:10 - loss: nan - accuracy: 0.1187Batch 5: Invalid loss, terminating training
"""  # noqa: E501  https://github.com/keras-team/keras-tuner/issues/442

KERAS_SSD_21 = """\
Epoch 1/10
  1/234 [..............................] - ETA: 70:12:10 - loss: 44.9110
  2/234 [..............................] - ETA: 45:01:30 - loss: 44.6110
  3/234 [..............................] - ETA: 33:37:24 - loss: 44.4110Batch 3: Invalid loss, terminating training
  4/234 [..............................] - ETA: 25:09:00 - loss: inf
"""  # noqa: E501  https://github.com/manishsoni1908/Mobilenet-ssd-keras/issues/21 (bars 1, 2: same format)


def test_keras_terminate_on_nan_report_is_an_event(tmp_path: Path) -> None:
    # before: the report glued to the bar was part of its line: `Batch 2` became a metric
    # `batch`, the `ETA: 1:06` clock a metric `eta` of 1, and no event said the loss went bad
    fmt, m, _ = _stored(tmp_path, KERAS_TUNER_442)
    assert fmt == "generic_text"
    assert m["loss"][1] == 2.2759 and all(math.isnan(m["loss"][s]) for s in (2, 3, 4, 5))
    assert m["accuracy"][4] == 0.1406
    assert "batch" not in m and "eta" not in m
    # the report names the batch that just ended, whose bar Keras draws after it
    events = _events(tmp_path, KERAS_TUNER_442)
    assert [(s, k) for s, k, _ in events] == [(s, "nonfinite_loss") for s in range(2, 6)]
    assert events[0][2] == "Batch 1: Invalid loss, terminating training (the batch of step 2)"
    _, m, _ = _stored(tmp_path, KERAS_SSD_21)
    assert m["loss"] == {1: 44.911, 2: 44.611, 3: 44.411, 4: math.inf}
    assert [(s, k) for s, k, _ in _events(tmp_path, KERAS_SSD_21)] == [(4, "nonfinite_loss")]


# ----- torchtune's DiskLogger -------------------------------------------------------------------
TORCHTUNE_1358 = """\
INFO:torchtune.utils.logging:Model is initialized with precision torch.bfloat16.
Step 1 | loss:2.085338592529297 lr:2e-05 tokens_per_second_per_gpu:57.828881833956174
Step 2 | loss:1.8718312978744507 lr:2e-05 tokens_per_second_per_gpu:405.044978758513
Step 3 | loss:1.1732845306396484 lr:2e-05 tokens_per_second_per_gpu:655.9372371931469
"""  # https://github.com/meta-pytorch/torchtune/pull/1358


def test_torchtune_tokens_per_second_per_gpu_is_the_device_throughput(tmp_path: Path) -> None:
    # before: stored under its raw name, beside no throughput metric at all
    _, m, _ = _stored(tmp_path, TORCHTUNE_1358)
    assert m["tokens_per_s_device"][2] == 405.044978758513
    assert "tokens_per_second_per_gpu" not in m
    assert m["loss"][3] == 1.1732845306396484


# ----- DeepSpeed's loss scaler beside a diffusers bar -------------------------------------------
FAITHDIFF_34 = """\
[2025-08-27 10:12:22,229] [INFO] [loss_scaler.py:184:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4, reducing to 2
Steps:   0%|▏                                                                           | 16/6000 [00:55<4:54:46,  2.96s/it, lr=0, noise_step_loss=nan][2025-08-27 10:12:25,030] [INFO] [loss_scaler.py:184:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1
Steps:   0%|▏                                                                           | 17/6000 [00:58<4:50:05,  2.91s/it, lr=0, noise_step_loss=nan][rank0]: Traceback (most recent call last):
"""  # noqa: E501  https://github.com/JyChen9811/FaithDiff/issues/34


def test_no_training_loss_note_does_not_count_the_loss_scale(tmp_path: Path) -> None:
    # before: "no training loss: loss_scale, noise_step_loss keep their names (the losses of
    # several models or terms ...)": the fp16 scale counted as a second loss
    _, m, w = _stored(tmp_path, FAITHDIFF_34)
    assert m["loss_scale"] == {16: 2.0, 17: 1.0} and m["overflow"] == {16: 1.0, 17: 1.0}
    assert all(math.isnan(v) for v in m["noise_step_loss"].values())
    (note,) = [x for x in w if "no training loss" in x]
    assert "noise_step_loss keeps its name" in note and "loss_scale" not in note
