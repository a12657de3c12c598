"""Training-log styles quoted in public GitHub issues and code (session 31), one test per style.

Each fixture quotes the lines as printed where they were found (URL or source beside it).
The tests check what the ingest stores through the library path the CLI calls, and each
says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- Flax examples (CLU LoggingWriter): `train_learning_rate=...` ----------------------------
# The Flax ImageNet example's train.py writes `train_learning_rate` with its training summary.
# Quoted as printed in its README's sample run
# (https://github.com/google/flax/blob/main/examples/imagenet/README.md, the Markdown indent
# cut); step 200's `train_loss` (printed 6.772485733032227) made a NaN.
FLAX_LR = """\
I0919 14:15:27.775955 140151934879488 logging_writer.py:35] [100] steps_per_second=2.183623, train_accuracy=0.0013867187080904841, train_learning_rate=0.003165467409417033, train_loss=6.95107364654541
I0919 14:15:41.729644 140151934879488 logging_writer.py:35] [200] steps_per_second=7.168900, train_accuracy=0.007822265848517418, train_learning_rate=0.009560351260006428, train_loss=nan
"""  # noqa: E501


def test_flax_train_learning_rate_is_lr(tmp_path: Path) -> None:
    # before: stored under its own name `train_learning_rate`: no `lr` for the run
    fmt, m, _ = _stored(tmp_path, FLAX_LR)
    assert fmt == "generic_text"
    assert m["lr"] == {100: 0.003165467409417033, 200: 0.009560351260006428}
    assert "train_learning_rate" not in m
    assert m["loss"][100] == 6.95107364654541 and math.isnan(m["loss"][200])


# ----- a batch counted within the epoch beside the run's own step -----------------------------
# Transformer-XL's PyTorch train.py prints `| epoch {:3d} step {:>8d} | {:>6d} batches | ...`
# (the batch of `enumerate(train_iter)`, within the epoch). Quoted as printed in
# https://github.com/kimiyoung/transformer-xl/issues/69; the last line follows their shape
# with a NaN.
TRANSFORMER_XL_TRAIN = """\
| epoch   1 step    48200 |  48200 batches | lr 0.000244 | ms/batch 1410.03 | loss  4.13 | ppl    61.889
| epoch   1 step    48400 |  48400 batches | lr 0.000244 | ms/batch 1294.38 | loss  4.14 | ppl    62.738
| epoch   1 step    48600 |  48600 batches | lr 0.000244 | ms/batch 1266.15 | loss   nan | ppl       nan
"""  # noqa: E501
# rnnt-speech-recognition prints `Epoch: {}, Batch: {}, Global Step: {}, Step Time: {}, Loss:`.
# Quoted as printed in https://github.com/noahchalifour/rnnt-speech-recognition/issues/26; the
# last two lines follow their shape, the batch restarting in epoch 1, with NaN.
RNNT_GLOBAL_STEP = """\
Epoch: 0, Batch: 7, Global Step: 7, Step Time: 1.6160, Loss: 327.3580
Epoch: 0, Batch: 8, Global Step: 8, Step Time: 1.6567, Loss: 309.9092
Epoch: 0, Batch: 9, Global Step: 9, Step Time: 1.5911, Loss: 296.6859
Epoch: 0, Batch: 10, Global Step: 10, Step Time: nan, Loss: nan
Epoch: 1, Batch: 0, Global Step: 11, Step Time: 1.2450, Loss: nan
"""


def test_batch_within_epoch_beside_a_step_is_no_metric(tmp_path: Path) -> None:
    # before: Transformer-XL's `batches` and rnnt's `Batch` were metrics `batches`, `batch`
    fmt, m, _ = _stored(tmp_path, TRANSFORMER_XL_TRAIN)
    assert fmt == "generic_text"
    assert sorted(m) == ["epoch", "loss", "lr", "ms/batch", "ppl"]
    assert m["loss"][48200] == 4.13 and math.isnan(m["loss"][48600])
    fmt, m, _ = _stored(tmp_path, RNNT_GLOBAL_STEP)
    assert fmt == "generic_text"
    assert "batch" not in m and m["epoch"][11] == 1.0
    assert m["loss"][7] == 327.3580 and math.isnan(m["loss"][10]) and math.isnan(m["loss"][11])
    assert sorted(m["loss"]) == [7, 8, 9, 10, 11]


# ----- XLM: a log whose only losses are its objectives ------------------------------------------
# XLM's print_stats logs each objective's cross-entropy as `'{}: {:7.4f}'` (`MLM-en`,
# `CLM-fr`, `MT-en-fr`, ...), joined by ` || `. The first two lines are quoted as printed in
# https://github.com/facebookresearch/XLM/issues/209 (`MLM-en` "is the cross-entropy loss"),
# the second's `MLM-en` (printed 7.6028) made a NaN; the two-objective lines are constructed
# in that shape.
XLM_ONE = """\
INFO - 10/04/19 14:41:25 - 0:11:11 -    1135 -   56.12 sent/s -  2143.80 words/s - MLM-en:  7.7416 -  - model LR: 3.8795e-06
INFO - 10/04/19 14:41:27 - 0:11:14 -    1140 -   56.10 sent/s -  2092.52 words/s - MLM-en:     nan -  - model LR: 3.8962e-06
"""  # noqa: E501
XLM_TWO = """\
INFO - 10/04/19 14:41:25 - 0:11:11 -    1135 -   56.12 sent/s -  2143.80 words/s - MLM-en:  7.7416 || MLM-fr:  7.5120 -  - model LR: 3.8795e-06
INFO - 10/04/19 14:41:27 - 0:11:14 -    1140 -   56.10 sent/s -  2092.52 words/s - MLM-en:     nan || MLM-fr:     nan -  - model LR: 3.8962e-06
"""  # noqa: E501


def test_xlm_objectives_only_say_no_training_loss(tmp_path: Path) -> None:
    # before: no note: the objectives were stored under their names and nothing said the
    # loss screen had no `loss` to read
    fmt, m, w = _stored(tmp_path, XLM_ONE)
    assert fmt == "generic_text"
    assert "loss" not in m and m["mlm_en"][1135] == 7.7416 and math.isnan(m["mlm_en"][1140])
    assert any("no training loss: objective MLM-en keeps its name" in x for x in w)
    _, m, w = _stored(tmp_path, XLM_TWO)
    assert m["mlm_fr"][1135] == 7.5120 and math.isnan(m["mlm_fr"][1140])
    assert any("no training loss: objectives MLM-en, MLM-fr keep their names" in x for x in w)


# ----- YOLOv5 / Ultralytics: a header of names, one row of values per epoch under it -----------
# YOLOv5's train.py prints `Epoch gpu_mem box obj cls [total] labels img_size`, then each
# epoch's row under it, its tqdm bar after the values; Ultralytics' trainer prints `Epoch
# GPU_mem box_loss cls_loss dfl_loss Instances Size`. Quoted as printed in
# https://github.com/ultralytics/yolov5/issues/4963 (its first epoch, the losses NaN; the
# epoch-2 row constructed in its shape), https://github.com/ultralytics/yolov5/issues/1485
# (a `total` column; its bar cut as printed there; the epoch-6 row constructed with a NaN)
# and https://github.com/ultralytics/ultralytics/issues/21765 (epochs 21, 22; the epoch-23
# row constructed with NaN).
YOLOV5_4963 = """\
     Epoch   gpu_mem       box       obj       cls    labels  img_size
      1/99     2.64G         nan       nan       nan         4       416: 100%|██████████| 7/7 [00:15<00:00,  2.27s/it]
               Class     Images     Labels          P          R     mAP@.5 mAP@.5:.95: 100%|██████████| 1/1 [00:01<00:00,  1.30s/it]
                 all               14          0             0          0            0              0

     Epoch   gpu_mem       box       obj       cls    labels  img_size
      2/99     2.64G         nan       nan       nan         5       416: 100%|██████████| 7/7 [00:15<00:00,  2.27s/it]
"""  # noqa: E501
YOLOV5_1485 = """\
Epoch   gpu_mem       box       obj       cls     total   targets  img_size
     5/249    0.868G   0.06393   0.01588  0.009617   0.08943        36       640: 100%|█| 211/211 [00:48<00:
               Class      Images     Targetsbox is            P           R      mAP@.5  mAP@.5:.95: 100%|█| 71/71 
                 all         281    1.55e+03        0.23       0.328       0.203      0.0525
Epoch   gpu_mem       box       obj       cls     total   targets  img_size
     6/249    0.868G       nan       nan       nan       nan        36       640: 100%|█| 211/211 [00:48<00:
"""  # noqa: E501, W291
ULTRALYTICS_21765 = """\
      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size
      21/55      9.95G    -0.2338       5.07      2.977         12        640: 100%|██████████| 787/787 [09:07<00:00,  1.44it/s]
                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|██████████| 66/66 [00:34<00:00,  1.90it/s]
                   all       1049       1186      0.929      0.872      0.933      0.543

      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size
      22/55      9.87G    -0.2286      4.971      2.967         11        640: 100%|██████████| 787/787 [09:06<00:00,  1.44it/s]
                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|██████████| 66/66 [00:36<00:00,  1.82it/s]
                   all       1049       1186      0.934      0.876      0.934      0.563

      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size
      23/55      9.94G        nan        nan        nan         15        640: 100%|██████████| 787/787 [09:35<00:00,  1.37it/s]
"""  # noqa: E501


def test_yolo_epoch_rows_under_their_header(tmp_path: Path) -> None:
    # before: the bar's counter (7/7, 211/211, 787/787) was the step and its rate the only
    # training metric: the losses were never read (NaN and all), the validation row's image
    # count a metric `all` and `mAP50-95` a metric `map50` of -95
    fmt, m, _ = _stored(tmp_path, YOLOV5_4963)
    assert fmt == "generic_text"
    assert sorted(m["box_loss"]) == [1, 2] and all(math.isnan(v) for v in m["obj_loss"].values())
    assert math.isnan(m["cls_loss"][2]) and m["gpu_mem_(g)"][1] == 2.64
    assert not {"all", "s/it", "labels", "img_size"} & set(m)
    _, m, _ = _stored(tmp_path, YOLOV5_1485)
    assert m["loss"][5] == 0.08943 and math.isnan(m["loss"][6])  # YOLOv5's `total`
    assert m["box_loss"][5] == 0.06393 and "targets" not in m
    _, m, w = _stored(tmp_path, ULTRALYTICS_21765)
    assert m["box_loss"] == {21: -0.2338, 22: -0.2286, 23: m["box_loss"][23]}
    assert math.isnan(m["box_loss"][23]) and math.isnan(m["dfl_loss"][23])
    assert m["cls_loss"][22] == 4.971
    assert not {"all", "map50", "it/s", "instances", "size"} & set(m)


def test_yolo_row_redrawn_by_its_bar_counts_once(tmp_path: Path) -> None:
    # a captured log keeps every drawing of the bar (`\r`): each epoch's row counts once, its
    # last drawing kept (the losses are running means: a NaN stays NaN to the epoch's end).
    # Before: no format recognised the file (a bar with no rate, the rows no records)
    header = "     Epoch   gpu_mem       box       obj       cls    labels  img_size\n"
    row = "    {}/99   2.64G   {}   0.05   0.02   4   416:  {}%|##| {}/2 [00:01]"
    text = header + "\r".join([row.format(0, "0.11", 50, 1), row.format(0, "0.12", 100, 2)])
    text += "\n" + header + "\r".join([row.format(1, "nan", 50, 1), row.format(1, "nan", 100, 2)])
    _, m, _ = _stored(tmp_path, text + "\n")
    assert m["box_loss"] == {0: 0.12, 1: m["box_loss"][1]} and math.isnan(m["box_loss"][1])


# ----- PaddleOCR: `loss: nanxxx`, a NaN padded with `x` ----------------------------------------
# PaddleOCR's training loop logs its values as `'{}: {:x<6f}'`: a NaN is padded to six
# characters with `x`. Quoted as printed in
# https://github.com/PaddlePaddle/PaddleOCR/issues/11031 (the first two lines) and
# https://github.com/PaddlePaddle/PaddleOCR/issues/4779 (`reader_cost: Nanxxx`); the last line
# follows #4779's shape with a NaN loss and an Inf.
PADDLEOCR_11031 = """\
[2023/10/09 10:49:12] ppocr INFO: epoch: [986/2000], global_step: 737800, lr: 0.000516, acc: 0.000000, norm_edit_dis: 0.000000, CTCLoss: nanxxx, SARLoss: nanxxx, loss: nanxxx, avg_reader_cost: 0.00013 s, avg_batch_cost: 0.30189 s, avg_samples: 128.0, ips: 423.98978 samples/s, eta: 2 days, 17:48:30
[2023/10/09 10:49:15] ppocr INFO: epoch: [986/2000], global_step: 737810, lr: 0.000516, acc: 0.000000, norm_edit_dis: 0.000000, CTCLoss: nanxxx, SARLoss: nanxxx, loss: nanxxx, avg_reader_cost: 0.00013 s, avg_batch_cost: 0.30229 s, avg_samples: 128.0, ips: 423.43968 samples/s, eta: 2 days, 17:48:27
"""  # noqa: E501
PADDLEOCR_4779 = """\
[2021/11/27 13:24:59] root INFO: epoch: [1/400], iter: 5, lr: 0.001000, loss: 196.715683, structure_loss: 131.377853, loc_loss: 74.110054, acc: 0.000000, reader_cost: Nanxxx , batch_cost: 2.47813 s, samples: 96, ips: 7.74779
[2021/11/27 13:25:59] root INFO: epoch: [1/400], iter: 10, lr: 0.001000, loss: nanxxx, structure_loss: -infxx, loc_loss: 74.110054, acc: 0.000000, reader_cost: 0.00012 , batch_cost: 2.47813 s, samples: 96, ips: 7.74779
"""  # noqa: E501


def test_paddleocr_nan_padded_with_x_is_nan(tmp_path: Path) -> None:
    # before: `nanxxx` was no number: the loss, CTCLoss and SARLoss were never stored (the
    # run showed no loss at all), #4779's NaN `reader_cost` and NaN loss dropped
    fmt, m, _ = _stored(tmp_path, PADDLEOCR_11031)
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [737800, 737810] and all(map(math.isnan, m["loss"].values()))
    assert math.isnan(m["ctcloss"][737800]) and math.isnan(m["sarloss"][737810])
    _, m, _ = _stored(tmp_path, PADDLEOCR_4779)
    assert m["loss"][5] == 196.715683 and math.isnan(m["loss"][10])
    assert m["structure_loss"][10] == -math.inf and math.isnan(m["reader_cost"][5])


# ----- a logger's name in parentheses after the level: `INFO    (__main__) Epoch: 7, ...` -----
# ba-dls-deepspeech logs through `%(asctime)s %(levelname)-8s (%(name)s) %(message)s` and its
# training loop prints `Epoch: {}, Iteration: {}, Loss: {}` with the iteration counted within
# the epoch. Quoted as printed in https://github.com/baidu-research/ba-dls-deepspeech/issues/28
# (the paste ends at `Epoch: 8, Iteration: 0, Loss`; its value here a NaN).
BA_DLS_28 = """\
2017-08-14 17:43:18,105 INFO    (__main__) Epoch: 6, Iteration: 50, Loss: 79.07887268066406
2017-08-14 17:44:07,976 INFO    (data_generator) Iters: 6
2017-08-14 17:44:25,415 INFO    (utils) Checkpointing model to: ./model/
2017-08-14 17:44:25,805 INFO    (data_generator) Iters: 54
2017-08-14 17:44:37,734 INFO    (__main__) Epoch: 7, Iteration: 0, Loss: 86.4606704711914
2017-08-14 17:47:57,033 INFO    (__main__) Epoch: 7, Iteration: 10, Loss: 79.75791931152344
2017-08-14 17:51:46,978 INFO    (__main__) Epoch: 7, Iteration: 20, Loss: 81.86383819580078
2017-08-14 17:56:00,494 INFO    (__main__) Epoch: 7, Iteration: 30, Loss: 83.92363739013672
2017-08-14 18:00:55,395 INFO    (__main__) Epoch: 7, Iteration: 40, Loss: 71.31178283691406
2017-08-14 18:06:30,210 INFO    (__main__) Epoch: 7, Iteration: 50, Loss: 85.3790054321289
2017-08-14 18:08:03,423 INFO    (data_generator) Iters: 6
2017-08-14 18:08:27,113 INFO    (utils) Checkpointing model to: ./model/
2017-08-14 18:08:27,578 INFO    (data_generator) Iters: 54
2017-08-14 18:08:57,878 INFO    (__main__) Epoch: 8, Iteration: 0, Loss: nan
"""


def test_logger_name_in_parentheses_is_prefix(tmp_path: Path) -> None:
    # before: `(__main__) Epoch` was no key: the epoch went unread, the iteration (restarting
    # every epoch) the step: epoch 8's NaN replaced epoch 7's iteration-0 loss, epoch 6's
    # iteration 50 lost under epoch 7's (called a restart)
    fmt, m, w = _stored(tmp_path, BA_DLS_28)
    assert fmt == "generic_text"
    assert len(m["loss"]) == 8 and m["epoch"][min(m["loss"])] == 6.0
    losses = [m["loss"][s] for s in sorted(m["loss"])]
    assert losses[0] == 79.07887268066406 and losses[1] == 86.4606704711914
    assert math.isnan(losses[-1])
    assert any("starts again at every epoch" in x for x in w)


# ----- DDIM's logger: `INFO - diffusion.py - 2023-01-04 22:14:28,975 - Epoch: 0, step: 3, ...` ---
# DDIM's main.py (ermongroup/ddim, and the repos built on it) formats its log records as
# `%(levelname)s - %(filename)s - %(asctime)s - %(message)s`, and its runner logs `f"epoch:
# {epoch}, step: {step}, loss: {loss.item()}, data time: ..."`. Quoted as printed in
# https://github.com/JegZheng/truncated-diffusion-probabilistic-models/issues/3 (its lines
# for steps 2 to 6; the paste's first line lost its `I`).
DDIM_LOGGER = """\
INFO - diffusion.py - 2023-01-04 22:14:28,334 - Epoch: 0, step: 2, loss: 2478.3759765625, implicit loss: 0.693336009979248, data time: 0.05294513702392578
INFO - diffusion.py - 2023-01-04 22:14:28,975 - Epoch: 0, step: 3, loss: 1856.43701171875, implicit loss: 0.7036036252975464, data time: 0.0358583132425944
INFO - diffusion.py - 2023-01-04 22:14:29,614 - Epoch: 0, step: 4, loss: 1508.215087890625, implicit loss: 0.6875728964805603, data time: 0.026934266090393066
INFO - diffusion.py - 2023-01-04 22:14:30,250 - Epoch: 0, step: 5, loss: nan, implicit loss: nan, data time: 0.02159852981567383
INFO - diffusion.py - 2023-01-04 22:14:30,885 - Epoch: 0, step: 6, loss: nan, implicit loss: nan, data time: 0.018257300059000652
"""  # noqa: E501


def test_ddim_filename_and_time_are_prefix(tmp_path: Path) -> None:
    # before: no format recognised the file (the file name and the clock stayed before the
    # step, and their numbers with it): the NaN losses were never read
    fmt, m, _ = _stored(tmp_path, DDIM_LOGGER)
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [2, 3, 4, 5, 6]
    assert m["loss"][2] == 2478.3759765625 and math.isnan(m["loss"][5])
    assert math.isnan(m["implicit_loss"][6]) and m["epoch"][6] == 0.0
