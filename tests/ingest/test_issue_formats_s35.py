"""Logs pasted into issues around a loss spike or a NaN (session 35), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it); each test says what the reader stored before where it stored something wrong, and
stays a regression test where it stored the log right already.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- trlx: the losses in the tqdm bar's description, DeepSpeed overflows glued after it -----
# Quoted as printed in https://github.com/CarperAI/trlx/issues/342 (PPO with DeepSpeed fp16:
# `tbar.set_description(f"[{' | '.join(desc)}]")`, the bar counting optimizer steps; a
# rollout bar and the loss scaler's reports printed on the same physical lines).
TRLX_342 = """\
[losses/total_loss: 1.64 | losses/policy_loss: 0.12 | losses/value_loss: 7.62]:  16%|█████████████████                                                                                          | 1024/6400 [1:14:23<1:13:02,  1.23it/s][RANK 0] Collecting rollouts
[rollout 128 / 128]: 100%|████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████| 128/128 [01:31<00:00,  1.40it/s][losses/total_loss: 1.34 | losses/policy_loss: -0.39 | losses/value_loss: 8.65]:  16%|█████████████████▎                                                                                        | 1044/6400 [1:16:09<1:07:04,  1.33it/s][2023-02-28 20:08:24,113] [INFO] [stage_1_and_2.py:1769:step] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 128.0, reducing to 64.0
[losses/total_loss: 4.35 | losses/policy_loss: -0.03 | losses/value_loss: 21.92]:  16%|█████████████████▍                                                                                         | 1045/6400 [1:16:09<53:12,  1.68it/s][2023-02-28 20:08:24,338] [INFO] [stage_1_and_2.py:1769:step] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64.0, reducing to 32.0
"""  # noqa: E501


def test_trlx_losses_in_the_bar_description(tmp_path: Path) -> None:
    # before: the bracketed description was taken for a logger's tag (`[rank0]:`) and
    # removed with the prefix: no loss at all, only `it/s`; the 1044 record, printed after
    # the rollout bar on one line, gave no step either
    fmt, m, w = _stored(tmp_path, TRLX_342)
    assert fmt == "generic_text"
    assert m["loss"] == {1024: 1.64, 1044: 1.34, 1045: 4.35}  # losses/total_loss
    assert m["losses/policy_loss"] == {1024: 0.12, 1044: -0.39, 1045: -0.03}
    assert m["losses/value_loss"] == {1024: 7.62, 1044: 8.65, 1045: 21.92}
    # each overflow skipped the step after the bar printed before it
    assert m["overflow"] == {1045: 1.0, 1046: 1.0}
    assert m["loss_scale"] == {1045: 64.0, 1046: 32.0}
    assert not any(k.startswith("rollout") or k.lower() == "rank" for k in m)
    assert not any("no training loss" in x for x in w)


# ----- icefall: a batch's losses and their running totals as named groups -------------------
# Quoted as printed in https://github.com/k2-fsa/icefall/issues/320 (conformer_ctc) and
# https://github.com/k2-fsa/icefall/pull/314 (pruned_transducer_stateless2): `loss[...]` is
# the batch's, `tot_loss[...]` the tracker's decayed running total.
ICEFALL_320 = """\
2022-04-21 06:21:16,518 INFO [train.py:518] Epoch 0, batch 500, loss[ctc_loss=0.7647, att_loss=0.7367, loss=0.7423, over 2223 frames.], tot_loss[ctc_loss=1.098, att_loss=1.086, loss=1.088, over 438207.72270125535 frames.], batch size: 8
2022-04-21 06:24:05,162 INFO [train.py:518] Epoch 0, batch 550, loss[ctc_loss=1.043, att_loss=0.9977, loss=1.007, over 2480 frames.], tot_loss[ctc_loss=1.099, att_loss=1.079, loss=1.083, over 447367.3462596891 frames.], batch size: 24
2022-04-21 06:26:38,987 INFO [train.py:518] Epoch 0, batch 600, loss[ctc_loss=1.092, att_loss=1.031, loss=1.043, over 2391 frames.], tot_loss[ctc_loss=1.093, att_loss=1.064, loss=1.069, over 453151.52900862123 frames.], batch size: 9
"""  # noqa: E501
ICEFALL_314 = """\
2022-04-29 10:31:17,699 INFO [train.py:756] Epoch 0, batch 0, loss[loss=0.5521, simple_loss=1.104, pruned_loss=8.767, over 2432.00 frames.], tot_loss[loss=0.5521, simple_loss=1.104, pruned_loss=8.767, over 2432.00 frames.], batch size: 32, lr: 3.00e-03
2022-04-29 10:31:21,003 INFO [train.py:756] Epoch 0, batch 1, loss[loss=0.474, simple_loss=0.948, pruned_loss=8.545, over 2494.00 frames.], tot_loss[loss=0.5125, simple_loss=1.025, pruned_loss=8.654, over 4913.84 frames.], batch size: 86, lr: 3.00e-03
2022-04-29 10:31:24,395 INFO [train.py:756] Epoch 0, batch 2, loss[loss=0.5441, simple_loss=1.088, pruned_loss=8.671, over 2485.00 frames.], tot_loss[loss=0.5231, simple_loss=1.046, pruned_loss=8.66, over 7374.27 frames.], batch size: 71, lr: 3.00e-03
"""  # noqa: E501


def test_icefall_batch_loss_is_not_replaced_by_the_running_total(tmp_path: Path) -> None:
    # before: `loss` was the running total's (1.088, 1.083, 1.069; the batch's went to the
    # conflicts table) and `ctc_loss`, first in each group, had no name; with
    # pruned_transducer the first field is `loss` itself, and no `loss` was stored at all
    fmt, m, _ = _stored(tmp_path, ICEFALL_320)
    assert fmt == "generic_text"
    # the records print the batch within the epoch and no global step: numbered in order
    assert m["loss"] == {1: 0.7423, 2: 1.007, 3: 1.043}
    assert m["ctc_loss"] == {1: 0.7647, 2: 1.043, 3: 1.092}
    assert m["att_loss"] == {1: 0.7367, 2: 0.9977, 3: 1.031}
    assert m["tot_loss/loss"] == {1: 1.088, 2: 1.083, 3: 1.069}
    assert m["tot_loss/ctc_loss"] == {1: 1.098, 2: 1.099, 3: 1.093}
    assert m["batch"] == {1: 500, 2: 550, 3: 600}
    fmt, m, w = _stored(tmp_path, ICEFALL_314)
    assert m["loss"] == {1: 0.5521, 2: 0.474, 3: 0.5441}
    assert m["pruned_loss"] == {1: 8.767, 2: 8.545, 3: 8.671}
    assert m["tot_loss/loss"] == {1: 0.5521, 2: 0.5125, 3: 0.5231}
    assert m["lr"] == {1: 3e-3, 2: 3e-3, 3: 3e-3}
    assert not any("logged again at once" in x for x in w)
    assert not any("no training loss" in x for x in w)


# ----- WeNet: `TRAIN Batch {epoch}/{batch}` from every rank, then `CV Batch` ------------------
# Quoted as printed in https://github.com/wenet-e2e/wenet/issues/941 (wenet/utils/executor.py:
# `'TRAIN Batch {}/{} loss {:.6f} '.format(epoch, batch_idx, ...)`, each rank logging its own
# line; `CV` is the cross-validation set).
WENET_941 = """\
2023-01-30 18:47:07,107 DEBUG TRAIN Batch 4/203700 loss 12.646465 loss_att 10.921429 loss_ctc 16.671551 lr 0.00032621 rank 0
2023-01-30 18:47:16,614 DEBUG TRAIN Batch 4/203700 loss 16.885244 loss_att 13.554604 loss_ctc 24.656742 lr 0.00032621 rank 1
2023-01-30 18:47:22,712 DEBUG TRAIN Batch 4/203700 loss 19.729301 loss_att 16.203592 loss_ctc 27.955961 lr 0.00032621 rank 2
2023-01-30 18:49:20,301 DEBUG TRAIN Batch 4/203800 loss 23.600426 loss_att 18.615641 loss_ctc 35.231586 lr 0.00032619 rank 2
2023-01-30 18:49:20,315 DEBUG TRAIN Batch 4/203800 loss 18.340179 loss_att 15.005867 loss_ctc 26.120243 lr 0.00032619 rank 1
2023-01-30 18:49:20,438 DEBUG TRAIN Batch 4/203800 loss 25.618004 loss_att 20.509174 loss_ctc 37.538609 lr 0.00032619 rank 0
2023-01-30 18:49:55,773 DEBUG CV Batch 4/0 loss 28.517015 loss_att 24.142754 loss_ctc 38.723625 history loss 27.957858 rank 2
2023-01-30 18:49:56,046 DEBUG CV Batch 4/0 loss 28.402842 loss_att 24.164579 loss_ctc 38.292122 history loss 27.845923 rank 0
2023-01-30 18:49:56,076 DEBUG CV Batch 4/0 loss 28.509480 loss_att 24.174435 loss_ctc 38.624588 history loss 27.950470 rank 3
2023-01-30 18:49:56,101 DEBUG CV Batch 4/0 loss 28.402861 loss_att 24.164606 loss_ctc 38.292122 history loss 27.845942 rank 1
"""  # noqa: E501


def test_wenet_epoch_slash_batch_and_cv_lines(tmp_path: Path) -> None:
    # before: `TRAIN Batch 4` was a metric `train_batch` (the epoch), the records were
    # numbered 1..10 in file order, and the CV lines were records too: rank 0's validation
    # loss 28.402842 stood in `loss` (at record 8), rank 3's `loss/rank3` besides
    fmt, m, w = _stored(tmp_path, WENET_941)
    assert fmt == "generic_text"
    assert m["loss"] == {203700: 12.646465, 203800: 25.618004}  # rank 0's
    assert m["loss/rank1"] == {203700: 16.885244, 203800: 18.340179}
    assert m["loss/rank2"] == {203700: 19.729301, 203800: 23.600426}
    assert m["lr"] == {203700: 0.00032621, 203800: 0.00032619}
    assert m["epoch"] == {203700: 4, 203800: 4}
    # the validation after batch 203800, each rank's under its own name
    assert m["val_loss"] == {203800: 28.402842} and m["val_loss/rank3"] == {203800: 28.50948}
    assert m["val_loss_ctc"] == {203800: 38.292122}
    assert "loss/rank3" not in m and not any("batch" in k for k in m)
    assert not any(k.startswith("val/") for k in m)
    assert not any("file order" in x for x in w)


# ----- SpeechBrain: a bare tqdm bar per epoch after `Going into epoch E` ----------------------
# Quoted as printed in https://github.com/speechbrain/speechbrain/pull/2216 (stdout: the
# logger's name, no level; the training bar restarts every epoch, the validation bar after
# it counts another total, then train_logger's summary of the epoch).
SPEECHBRAIN_2216 = """\
speechbrain.utils.epoch_loop - Going into epoch 1
100%|█████████████████████████████████████████████████████████████████| 190/190 [03:08<00:00,  1.01it/s, train_loss=0.945]
100%|███████████████████████████████████████████████████████████████████████████████████| 137/137 [01:43<00:00,  1.33it/s]
speechbrain.utils.train_logger - epoch: 1, lr: 1.00e+00 - train loss: 9.45e-01 - valid loss: 1.23, valid CER: 35.42, valid WER: 39.14
speechbrain.utils.checkpoints - Saved an end-of-epoch checkpoint in results/CRDNN_BPE_960h_LM/2602/save/CKPT+2023-10-21+12-02-55+00
speechbrain.utils.epoch_loop - Going into epoch 2
100%|█████████████████████████████████████████████████████████████████| 190/190 [03:02<00:00,  1.04it/s, train_loss=0.726]
100%|███████████████████████████████████████████████████████████████████████████████████| 137/137 [02:17<00:00,  1.00s/it]
speechbrain.nnet.schedulers - Changing lr from 1 to 0.8
speechbrain.utils.train_logger - epoch: 2, lr: 1.00e+00 - train loss: 7.26e-01 - valid loss: 1.27, valid CER: 1.54e+02, valid WER: 1.54e+02
"""  # noqa: E501
# The summaries alone (a log written by train_logger to its file), quoted as printed in
# https://github.com/speechbrain/speechbrain/issues/2584
SPEECHBRAIN_2584 = """\
Epoch: 1, lr: 1.00e-03 - train loss: 8.84e-01 - valid loss: 1.76e-01, valid error: 5.25e-02
Epoch: 2, lr: 9.95e-04 - train loss: 2.20e-01 - valid loss: 1.21e-01, valid error: 3.72e-02
Epoch: 3, lr: 9.91e-04 - train loss: 1.65e-01 - valid loss: 8.99e-02, valid error: 3.00e-02
"""


def test_speechbrain_bar_counted_over_epochs(tmp_path: Path) -> None:
    # before: both epochs' bars stood at step 190, epoch 2's values replacing epoch 1's (the
    # conflicts table held epoch 1's train_loss 0.945 and its summary)
    fmt, m, w = _stored(tmp_path, SPEECHBRAIN_2216)
    assert fmt == "generic_text"
    assert m["loss"] == {190: 0.945, 380: 0.726}  # the bar's train_loss
    assert m["epoch"] == {190: 1, 380: 2}
    # the epoch's training averages are kept apart (`epoch/<name>`); its validation ran once,
    # at the epoch's end: the validation loss (before: `epoch/valid_loss`, no validation loss)
    assert m["epoch/loss"] == {190: 0.945, 380: 0.726}
    assert m["val_loss"] == {190: 1.23, 380: 1.27}
    assert m["valid_wer"] == {190: 39.14, 380: 154.0}
    assert not any("logged again at once" in x for x in w)
    fmt, m, _ = _stored(tmp_path, SPEECHBRAIN_2584)
    assert m["loss"] == {1: 0.884, 2: 0.22, 3: 0.165}
    assert m["val_loss"] == {1: 0.176, 2: 0.121, 3: 0.0899}
    assert m["lr"] == {1: 1e-3, 2: 9.95e-4, 3: 9.91e-4}


# ----- YOLOX: loguru's `| {name}:{line} - ` before `epoch: E/M, iter: i/N, ...` ---------------
# Quoted as printed in https://github.com/Megvii-BaseDetection/YOLOX/issues/1548 and
# https://github.com/Megvii-BaseDetection/YOLOX/issues/782 (yolox/core/trainer.py logs
# through loguru, whose format ends `{name}:{line} - {message}`).
YOLOX_1548 = """\
2022-10-29 10:01:47 | INFO     | yolox.core.trainer:261 - epoch: 7/300, iter: 10/102, mem: 12977Mb, iter_time: 6.191s, data_time: 3.724s, total_loss: 8.6, iou_loss: 3.8, l1_loss: 0.0, conf_loss: 3.4, cls_loss: 1.4, lr: 1.000e-02, size: 640, ETA: 1 day, 22:22:32
2022-10-29 10:02:36 | INFO     | yolox.core.trainer:261 - epoch: 7/300, iter: 20/102, mem: 12977Mb, iter_time: 4.877s, data_time: 2.507s, total_loss: 8.5, iou_loss: 4.1, l1_loss: 0.0, conf_loss: 3.2, cls_loss: 1.2, lr: 1.000e-02, size: 352, ETA: 1 day, 22:16:08
"""  # noqa: E501
YOLOX_782 = """\
2021-10-11 14:38:09 | INFO     | yolox.core.trainer:188 - ---> start train epoch1
2021-10-11 14:38:12 | INFO     | yolox.core.trainer:246 - epoch: 1/80, iter: 1/57, mem: 6736Mb, iter_time: 2.817s, data_time: 0.001s, total_loss: 14.5, iou_loss: 3.9, l1_loss: 0.0, conf_loss: 8.9, cls_loss: 1.7, lr: 6.156e-08, size: 640, ETA: 3:34:03
2021-10-11 14:38:12 | INFO     | yolox.core.trainer:246 - epoch: 1/80, iter: 2/57, mem: 6736Mb, iter_time: 0.306s, data_time: 0.012s, total_loss: 14.9, iou_loss: 3.8, l1_loss: 0.0, conf_loss: 9.2, cls_loss: 1.8, lr: 2.462e-07, size: 640, ETA: 1:58:38
2021-10-11 14:38:12 | INFO     | yolox.core.trainer:246 - epoch: 1/80, iter: 3/57, mem: 6736Mb, iter_time: 0.226s, data_time: 0.001s, total_loss: 13.7, iou_loss: 4.0, l1_loss: 0.0, conf_loss: 8.1, cls_loss: 1.6, lr: 5.540e-07, size: 640, ETA: 1:24:47
"""  # noqa: E501


def test_yolox_iterations_counted_over_epochs(tmp_path: Path) -> None:
    # before: the logger's `yolox.core.trainer:261` stayed before the record, its line
    # number stored as a metric `yolox.core.trainer` (261 at every step), and the step was
    # the iteration within the epoch (10, 20: epoch 7's records on epoch 1's steps)
    fmt, m, w = _stored(tmp_path, YOLOX_1548)
    assert fmt == "generic_text"
    # (7 - 1) * 102 + 10: under a count over the run, 300 epochs of 102 iterations would
    # rise by a third of an iteration per epoch, not by 10 within one
    assert m["loss"] == {622: 8.6, 632: 8.5}  # total_loss
    assert m["iou_loss"] == {622: 3.8, 632: 4.1} and m["lr"] == {622: 1e-2, 632: 1e-2}
    assert not any(k.startswith("yolox") for k in m) and "epoch" not in m
    assert any("counted over epochs" in x for x in w)
    fmt, m, _ = _stored(tmp_path, YOLOX_782)
    assert m["loss"] == {1: 14.5, 2: 14.9, 3: 13.7}  # epoch 1: as printed
    assert m["lr"] == {1: 6.156e-08, 2: 2.462e-07, 3: 5.54e-07}
    assert not any(k.startswith("yolox") for k in m)


# ----- MindOCR (MindSpore): `epoch: [E/M] step: [i/N]`, the step within the epoch -----------
# Quoted as printed in https://github.com/mindspore-lab/mindocr/issues/670
MINDOCR_670 = """\
[2024-03-04 12:02:42] mindocr.utils.callbacks INFO - epoch: [12/20] step: [700/4468], loss: 19.327375, lr: 0.000793, per step time: 223.489 ms, fps per card: 4.47 img/s
[2024-03-04 12:03:04] mindocr.utils.callbacks INFO - epoch: [12/20] step: [800/4468], loss: 14.977672, lr: 0.000792, per step time: 215.858 ms, fps per card: 4.63 img/s
[2024-03-04 12:03:25] mindocr.utils.callbacks INFO - epoch: [12/20] step: [900/4468], loss: 22.353065, lr: 0.000791, per step time: 214.546 ms, fps per card: 4.66 img/s
"""  # noqa: E501


def test_mindocr_step_in_epoch_counted_over_epochs(tmp_path: Path) -> None:
    # before: the steps were 700, 800, 900 (epoch 12's steps on epoch 1's), the epoch a
    # metric; a count over the run would stand past 11 * 4468 / 20 = 2457 in epoch 12
    fmt, m, _ = _stored(tmp_path, MINDOCR_670)
    assert fmt == "generic_text"
    assert m["loss"] == {49848: 19.327375, 49948: 14.977672, 50048: 22.353065}
    assert m["lr"] == {49848: 0.000793, 49948: 0.000792, 50048: 0.000791}
    assert "epoch" not in m


# ----- Regression: formats the reader already stored right ----------------------------------
# mmseg (mmcv IterBasedRunner) with the validation's values on the training line (`_val`
# names), quoted as printed in https://github.com/open-mmlab/mmsegmentation/issues/2300
MMSEG_2300 = """\
2022-11-12 21:28:32,346 - mmseg - INFO - Iter [2600/120000]	lr: 9.807e-03, eta: 4:17:15, time: 0.103, data_time: 0.003, memory: 6566, decode.loss_ce: 0.1195, decode.acc_seg: 97.6243, aux.loss_ce: 0.0479, aux.acc_seg: 97.6243, loss: 0.1675, decode.loss_ce_val: 0.1237, decode.acc_seg_val: 97.8035, aux.loss_ce_val: 0.0568, aux.acc_seg_val: 97.8035, loss_val: 0.1805
2022-11-12 21:28:47,229 - mmseg - INFO - Iter [2650/120000]	lr: 9.803e-03, eta: 4:17:47, time: 0.149, data_time: 0.050, memory: 6566, decode.loss_ce: 0.1191, decode.acc_seg: 97.3685, aux.loss_ce: 0.0496, aux.acc_seg: 97.3685, loss: 0.1687, decode.loss_ce_val: 0.1508, decode.acc_seg_val: 96.8756, aux.loss_ce_val: 0.0674, aux.acc_seg_val: 96.8756, loss_val: 0.2181
"""  # noqa: E501
# DAFormer (mmseg, UDA): every loss term NaN and no total, quoted as printed in
# https://github.com/lhoyer/DAFormer/issues/22
DAFORMER_22 = """\
2022-05-07 17:02:57,696 - mmseg - INFO - Iter [50/40000]        lr: 1.958e-06, eta: 1 day, 0:29:42, time: 2.207, data_time: 0.029, memory: 9801, decode.loss_seg: nan, decode.acc_seg: 32.2611, src.loss_imnet_feat_dist: nan, mix.decode.loss_seg: nan, mix.decode.acc_seg: 54.3771
2022-05-07 17:04:45,225 - mmseg - INFO - Iter [100/40000]       lr: 3.950e-06, eta: 1 day, 0:08:59, time: 2.151, data_time: 0.017, memory: 9801, decode.loss_seg: nan, decode.acc_seg: 41.2013, src.loss_imnet_feat_dist: nan, mix.decode.loss_seg: nan, mix.decode.acc_seg: 69.9605
"""  # noqa: E501


def test_mmseg_inline_validation_and_nan_terms(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, MMSEG_2300)
    assert fmt == "generic_text"
    assert m["loss"] == {2600: 0.1675, 2650: 0.1687}
    assert m["val_loss"] == {2600: 0.1805, 2650: 0.2181}  # `loss_val`
    assert m["decode.loss_ce"] == {2600: 0.1195, 2650: 0.1191}
    assert m["decode.loss_ce_val"] == {2600: 0.1237, 2650: 0.1508}
    assert m["lr"] == {2600: 9.807e-03, 2650: 9.803e-03}
    fmt, m, w = _stored(tmp_path, DAFORMER_22)
    assert sorted(m["decode.loss_seg"]) == [50, 100]
    assert all(math.isnan(v) for v in m["decode.loss_seg"].values())
    assert all(math.isnan(v) for v in m["mix.decode.loss_seg"].values())
    assert m["decode.acc_seg"] == {50: 32.2611, 100: 41.2013}
    assert any("no training loss" in x for x in w)


# detectron2: a loss that explodes from the first iteration (which prints no eta yet), quoted
# as printed in https://github.com/facebookresearch/detectron2/issues/1831
DETECTRON2_1831 = """\
[07/28 14:14:37 d2.engine.train_loop]: Starting training from iteration 0
[07/28 14:14:38 d2.utils.events]:  iter: 0  total_loss: 21944.058  loss_sem_seg: 5.287  loss_cls: 16096.774  loss_box_reg: 3109.336  loss_mask: 118.303  loss_rpn_cls: 583.987  loss_rpn_loc: 2030.371  data_time: 0.2953  lr: 0.000001  max_mem: 2372M
[07/28 14:14:38 d2.utils.events]:  eta: 3:12:46  iter: 1  total_loss: 319373.750  loss_sem_seg: 5.846  loss_cls: 313228.387  loss_box_reg: 4174.280  loss_mask: 130.275  loss_rpn_cls: 645.898  loss_rpn_loc: 1189.064  data_time: 0.2953  lr: 0.000001  max_mem: 2372M
"""  # noqa: E501


def test_detectron2_first_iterations(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, DETECTRON2_1831)
    assert fmt == "generic_text"
    assert m["loss"] == {0: 21944.058, 1: 319373.750}  # total_loss
    assert m["loss_cls"] == {0: 16096.774, 1: 313228.387}
    assert m["lr"] == {0: 1e-06, 1: 1e-06}


# mmdet3d (mmcv EpochBasedRunner) with `/`-joined loss names and the gradient norm, quoted as
# printed in https://github.com/ZYang2077/DAOcc/issues/25
DAOCC_25 = """\
2025-08-12 11:57:31,215 - mmdet3d - INFO - Epoch [1][54/30895]	lr: 8.080e-05, eta: 4 days, 9:46:02, time: 1.966, data_time: 0.093, memory: 13102, loss/object/heatmap/task0: 0.3297, loss/object/bbox/task0: 0.0088, loss/object/heatmap/task1: 4.6839, loss/object/bbox/task1: 0.0111, loss/object/heatmap/task2: 25.6782, loss/object/bbox/task2: 0.0154, loss/object/heatmap/task3: 0.5164, loss/object/bbox/task3: 0.0080, loss/object/heatmap/task4: 11.7505, loss/object/bbox/task4: 0.0093, loss/object/heatmap/task5: 2.0634, loss/object/bbox/task5: 0.0083, loss/occ/loss_occ: 1.4139, loss: 46.4968, grad_norm: 448.5880
2025-08-12 11:57:33,154 - mmdet3d - INFO - Epoch [1][55/30895]	lr: 8.107e-05, eta: 4 days, 9:39:31, time: 1.939, data_time: 0.083, memory: 13102, loss/object/heatmap/task0: 0.7096, loss/object/bbox/task0: 0.0127, loss/object/heatmap/task1: 9.2343, loss/object/bbox/task1: 0.0153, loss/object/heatmap/task2: 12.0569, loss/object/bbox/task2: 0.0127, loss/object/heatmap/task3: 1.3927, loss/object/bbox/task3: 0.0110, loss/object/heatmap/task4: 16.7920, loss/object/bbox/task4: 0.0114, loss/object/heatmap/task5: 2.0117, loss/object/bbox/task5: 0.0079, loss/occ/loss_occ: 1.3976, loss: 43.6661, grad_norm: 370.4756
"""  # noqa: E501


def test_mmdet3d_slash_named_terms(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, DAOCC_25)
    assert fmt == "generic_text"
    assert m["loss"] == {54: 46.4968, 55: 43.6661}
    assert m["grad_norm"] == {54: 448.5880, 55: 370.4756}
    assert m["loss/object/heatmap/task2"] == {54: 25.6782, 55: 12.0569}
    assert m["lr"] == {54: 8.080e-05, 55: 8.107e-05}


# A TF1 training loop printing `step: N total_loss: ...` between the Supervisor's
# `global_step/sec` lines, quoted as printed in https://github.com/thodan/epos/issues/9
EPOS_9 = """\
step: 0 total_loss: 9.5576973 obj_cls: 2.77258897 frag_cls: 4.15888262 frag_loc: 2.37503433
step: 100 total_loss: nan obj_cls: nan frag_cls: nan frag_loc: nan
INFO:tensorflow:global_step/sec: 2.1272
step: 200 total_loss: nan obj_cls: nan frag_cls: nan frag_loc: nan
INFO:tensorflow:global_step/sec: 2.22972
step: 300 total_loss: nan obj_cls: nan frag_cls: nan frag_loc: nan
INFO:tensorflow:global_step/sec: 2.22798
step: 400 total_loss: nan obj_cls: nan frag_cls: nan frag_loc: 2.52651024
INFO:tensorflow:global_step/sec: 2.22882
"""


def test_epos_total_loss_nan_kept(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, EPOS_9)
    assert fmt == "generic_text"
    assert m["loss"][0] == 9.5576973 and sorted(m["loss"]) == [0, 100, 200, 300, 400]
    assert all(math.isnan(m["loss"][s]) for s in (100, 200, 300, 400))
    assert m["frag_loc"][400] == 2.52651024 and math.isnan(m["frag_loc"][300])
    assert "global_step/sec" not in m
