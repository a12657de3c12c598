"""More training-log styles quoted in public GitHub issues, one test per style.

Each fixture quotes the lines as printed in the issue or document (URL beside it; only
the padding that some tests add around them for detection is synthetic, and it says so).
The tests check what the ingest stores: the reader that claims the file, the step axis,
loss / grad norm / LR / loss scale under their canonical names, NaN kept as NaN, and
evaluation or per-epoch summary lines kept out of the training loss.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from issue_log_helpers import stored as _stored

from forensics.analyze import AnalyzeOptions, analyze
from forensics.errors import InputError
from forensics.ingest.readers.generic import read_generic
from forensics.store import open_store


def _events(tmp_path: Path, text: str) -> list[tuple[int, str]]:
    path = tmp_path / "events.log"
    path.write_text(text, encoding="utf-8")
    res = read_generic(path, text)
    return [(s, k) for s, k, _ in res.events.iter_rows()]


# ----- fairseq ------------------------------------------------------------------------------
FAIRSEQ_940 = """\
| epoch 001:    450 / 1891 loss=11.521, nll_loss=10.881, ppl=1886.05, wps=52922, ups=0.5, wpb=104928, bsz=5325, num_updates=445, lr=8.90889e-05, gnorm=1.543, clip=0%, oom=0, loss_scale=2.000, wall=882, train_wall=756
| epoch 001:    500 / 1891 loss=11.346, nll_loss=10.678, ppl=1637.83, wps=53351, ups=0.5, wpb=104872, bsz=5322, num_updates=495, lr=9.90876e-05, gnorm=1.507, clip=0%, oom=0, loss_scale=2.000, wall=973, train_wall=840
| epoch 001:    550 / 1891 loss=11.186, nll_loss=10.492, ppl=1440.01, wps=53627, ups=0.5, wpb=104800, bsz=5311, num_updates=545, lr=0.000109086, gnorm=1.469, clip=0%, oom=0, loss_scale=2.000, wall=1065, train_wall=925
| epoch 001:    600 / 1891 loss=11.039, nll_loss=10.320, ppl=1278.29, wps=53936, ups=0.5, wpb=104812, bsz=5310, num_updates=595, lr=0.000119085, gnorm=1.445, clip=0%, oom=0, loss_scale=2.000, wall=1156, train_wall=1010
| epoch 001 | valid on 'valid' subset | valid_loss 8.11425 | valid_nll_loss 6.8834 | valid_ppl 118.06 | num_updates 600
| epoch 001:    650 / 1891 loss=10.902, nll_loss=10.160, ppl=1144.39, wps=53573, ups=0.5, wpb=104904, bsz=5328, num_updates=645, lr=0.000129084, gnorm=1.419, clip=0%, oom=0, loss_scale=2.000, wall=1263, train_wall=1094
"""  # noqa: E501  https://github.com/facebookresearch/fairseq/issues/940


def test_fairseq_progress_lines_step_is_num_updates(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, FAIRSEQ_940)
    assert fmt == "generic_text"
    # the optimizer step is num_updates, not the batch counter of the epoch (450 / 1891)
    assert m["loss"] == {445: 11.521, 495: 11.346, 545: 11.186, 595: 11.039, 645: 10.902}
    assert m["grad_norm"][445] == 1.543 and m["lr"][545] == pytest.approx(0.000109086)
    assert m["loss_scale"][645] == 2.0
    assert m["val_loss"] == {600: 8.11425}  # the validation line has a step of its own


FAIRSEQ_515 = """\
| WARNING: overflow detected, setting loss scale to: 0.0625
| epoch 001:    200 / 1374 loss=14.351, ppl=20899.56, wps=49604, ups=0, wpb=277035.016, bsz=8563.074, num_updates=190, lr=4.84525e-06, gnorm=3.901, clip=0.000, oom=0.000, loss_scale=0.062, wall=1061, train_wall=945
| epoch 001:    300 / 1374 loss=13.689, ppl=13208.82, wps=51846, ups=0, wpb=277242.090, bsz=8636.772, num_updates=290, lr=7.34275e-06, gnorm=3.057, clip=0.000, oom=0.000, loss_scale=0.062, wall=1551, train_wall=1413
| WARNING: overflow detected, setting loss scale to: 0.03125
| epoch 001:    400 / 1374 loss=13.137, ppl=9007.95, wps=52932, ups=0, wpb=277361.147, bsz=8693.717, num_updates=389, lr=9.81528e-06, gnorm=2.587, clip=0.000, oom=0.000, loss_scale=0.031, wall=2038, train_wall=1880
| WARNING: overflow detected, setting loss scale to: 0.015625
| WARNING: overflow detected, setting loss scale to: 0.0078125
| WARNING: overflow detected, setting loss scale to: 0.00390625
| epoch 001:    500 / 1374 loss=12.636, ppl=6365.15, wps=53414, ups=0, wpb=277442.903, bsz=8660.477, num_updates=486, lr=1.22379e-05, gnorm=2.302, clip=0.000, oom=0.000, loss_scale=0.004, wall=2524, train_wall=2346
"""  # noqa: E501  https://github.com/facebookresearch/fairseq/issues/515


def test_fairseq_overflow_lines_count_at_the_next_record(tmp_path: Path) -> None:
    _, m, warnings = _stored(tmp_path, FAIRSEQ_515)
    assert m["loss"] == {190: 14.351, 290: 13.689, 389: 13.137, 486: 12.636}
    # an overflow is printed while a step runs: it belongs to the record after it
    assert m["overflow"] == {190: 1.0, 389: 1.0, 486: 3.0}
    assert m["loss_scale"] == {190: 0.062, 290: 0.062, 389: 0.031, 486: 0.004}  # as printed
    assert "setting_loss_scale_to" not in m
    assert any("5 loss-scaler overflow lines" in w for w in warnings)
    assert (
        _events(tmp_path, FAIRSEQ_515)
        == [(190, "overflow"), (389, "overflow")] + [(486, "overflow")] * 3
    )


FAIRSEQ_512 = """\
| epoch 027 | loss 6.343 | nll_loss 4.984 | ppl 31.65 | wps 164346 | ups 0.4 | wpb 364096 | bsz 11907 | num_updates 10198 | lr 0.000626286 | gnorm 0.390 | clip 0% | oom 0 | loss_scale 0.500 | wall 23080 | train_wall 21383
| epoch 027 | valid on 'valid' subset | valid_loss 8.30118 | valid_nll_loss 7.15366 | valid_ppl 142.39 | num_updates 10198 | best 4.46376
| WARNING: overflow detected, setting loss scale to: 0.25
| WARNING: overflow detected, setting loss scale to: 0.125
| WARNING: overflow detected, setting loss scale to: 0.0625
| WARNING: overflow detected, setting loss scale to: 0.03125
| WARNING: overflow detected, setting loss scale to: 0.015625
| WARNING: overflow detected, setting loss scale to: 0.0078125
| WARNING: overflow detected, setting loss scale to: 0.00390625
| WARNING: overflow detected, setting loss scale to: 0.001953125
| WARNING: overflow detected, setting loss scale to: 0.0009765625
| WARNING: overflow detected, setting loss scale to: 0.00048828125
| WARNING: overflow detected, setting loss scale to: 0.000244140625
| WARNING: overflow detected, setting loss scale to: 0.0001220703125
Traceback (most recent call last):
"""  # noqa: E501  https://github.com/facebookresearch/fairseq/issues/512


def test_fairseq_loss_scale_collapse_after_the_last_record(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, FAIRSEQ_512)
    assert m["loss"] == {10198: 6.343} and m["val_loss"] == {10198: 8.30118}
    # the run died during the step after 10198: that is where the collapse is stored
    assert m["overflow"] == {10199: 12.0}
    assert m["loss_scale"] == {10198: 0.5, 10199: 0.0001220703125}


FAIRSEQ_301 = """\
| epoch 010  6000 / 8223 loss=1.56 (1.46), wps=961, wpb=905, bsz=32, lr=0.001, clip=100%, gnorm=2.1214
| epoch 010  7000 / 8223 loss=0.86 (1.46), wps=961, wpb=906, bsz=32, lr=0.001, clip=100%, gnorm=2.1233
| epoch 010  8000 / 8223 loss=1.33 (1.45), wps=961, wpb=905, bsz=32, lr=0.001, clip=100%, gnorm=2.1133
| epoch 010 | train loss 1.44 | train ppl 2.72 | s/checkpoint    7747 | words/s    961 | words/batch    906 | bsz    32 | lr 0.001000 | clip 100% | gnorm 2.1113
| epoch 010 | valid on 'valid' subset  1000 / 1311 loss=1.60
| epoch 010 | valid on 'valid' subset | valid loss 1.94 | valid ppl 3.83
| epoch 011  1000 / 8223 loss=1.89 (1.38), wps=963, wpb=918, bsz=32, lr=0.001, clip=100%, gnorm=2.0860
| epoch 011  2000 / 8223 loss=1.37 (1.35), wps=962, wpb=912, bsz=32, lr=0.001, clip=100%, gnorm=2.0606
| epoch 011  3000 / 8223 loss=0.75 (1.35), wps=963, wpb=916, bsz=32, lr=0.001, clip=100%, gnorm=2.0545
"""  # noqa: E501  https://github.com/facebookresearch/fairseq/issues/301 (fairseq-py, 2018)


def test_fairseq_2018_epoch_counter_summary_and_validation(tmp_path: Path) -> None:
    _, m, warnings = _stored(tmp_path, FAIRSEQ_301)
    # no update counter: the batch counted over epochs, (epoch - 1) * 8223 + i
    assert m["loss"] == {
        9 * 8223 + 6000: 1.56,
        9 * 8223 + 7000: 0.86,
        9 * 8223 + 8000: 1.33,
        10 * 8223 + 1000: 1.89,
        10 * 8223 + 2000: 1.37,
        10 * 8223 + 3000: 0.75,
    }
    # the epoch's average and the validation pass never join the training loss
    assert m["epoch/loss"] == {9 * 8223 + 8000: 1.44}
    assert m["val_loss"] == {9 * 8223 + 8000: 1.94}
    assert any("summarise an epoch" in w for w in warnings)


# ----- MaxText ------------------------------------------------------------------------------
def test_maxtext_completed_step_lines(tmp_path: Path) -> None:
    text = (
        # https://github.com/AI-Hypercomputer/maxtext/issues/8
        "completed step: 15107, seconds: 2.167, TFLOP/s: 36.722, loss: 2.191\n"
        "completed step: 15108, seconds: 2.164, TFLOP/s: 36.771, loss: 2.173\n"
        "completed step: 15109, seconds: 2.166, TFLOP/s: 36.739, loss: 2.191\n"
    )
    fmt, m, warnings = _stored(tmp_path, text)
    assert fmt == "generic_text"
    assert m["loss"] == {15107: 2.191, 15108: 2.173, 15109: 2.191}
    assert m["tflop/s"][15108] == 36.771 and m["seconds"][15109] == 2.166
    assert "completed_step" not in m and not any("no step counter" in w for w in warnings)
    # newer MaxText: https://github.com/AI-Hypercomputer/maxtext/pull/761 (one line, and a
    # synthetic second one in the same syntax)
    line = (
        "completed step: 9, seconds: 1.341, TFLOP/s/device: 257.929, Tokens/s/device: "
        "36653.244, loss: 0.000\n"
    )
    _, m, _ = _stored(tmp_path, line + line.replace("step: 9,", "step: 10,"))
    assert m["loss"] == {9: 0.0, 10: 0.0} and m["tokens/s/device"][9] == 36653.244


# ----- MosaicML Composer / llm-foundry -----------------------------------------------------
COMPOSER_README = """\
[batch=1/100]:
         Train LanguageCrossEntropy: 10.9736
         Train Perplexity: 58312.0586
         Train loss/train/total: 10.9736
[batch=2/100]:
         Train LanguageCrossEntropy: 10.9724
         Train Perplexity: 58243.8086
         Train loss/train/total: 10.9724
[batch=3/100]:
         Train LanguageCrossEntropy: 10.9745
         Train Perplexity: 58365.8047
         Train loss/train/total: 10.9745
[batch=4/100]:
         Train LanguageCrossEntropy: 10.6459
         Train Perplexity: 42018.5508
         Train loss/train/total: 10.6459
"""  # https://github.com/mosaicml/llm-foundry/blob/main/scripts/train/README.md


def test_composer_batch_blocks(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, COMPOSER_README)
    assert fmt == "generic_text"
    assert m["loss"] == {1: 10.9736, 2: 10.9724, 3: 10.9745, 4: 10.6459}
    assert m["train_perplexity"][4] == 42018.5508


COMPOSER_EPOCH = """\
[epoch=1][batch=3/5]:
         Train time/batch: 2
         Train time/sample: 2048
         Train trainer/device_train_microbatch_size: 8
         Train loss/train/total: 8.3177
         Train metrics/train/LanguageCrossEntropy: 8.4361
         Train throughput/tokens_per_sec: 10347.9543
         Train lr-DecoupledAdamW/group0: 0.0000
[epoch=1][batch=5/5]:
         Train time/batch: 4
         Train time/sample: 4096
         Train trainer/device_train_microbatch_size: 8
         Train loss/train/total: 8.4213
         Train metrics/train/LanguageCrossEntropy: 8.4620
         Train throughput/tokens_per_sec: 20082.8418
         Train lr-DecoupledAdamW/group0: 0.0000
"""  # ROCm blog on fine-tuning MPT-30B with Composer: two blocks, some of their lines left out


def test_composer_epoch_and_batch_blocks(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, COMPOSER_EPOCH)
    assert m["loss"] == {3: 8.3177, 5: 8.4213}  # (epoch - 1) * 5 + batch
    assert m["lr"] == {3: 0.0, 5: 0.0}  # LRMonitor's lr-<optimizer>/group0
    assert m["train_time/batch"] == {3: 2.0, 5: 4.0}


# ----- tqdm progress bars: Lightning, Hugging Face Trainer, torchtune ----------------------
LIGHTNING_4225 = """\
Training: 0it [00:00, ?it/s]
Training:   0%|          | 0/18 [00:00<?, ?it/s]
Epoch 0:   0%|          | 0/18 [00:00<?, ?it/s] 
Epoch 0:   6%|▌         | 1/18 [00:08<02:29,  8.77s/it]
Epoch 0:   6%|▌         | 1/18 [00:08<02:29,  8.77s/it, loss=10.473, v_num=193315]
Epoch 0:  11%|█         | 2/18 [00:11<01:33,  5.82s/it, loss=10.473, v_num=193315]
Epoch 0:  11%|█         | 2/18 [00:11<01:33,  5.82s/it, loss=10.224, v_num=193315]
Epoch 0:  17%|█▋        | 3/18 [00:14<01:13,  4.87s/it, loss=10.224, v_num=193315]
Epoch 0:  17%|█▋        | 3/18 [00:14<01:13,  4.87s/it, loss=10.047, v_num=193315]
Epoch 0:  22%|██▏       | 4/18 [00:17<01:02,  4.47s/it, loss=10.047, v_num=193315]
Epoch 0:  22%|██▏       | 4/18 [00:17<01:02,  4.47s/it, loss=9.926, v_num=193315] 
Epoch 0:  28%|██▊       | 5/18 [00:20<00:53,  4.14s/it, loss=9.926, v_num=193315]
Epoch 0:  28%|██▊       | 5/18 [00:20<00:53,  4.14s/it, loss=9.847, v_num=193315]
"""  # noqa: W291  https://github.com/Lightning-AI/pytorch-lightning/issues/4225


def test_lightning_progress_bar(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, LIGHTNING_4225)
    assert fmt == "generic_text"
    # the bar's n/N within epoch 0 is the step; each step's last redraw wins
    assert m["loss"] == {1: 10.473, 2: 10.224, 3: 10.047, 4: 9.926, 5: 9.847}
    assert "%" not in m and not any(k.startswith("epoch/") for k in m)


def test_lightning_progress_bar_counts_over_epochs(tmp_path: Path) -> None:
    # the lines above, then two synthetic lines in their syntax for epoch 1
    text = LIGHTNING_4225 + (
        "Epoch 1:   6%|▌         | 1/18 [00:03<00:51,  3.01s/it, loss=9.512, v_num=193315]\n"
        "Epoch 1:  11%|█         | 2/18 [00:06<00:48,  3.02s/it, loss=nan, v_num=193315]\n"
    )
    _, m, _ = _stored(tmp_path, text)
    assert m["loss"][18 + 1] == 9.512 and math.isnan(m["loss"][18 + 2])


CHINESE_LLAMA_534 = """\
 12%|█▏        | 318/2724 [11:45:27<88:45:25, 132.80s/it]
 12%|█▏        | 319/2724 [11:47:40<88:43:09, 132.80s/it]
 12%|█▏        | 320/2724 [11:49:53<88:41:03, 132.80s/it]
                                                         
{'loss': 1.6693, 'learning_rate': 0.0001977758764447498, 'epoch': 0.23}

 12%|█▏        | 320/2724 [11:49:53<88:41:03, 132.80s/it]
 12%|█▏        | 321/2724 [11:52:06<88:39:38, 132.82s/it]
"""  # noqa: W291, W293  https://github.com/ymcui/Chinese-LLaMA-Alpaca/issues/534


def test_hf_trainer_bar_gives_the_dicts_step(tmp_path: Path) -> None:
    # the dict was lost before (the bars were the only records); now it is at the bar's step
    fmt, m, warnings = _stored(tmp_path, CHINESE_LLAMA_534)
    assert fmt == "generic_text"
    assert m["loss"] == {320: 1.6693}
    assert m["lr"] == {320: pytest.approx(0.0001977758764447498)}
    assert any("step of the progress bar" in w for w in warnings)


def test_hf_trainer_bar_redrawn_with_carriage_returns(tmp_path: Path) -> None:
    # the same lines as a captured stdout file holds them: tqdm redraws after `\r`
    bars = CHINESE_LLAMA_534.splitlines()
    text = "\r".join(bars[:4]) + "\r" + bars[4] + "\n\r" + "\r".join(bars[6:]) + "\n"
    _, m, _ = _stored(tmp_path, text)
    assert m["loss"] == {320: 1.6693}


def test_hf_trainer_closing_summary_is_not_a_loss(tmp_path: Path) -> None:
    # the two loss dicts: https://github.com/AnswerDotAI/ModernBERT/issues/233; the closing
    # summary is synthetic, in the syntax Trainer.train() prints it with
    text = (
        "{'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.774074342405685e-06, "
        "'epoch': 0.53}\n"
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.773696745450087e-06, 'epoch': 0.53}\n"
        "{'train_runtime': 1234.5678, 'train_samples_per_second': 12.3, "
        "'train_steps_per_second': 0.4, 'train_loss': 0.1025, 'epoch': 0.53}\n"
    )
    _, m, _ = _stored(tmp_path, text)
    assert m["loss"][1] == 0.2051 and math.isnan(m["loss"][2])  # 0.0 beside a NaN grad norm
    assert m["summary/loss"] == {2: 0.1025}  # `summary/train_loss`, canonical (s37)


def test_hf_trainer_evaluation_bar_gives_no_step(tmp_path: Path) -> None:
    # synthetic, in the Trainer's output syntax: its evaluation bar has no description
    # either, and counts eval batches; the eval dict belongs to the training step before it
    text = (
        " 18%|█▊        | 500/2724 [1:00:02<4:00:00,  1.50s/it]\n"
        "{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.18}\n"
        "  0%|          | 0/25 [00:00<?, ?it/s]\n"
        "100%|██████████| 25/25 [00:03<00:00,  8.00it/s]\n"
        "{'eval_loss': 1.3, 'eval_runtime': 3.1, 'eval_samples_per_second': 64.5, 'epoch': 0.18}\n"
        " 18%|█▊        | 501/2724 [1:00:08<4:00:00,  1.50s/it]\n"
    )
    _, m, warnings = _stored(tmp_path, text)
    assert m["loss"] == {500: 1.2345} and m["val_loss"] == {500: 1.3}
    assert set(m["s/it"]) == {500, 501} and "it/s" not in m
    assert any("an evaluation loop" in w for w in warnings)


TORCHTUNE_2620 = """\
[trainer0|0]:1|54|Loss: 1.0960569381713867:  54%|█████▍    | 55/101 [15:04<11:17, 14.73s/it]
[trainer0|0]:1|55|Loss: 1.0744975805282593:  54%|█████▍    | 55/101 [15:04<11:17, 14.73s/it][trainer0|0]:
[trainer0|0]:1|55|Loss: 1.0744975805282593:  55%|█████▌    | 56/101 [15:19<11:17, 15.06s/it]
[trainer0|0]:1|56|Loss: 1.073961615562439:  55%|█████▌    | 56/101 [15:19<11:17, 15.06s/it] [trainer0|0]:
[trainer0|0]:1|56|Loss: 1.073961615562439:  56%|█████▋    | 57/101 [15:39<12:05, 16.50s/it]
[trainer0|0]:1|57|Loss: 1.0494292974472046:  56%|█████▋    | 57/101 [15:39<12:05, 16.50s/it][trainer0|0]:
"""  # noqa: E501  https://github.com/meta-pytorch/torchtune/pull/2620


def test_torchtune_bar_description_holds_the_step(tmp_path: Path) -> None:
    fmt, m, warnings = _stored(tmp_path, TORCHTUNE_2620)
    assert fmt == "textlog"  # named pattern torchtune-bar
    assert m["loss"] == {
        54: 1.0960569381713867,
        55: 1.0744975805282593,
        56: 1.073961615562439,
        57: 1.0494292974472046,
    }
    assert m["epoch"][57] == 1.0
    assert not any("generic reader" in w for w in warnings)  # redraws are not re-read


# ----- Keras --------------------------------------------------------------------------------
KERAS_CNN_7 = """\
Epoch 1/10
9595/9595 [==============================] - 1s - loss: 0.6242 - acc: 0.6295 - val_loss: 0.5265 - val_acc: 0.7470
Epoch 2/10
9595/9595 [==============================] - 1s - loss: nan - acc: 0.4117 - val_loss: nan - val_acc: 0.0000e+00
Epoch 3/10
9595/9595 [==============================] - 1s - loss: nan - acc: 0.0000e+00 - val_loss: nan - val_acc: 0.0000e+00
"""  # noqa: E501  https://github.com/alexander-rakhlin/CNN-for-Sentence-Classification-in-Keras/issues/7


def test_keras_epoch_lines_count_batches_over_epochs(tmp_path: Path) -> None:
    fmt, m, warnings = _stored(tmp_path, KERAS_CNN_7)
    assert fmt == "generic_text"
    assert list(m["loss"]) == [9595, 2 * 9595, 3 * 9595]  # not three times step 9595
    assert m["loss"][9595] == 0.6242 and math.isnan(m["loss"][2 * 9595])
    assert m["val_loss"][9595] == 0.5265 and math.isnan(m["val_loss"][3 * 9595])
    assert any("restart after 3 `Epoch E` lines" in w for w in warnings)


def test_keras_batch_lines_of_one_epoch(tmp_path: Path) -> None:
    text = (  # https://github.com/notAI-tech/deepsegment/issues/32
        "    4/31250 [..............................] - ETA: 6:34:41 - loss: 3.4420\n"
        "    5/31250 [..............................] - ETA: 5:38:11 - loss: 3.3396\n"
        "    6/31250 [..............................] - ETA: 5:00:34 - loss: 3.1736\n"
    )
    _, m, _ = _stored(tmp_path, text)
    assert m["loss"] == {4: 3.442, 5: 3.3396, 6: 3.1736}
    assert set(m) == {"loss"}  # the ETA clock is not a metric


# ----- TensorFlow (slim, Estimator), GPT-NeoX ---------------------------------------------
TF_SLIM_6 = """\
INFO:tensorflow:global step 2454: loss = 0.6953 (1.61 sec/step)
INFO:tensorflow:global step 2455: loss = 0.6953 (1.61 sec/step)
INFO:tensorflow:global step 2456: loss = 0.6953 (1.61 sec/step)
INFO:tensorflow:global step 2457: loss = 0.6953 (1.61 sec/step)
INFO:tensorflow:global step 2458: loss = nan (2.34 sec/step)
INFO:tensorflow:global step 2459: loss = nan (1.50 sec/step)
INFO:tensorflow:global step 2460: loss = nan (1.61 sec/step)
INFO:tensorflow:global step 2461: loss = nan (1.59 sec/step)
INFO:tensorflow:global step 2462: loss = nan (1.59 sec/step)
INFO:tensorflow:global step 2463: loss = nan (1.61 sec/step)
"""  # https://github.com/ardiya/HashtagPrediction/issues/6


def test_tensorflow_slim_and_estimator_lines(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, TF_SLIM_6)
    assert m["loss"][2457] == 0.6953 and all(math.isnan(m["loss"][s]) for s in range(2458, 2464))
    text = (  # https://github.com/tensorflow/tensor2tensor/issues/106 (Estimator: step last);
        # the first line is synthetic (a log needs two records to be recognised)
        "INFO:tensorflow:loss = 1.9012, step = 31501 (182.100 sec)\n"
        "INFO:tensorflow:loss = 1.8717, step = 31601 (182.200 sec)\n"
        "INFO:tensorflow:Saving checkpoints for 31622 into /home/minjoong/t2t_train/koen_tokens"
        "_32k/transformer-transformer_big/margin/model.ckpt.\n"
    )
    _, m, _ = _stored(tmp_path, text)
    assert m["loss"] == {31501: 1.9012, 31601: 1.8717}


def test_gpt_neox_with_deepspeed_step_lines(tmp_path: Path) -> None:
    # https://github.com/EleutherAI/gpt-neox/issues/947: records start with `samples/sec:`
    text = (
        "samples/sec: 2.930 | iteration        1/   55000 | elapsed time per iteration (ms): "
        "10921.0 | learning rate: 1.212E-09 | approx flops per GPU: 9.8TFLOPS | lm_loss: "
        "2.276005E+00 | loss scale: 4096.0 | number of skipped iterations:   0 | number of nan "
        "iterations:   0 |\n"
        "after 1 iterations memory (MB) | allocated: 19278.6044921875 | max allocated: "
        "27906.3505859375 | reserved: 30812.0 | max reserved: 37120.0\n"
        "[2023-05-22 21:52:36,066] [INFO] [logging.py:96:log_dist] [Rank 0] step=2, skipped=0, "
        "lr=[2.4242424242424244e-09, 2.4242424242424244e-09], mom=[[0.9, 0.95], [0.9, 0.95]]\n"
        " samples/sec: 4.904 | iteration        2/   55000 | elapsed time per iteration (ms): "
        "6524.7 | learning rate: 2.424E-09 | approx flops per GPU: 16.4TFLOPS | lm_loss: "
        "2.175701E+00 | loss scale: 4096.0 | number of skipped iterations:   0 | number of nan "
        "iterations:   0 |\n"
    )
    fmt, m, _ = _stored(tmp_path, text)
    assert fmt == "megatron"
    assert m["loss"] == {1: 2.276005, 2: 2.175701} and m["loss_scale"][2] == 4096.0


def test_gpt_neox_deepspeed_overflow_detected_lines(tmp_path: Path) -> None:
    # records of https://github.com/EleutherAI/gpt-neox/issues/947 with, between them, the
    # overflow line of https://github.com/deepspeedai/DeepSpeed/issues/697 (printed by the
    # DeepSpeed engine GPT-NeoX runs on): put together here, each line as printed
    record = (
        "samples/sec: 2.930 | iteration        1/   55000 | elapsed time per iteration (ms): "
        "10921.0 | learning rate: 1.212E-09 | approx flops per GPU: 9.8TFLOPS | lm_loss: "
        "2.276005E+00 | loss scale: 4096.0 | number of skipped iterations:   0 | number of nan "
        "iterations:   0 |\n"
    )
    overflow = (
        "[2021-01-26 22:04:09,191] [INFO] [logging.py:60:log_dist] [Rank 0] Overflow detected. "
        "Skipping step. Attempted loss scale: 8.0, reducing to 4.0\n"
    )
    second = (
        " samples/sec: 4.904 | iteration        2/   55000 | elapsed time per iteration (ms): "
        "6524.7 | learning rate: 2.424E-09 | approx flops per GPU: 16.4TFLOPS | lm_loss: "
        "2.175701E+00 | loss scale: 4096.0 | number of skipped iterations:   0 | number of nan "
        "iterations:   0 |\n"
    )
    fmt, m, _ = _stored(tmp_path, record + overflow + second)
    assert fmt == "megatron"
    assert m["overflow"] == {2: 1.0}  # printed while step 2 ran
    assert m["loss"] == {1: 2.276005, 2: 2.175701}


# ----- bad input ----------------------------------------------------------------------------
def test_a_progress_bar_of_other_work_is_not_a_training_log(tmp_path: Path) -> None:
    # datasets' Map bar and checkpoint loading count examples and shards, not steps
    text = (
        "Map: 100%|██████████| 52002/52002 [00:12<00:00, 4204.73 examples/s]\n"
        "Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.52s/it]\n"
    )
    path = tmp_path / "prep.log"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_generic(path, text)
    msg = str(err.value)
    assert "prep.log" in msg and "no line with a step counter" in msg and "\n" not in msg


# ----- end to end: the incident is found ----------------------------------------------------
def _incidents(tmp_path: Path, text: str) -> list[dict]:
    src = tmp_path / "run" / "train.log"
    src.parent.mkdir()
    src.write_text(text, encoding="utf-8")
    db = tmp_path / "f.duckdb"
    analyze([src], out=None, db=db, options=AnalyzeOptions(replay=False, report=False))
    with open_store(db, read_only=True) as store:
        return store.query("SELECT * FROM incidents ORDER BY onset_step").to_dicts()


def test_analyze_finds_the_tensorflow_slim_nan(tmp_path: Path) -> None:
    rng = random.Random(6)  # synthetic padding before the quoted lines, same syntax
    pad = "".join(
        f"INFO:tensorflow:global step {s}: loss = "
        f"{0.6953 + 0.4 * 0.999**s + rng.gauss(0, 0.004):.4f} (1.61 sec/step)\n"
        for s in range(1, 2454)
    )
    (row,) = _incidents(tmp_path, pad + TF_SLIM_6)
    assert row["onset_step"] == 2458 and row["type"] == "divergent"


def test_analyze_finds_the_llava_spike_under_a_trainer_bar(tmp_path: Path) -> None:
    rng = random.Random(918)  # synthetic padding (bar + dict every 10 steps), same syntax
    pad = "".join(
        f" {s * 100 // 10485:2d}%|██        | {s}/10485 [1:00:00<5:00:00,  4.53s/it]\n"
        f"{{'loss': {0.6 + 1.2 * 0.9995**s + rng.gauss(0, 0.02):.4f}, 'learning_rate': 0.0002, "
        f"'epoch': {s / 10485:.2f}}}\n"
        for s in range(10, 2588, 10)
    )
    quoted = (  # https://github.com/haotian-liu/LLaVA/issues/918
        " 25%|██▍       | 2588/10485 [3:17:04<9:56:44,  4.53s/it] \n"
        "                                                        \n"
        "{'loss': 6.6635, 'learning_rate': 0.00017634569655424395, 'epoch': 0.25}\n"
    )
    rows = _incidents(tmp_path, pad + quoted)
    assert [r["onset_step"] for r in rows] == [2588]


# ----- NVIDIA DLLogger, a nanoGPT derivative -----------------------------------------------
DLL_543 = """\
DLL 2020-05-29 11:31:45.763470 - Training Epoch: 0 Training Iteration: 1787  average_loss : 2.354230079650879  step_loss : 3.146484375  learning_rate : 0.005360045911827694 
DLL 2020-05-29 11:31:45.763713 - PARAMETER checkpoint_step : 1787 
DLL 2020-05-29 13:00:26.908374 - Training Epoch: 0 Training Iteration: 1887  average_loss : 2.2108074378967286  step_loss : 1.75  learning_rate : 0.005659992521331203 
DLL 2020-05-29 13:00:26.908602 - PARAMETER checkpoint_step : 1887 
"""  # noqa: E501, W291  https://github.com/NVIDIA/DeepLearningExamples/issues/543


def test_dllogger_training_iteration(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, DLL_543)
    assert fmt == "generic_text"
    assert m["loss"] == {1787: 3.146484375, 1887: 1.75}  # step_loss; average_loss apart
    assert m["average_loss"][1887] == pytest.approx(2.2108074378967286)
    assert m["lr"][1787] == pytest.approx(0.005360045911827694)


def test_nanogpt_derivative_with_eval_lines_beside_unnamed_steps(tmp_path: Path) -> None:
    # https://github.com/datawhalechina/tiny-universe/issues/31 (the last two lines; the first
    # is synthetic, in their syntax): the eval line is a named pattern, the others generic
    text = (
        "99900 | loss 3.1021 | lr 1.000000e-05 | 2006.12ms | mfu 1.68%\n"
        "step 100000: train loss nan, val loss nan\n"
        "100000 | loss nan | lr 0.000000e+00 | 2006.12ms | mfu 1.68%\n"
    )
    fmt, m, _ = _stored(tmp_path, text)
    assert fmt == "textlog"
    assert m["loss"][99900] == 3.1021 and math.isnan(m["loss"][100000])
    assert math.isnan(m["val_loss"][100000]) and math.isnan(m["eval_train_loss"][100000])


# ----- DeepSpeed under the Hugging Face Trainer ---------------------------------------------
DS_9996 = (  # https://github.com/huggingface/transformers/issues/9996 (bar padding shortened)
    "  1%|▉                  | 6/1184 [00:21<1:09:10,  3.52s/it][2021-02-04 15:06:19,825] [INFO] "
    "[stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
    "134217728.0, reducing to 67108864.0\n"
    "  1%|█                  | 7/1184 [00:24<1:07:59,  3.47s/it][2021-02-04 15:06:23,182] [INFO] "
    "[stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
    "67108864.0, reducing to 33554432.0\n"
    "  1%|█▎                 | 8/1184 [00:28<1:07:17,  3.43s/it][2021-02-04 15:06:26,854] [INFO] "
    "[stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
    "33554432.0, reducing to 16777216.0\n"
)


def test_deepspeed_overflow_glued_to_the_trainer_bar(tmp_path: Path) -> None:
    # the logger's record follows the bar on the same line (tqdm printed no newline): the bar
    # says step 6 is done, so the overflow skipped step 7
    fmt, m, _ = _stored(tmp_path, DS_9996)
    assert fmt == "generic_text"
    assert m["overflow"] == {7: 1.0, 8: 1.0, 9: 1.0}
    assert m["loss_scale"] == {7: 67108864.0, 8: 33554432.0, 9: 16777216.0}
    assert m["s/it"] == {6: 3.52, 7: 3.47, 8: 3.43}


def _lightning1_epoch(e: int, losses: list[float], val: int, val_loss: float | None) -> str:
    """One epoch of Lightning 1.x's bars as a captured file holds them (Lightning#3866 and
    #4225's layout): the main bar counts training and validation batches together, and is
    redrawn under the `Validating:` bar (tqdm's cursor-up `ESC[A`) while it validates."""
    total, train = len(losses) + val, len(losses)
    extra = "" if val_loss is None else f", val_loss={val_loss}"
    out = []
    for i, x in enumerate(losses, 1):
        out.append(
            f"Epoch {e}:  {100 * i // total:2d}%|#         | {i}/{total} [00:0{i % 10}<00:05,"
            f"  3.1it/s, loss=4.58, v_num=0, train_loss_step={x}{extra}]"
        )
    for j in range(1, val + 1):
        out.append(
            f"\nValidating: {100 * j // val:3d}%|#         | {j}/{val} [00:00<00:00, 9.8it/s]\x1b[A"
        )
        out.append(
            f"Epoch {e}:  {100 * (train + j) // total:2d}%|#         | {train + j}/{total} "
            f"[00:05<00:00,  3.1it/s, loss=4.58, v_num=0, train_loss_step={losses[-1]}{extra}]"
        )
    return "\n".join(out) + "\n"


def test_lightning1_bar_counts_training_batches_only(tmp_path: Path) -> None:
    # before: the bar's 13 a epoch (10 training + 3 validation) were the steps: each epoch's
    # 3 validation redraws added 3 flat 'training' points (11, 12, 13) and epoch 1 began at 13
    e0 = [4.9, 4.8, 4.7, 4.6, 4.6, 4.5, 4.5, 4.4, 4.4, 4.3]
    e1 = [4.3, 4.2, 10.2, 7.9, 5.6, 4.4, 4.3, 4.2, 4.2, 4.1]
    text = _lightning1_epoch(0, e0, 3, None) + _lightning1_epoch(1, e1, 3, 4.35)
    _, m, w = _stored(tmp_path, text)
    assert m["loss"] == {i + 1: x for i, x in enumerate(e0 + e1)}  # 10 a epoch, spike at 13
    assert m["val_loss"] == {11: 4.35}  # on every bar of epoch 1: stored once, where it appears
    assert any("13 batches an epoch, 3 of them validation" in x for x in w)


LIGHTNING_SUMMARY = """\
GPU available: True, used: True
TPU available: False, using: 0 TPU cores

  | Name  | Type            | Params
------------------------------------------
0 | model | GPT2LMHeadModel | 124 M 
------------------------------------------
124 M     Trainable params
0         Non-trainable params
124 M     Total params
497.759   Total estimated model params size (MB)
"""  # noqa: W291  Lightning's ModelSummary, printed before the bars (Lightning#3866)


def test_lightning_model_summary_is_no_metric(tmp_path: Path) -> None:
    # before: its row `0 | model | GPT2LMHeadModel | 124 M` was a metric `m` = 124 at step 0
    e0 = [4.9, 4.8, 4.7, 4.6, 4.6, 4.5, 4.5, 4.4, 4.4, 4.3]
    _, m, _ = _stored(tmp_path, LIGHTNING_SUMMARY + _lightning1_epoch(0, e0, 3, None))
    assert set(m) == {"loss", "loss_(bar_running_mean)", "epoch", "it/s"}
    assert len(m["loss"]) == 10
