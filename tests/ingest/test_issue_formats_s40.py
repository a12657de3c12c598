"""Logs users bring, read wrong or not at all before (session 40), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it); a fixture says so where lines are constructed in the shape of quoted ones, and a
fixture quoted by an earlier session is imported from its test. Each test says what the
reader stored before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored
from test_issue_formats_s7 import ACCESSORY_48, BEIT_598
from test_issue_formats_s32 import DEIT


def _nan_at(series: dict[int, float]) -> list[int]:
    return sorted(s for s, v in series.items() if math.isnan(v))


# ----- MAE / DeiT / BEiT MetricLogger: `Averaged stats: ... loss: 6.5993 (6.5925)` ---------------
# MetricLogger prints each SmoothedValue as `{median:.4f} ({global_avg:.4f})`: the median of
# its 20-value window (this rank's; `synchronize_between_processes` all-reduces count and
# total only), then the mean since the epoch began. train_one_epoch returns the global
# averages (`{k: meter.global_avg ...}`, what log.txt holds): the epoch's statistic.


def test_averaged_stats_are_the_epochs_averages(tmp_path: Path) -> None:
    # before: `epoch/loss` 6.5993 and `epoch/grad_norm` 0.3922, the window medians; the
    # epoch's NaN grad norm average `(nan)` (unilm#598, BEiT under fp16) was lost
    _, m, w = _stored(tmp_path, BEIT_598)
    step = 114 * 1299 + 1298
    assert m["epoch/loss"] == {step: 6.5925} and m["epoch/mlm_acc"] == {step: 0.0345}
    assert _nan_at(m["epoch/grad_norm"]) == [step]
    assert m["epoch/lr"] == {step: 0.001435}  # one number: the value, as printed
    assert m["grad_norm"] == {step: 0.3922}  # the training line keeps its window value
    assert any("(<epoch/mlm_acc>)" in x for x in w)  # the warning shows which number


def test_averaged_stats_of_llama_accessory(tmp_path: Path) -> None:
    # before: `epoch/loss` 0.6884 (the `closs` window median), not the epoch's 0.8518
    _, m, _ = _stored(tmp_path, ACCESSORY_48)
    assert m["epoch/loss"] == {3004: 0.8518} and m["epoch/grad_norm"] == {3004: 0.3311}
    assert m["loss"][3004] == 0.6923  # the per-iteration lines as before


# ----- evaluation lines that count their batches: `Test: [ 195/195]  Loss: 5.5 (3.98)` -----------
# DeiT's evaluate() updates its MetricLogger once a batch and prints `Test:  [95/96] ...
# acc1: 89.0625 (88.3813)`: the window median, then the mean over the evaluation so far.


def test_deit_test_lines_are_the_evaluations_means(tmp_path: Path) -> None:
    # before: `test/acc1` 89.0625, a 20-batch window median; DeiT's own summary after it
    # (`* Acc@1 88.381`) is the running mean `(88.3813)`
    _, m, _ = _stored(tmp_path, DEIT)
    last = 49 * 31 + 30
    assert m["test/acc1"] == {last: 88.3813} and m["test/acc5"] == {last: 96.779}
    assert m["test_loss"] == {last: 0.445}  # the summary line's, printed after them


# timm's validate() prints `Loss: {loss.val:>7.4f} ({loss.avg:>6.4f})` and returns
# `losses_m.avg`: the evaluation's result is the last line's running mean. Quoted as printed
# in https://github.com/huggingface/pytorch-image-models/issues/814 (another part of the
# log test_issue_formats_s38.TIMM_814 quotes: the evaluation after epoch 2, then epoch 3).
TIMM_814_TEST = """\
Test: [ 195/195]  Time: 0.014 (0.541)  Loss:  5.5195 (3.9840)  Acc@1:  0.0000 (20.4420)  Acc@5: 11.2500 (43.0140)
Test (EMA): [   0/195]  Time: 4.398 (4.398)  Loss:  6.7422 (6.7422)  Acc@1:  0.0000 ( 0.0000)  Acc@5:  0.0000 ( 0.0000)
Test (EMA): [  50/195]  Time: 0.158 (0.595)  Loss:  7.1680 (7.0362)  Acc@1:  0.0000 ( 0.0000)  Acc@5:  0.0000 ( 0.3830)
Test (EMA): [ 100/195]  Time: 0.942 (0.564)  Loss:  6.8789 (7.0247)  Acc@1:  0.0000 ( 0.0000)  Acc@5:  0.0000 ( 0.1934)
Test (EMA): [ 150/195]  Time: 0.061 (0.557)  Loss:  6.9453 (7.0447)  Acc@1:  0.0000 ( 0.0000)  Acc@5:  0.0000 ( 0.3880)
Test (EMA): [ 195/195]  Time: 0.014 (0.528)  Loss:  6.4414 (7.0312)  Acc@1:  0.0000 ( 0.1000)  Acc@5:  0.0000 ( 0.5000)
Current checkpoints:
 ('./output/train/20210818-145857-mobilenetv3_large_100-224/checkpoint-1.pth.tar', 0.1)
 ('./output/train/20210818-145857-mobilenetv3_large_100-224/checkpoint-2.pth.tar', 0.1)
 ('./output/train/20210818-145857-mobilenetv3_large_100-224/checkpoint-0.pth.tar', 0.092)

Train: 3 [   0/5004 (  0%)]  Loss:  4.888789 (4.8888)  Time: 5.569s,   45.97/s  (5.569s,   45.97/s)  LR: 6.227e-02  Data: 5.177 (5.177)
Train: 3 [  50/5004 (  1%)]  Loss:  5.365077 (5.2452)  Time: 0.211s, 1212.20/s  (0.707s,  362.28/s)  LR: 6.227e-02  Data: 0.013 (0.494)
"""  # noqa: E501


def test_timm_test_and_ema_test_lines(tmp_path: Path) -> None:
    # before: `Test (EMA): [ 50/195]` was no split's counter: a metric `test_(ema)` = 195,
    # and the EMA model's last batch loss 6.4414 replaced the training loss at the epoch's
    # end (and `test_loss` was 5.5195, the last batch's own loss, until the commit before)
    _, m, _ = _stored(tmp_path, TIMM_814_TEST)
    end = 3 * 5004 - 1  # the step before epoch 3's first batch
    assert m["test_loss"] == {end: 3.984} and m["test/time"] == {end: 0.541}
    assert m["test_ema_loss"] == {end: 7.0312} and m["test_ema/time"] == {end: 0.528}
    assert m["loss"] == {end + 1: 4.888789, end + 51: 5.365077}  # no evaluation's loss
    assert "test_(ema)" not in m


# ----- full-width colons: `训练次数：100, Loss：1.98` --------------------------------------------
# Quoted as printed in https://github.com/xiaotudui/pytorch-tutorial/issues/1 (the tutorial's
# train.py: `print("训练次数：{}, Loss：{}".format(total_train_step, loss.item()))`); the
# issue's NaN lines are not in the quote: the last line is constructed in their shape.
XIAOTUDUI_1 = """\
训练数据集的长度为：50000
测试数据集的长度为：10000
-------第 1 轮训练开始------
训练次数：100, Loss：1.9817659854888916
训练次数：200, Loss：1.9057204723358154
训练次数：300, Loss：1.7302981615066528
训练次数：400, Loss：1.5506035089492798
训练次数：500, Loss：1.6042922735214233
训练次数：600, Loss：2.496931314468384
训练次数：700, Loss：1.6171432733535767
整体测试集上的Loss: 262.62046909332275
整体测试集上的正确率: 0.3889999985694885
模型已保存
-------第 2 轮训练开始------
训练次数：800, Loss：1.2562278509140015
训练次数：900, Loss：nan
"""


def test_full_width_colons_and_a_chinese_step_key(tmp_path: Path) -> None:
    # before: not recognised (`：` ended no key, and `训练次数` was no step's name)
    fmt, m, _ = _stored(tmp_path, XIAOTUDUI_1)
    assert fmt == "generic_text"
    assert list(m["loss"]) == [100 * k for k in range(1, 10)]
    assert m["loss"][600] == 2.496931314468384 and _nan_at(m["loss"]) == [900]


# ----- `Time: <date>; Epoch: 69; LR, 3e-05; pid_loss: nan; ...` ----------------------------------
# Quoted as printed in https://github.com/nengdong96/CSDN/issues/6 (the loss NaN at epoch 69,
# each line ending in two blanks); the first line, epoch 68, is constructed in its shape.
CSDN_6 = (
    "Time: 2024-10-31 17:58:02; Epoch: 68; LR, 2.9999999999999997e-05; pid_loss: 1.0617;  "
    "pid_loss_proj: 1.2211;  triplet_loss: 0.3125;  triplet_loss_proj: 0.3377;  "
    "rgb_i2t_pid_loss: 0.9041;  ir_i2t_pid_loss: 0.9112;  msel_loss: 0.2116;  "
    "msel_loss_proj: 0.2201;  \n"
    """\
Time: 2024-10-31 18:32:24; Epoch: 69; LR, 2.9999999999999997e-05; pid_loss: nan;  pid_loss_proj: nan;  triplet_loss: nan;  triplet_loss_proj: nan;  rgb_i2t_pid_loss: nan;  ir_i2t_pid_loss: nan;  msel_loss: nan;  msel_loss_proj: nan;\x20\x20
Time: 2024-10-31 18:32:58; Test on Dataset: sysu,\x20
mINP: 0.041896642218916355\x20
mAP: 0.03601023155767768\x20
 Rank: [0.01051801 0.02103603 0.03155404 0.04207205 0.05259006 0.06310808
 0.07362609 0.07888509 0.0894031  0.09992111 0.11043914 0.12095714
 0.13147517 0.14199317 0.15251116 0.1630292  0.17354718 0.18406521
 0.1945832  0.20510122]
"""  # noqa: E501
)


def test_semicolon_fields_a_date_and_a_comma_key(tmp_path: Path) -> None:
    # before: one such line a file was read with a metric `time` = 2024 (the date's year)
    # and no learning rate (`LR, 3e-05`: the comma cut the key off its value); alone, the
    # quoted line is one record, too few for a log
    fmt, m, _ = _stored(tmp_path, CSDN_6)
    assert fmt == "generic_text"
    assert m["lr"] == {68: 2.9999999999999997e-05, 69: 2.9999999999999997e-05}
    assert m["pid_loss"][68] == 1.0617 and _nan_at(m["pid_loss"]) == [69]
    assert _nan_at(m["msel_loss_proj"]) == [69] and "time" not in m
