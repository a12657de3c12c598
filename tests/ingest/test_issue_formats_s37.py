"""Logs pasted into issues around a loss spike or a NaN (session 37): fixes of the generic
reader's names and units, one test per defect.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it; a fixture says so where lines are constructed in the shape of quoted ones); each test
says what the reader stored before where it stored something wrong, and stays a
regression test where it stored the log right already.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from issue_log_helpers import stored as _stored
from test_issue_formats_s36 import TRL_DPO_570

# ----- ms-swift: a printed dict wrapped by the terminal, its lines without `{` ---------------
# The dicts are quoted as printed in https://github.com/modelscope/ms-swift/issues/4146 (DPO);
# the `Train:` bar before each is constructed in ms-swift's shape (its values from the
# dict's counter and times), and each line is cut at 200 columns as a terminal wraps it (as
# pasted in a public rl-swarm (TRL GRPO) log found by code search, whose `'comple` / `tions/
# max_terminated_length'` lines are cut so).
MS_SWIFT_4146_WRAPPED = """\
Train:  32%|███▏      | 56/176 [1:22:38<2:57:04, 95.01s/it]{'loss': 0.23179118, 'grad_norm': 0.65250963, 'learning_rate': 8.6e-07, 'memory(GiB)': 63.16, 'train_speed(iter/s)': 0.01119, 'rewards/chosen
': 4.46875, 'rewards/rejected': -4.125, 'rewards/accuracies': 1.0, 'rewards/margins': 8.5625, 'logps/chosen': -189.0, 'logps/rejected': -221.0, 'logits/chosen': 0.83984375, 'logits/rejected': 0.867187
5, 'nll_loss': 0.921875, 'epoch': 0.64, 'global_step/max_steps': '56/176', 'percentage': '31.82%', 'elapsed_time': '1h 22m 38s', 'remaining_time': '2h 57m 4s'}
Train:  32%|███▏      | 57/176 [1:24:14<2:55:51, 95.01s/it]{'loss': 0.21862793, 'grad_norm': 0.73740131, 'learning_rate': 8.6e-07, 'memory(GiB)': 63.16, 'train_speed(iter/s)': 0.011176, 'rewards/chose
n': 4.625, 'rewards/rejected': -4.65625, 'rewards/accuracies': 1.0, 'rewards/margins': 9.25, 'logps/chosen': -181.0, 'logps/rejected': -221.0, 'logits/chosen': 0.86328125, 'logits/rejected': 0.890625,
 'nll_loss': 0.87109375, 'epoch': 0.65, 'global_step/max_steps': '57/176', 'percentage': '32.39%', 'elapsed_time': '1h 24m 14s', 'remaining_time': '2h 55m 51s'}
"""  # noqa: E501

# Lines quoted as printed in that rl-swarm log (found by code search): one bar redrawn
# after another's on a line, a training dict glued after it (its first line only).
TQDM_REDRAWN = """\
  5%|██▍                                             | 1/20 [05:56<1:52:59, 356.80s/it]{'loss': 0.0578, 'grad_norm': 5.026931285858154, 'learning_rate': 5e-07, 'num_tokens': 7189.0}
 20%|██████████████████████▍                                                                   25%|██████████████▎                                          | 5/20 [17:00<54:46, 219.07s/it]{'loss': 0.1152, 'grad_norm': 8.400693893432617, 'learning_rate': 4.472851273490984e-07, 'num_tokens': 21834.0}
"""  # noqa: E501

_UNIT_FRAGMENTS = {"s", "m", "h", "it", "ms", "%", "elapsed_time_(h)"}


def test_ms_swift_wrapped_dict_times_are_text_not_metrics(tmp_path: Path) -> None:
    # before: the line that holds the dict's tail has no `{`, so its quoted times were
    # values: metrics `elapsed_time_(h)` (1.0), `m` (57, 55) and `s` (4, 51), and the
    # quoted `'percentage': '31.82%'` a metric `percentage`
    fmt, m, _ = _stored(tmp_path, MS_SWIFT_4146_WRAPPED)
    assert fmt == "generic_text"
    assert not _UNIT_FRAGMENTS & set(m) and "percentage" not in m
    assert m["loss"] == {56: 0.23179118, 57: 0.21862793}
    assert m["nll_loss"] == {56: 0.921875, 57: 0.87109375}
    assert m["epoch"] == {56: 0.64, 57: 0.65}
    assert m["s/it"] == {56: 95.01, 57: 95.01}  # tqdm's rate, kept as in every bar


def test_a_bar_redrawn_after_another_leaves_no_percent_metric(tmp_path: Path) -> None:
    # before: the first bar's `20%|███...` left before the redraw was a metric `%` (20.0)
    _, m, _ = _stored(tmp_path, TQDM_REDRAWN)
    assert "%" not in m and not _UNIT_FRAGMENTS & set(m)
    assert m["loss"] == {1: 0.0578, 5: 0.1152}
    assert m["grad_norm"][5] == 8.400693893432617


# ----- Keras fit: the per-step time in the unit that suits each epoch -------------------------
# Quoted as printed in a public project's notes on Keras with SYCL (found by code search):
# the first epoch on the GPU at 12ms/step, the next ones at ~265us/step.
KERAS_SYCL = """\
Train on 7500 samples, validate on 2500 samples
Epoch 1/10
7500/7500 [==============================] - 92s 12ms/step - loss: nan - val_loss: nan
Epoch 2/10
7500/7500 [==============================] - 2s 265us/step - loss: nan - val_loss: nan
Epoch 3/10
7500/7500 [==============================] - 2s 262us/step - loss: nan - val_loss: nan
"""
# Constructed in the shape of the quoted lines of https://github.com/keras-team/keras/issues/10506
# (`423/423 [====] - 192s 454ms/step - loss: ...`): an epoch slow enough for `s/step`.
KERAS_SECONDS = """\
Epoch 1/3
423/423 [==============================] - 847s 2s/step - loss: 1.8386 - acc: 0.6136
Epoch 2/3
423/423 [==============================] - 186s 439ms/step - loss: 1.8087 - acc: 0.6201
Epoch 3/3
423/423 [==============================] - 184s 436ms/step - loss: 1.3863 - acc: 0.6445
"""


def test_keras_per_step_time_is_one_series_in_seconds(tmp_path: Path) -> None:
    # before: two metrics, `ms/step` {7500: 12} and `us/step` {15000: 265, 22500: 262},
    # each with a gap where the other unit was printed, neither known as the step time
    fmt, m, w = _stored(tmp_path, KERAS_SYCL)
    assert fmt == "generic_text"
    assert not {"ms/step", "us/step", "s/step"} & set(m)
    assert m["iter_time_s"] == pytest.approx({7500: 0.012, 15000: 0.000265, 22500: 0.000262})
    assert set(m["loss"]) == {7500, 15000, 22500}
    assert all(math.isnan(v) for v in m["loss"].values())
    assert any("per-step time" in x for x in w)
    _, m, _ = _stored(tmp_path, KERAS_SECONDS)
    assert m["iter_time_s"] == pytest.approx({423: 2.0, 846: 0.439, 1269: 0.436})


# ----- detectron2: `max_mem: 2996M` ----------------------------------------------------------
# Quoted as printed in https://github.com/facebookresearch/detectron2/issues/214.
DETECTRON2_214 = """\
[11/01 19:16:10 d2.engine.train_loop]: Starting training from iteration 0
[11/01 19:16:15 d2.utils.events]: eta: 4:52:26  iter: 19  total_loss: 1.750  loss_cls: 1.248  loss_box_reg: 0.503  time: 0.1960  data_time: 0.0033  lr: 0.000200  max_mem: 2996M
[11/01 19:16:19 d2.utils.events]: eta: 4:52:22  iter: 39  total_loss: 1.748  loss_cls: 1.230  loss_box_reg: 0.488  time: 0.1958  data_time: 0.0031  lr: 0.000400  max_mem: 2996M
[11/01 19:16:23 d2.utils.events]: eta: 4:57:11  iter: 59  total_loss: 1.757  loss_cls: 1.272  loss_box_reg: 0.490  time: 0.1970  data_time: 0.0034  lr: 0.000599  max_mem: 2996M
"""  # noqa: E501


def test_detectron2_max_mem_is_megabytes_as_printed(tmp_path: Path) -> None:
    # before: the `M` was read as mega (x1e6): max_mem 2.996e9, neither bytes
    # (detectron2 prints max_memory_allocated / 1024 / 1024) nor the megabytes printed
    fmt, m, _ = _stored(tmp_path, DETECTRON2_214)
    assert fmt == "generic_text"
    assert m["max_mem"] == {19: 2996.0, 39: 2996.0, 59: 2996.0}
    assert m["loss"] == {19: 1.75, 39: 1.748, 59: 1.757}


# Quoted as printed in https://github.com/huggingface/nanotron/issues/233: a `G` memory
# (nanotron's human_format, powers of 1000) stays scaled.
NANOTRON_233 = """\
[0434:0]:11/01/2024 11:05:18 [INFO|DP=0|PP=0|TP=0|lrdn0434]: iteration: 12001 / 17500 | consumed_tokens: 25.2G | elapsed_time_per_iteration_ms: 28.2K | tokens_per_sec: 74.5K | tokens_per_sec_per_gpu: 2.33K | global_batch_size: 1.02K | lm_loss: 2.3 | lr: 0.000289 | model_tflops_per_gpu: 26.7 | hardware_tflops_per_gpu: 26.7 | grad_norm: 0.15 | cuda_memory_allocated: 8.86G | cuda_max_memory_reserved: 34.1G | hd_total_memory_tb: 9.25G | hd_used_memory_tb: 8.21G | hd_free_memory_tb: 1.03G
"""  # noqa: E501


def test_a_gigabyte_memory_field_keeps_its_scale(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, NANOTRON_233)
    assert m["cuda_memory_allocated"] == {12001: pytest.approx(8.86e9)}
    assert m["consumed_tokens"] == {12001: 25.2e9}


# ----- Hugging Face Trainer's closing summary: `summary/<name>` canonical, kept apart --------
# The step dicts are quoted as printed in https://github.com/unslothai/unsloth/issues/4547;
# the closing summary dict is constructed in the Trainer's shape (`train_runtime`,
# `train_samples_per_second`, `train_loss`, `epoch`).
HF_SUMMARY = """\
{'loss': '14.88', 'grad_norm': '2.578', 'learning_rate': '0.000156', 'epoch': '0.00748', 'num_input_tokens_seen': 286019, 'train_runtime': '110.7', 'train_tokens_per_second': '2583'}
 60%|██████    | 18/30 [01:50<00:19,  1.65s/it]
{'loss': '14.64', 'grad_norm': '2.938', 'learning_rate': '0.000144', 'epoch': '0.007895', 'num_input_tokens_seen': 302403, 'train_runtime': '112.2', 'train_tokens_per_second': '2695'}
{'train_runtime': '120.3', 'train_samples_per_second': '8.0', 'train_loss': '13.2', 'epoch': '0.01'}
"""  # noqa: E501


def test_run_summary_names_are_canonical_behind_their_prefix(tmp_path: Path) -> None:
    # before: `summary/train_loss` and `summary/train_samples_per_second`, raw, where
    # `train_loss` alone is `loss` and `epoch/<name>` is canonical behind its prefix; the
    # run's average loss now reads `summary/loss`, still never the per-step `loss`
    _, m, _ = _stored(tmp_path, HF_SUMMARY)
    assert m["loss"] == {17: 14.88, 18: 14.64}
    assert list(m["summary/loss"].values()) == [13.2]
    assert list(m["summary/samples_per_s"].values()) == [8.0]
    assert "summary/train_loss" not in m


# ----- TRL DPO: the evaluation dict's `epoch` over the training record's ---------------------
# Quoted as printed in https://github.com/huggingface/trl/pull/570 (DPOTrainer's console); the
# fixture is session 36's (test_issue_formats_s36.TRL_DPO_570).


def test_trl_evaluation_epoch_keeps_off_the_training_epoch(tmp_path: Path) -> None:
    # before: epoch {1: 0.2, 2: 0.24}: the evaluation dict, attached to training record 1,
    # replaced its epoch 0.16 with the evaluation's 0.2
    _, m, _ = _stored(tmp_path, TRL_DPO_570)
    assert m["epoch"] == {1: 0.16, 2: 0.24}
    assert m["val_loss"] == {1: 0.8106440901756287}
    assert m["loss"] == {1: 0.9073, 2: 0.8165}
