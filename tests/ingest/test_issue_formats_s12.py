"""Training-log styles quoted in public GitHub issues (eighth batch), one test per style.

Each fixture quotes the lines as printed in the issue (URL beside it); where a test needs a
longer run, the lines after the quoted ones are written in the same format. Each test says
what the tool did before.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pytest
from issue_log_helpers import stored as _stored

from forensics.analyze import AnalyzeOptions, analyze

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")


def _analyzed(tmp_path: Path, name: str, text: str, *, report: bool = False) -> Path:
    """Analyze a run folder holding `text` as its log `name`; the output folder."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / name).write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    analyze(run, out, options=AnalyzeOptions(replay=False, report=report))
    return out


def _rows(out: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(out / "forensics.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


# ----- baby-llama2-chinese (DLLXW/baby-llama2-chinese#17) -----------------------------------------
# `Epoch:[0/2](7000/293491)`: the epoch and, in parentheses, the batch within it; the
# loss turned NaN at batch 7000 and stayed there.
_BABY = [
    "[2023-08-30 16:04:47,404][pretrain.py][INFO] Epoch:[0/2](0/293491) loss:11.271 lr:0.0000000 epoch_Time:137483.0min:",  # noqa: E501
    "[2023-08-30 16:08:27,427][pretrain.py][INFO] Epoch:[0/2](1000/293491) loss:6.268 lr:0.0001000 epoch_Time:1208.0min:",  # noqa: E501
    "[2023-08-30 16:12:01,041][pretrain.py][INFO] Epoch:[0/2](2000/293491) loss:5.627 lr:0.0001000 epoch_Time:1121.0min:",  # noqa: E501
    "[2023-08-30 16:15:35,618][pretrain.py][INFO] Epoch:[0/2](3000/293491) loss:4.548 lr:0.0000999 epoch_Time:1091.0min:",  # noqa: E501
    "[2023-08-30 16:19:08,321][pretrain.py][INFO] Epoch:[0/2](4000/293491) loss:4.591 lr:0.0000997 epoch_Time:1072.0min:",  # noqa: E501
    "[2023-08-30 16:22:43,731][pretrain.py][INFO] Epoch:[0/2](5000/293491) loss:4.309 lr:0.0000994 epoch_Time:1062.0min:",  # noqa: E501
    "[2023-08-30 16:26:16,924][pretrain.py][INFO] Epoch:[0/2](6000/293491) loss:4.294 lr:0.0000991 epoch_Time:1053.0min:",  # noqa: E501
    "[2023-08-30 16:29:49,699][pretrain.py][INFO] Epoch:[0/2](7000/293491) loss:nan lr:0.0000987 epoch_Time:1044.0min:",  # noqa: E501
    "[2023-08-30 16:33:33,730][pretrain.py][INFO] Epoch:[0/2](8000/293491) loss:nan lr:0.0000983 epoch_Time:1043.0min:",  # noqa: E501
]


def test_baby_llama2_reads_the_batch_in_parentheses_as_the_step(tmp_path: Path) -> None:
    # before: "no metric log found" (the `(N/M)` counter was taken for an annotation of the
    # value before it, and `) loss` was no key)
    fmt, m, _ = _stored(tmp_path, "\n".join(_BABY) + "\n")
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == list(range(0, 9000, 1000))
    assert m["loss"][6000] == 4.294
    assert math.isnan(m["loss"][7000]) and math.isnan(m["loss"][8000])
    assert m["lr"][1000] == 0.0001


def test_baby_llama2_batches_are_counted_over_epochs(tmp_path: Path) -> None:
    # the batch index starts again each epoch (`enumerate(train_loader)`), 293491 a epoch
    later = [
        line.replace("Epoch:[0/2](", "Epoch:[1/2](").replace("loss:nan", "loss:3.900")
        for line in _BABY[:3]
    ]
    _, m, _ = _stored(tmp_path, "\n".join(_BABY[:7] + later) + "\n")
    assert sorted(m["loss"]) == [*range(0, 7000, 1000), 293491, 294491, 295491]


# ----- LION's loguru lines (nv-tlabs/LION#9) ------------------------------------------------------
_LION = (
    "2023-01-25 00:21:09.074 | INFO     | trainers.base_trainer:train_epochs:256 - [R0] | E{e} "
    "iter[ 14/ 15] | [Loss] {loss} | [exp] ./exp/0125/car/3dbf3ah_hvae_lion_B40 | [step] "
    "{step:>5} | [url] none | [time] 0.4m (~5h) |[best] 0 -100.000x1e-2 "
)


def test_lion_epoch_token_makes_one_template_not_one_per_epoch(tmp_path: Path) -> None:
    # before: `E5`, `E6`, ... (a letter glued to the epoch) made each epoch's line a template
    # of its own: 12 "generic reader: ... from 1 lines like '| E5 iter[...'" warnings
    losses = [8002.09, 7593.01, 7071.58, 6591.03, 6096.40, 51566519.44] + ["nan"] * 6
    lines = [_LION.format(e=e, loss=x, step=14 + 15 * e) for e, x in enumerate(losses)]
    _, m, w = _stored(tmp_path, "\n".join(lines) + "\n")
    assert sorted(m["loss"]) == [14 + 15 * e for e in range(12)]
    assert m["loss"][89] == 51566519.44 and math.isnan(m["loss"][104])
    assert len([x for x in w if "lines like" in x and "iter[" in x]) == 1


# ----- MiniLLM (microsoft/LMOps#130) --------------------------------------------------------
_MINILLM = (
    "train | data_epochs  0/10 | inner iter:   {i}/  8 | ppo epoch:  2/ 4 | global iter:  "
    "{g:>5}/  5000| tot_loss: {loss} | rl_loss: -1.0516 | pt_loss: 2.5786 | pg_loss: -1.0603 | "
    "reg_loss: 0.0087 | reward: 0.0116 | rev_kl: 0.0022 | stu_lens: 71.8750 | mixed_lens: "
    "63.2500 | lr: 8.5000e-07 | scale:  {scale:.2f} | time: 1.700 | step time: 0.000"
)
_DS_OVERFLOW = (
    "[2023-12-21 16:39:54,688] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! "
    "Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}"
)


def test_minillm_scale_moving_in_powers_of_two_is_the_loss_scale(tmp_path: Path) -> None:
    # before: `scale` was stored under its own name, the run had no `loss_scale`, and the
    # spike at iteration 28 (with the scaler's overflow before it) read as a hardware fault
    lines, scale = [], 32
    for g in range(20, 36):
        if g in (28, 30):
            lines.append(_DS_OVERFLOW.format(a=scale, b=scale // 2))
            scale //= 2
        loss = 2442.9075 if g == 28 else 1.9 + 0.01 * (g % 3)
        lines.append(_MINILLM.format(i=g % 8, g=g, loss=loss, scale=scale))
    _, m, w = _stored(tmp_path, "\n".join(lines) + "\n")
    assert "scale" not in m
    assert m["loss_scale"][27] == 32 and m["loss_scale"][28] == 16 and m["loss_scale"][35] == 8
    assert m["overflow"] == {28: 1.0, 30: 1.0}
    assert any("`scale` moves in powers of two (8 to 32)" in x for x in w)


def test_a_scale_that_is_not_a_power_of_two_keeps_its_name(tmp_path: Path) -> None:
    # an image or temperature scale, or a constant 1: not a loss scaler's
    for scales in ([0.75, 0.8, 1.25], [1.0, 1.0, 1.0]):
        text = "".join(
            f"step {s} | loss {2.0 - 0.01 * s:.3f} | scale {scales[s % 3]}\n" for s in range(12)
        )
        _, m, w = _stored(tmp_path, text)
        assert "loss_scale" not in m and len(m["scale"]) == 12
        assert not any("powers of two" in x for x in w)


# ----- PaddleNLP LLM trainer (PaddlePaddle/PaddleNLP#7537) --------------------------------------
_PADDLE = (
    "[2023-11-28 14:31:38,220] [    INFO] - loss: {loss:.8f}, learning_rate: 3e-05, "
    "global_step: {g}, interval_runtime: 4.3205, interval_samples_per_second: 3.642294, "
    "interval_steps_per_second: 0.2223244, ppl: 7.621436447011481, epoch: 0.0028"
)
_PADDLE_SKIP = [
    "[2023-11-28 14:31:29,583] [ WARNING] - optimizer not run, scale_before: 0.25, scale_after: 0.125",  # noqa: E501
    "[2023-11-28 14:31:29,586] [    INFO] - loss: 2.09252715, learning_rate: 0.0, global_step: 18, interval_runtime: 4.3468, interval_samples_per_second: 3.680853064067234, interval_steps_per_second: 0.23005331650420213, ppl: 8.10537279652747, epoch: 0.0025",  # noqa: E501
    "[2023-11-28 14:31:34,041] [ WARNING] - optimizer not run, scale_before: 0.125, scale_after: 0.0625",  # noqa: E501
    "[2023-11-28 14:31:34,045] [    INFO] - loss: 2.04623556, learning_rate: 0.0, global_step: 19, interval_runtime: 4.4585, interval_samples_per_second: 3.588644056739075, interval_steps_per_second: 0.2242902535461922, ppl: 7.738714279163156, epoch: 0.0027",  # noqa: E501
]


def test_paddlenlp_optimizer_not_run_is_a_skipped_step_that_halves_the_scale(
    tmp_path: Path,
) -> None:
    # before: "ignored (no step and metric found)": no overflow, no skip, no loss scale
    lines = [_PADDLE.format(loss=2.3 - 0.01 * g, g=g) for g in range(10, 18)] + _PADDLE_SKIP
    lines += [_PADDLE.format(loss=2.03, g=g) for g in range(20, 24)]
    _, m, w = _stored(tmp_path, "\n".join(lines) + "\n")
    assert m["overflow"] == {18: 1.0, 19: 1.0}
    assert m["loss_scale"] == {18: 0.125, 19: 0.0625}
    assert m["loss"][18] == 2.09252715
    assert not any("ignored" in x for x in w)


def test_paddlenlp_skipped_step_is_an_event_with_its_own_words(tmp_path: Path) -> None:
    lines = [_PADDLE.format(loss=2.3 - 0.01 * g, g=g) for g in range(10, 18)] + _PADDLE_SKIP
    out = _analyzed(tmp_path, "paddle.log", "\n".join(lines) + "\n")
    events = _rows(out, "SELECT step, kind, detail FROM events ORDER BY step")
    assert events == [
        (18, "overflow", "optimizer not run, scale_before: 0.25, scale_after: 0.125"),
        (19, "overflow", "optimizer not run, scale_before: 0.125, scale_after: 0.0625"),
    ]


# ----- llama-recipes (meta-llama/llama-cookbook#300) -------------------------------------------
_RECIPES_BAR = (
    "Training Epoch: {e}/150, step {i}/64 completed (loss: {loss}):  95%|█████████| "
    "{n}/64 [00:59<03:00,  3.78s/it]"
)
_RECIPES_EPOCH_END = [
    "Max CUDA memory allocated was 1 GB",
    "Max CUDA memory reserved was 1 GB",
    "Peak active CUDA memory was 1 GB",
    "Cuda Malloc retires : 0",
    "CPU Total Peak Memory consumed during the train (max): 14 GB",
    "evaluating Epoch: 100%|██████████| 200/200 [01:53<00:00,  1.77it/s]",
    " eval_ppl=tensor({ppl}, device='cuda:0') eval_epoch_loss=tensor({eloss}, device='cuda:0')",
    "Epoch {e}: train_perplexity={tppl}, train_epoch_loss={tloss}, epoch time 242.3404811769724s",
]


def _recipes(folder: Path) -> Path:
    """Four epochs of 64 steps; the last epoch's summary says NaN (the issue's last lines)."""
    lines = []
    for e in range(1, 5):
        for i in range(64):
            loss = 0.2 + 0.5 * math.exp(-(64 * (e - 1) + i) / 60)
            lines.append(_RECIPES_BAR.format(e=e, i=i, loss=round(loss, 6), n=i + 1))
        nan = e == 4
        lines += [
            x.format(
                e=e,
                ppl="nan" if nan else "1.3851",
                eloss="nan" if nan else "0.2806",
                tppl="nan" if nan else "1.3357",
                tloss="nan" if nan else "0.2270",
            )
            for x in _RECIPES_EPOCH_END
        ]
    folder.mkdir()
    (folder / "finetune.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_llama_recipes_epoch_summary_is_kept_at_the_epochs_last_step(tmp_path: Path) -> None:
    # before: `Epoch 4: train_perplexity=nan, train_epoch_loss=nan` was ignored (no step
    # and metric found): the log's only NaN never reached the store
    run = _recipes(tmp_path / "recipes")
    _, m, w = _stored(tmp_path, (run / "finetune.log").read_text())
    assert m["epoch/train_epoch_loss"][63] == 0.2270
    assert set(m["epoch/train_epoch_loss"]) == {63, 127, 191, 255}
    assert math.isnan(m["epoch/train_epoch_loss"][255])
    assert math.isnan(m["epoch/train_perplexity"][255])
    assert len(m["loss"]) == 256 and all(math.isfinite(v) for v in m["loss"].values())
    assert any("summarise an epoch" in x for x in w)


def test_llama_recipes_indented_eval_line_after_the_eval_bar_is_stored(tmp_path: Path) -> None:
    # before: ` eval_ppl=tensor(nan, ...) eval_epoch_loss=tensor(nan, ...)` was dropped (an
    # indented line after other lines read as the wrapped tail of a record): the eval loss's
    # NaN never reached the store
    run = _recipes(tmp_path / "recipes")
    _, m, _ = _stored(tmp_path, (run / "finetune.log").read_text())
    assert set(m["val_loss"]) == {63, 127, 191, 255}
    assert m["val_loss"][63] == 0.2806 and m["val_ppl"][63] == 1.3851
    assert math.isnan(m["val_loss"][255]) and math.isnan(m["val_ppl"][255])


def test_a_tensor_print_is_read_as_its_value(tmp_path: Path) -> None:
    text = "".join(
        f"step {s} | loss {2.0 - 0.01 * s:.3f}\n eval_ppl=tensor({7.5 - 0.1 * s:.4f}, "
        f"device='cuda:0') eval_epoch_loss=tensor({2.1 - 0.01 * s:.4f}, device='cuda:0')\n"
        for s in range(10)
    )
    _, m, _ = _stored(tmp_path, text)
    assert m["val_ppl"][3] == 7.2 and m["val_loss"][3] == 2.07
    assert len(m["loss"]) == 10


def test_llama_recipes_run_summary_names_the_nan_epoch_loss(tmp_path: Path) -> None:
    # the README said nothing of it: the "NaN/Inf values the checks do not read" sentence
    # was only written for a run without incidents
    run = _recipes(tmp_path / "recipes")
    lines = (run / "finetune.log").read_text().splitlines()
    spike = next(i for i, x in enumerate(lines) if "Training Epoch: 2/150, step 20/64" in x)
    lines[spike] = _RECIPES_BAR.format(e=2, i=20, loss=1.9, n=21)
    out = _analyzed(tmp_path, "finetune.log", "\n".join(lines) + "\n", report=True)
    onsets = _rows(out, "SELECT onset_step FROM incidents")
    assert onsets == [(84,)]
    readme = (out / "README.md").read_text()
    assert (
        "The log holds NaN/Inf values the checks do not read, in `epoch/train_epoch_loss` "
        "(1, from step 255)"
    ) in readme


# ----- verl PPO console (verl-project/verl#498) -------------------------------------------------
_VERL_1 = "step:1 - global_seqlen/min:2780.000 - global_seqlen/max:3103.000 - global_seqlen/minmax_diff:323.000 - global_seqlen/balanced_min:2927.000 - global_seqlen/balanced_max:2952.000 - global_seqlen/mean:2934.750 - critic/kl:-0.000 - critic/kl_coeff:0.040 - critic/vf_loss:nan - critic/vf_clipfrac:0.000 - critic/vpred_mean:nan - critic/grad_norm:nan - mfu/critic:0.036 - critic/lr:0.000 - actor/entropy_loss:0.442 - actor/pg_loss:-0.013 - actor/pg_clipfrac:0.000 - actor/ppo_kl:0.000 - actor/grad_norm:9.819 - mfu/actor:0.018 - actor/lr:0.000 - critic/score/mean:0.594 - critic/score/max:1.000 - critic/score/min:0.000 - critic/rewards/mean:0.593 - critic/rewards/max:1.042 - critic/rewards/min:-0.034 - critic/advantages/mean:-0.000 - critic/advantages/max:3.472 - critic/advantages/min:-3.670 - critic/returns/mean:0.592 - critic/returns/max:1.042 - critic/returns/min:-0.049 - critic/values/mean:-2.047 - critic/values/max:13.812 - critic/values/min:-16.250 - critic/vf_explained_var:-72.348 - response_length/mean:257.125 - response_length/max:543.000 - response_length/min:122.000 - response_length/clip_ratio:0.000 - prompt_length/mean:109.719 - prompt_length/max:160.000 - prompt_length/min:84.000 - prompt_length/clip_ratio:0.000 - timing_s/gen:10.7"  # noqa: E501


def test_verl_console_line_with_46_fields_is_a_record(tmp_path: Path) -> None:
    # before: "no metric log found": more than 40 named numbers on a line read as a config
    # dump, so no verl console log could be read at all
    lines = [_VERL_1.replace("step:1 ", f"step:{s} ") for s in range(1, 6)]
    lines = [x.replace("actor/grad_norm:9.819", "actor/grad_norm:nan") if i >= 3 else x
             for i, x in enumerate(lines)]  # fmt: skip
    fmt, m, w = _stored(tmp_path, "\n".join(lines) + "\n")
    assert fmt == "generic_text"
    assert set(m["critic/vf_loss"]) == {1, 2, 3, 4, 5}
    assert all(math.isnan(v) for v in m["critic/vf_loss"].values())
    assert m["actor/grad_norm"][3] == 9.819 and math.isnan(m["actor/grad_norm"][4])
    assert m["response_length/max"][2] == 543.0 and len(m) >= 46
    assert any("no training loss" in x for x in w)
    assert "loss" not in m


# ----- unsloth / newer Hugging Face dicts (unslothai/unsloth#4547) -----------------------------
_UNSLOTH = [
    "{'loss': '14.88', 'grad_norm': '2.578', 'learning_rate': '0.000156', 'epoch': '0.00748', 'num_input_tokens_seen': 286019, 'train_runtime': '110.7', 'train_tokens_per_second': '2583'}",  # noqa: E501
    " 60%|██████    | 18/30 [01:50<00:19,  1.65s/it]",
    "{'loss': '14.64', 'grad_norm': '2.938', 'learning_rate': '0.000144', 'epoch': '0.007895', 'num_input_tokens_seen': 302403, 'train_runtime': '112.2', 'train_tokens_per_second': '2695'}",  # noqa: E501
    " 63%|██████▎   | 19/30 [01:52<00:18,  1.65s/it]",
    "{'loss': '13.4', 'grad_norm': '2.328', 'learning_rate': '0.000132', 'epoch': '0.008311', 'num_input_tokens_seen': 317490, 'train_runtime': '113.8', 'train_tokens_per_second': '2790'}",  # noqa: E501
]


def test_unsloth_step_dicts_with_a_runtime_are_steps_not_a_run_summary(tmp_path: Path) -> None:
    # before: every dict read as the run's closing summary (`summary/loss`): no training
    # loss, 0 incidents. The closing summary names its loss `train_loss`, a step's `loss`.
    lines = [" 57%|█████▋    | 17/30 [01:48<00:19,  1.65s/it]", *_UNSLOTH]
    _, m, w = _stored(tmp_path, "\n".join(lines) + "\n")
    assert m["loss"] == {17: 14.88, 18: 14.64, 19: 13.4}
    assert m["grad_norm"][19] == 2.328
    assert not any("summary/" in k for k in m)
    assert not any("run summary" in x for x in w)


def test_the_closing_summary_dict_is_still_a_run_summary(tmp_path: Path) -> None:
    lines = [
        " 97%|█████████▋| 29/30 [01:48<00:19,  1.65s/it]",
        "{'loss': '12.1', 'grad_norm': '2.1', 'learning_rate': '1e-05', 'epoch': '0.01'}",
        "{'train_runtime': '120.3', 'train_samples_per_second': '8.0', 'train_loss': '13.2', "
        "'epoch': '0.01'}",
    ]
    _, m, w = _stored(tmp_path, "\n".join(lines) + "\n")
    assert m["loss"] == {29: 12.1} and m["summary/loss"] == {29: 13.2}  # train_loss (s37)


# ----- LLaMA-Factory trainer_log.jsonl (hiyouga/LlamaFactory#774) -------------------------------
_LLAMAFACTORY = [
    '{"current_steps": 3220, "total_steps": 3235, "loss": 4.4458, "eval_loss": null, "predict_loss": null, "reward": null, "learning_rate": 2.6523817248214068e-09, "epoch": 1.0, "percentage": 99.54, "elapsed_time": "5:15:22", "remaining_time": "0:01:28"}',  # noqa: E501
    '{"current_steps": 3230, "total_steps": 3235, "loss": 4.4598, "eval_loss": null, "predict_loss": null, "reward": null, "learning_rate": 2.9471371284783834e-10, "epoch": 1.0, "percentage": 99.85, "elapsed_time": "5:16:20", "remaining_time": "0:00:29"}',  # noqa: E501
    '{"current_steps": 3235, "total_steps": 3235, "loss": null, "eval_loss": null, "predict_loss": null, "reward": null, "learning_rate": null, "epoch": 1.0, "percentage": 100.0, "elapsed_time": "5:16:48", "remaining_time": "0:00:00"}',  # noqa: E501
]


def test_llamafactory_current_steps_is_the_step(tmp_path: Path) -> None:
    # before: "no step column: the records are numbered 1, 2, ... in file order", and
    # `current_steps` was stored as a metric
    fmt, m, _ = _stored(tmp_path, "\n".join(_LLAMAFACTORY) + "\n", name="trainer_log.jsonl")
    assert fmt == "jsonl"
    assert m["loss"] == {3220: 4.4458, 3230: 4.4598}  # null: not logged at 3235
    assert "current_steps" not in m


# ----- Swin Transformer (microsoft/Swin-Transformer#183) ---------------------------------------
_SWIN = "[2022-03-14 09:05:16 swin_v1_tiny_patch4_window7_224_WindowAttention] (main.py 226): INFO Train: [{e}/300][{i}/1251]\teta 0:10:52 lr 0.000710\ttime 0.6408 (0.6516)\tloss {loss} (6.3074)\tgrad_norm 6.5613 (10.6225)\tmem 14764MB"  # noqa: E501


def test_swin_train_lines_count_batches_over_epochs_from_epoch_0(tmp_path: Path) -> None:
    # before: "the log prints no step counter": the records were numbered 1, 2, ...
    lines = [
        _SWIN.format(e=14, i=i, loss=round(6.5584 - (i - 250) / 1e4, 4))
        for i in range(250, 1251, 100)
    ]
    lines += [_SWIN.format(e=15, i=i, loss="nan" if i >= 450 else 6.1) for i in range(0, 700, 50)]
    lines.append(
        "[2022-03-14 09:15:56 swin_v1_tiny_patch4_window7_224_WindowAttention] (main.py 226): "
        "INFO Test: [0/98]\tTime 2.103 (2.103)\tLoss 2.6310 (2.6310)\tAcc@1 45.312 (45.312)\t"
        "Acc@5 70.312 (70.312)\tMem 14764MB"
    )
    _, m, _ = _stored(tmp_path, "\n".join(lines) + "\n")
    assert min(m["loss"]) == 14 * 1251 + 250 and m["loss"][14 * 1251 + 250] == 6.5584
    assert math.isnan(m["loss"][15 * 1251 + 450]) and m["loss"][15 * 1251 + 400] == 6.1
    assert not any(k.startswith("acc@") for k in m)  # `Acc@1`: the 1 is in the name


# ----- OpenNMT-py (OpenNMT/OpenNMT-py#1072) ------------------------------------------------------
_OPENNMT = [
    "[2018-11-26 14:59:57,699 INFO] Step 5550/50000; acc:  47.00; ppl: 10.46; xent: 2.35; lr: 0.00069; 1851/1358 tok/s;  20746 sec",  # noqa: E501
    "[2018-11-26 15:02:57,162 INFO] Step 5600/50000; acc:  47.14; ppl:  9.83; xent: 2.29; lr: 0.00069; 1065/1591 tok/s;  20926 sec",  # noqa: E501
    "[2018-11-26 15:06:01,481 INFO] Step 5650/50000; acc:   0.19; ppl:   nan; xent:  nan; lr: 0.00070; 1928/2310 tok/s;  21110 sec",  # noqa: E501
]


def test_opennmt_xent_is_the_loss(tmp_path: Path) -> None:
    # before: `xent` kept its name: "The run has no logged `loss`", its NaN no incident
    _, m, _ = _stored(tmp_path, "\n".join(_OPENNMT) + "\n")
    assert m["loss"][5600] == 2.29 and math.isnan(m["loss"][5650])


def test_a_text_logs_clock_is_not_called_utc(tmp_path: Path) -> None:
    # `[2018-11-26 15:06:01,481 INFO]` prints no time zone; the pages said "15:06 UTC"
    out = _analyzed(tmp_path, "train.log", "\n".join(_OPENNMT) + "\n", report=True)
    readme = (out / "README.md").read_text()
    assert (
        "2018-11-26 14:59 → 2018-11-26 15:06 (the log's own clock: it prints no time zone)"
    ) in readme
    assert "UTC" not in readme
    page = next((out / "postmortems").glob("*.md")).read_text()
    assert page.startswith("# Spike #1 — 2018-11-26 15:06\n")


# ----- InternEvo, a log that starts mid-run (InternLM/InternEvo#375) ----------------------------
def test_an_excerpt_from_mid_run_is_not_called_start_up(tmp_path: Path) -> None:
    # before: "the first 20 of 60 logged loss points (steps 642-661, start-up)": the run had
    # trained 641 steps before the log begins
    from test_issue_formats_s7 import INTERNEVO_375

    line = INTERNEVO_375.splitlines()[0]
    text = "\n".join(
        line.replace("step=642", f"step={s}").replace(
            "loss=2.1725409030914307", f"loss={2.17 + 0.01 * math.sin(s):.4f}"
        )
        for s in range(642, 702)
    )
    out = _analyzed(tmp_path, "train.log", text + "\n")
    ((note,),) = _rows(out, "SELECT note FROM screen_coverage")
    assert "(steps 642-656, the history the screen needs: the log starts at step 642)" in note
    assert "start-up" not in note


# ----- LLaMA-Adapter / MAE-style engine (OpenGVLab/LLaMA-Adapter#144) ---------------------------
_ADAPTER = "[17:11:05.859398] Epoch: [0]  [  {i:>3}/13000]  eta: 2:17:53  lr: 0.000000  closs: {loss} (1.6011)  time: 0.6125  data: 0.0001  max mem: 20618"  # noqa: E501


def test_loss_is_nan_stopping_training_is_a_nonfinite_loss_event(tmp_path: Path) -> None:
    # the engine prints `Loss is nan, stopping training` and exits: the log's only NaN.
    # before: "1 lines ignored"; no event, and the page read `nonfinite_loss=0`
    lines = [_ADAPTER.format(i=i, loss=1.5078) for i in range(30, 120, 10)]
    lines.append("Loss is nan, stopping training")
    out = _analyzed(tmp_path, "output.log", "\n".join(lines) + "\n")
    events = _rows(out, "SELECT step, kind, detail FROM events")
    assert events == [(110, "nonfinite_loss", "Loss is nan, stopping training (after step 110)")]


def test_a_log_that_ends_while_the_lr_climbs_names_no_lr_peak(tmp_path: Path) -> None:
    # the LR prints with 6 decimals and climbs through the whole log, reaching `0.000010`
    # at its last two lines; before, the page said "end of warm-up (LR 9e-06; the LR first
    # reached its peak at step 950)" for a log that ends at 960
    lines = []
    for i in range(30, 970, 10):
        lr = f"{round(i / 96e6, 6):.6f}"
        loss = 1.5 if i < 900 else 1.5 + (i - 890) / 20
        lines.append(_ADAPTER.format(i=i, loss=loss).replace("lr: 0.000000", f"lr: {lr}"))
    out = _analyzed(tmp_path, "output.log", "\n".join(lines) + "\n", report=True)
    phases = _rows(out, "SELECT lr_phase, lr_peak_step FROM incidents")
    assert phases and all(p == ("warm-up", None) for p in phases)
    page = next((out / "postmortems").glob("*.md")).read_text()
    assert "reached its peak" not in page and "LR phase at the onset: **warm-up**" in page


# ----- TensorFlow retrain.py (cloud-annotations/cloud-annotations#56) -------------------------
_TF_RETRAIN = [
    "I0423 05:08:16.899667 47836397217664 tf_logging.py:115] 2019-04-23 05:08:16.899646: Step 270: Cross entropy = 0.012275",  # noqa: E501
    "INFO:tensorflow:2019-04-23 05:08:16.948735: Step 270: Validation accuracy = 100.0% (N=100)",
    "I0423 05:08:17.541305 47836397217664 tf_logging.py:115] 2019-04-23 05:08:17.541283: Step 280: Cross entropy = nan",  # noqa: E501
]


def test_tf_retrain_cross_entropy_is_the_loss(tmp_path: Path) -> None:
    # before: stored as `cross_entropy`: "The run has no logged `loss`", its NaN no incident
    _, m, _ = _stored(tmp_path, "\n".join(_TF_RETRAIN) + "\n")
    assert m["loss"][270] == 0.012275 and math.isnan(m["loss"][280])


# ----- a table whose step column is `Step` (a W&B chart export, a notebook table as CSV) ---------
def test_a_csv_step_column_named_step_in_capitals_is_the_step(tmp_path: Path) -> None:
    # open-r1#704's GRPO table saved as CSV; before: "no step column"
    text = "Step,Training Loss,reward,kl\n1,-0.2836,13.4375,nan\n2,-0.1491,6.9318,nan\n"
    fmt, m, _ = _stored(tmp_path, text, name="grpo.csv")
    assert fmt == "table"
    assert m["loss"] == {1: -0.2836, 2: -0.1491} and "step" not in m
