"""Training-log styles quoted in public GitHub issues (fifth batch), one test per style.

Each fixture quotes the lines as printed in the issue (URL beside it). The tests check what
the ingest stores through the library path the CLI calls, and each says what the reader
did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

from forensics.ingest.readers.generic import read_generic


def _nan_at(series: dict[int, float]) -> list[int]:
    return sorted(s for s, v in series.items() if math.isnan(v))


# ----- ms-swift -----------------------------------------------------------------------------------
SWIFT_2391 = """\
Train:   0%|          | 145/250250 [4:46:45<125:26:43,  1.81s/it]
Train:   0%|          | 145/250250 [4:46:45<125:26:43,  1.81s/it]
Train:   0%|          | 146/250250 [4:46:47<124:44:59,  1.80s/it]
Train:   0%|          | 147/250250 [4:46:49<126:28:21,  1.82s/it]
Train:   0%|          | 148/250250 [4:46:50<126:04:25,  1.81s/it]
Train:   0%|          | 149/250250 [4:46:52<125:50:26,  1.81s/it]
Train:   0%|          | 150/250250 [4:46:55<156:07:10,  2.25s/it]
                                                                 

Train:   0%|          | 150/250250 [4:46:55<156:07:10,  2.25s/it]
Train:   0%|          | 150/250250 [4:46:55<156:07:10,  2.25s/it]{'eval_loss': nan, 'eval_acc': 5.8e-07, 'eval_runtime': 8420.8682, 'eval_samples_per_second': 11.887, 'eval_steps_per_second': 0.743, 'epoch': 0.0, 'global_step/max_steps': '100/250250', 'percentage': '0.04%', 'elapsed_time': '4h 45m 21s', 'remaining_time': '495d 16h 43m 33s'}
{'loss': 0.0, 'acc': 0.0, 'grad_norm': nan, 'learning_rate': 8.4e-07, 'memory(GiB)': 17.11, 'train_speed(iter/s)': 0.006129, 'epoch': 0.0, 'global_step/max_steps': '105/250250', 'percentage': '0.04%', 'elapsed_time': '4h 45m 30s', 'remaining_time': '472d 8h 9m 53s'}
"""  # noqa: E501, W293  https://github.com/modelscope/ms-swift/issues/2391


def test_swift_dicts_carry_their_own_step_as_n_of_m(tmp_path: Path) -> None:
    # before: both dicts took the bar's 150 (the eval NaN and the train NaN at one invented
    # step), and `'4h 45m 21s'` became metrics `elapsed_time_(h)`, `m`, `s`
    _, m, _ = _stored(tmp_path, SWIFT_2391)
    assert _nan_at(m["val_loss"]) == [100] and m["eval_acc"] == {100: 5.8e-07}
    # ms-swift's Trainer logs 0.0 for a window whose every loss was NaN (grad norm NaN)
    assert _nan_at(m["loss"]) == [105] and _nan_at(m["grad_norm"]) == [105]
    assert m["lr"] == {105: 8.4e-07} and m["epoch"] == {100: 0.0, 105: 0.0}
    assert "global_step/max_steps" not in m  # the step, not a metric
    # durations and percentages printed as text are not metrics
    assert not [k for k in m if k.startswith(("elapsed", "remaining", "percentage"))]
    assert not {"h", "m", "s"} & set(m)


SWIFT_2280 = """\
{'loss': 2.0916357, 'token_acc': 0.47775947, 'grad_norm': 6.08488035, 'learning_rate': 1e-05, 'memory(GiB)': 65.89, 'train_speed(iter/s)': 0.014105, 'epoch': 0.0, 'global_step/max_steps': '1/2046', 'percentage': '0.05%', 'elapsed_time': '14s', 'remaining_time': '8h 17m 1s'}
Train:   0%|                                                                                                                                                     | 1/2046 [00:14<8:16:53, 14.58s/it][h264 @ 0x7fc648030400] mmco: unref short failure
"""  # noqa: E501  https://github.com/modelscope/ms-swift/issues/2280


def test_swift_dict_before_its_bar_and_a_pointer_glued_to_it(tmp_path: Path) -> None:
    # before: the dict printed before the bar reached step 1 was stored at step 0, and the
    # decoder's `[h264 @ 0x7fc648030400]` became a metric `h264_@` = 0
    path = tmp_path / "train.log"
    path.write_text(SWIFT_2280, encoding="utf-8")
    got: dict[str, dict[int, float]] = {}
    for s, n, v, _ in read_generic(path, SWIFT_2280).metrics.iter_rows():
        got.setdefault(n, {})[s] = v
    assert got["loss"] == {1: 2.0916357} and got["grad_norm"] == {1: 6.08488035}
    assert not [k for k in got if "h264" in k or k in ("elapsed_time", "s")]


SWIFT_5890 = """\
{"loss": -0.0, "grad_norm": 0.0, "learning_rate": 3.2e-07, "reward": 0.64306641, "reward_std": 0.15570375, "frac_reward_zero_std": 0.390625, "rewards/PointwiseRMAccuracyORM/mean": 0.64306641, "rewards/PointwiseRMAccuracyORM/std": 0.40931937, "completions/mean_length": 2393.10351562, "completions/min_length": 852.0, "completions/max_length": 7009.0, "completions/clipped_ratio": 0.4375, "kl": 0.0, "clip_ratio/low_mean": 0.0, "clip_ratio/low_min": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/high_max": 0.0, "clip_ratio/region_mean": 0.0, "epoch": 0.01645338, "global_step/max_steps": "9/547", "percentage": "1.65%", "elapsed_time": "45m 20s", "remaining_time": "1d 21h 10m 47s", "train_speed(iter/s)": 0.003308}
"""  # noqa: E501  https://github.com/modelscope/ms-swift/issues/5890

SWIFT_9261 = """\
{"loss": 0.0, "grad_norm": 0.0, "learning_rate": 1e-06, "completions/mean_length": 4096.0, "completions/min_length": 4096.0, "completions/max_length": 4096.0, "completions/clipped_ratio": 1.0, "reward": 0.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0, "rewards/MathAccuracy/mean": 0.0, "rewards/MathAccuracy/std": 0.0, "entropy/mean": 0.82074341, "entropy/max": 0.82074341, "entropy/min": 0.82074341, "clip_ratio/low_mean": 0.0, "clip_ratio/low_min": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/high_max": 0.0, "clip_ratio/region_mean": 0.0, "step_time": 17.67188024, "epoch": 0.0001, "global_step/max_steps": "1/10000", "elapsed_time": "36s", "remaining_time": "4d 3h 37m 48s", "memory(GiB)": 55.33, "train_speed(s/it)": 35.870414}
{"loss": 0.0, "grad_norm": 0.0, "learning_rate": 1e-06, "entropy/mean": 0.55015859, "entropy/max": 0.55015859, "entropy/min": 0.55015859, "clip_ratio/low_mean": 0.0, "clip_ratio/low_min": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/high_max": 0.0, "clip_ratio/region_mean": 0.0, "step_time": 1.57797493, "epoch": 0.0002, "global_step/max_steps": "2/10000", "elapsed_time": "39s", "remaining_time": "2d 6h 14m 20s", "memory(GiB)": 55.34, "train_speed(s/it)": 19.529944}
"""  # noqa: E501  https://github.com/modelscope/ms-swift/issues/9261


def test_swift_logging_jsonl_step_is_the_counter_text(tmp_path: Path) -> None:
    # before: no step key was found; the records were numbered 1, 2, ... in file order
    fmt, m, w = _stored(tmp_path, SWIFT_5890, "logging.jsonl")
    assert fmt == "jsonl" and m["loss"] == {9: -0.0} and m["kl"] == {9: 0.0}
    assert m["epoch"] == {9: 0.01645338} and not any("file order" in x for x in w)
    _, m, w = _stored(tmp_path, SWIFT_9261, "logging.jsonl")
    assert m["grad_norm"] == {1: 0.0, 2: 0.0} and m["reward"] == {1: 0.0}
    assert "global_step/max_steps" not in m and not any("file order" in x for x in w)


def test_swift_logging_jsonl_large_file_takes_the_same_steps(tmp_path: Path) -> None:
    # the staged DuckDB path (files past the exact path's size) reads the text step too
    line = SWIFT_9261.splitlines()[1]
    text = "".join(
        line.replace('"2/10000"', f'"{s}/30000"').replace('"loss": 0.0', f'"loss": {s}.5') + "\n"
        for s in range(3, 30003)
    )
    _, m, w = _stored(tmp_path, text, "logging.jsonl")
    assert len(m["loss"]) == 30000 and m["loss"][3] == 3.5 and m["loss"][30002] == 30002.5
    assert not any("file order" in x for x in w)


# ----- step keys and prefixes -----------------------------------------------------------------
ESPNET_3370 = """\
iterations:57, train acc:0.440, train loss:616.408, train loss ctc:1156.613, train loss att:76.203,
iterations:58, train acc:0.338, train loss:653.147, train loss ctc:1221.461, train loss att:84.834,
iterations:59, train acc:0.341, train loss:446.866, train loss ctc:820.044, train loss att:73.688,
iterations:60, train acc:0.373, train loss:562.624, train loss ctc:1043.094, train loss att:82.154,
"""  # https://github.com/espnet/espnet/issues/3370


def test_iterations_key_is_the_step(tmp_path: Path) -> None:
    # before: `iterations` was a metric and the records were numbered 1..4 in file order
    _, m, w = _stored(tmp_path, ESPNET_3370)
    assert m["loss"] == {57: 616.408, 58: 653.147, 59: 446.866, 60: 562.624}
    assert m["train_loss_ctc"][58] == 1221.461 and "iterations" not in m
    assert not any("file order" in x for x in w)


PROBTRANSFORMER_2 = """\
2022-11-19_07:19:29.77 timer valid: 0:00:06.743515  step:1
2022-11-19_07:19:29.77 LOGGER: save log to json
2022-11-19_07:19:29.77 timer epoch: 0:29:09.497282  step:1
2022-11-19_07:19:29.77 #0## START epoch 2 ####################################
2022-11-19_07:19:29.78 ## Start training
2022-11-19_07:48:23.57 train_mean_batch_size: 11.281971802819719  step:2
2022-11-19_07:48:23.57 train_step: 10000  step:2
2022-11-19_07:48:23.57 train_mean_seq_len: 276.5921407859214  step:2
2022-11-19_07:48:23.57 train_loss: 0.4796809256076813  step:2
2022-11-19_07:48:23.57 train_ma_ce_loss: 0.10007310658693314  step:2
2022-11-19_07:48:23.57 train_rec_constraint: 7.310703949769959e-05  step:2
2022-11-19_07:48:23.57 train_lamb: 1.722368597984314  step:2
2022-11-19_07:48:23.60 timer train: 0:28:53.823897  step:2
2022-11-19_07:48:23.60 ## Start validation
2022-11-19_07:48:30.40 valid_mean_batch_size: 13.391752577319588  step:2
2022-11-19_07:48:30.40 valid_step: 96  step:2
2022-11-19_07:48:30.40 valid_mean_seq_len: 297.2680412371134  step:2
2022-11-19_07:48:30.40 valid_loss: 4.588891506195068  step:2
2022-11-19_07:48:30.40 timer valid: 0:00:06.798150  step:2
2022-11-19_07:48:30.41 LOGGER: save log to json
2022-11-19_07:48:30.41 timer epoch: 0:29:00.633500  step:2
2022-11-19_07:48:30.41 #0## START epoch 3 ####################################
"""  # https://github.com/automl/ProbTransformer/issues/2


def test_one_metric_per_line_after_an_underscore_timestamp(tmp_path: Path) -> None:
    # before: the `2022-11-19_07:48:23.57` prefix stayed, its year was the step of a
    # `start_epoch` metric, and every `name: value  step:N` line was ignored
    _, m, _ = _stored(tmp_path, PROBTRANSFORMER_2)
    assert m["loss"] == {2: 0.4796809256076813} and m["val_loss"] == {2: 4.588891506195068}
    assert m["train_ma_ce_loss"] == {2: 0.10007310658693314} and m["valid_step"] == {2: 96.0}
    assert not [k for k in m if "epoch" in k or "timer" in k]  # banners and clocks
