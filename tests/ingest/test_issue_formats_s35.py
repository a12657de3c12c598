"""Logs pasted into issues around a loss spike or a NaN (session 35), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it); each test says what the reader stored before where it stored something wrong, and
stays a regression test where it stored the log right already.
"""

from __future__ import annotations

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
    # the epoch's summary keeps its own names, its validation loss apart from the training's
    assert m["epoch/valid_loss"] == {190: 1.23, 380: 1.27}
    assert m["epoch/valid_wer"] == {190: 39.14, 380: 154.0}
    assert not any("logged again at once" in x for x in w)
    fmt, m, _ = _stored(tmp_path, SPEECHBRAIN_2584)
    assert m["loss"] == {1: 0.884, 2: 0.22, 3: 0.165}
    assert m["val_loss"] == {1: 0.176, 2: 0.121, 3: 0.0899}
    assert m["lr"] == {1: 1e-3, 2: 9.95e-4, 3: 9.91e-4}
