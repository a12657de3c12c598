"""Log formats quoted in public GitHub issues around a spike or a NaN, one test per format.

Each test writes the quoted lines (as printed in the issue, URL beside it) and checks what
the ingest stores: the reader that claims them, the steps, and NaN kept as NaN.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored


def test_hf_trainer_stdout_dicts_without_a_step(tmp_path: Path) -> None:
    # https://github.com/AnswerDotAI/ModernBERT/issues/233
    text = (
        "{'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.774074342405685e-06, "
        "'epoch': 0.53}\n"
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.773696745450087e-06, 'epoch': 0.53}\n"
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.773318840518906e-06, 'epoch': 0.53}\n"
    )
    fmt, m, warnings = _stored(tmp_path, text)
    assert fmt == "generic_text"
    # `loss: 0.0` beside a NaN grad norm is the Trainer's stand-in for a NaN window
    # (logging_nan_inf_filter), read as trainer_state.json's reader reads it
    assert m["loss"][1] == 0.2051 and math.isnan(m["loss"][2]) and math.isnan(m["loss"][3])
    assert all(math.isnan(v) for v in m["grad_norm"].values())
    assert any("no step counter" in w and "numbered 1, 2" in w for w in warnings)
    assert any("'loss: 0.0' entries (steps 2..3) read as NaN" in w for w in warnings)
    # a 0.0 beside a finite grad norm is a real (rounded) loss
    _, m, _ = _stored(tmp_path, text.replace("'grad_norm': nan", "'grad_norm': 0.5"))
    assert m["loss"] == {1: 0.2051, 2: 0.0, 3: 0.0}


def test_mmengine_epoch_and_iteration(tmp_path: Path) -> None:
    # https://github.com/InternLM/xtuner/issues/187
    pre = "10/30 22:1{m}:{s} - mmengine - INFO - Epoch(train) [1][{i}/735]  lr: 1.9870e-04  "
    rows = ((8, "02", 200, "2.7522", "3.0608"), (9, "57", 240, "2.5128", "nan"))
    text = "".join(
        pre.format(m=m, s=s, i=i) + "eta: 2:46:39  time: 2.8906  data_time: 0.0042  "
        f"memory: 10762  loss: {loss}  grad_norm: {g}\n"
        for m, s, i, loss, g in rows
    )
    _, m, _ = _stored(tmp_path, text)
    assert m["loss"] == {200: 2.7522, 240: 2.5128}
    assert m["grad_norm"][200] == 3.0608 and math.isnan(m["grad_norm"][240])
    assert "eta" not in m  # a clock, not a metric


def test_megatron_bridge_timestamped_with_extra_losses(tmp_path: Path) -> None:
    # https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/4024
    text = "".join(
        f"[2026-05-28 22:26:{s}] iteration       {n}/    6069 | consumed samples:        "
        f"{n * 512} | elapsed time per iteration (ms): 26813.0 | learning rate: 5.800000E-05 | "
        f"global batch size:   512 | lm loss: {loss} | seq_load_balancing_loss: 1.253194E+00 |"
        " mtp_1 loss: 1.115410E+00 | mtp_2 loss: 1.180141E+00 | loss scale: 1.0 | grad norm: "
        "0.852 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        for s, n, loss in (("20", 29, "8.716962E-01"), ("50", 30, "8.535482E-01"))
    )
    fmt, m, _ = _stored(tmp_path, text)
    assert fmt == "megatron"
    assert m["loss"] == {29: 0.8716962, 30: 0.8535482}
    assert m["mtp_loss/1"][29] == 1.11541 and m["mtp_loss/2"][29] == 1.180141


def test_nanotron_iteration_with_suffixes(tmp_path: Path) -> None:
    # https://github.com/huggingface/nanotron/issues/390
    text = "".join(
        f"10/17/2025 16:3{k}:56 [INFO|DP=0|PP=0|TP=0]: iteration: {n} / 378950 | "
        "consumed_tokens: 85.8G | elapsed_time_per_iteration_ms: 11.5K | tokens_per_sec: 22.8K"
        f" | tokens_per_sec_per_gpu: 11.4K | global_batch_size: 64 | lm_loss: {loss} | lr: "
        "1e-05 | model_tflops_per_gpu: 38.3 | hardware_tflops_per_gpu: 38.3 | grad_norm: 1.25\n"
        for k, n, loss in ((1, 327281, "2.38"), (2, 327282, "2.35"))
    )
    _, m, _ = _stored(tmp_path, text)
    assert m["loss"] == {327281: 2.38, 327282: 2.35}
    assert m["consumed_tokens"][327281] == 85.8e9


def test_megatron_llm_record_cut_when_nan_starts(tmp_path: Path) -> None:
    # https://github.com/epfLLM/Megatron-LLM/issues/33: from 3385 the line loses `lm loss`
    text = (
        "iteration     3383/    8000 | consumed samples:       216512 | elapsed time per "
        "iteration (ms): 7613.1 | learning rate: 6.680E-06 | global batch size:    64 | lm loss:"
        " 7.334521E-01 | loss scale: 1.0 | grad norm: 0.752 | number of skipped iterations:   0"
        " | number of nan iterations:   0 |\n"
        "iteration     3384/    8000 | consumed samples:       216576 | elapsed time per "
        "iteration (ms): 7845.5 | learning rate: 6.678E-06 | global batch size:    64 | lm loss:"
        " 7.072597E-01 | loss scale: 1.0 | grad norm: 0.741 | number of skipped iterations:   0"
        " | number of nan iterations:   0 |\n"
        "iteration     3385/    8000 | consumed samples:       216640 | elapsed time per "
        "iteration (ms): 7624.3 | learning rate: 6.676E-06 | global batch size:    64 | loss "
        "scale: 1.0 | gr\n"
    )
    _, m, warnings = _stored(tmp_path, text)
    assert m["loss"] == {3383: 0.7334521, 3384: 0.7072597}  # no loss printed at 3385
    assert m["loss_scale"][3385] == 1.0
    assert any("cut short" in w for w in warnings)


def test_chinese_transformer_xl_2019_megatron(tmp_path: Path) -> None:
    # https://github.com/THUDM/Chinese-Transformer-XL/issues/7: no colons, NaN spelt NAN
    text = (
        " iteration      700/    3000 | elapsed time per iteration (ms): 12932.3 | learning "
        "rate 9.773E-06 | lm loss NAN | loss scale 4.0 |\n"
        "Warning: NaN or Inf found in input tensor.\n"
        " iteration      800/    3000 | elapsed time per iteration (ms): 11020.1 | learning "
        "rate 9.457E-06 | lm loss 5.193296E+00 | loss scale 0.1 |\n"
    )
    fmt, m, _ = _stored(tmp_path, text)
    assert fmt == "megatron"
    assert math.isnan(m["loss"][700]) and m["loss"][800] == 5.193296
    assert m["loss_scale"] == {700: 4.0, 800: 0.1}
    assert m["lr"][800] == 9.457e-06


def test_litgpt_issue_628_micro_iterations(tmp_path: Path) -> None:
    # https://github.com/Lightning-AI/litgpt/issues/628
    text = (
        "iter 1151 step 144: loss 1.7019, iter time: 1106.53ms (optimizer.step)\n"
        "iter 1152 step 144: loss 11.4630, iter time: 1053.87ms\n"
    )
    fmt, m, _ = _stored(tmp_path, text)
    assert fmt == "textlog"
    assert m["loss/max"] == {144: 11.4630}
    assert m["loss/micro/0"] == {144: 1.7019} and m["loss/micro/1"] == {144: 11.4630}
