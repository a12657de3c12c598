"""Logs of popular training scripts pasted into issues around a loss spike or a NaN
(session 38), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it; a fixture says so where lines are constructed in the shape of quoted ones); each test
says what the reader stored before where it stored something wrong, and stays a
regression test where it stored the log right already.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored
from test_issue_formats_s7 import DSCHAT_444

# ----- kohya sd-scripts: tqdm bar `steps: ...| 943/3280 [..., avr_loss=nan]` ----------------
# Quoted as printed in https://github.com/kohya-ss/sd-scripts/issues/2137 ("How can I solve
# avr_loss=nan?"): the bar's `avr_loss` is the only loss train_network.py prints (its mean
# over the epoch's last steps), between the `epoch is incremented` and `epoch N/M` lines.
KOHYA_2137 = """\
2025-06-29 12:14:41 INFO     epoch is incremented. current_epoch: 22, epoch: 23                        train_util.py:779
steps:  29%|████████████████▋                                         | 943/3280 [18:48<46:37,  1.20s/it, avr_loss=nan]
epoch 24/80

2025-06-29 12:15:30 INFO     epoch is incremented. current_epoch: 23, epoch: 24                        train_util.py:779
steps:  30%|█████████████████▍                                        | 984/3280 [19:38<45:48,  1.20s/it, avr_loss=nan]
epoch 25/80

2025-06-29 12:16:19 INFO     epoch is incremented. current_epoch: 24, epoch: 25                        train_util.py:779
steps:  31%|█████████████████▊                                       | 1025/3280 [20:27<45:00,  1.20s/it, avr_loss=nan]
epoch 26/80
"""  # noqa: E501


def test_kohya_avr_loss_is_the_training_loss(tmp_path: Path) -> None:
    # before: `avr_loss` was no name of the training loss: it kept its name, and the note
    # said the loss screen had no `loss` to read (the NaN run went unseen)
    fmt, m, w = _stored(tmp_path, KOHYA_2137)
    assert fmt == "generic_text"
    assert set(m["loss"]) == {943, 984, 1025}
    assert all(math.isnan(v) for v in m["loss"].values())
    assert m["s/it"][984] == 1.2
    assert "avr_loss" not in m and not {"s", "it"} & set(m)
    assert not any("no training loss" in x for x in w)


# ----- OpenRLHF SFT: `Train step of epoch E: ...| n/N [..., gpt_loss=..., lr=...]` -----------
# OpenRLHF's SFTTrainer draws `tqdm(desc="Train step of epoch %d" % epoch)` with the postfix
# `{"gpt_loss": ..., "loss_mean": ...}` (and lr, grad_norm in later versions), and evaluates
# under `tqdm(desc="Eval stage of steps %d" % global_step)` with `{"eval gpt_loss": ...}`
# (https://github.com/OpenRLHF/OpenRLHF/blob/main/openrlhf/trainer/sft_trainer.py). The
# lines `0/40`, `20/40` of epoch 0 and `40/40` of epoch 1 are quoted as printed in a public
# project's notes on an 8-GPU OpenRLHF SFT run (found by code search); the other lines are
# constructed in their shape, the step-30 update going to NaN.
OPENRLHF_SFT = """\
Train step of epoch 0:   0%|    | 0/40 [00:07<?, ?it/s, gpt_loss=1.37, lr=0, grad_norm=0]
Train step of epoch 0:  25%|█▌  | 10/40 [00:09<00:08, 3.63it/s, gpt_loss=1.41, lr=2.5e-6, grad_norm=14.1]
Train step of epoch 0:  50%|██▌ | 20/40 [00:14<00:04, 4.74it/s, gpt_loss=1.5, lr=4.53e-6, grad_norm=12.6]
Train step of epoch 0:  75%|███▊| 30/40 [00:16<00:02, 4.74it/s, gpt_loss=nan, lr=4.1e-6, grad_norm=nan]
Eval stage of steps 40:  20%|▊   | 1/5 [00:00<00:01, 4.80it/s, eval gpt_loss=1.3]
Eval stage of steps 40: 100%|████| 5/5 [00:01<00:00, 4.80it/s, eval gpt_loss=1.12]
Train step of epoch 1:  25%|█▌  | 10/40 [00:02<00:06, 4.13it/s, gpt_loss=0.8, lr=2e-6, grad_norm=7.9]
Train step of epoch 1: 100%|████| 40/40 [00:09<00:00, 4.13it/s, gpt_loss=0.658, lr=5e-7, grad_norm=7.3]
"""  # noqa: E501


def test_openrlhf_sft_bar_gpt_loss_and_eval_stage(tmp_path: Path) -> None:
    # before: `gpt_loss` kept its name (the note said the loss screen had no `loss`), the
    # epoch of the bar's description was a metric `train_step_of_epoch`, and the
    # evaluation bar's lines were ignored (no step and metric found): its loss was lost.
    # The bar counts the epoch's batches (micro-steps; with gradient accumulation the
    # evaluation's step counts optimizer steps, so it lands earlier than it ran)
    fmt, m, w = _stored(tmp_path, OPENRLHF_SFT)
    assert fmt == "generic_text"
    assert m["loss"][10] == 1.41 and m["loss"][20] == 1.5 and math.isnan(m["loss"][30])
    assert m["loss"][50] == 0.8 and m["loss"][80] == 0.658
    assert math.isnan(m["grad_norm"][30]) and m["lr"][20] == 4.53e-06
    assert m["epoch"] == {0: 0.0, 10: 0.0, 20: 0.0, 30: 0.0, 50: 1.0, 80: 1.0}
    assert m["val_loss"] == {40: 1.12}  # the evaluation's last redraw: its whole mean
    assert not {"gpt_loss", "train_step_of_epoch", "eval_gpt_loss"} & set(m)
    assert not any("no training loss" in x for x in w)


# ----- timm train.py: `Train: E [ b/N ( p%)]  Loss: x (avg)  Time: ...  LR: ...` -------------
# Quoted as printed in https://github.com/huggingface/pytorch-image-models/issues/814
# (NaNs training mobilenetv3_large_100).
TIMM_814 = """\
Train: 1 [ 350/5004 (  7%)]  Loss:  6.732388 (6.8414)  Time: 1.271s,  201.43/s  (0.608s,  420.96/s)  LR: 2.133e-02  Data: 1.056 (0.403)
Train: 1 [ 400/5004 (  8%)]  Loss:  6.717005 (6.8258)  Time: 0.214s, 1197.18/s  (0.608s,  421.14/s)  LR: 2.133e-02  Data: 0.013 (0.402)
Train: 1 [ 450/5004 (  9%)]  Loss:  6.773242 (6.8139)  Time: 0.216s, 1185.73/s  (0.604s,  423.61/s)  LR: 2.133e-02  Data: 0.019 (0.399)
Train: 1 [ 500/5004 ( 10%)]  Loss:  6.672601 (6.8047)  Time: 0.222s, 1152.46/s  (0.603s,  424.46/s)  LR: 2.133e-02  Data: 0.024 (0.398)
Train: 1 [ 550/5004 ( 11%)]  Loss:  6.683769 (6.7920)  Time: 0.226s, 1133.41/s  (0.600s,  426.35/s)  LR: 2.133e-02  Data: 0.013 (0.395)
Train: 1 [ 600/5004 ( 12%)]  Loss:  6.577158 (6.7788)  Time: 0.583s,  439.04/s  (0.600s,  426.64/s)  LR: 2.133e-02  Data: 0.371 (0.395)
"""  # noqa: E501


def test_timm_train_lines_count_batches_over_epochs(tmp_path: Path) -> None:
    # regression: read right already (the batch counted over epochs of 5004, the step's
    # own loss, not the running mean in parentheses)
    fmt, m, w = _stored(tmp_path, TIMM_814)
    assert fmt == "generic_text"
    assert m["loss"] == {
        5354: 6.732388, 5404: 6.717005, 5454: 6.773242,
        5504: 6.672601, 5554: 6.683769, 5604: 6.577158,
    }  # fmt: skip
    assert set(m["lr"].values()) == {0.02133}
    assert not {"s", "it", "m"} & set(m)


# ----- diffusers/DreamBooth: `Steps: ...| n/N [..., loss=nan, lr=1e-6]` ----------------------
# Quoted as printed in https://github.com/replicate/dreambooth/issues/31 (SD 2.1, NaN from
# the first step; diffusers' train_dreambooth.py bar).
DREAMBOOTH_31 = """\
0%|          | 0/100 [00:00<?, ?it/s]
Steps:   0%|          | 0/100 [00:00<?, ?it/s]
Steps:   0%|          | 0/100 [00:09<?, ?it/s, loss=nan, lr=1e-6]
Steps:   1%|          | 1/100 [00:09<16:00,  9.70s/it, loss=nan, lr=1e-6]
Steps:   2%|▏         | 2/100 [00:09<06:47,  4.16s/it, loss=nan, lr=1e-6]
Steps:   3%|▎         | 3/100 [00:10<03:51,  2.39s/it, loss=nan, lr=1e-6]
"""


def test_diffusers_dreambooth_steps_bar(tmp_path: Path) -> None:
    # regression: read right already (the bar's counter is the step, NaN kept)
    fmt, m, w = _stored(tmp_path, DREAMBOOTH_31)
    assert fmt == "generic_text"
    assert set(m["loss"]) == {0, 1, 2, 3}
    assert all(math.isnan(v) for v in m["loss"].values())
    assert m["lr"][3] == 1e-06 and m["s/it"][1] == 9.7


# ----- DeiT / MAE / ConvNeXt `log.txt`: one JSON line an epoch ----------------------------------
# Quoted as printed in https://github.com/yuhuan-wu/P2T/issues/13 (its ImageNet training log,
# written by the DeiT main.py loop that MAE, ConvNeXt and BEiT copy: `train_` and `test_`
# prefixed epoch averages, the evaluation's only every few epochs).
DEIT_P2T_13 = """\
{"train_lr": 8.159469122054745e-05, "train_loss": 3.20298746091237, "epoch": 249, "n_parameters": 11590840}
{"train_lr": 7.893269663304691e-05, "train_loss": 3.195464231282306, "test_loss": 0.9325173419554115, "test_acc1": 78.83600243652344, "test_acc5": 94.46600252929687, "epoch": 250, "n_parameters": 11590840}
{"train_lr": 7.631742512670381e-05, "train_loss": 3.201913250888661, "epoch": 251, "n_parameters": 11590840}
{"train_lr": 7.37491634955067e-05, "train_loss": 3.19635313899397, "epoch": 252, "n_parameters": 11590840}
"""  # noqa: E501


def test_deit_log_txt_train_lr_is_the_learning_rate(tmp_path: Path) -> None:
    # before: `train_lr` was no name of the learning rate: it was stored as a metric
    # `train_lr`, and the LR screen had no `lr` to read (`train_loss` was `loss` already)
    fmt, m, w = _stored(tmp_path, DEIT_P2T_13, name="log.txt")
    assert fmt == "jsonl"
    assert m["lr"][1] == 8.159469122054745e-05 and m["lr"][4] == 7.37491634955067e-05
    assert m["loss"][2] == 3.195464231282306 and m["test_loss"] == {2: 0.9325173419554115}
    assert m["epoch"][4] == 252.0 and "train_lr" not in m


# ----- DeepSpeed-Chat step 3 (PPO): the reward on a line of its own under each step --------------
# Quoted as printed in https://github.com/deepspeedai/DeepSpeedExamples/issues/444 (Inf actor
# and critic losses in step 3): session 7's two steps (test_issue_formats_s7.DSCHAT_444) and the
# step after them, quoted from the same issue.
DSCHAT_444_3 = (
    DSCHAT_444
    + """\
-------------------------------------------------------------------------------------
|E2E latency=2.16s |Gather latency=0.00s (0.00%) |Generate time=1.64s (76.19%) |Training time=0.42s (19.25%) |Others=0.10 (4.56%)|CurSamplesPerSec=1.85 |AvgSamplesPerSec=1.95
epoch: 0|step: 3185|ppo_ep: 1|act_loss: inf|cri_loss: inf|unsuper_loss: 0.0
average reward score: -4.54296875
-------------------------------------------------------------------------------------
"""  # noqa: E501
)


def test_deepspeed_chat_reward_line_belongs_to_the_step(tmp_path: Path) -> None:
    # before: `average reward score: -7.8` had no step and was ignored (no step and metric
    # found): the reward was lost. The actor's and critic's losses keep their names (no
    # `loss`, as before: two models, each on its own objective)
    fmt, m, w = _stored(tmp_path, DSCHAT_444_3)
    assert fmt == "generic_text"
    assert m["average_reward_score"] == {3183: -7.80859375, 3184: -6.359375, 3185: -4.54296875}
    assert m["act_loss"][3183] == 30.921875 and math.isinf(m["act_loss"][3184])
    assert math.isinf(m["cri_loss"][3185]) and "loss" not in m
