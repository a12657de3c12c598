"""Training-log styles quoted in public GitHub issues and code (session 28), one test per style.

Each fixture quotes the lines as printed where they were found (URL or source beside it).
The tests check what the ingest stores through the library path the CLI calls, and each
says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from issue_log_helpers import stored as _stored

from forensics.errors import UnknownFormatError

# ----- OLMo-core: the learning rate of each parameter group -----------------------------------
# OLMo-core's train modules record `self.trainer.record_metric(f"LR (group {group_idx})",
# new_lr, namespace="optim")` (allenai/OLMo-core, src/olmo_core/train/train_module/
# transformer/train_module.py), and its console logger prints each metric indented under the
# step line as `name=value`, like `optim/total grad norm=0.4017`; the official training
# report (src/scripts/official/README.md) plots `optim/LR (group 0)` beside `optim/LR
# (group 1)`. The values here follow that shape around a NaN.
OLMO_CORE_LR = """\
2026-08-08 12:01:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=999/2,000,epoch=0,eta=5h11m]
    optim/total grad norm=0.4017
    optim/LR (group 0)=3.0e-04
    optim/LR (group 1)=3.0e-05
    train/CE loss=6.2341
2026-08-08 12:04:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=1,000/2,000,epoch=0,eta=4h58m]
    optim/total grad norm=37.5
    optim/LR (group 0)=2.9e-04
    optim/LR (group 1)=2.9e-05
    train/CE loss=nan
"""  # noqa: E501


def test_olmo_core_learning_rate_of_the_first_group_is_the_lr(tmp_path: Path) -> None:
    # before: `(group 0)` made the index a slot and left the value without a key (`)=`):
    # "lines ignored", no learning rate at all
    fmt, m, w = _stored(tmp_path, OLMO_CORE_LR)
    assert fmt == "generic_text"
    assert m["lr"] == {999: 3.0e-04, 1000: 2.9e-04}
    assert m["optim/lr_(group_1)"] == {999: 3.0e-05, 1000: 2.9e-05}
    assert m["loss"][999] == 6.2341 and math.isnan(m["loss"][1000])
    assert not any("lines ignored" in x for x in w)


# ----- yanmtt: a bare counter and the loss ----------------------------------------------------
# prajdabre/yanmtt's pretrain_nmt.py / train_nmt.py print `print(ctr, lv)` every 10 batches.
# Quoted as printed in https://github.com/prajdabre/yanmtt/issues/7 ("Nan loss after 70K
# steps on the pre-training"):
YANMTT_NAN = """\
76930 2.6496577
76940 2.59109
76950 2.596339
76960 2.735384
76970 2.6265104
76980 nan
76990 nan
Saving the model
Loading from checkpoint
Loading from checkpoint
77000 nan
77010 nan
"""


def test_yanmtt_counter_and_loss_lines(tmp_path: Path) -> None:
    # before: no format recognised the file (two bare numbers name nothing): the NaN from
    # batch 76980 on was never read
    fmt, m, w = _stored(tmp_path, YANMTT_NAN)
    assert fmt == "generic_text"
    assert sorted(m) == ["loss"]
    assert m["loss"][76930] == 2.6496577 and m["loss"][76970] == 2.6265104
    assert [s for s, v in m["loss"].items() if math.isnan(v)] == [76980, 76990, 77000, 77010]
    assert any("print(ctr, lv)" in x for x in w)


def test_two_numbers_that_are_no_counter_and_loss_stay_unread(tmp_path: Path) -> None:
    # a counter that does not rise, or a value that is always an integer, is no such log;
    # nor are pair lines beside the records of another kind of line
    _, m, _ = _stored(tmp_path, "step 1 loss 2.5\nstep 2 loss 2.4\n10 0.5\n20 0.4\n30 0.3\n")
    assert sorted(m) == ["loss"] and sorted(m["loss"]) == [1, 2]
    records = "step 1 loss 2.5\nstep 2 loss 2.4\n"
    for pairs in ("30 2.5\n20 2.4\n10 2.3\n", "10 2\n20 4\n30 6\n"):
        _, m, _ = _stored(tmp_path, records + pairs)
        assert m == {"loss": {1: 2.5, 2: 2.4}}
        with pytest.raises(UnknownFormatError):  # alone: still no log the reader knows
            _stored(tmp_path, pairs)


# ----- IMDLBenCo: a meter printed as `[local: x | reduced: y]` ---------------------------------
# scu-zjz/IMDLBenCo's MetricLogger, quoted as printed in
# https://github.com/scu-zjz/IMDLBenCo/issues/109 ("Loss NaN Problem: SPAN, Mesorch"); the
# issue's NaN lines are not quoted here, the last line follows the same shape with a NaN.
IMDLBENCO_LOCAL_REDUCED = """\
[02:34:43.012635] Epoch: [1]  [440/460]  eta: 0:00:10  lr: 0.000098  predict_loss: [local: 0.6921 | reduced: 0.6936]  time: 0.4871  data: 0.0002  max mem: 9145
[02:34:52.256412] Epoch: [1]  [459/460]  eta: 0:00:00  lr: 0.000100  predict_loss: [local: 0.6859 | reduced: 0.6934]  time: 0.4864  data: 0.0001  max mem: 9145
[02:34:52.723614] Epoch: [1] Total time: 0:03:51 (0.5040 s / it)
[02:34:53.036030] Averaged stats: lr: 0.000100  predict_loss: [local: 0.6859 | reduced: 0.6930]
[02:34:53.037751] Auto Mixed Precision (AMP) is enabled.
[02:34:53.037870] log_dir: ./output_dir_span/
[02:34:54.773772] Epoch: [2]  [  0/460]  eta: 0:13:18  lr: 0.000100  predict_loss: [local: 0.7095 | reduced: 0.7095]  time: 1.7352  data: 0.9291  max mem: 9145
[02:35:04.905793] Epoch: [2]  [ 20/460]  eta: 0:04:08  lr: 0.000100  predict_loss: [local: 0.6847 | reduced: 0.6874]  time: 0.5065  data: 0.0002  max mem: 9145
[02:35:14.905793] Epoch: [2]  [ 40/460]  eta: 0:03:58  lr: 0.000100  predict_loss: [local: nan | reduced: nan]  time: 0.5065  data: 0.0002  max mem: 9145
"""  # noqa: E501


def test_imdlbenco_local_value_is_the_meter(tmp_path: Path) -> None:
    # before: two metrics `local` and `reduced` (the meter's name lost), no `predict_loss`
    fmt, m, _ = _stored(tmp_path, IMDLBENCO_LOCAL_REDUCED)
    assert fmt == "generic_text"
    assert "local" not in m and "reduced" not in m
    loss = m["predict_loss"]
    assert loss[440] == 0.6921 and loss[459] == 0.6859 and loss[460] == 0.7095
    assert loss[480] == 0.6847 and math.isnan(loss[500])
    assert m["lr"][440] == 0.000098


# ----- UER-py: an unnamed `N/M steps` counter -------------------------------------------------
# dbiir/UER-py's trainer prints `|{:8d}/{:8d} steps|{:8.2f} tokens/s| loss {:7.2f}| acc:
# {:3.3f}`; quoted as printed in https://github.com/dbiir/UER-py/issues/220:
UER_STEPS = """\
|    15000/  300000 steps| 45762.33 tokens/s| loss    3.85| acc: 0.405
|    20000/  300000 steps| 45768.57 tokens/s| loss    1.86| acc: 0.660
|    25000/  300000 steps| 45703.98 tokens/s| loss    0.86| acc: 0.857
|    30000/  300000 steps| 45733.30 tokens/s| loss    0.62| acc: 0.901
"""


def test_uer_py_counter_of_steps_is_the_step(tmp_path: Path) -> None:
    # before: "the log prints no step counter": the records were numbered 1, 2, 3, 4
    _, m, w = _stored(tmp_path, UER_STEPS)
    assert m["loss"] == {15000: 3.85, 20000: 1.86, 25000: 0.86, 30000: 0.62}
    assert m["tokens_per_s"][15000] == 45762.33
    assert not any("no step counter" in x for x in w)
    _, m, _ = _stored(tmp_path, UER_STEPS.replace("loss    0.62", "loss     nan"))
    assert math.isnan(m["loss"][30000])


# ----- mmcv / mmdet: a record with more than 40 fields ----------------------------------------
# swc-17/SparseDrive's mmdet log, quoted as printed in
# https://github.com/swc-17/SparseDrive/issues/92 (gradient norm growing, then NaN): one line
# per logged iteration with 40+ loss terms. (The paste cut the first line inside
# `map_loss_line_5: 0.2922`; joined here. The second line follows its shape with the NaN.)
SPARSEDRIVE_TERMS = """\
2025-03-15 16:07:01,813 - mmdet - INFO - Iter [16881/87900]	lr: 1.824e-04, eta: 23:20:12, time: 1.200, data_time: 0.030, memory: 7954, det_loss_cls_0: 0.7261, det_loss_box_0: 1.4402, det_loss_cns_0: 0.6499, det_loss_yns_0: 0.1245, det_loss_cls_1: 0.7928, det_loss_box_1: 1.1635, det_loss_cns_1: 0.6636, det_loss_yns_1: 0.1127, det_loss_cls_2: 0.7533, det_loss_box_2: 1.1061, det_loss_cns_2: 0.6544, det_loss_yns_2: 0.1073, det_loss_cls_3: 0.7185, det_loss_box_3: 1.0999, det_loss_cns_3: 0.6550, det_loss_yns_3: 0.1042, det_loss_cls_4: 0.7054, det_loss_box_4: 1.0870, det_loss_cns_4: 0.6529, det_loss_yns_4: 0.1033, det_loss_cls_5: 0.7085, det_loss_box_5: 1.0779, det_loss_cns_5: 0.6515, det_loss_yns_5: 0.1031, map_loss_cls_0: 0.2008, map_loss_line_0: 0.4378, map_loss_cls_1: 0.1556, map_loss_line_1: 0.3089, map_loss_cls_2: 0.1456, map_loss_line_2: 0.2932, map_loss_cls_3: 0.1323, map_loss_line_3: 0.2913, map_loss_cls_4: 0.1225, map_loss_line_4: 0.2913, map_loss_cls_5: 0.1193, map_loss_line_5: 0.2922, loss_dense_depth: 0.6605, loss: 19.4129, grad_norm: 62.1911
2025-03-15 16:08:01,727 - mmdet - INFO - Iter [16932/87900]	lr: 1.823e-04, eta: 23:19:10, time: 1.175, data_time: 0.032, memory: 7954, det_loss_cls_0: 0.7939, det_loss_box_0: 1.5926, det_loss_cns_0: 0.6376, det_loss_yns_0: 0.1340, det_loss_cls_1: 0.7928, det_loss_box_1: 1.1635, det_loss_cns_1: 0.6636, det_loss_yns_1: 0.1127, det_loss_cls_2: 0.7533, det_loss_box_2: 1.1061, det_loss_cns_2: 0.6544, det_loss_yns_2: 0.1073, det_loss_cls_3: 0.7185, det_loss_box_3: 1.0999, det_loss_cns_3: 0.6550, det_loss_yns_3: 0.1042, det_loss_cls_4: 0.7054, det_loss_box_4: 1.0870, det_loss_cns_4: 0.6529, det_loss_yns_4: 0.1033, det_loss_cls_5: 0.7085, det_loss_box_5: 1.0779, det_loss_cns_5: 0.6515, det_loss_yns_5: 0.1031, map_loss_cls_0: 0.2008, map_loss_line_0: 0.4378, map_loss_cls_1: 0.1556, map_loss_line_1: 0.3089, map_loss_cls_2: 0.1456, map_loss_line_2: 0.2932, map_loss_cls_3: 0.1323, map_loss_line_3: 0.2913, map_loss_cls_4: 0.1225, map_loss_line_4: 0.2913, map_loss_cls_5: 0.1193, map_loss_line_5: 0.2922, loss_dense_depth: 0.6605, loss: nan, grad_norm: nan
"""  # noqa: E501


def test_mmcv_record_with_many_loss_terms_is_no_config_dump(tmp_path: Path) -> None:
    # before: more than 40 named numbers made each line "a config dump": no format
    # recognised the file, the NaN loss at 16932 was never read
    fmt, m, _ = _stored(tmp_path, SPARSEDRIVE_TERMS)
    assert fmt == "generic_text"
    assert m["loss"][16881] == 19.4129 and math.isnan(m["loss"][16932])
    assert m["grad_norm"][16881] == 62.1911 and math.isnan(m["grad_norm"][16932])
    assert m["det_loss_cls_0"] == {16881: 0.7261, 16932: 0.7939}
