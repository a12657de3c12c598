"""Training-log styles quoted in public GitHub issues and code (session 29), one test per style.

Each fixture quotes the lines as printed where they were found (URL or source beside it).
The tests check what the ingest stores through the library path the CLI calls, and each
says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- PaddlePaddle v2: `Pass N, Batch M, Cost C` and `Test with Pass N, Cost C` ------------
# The v2 event handler prints `"Pass %d, Batch %d, Cost %f, %s" % (event.pass_id,
# event.batch_id, event.cost, event.metrics)` with the batch counted within the pass, and
# `Test with Pass %d, Cost %f, %s` after each pass. Quoted as printed in
# https://github.com/PaddlePaddle/Paddle/issues/5473 (the dots are v1's `--dot_period`
# progress); the last line follows their shape with the `Cost nan` of
# https://github.com/PaddlePaddle/Paddle/issues/3118.
PADDLE_V2_PASSES = """\
Pass 0, Batch 0, Cost 2.370898, {'classification_error_evaluator': 0.890625}
...................................................................................................
Pass 0, Batch 100, Cost 2.261713, {'classification_error_evaluator': 0.8359375}
...................................................................................................
Pass 0, Batch 200, Cost 1.884562, {'classification_error_evaluator': 0.7421875}
...................................................................................................
Pass 0, Batch 300, Cost 1.898232, {'classification_error_evaluator': 0.7265625}
..........................................................................................
Pass 1, Batch 0, Cost 1.824807, {'classification_error_evaluator': 0.734375}
...................................................................................................
Pass 1, Batch 100, Cost 1.737753, {'classification_error_evaluator': 0.7265625}
...................................................................................................
Pass 1, Batch 200, Cost 1.686236, {'classification_error_evaluator': 0.703125}
...................................................................................................
Pass 1, Batch 300, Cost nan, {'classification_error_evaluator': 0.703125}
"""
# Quoted as printed in https://github.com/PaddlePaddle/book/issues/365 (every batch printed,
# then the pass's test); the pass-1 lines follow their shape with a NaN.
PADDLE_V2_TEST = """\
Pass 0, Batch 466, Cost 0.126535, {'classification_error_evaluator': 0.0234375}
Pass 0, Batch 467, Cost 0.032776, {'classification_error_evaluator': 0.0234375}
Pass 0, Batch 468, Cost 0.064163, {'classification_error_evaluator': 0.03125}
Test with Pass 0, Cost 0.068953, {'classification_error_evaluator': 0.0228000003}
Pass 1, Batch 0, Cost 0.052311, {'classification_error_evaluator': 0.015625}
Pass 1, Batch 1, Cost nan, {'classification_error_evaluator': 0.9}
Test with Pass 1, Cost nan, {'classification_error_evaluator': 0.9}
"""
# PaddlePaddle v1's trainer glues its next line to the dots, as quoted in
# https://github.com/PaddlePaddle/Paddle/issues/3118 (the paste's editor line numbers off; the
# later lines follow the first's shape)
PADDLE_V1_DOTS = """\
I0730 02:43:08.587280    20 GradientMachine.cpp:92] Init parameters done.
................................................................................Pass      0, Batch 500, Cost nan, time 98.470099926 s
..........................................................................................Pass      0, Batch 1000, Cost nan, time 97.913250923 s
"""  # noqa: E501


def test_paddle_v2_batches_count_over_passes(tmp_path: Path) -> None:
    # before: no step counter, records numbered 1, 2, ... in file order; `pass` and `batch`
    # stored as metrics
    fmt, m, w = _stored(tmp_path, PADDLE_V2_PASSES)
    assert fmt == "generic_text"
    assert sorted(m) == ["classification_error_evaluator", "epoch", "loss"]
    loss = m["loss"]
    assert loss[0] == 2.370898 and loss[300] == 1.898232  # pass 0: batches 0-300, 400 a pass
    assert loss[400] == 1.824807 and loss[600] == 1.686236 and math.isnan(loss[700])
    assert m["epoch"][300] == 0 and m["epoch"][400] == 1
    assert not any("in file order" in x for x in w)


def test_paddle_v2_test_cost_is_no_training_loss(tmp_path: Path) -> None:
    # before: the Test line's cost landed in `loss` (records numbered in file order) and
    # `test_with_pass` was a metric
    _, m, _ = _stored(tmp_path, PADDLE_V2_TEST)
    loss = m["loss"]
    assert sorted(loss) == [466, 467, 468, 469, 470]  # 469 batches a pass (0 to 468)
    assert loss[468] == 0.064163 and loss[469] == 0.052311 and math.isnan(loss[470])
    assert m["test_loss"][468] == 0.068953 and math.isnan(m["test_loss"][470])
    assert m["classification_error_evaluator"][468] == 0.03125  # not the test's 0.0228
    assert m["test/classification_error_evaluator"][468] == 0.0228000003
    assert not any("pass" in k for k in m)


def test_paddle_v1_line_after_its_progress_dots(tmp_path: Path) -> None:
    # before: the dots were part of the first key: no format recognised the file, the NaN
    # costs were never read
    fmt, m, _ = _stored(tmp_path, PADDLE_V1_DOTS)
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [500, 1000] and all(map(math.isnan, m["loss"].values()))
    assert m["time"][500] == 98.470099926


# ----- bts: a header of slash-joined counter names, then their values ------------------------
# cleinc/bts prints `[epoch][s/s_per_e/gs]: [{}][{}/{}/{}], lr: {:.12f}, loss: {:.12f}` (the
# epoch, the step within it, the steps per epoch, the global step). Quoted as printed in
# https://github.com/cleinc/bts/issues/104 (the paste's line numbers off); the last line
# follows their shape with the NaN of https://github.com/cleinc/bts/issues/36
# (`[epoch][s/s_per_e/gs]: [1][1608/5790/7398], lr: 0.000097927423, loss: nan`).
BTS_HEADER = """\
[epoch][s/s_per_e/gs]: [4][2564/6058/26796], lr: 0.000092801574, loss: 0.587257266045
[epoch][s/s_per_e/gs]: [4][2565/6058/26797], lr: 0.000092801304, loss: 0.969502031803
[epoch][s/s_per_e/gs]: [4][2566/6058/26798], lr: 0.000092801034, loss: 0.852333068848
[epoch][s/s_per_e/gs]: [4][2567/6058/26799], lr: 0.000092800764, loss: 0.468196690083
[epoch][s/s_per_e/gs]: [4][2568/6058/26800], lr: 0.000092800494, loss: 0.398437529802
bts_nyu_v2_pytorch_test
GPU: 0 | examples/s: 1.30 | loss: 0.39844 | var sum: -8274.029 avg: -36.449 | time elapsed: 6.43h | time left: 66.27h
[epoch][s/s_per_e/gs]: [4][2569/6058/26801], lr: 0.000092800224, loss: 0.396373450756
[epoch][s/s_per_e/gs]: [4][2570/6058/26802], lr: 0.000092799954, loss: 0.725467324257
[epoch][s/s_per_e/gs]: [4][2571/6058/26803], lr: 0.000092799685, loss: nan
"""  # noqa: E501


def test_bts_global_step_of_its_counter_header(tmp_path: Path) -> None:
    # before: records numbered 1, 2, ... in file order, the epoch stored as `s/s_per_e/gs`
    fmt, m, w = _stored(tmp_path, BTS_HEADER)
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == list(range(26796, 26804))
    assert m["loss"][26796] == 0.587257266045 and math.isnan(m["loss"][26803])
    assert m["lr"][26801] == 0.000092800224
    assert set(m["epoch"].values()) == {4.0}
    assert not any("/" in k and k.startswith("s") for k in m)
    assert not any("in file order" in x for x in w)


# ----- OLMo-core: the ETA in the step line -----------------------------------------------------
# The console logger's `[step=1,000/2,000,epoch=0,eta=5h11m]` (the shape of session 27's
# fixture: public log parsers of OLMo-core runs and a test fixture quote it), with the
# indented metrics under it; the values follow that shape around a NaN.
OLMO_CORE_ETA = """\
2026-08-08 12:01:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=999/2,000,epoch=0,eta=5h11m]
    train/CE loss=6.2341
2026-08-08 12:04:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=1,000/2,000,epoch=0,eta=4h58m]
    train/CE loss=nan
2026-08-08 12:05:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=1,001/2,000,epoch=0,eta=4h57m]
    train/CE loss=nan
2026-08-08 12:06:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=1,002/2,000,epoch=0,eta=57m12s]
    train/CE loss=nan
"""  # noqa: E501


def test_olmo_core_eta_is_no_metric(tmp_path: Path) -> None:
    # before: `eta` stored as a metric (5, 4, 4, 57: the hours or minutes before the glued
    # rest), and every minute of it made a kind of line of its own (four templates here)
    _, m, w = _stored(tmp_path, OLMO_CORE_ETA)
    assert "eta" not in m and not any(k.startswith("eta") for k in m)
    assert sorted(m["loss"]) == [999, 1000, 1001, 1002] and math.isnan(m["loss"][1002])
    assert any("from 3 lines like '[step=<step>/#,epoch=<epoch>,eta=#h~]'" in x for x in w)


def test_bts_time_left_is_no_metric(tmp_path: Path) -> None:
    # before: bts's `time left: 66.27h` was a metric `time_left_(h)`
    _, m, _ = _stored(tmp_path, BTS_HEADER)
    assert not any("left" in k for k in m)


# ----- PccAI: batch counters that restart under a `Training at epoch E` line -----------------
# Quoted as printed in https://github.com/InterDigitalInc/PccAI/issues/1 ("NaN during training
# of example model"); the first line is constructed in the shape of the issue's own
# `Training at epoch 9 ...` line (the paste shows epoch 8's header further up).
PCCAI_EPOCHS = """\
[2023-03-10 19:57:38,241] Training at epoch 8 (total 8) with lr 0.0008 and aux_lr 0.005
[2023-03-10 20:01:35,500]     batch count: 280/308, iter: 280, bpp_loss_y: 0.012437, bpp_loss: 0.012437, xyz_loss: 0.077088, loss: 0.089525, aux_loss: 164.087860
[2023-03-10 20:01:37,410]     batch count: 300/308, iter: 300, bpp_loss_y: 0.012863, bpp_loss: 0.012863, xyz_loss: 0.075995, loss: 0.088858, aux_loss: 142.232620
[2023-03-10 20:01:37,997] Epoch: 8/8 --- time: 1375.538080, lr: 0.000800, avg_bpp_loss_y: 0.012987, avg_bpp_loss: 0.012987, avg_xyz_loss: 0.078155, avg_loss: 0.091141

[2023-03-10 20:01:38,651] Current checkpoint saved to results/train_mdlnet/epoch_8.pth.

[2023-03-10 20:01:38,652] Training at epoch 9 (total 9) with lr 0.0008 and aux_lr 0.005
[2023-03-10 20:01:38,830]     batch count: 0/308, iter: 0, bpp_loss_y: 0.012501, bpp_loss: 0.012501, xyz_loss: 0.080857, loss: 0.093358, aux_loss: 136.108994
[2023-03-10 20:01:40,742]     batch count: 20/308, iter: 20, bpp_loss_y: 0.013673, bpp_loss: 0.013673, xyz_loss: 0.078493, loss: 0.092165, aux_loss: 119.515297
[2023-03-10 20:01:42,653]     batch count: 40/308, iter: 40, bpp_loss_y: 0.012228, bpp_loss: 0.012228, xyz_loss: 0.078756, loss: 0.090984, aux_loss: 107.893112
[2023-03-10 20:01:44,570]     batch count: 60/308, iter: 60, bpp_loss_y: nan, bpp_loss: nan, xyz_loss: nan, loss: nan, aux_loss: nan
"""  # noqa: E501


def test_pccai_batches_count_over_epochs(tmp_path: Path) -> None:
    # before: steps 280, 300 then 0, 20, 40, 60 again (every epoch on the first one's steps,
    # sorted into one another), and `batch_count` stored as a metric
    fmt, m, w = _stored(tmp_path, PCCAI_EPOCHS)
    assert fmt == "generic_text"
    loss = m["loss"]
    assert sorted(loss) == [
        7 * 308 + 280,
        7 * 308 + 300,
        8 * 308,
        8 * 308 + 20,
        8 * 308 + 40,
        8 * 308 + 60,
    ]
    assert loss[7 * 308 + 300] == 0.088858 and loss[8 * 308] == 0.093358
    assert math.isnan(loss[8 * 308 + 60]) and math.isnan(m["aux_loss"][8 * 308 + 60])
    assert "batch_count" not in m
    assert any("restart after 2" in x for x in w)


# ----- Learning-to-See-in-the-Dark: `epoch batch Loss=... Time=...` ---------------------------
# cchen156/Learning-to-See-in-the-Dark's train_Sony.py prints `print("%d %d Loss=%.3f
# Time=%.3f" % (epoch, cnt, ...))`, `cnt` counting the images of the epoch. Quoted as
# printed in https://github.com/cchen156/Learning-to-See-in-the-Dark/issues/117:
SID_EPOCH_BATCH = """\
333 154 Loss=nan Time=0.040
333 155 Loss=nan Time=0.041
333 156 Loss=nan Time=0.043
333 157 Loss=nan Time=0.036
333 158 Loss=nan Time=0.042
333 159 Loss=nan Time=0.040
333 160 Loss=nan Time=0.036
333 161 Loss=nan Time=0.042
334 1 Loss=nan Time=0.044
334 2 Loss=nan Time=0.042
334 3 Loss=nan Time=0.036
"""


def test_leading_epoch_and_batch_of_a_record(tmp_path: Path) -> None:
    # before: the epoch was the step: steps 333 and 334 only, every line of an epoch on one
    # step and all but its last lost (11 NaN losses stored as 2)
    fmt, m, _ = _stored(tmp_path, SID_EPOCH_BATCH)
    assert fmt == "generic_text"
    first = 332 * 161  # 161 images an epoch, read off the counts of epoch 333
    steps = [first + i for i in range(154, 162)] + [first + 161 + i for i in (1, 2, 3)]
    assert sorted(m["loss"]) == steps and all(map(math.isnan, m["loss"].values()))
    assert m["time"][first + 154] == 0.040 and m["epoch"][first + 161 + 3] == 334
    # a first number that rises on every line stays the step
    _, m, _ = _stored(tmp_path, "100 3 Loss=2.5 Time=0.1\n200 3 Loss=2.4 Time=0.1\n")
    assert m["loss"] == {100: 2.5, 200: 2.4}


# ----- epfLLM/Megatron-LLM: `Bad grad_norm detected` before a skipped iteration --------------
# Quoted as printed in https://github.com/epfLLM/Megatron-LLM/pull/34 ("Improve NaN detection
# by checking `grad_norm`", its example log of a NaN handled); the warning line's trailing
# blanks cut.
MEGATRON_LLM_BAD_NORM = """\
 iteration     3633/    8000 | consumed samples:       232512 | elapsed time per iteration (ms): 6956.6 | learning rate: 6.245E-06 | global batch size:    64 | loss scale: 1.0 | grad norm: 0.794 | number of skipped iterations:   0 | number of nan iterations:   0 |
***WARNING*** Bad grad_norm detected (grad_norm=nan)
 iteration     3634/    8000 | consumed samples:       232576 | elapsed time per iteration (ms): 8295.0 | learning rate: 6.245E-06 | global batch size:    64 | loss scale: 1.0 | number of skipped iterations:   1 |
"""  # noqa: E501


def test_megatron_llm_bad_grad_norm_is_the_next_steps_norm(tmp_path: Path) -> None:
    # before: the warning was not read: grad_norm {3633: 0.794} only, the NaN lost
    fmt, m, _ = _stored(tmp_path, MEGATRON_LLM_BAD_NORM)
    assert fmt == "megatron"
    assert m["grad_norm"][3633] == 0.794 and math.isnan(m["grad_norm"][3634])
    assert m["skipped_iters"] == {3633: 0.0, 3634: 1.0}
    inf = MEGATRON_LLM_BAD_NORM.replace("grad_norm=nan", "grad_norm=inf")
    _, m, _ = _stored(tmp_path, inf)
    assert m["grad_norm"][3634] == math.inf


# ----- cellpose: one line every 10th epoch, its test loss named after the loss ---------------
# Quoted as printed in https://github.com/MouseLand/cellpose/issues/594 (cellpose's
# `Epoch %d, Time %4.1fs, Loss %2.4f, Loss Test %2.4f, LR %2.4f`, logged at epoch 5 and every
# 10th); the last line follows their shape with a NaN.
CELLPOSE_EPOCHS = """\
2022-01-05 21:36:32,809 [INFO] Epoch 190, Time 43354.3s, Loss 0.6758, Loss Test 0.3793, LR 0.2000
2022-01-05 22:14:13,626 [INFO] Epoch 200, Time 45615.1s, Loss 0.6738, Loss Test 0.3603, LR 0.2000
2022-01-05 22:51:54,626 [INFO] Epoch 210, Time 47875.1s, Loss nan, Loss Test nan, LR 0.2000
"""  # noqa: E501


def test_cellpose_epochs_every_tenth_and_its_test_loss(tmp_path: Path) -> None:
    # before: records numbered 1, 2, 3 in file order (the epoch rose by 10, not 1) and the
    # test loss a metric `loss_test` of its own
    fmt, m, w = _stored(tmp_path, CELLPOSE_EPOCHS)
    assert fmt == "generic_text"
    assert m["loss"][190] == 0.6758 and math.isnan(m["loss"][210])
    assert m["test_loss"][200] == 0.3603 and math.isnan(m["test_loss"][210])
    assert "loss_test" not in m and "epoch" not in m
    assert not any("in file order" in x for x in w)
    # an epoch that goes back is no step (a restart, or no epoch counter)
    _, m, w = _stored(tmp_path, "Epoch 20, Loss 0.5\nEpoch 10, Loss 0.4\nEpoch 30, Loss 0.3\n")
    assert sorted(m["loss"]) == [1, 2, 3] and any("in file order" in x for x in w)
