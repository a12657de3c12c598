"""The generic text-log reader: formats no named pattern knows, read by template inference.

Lines quoted here come from public GitHub issues (URL beside each); the generator at the end
writes logs in many print styles and checks that every value comes back.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import polars as pl
import pytest

from forensics.canon import alias_table
from forensics.ingest.base import sniff_format
from forensics.ingest.readers.generic import GenericTextReader, read_generic

READER = GenericTextReader()


def _read(tmp_path: Path, text: str, name: str = "train.log") -> tuple[str, dict]:
    """(format sniffed, {canonical name: {step: value}}) of a log written to disk."""
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    reader = sniff_format(path)
    assert reader is not None, "no reader claims the file"
    res = reader.read(path)
    table = alias_table()
    out: dict[str, dict[int, float]] = {}
    for step, raw, value in res.metrics.select("step", "raw_name", "value").iter_rows():
        out.setdefault(table.canonical(raw), {})[step] = value
    return reader.name, out


def test_llmc_stdout(tmp_path: Path) -> None:
    # llm.c train_gpt2cu stdout (SOURCES.md section 1.5); `(+nanz)` is a count, not a NaN
    text = (
        "val loss 11.007921\n"
        "step    1/19560 | loss 11.009662 (+nanz)| norm 15.0789 (+nanz)| lr 8.57e-07 "
        "| 4230.95 ms | 31.9% bf16 MFU | 123917 tok/s\n"
        "step    2/19560 | loss nan (+nanz)| norm inf (+nanz)| lr 1.71e-06 "
        "| 4385.98 ms | 30.8% bf16 MFU | 119537 tok/s\n"
    )
    fmt, m = _read(tmp_path, text)
    assert fmt == "generic_text"
    assert m["loss"][1] == 11.009662 and math.isnan(m["loss"][2])
    assert m["grad_norm"] == {1: 15.0789, 2: math.inf}
    assert m["lr"][2] == pytest.approx(1.71e-06)
    assert m["val_loss"] == {0: 11.007921}  # printed before step 1: the step before it


def test_error_message_with_a_source_line_is_not_a_metric(tmp_path: Path) -> None:
    # llm.c stdout with stderr interleaved mid-line (real: HectorFCardenas/llm.c
    # gpt2_train.11685414.log line 19761): `train_gpt2.cu:675` is where the error was raised
    text = (
        "".join(
            f"step {s:5d}/19560 | loss {3.3 + s / 1e5:.6f} (+0.47z)| norm 0.2206 (-0.39z)| "
            f"lr 1.0e-05 | 300.00 ms | 40.0% bf16 MFU | 1700000 tok/s\n"
            for s in range(19520, 19528)
        )
        + "step 19528/19560 | loss 3.329409 (+0.47z)| norm 0.2206 (-0.39z)| lError: Token out of "
        "vocabulary at train_gpt2.cu:675\n"
    )
    fmt, m = _read(tmp_path, text)
    assert fmt == "generic_text"
    assert m["loss"][19528] == 3.329409 and len(m["loss"]) == 9
    assert not [k for k in m if ".cu" in k or "vocabulary" in k], sorted(m)


def test_build_nanogpt_log_txt(tmp_path: Path) -> None:
    # karpathy/build-nanogpt log.txt: `<step> <kind> <value>`
    text = "0 val 10.9512\n0 hella 0.2466\n0 train 10.955011\n1 train 10.211\n2 train 9.80\n"
    _, m = _read(tmp_path, text, "log.txt")
    assert m["loss"] == {0: 10.955011, 1: 10.211, 2: 9.80}
    assert m["val_loss"] == {0: 10.9512}
    assert m["hella"] == {0: 0.2466}


def test_nanogpt_with_timestamp_prefix_quoted_in_an_issue(tmp_path: Path) -> None:
    # https://github.com/karpathy/nanoGPT/issues/215 (pasted as a Markdown quote)
    text = (
        "> 2023-03-22 09:32:41 iter 3000: loss 4.2490, time 35392.33ms, mfu 13.85%\n>\n"
        "> 2023-03-22 09:32:52 iter 3010: loss nan, time 1019.95ms, mfu 14.12%\n>\n"
        "> 2023-03-22 09:33:02 iter 3020: loss nan, time 1015.95ms, mfu 14.36%\n"
    )
    _, m = _read(tmp_path, text)
    assert m["loss"][3000] == 4.2490
    assert math.isnan(m["loss"][3010]) and math.isnan(m["loss"][3020])


def test_parameter_golf_without_step_key(tmp_path: Path) -> None:
    # openai/parameter-golf newer records (SOURCES.md section 4)
    text = (
        "1/20000 train_loss: 8.3201 train_time: 0.0m tok/s: 8479861\n"
        "2/20000 train_loss: 8.1022 train_time: 0.0m tok/s: 8479000\n"
    )
    _, m = _read(tmp_path, text)
    assert m["loss"] == {1: 8.3201, 2: 8.1022}
    assert m["train_time_(m)"] == {1: 0.0, 2: 0.0}  # minutes: the unit stays in the name
    assert m["tokens_per_s"] == {1: 8479861.0, 2: 8479000.0}


def test_olmo_multi_line_records(tmp_path: Path) -> None:
    # OLMo trainer log (SOURCES.md section 1.5): a step line, then indented metric lines
    pre = "2025-12-12 11:05:02.009\thost:0\tolmo.train:979\tINFO\t"
    text = (
        f"{pre}Pre-train system metrics\n    System/Peak GPU Memory (MB)=20,487\n"
        f"{pre}[step=1/15000,epoch=0]\n    optim/total_grad_norm=0.2370\n"
        "    train/CrossEntropyLoss=2.998\n    throughput/total_tokens=2,097,152\n"
        f"{pre}[step=2/15000,epoch=0]\n    optim/total_grad_norm=NaN\n"
        "    train/CrossEntropyLoss=nan\n    throughput/total_tokens=4,194,304\n"
    )
    _, m = _read(tmp_path, text)
    assert m["loss"][1] == 2.998 and math.isnan(m["loss"][2])
    assert m["grad_norm"][1] == 0.2370 and math.isnan(m["grad_norm"][2])
    assert m["consumed_tokens"] == {1: 2097152.0, 2: 4194304.0}
    assert "system/peak_gpu_memory_(mb)" not in m  # before the first record: no step


def test_torchtitan_with_colours_and_rank_prefix(tmp_path: Path) -> None:
    # https://github.com/pytorch/torchtitan/pull/3393 (stdout with colour codes)
    line = (
        "[rank0]:[titan] 2026-05-18 16:08:{s:02d},958 - root - INFO - \x1b[31mstep: {n}  "
        "\x1b[32mloss:  {loss}  \x1b[33mgrad_norm:  0.5348  memory:  9.46GiB(64.99%)  "
        "tps: 7,084  tflops: 0.51  mfu: 0.16%\x1b[39m\n"
    )
    text = "".join(line.format(s=n, n=n, loss=v) for n, v in ((54, "2.77350"), (55, "-nan")))
    _, m = _read(tmp_path, text)
    assert m["loss"][54] == 2.7735 and math.isnan(m["loss"][55])
    assert m["grad_norm"] == {54: 0.5348, 55: 0.5348}
    assert m["tokens_per_s"] == {54: 7084.0, 55: 7084.0}


def test_mlx_lora_lines_train_and_val(tmp_path: Path) -> None:
    # https://github.com/ml-explore/mlx-examples/issues/620
    text = (
        "Iter 1: Val loss 2.086, Val took 17.177s\n"
        "Iter 25: Train loss 1.593, Learning Rate 7.000e-05, It/sec 0.999, Tokens/sec 387.697\n"
        "Iter 50: Train loss 1.406, Learning Rate 7.000e-05, It/sec 0.942, Tokens/sec 369.778\n"
        "Iter 75: Train loss 3.316, Learning Rate 7.000e-05, It/sec 0.933, Tokens/sec 366.098\n"
    )
    _, m = _read(tmp_path, text)
    assert m["loss"] == {25: 1.593, 50: 1.406, 75: 3.316}
    assert m["val_loss"] == {1: 2.086}
    assert m["lr"][75] == pytest.approx(7e-05)


def test_python_logging_pipes_and_k_suffix(tmp_path: Path) -> None:
    # https://github.com/Kai-46/minFM/issues/4
    text = "".join(
        f"2025-08-23 06:20:07,600 - trainers.dit_trainer - INFO - Step   {n} | Loss: {v} | "
        "LR: 3.00e-04 | GradNorm: 2.29 | TPS: 16.88K | Data: 0.007s\n"
        for n, v in ((1560, "0.5275"), (1561, "0.5301"))
    )
    _, m = _read(tmp_path, text)
    assert m["loss"] == {1560: 0.5275, 1561: 0.5301}
    assert m["tokens_per_s"] == {1560: 16880.0, 1561: 16880.0}


def test_reader_says_what_it_read(tmp_path: Path) -> None:
    text = "booting\nstep 1 | loss 2.5\nstep 2 | loss 2.4\nsaving checkpoint 7\n"
    path = tmp_path / "run.log"
    path.write_text(text)
    res = READER.read(path)
    assert any("loss from 2 lines like 'step <step> | loss <loss>'" in w for w in res.warnings)
    ignored = next(w for w in res.warnings if "lines ignored" in w)
    assert ignored.startswith("generic reader: 2 lines ignored") and "booting" in ignored


def test_bom_does_not_hide_the_first_line(tmp_path: Path) -> None:
    # a BOM glued to llm.c main.log's first record used to lose step 0
    _, m = _read(tmp_path, "\ufeffs:0 trl:11.0091 lr:0.000001 norm:15.37\ns:1 trl:10.9\n")
    assert m["loss"] == {0: 11.0091, 1: 10.9}
    _, m = _read(tmp_path, "\ufeffstep 0 | loss 9.5\nstep 1 | loss 9.4\n", "b.log")
    assert m["loss"] == {0: 9.5, 1: 9.4}


def test_prose_and_config_dumps_are_not_records(tmp_path: Path) -> None:
    text = (
        "Step 1: install the package (version 2.1)\n"
        "TrainConfig(seed=6198, d_model=2048, n_heads=16, loss_scale=1.0, steps=100)\n"
        "There are 3 files in 2 folders\n"
    )
    path = tmp_path / "notes.log"
    path.write_text(text)
    assert not READER.sniff(path, text)
    with pytest.raises(Exception, match="no line with a step counter"):
        read_generic(path, text)


# ----- generated styles ----------------------------------------------------------------------
NAN_SPELLINGS = ["nan", "NaN", "NAN", "-nan", "inf", "-inf", "Infinity", "-Infinity", "INF"]
PREFIXES = [
    "",
    "[rank0]: ",
    "INFO:root:",
    "2024-05-01 12:00:{sec:02d} ",
    "[2024-05-01 12:00:{sec:02d}] ",
    "2024-05-01 12:00:{sec:02d},123 - trainer - INFO - ",
    "[default0]:",
    "W0501 12:00:{sec:02d}.000000 123 train.py:42] ",
]


def _fmt(v: float, rng: random.Random) -> str:
    if math.isnan(v) or math.isinf(v):
        return rng.choice(
            [
                s
                for s in NAN_SPELLINGS
                if (s.lstrip("-").lower() == "nan") == math.isnan(v)
                and (not math.isinf(v) or s.startswith("-") == (v < 0))
            ]
        )
    return rng.choice([f"{v:.6f}", f"{v:.6E}", f"{v:.6e}", f"{v:.6g}"])


STYLES = [
    ("step {step} | {kv}", " | ", "{k}: {v}"),
    ("step={step}, {kv}", ", ", "{k}={v}"),
    ("iter {step}: {kv}", ", ", "{k} {v}"),
    ("iteration {step}/{total} | {kv} |", " | ", "{k}: {v}"),
    ("[step={step}/{total}] {kv}", " ", "{k}={v}"),
    ("s:{step} {kv}", " ", "{k}:{v}"),
    ("{step}/{total} {kv}", " ", "{k}: {v}"),
    ("Step {step:>7} {kv}", "  ", "{k} {v:>14}"),
    ("global_step: {step}; {kv}", "; ", "{k}: {v}"),
    ("{step} {kv}", "\t", "{k}={v}"),
    ("Iteration {step} of {total} - {kv}", " - ", "{k} = {v}"),
    ("[Step {step}] {kv}", " ", "{k}={v}"),
    ("completed step: {step}, {kv}", ", ", "{k}: {v}"),  # MaxText
    ("{kv}, num_updates={step}", ", ", "{k}={v}"),  # fairseq: the step last
]
KEYS = [
    "loss",
    "lm loss",
    "train_loss",
    "train/loss",
    "grad norm",
    "grad_norm",
    "lr",
    "learning_rate",
    "tokens_per_sec",
    "loss scale",
    "mfu",
    "aux_loss",
    "z-loss",
    "throughput",
]


@pytest.mark.parametrize("seed", range(len(STYLES)))
def test_generated_styles_round_trip(tmp_path: Path, seed: int) -> None:
    """Every style: random keys, a random prefix, random NaN/Inf spellings; every value back."""
    rng = random.Random(1000 + seed)
    head, sep, field = STYLES[seed]
    keys = rng.sample(KEYS, 3)
    prefix = rng.choice(PREFIXES)
    total = 5000
    truth: dict[str, dict[int, float]] = {k: {} for k in keys}
    lines = ["loading data shards", "model has 124M parameters"]
    for i, step in enumerate(range(10, 10 + 40 * 7, 7)):
        vals = {k: rng.uniform(0.001, 12.0) for k in keys}
        if i in (20, 31):
            vals[keys[0]] = rng.choice([math.nan, math.inf, -math.inf])
        printed = {k: _fmt(v, rng) for k, v in vals.items()}
        kv = sep.join(field.format(k=k, v=p) for k, p in printed.items())
        line = prefix.format(sec=i % 60) + head.format(step=step, total=total, kv=kv)
        lines.append(line)
        for k, p in printed.items():
            truth[k][step] = float(p)  # what the log says, NaN/Inf included
        if i % 13 == 0:
            lines.append("saving checkpoint to out/ckpt")
    path = tmp_path / "gen.log"
    path.write_text("\n".join(lines) + "\n")
    assert READER.sniff(path, path.read_text())
    res = READER.read(path)
    got: dict[str, dict[int, float]] = {}
    for step, raw, value in res.metrics.select("step", "raw_name", "value").iter_rows():
        got.setdefault(raw, {})[step] = value
    for k in keys:
        assert k in got, f"style {seed}: key {k!r} not read; got {sorted(got)} ({res.warnings})"
        assert set(got[k]) == set(truth[k])
        for step, v in truth[k].items():
            w = got[k][step]
            if math.isnan(v):
                assert math.isnan(w)
            else:
                assert w == v, (k, step)
    assert not (set(got) - set(keys)), f"style {seed}: extra metrics {set(got) - set(keys)}"


def test_generic_reader_on_a_frame_keeps_line_order(tmp_path: Path) -> None:
    text = "step 3 | loss 1.0\nstep 1 | loss 2.0\nstep 2 | loss 3.0\n"
    path = tmp_path / "r.log"
    path.write_text(text)
    res = READER.read(path)
    assert res.metrics["step"].to_list() == [3, 1, 2]
    assert res.metrics.schema["value"] == pl.Float64


def test_named_pattern_log_with_lines_in_a_newer_style(tmp_path: Path) -> None:
    # parameter-golf: modded-nanogpt `step:N/M val_loss:` lines beside the newer training
    # lines without a `step:` key (SOURCES.md section 4): the named reader claims the file,
    # the generic reader reads the losses it does not know
    text = (
        "step:0/20000 val_loss:6.9357 val_bpb:4.1077 train_time:0ms step_avg:0.01ms\n"
        "warmup_step:1/20\n"
        "1/20000 train_loss: 8.3201 train_time: 0.0m tok/s: 8479861\n"
        "2/20000 train_loss: nan train_time: 0.0m tok/s: 8479861\n"
    )
    fmt, m = _read(tmp_path, text)
    assert fmt == "textlog"
    assert m["val_loss"] == {0: 6.9357}
    assert m["loss"][1] == 8.3201 and math.isnan(m["loss"][2])
