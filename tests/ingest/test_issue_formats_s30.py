"""Training-log styles quoted in public GitHub issues and code (session 30), one test per style.

Each fixture quotes the lines as printed where they were found (URL or source beside it).
The tests check what the ingest stores through the library path the CLI calls, and each
says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- MaxText: `eval metrics after step: N, loss=...` ----------------------------------------
# MaxText's metric logger prints `eval metrics after step: {step}, loss={eval/avg_loss:.3f},
# total_weights={eval/total_weights}` after each evaluation. The eval lines are quoted as
# printed in MaxText's pre-training tutorial
# (https://github.com/AI-Hypercomputer/maxtext/blob/main/docs/tutorials/pretraining.md, the
# `...` between its eval steps cut); the training lines of steps 1 and 9 are quoted from the
# same page, step 9's loss (printed 9.436) made a NaN, and step 4's line constructed in
# their shape.
MAXTEXT_EVAL = """\
completed step: 1, seconds: 0.287, TFLOP/s/device: 110.951, Tokens/s/device: 7131.788, total_weights: 7517, loss: 12.021
completed step: 4, seconds: 1.008, TFLOP/s/device: 31.602, Tokens/s/device: 2031.361, total_weights: 7652, loss: 10.164
Completed eval step 0
Completed eval step 9
eval metrics after step: 4, loss=9.855, total_weights=75264.0
completed step: 9, seconds: 1.010, TFLOP/s/device: 31.541, Tokens/s/device: 2027.424, total_weights: 7979, loss: nan
Completed eval step 0
Completed eval step 9
eval metrics after step: 9, loss=9.420, total_weights=75264.0
"""  # noqa: E501


def test_maxtext_eval_loss_after_its_step(tmp_path: Path) -> None:
    # before: the eval line was read as a step-less line of the training step before it: its
    # loss replaced the training loss (loss {1: 12.021, 4: 9.855, 9: 9.42}, step 9's NaN lost)
    # and `eval_metrics_after_step` was a metric
    fmt, m, _ = _stored(tmp_path, MAXTEXT_EVAL)
    assert fmt == "generic_text"
    assert m["loss"][1] == 12.021 and m["loss"][4] == 10.164 and math.isnan(m["loss"][9])
    assert m["val_loss"] == {4: 9.855, 9: 9.420}
    assert m["total_weights"][9] == 7979 and m["eval/total_weights"][9] == 75264.0
    assert not any("after" in k for k in m)


# ----- CLU's LoggingWriter (Flax examples, T5X): `[step] k=v, k=v` ----------------------------
# CLU's `LoggingWriter.write_scalars` logs `logging.info("[%d]%s %s", step, collection_str,
# ", ".join(f"{k}={v:.6g}" ...))` (google/CommonLoopUtils, clu/metric_writers/
# logging_writer.py). Quoted as printed in the Flax ImageNet example's README
# (https://github.com/google/flax/blob/main/examples/imagenet/README.md, its sample run on
# a TPU: the Markdown indent cut); step 6200's `train_loss` (printed 2.881490468978882) made
# a NaN.
FLAX_CLU = """\
I0919 14:15:19.576108 140166890789952 local.py:50] Created artifact [10] Profile of type ArtifactType.URL and value None.
I0919 14:15:27.775955 140151934879488 logging_writer.py:35] [100] steps_per_second=2.183623, train_accuracy=0.0013867187080904841, train_learning_rate=0.003165467409417033, train_loss=6.95107364654541
I0919 14:15:41.729644 140151934879488 logging_writer.py:35] [200] steps_per_second=7.168900, train_accuracy=0.007822265848517418, train_learning_rate=0.009560351260006428, train_loss=6.772485733032227
I0919 14:28:37.741533 140151934879488 logging_writer.py:35] [6100] steps_per_second=8.084761, train_accuracy=0.3821484446525574, train_learning_rate=0.3868584930896759, train_loss=2.8847763538360596
I0919 14:28:50.134743 140151934879488 logging_writer.py:35] [6200] steps_per_second=8.069629, train_accuracy=0.3834472596645355, train_learning_rate=0.3932534158229828, train_loss=nan
I0919 14:29:00.699282 140166890789952 train.py:365] eval epoch: 4, loss: 2.9286, accuracy: 37.13
I0919 14:29:00.699987 140151934879488 logging_writer.py:35] [6255] eval_accuracy=0.3712972104549408, eval_loss=2.928572654724121
I0919 14:29:00.780086 140166890789952 checkpoints.py:356] Saving checkpoint at step: 6255
"""  # noqa: E501
# T5X writes its train summaries through the same writer with `collection=train` (CLU's own
# test expects `INFO:absl:[0] collection=train a=3, b=0.15`; a T5X run's log shows
# `I0709 15:29:52.025554 12803141632 logging_writer.py:48] [0] collection=train
# timing/train_iter_warmup=1.90735e-06`, its first line here). The other lines are
# constructed in that shape with T5X's metric names around a NaN, and an evaluation's under
# T5X's collection name for it (`training_eval/<task>`).
T5X_CLU = """\
I0709 15:29:52.025439 8383831552 train.py:613] BEGIN Train loop.
I0709 15:29:52.025554 12803141632 logging_writer.py:48] [0] collection=train timing/train_iter_warmup=1.90735e-06
I0709 15:29:52.026439 8383831552 trainer.py:509] Training: step 0
I0709 15:31:10.100000 12803141632 logging_writer.py:48] [100] collection=train accuracy=0.3121, cross_ent_loss=4.2131, loss=4.2502, z_loss=0.0371
I0709 15:32:10.100000 12803141632 logging_writer.py:48] [200] collection=train accuracy=0.0012, cross_ent_loss=nan, loss=nan, z_loss=nan
I0709 15:33:10.100000 12803141632 logging_writer.py:48] [200] collection=training_eval/wmt_t2t_ende_v003 accuracy=0.4102, cross_ent_loss=3.1, loss=3.15, z_loss=0.05
INFO:absl:[300] collection=train accuracy=0.0011, cross_ent_loss=nan, loss=nan, z_loss=nan
INFO:absl:[300] collection=validation loss=2.5
"""  # noqa: E501


def test_clu_logging_writer_step_in_brackets(tmp_path: Path) -> None:
    # before: the `[100]` went with the log prefix (a logger's tag): no step, the records
    # numbered 1, 2, ... in file order, the eval line a step-less line of the record before
    fmt, m, w = _stored(tmp_path, FLAX_CLU)
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [100, 200, 6100, 6200]
    assert m["loss"][100] == 6.95107364654541 and math.isnan(m["loss"][6200])
    assert m["val_loss"][6255] == 2.928572654724121 and m["eval_accuracy"][6255] > 0.37
    assert m["steps_per_second"][6100] == 8.084761
    assert not any("in file order" in x for x in w)


def test_t5x_collection_train_step(tmp_path: Path) -> None:
    # before: `[N] collection=train` lines were step-less continuation lines of `Training:
    # step 0`: loss {0: nan} only (step 100's 4.2502 lost), `accuracy` not read, and the
    # validation line's loss dropped among them
    _, m, _ = _stored(tmp_path, T5X_CLU)
    assert m["loss"][100] == 4.2502 and math.isnan(m["loss"][200]) and math.isnan(m["loss"][300])
    assert m["cross_ent_loss"][100] == 4.2131 and m["accuracy"][300] == 0.0011
    assert m["timing/train_iter_warmup"] == {0: 1.90735e-06}
    # an evaluation's collection: never the training values of its step
    assert m["val_loss"] == {200: 3.15, 300: 2.5}
    assert m["accuracy"][200] == 0.0012 and m["eval/accuracy"][200] == 0.4102


# ----- big_vision: `[step] name = value`, one metric a line -----------------------------------
# big_vision's metric writer logs `logging.info(f"\u001b[35m[{self.step}]\u001b[0m {name} =
# {value}")` (google-research/big_vision, big_vision/utils.py, `BigVisionMetricWriter.measure`):
# the step in magenta, one metric a line. Constructed in that shape (absl's prefix, big_vision
# train.py's metric names) around a NaN; the last lines as pasted with the ESC bytes lost.
BIG_VISION = """\
I0101 10:00:00.000000 140 utils.py:502] \x1b[35m[1000]\x1b[0m l2_params = 251.84
I0101 10:00:00.000000 140 utils.py:502] \x1b[35m[1000]\x1b[0m training_loss = 2.3451
I0101 10:00:00.000000 140 utils.py:502] \x1b[35m[1000]\x1b[0m lr = 0.001
I0101 10:01:00.000000 140 utils.py:502] \x1b[35m[2000]\x1b[0m l2_params = nan
I0101 10:01:00.000000 140 utils.py:502] \x1b[35m[2000]\x1b[0m training_loss = nan
I0101 10:01:00.000000 140 utils.py:502] \x1b[35m[2000]\x1b[0m lr = 0.0009
I0101 10:02:00.000000 140 utils.py:502] [35m[3000][0m l2_params = nan
I0101 10:02:00.000000 140 utils.py:502] [35m[3000][0m training_loss = nan
I0101 10:02:00.000000 140 utils.py:502] [35m[3000][0m lr = 0.0008
"""


def test_big_vision_one_metric_a_line(tmp_path: Path) -> None:
    # before: no step (the bracket went with the prefix): `training_loss` lines numbered 1, 2,
    # 3 in file order, `l2_params` and `lr` not read
    fmt, m, w = _stored(tmp_path, BIG_VISION)
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [1000, 2000, 3000] and math.isnan(m["loss"][3000])
    assert m["loss"][1000] == 2.3451 and m["lr"] == {1000: 0.001, 2000: 0.0009, 3000: 0.0008}
    assert m["l2_params"][1000] == 251.84 and math.isnan(m["l2_params"][2000])
    assert not any("in file order" in x for x in w)


# ----- PaxML: `[PAX STATUS] step_i: N, training loss: L` --------------------------------------
# PaxML's summary handler logs `'[PAX STATUS] step_i: %d, %s loss: %s', step, self._name,
# loss` (paxml/summary_utils.py). Quoted as printed in
# https://github.com/kaixih/xla_fp8_perf_test/blob/main/README.md (its convergence test, the
# shell prompt cut); the last two lines follow their shape with NaN.
PAXML_STATUS = """\
NETWORK             BACKEND MATH SDPA           XLA_EXTRAS GPUs STEPS/SEC LOSS WALLSECS
Running direct cudnn attention
GPT5B                   XLA  fp8   FA    cublaslt,cudnn_ln    8     0.974 3.877     1719
[PAX STATUS]: Starting training loop.
[PAX STATUS] step_i: 100, training loss: 6.3584294
[PAX STATUS] step_i: 200, training loss: 5.824545
[PAX STATUS] step_i: 300, training loss: 5.382527
[PAX STATUS] step_i: 400, training loss: nan
[PAX STATUS] step_i: 500, training loss: nan
"""


def test_paxml_step_i_is_the_step(tmp_path: Path) -> None:
    # before: `step_i` was a metric and the records were numbered 1, 2, ... in file order
    fmt, m, w = _stored(tmp_path, PAXML_STATUS)
    assert fmt == "generic_text"
    assert sorted(m) == ["loss"]
    assert sorted(m["loss"]) == [100, 200, 300, 400, 500]
    assert m["loss"][100] == 6.3584294 and math.isnan(m["loss"][500])
    assert not any("in file order" in x for x in w)


# ----- XLM: `INFO - 10/04/19 14:41:25 - 0:11:11 -    1135 - ... MLM-en:  7.7416` ------------
# XLM's LogFormatter prefixes `levelname - %x %X - elapsed - `, and its trainer's print_stats
# logs `"%7i - " % n_total_iter`, `"{:7.2f} sent/s - {:8.2f} words/s - "`, the objectives'
# `'{}: {:7.4f}'` joined by ` || ` and ` - model LR: `. Quoted as printed in
# https://github.com/facebookresearch/XLM/issues/209 (`MLM-en` "is the cross-entropy loss");
# the last line's `MLM-en` (printed 7.6046) made a NaN.
XLM_STATS = """\
INFO - 10/04/19 14:41:25 - 0:11:11 -    1135 -   56.12 sent/s -  2143.80 words/s - MLM-en:  7.7416 -  - model LR: 3.8795e-06
INFO - 10/04/19 14:41:27 - 0:11:14 -    1140 -   56.10 sent/s -  2092.52 words/s - MLM-en:  7.6028 -  - model LR: 3.8962e-06
INFO - 10/04/19 14:41:30 - 0:11:17 -    1145 -   55.89 sent/s -  2171.22 words/s - MLM-en:  7.5921 -  - model LR: 3.9129e-06
INFO - 10/04/19 14:41:33 - 0:11:20 -    1150 -   55.94 sent/s -  2176.00 words/s - MLM-en:     nan -  - model LR: 3.9295e-06
"""  # noqa: E501


def test_xlm_iteration_count_after_its_clock(tmp_path: Path) -> None:
    # before: the `10/04/19 14:41:25 - 0:11:11 -` stamp stayed in the line, its numbers before
    # the iteration count: no step, no format recognised the file (the NaN never read)
    fmt, m, w = _stored(tmp_path, XLM_STATS)
    assert fmt == "generic_text"
    assert sorted(m["mlm_en"]) == [1135, 1140, 1145, 1150]
    assert m["mlm_en"][1135] == 7.7416 and math.isnan(m["mlm_en"][1150])
    assert m["lr"][1150] == 3.9295e-06
    assert m["sent/s"][1135] == 56.12 and m["words/s"][1135] == 2143.80  # each under its unit
    assert not any("in file order" in x for x in w)


# ----- Transformer-XL: `| Eval  12 at step    48000 | ... | valid loss  4.16 |` --------------
# Transformer-XL's PyTorch train.py prints its evaluations as `| Eval {:3d} at step {:>8d} |
# time: {:5.2f}s | valid loss {:5.2f} | valid ppl {:9.3f}` between its `| epoch ... step ...`
# training lines. Quoted as printed in https://github.com/kimiyoung/transformer-xl/issues/69
# (its ruler lines cut to 40 dashes); the last line follows their shape with a NaN.
TRANSFORMER_XL = """\
----------------------------------------
| Eval  12 at step    48000 | time: 5132.39s | valid loss  4.16 | valid ppl    64.240
----------------------------------------
| epoch   1 step    48200 |  48200 batches | lr 0.000244 | ms/batch 1410.03 | loss  4.13 | ppl    61.889
| epoch   1 step    48400 |  48400 batches | lr 0.000244 | ms/batch 1294.38 | loss  4.14 | ppl    62.738
| epoch   1 step    48600 |  48600 batches | lr 0.000244 | ms/batch 1266.15 | loss   nan | ppl       nan
"""  # noqa: E501


def test_transformer_xl_eval_line_names_its_split(tmp_path: Path) -> None:
    # before: the eval's loss was a metric `eval_valid_loss` and its count of evaluations (12)
    # a metric `eval`; `valid ppl` no validation perplexity
    fmt, m, _ = _stored(tmp_path, TRANSFORMER_XL)
    assert fmt == "generic_text"
    assert m["val_loss"] == {48000: 4.16} and m["val_ppl"] == {48000: 64.240}
    assert m["loss"][48200] == 4.13 and math.isnan(m["loss"][48600])
    assert "eval" not in m and not any(k.startswith("eval_") for k in m)


# ----- DeepSpeed-Chat / InstructLab: every rank prints its own loss ---------------------------
# DeepSpeed-Chat's step-1/step-2 main.py (`if args.print_loss:`) and InstructLab's training
# print `f"Epoch: {epoch}, Step: {step}, Rank: {torch.distributed.get_rank()}, loss = {loss}"`
# on every rank. The step-1 lines are quoted as an 8-GPU InstructLab run printed them, in a
# public RHEL AI walkthrough's log (the index that holds the copy names no repository; the
# ranks 2, 3 and 6 lines there are glued to one another and left out); the step-2 lines are
# constructed in that shape, rank 3 with a NaN.
PER_RANK_LOSS = """\
Epoch: 0, Step: 1, Rank: 1, loss = 2.484375
Epoch: 0, Step: 1, Rank: 7, loss = 2.59375
Epoch: 0, Step: 1, Rank: 0, loss = 2.21875
Epoch: 0, Step: 1, Rank: 4, loss = 2.5625
Epoch: 0, Step: 1, Rank: 5, loss = 2.703125
Epoch: 0, Step: 2, Rank: 3, loss = nan
Epoch: 0, Step: 2, Rank: 0, loss = 2.359375
Epoch: 0, Step: 2, Rank: 1, loss = 2.4375
"""


def test_each_ranks_loss_keeps_its_rank(tmp_path: Path) -> None:
    # before: the ranks' lines replaced one another at a step, the last printed kept
    # (loss {1: 2.703125 (rank 5), 2: 2.4375 (rank 1)}: rank 3's NaN lost) and `rank` a metric
    fmt, m, w = _stored(tmp_path, PER_RANK_LOSS)
    assert fmt == "generic_text"
    assert m["loss"] == {1: 2.21875, 2: 2.359375}  # rank 0's
    assert m["loss/rank5"] == {1: 2.703125} and m["loss/rank1"] == {1: 2.484375, 2: 2.4375}
    assert math.isnan(m["loss/rank3"][2])
    assert "rank" not in m and m["epoch"] == {1: 0.0, 2: 0.0}
    assert any("printed by 6 ranks" in x for x in w)
    # one rank printing: no renaming, and its rank is no metric
    one = "Epoch: 0, Step: 10, Rank: 0, loss = 2.3456\nEpoch: 0, Step: 11, Rank: 0, loss = nan\n"
    _, m, _ = _stored(tmp_path, one)
    assert sorted(m) == ["epoch", "loss"] and math.isnan(m["loss"][11])


# ----- Composer: an evaluation's block under `[Eval batch=N/M] Eval on eval data:` -------------
# Composer's ConsoleLogger prints a progress line, then `\n\t {prefix}{name}: {value}` per
# metric (composer/loggers/console_logger.py `log_to_console`, prefix `Train ` or `Eval `),
# the evaluation's progress line `[Eval batch=N/M] Eval on <label> data`. The training blocks
# follow llm-foundry's README (scripts/train/README.md); the evaluation block and the NaN are
# constructed in that shape.
COMPOSER_EVAL = """\
[batch=99/1000]:
\t Train time/batch: 98
\t Train loss/train/total: 2.3410
[batch=100/1000]:
\t Train time/batch: 99
\t Train loss/train/total: nan
[Eval batch=1/10] Eval on eval data
[Eval batch=10/10] Eval on eval data:
\t Eval metrics/eval/LanguagePerplexity: nan
\t Eval metrics/eval/LanguageCrossEntropy: nan
[batch=101/1000]:
\t Train time/batch: 100
\t Train loss/train/total: nan
"""


def test_composer_eval_cross_entropy_is_kept(tmp_path: Path) -> None:
    # before: the eval's `LanguageCrossEntropy` line was taken for the wrapped tail of a
    # record (indented, after the `[Eval batch=...]` line) and dropped, NaN and all
    _, m, _ = _stored(tmp_path, COMPOSER_EVAL)
    assert math.isnan(m["eval_metrics/eval/languagecrossentropy"][100])
    assert math.isnan(m["eval_metrics/eval/languageperplexity"][100])
    assert m["loss"][99] == 2.3410 and math.isnan(m["loss"][101])
