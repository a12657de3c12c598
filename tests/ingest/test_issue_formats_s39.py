"""Logs pasted into issues around a loss spike or a NaN (session 39), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it; a fixture says so where lines are constructed in the shape of quoted ones); each test
says what the reader stored before where it stored something wrong, and stays a
regression test where it stored the log right already.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- open_clip: `Train Epoch: E [ n/N (p%)] Loss: ...`, the PyTorch MNIST example's line -----
# Quoted as printed in https://github.com/mertyg/vision-language-models-are-bows/issues/27
# (NegCLIP, trained with open_clip's train.py: `num_samples = batch_count * batch_size *
# world_size` of the epoch's `samples_per_epoch`); the last line, epoch 1's first, is
# constructed in their shape.
OPEN_CLIP_BOWS_27 = """\
 Start epoch 0
2023-06-29,15:44:40 | INFO | Train Epoch: 0 [    64/109468 (0%)] Loss: 1.0672 (1.067) Data (t): 14.173 Batch (t): 18.240, 1.75441/s LR: 0.000000 Logit Scale: 100.000 - V4
2023-06-29,15:45:36 | INFO | Train Epoch: 0 [  6464/109468 (3%)] Loss: 0.97884 (1.023) Data (t): 0.158 Batch (t): 0.559, 36.0876/s LR: 0.000001 Logit Scale: 99.995 - V4
2023-06-29,15:46:28 | INFO | Train Epoch: 0 [ 12864/109468 (6%)] Loss: 0.87522 (0.9738) Data (t): 0.113 Batch (t): 0.515, 78.8352/s LR: 0.000001 Logit Scale: 99.990 - V4
2023-06-29,15:47:13 | INFO | Train Epoch: 0 [ 19264/109468 (9%)] Loss: 0.73911 (0.9151) Data (t): 0.052 Batch (t): 0.454, 78.3267/s LR: 0.000001 Logit Scale: 99.987 - V4
2023-06-29,15:48:00 | INFO | Train Epoch: 0 [ 25664/109468 (12%)] Loss: 0.60426 (0.8529) Data (t): 0.065 Batch (t): 0.472, 78.0624/s LR: 0.000001 Logit Scale: 99.983 - V4
2023-06-29,15:48:47 | INFO | Train Epoch: 0 [ 32064/109468 (15%)] Loss: 0.62116 (0.8143) Data (t): 0.058 Batch (t): 0.463, 53.4243/s LR: 0.000001 Logit Scale: 99.981 - V4
2023-06-29,15:49:36 | INFO | Train Epoch: 0 [ 38464/109468 (18%)] Loss: 0.88208 (0.8240) Data (t): 0.084 Batch (t): 0.490, 78.5411/s LR: 0.000001 Logit Scale: 99.981 - V4
2023-06-29,17:12:05 | INFO | Train Epoch: 1 [    64/109468 (0%)] Loss: nan (nan) Data (t): 12.801 Batch (t): 16.950, 3.77581/s LR: 0.000009 Logit Scale: 99.902 - V4
"""  # noqa: E501


def test_open_clip_train_epoch_counts_samples_over_epochs(tmp_path: Path) -> None:
    # before: `Train Epoch` was no epoch's name: a metric `train_epoch`, and the counter in
    # brackets no step, so the records were numbered 1..8 in file order (epoch 1's first
    # line right after epoch 0's seventh). The counter counts the epoch's samples
    # (open_clip, the MNIST example it copies): counted over epochs from epoch 0
    fmt, m, w = _stored(tmp_path, OPEN_CLIP_BOWS_27)
    assert fmt == "generic_text"
    assert m["loss"][64] == 1.0672 and m["loss"][38464] == 0.88208
    assert set(m["loss"]) == {64, 6464, 12864, 19264, 25664, 32064, 38464, 109468 + 64}
    assert math.isnan(m["loss"][109532])
    assert m["lr"][6464] == 1e-06 and m["logit_scale"][109532] == 99.902
    assert "train_epoch" not in m
    assert not any("file order" in x for x in w)


# ----- a tqdm bar per epoch: `Train Epoch: 16 Loss: 0.36: 100% 2785/2785 [...]` -----------------
# Quoted as printed in https://github.com/InhwanBae/DMRGCN/issues/1 (val loss always NaN): each
# epoch's training bar, its validation bar, and the epoch's summary lines (the blank lines
# hold one space, written `\x20`).
DMRGCN_1 = """\
Train Epoch: 16 Loss: 0.35977894: 100% 2785/2785 [00:53<00:00, 52.28it/s]
Valid Epoch: 16 Loss: nan: 100% 660/660 [00:04<00:00, 143.71it/s]
\x20
Dataset: tag, Epoch: 16
Train_loss: 46.05170378351126, Val_los: nan
Min_val_epoch: -1, Min_val_loss: 10000000000.0
\x20
Train Epoch: 17 Loss: 0.35977894: 100% 2785/2785 [00:53<00:00, 52.14it/s]
Valid Epoch: 17 Loss: nan: 100% 660/660 [00:04<00:00, 144.18it/s]
\x20
Dataset: tag, Epoch: 17
Train_loss: 46.05170378351126, Val_los: nan
Min_val_epoch: -1, Min_val_loss: 10000000000.0
\x20
Train Epoch: 18 Loss: 0.35977894: 100% 2785/2785 [00:53<00:00, 52.21it/s]
Valid Epoch: 18 Loss: nan: 100% 660/660 [00:04<00:00, 144.70it/s]
\x20
Dataset: tag, Epoch: 18
Train_loss: 46.05170378351126, Val_los: nan
Min_val_epoch: -1, Min_val_loss: 10000000000.0
"""


def test_epoch_bar_counts_over_epochs(tmp_path: Path) -> None:
    # before: `Train Epoch` was no epoch's name, so the bar's counter, 2785 at every
    # epoch's end, was the step: the three epochs on one step, each replacing the last
    # (a metric `train_epoch` = 18 there)
    fmt, m, w = _stored(tmp_path, DMRGCN_1)
    assert fmt == "generic_text"
    ends = [e * 2785 for e in (16, 17, 18)]  # epochs counted from 1: none prints a 0
    assert m["epoch"] == dict(zip(ends, (16.0, 17.0, 18.0), strict=True))
    assert set(m["loss"]) == set(ends) and m["it/s"][ends[1]] == 52.14
    assert "train_epoch" not in m


def test_validation_bar_is_the_split_at_the_training_step(tmp_path: Path) -> None:
    # before: the `Valid Epoch` bar counted to another total than the training bar's and
    # its lines were dropped: the validation's NaN loss was lost (only the summary's
    # misspelt `Val_los` kept one)
    _, m, _ = _stored(tmp_path, DMRGCN_1)
    ends = [e * 2785 for e in (16, 17, 18)]
    assert set(m["val_loss"]) == set(ends)
    assert all(math.isnan(v) for v in m["val_loss"].values())
    assert m["val/it/s"][ends[0]] == 143.71 and "valid_epoch" not in m


# ----- PyTorch-GAN style: `[Epoch 4/151] [Batch 200/200] [acc: ...] [G loss: ...]` ----------------
# Quoted as printed in https://github.com/lihuantong/HAST/issues/3 (its losses NaN from epoch 5;
# the `[Batch 100/100] [acc: ...]` lines are the test pass after each epoch; the line
# that ends in a blank is written with `\x20`).
HAST_3 = """\
2023-10-11 08:20:26,583 INFO: [Epoch 4/151] [Batch 200/200] [acc: 0.9688%] [G loss: 5.805516] [One-hot loss: 5.696794] [BNS_loss:1.087222]
2023-10-11 08:21:52,157 INFO: [Epoch 4/151] [Batch 100/100] [acc: 0.8820%]
2023-10-11 08:21:52,158 INFO: #==>Best Result is: Top1 Error: 98.908000, Top5 Error: 95.984000
2023-10-11 08:21:52,158 INFO: #==>Best Result is: Top1 Accuracy: 1.092000, Top5 Accuracy: 4.016000
2023-10-11 08:21:52,654 INFO: Reducer buckets have been rebuilt in this iteration.
2023-10-11 08:22:25,695 INFO: [Epoch 5/151] [Batch 200/200] [acc: 94.8750%] [loss KL: nan] [loss FA: nan] [loss perturbed KL: nan] [loss perturbed FA: nan]\x20
2023-10-11 08:23:55,065 INFO: [Epoch 5/151] [Batch 100/100] [acc: 0.1000%]
"""  # noqa: E501


def test_bracketed_fields_are_no_logger_tags(tmp_path: Path) -> None:
    # before: every leading `[...]` without `=` that did not open with s or i was taken for
    # a logger's tag (`[rank0]`, `[titan]`) and went with the prefix: `[Epoch 4/151] [Batch
    # 200/200] [acc: ...] [G loss: ...]` lost all its fields, and the file was no known
    # format (its NaN losses never read)
    fmt, m, w = _stored(tmp_path, HAST_3)
    assert fmt == "generic_text"
    assert m["g_loss"] == {800: 5.805516} and m["bns_loss"] == {800: 1.087222}
    assert set(m["loss_kl"]) == {1000} and math.isnan(m["loss_kl"][1000])
    assert math.isnan(m["loss_perturbed_fa"][1000])
