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
