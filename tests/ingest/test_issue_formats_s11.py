"""Training-log styles quoted in public GitHub issues (seventh batch), one test per style.

Each fixture quotes the lines as printed in the issue or pull request (URL beside it); where a
test needs a longer run, the lines after the quoted ones are written in the same format. The
tests check what the ingest stores (and, for a spike and a NaN, what analyze reports) through
the library path the CLI calls, and each says what the tool did before.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import pytest
from issue_log_helpers import stored as _stored

from forensics.analyze import AnalyzeOptions, analyze

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")

# ----- NeMo 1 (Megatron GPT) Lightning progress bar -----------------------------------------------
# Captured to a file, a tqdm bar keeps every redraw on one physical line, `\r` between them.
# Lightning's own running `loss` is NaN (NeMo's step does not feed it); the loss is
# `reduced_train_loss`, the step `global_step`, printed as a float (`564.0`).
_NEMO1_REDRAWS = [
    "Epoch 0:   3%|▎         | 565/20101 [2:12:19<76:15:08, 14.05s/it, loss=nan, v_num=, val_loss_step=11.30, reduced_train_loss=3.910, gradient_norm=1.010, parameter_norm=1552.0, global_step=564.0, consumed_samples=1.45e+5, throughput=19.00, ",  # noqa: E501
    "Epoch 0:   3%|▎         | 566/20101 [2:12:32<76:14:33, 14.05s/it, loss=nan, v_num=, val_loss_step=11.30, reduced_train_loss=3.910, gradient_norm=1.010, parameter_norm=1552.0, global_step=564.0, consumed_samples=1.45e+5, throughput=19.00, ",  # noqa: E501
    "Epoch 0:   3%|▎         | 566/20101 [2:12:32<76:14:33, 14.05s/it, loss=nan, v_num=, val_loss_step=11.30, reduced_train_loss=4.000, gradient_norm=1.010, parameter_norm=1544.0, global_step=565.0, consumed_samples=1.45e+5, throughput=19.00, ",  # noqa: E501
    "Epoch 0:   3%|▎         | 567/20101 [2:12:45<76:14:00, 14.05s/it, loss=nan, v_num=, val_loss_step=11.30, reduced_train_loss=4.000, gradient_norm=1.010, parameter_norm=1544.0, global_step=565.0, consumed_samples=1.45e+5, throughput=19.00, ",  # noqa: E501
]  # https://github.com/aws-neuron/neuronx-nemo-megatron/pull/28


def test_nemo1_progress_bar_reads_global_step_and_reduced_train_loss(tmp_path: Path) -> None:
    # before: `global_step=564.0` was not an integer, so no line was a record ("no metric log
    # found"); with the step read, Lightning's placeholder `loss=nan` won over
    # `reduced_train_loss` (the canonical name beats an alias) and every loss was NaN
    fmt, m, w = _stored(tmp_path, "\r".join(_NEMO1_REDRAWS) + "\n")
    assert fmt == "generic_text"
    assert m["loss"] == {564: 3.910, 565: 4.000}
    assert m["grad_norm"] == {564: 1.010, 565: 1.010}
    assert m["param_norm"] == {564: 1552.0, 565: 1544.0}
    assert m["consumed_samples"][565] == 1.45e5
    placeholder = m["loss_(placeholder)"]  # kept, under a name that says what it is
    assert set(placeholder) == {564, 565} and all(math.isnan(v) for v in placeholder.values())
    assert any("placeholder" in x and "reduced_train_loss" in x for x in w)


def test_a_name_nan_on_every_line_is_still_a_nan_loss_without_another_name(
    tmp_path: Path,
) -> None:
    # the placeholder rule needs a second name that carries values: a run whose only loss
    # is NaN diverged, and its NaNs are the evidence
    text = "".join(f"step {s} | loss nan | grad_norm {1.0 + s / 100:.2f}\n" for s in range(1, 6))
    _, m, w = _stored(tmp_path, text)
    assert set(m["loss"]) == {1, 2, 3, 4, 5} and all(math.isnan(v) for v in m["loss"].values())
    assert not any("placeholder" in x for x in w)


# ----- torchtune DiskLogger -----------------------------------------------------------------------
TORCHTUNE_1358 = """\
Step 1 | loss:2.085338592529297 lr:2e-05 tokens_per_second_per_gpu:57.828881833956174
Step 2 | loss:1.8718312978744507 lr:2e-05 tokens_per_second_per_gpu:405.044978758513
Step 3 | loss:1.1732845306396484 lr:2e-05 tokens_per_second_per_gpu:655.9372371931469
Step 4 | loss:1.1244843006134033 lr:2e-05 tokens_per_second_per_gpu:417.49818620797487
Step 5 | loss:0.9739330410957336 lr:2e-05 tokens_per_second_per_gpu:414.73347397639026
Step 6 | loss:0.8440025448799133 lr:2e-05 tokens_per_second_per_gpu:345.44944748351764
Step 7 | loss:0.9451338052749634 lr:2e-05 tokens_per_second_per_gpu:408.6546853024294
Step 8 | loss:0.8629082441329956 lr:2e-05 tokens_per_second_per_gpu:402.3016704011016
Step 9 | loss:0.6810362935066223 lr:2e-05 tokens_per_second_per_gpu:698.9489335304891
Step 10 | loss:1.0359036922454834 lr:2e-05 tokens_per_second_per_gpu:962.2259327743811
Step 11 | loss:1.0432602167129517 lr:2e-05 tokens_per_second_per_gpu:477.88804137904646
Step 12 | loss:1.1174635887145996 lr:2e-05 tokens_per_second_per_gpu:542.9797193194343
"""  # https://github.com/meta-pytorch/torchtune/pull/1358 (log_1723844072.txt)


def _torchtune_run(folder: Path) -> Path:
    """The quoted steps, then the same format to step 80: a one-step spike at 40 (back at
    41), the loss NaN from 65 to the end."""
    lines = [TORCHTUNE_1358]
    for s in range(13, 81):
        loss = 0.95 + 0.08 * math.sin(1.7 * s)
        text = "nan" if s >= 65 else repr(5.9 if s == 40 else loss)
        lines.append(f"Step {s} | loss:{text} lr:2e-05 tokens_per_second_per_gpu:500.0\n")
    folder.mkdir()
    (folder / "log_1723844072.txt").write_text("".join(lines), encoding="utf-8")
    return folder


def test_a_healed_spike_and_a_later_nan_are_two_incidents_and_both_are_reported(
    tmp_path: Path,
) -> None:
    # before: the spike at 40 was typed divergent because the loss went non-finite inside
    # its recovery window, so the NaN from 65 was folded into it (one "divergent" incident
    # from step 40, the NaN as its second peak), and writing that post-mortem crashed on the
    # NaN peak (stored as null): `float(None)` in report/incident.stretches
    run = _torchtune_run(tmp_path / "torchtune")
    out = tmp_path / "out"
    analyze(run, out, options=AnalyzeOptions(replay=False, report=True))
    with duckdb.connect(str(out / "forensics.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT onset_step, peak_step, end_step, type FROM incidents ORDER BY onset_step"
        ).fetchall()
    assert rows == [(40, 40, 41, "recoverable"), (65, 65, None, "divergent")]
    listed = json.loads((out / "incidents.json").read_text())
    assert len(listed["incidents"] if isinstance(listed, dict) else listed) == 2
    pages = sorted((out / "postmortems").glob("*.md"))
    assert len(pages) == 2
    assert "NaN" in pages[1].read_text()


# ----- Hugging Face Trainer's stdout under DeepSpeed fp16 -----------------------------------------
# the lines of ymcui/Chinese-LLaMA-Alpaca#534 (DeepSpeed fp16 under the HF Trainer, stdout):
# the bar redrawn each step, DeepSpeed's overflow record glued to it, a dict every 10 steps
_BAR = " 14%|█▍        | {s}/2724 [14:00:21<86:09:52, 132.28s/it]"
_OVERFLOW = (
    "[2023-06-07 22:18:11,762] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
    "Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}"
)
_DICT = "{{'loss': {loss}, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}}"


def _deepspeed_stdout(folder: Path) -> Path:
    """Steps 300-390: a one-window spike at 350 (back at 360), then the scaler halving from
    65536 at every step from 375 down to 1, and the window at 390 printed `'loss': 0.0`."""
    lines, scale = [], 65536
    for s in range(300, 391):
        bar = _BAR.format(s=s)
        if s >= 375:
            lines.append(bar + _OVERFLOW.format(a=scale, b=scale // 2))
            scale //= 2
        else:
            lines.append(bar)
        if s % 10 == 0:
            loss = "0.0" if s == 390 else "4.8812" if s == 350 else f"{2.3 - 0.004 * (s - 300):.4f}"
            lines += ["", _DICT.format(loss=loss), ""]
    lines.append(
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore."
    )
    folder.mkdir()
    (folder / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_deepspeed_stdout_spike_then_scaler_collapse_are_two_incidents(tmp_path: Path) -> None:
    # before: the 0.0 loss at 390 was stored as 0.0, so the whole loss screen left its log
    # scale (the post-mortem's pre-spike trend read 0.98 for a loss near 2.2) and the spike
    # at 350 swallowed the scaler's collapse: one incident
    out = tmp_path / "out"
    analyze(_deepspeed_stdout(tmp_path / "ds"), out, options=AnalyzeOptions(replay=False))
    with duckdb.connect(str(out / "forensics.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT onset_step, peak_step, end_step, type, cause, pre_value FROM incidents "
            "ORDER BY onset_step"
        ).fetchall()
        (last,) = con.execute(
            "SELECT value FROM metrics WHERE metric = 'loss' AND step = 390"
        ).fetchall()
    # the overflow glued to the bar of step 375 interrupted the step after it: 376
    assert [r[:4] for r in rows] == [(350, 350, 360, "recoverable"), (376, 390, None, "divergent")]
    assert rows[1][4] == "fp16_overflow"
    assert 2.0 < rows[0][5] < 2.4  # the pre-spike trend, in the loss's own units
    assert math.isnan(last[0])


# ----- PyTorch Lightning 1.x progress bar ---------------------------------------------------------
LIGHTNING_4225 = [
    "Epoch 0:   0%|          | 0/18 [00:00<?, ?it/s] ",
    "Epoch 0:   6%|▌         | 1/18 [00:08<02:29,  8.77s/it]",
    "Epoch 0:   6%|▌         | 1/18 [00:08<02:29,  8.77s/it, loss=10.473, v_num=193315]",
    "Epoch 0:  11%|█         | 2/18 [00:11<01:33,  5.82s/it, loss=10.473, v_num=193315]",
    "Epoch 0:  11%|█         | 2/18 [00:11<01:33,  5.82s/it, loss=10.224, v_num=193315]",
    "Epoch 0:  17%|█▋        | 3/18 [00:14<01:13,  4.87s/it, loss=10.224, v_num=193315]",
    "Epoch 0:  17%|█▋        | 3/18 [00:14<01:13,  4.87s/it, loss=10.047, v_num=193315]",
]  # https://github.com/Lightning-AI/pytorch-lightning/issues/4225 (its `\r` redraws)


def _lightning_bar() -> str:
    """The quoted redraws, then epochs 0-2 of 18 bar positions in the same layout, with
    what `self.log(..., prog_bar=True)` adds: the step's `train_loss_step`, and from epoch 1
    on the last validation's `val_loss` (a second kind of line that first appears there)."""
    lines = list(LIGHTNING_4225)
    for epoch in range(3):
        for n in range(4 if epoch == 0 else 1, 19):
            own = 9.0 if (epoch, n) == (1, 9) else 4.0 + 0.01 * n
            val = "" if epoch == 0 else ", val_loss=4.110"
            lines.append(
                f"Epoch {epoch}:  50%|█████     | {n}/18 [00:14<01:13,  4.87s/it, "
                f"loss=4.{n:03d}, v_num=193315, train_loss_step={own:.3f}{val}]"
            )
    return "\r".join(lines) + "\n"


def test_lightning_bar_counts_epochs_from_0_and_reads_the_step_loss(tmp_path: Path) -> None:
    # before: epoch 1's lines (which carry `val_loss=`, a kind of line epoch 0 never
    # printed) counted their epochs from their own first, 1, so they overwrote epoch 0's
    # steps (reported as a rollback); and the bar's `loss=` (Lightning's running mean of 20
    # batches) won over the step's own `train_loss_step`, smearing the spike at epoch 1
    # batch 9 (step 18 + 9 = 27) into a slow bump
    _, m, w = _stored(tmp_path, _lightning_bar())
    assert sorted(m["loss"]) == list(range(1, 55))  # 3 epochs x 18 bar positions
    assert m["loss"][27] == 9.0 and m["loss"][26] == 4.08
    assert m["loss_(bar_running_mean)"][27] == 4.009
    assert m["val_loss"][19] == 4.110 and min(m["val_loss"]) == 19
    assert any("running mean" in x for x in w)
    assert not any("restart or resume" in x for x in w)


# ----- fairseq --log-format json ------------------------------------------------------------------
FAIRSEQ_JSON_FIRST = (
    '2021-03-08 12:31:36 | INFO | train_inner | {"epoch": 1, "update": 0.0, "loss": "16.475", '
    '"ppl": "91120.8", "wps": "0", "ups": "0", "wpb": "16384", "bsz": "8", "num_updates": "1", '
    '"lr": "2e-05", "gnorm": "20.751", "loss_scale": "4", "train_wall": "99", "gb_free": "9.3", '
    '"wall": "105"}'
)  # fairseq's docs (ZeRO-offload example of examples/megatron_11b, `--log-format json`)
FAIRSEQ_OVERFLOW = (
    "2021-08-13 14:58:53 | INFO | fairseq.trainer | NOTE: gradient overflow detected, "
    "ignoring gradient, setting loss scale to: 2.0"
)  # the trainer's line, as in the same logs
FAIRSEQ_VALID = (
    '2021-01-12 14:37:14 | INFO | valid | {"epoch": 1, "valid_loss": "8.751", '
    '"valid_nll_loss": "8.101", "valid_ppl": "274.56", "valid_wps": "202259", '
    '"valid_num_updates": "6"}'
)


def test_fairseq_json_progress_reads_quoted_numbers_at_num_updates(tmp_path: Path) -> None:
    # before: `"loss": "16.475"` (JsonProgressBar prints every stat as a string) gave no
    # key, so no line was a record: "format not recognised"
    lines = [FAIRSEQ_JSON_FIRST]
    for u, loss in ((2, "16.446"), (3, "16.310"), (4, "22.904"), (5, "16.052"), (6, "15.9")):
        lines.append(FAIRSEQ_JSON_FIRST.replace('"num_updates": "1"', f'"num_updates": "{u}"')
                     .replace('"loss": "16.475"', f'"loss": "{loss}"'))  # fmt: skip
        if u == 4:
            lines.append(FAIRSEQ_OVERFLOW)
    lines.append(FAIRSEQ_VALID)
    fmt, m, _ = _stored(tmp_path, "\n".join(lines) + "\n")
    assert fmt == "generic_text"
    assert m["loss"] == {1: 16.475, 2: 16.446, 3: 16.310, 4: 22.904, 5: 16.052, 6: 15.9}
    assert m["grad_norm"][1] == 20.751 and m["loss_scale"][6] == 4.0 and m["lr"][3] == 2e-05
    assert m["val_loss"] == {6: 8.751}  # the valid record, at the update before it
    assert sum(m["overflow"].values()) == 1


# ----- timm train.py ------------------------------------------------------------------------------
TIMM = """\
Train: 12 [1200/1251 ( 96%)]  Loss: 6.86 (6.89)  Time: 0.401s,  638.40/s  (0.412s,  621.36/s)  LR: 9.955e-04  Data: 0.012 (0.015)
Train: 12 [1250/1251 (100%)]  Loss: 6.84 (6.89)  Time: 0.398s,  643.22/s  (0.412s,  621.36/s)  LR: 9.955e-04  Data: 0.012 (0.015)
Test: [   0/195]  Time: 0.913 (0.913)  Loss:  5.296 ( 5.296)  Acc@1:  4.6875 ( 4.6875)  Acc@5: 14.0625 (14.0625)
Test: [  50/195]  Time: 0.213 (0.230)  Loss:  5.331 ( 5.310)  Acc@1:  3.9062 ( 4.2178)  Acc@5: 13.2812 (13.6949)
Train: 13 [   0/1251 (  0%)]  Loss: 6.83 (6.83)  Time: 0.399s,  641.83/s  (0.399s,  641.83/s)  LR: 9.954e-04  Data: 0.012 (0.012)
"""  # noqa: E501  timm's train.py (`_logger.info` of train_one_epoch and validate)


def test_timm_test_lines_keep_their_loss_out_of_the_training_loss(tmp_path: Path) -> None:
    # before: `Test: [  50/195]` named its counter `Test`, and a key is not a word that says
    # what kind of line it is, so the evaluation's `Loss: 5.331` joined the training loss
    # (its step axis, epoch x batch, is not read yet: the train lines are numbered in order)
    _, m, _ = _stored(tmp_path, TIMM)
    assert m["loss"] and all(v > 6.8 for v in m["loss"].values())
    # the evaluation's running mean `( 5.310)`, not the batch's own `5.331` (test s40)
    assert m["test_loss"] and all(v in (5.296, 5.31) for v in m["test_loss"].values())


def test_timm_train_lines_count_batches_over_epochs_from_epoch_0(tmp_path: Path) -> None:
    # before: `Train: 12 [1200/1251 ( 96%)]` was read as a metric `Train` = 12 with no step,
    # the records numbered 1, 2, 3 in file order. timm's epochs count from 0 (`range(
    # start_epoch, num_epochs)`), so epoch 12's batch 1200 is update 12 x 1251 + 1200 even
    # in a log that starts at epoch 12; the evaluation after it belongs to the epoch's end
    _, m, _ = _stored(tmp_path, TIMM)
    assert m["loss"] == {16212: 6.86, 16262: 6.84, 16263: 6.83}
    assert set(m["test_loss"]) == {16262} and m["test_loss"][16262] == 5.31
    assert "train" not in {k.lower() for k in m} and "test" not in {k.lower() for k in m}
    assert m["lr"][16263] == 9.954e-04


# ----- mmengine / mmdetection evaluation loops ---------------------------------------------
_MME_TRAIN = (
    "08/03 21:32:{s:02d} - mmengine - INFO - Epoch(train)  [{e}][{i:4d}/2931]  lr: 2.0000e-02  "
    "eta: 0:03:00  time: 0.0572  data_time: 0.0017  memory: 2389  loss: {loss}  "
    "loss_rpn_cls: 0.2084  loss_cls: 0.4510  acc: 92.1032"
)
_MME_VAL = (
    "08/03 21:33:{s:02d} - mmengine - INFO - Epoch(val)  [{e}][{i:4d}/1000]    eta: 0:01:00  "
    "time: 0.0638  data_time: 0.0020  memory: 797  "
)
_MME_SUMMARY = (
    "08/03 21:33:52 - mmengine - INFO - Epoch(val) [{e}][1000/1000]    coco/bbox_mAP: {m}  "
    "coco/bbox_mAP_50: 0.4100  data_time: 0.0020  time: 0.0638"
)  # layout of open-mmlab/mmdetection#11893 and jbwang1997/CrossKD#15


def _mmengine_epoch(e: int, m: float) -> list[str]:
    lines = [_MME_TRAIN.format(s=i // 100, e=e, i=i, loss=0.9) for i in (2800, 2850, 2900)]
    lines += [
        "08/03 21:32:48 - mmengine - INFO - Exp name: faster-rcnn_r50_fpn_1x_coco_20240803",
        f"08/03 21:32:48 - mmengine - INFO - Saving checkpoint at {e} epochs",
    ]
    lines += [_MME_VAL.format(s=i // 50, e=e, i=i) for i in (50, 100, 150)]
    return [*lines, _MME_SUMMARY.format(e=e, m=m)]


def test_mmengine_val_loop_is_no_training_step(tmp_path: Path) -> None:
    # before: `Epoch(val) [1][ 50/1000]` was counted as training step 50 of a 1000-step
    # epoch: its time/data_time/memory overwrote the training ones (a 'restart' note), and
    # the mAP summary landed at step 1000 of the val axis instead of the epoch's end
    _, m, w = _stored(tmp_path, "\n".join(_mmengine_epoch(1, 0.25) + _mmengine_epoch(2, 0.31)))
    assert m["loss"] == {2800: 0.9, 2850: 0.9, 2900: 0.9, 5731: 0.9, 5781: 0.9, 5831: 0.9}
    assert m["val/coco/bbox_map"] == {2900: 0.25, 5831: 0.31}  # the training step before it
    assert set(m["memory"].values()) == {2389.0} and set(m["time"].values()) == {0.0572}
    assert not any("restart or resume" in x for x in w)


def test_mmdet2_val_summary_belongs_to_the_epoch_end(tmp_path: Path) -> None:
    # mmdetection 2.x (open-mmlab/mmdetection#3446): `Epoch(val) [3][5000]` with no total;
    # before, it was no record and its mAP was lost
    train = (
        "2020-07-31 21:53:16,301 - mmdet - INFO - Epoch [3][{i}/1749]\tlr: 2.000e-02, eta: "
        "8:20:00, time: 1.911, data_time: 0.004, memory: 5280, loss_rpn_cls: 0.2643, "
        "loss: {loss}, grad_norm: 3.1"
    )
    text = "\n".join(
        [train.format(i=i, loss=1.2) for i in (1600, 1650, 1700)]
        + [
            "2020-07-31 21:54:16,210 - mmdet - INFO - Saving checkpoint at 3 epochs",
            "2020-07-31 21:54:16,991 - mmdet - INFO - Epoch(val) [3][5000]\tbbox_mAP: 0.3300, "
            "bbox_mAP_50: 0.5300, bbox_mAP_copypaste: 0.3300 0.5300 0.3300 0.3300 0.3300 0.3300",
            train.replace("[3]", "[4]").format(i=50, loss=1.1),
        ]
    )
    _, m, _ = _stored(tmp_path, text + "\n")
    assert m["val/bbox_map"] == {2 * 1749 + 1700: 0.33} and m["val/bbox_map_50"] == {5198: 0.53}
    assert not any("epoch" in k.lower() for k in m)  # no `Epoch(val)` counter as a metric
    assert m["loss"][3 * 1749 + 50] == 1.1


# ----- PaddleNLP (ERNIE pre-training) -----------------------------------------------------------
PADDLENLP_3867 = """\
[2022-11-23 09:46:28,799] [    INFO] - global step 2000, loss: 8.075826, lm_loss: 7.379850, sop_loss: 0.695985, speed: 2.88 steps/s, ips: 92.20 seqs/s, learning rate: 5.00000e-06, loss_scaling: 131072.00, incr_count: 0.00, decr_count: 0.00
[2022-11-23 09:46:31,176] [    INFO] - valid step 2000, batch: 10, loss: 7.448310, lm_loss: 6.745527, sop_loss: 0.702782, ips: 135 seqs/s
[2022-11-23 09:52:19,596] [    INFO] - global step 3000, loss: 7.211366, lm_loss: 6.515039, sop_loss: 0.696318, speed: 2.87 steps/s, ips: 91.84 seqs/s, learning rate: 7.50000e-06, loss_scaling: 262144.00, incr_count: 0.00, decr_count: 0.00
[2022-11-23 09:52:21,581] [    INFO] - valid step 3000, batch: 10, loss: 7.004147, lm_loss: 6.310410, sop_loss: 0.693736, ips: 161 seqs/s
[2022-11-23 09:58:07,013] [    INFO] - global step 4000, loss: 6.933494, lm_loss: 6.236543, sop_loss: 0.696950, speed: 2.89 steps/s, ips: 92.64 seqs/s, learning rate: 1.00000e-05, loss_scaling: 262144.00, incr_count: 70.00, decr_count: 0.00
"""  # noqa: E501  https://github.com/PaddlePaddle/PaddleNLP/issues/3867


def test_paddlenlp_valid_lines_keep_their_loss_apart(tmp_path: Path) -> None:
    # before: `valid step 2000, ..., loss: 7.448310` shared the training line's step and, read
    # last, replaced its loss (8.075826): every stored `loss` was the validation loss, and
    # `valid step` was a metric; `loss_scaling` was not the loss scale
    _, m, _ = _stored(tmp_path, PADDLENLP_3867)
    assert m["loss"] == {2000: 8.075826, 3000: 7.211366, 4000: 6.933494}
    assert m["val_loss"] == {2000: 7.448310, 3000: 7.004147}
    assert m["loss_scale"] == {2000: 131072.0, 3000: 262144.0, 4000: 262144.0}
    assert not any("step" in k for k in m)
