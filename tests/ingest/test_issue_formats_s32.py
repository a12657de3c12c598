"""Evaluation lines at a training step (session 32), one test per style.

An evaluation line printed at the step of a training record (or taking the step of the
record before it) used to rename only its loss (`val loss`): its other values kept the
training names, so the evaluation's throughput, timing or accuracy replaced the training
value of that step, or stood in a training series as if the run had printed it. Each
fixture quotes the lines as printed where they were found (URL or source beside it); each
test says what the reader stored before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- TensorFlow Estimator: `Saving dict for global step N: ...` ------------------------------
# The training lines are in the shape of https://github.com/tensorflow/tensorflow/issues/43014
# (`INFO:tensorflow:loss = 4.264659, step = 100 (124.394 sec)`; steps and values constructed,
# step 32000's loss a NaN); the evaluation summary is quoted as printed in
# https://github.com/tensorflow/tensor2tensor/issues/1761 (`_write_dict_to_summary`).
TF_ESTIMATOR = """\
INFO:tensorflow:loss = 1.3012, step = 31900 (124.394 sec)
INFO:tensorflow:loss = nan, step = 32000 (124.201 sec)
INFO:tensorflow:Finished evaluation at 2019-12-01-11:18:17
INFO:tensorflow:Saving dict for global step 32000: global_step = 32000, loss = 1.2495309, metrics-translate_enpl_wmt8k/targets/accuracy = 0.7340964, metrics-translate_enpl_wmt8k/targets/accuracy_per_sequence = 0.0042870035, metrics-translate_enpl_wmt8k/targets/accuracy_top5 = 0.9010577, metrics-translate_enpl_wmt8k/targets/approx_bleu_score = 0.45084754, metrics-translate_enpl_wmt8k/targets/neg_log_perplexity = -1.251, metrics-translate_enpl_wmt8k/targets/rouge_2_fscore = 0.534003, metrics-translate_enpl_wmt8k/targets/rouge_L_fscore = 0.6870632
INFO:tensorflow:loss = 1.2950, step = 32100 (124.512 sec)
"""  # noqa: E501


def test_tf_estimator_eval_dict_keeps_out_of_the_training_loss(tmp_path: Path) -> None:
    # before: the summary's `loss = 1.2495309` (the evaluation's) replaced the training NaN
    # of step 32000, its accuracy was `metrics-.../accuracy`, and `Saving dict for global
    # step` was a metric of its own
    fmt, m, _ = _stored(tmp_path, TF_ESTIMATOR)
    assert fmt == "generic_text"
    assert math.isnan(m["loss"][32000]) and m["loss"][31900] == 1.3012
    assert m["val_loss"] == {32000: 1.2495309}
    acc = "eval/metrics_translate_enpl_wmt8k/targets/accuracy"
    assert m[acc] == {32000: 0.7340964}
    assert not any(k.startswith(("metrics", "saving")) or "global_step" in k for k in m)


# ----- DeiT / MAE MetricLogger: `Test:` lines and the `* Acc@1` summary ------------------------
# Quoted as printed in https://github.com/THU-MIG/PYRA/issues/3 (DeiT's engine.py: `Test:`
# progress lines, then `* Acc@1 {top1} Acc@5 {top5} loss {loss}`); the two epoch-50 lines
# before them are constructed in the shape of its epoch-51 lines, the last with a NaN loss.
DEIT = """\
Epoch: [50]  [20/31]  eta: 0:00:03  lr: 0.000760  loss: 0.0120 (0.0150)  time: 0.3403  data: 0.2727  max mem: 5990
Epoch: [50]  [30/31]  eta: 0:00:00  lr: 0.000760  loss: nan (nan)  time: 0.3300  data: 0.2600  max mem: 5990
Test:  [90/96]  eta: 0:00:02  loss: 0.4322 (0.4569)  acc1: 87.5000 (88.1868)  acc5: 96.8750 (96.7205)  time: 0.2703  data: 0.2401  max mem: 5990
Test:  [95/96]  eta: 0:00:00  loss: 0.3713 (0.4449)  acc1: 89.0625 (88.3813)  acc5: 96.8750 (96.7790)  time: 0.2695  data: 0.2401  max mem: 5990
Test: Total time: 0:00:33 (0.3496 s / it)
* Acc@1 88.381 Acc@5 96.779 loss 0.445
Accuracy of the network on the 6085 test images: 88.4%
Max accuracy: 89.29%
Epoch: [51]  [ 0/31]  eta: 0:00:53  lr: 0.000755  loss: 0.0098 (0.0098)  time: 1.7375  data: 1.6695  max mem: 5990
Epoch: [51]  [10/31]  eta: 0:00:07  lr: 0.000755  loss: 0.0137 (0.0158)  time: 0.3403  data: 0.2727  max mem: 5990
"""  # noqa: E501


def test_deit_test_lines_keep_the_training_step_values(tmp_path: Path) -> None:
    # before: the `* Acc@1 ... loss 0.445` summary replaced the training NaN of the epoch's
    # last step (and named its top-5 accuracy `loss`), and the `Test:` lines' time, data and
    # max mem replaced the training ones of that step
    fmt, m, _ = _stored(tmp_path, DEIT)
    assert fmt == "generic_text"
    last = 49 * 31 + 30  # epoch 50's batch 30, epochs counted from 1
    assert math.isnan(m["loss"][last]) and m["loss"][last - 10] == 0.0120
    assert m["time"][last] == 0.3300 and m["data"][last] == 0.2600
    assert m["test/time"] == {last: 0.2695} and m["test/data"] == {last: 0.2401}
    # the evaluation's running averages, `(88.3813)` as its `* Acc@1 88.381` (test s40)
    assert m["test/acc1"] == {last: 88.3813} and m["test/acc5"] == {last: 96.779}
    assert m["test_loss"] == {last: 0.445}  # the summary's, after the progress lines
    assert "acc1" not in m and "acc@" not in m


# ----- fairseq: the `valid on 'valid' subset` line --------------------------------------------
# Quoted as printed in https://github.com/facebookresearch/fairseq/issues/514 (fairseq 0.6:
# `best` is the best validation loss so far).
FAIRSEQ_514 = """\
| epoch 008 | loss 6.326 | nll_loss 5.193 | ppl 36.58 | wps 12876 | ups 4.9 | wpb 2578 | bsz 108 | num_updates 21896 | lr 0.000213706 | gnorm 1.201 | clip 0% | oom 0 | wall 4634 | train_wall 4309
| epoch 008 | valid on 'valid' subset | valid_loss 6.43844 | valid_nll_loss 5.23288 | valid_ppl 37.61 | num_updates 21896 | best 6.43844
| epoch 009:   1000 / 2737 loss=6.220, nll_loss=5.070, ppl=33.60, wps=12800, ups=4.7, wpb=2568, bsz=108, num_updates=22897, lr=0.000208983, gnorm=1.242, clip=0%, oom=0, wall=4847, train_wall=4501
| epoch 009:   2000 / 2737 loss=6.234, nll_loss=5.086, ppl=33.96, wps=12811, ups=4.8, wpb=2571, bsz=108, num_updates=23897, lr=0.000204564, gnorm=1.242, clip=0%, oom=0, wall=5048, train_wall=4693
"""  # noqa: E501
# fairseq >= 0.10 (`fairseq_cli/train.py` validate(): `progress.print(stats, tag=subset,
# step=num_updates)`, its stats with the validation's wps, wpb, bsz) with
# `--validate-interval-updates`, so that the validation runs at an update `train_inner` logs:
# the lines in the shape of a GLAT run's log (`word_ins`, `length`: its loss terms), the
# update and values constructed.
FAIRSEQ_INNER = """\
2023-06-13 17:31:08 | INFO | train_inner | epoch 143:     85 / 282 loss=3.147, nll_loss=1.236, glat_accu=0.518, word_ins=3.028, length=3.071, ppl=8.86, wps=72384.3, ups=1.21, wpb=59997.9, bsz=2186.3, num_updates=40100, lr=0.000157917, gnorm=0.489, clip=0, loss_scale=32768, train_wall=48, wall=0
2023-06-13 17:31:54 | INFO | train_inner | epoch 143:    185 / 282 loss=3.153, nll_loss=1.243, glat_accu=0.508, word_ins=3.034, length=nan, ppl=8.89, wps=132396, ups=2.18, wpb=60718.4, bsz=2141.4, num_updates=40200, lr=0.00015772, gnorm=0.483, clip=0, loss_scale=32768, train_wall=46, wall=0
2023-06-13 17:32:38 | INFO | fairseq_cli.train | begin validation on "valid" subset
2023-06-13 17:32:41 | INFO | valid | epoch 143 | valid on 'valid' subset | loss 12.677 | nll_loss 11.546 | word_ins 12.459 | length 4.375 | ppl 6550.94 | bleu 29.52 | wps 88225 | wpb 21176.3 | bsz 666.3 | num_updates 40200 | best_bleu 30.53
2023-06-13 17:33:01 | INFO | train_inner | epoch 144:      3 / 282 loss=3.14, nll_loss=1.23, glat_accu=0.495, word_ins=3.023, length=3.076, ppl=8.82, wps=89307.1, ups=1.49, wpb=60051.3, bsz=2117.5, num_updates=40300, lr=0.000157524, gnorm=0.491, clip=0, loss_scale=32768, train_wall=45, wall=0
"""  # noqa: E501


def test_fairseq_valid_line_keeps_its_values_out_of_training_series(tmp_path: Path) -> None:
    # before: fairseq 0.6's `best` (a validation loss) was a metric `best`; fairseq 0.10's
    # validation wps, wpb, bsz and loss terms at update 40200 replaced the training ones
    # (the NaN `length` of the training line lost under the validation's 4.375)
    fmt, m, _ = _stored(tmp_path, FAIRSEQ_514)
    assert fmt == "generic_text"
    assert m["val/best"] == {21896: 6.43844} and "best" not in m
    # (the `| epoch 008 | loss ...` line is the epoch's averages: session 33 keeps them apart)
    assert m["val_loss"] == {21896: 6.43844} and m["epoch/wps"] == {21896: 12876}
    fmt, m, _ = _stored(tmp_path, FAIRSEQ_INNER)
    assert fmt == "generic_text"
    assert m["wps"][40200] == 132396 and m["wpb"][40200] == 60718.4 and m["bsz"][40200] == 2141.4
    assert math.isnan(m["length"][40200]) and m["word_ins"][40200] == 3.034
    assert m["val/wps"] == {40200: 88225} and m["val/bsz"] == {40200: 666.3}
    assert m["val/length"] == {40200: 4.375} and m["val/bleu"] == {40200: 29.52}
    assert m["val_loss"] == {40200: 12.677} and m["loss"][40200] == 3.153
    assert m["epoch"][40200] == 143  # the counter the line runs in, not an evaluation value


# ----- Transformer-XL: `| Eval N at step S | time: ...s | valid loss ... | valid ppl ...` ---
# Quoted as printed in https://github.com/kimiyoung/transformer-xl/issues/15.
TRANSFORMER_XL_EVAL = """\
| epoch   1 step     7800 |   7800 batches | lr 0.000249 | ms/batch 619.83 | loss  7.42 | ppl  1661.560
| epoch   1 step     8000 |   8000 batches | lr 0.000249 | ms/batch 619.85 | loss  7.43 | ppl  1689.380
----------------------------------------------------------------------------------------------------
| Eval   2 at step     8000 | time: 2484.77s | valid loss  7.39 | valid ppl  1616.071
----------------------------------------------------------------------------------------------------
| epoch   1 step     8200 |   8200 batches | lr 0.000249 | ms/batch 672.76 | loss  7.43 | ppl  1680.628
"""  # noqa: E501


def test_transformer_xl_eval_time_is_the_evaluations(tmp_path: Path) -> None:
    # before: the evaluation's wall time (2484.77 s for the whole validation) was stored as
    # `time (s)`, a training metric of step 8000
    fmt, m, _ = _stored(tmp_path, TRANSFORMER_XL_EVAL)
    assert fmt == "generic_text"
    assert m["eval/time_(s)"] == {8000: 2484.77} and "time_(s)" not in m
    assert m["val_loss"] == {8000: 7.39} and m["val_ppl"] == {8000: 1616.071}
    assert m["loss"] == {7800: 7.42, 8000: 7.43, 8200: 7.43}
