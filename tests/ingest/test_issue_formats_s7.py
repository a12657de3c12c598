"""Training-log styles quoted in public GitHub issues (third batch), one test per style.

Each fixture quotes the lines as printed in the issue (URL beside it; the few synthetic
lines some tests add, for padding or to show a second epoch, say so). The tests check
what the ingest stores through the library path the CLI calls: the step axis, loss / grad
norm / LR / loss scale under their canonical names, NaN kept as NaN, and evaluation or
per-epoch summaries kept out of the training loss. Each says what the reader did before.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from issue_log_helpers import stored as _stored
from typer.testing import CliRunner

from forensics.analyze import AnalyzeOptions, analyze
from forensics.cli import app
from forensics.store import open_store


def _nan_at(series: dict[int, float]) -> list[int]:
    return sorted(s for s, v in series.items() if math.isnan(v))


# ----- bracketed keys and values ------------------------------------------------------------
LION_9 = """\
2023-01-25 00:21:09.074 | INFO     | trainers.base_trainer:train_epochs:256 - [R0] | E5 iter[ 14/ 15] | [Loss] 51566519.44 | [exp] ./exp/0125/car/3dbf3ah_hvae_lion_B40 | [step]    89 | [url] none | [time] 0.4m (~5h) |[best] 0 -100.000x1e-2 
2023-01-25 00:21:34.569 | INFO     | trainers.base_trainer:train_epochs:256 - [R0] | E6 iter[ 14/ 15] | [Loss] nan | [exp] ./exp/0125/car/3dbf3ah_hvae_lion_B40 | [step]   104 | [url] none | [time] 0.4m (~5h) |[best] 0 -100.000x1e-2 
2023-01-25 00:22:00.025 | INFO     | trainers.base_trainer:train_epochs:256 - [R0] | E7 iter[ 14/ 15] | [Loss] nan | [exp] ./exp/0125/car/3dbf3ah_hvae_lion_B40 | [step]   119 | [url] none | [time] 0.4m (~5h) |[best] 0 -100.000x1e-2 
"""  # noqa: E501, W291  https://github.com/nv-tlabs/LION/issues/9


def test_bracketed_keys_loss_and_a_late_step(tmp_path: Path) -> None:
    # before: not recognised (a key in brackets named nothing; the step is the 6th number)
    fmt, m, w = _stored(tmp_path, LION_9)
    assert fmt == "generic_text"
    assert list(m["loss"]) == [89, 104, 119] and m["loss"][89] == 51566519.44
    assert _nan_at(m["loss"]) == [104, 119]  # the NaN is kept
    assert not any("repeated" in x for x in w)  # `-100.000x1e-2` is one token, not two values


PADDLESLIM_1582 = """\
2022-12-08 17:57:31,371-INFO: Total iter: 0, epoch: 0, batch: 0, loss: [10.000229]
2022-12-08 17:57:32,672-INFO: Total iter: 10, epoch: 0, batch: 10, loss: [nan]
2022-12-08 17:57:33,992-INFO: Total iter: 20, epoch: 0, batch: 20, loss: [nan]
2022-12-08 17:57:35,326-INFO: Total iter: 30, epoch: 0, batch: 30, loss: [nan]
2022-12-08 17:57:36,653-INFO: Total iter: 40, epoch: 0, batch: 40, loss: [nan]
2022-12-08 17:57:37,973-INFO: Total iter: 50, epoch: 0, batch: 50, loss: [nan]
"""  # https://github.com/PaddlePaddle/PaddleSlim/issues/1582


def test_paddle_total_iter_and_a_loss_in_brackets(tmp_path: Path) -> None:
    # before: not recognised (`loss: [nan]` named nothing, `Total iter` was not a counter)
    _, m, _ = _stored(tmp_path, PADDLESLIM_1582)
    assert list(m["loss"]) == [0, 10, 20, 30, 40, 50]
    assert m["loss"][0] == 10.000229 and _nan_at(m["loss"]) == [10, 20, 30, 40, 50]
    assert "total_iter" not in m


PADDLEDET_1946 = """\
2020-12-22 08:01:34,034-INFO: iter: 620, lr: 0.013559, 'loss_cls': '0.539213', 'loss_bbox': '0.010017', 'loss': '1.024392', eta: 8:56:30, batch_cost: 0.32392 sec, ips: 6.17440 images/sec
2020-12-22 08:01:41,942-INFO: iter: 640, lr: 0.013964, 'loss_cls': '0.807732', 'loss_bbox': '0.011433', 'loss': '1.377929', eta: 10:49:24, batch_cost: 0.39215 sec, ips: 5.10005 images/sec
2020-12-22 08:01:48,184-INFO: iter: 660, lr: 0.014369, 'loss_cls': '0.751240', 'loss_bbox': '0.011086', 'loss': '1.337946', eta: 8:36:58, batch_cost: 0.31225 sec, ips: 6.40520 images/sec
"""  # noqa: E501  https://github.com/PaddlePaddle/PaddleDetection/issues/1946


def test_paddle_detection_quoted_values(tmp_path: Path) -> None:
    # before: only lr, batch_cost and ips were read; the quoted losses were lost
    _, m, _ = _stored(tmp_path, PADDLEDET_1946)
    assert m["loss"] == {620: 1.024392, 640: 1.377929, 660: 1.337946}
    assert m["loss_cls"][640] == 0.807732 and m["lr"][660] == 0.014369


DIFFUSION_PIPE_531 = """\
steps: 16 loss: 0.7332 iter time (s): 3.181 samples/sec: 0.314
[2026-07-30 09:16:29,681] [INFO] [logging.py:123:log_dist] [Rank 0] step=17, skipped=0, lr=[1e-06], mom=[0.0]
steps: 17 loss: 0.5994 iter time (s): 3.162 samples/sec: 0.316
[2026-07-30 09:16:32,952] [INFO] [logging.py:123:log_dist] [Rank 0] step=18, skipped=0, lr=[1e-06], mom=[0.0]
steps: 18 loss: nan iter time (s): 3.235 samples/sec: 0.309
[2026-07-30 09:16:36,093] [INFO] [logging.py:123:log_dist] [Rank 0] step=19, skipped=0, lr=[1e-06], mom=[0.0]
steps: 19 loss: nan iter time (s): 3.104 samples/sec: 0.322
[2026-07-30 09:16:39,237] [INFO] [logging.py:123:log_dist] [Rank 0] step=20, skipped=0, lr=[1e-06], mom=[0.0]
steps: 20 loss: nan iter time (s): 3.108 samples/sec: 0.322
[2026-07-30 09:16:42,384] [INFO] [logging.py:123:log_dist] [Rank 0] step=21, skipped=0, lr=[1e-06], mom=[0.0]
steps: 21 loss: nan iter time (s): 3.108 samples/sec: 0.322
[2026-07-30 09:16:45,523] [INFO] [logging.py:123:log_dist] [Rank 0] step=22, skipped=0, lr=[1e-06], mom=[0.0]
steps: 22 loss: nan iter time (s): 3.102 samples/sec: 0.322
[2026-07-30 09:16:48,668] [INFO] [logging.py:123:log_dist] [Rank 0] step=23, skipped=0, lr=[1e-06], mom=[0.0]
steps: 23 loss: nan iter time (s): 3.106 samples/sec: 0.322
"""  # noqa: E501  https://github.com/tdrussell/diffusion-pipe/issues/531


def test_deepspeed_lr_list_beside_a_steps_line(tmp_path: Path) -> None:
    # before: DeepSpeed's `lr=[1e-06]` (a list of one value per parameter group) was lost
    _, m, _ = _stored(tmp_path, DIFFUSION_PIPE_531)
    assert m["loss"][16] == 0.7332 and _nan_at(m["loss"]) == list(range(18, 24))
    assert m["lr"] == {s: 1e-06 for s in range(17, 24)}
    assert m["skipped_iters"][20] == 0.0


def test_analyze_finds_the_diffusion_pipe_nan(tmp_path: Path) -> None:
    rng = random.Random(531)  # synthetic padding before the quoted lines, same syntax
    pad = "".join(
        f"steps: {s} loss: {0.6 + 0.3 * 0.99**s + rng.gauss(0, 0.03):.4f} iter time (s): "
        f"3.1{s % 9} samples/sec: 0.31{s % 7}\n"
        for s in range(1, 16)
    )
    rows = _incidents(tmp_path, pad + DIFFUSION_PIPE_531)
    assert [(r["onset_step"], r["type"]) for r in rows] == [(18, "divergent")]


# ----- step-less records --------------------------------------------------------------------
LLAMAFACTORY_2810 = """\
[INFO|trainer.py:1820] 2024-03-12 11:24:23,876 >>   Total optimization steps = 1,548
[INFO|trainer.py:1821] 2024-03-12 11:24:23,878 >>   Number of trainable parameters = 4,194,304
03/12/2024 11:24:33 - INFO - llmtuner.extras.callbacks - {'loss': 0.0000, 'learning_rate': 4.9999e-02, 'epoch': 0.01}
{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 0.04999871292419044, 'epoch': 0.01}
03/12/2024 11:24:42 - INFO - llmtuner.extras.callbacks - {'loss': 0.0000, 'learning_rate': 4.9995e-02, 'epoch': 0.02}
{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 0.04999485182928687, 'epoch': 0.02}
03/12/2024 11:24:50 - INFO - llmtuner.extras.callbacks - {'loss': 0.0000, 'learning_rate': 4.9988e-02, 'epoch': 0.03}
{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 0.04998841711285104, 'epoch': 0.03}
"""  # noqa: E501  https://github.com/hiyouga/LlamaFactory/issues/2810


def test_one_record_printed_twice_is_one_step(tmp_path: Path) -> None:
    # before: six records numbered 1..6 for three logging steps (callback + Trainer dict)
    _, m, w = _stored(tmp_path, LLAMAFACTORY_2810)
    # `loss: 0.0` beside a NaN grad norm: the Trainer's stand-in for a NaN window
    assert _nan_at(m["loss"]) == [1, 2, 3] and _nan_at(m["grad_norm"]) == [1, 2, 3]
    assert m["lr"][2] == 0.04999485182928687  # the Trainer's full-precision value
    assert any("repeat the records" in x for x in w)


GRADNORM_TF_17 = """\
epoch: 3448 loss: 0.21049741968512542
epoch: 3449 loss: 0.2075416080653667
epoch: 3450 loss: 0.21063452526926987
epoch: 3451 loss: nan
epoch: 3452 loss: nan
epoch: 3453 loss: nan
"""  # https://github.com/vpetren/gradnorm_tf/issues/17


def test_one_line_per_epoch_takes_the_epoch_as_step(tmp_path: Path) -> None:
    # before: records numbered 1..6 in file order, the epoch a metric
    _, m, w = _stored(tmp_path, GRADNORM_TF_17)
    assert list(m["loss"]) == list(range(3448, 3454)) and _nan_at(m["loss"]) == [3451, 3452, 3453]
    assert "epoch" not in m and not any("file order" in x for x in w)


# ----- MetricLogger / ProgressMeter counters --------------------------------------------------
LLAMA_ADAPTER_144 = """\
[17:11:05.859398] Epoch: [0]  [   30/13000]  eta: 2:17:53  lr: 0.000000  closs: 1.5078 (1.6011)  time: 0.6125  data: 0.0001  max mem: 20618
[17:11:12.016458] Epoch: [0]  [   40/13000]  eta: 2:16:36  lr: 0.000000  closs: 1.5508 (1.6249)  time: 0.6146  data: 0.0001  max mem: 20618
[17:11:18.185472] Epoch: [0]  [   50/13000]  eta: 2:15:50  lr: 0.000000  closs: 1.5430 (1.6123)  time: 0.6163  data: 0.0001  max mem: 20618
[17:11:49.250349] Epoch: [0]  [  100/13000]  eta: 2:14:27  lr: 0.000001  closs: 1.5889 (1.6096)  time: 0.6232  data: 0.0001  max mem: 20618
"""  # noqa: E501  https://github.com/OpenGVLab/LLaMA-Adapter/issues/144


def test_mae_metric_logger_epoch_and_iteration(tmp_path: Path) -> None:
    # before: not recognised (`Epoch: [0]  [30/13000]` had no step; `closs` was no loss)
    _, m, _ = _stored(tmp_path, LLAMA_ADAPTER_144)
    assert m["loss"] == {30: 1.5078, 40: 1.5508, 50: 1.543, 100: 1.5889}  # not the (mean)
    assert m["lr"][100] == 0.000001


ACCESSORY_48 = """\
[07:15:39.400163] Epoch: [2]  [1480/1504]  lr: 0.000005  closs: 0.8662 (0.8558)  grad_norm: 0.2537 (0.3329)  time: 4.3713  data: 0.0001  max mem: 51710
[07:16:21.232598] Epoch: [2]  [1490/1504]  lr: 0.000005  closs: 0.6968 (0.8547)  grad_norm: 0.2537 (0.3329)  time: 4.1840  data: 0.0001  max mem: 51710
[07:17:02.964445] Epoch: [2]  [1500/1504]  lr: 0.000005  closs: 0.6923 (0.8536)  grad_norm: 0.2537 (0.3329)  time: 4.1781  data: 0.0002  max mem: 51710
[07:17:15.926522] Epoch: [2] Total time: 1:52:15
[07:17:15.963773] Averaged stats: lr: 0.000005  closs: 0.6884 (0.8518)  grad_norm: 0.2534 (0.3311)
[07:18:20.563967] model saved
"""  # noqa: E501  https://github.com/Alpha-VLLM/LLaMA2-Accessory/issues/48


def test_averaged_stats_line_is_an_epoch_summary(tmp_path: Path) -> None:
    # before: not recognised; the `Averaged stats` line would have replaced step 1500's loss
    _, m, w = _stored(tmp_path, ACCESSORY_48)
    # epochs count from 1 unless a 0 is printed: (2 - 1) * 1504 + i
    assert m["loss"] == {2984: 0.8662, 2994: 0.6968, 3004: 0.6923}
    assert m["grad_norm"][3004] == 0.2537
    # the meters' epoch averages (`(0.8518)`), not their 20-value window medians (test s40)
    assert m["epoch/loss"] == {3004: 0.8518} and m["epoch/grad_norm"] == {3004: 0.3311}
    assert not any("repeated" in x for x in w)


BEIT_598 = """\
Epoch: [115]  [1298/1299]  eta: 0:00:00  lr: 0.001435  min_lr: 0.001435  mlm_acc: 0.0333 (0.0344)  loss: 6.5993 (6.5971)  loss_scale: 8192.0000 (8646.0600)  weight_decay: 0.0500 (0.0500)  grad_norm: 0.3922 (nan)  time: 0.4944  data: 0.0001  max mem: 19152

Averaged stats: lr: 0.001435  min_lr: 0.001435  mlm_acc: 0.0333 (0.0345)  loss: 6.5993 (6.5925)  loss_scale: 8192.0000 (8646.0600)  weight_decay: 0.0500 (0.0500)  grad_norm: 0.3922 (nan)
"""  # noqa: E501  https://github.com/microsoft/unilm/issues/598


def test_beit_running_mean_nan_is_not_the_grad_norm(tmp_path: Path) -> None:
    # before: both lines were records numbered 1 and 2 in file order
    _, m, _ = _stored(tmp_path, BEIT_598)
    step = 114 * 1299 + 1298
    assert m["loss"] == {step: 6.5993} and m["loss_scale"] == {step: 8192.0}
    assert m["grad_norm"] == {step: 0.3922}  # `(nan)` is the running mean's annotation
    # the `Averaged stats` line's epoch averages: the epoch's NaN grad norm is kept (test s40)
    assert m["epoch/loss"] == {step: 6.5925} and math.isnan(m["epoch/grad_norm"][step])


RTM3D_4 = (  # https://github.com/maudzung/RTM3D/issues/4 (tabs as printed)
    ">>> Epoch: [127/300]\n"
    "2020-08-17 21:48:47,912: logger.py - info(), at Line 49:INFO:\n"
    "Train - Epoch: [127/300][ 35/464]\tTime  0.738 ( 0.738)\tData  0.000 ( 0.014)\t"
    "Loss 2.1274e+00 (1.5406e+00)\n"
    "2020-08-17 21:49:24,172: logger.py - info(), at Line 49:INFO:\n"
    "Train - Epoch: [127/300][ 85/464]\tTime  0.730 ( 0.730)\tData  0.000 ( 0.006)\t"
    "Loss 1.2996e+00 (1.5485e+00)\n"
    "2020-08-17 21:50:00,407: logger.py - info(), at Line 49:INFO:\n"
    "Train - Epoch: [127/300][135/464]\tTime  0.750 ( 0.728)\tData  0.000 ( 0.004)\t"
    "Loss 2.1689e+00 (1.5462e+00)\n"
)


def test_progress_meter_epoch_of_total_and_padded_batch(tmp_path: Path) -> None:
    # before: no step counter found; records numbered 1, 2, 3 in file order
    _, m, w = _stored(tmp_path, RTM3D_4)
    assert m["loss"] == {126 * 464 + 35: 2.1274, 126 * 464 + 85: 1.2996, 126 * 464 + 135: 2.1689}
    assert not any("file order" in x for x in w)


# ----- NeMo / Lightning, global step keys ----------------------------------------------------
NEMO_740 = """\
Training epoch 0, iteration 120/149 | lr: 3e-05 | consumed_samples: 121 | global_batch_size: 1 | global_step: 120 | reduced_train_loss: 1.233 | train_step_timing in s: 0.03146 | val_loss: 4.106
Training epoch 0, iteration 121/149 | lr: 3e-05 | consumed_samples: 122 | global_batch_size: 1 | global_step: 121 | reduced_train_loss: 1.288 | train_step_timing in s: 0.03163 | val_loss: 4.106
Training epoch 0, iteration 122/149 | lr: 3e-05 | consumed_samples: 123 | global_batch_size: 1 | global_step: 122 | reduced_train_loss: 1.333 | train_step_timing in s: 0.03215 | val_loss: 4.106
"""  # noqa: E501  https://github.com/NVIDIA-BioNeMo/bionemo-recipes/pull/740


def test_nemo_lines_loss_val_loss_and_global_step(tmp_path: Path) -> None:
    # before: no `loss` (reduced_train_loss unknown), and every line's last field (val_loss)
    # dropped as "cut short" because NeMo does not close its lines with '|'
    fmt, m, w = _stored(tmp_path, NEMO_740)
    assert fmt == "megatron"
    assert m["loss"] == {120: 1.233, 121: 1.288, 122: 1.333}
    assert m["val_loss"][122] == 4.106 and m["iter_time_s"][121] == 0.03163
    assert m["lr"][120] == 3e-05 and m["batch_size"][120] == 1.0
    assert not any("cut short" in x for x in w)
    # synthetic, same syntax: in the second epoch `iteration` restarts, global_step does not
    later = NEMO_740 + (
        "Training epoch 1, iteration 2/149 | lr: 3e-05 | consumed_samples: 152 | "
        "global_batch_size: 1 | global_step: 151 | reduced_train_loss: 1.101 | "
        "train_step_timing in s: 0.0315 | val_loss: 3.9\n"
    )
    _, m, w = _stored(tmp_path, later)
    assert m["loss"][151] == 1.101 and 2 not in m["loss"]
    assert any("global_step field" in x for x in w)


UNSLOTH_4982 = """\
Unsloth: Will smartly offload gradients to save VRAM!
{'loss': '185.9', 'grad_norm': '6880', 'learning_rate': '1.263e-06', 'epoch': '0.002296'}  
{'loss': '142.5', 'grad_norm': '4512', 'learning_rate': '2.538e-06', 'epoch': '0.004592'}
{'loss': '117.6', 'grad_norm': '8128', 'learning_rate': '3.814e-06', 'epoch': '0.006888'}
{'loss': '92.86', 'grad_norm': '1344', 'learning_rate': '5.089e-06', 'epoch': '0.009185'}
"""  # noqa: W291  https://github.com/unslothai/unsloth/issues/4982


def test_trainer_dicts_with_values_as_strings(tmp_path: Path) -> None:
    # before: not recognised (newer transformers print every logged value as a string)
    _, m, _ = _stored(tmp_path, UNSLOTH_4982)
    assert m["loss"] == {1: 185.9, 2: 142.5, 3: 117.6, 4: 92.86}
    assert m["grad_norm"][3] == 8128.0 and m["lr"][4] == 5.089e-06


G_STEP_24 = (  # https://github.com/LorrinWWW/two-are-better-than-one/issues/24 (first line
    # quoted; the second is synthetic in the same syntax)
    "g_step 2000, step 152, avg_time 0.874, loss:51.5502\n"
    "g_step 2100, step 252, avg_time 0.874, loss:50.5502\n"
)


def test_global_step_key_wins_over_the_count_within_the_epoch(tmp_path: Path) -> None:
    # before: the step was 152 (`step` was tried before the global keys)
    _, m, _ = _stored(tmp_path, G_STEP_24)
    assert m["loss"] == {2000: 51.5502, 2100: 50.5502}


NANOVLM_187 = """\
Training summary: 105 samples, 105 batches/epoch, batch size 1
Starting training loop

Step: 0, Loss: nan, Val Loss: nan, Tokens/s: 37.10

Step: 20, Loss: nan, Val Loss: nan, Tokens/s: 900.86
Epoch 1 | Train Loss: nan | Val Loss: nan | Time: 12.32s | T/s: 474.88
Starting training loop

Step: 40, Loss: nan, Val Loss: nan, Tokens/s: 1274.81
Epoch 2 | Train Loss: nan | Val Loss: nan | Time: 6.64s | T/s: 881.35
Starting training loop
"""  # https://github.com/huggingface/nanoVLM/issues/187


def test_epoch_summary_line_stays_out_of_the_step_loss(tmp_path: Path) -> None:
    # before: the epoch's mean `Train Loss` replaced the loss of steps 20 and 40 (warned
    # as a repeated row from a restart)
    _, m, w = _stored(tmp_path, NANOVLM_187)
    assert _nan_at(m["loss"]) == [0, 20, 40] and _nan_at(m["val_loss"]) == [0, 20, 40]
    assert _nan_at(m["epoch/loss"]) == [20, 40]
    assert m["epoch/time_(s)"] == {20: 12.32, 40: 6.64}
    assert not any("repeated" in x or "another name" in x for x in w)


# ----- text glued after a progress bar ---------------------------------------------------------
CHATGLM_49 = """\
{'loss': 0.3290, 'reward': -2.0304, 'learning_rate': 5e-05}
  0%|                                                                                                                                                                                                                                                                     | 1/13000 [00:10<36:34:36, 10.13s/it]{'loss': nan, 'reward': 5.7646, 'learning_rate': 5e-05}
  0%|                                                                                                                                                                                                                                                                     | 2/13000 [00:28<54:33:11, 15.11s/it{'loss': 0.2527, 'reward': 1.2237, 'learning_rate': 5e-05}
  0%|                                                                                                                                                                                                                                                                     | 3/13000 [00:39<47:01:51, 13.03s/it]{'loss': 0.1512, 'reward': 10.7681, 'learning_rate': 5e-05}
"""  # noqa: E501  https://github.com/hiyouga/ChatGLM-Efficient-Tuning/issues/49


def test_dict_glued_to_the_bar_takes_its_step(tmp_path: Path) -> None:
    # before: step 2's dict (glued to a bar that lost its `]`) was not read at all
    _, m, _ = _stored(tmp_path, CHATGLM_49)
    assert list(m["loss"]) == [0, 1, 2, 3] and _nan_at(m["loss"]) == [1]
    assert m["loss"][2] == 0.2527 and m["reward"][3] == 10.7681 and m["lr"][2] == 5e-05


COLOSSAL_1375 = """\
                    WARNING  colossalai - ShardedOptimizerV2 - WARNING: found   
                             inf during ShardedOptimV2 step                     
[Epoch 0 / Train]:   0% 431/788222 [29:28<796:09:33,  3.64s/it, loss=nan, lr=2.5e-5, throughput=0.28555 sample_per_sec, 2.3376 Tflops][09/30/22 02:46:23] WARNING  colossalai - ShardedOptimizerV2 - WARNING:         
                             /usr/local/lib/python3.7/dist-packages/colossalai/z
                             ero/sharded_optim/sharded_optim_v2.py:197 step     
                    WARNING  colossalai - ShardedOptimizerV2 - WARNING: found   
                             inf during ShardedOptimV2 step                     
[Epoch 0 / Train]:   0% 432/788222 [29:31<786:20:54,  3.59s/it, loss=nan, lr=2.5e-5, throughput=0.2867 sample_per_sec, 2.3471 Tflops][09/30/22 02:46:26] WARNING  colossalai - ShardedOptimizerV2 - WARNING:         
                             /usr/local/lib/python3.7/dist-packages/colossalai/z
                             ero/sharded_optim/sharded_optim_v2.py:197 step     
"""  # noqa: E501, W291  https://github.com/hpcaitech/ColossalAI/issues/1375


def test_glyphless_bar_with_a_rich_record_glued(tmp_path: Path) -> None:
    # before: not recognised (a bar without `%|` glyphs, a `[09/30/22 ...]` record glued on)
    _, m, _ = _stored(tmp_path, COLOSSAL_1375)
    assert _nan_at(m["loss"]) == [431, 432]
    assert m["lr"] == {431: 2.5e-05, 432: 2.5e-05}
    # `throughput=0.28555 sample_per_sec`: samples, though `throughput` alone means tokens
    assert m["samples_per_s"][431] == 0.28555 and "tokens_per_s" not in m


MINFM_4 = """\
Training:  78%|███████▊  | 1556/2000 [6:15:28<1:55:17, 15.58s/step]2025-08-23 06:19:20,889 - trainers.dit_trainer - WARNING - Step 1557: detected nan/inf/spiky gradient (norm=2.1966569423675537); skipping optimizer step.
Training:  78%|███████▊  | 1557/2000 [6:15:43<1:55:00, 15.58s/step]2025-08-23 06:19:36,454 - trainers.dit_trainer - WARNING - Step 1558: detected nan/inf/spiky gradient (norm=2.164307117462158); skipping optimizer step.
Training:  78%|███████▊  | 1558/2000 [6:15:59<1:54:43, 15.57s/step]2025-08-23 06:19:52,016 - trainers.dit_trainer - WARNING - Step 1559: detected nan/inf/spiky gradient (norm=2.1794376373291016); skipping optimizer step.
Training:  78%|███████▊  | 1559/2000 [6:16:15<1:54:26, 15.57s/step]2025-08-23 06:20:07,596 - trainers.dit_trainer - WARNING - Step 1560: detected nan/inf/spiky gradient (norm=2.179413080215454); skipping optimizer step.
2025-08-23 06:20:07,600 - trainers.dit_trainer - INFO - Step   1560 | Loss: 0.5275 | LR: 3.00e-04 | GradNorm: 2.29 | TPS: 16.88K | Data: 0.007s | Frozen: 0.097s | TrainableFwd: 0.701s | TrainableBwd: 1.170s
"""  # noqa: E501  https://github.com/Kai-46/minFM/issues/4


def test_the_words_nan_inf_in_a_warning_are_not_a_nan_metric(tmp_path: Path) -> None:
    # before: `detected nan/inf/spiky` was a metric `detected` = NaN at 1557..1560
    _, m, _ = _stored(tmp_path, MINFM_4)
    assert not [k for k, v in m.items() if _nan_at(v)]
    assert m["loss"] == {1560: 0.5275} and m["grad_norm"][1560] == 2.29  # 1557..1559: s8
    assert m["tokens_per_s"] == {1560: 16880.0}


DEEPSPEECH_485 = """\
100%|██████████| 209/209 [02:03<00:00,  1.69it/s]Validation Summary Epoch: [20] Average WER 20.853      Average CER 20.861
...
Epoch: [21][1390/1930]  Time 0.690 (0.986)      Data 0.004 (0.009)      Loss 2.5681 (10.9521)
Epoch: [21][1391/1930]  Time 0.782 (0.986)      Data 0.004 (0.009)      Loss 4.3603 (10.9519)
Epoch: [21][1392/1930]  Time 0.758 (0.986)      Data 0.004 (0.009)      Loss 3.0738 (10.9517)
"""  # noqa: E501  https://github.com/SeanNaren/deepspeech.pytorch/issues/485


def test_summary_glued_to_an_evaluation_bar_is_not_at_its_count(tmp_path: Path) -> None:
    # before: the WER summary was stored at step 209, the evaluation bar's count
    _, m, _ = _stored(tmp_path, DEEPSPEECH_485)
    assert "average_wer" not in m and "validation_summary_epoch" not in m
    assert m["loss"] == {20 * 1930 + 1390: 2.5681, 20 * 1930 + 1391: 4.3603, 39992: 3.0738}


# ----- loss-scaler lines ------------------------------------------------------------------------
DEEPSPEED_5779 = """\
[2024-07-17 19:44:06,829] [INFO] [loss_scaler.py:190:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1
"""  # noqa: E501  https://github.com/deepspeedai/DeepSpeed/issues/5779


def test_hysteresis_overflow_does_not_set_the_loss_scale(tmp_path: Path) -> None:
    # before: `Reducing hysteresis to 1` was read as a new loss scale of 1
    record = "{'loss': 2.1, 'learning_rate': 1e-05, 'epoch': 0.01}\n"  # synthetic record
    _, m, _ = _stored(tmp_path, DEEPSPEED_5779 + record)
    assert m["overflow"] == {1: 1.0}
    assert "loss_scale" not in m


MINILLM_130 = """\
train | data_epochs  0/10 | inner iter:   3/  8 | ppo epoch:  2/ 4 | global iter:     27/  5000| tot_loss: 1.5269 | rl_loss: -1.0516 | pt_loss: 2.5786 | pg_loss: -1.0603 | reg_loss: 0.0087 | reward: 0.0116 | rev_kl: 0.0022 | stu_lens: 71.8750 | mixed_lens: 63.2500 | lr: 8.5000e-07 | scale:  32.00 | time: 1.700 | step time: 0.000
[2023-12-21 16:39:54,688] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 32, reducing to 16
train | data_epochs  0/10 | inner iter:   5/  8 | ppo epoch:  2/ 4 | global iter:     28/  5000| tot_loss: 2442.9075 | rl_loss: 2440.2554 | pt_loss: 2.6521 | pg_loss: 2440.1965 | reg_loss: 0.0588 | reward: 0.0131 | rev_kl: 0.0026 | stu_lens: 89.7500 | mixed_lens: 75.2500 | lr: 8.5000e-07 | scale:  16.00 | time: 1.287 | step time: 0.000
train | data_epochs  0/10 | inner iter:   7/  8 | ppo epoch:  2/ 4 | global iter:     29/  5000| tot_loss: 2.2808 | rl_loss: -0.5124 | pt_loss: 2.7932 | pg_loss: -0.5309 | reg_loss: 0.0185 | reward: 0.0168 | rev_kl: 0.0011 | stu_lens: 75.7500 | mixed_lens: 67.1250 | lr: 9.0000e-07 | scale:  16.00 | time: 1.712 | step time: 0.000
[2023-12-21 16:40:00,636] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 16, reducing to 8
"""  # noqa: E501  https://github.com/microsoft/LMOps/issues/130


def test_global_iter_phrase_and_total_loss_with_overflows(tmp_path: Path) -> None:
    # before: not recognised (`inner iter` / `global iter` were no step keys, and the
    # step is the 7th number; `tot_loss` was no loss)
    _, m, _ = _stored(tmp_path, MINILLM_130)
    assert m["loss"] == {27: 1.5269, 28: 2442.9075, 29: 2.2808}  # the spike at 28
    assert m["lr"][29] == 9e-07 and m["inner_iter"][28] == 5.0
    assert m["overflow"] == {28: 1.0, 30: 1.0}  # printed while steps 28 and 30 ran
    # each line's `scale:` is the loss scale (it moves in powers of two); the overflow after
    # the last line sets step 30's
    assert m["loss_scale"] == {27: 32.0, 28: 16.0, 29: 16.0, 30: 8.0}


DEEPSPEED_931 = (  # https://github.com/deepspeedai/DeepSpeed/issues/931: the issue quotes
    # `[INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=6` and `[2023-04-28
    # 06:59:46,878] [INFO] [logging.py:96:log_dist] [Rank 0] step=510, skipped=8,` ("8
    # (=6+2)"); the rest of each line and the step-500/520 lines are synthetic, same syntax
    "[2023-04-28 06:52:01,113] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=6, "
    "lr=[1e-05], mom=[(0.9, 0.95)]\n"
    "[2023-04-28 06:59:39,001] [INFO] [logging.py:96:log_dist] [Rank 0] step=500, skipped=6, "
    "lr=[1e-05], mom=[(0.9, 0.95)]\n"
    "[2023-04-28 06:59:46,878] [INFO] [logging.py:96:log_dist] [Rank 0] step=510, skipped=8, "
    "lr=[1e-05], mom=[(0.9, 0.95)]\n"
    "[2023-04-28 06:59:54,302] [INFO] [logging.py:96:log_dist] [Rank 0] step=520, skipped=8, "
    "lr=[1e-05], mom=[(0.9, 0.95)]\n"
)


def test_deepspeed_skipped_count_since_the_start_becomes_per_window(tmp_path: Path) -> None:
    # before: skipped_iters read 6, 6, 8, 8: every later step looked skipped again
    _, m, w = _stored(tmp_path, DEEPSPEED_931)
    assert m["skipped_iters"] == {10: 6.0, 500: 0.0, 510: 2.0, 520: 0.0}
    assert m["lr"][510] == 1e-05 and any("since the start" in x for x in w)


INTERNEVO_375 = """\
2024-11-24 02:35:28,531 INFO pipeline.py:770 in record_current_batch_training_metrics -- tflops=229.64161376788178 step=642 loss=2.1725409030914307 real_tgs=719.84 tgs (tokens/gpu/second)=720.46 tgs/last_tgs_1=720.46 tgs/tgs_all=716.63 tgs/tgs_avg=722.47 tgs/tgs_SMA=722.84 tgs/last_tgs_10=723.59 tgs/last_tgs_50=722.37 lr=9.808683347597691e-05 loss_scale=16384.0 grad_norm={'0_default': 2.156615516531637, '1_fp32': 0.0} micro_num=16 num_consumed_tokens=674234368 inf_nan_skip_batches=3 num_samples_in_batch=102 largest_length=7543 largest_batch=11 smallest_batch=2 adam_beta2=0.95 fwd_bwd_time=181.49 bwd_time=120.98 acc=0.5494 perplexity=9.0888 acc/zh=0.5494 tokens/zh=1047661 loss_from_metric=2.207 loss/zh=2.207
2024-11-24 02:38:29,509 INFO pipeline.py:770 in record_current_batch_training_metrics -- tflops=230.8624288772513 step=643 loss=2.046380043029785 real_tgs=723.69 tgs (tokens/gpu/second)=724.29 tgs/last_tgs_1=724.29 tgs/tgs_all=716.64 tgs/tgs_avg=722.47 tgs/tgs_SMA=722.86 tgs/last_tgs_10=723.59 tgs/last_tgs_50=722.37 lr=9.8080255311898e-05 loss_scale=16384.0 grad_norm={'0_default': 1.7590333217221075, '1_fp32': 0.0} micro_num=16 num_consumed_tokens=675282944 inf_nan_skip_batches=3 num_samples_in_batch=108 largest_length=6803 l
"""  # noqa: E501  https://github.com/InternLM/InternEvo/issues/375 (the second line cut as quoted)


def test_internevo_key_value_line_after_a_double_dash(tmp_path: Path) -> None:
    # before: the first key was `in record_current_batch_training_metrics -- tflops`
    _, m, _ = _stored(tmp_path, INTERNEVO_375)
    assert m["loss"] == {642: 2.1725409030914307, 643: 2.046380043029785}
    assert m["loss_scale"][643] == 16384.0 and m["lr"][642] == 9.808683347597691e-05
    assert m["tflops"][642] == 229.64161376788178
    assert m["largest_length"] == {642: 7543.0, 643: 6803.0}  # the cut line's complete fields


FAIRSEQ_LUA_38 = """\
| epoch 000 | 0001000 updates | words/s    4328| trainloss     8.72 | train ppl   420.34
| epoch 000 | 0002000 updates | words/s    4559| trainloss     6.91 | train ppl   120.29
| checkpoint 001 | epoch 001 | 0002645 updates | s/checkpnt     767 | words/s    4461 | lr 0.250000
| checkpoint 001 | epoch 001 | 0002645 updates | trainloss     7.40 | train ppl   169.38
| checkpoint 001 | epoch 001 | 0002645 updates | validloss     5.87 | valid ppl    58.37 | testloss     5.82 | test ppl    56.55
| epoch 001 | 0003645 updates | words/s    4371| trainloss     5.85 | train ppl    57.84
| epoch 001 | 0004645 updates | words/s    4373| trainloss     5.58 | train ppl    47.91
"""  # noqa: E501  https://github.com/facebookresearch/fairseq-lua/issues/38


def test_a_count_followed_by_its_key_is_the_step(tmp_path: Path) -> None:
    # before: not recognised (`0001000 updates`: the key after the count)
    _, m, w = _stored(tmp_path, FAIRSEQ_LUA_38)
    assert m["loss"] == {1000: 8.72, 2000: 6.91, 3645: 5.85, 4645: 5.58}
    assert m["val_loss"] == {2645: 5.87} and m["lr"] == {2645: 0.25}
    # the checkpoint line's trainloss is the epoch's mean, not a loss of update 2645
    assert m["epoch/loss"] == {2645: 7.40}
    assert any("report the epoch at a checkpoint" in x for x in w)


FAIRSCALE_121 = """\
2020-10-01 10:55:02 | INFO | train_inner | epoch 001:      2 / 78 loss_scale=32, train_wall=0, wall=6
2020-10-01 10:55:02 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: 16.0
2020-10-01 10:55:02 | INFO | train_inner | epoch 001:      3 / 78 loss_scale=16, train_wall=0, wall=7
2020-10-01 10:55:02 | INFO | train_inner | epoch 001:      4 / 78 loss=1.006, ppl=2.01, wps=0, ups=0, wpb=1024, bsz=8, num_updates=1, lr=2.24975e-07, gnorm=0.056, loss_scale=16, train_wall=0, wall=7
2020-10-01 10:55:02 | INFO | train_inner | epoch 001:      5 / 78 loss=0.97, ppl=1.96, wps=0, ups=0, wpb=1024, bsz=8, num_updates=2, lr=3.24975e-07, gnorm=0.061, loss_scale=16, train_wall=0, wall=7
"""  # noqa: E501  https://github.com/facebookresearch/fairscale/pull/121 (last line synthetic,
# same syntax: the quote is cut after `loss=0.97,`)


def test_fairseq_lines_before_the_first_update_are_not_steps_2_and_3(tmp_path: Path) -> None:
    # before: the batch counter (2, 3) and num_updates (1) were mixed on one step axis
    _, m, w = _stored(tmp_path, FAIRSCALE_121)
    assert m["loss"] == {1: 1.006, 2: 0.97}
    assert m["loss_scale"] == {0: 16.0, 1: 16.0, 2: 16.0}  # probing before update 1
    assert m["overflow"] == {1: 1.0}
    assert any("print no update count" in x for x in w)


# ----- styles that already read right, pinned --------------------------------------------------
MASKRCNN_283 = """\
2018-12-18 10:21:38,024 maskrcnn_benchmark.trainer INFO: eta: 5:30:07  iter: 400  loss: 0.2376 (0.2817)  loss_classifier: 0.1325 (0.1725)  loss_box_reg: 0.0580 (0.0655)  loss_objectness: 0.0156 (0.0368)  loss_rpn_box_reg: 0.0078 (0.0070)  time: 0.3508 (0.3500)  data: 0.0095 (0.0094)  lr: 0.017307  max mem: 3050
2018-12-18 10:21:45,031 maskrcnn_benchmark.trainer INFO: eta: 5:30:01  iter: 420  loss: 0.2443 (0.2846)  loss_classifier: 0.1486 (0.1752)  loss_box_reg: 0.0648 (0.0653)  loss_objectness: 0.0243 (0.0369)  loss_rpn_box_reg: 0.0052 (0.0072)  time: 0.3503 (0.3500)  data: 0.0072 (0.0094)  lr: 0.017840  max mem: 3050
"""  # noqa: E501  https://github.com/facebookresearch/maskrcnn-benchmark/issues/283

XLA_4324 = """\
| Training Device=xla:0/5 Epoch=1 Step=340 Loss=0.00373 Rate=545.27 GlobalRate=300.64 Time=01:52:42
| Training Device=xla:0/7 Epoch=1 Step=360 Loss=0.00344 Rate=551.83 GlobalRate=308.74 Time=01:52:46
| Training Device=xla:0/2 Epoch=1 Step=360 Loss=0.00344 Rate=551.69 GlobalRate=307.45 Time=01:52:46
"""  # https://github.com/pytorch/xla/pull/4324

RNNT_26 = """\
Epoch: 0, Batch: 7, Global Step: 7, Step Time: 1.6160, Loss: 327.3580
Epoch: 0, Batch: 8, Global Step: 8, Step Time: 1.6567, Loss: 309.9092
"""  # https://github.com/noahchalifour/rnnt-speech-recognition/issues/26


DSCHAT_444 = """\
|E2E latency=2.12s |Gather latency=0.00s (0.00%) |Generate time=1.59s (75.13%) |Training time=0.42s (19.78%) |Others=0.11 (5.09%)|CurSamplesPerSec=1.89 |AvgSamplesPerSec=1.95
epoch: 0|step: 3183|ppo_ep: 1|act_loss: 30.921875|cri_loss: 30.515625|unsuper_loss: 0.0
average reward score: -7.80859375
-------------------------------------------------------------------------------------
|E2E latency=2.14s |Gather latency=0.00s (0.00%) |Generate time=1.62s (75.39%) |Training time=0.42s (19.74%) |Others=0.10 (4.87%)|CurSamplesPerSec=1.87 |AvgSamplesPerSec=1.95
epoch: 0|step: 3184|ppo_ep: 1|act_loss: inf|cri_loss: inf|unsuper_loss: 0.0
average reward score: -6.359375
"""  # noqa: E501  https://github.com/deepspeedai/DeepSpeedExamples/issues/444

MAXTEXT_4847 = """\
I0811 21:54:55.531340 138304841739136 metric_logger.py:226] completed step: 1, seconds: 0.631, TFLOP/s/device: 5688.282, Tokens/s/device: 311629.521, total_weights: 1572864, loss: 12.979, lm_loss: 12.979, perplexity: 433358.281
I0811 21:55:06.119312 138304841739136 metric_logger.py:226] completed step: 2, seconds: 10.228, TFLOP/s/device: 350.869, Tokens/s/device: 19222.175, total_weights: 1572864, loss: 12.980, lm_loss: 12.980, perplexity: 433463.719
I0811 21:55:27.300509       7 profiler_session.cc:121] Profiler session initializing.
"""  # noqa: E501  https://github.com/AI-Hypercomputer/maxtext/pull/4847


def test_styles_that_already_read_right(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, MASKRCNN_283)
    assert m["loss"] == {400: 0.2376, 420: 0.2443} and m["lr"][420] == 0.01784
    _, m, _ = _stored(tmp_path, XLA_4324)  # `xla:0/5` is a device, not a counter
    assert m["loss"] == {340: 0.00373, 360: 0.00344}
    _, m, _ = _stored(tmp_path, RNNT_26)
    assert m["loss"] == {7: 327.358, 8: 309.9092} and m["iter_time_s"][8] == 1.6567
    _, m, _ = _stored(tmp_path, DSCHAT_444)  # an RLHF actor loss: its own name, Inf kept
    assert m["act_loss"][3183] == 30.921875 and math.isinf(m["act_loss"][3184])
    _, m, w = _stored(tmp_path, MAXTEXT_4847)  # `loss` and `lm_loss`: one loss, said so
    assert m["loss"] == {1: 12.979, 2: 12.98} and any("another name" in x for x in w)


# ----- through the CLI ---------------------------------------------------------------------------
def test_cli_ingests_a_quoted_log_and_refuses_a_broken_one(tmp_path: Path) -> None:
    runner = CliRunner()
    run = tmp_path / "lion"
    run.mkdir()
    (run / "train.log").write_text(LION_9, encoding="utf-8")
    db = tmp_path / "f.duckdb"
    ok = runner.invoke(app, ["ingest", str(run), "--db", str(db)])
    assert ok.exit_code == 0, ok.output
    with open_store(db, read_only=True) as store:
        n = store.query("SELECT count(*) AS n FROM metrics WHERE metric = 'loss'")["n"][0]
    assert n == 3
    # a NeMo record whose loss is not a number: one line naming file, line, field
    bad = tmp_path / "bad"
    bad.mkdir()
    broken = NEMO_740.replace("reduced_train_loss: 1.288", "reduced_train_loss: 1.2e")
    (bad / "nemo.log").write_text(broken, encoding="utf-8")
    res = runner.invoke(app, ["ingest", str(bad), "--db", str(tmp_path / "g.duckdb")])
    assert res.exit_code != 0
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1, res.output
    assert "nemo.log:2:" in lines[0] and "reduced_train_loss" in lines[0]


def _incidents(tmp_path: Path, text: str) -> list[dict]:
    src = tmp_path / "run" / "train.log"
    src.parent.mkdir()
    src.write_text(text, encoding="utf-8")
    db = tmp_path / "f.duckdb"
    analyze([src], out=None, db=db, options=AnalyzeOptions(replay=False, report=False))
    with open_store(db, read_only=True) as store:
        return store.query("SELECT * FROM incidents ORDER BY onset_step").to_dicts()
