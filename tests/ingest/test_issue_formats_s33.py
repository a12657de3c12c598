"""Epoch summaries and a TensorFlow step key (session 33), one test per style.

A line that prints an epoch's averages at the update the epoch ended on used to be stored
as that update's own values when the per-iteration lines were more than a fifth as many
as the summaries (fairseq with a `--log-interval` near the epoch's length): the epoch's
average loss stood in the loss series, replacing the loss of the epoch's last update (a
NaN among them). Such values are now `epoch/<name>`; a log of epoch summaries alone keeps
its plain names (see test_issue_formats_more's fairseq 512). Each fixture quotes the
lines as printed where they were found (URL or source beside it); each test says what
the reader stored before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- fairseq 0.6: `| epoch 009 | loss ... | num_updates 24633 |` after two inner lines --------
# Quoted as printed in https://github.com/facebookresearch/fairseq/issues/514 (a 2737-batch
# epoch logged every 1000 batches: two per-iteration lines, then the epoch's averages).
FAIRSEQ_514 = """\
| epoch 009:   1000 / 2737 loss=6.220, nll_loss=5.070, ppl=33.60, wps=12800, ups=4.7, wpb=2568, bsz=108, num_updates=22897, lr=0.000208983, gnorm=1.242, clip=0%, oom=0, wall=4847, train_wall=4501
| epoch 009:   2000 / 2737 loss=6.234, nll_loss=5.086, ppl=33.96, wps=12811, ups=4.8, wpb=2571, bsz=108, num_updates=23897, lr=0.000204564, gnorm=1.242, clip=0%, oom=0, wall=5048, train_wall=4693
| epoch 009 | loss 6.233 | nll_loss 5.085 | ppl 33.94 | wps 12857 | ups 4.9 | wpb 2578 | bsz 108 | num_updates 24633 | lr 0.000201484 | gnorm 1.241 | clip 0% | oom 0 | wall 5195 | train_wall 4834
| epoch 009 | valid on 'valid' subset | valid_loss 6.37204 | valid_nll_loss 5.14732 | valid_ppl 35.44 | num_updates 24633 | best 6.37204
| epoch 010:   1000 / 2737 loss=6.144, nll_loss=4.982, ppl=31.61, wps=12673, ups=4.7, wpb=2534, bsz=106, num_updates=25634, lr=0.000197511, gnorm=1.279, clip=0%, oom=0, wall=5408, train_wall=5026
"""  # noqa: E501


def test_fairseq_epoch_average_is_not_a_loss_of_its_last_update(tmp_path: Path) -> None:
    # before: the epoch's averages were `loss`, `wps`, `wall`... of update 24633, a point of
    # the per-update loss curve that no update had
    fmt, m, w = _stored(tmp_path, FAIRSEQ_514)
    assert fmt == "generic_text"
    assert m["loss"] == {22897: 6.220, 23897: 6.234, 25634: 6.144}
    assert m["epoch/loss"] == {24633: 6.233} and m["epoch/nll_loss"] == {24633: 5.085}
    assert m["epoch/wps"] == {24633: 12857} and m["epoch/wall"] == {24633: 5195}
    assert 24633 not in m["wps"] and 24633 not in m["ppl"]
    assert m["val_loss"] == {24633: 6.37204} and m["epoch"][24633] == 9
    assert any("summarise an epoch" in x for x in w)


# ----- fairseq >= 0.10: `train | epoch 050 | loss ...` after `end of epoch 50` ----------------
# fairseq_cli/train.py logs `end of epoch N (average epoch stats below)`, then
# `progress.print(stats, tag="train", step=num_updates)`
# (https://github.com/facebookresearch/fairseq/blob/main/fairseq_cli/train.py). The last
# three lines are quoted as printed in a public fairseq experiment's README (an IWSLT'14
# baseline_train.log, found by code search); the two `train_inner` lines before them are
# constructed in their shape, the epoch's last update with a NaN loss.
FAIRSEQ_010 = """\
2021-05-07 16:10:01 | INFO | train_inner | epoch 050:    279 / 379 loss=3.951, nll_loss=2.52, ppl=5.74, wps=34010.2, ups=3.26, wpb=10436.3, bsz=421.7, num_updates=18850, lr=0.000230327, gnorm=0.617, train_wall=29, gb_free=8.9, wall=5710
2021-05-07 16:10:40 | INFO | train_inner | epoch 050:    379 / 379 loss=nan, nll_loss=2.51, ppl=5.71, wps=34122.7, ups=3.27, wpb=10420.1, bsz=422, num_updates=18950, lr=0.000229718, gnorm=0.62, train_wall=29, gb_free=8.9, wall=5739
2021-05-07 16:11:09 | INFO | fairseq_cli.train | end of epoch 50 (average epoch stats below)
2021-05-07 16:11:09 | INFO | train | epoch 050 | loss 3.942 | nll_loss 2.512 | ppl 5.71 | wps 34422 | ups 3.3 | wpb 10419.8 | bsz 422.8 | num_updates 18950 | lr 0.000229718 | gnorm 0.619 | train_wall 66 | gb_free 8.9 | wall 5740
2021-05-07 16:11:09 | INFO | fairseq_cli.train | done training in 5739.2 seconds
"""  # noqa: E501


def test_fairseq_epoch_stats_keep_the_nan_of_the_last_update(tmp_path: Path) -> None:
    # before: the epoch's average loss 3.942 replaced the NaN of update 18950 (the one
    # value that said the run diverged), and its train_wall (66 s, the epoch's) the 29 s
    fmt, m, _ = _stored(tmp_path, FAIRSEQ_010)
    assert fmt == "generic_text"
    assert math.isnan(m["loss"][18950]) and m["loss"][18850] == 3.951
    assert m["train_wall"] == {18850: 29, 18950: 29} and m["wps"][18950] == 34122.7
    assert m["epoch/loss"] == {18950: 3.942} and m["epoch/train_wall"] == {18950: 66}
    assert m["epoch/wps"] == {18950: 34422} and m["epoch/bsz"] == {18950: 422.8}


# ----- TensorFlow LoggingTensorHook: `global_steps = N, loss = X` -----------------------------
# Quoted as printed in https://github.com/tensorflow/tensorflow/issues/43014 (an Estimator's
# own `loss = ..., step = ...` beside a hook logging {"global_steps": ..., "loss": ...}).
TF_43014 = """\
INFO:tensorflow:loss = 96.96749, step = 0
INFO:tensorflow:global_steps = 0, loss = 96.96749
INFO:tensorflow:global_step/sec: 0.803899
INFO:tensorflow:loss = 4.264659, step = 100 (124.394 sec)
INFO:tensorflow:global_step/sec: 0.682575
"""
# The hook's lines alone (a run logging only through the hook): the first quoted from the
# issue above, the others constructed in its shape, the last with a NaN loss.
TF_HOOK_ONLY = """\
INFO:tensorflow:global_steps = 0, loss = 96.96749
INFO:tensorflow:global_step/sec: 0.803899
INFO:tensorflow:global_steps = 100, loss = 4.264659 (124.394 sec)
INFO:tensorflow:global_step/sec: 0.682575
INFO:tensorflow:global_steps = 200, loss = nan (146.504 sec)
"""


def test_tf_global_steps_is_the_step(tmp_path: Path) -> None:
    # before: `global_steps` was a metric of its own; with the hook's lines alone the log had
    # no step, its losses numbered 1, 2, 3 in file order
    fmt, m, _ = _stored(tmp_path, TF_43014)
    assert fmt == "generic_text"
    assert m["loss"] == {0: 96.96749, 100: 4.264659} and "global_steps" not in m
    fmt, m, w = _stored(tmp_path, TF_HOOK_ONLY)
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [0, 100, 200] and math.isnan(m["loss"][200])
    assert m["loss"][100] == 4.264659 and "global_steps" not in m
    assert not any("in file order" in x for x in w)
