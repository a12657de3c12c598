"""Short logs and excerpts (what people paste into an issue), NaN, and misleading counters.

Lines are quoted from public GitHub issues (URL beside each); where an excerpt is filled
in to give the screen its ~5 points of history, the test says so.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from forensics.detect import detect
from forensics.detect.coverage import read as read_coverage
from forensics.ingest import ingest
from forensics.store import open_store


def _detect(tmp_path: Path, text: str, name: str = "excerpt.log"):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(text)
    db = tmp_path / "t.duckdb"
    with open_store(db) as store:
        (summary,) = ingest(store, [path])
        (det,) = detect(store, summary.run)
        cov = read_coverage(store, summary.run)
    return det, cov


def _evidence(inc, key: str):  # type: ignore[no-untyped-def]
    return next((e for e in inc.evidence if e.key == key), None)


# https://github.com/karpathy/nanoGPT/issues/215 (the quoted lines, as printed)
NANOGPT_215 = """\
2023-03-22 09:30:39 iter 2920: loss 3.9883, time 1099.34ms, mfu 15.34%
2023-03-22 09:30:50 iter 2930: loss 3.9408, time 1097.30ms, mfu 15.34%
2023-03-22 09:31:01 iter 2940: loss 3.9994, time 1097.68ms, mfu 15.34%
2023-03-22 09:31:12 iter 2950: loss 4.0977, time 1096.94ms, mfu 15.34%
2023-03-22 09:31:23 iter 2960: loss 4.1535, time 1097.23ms, mfu 15.34%
2023-03-22 09:31:34 iter 2970: loss 3.9453, time 1097.65ms, mfu 15.34%
2023-03-22 09:31:45 iter 2980: loss 3.8993, time 1099.18ms, mfu 15.34%
2023-03-22 09:31:56 iter 2990: loss 3.8853, time 1096.65ms, mfu 15.34%
2023-03-22 09:32:32 step 3000: train loss 4.0390, val loss 4.0427
saving checkpoint to out
2023-03-22 09:32:41 iter 3000: loss 4.2490, time 35392.33ms, mfu 13.85%
2023-03-22 09:32:52 iter 3010: loss nan, time 1019.95ms, mfu 14.12%
2023-03-22 09:33:02 iter 3020: loss nan, time 1015.95ms, mfu 14.36%
2023-03-22 09:33:12 iter 3030: loss nan, time 1017.59ms, mfu 14.58%
"""


def test_nan_in_a_short_excerpt_is_an_incident(tmp_path: Path) -> None:
    det, cov = _detect(tmp_path, NANOGPT_215)
    assert len(det.incidents) == 1
    inc = det.incidents[0]
    assert inc.peak_step == 3010 and math.isnan(inc.peak_value)
    hist = _evidence(inc, "history_points")
    assert hist is not None and hist.value <= 10 and "little history" in hist.note
    assert cov is not None and cov["points"] == 9  # finite loss points


# https://github.com/bigscience-workshop/Megatron-DeepSpeed/issues/396: no `lm loss` field
# and `grad norm: nan` on every line, while both counters read 0
MDS_396 = "".join(
    f" iteration     {n}/  250000 | consumed samples:        {8 * n} | consumed tokens:     "
    f"{16384 * n} | elapsed time per iteration (ms): 4247.9 | learning rate: 2.999E-04 | "
    "global batch size:     8 | loss scale: 1.0 | grad norm: nan | actual seqlen:  2048 | "
    "number of skipped iterations:   0 | number of nan iterations:   0 | "
    "samples per second: 1.883 | TFLOPs: 78.36 |\n"
    for n in (5426, 5427, 5428)
)


def test_nan_grad_norm_without_loss_and_a_zero_counter(tmp_path: Path) -> None:
    det, cov = _detect(tmp_path, MDS_396)
    assert len(det.incidents) == 1
    inc = det.incidents[0]
    assert inc.onset_step == 5426 and inc.metric == "grad_norm"
    flag = _evidence(inc, "misleading_counter")
    assert flag is not None
    assert "nan_iters" in str(flag.value) and "read 0" in flag.note
    assert cov is not None and cov["screened_from_step"] is None  # no loss curve to screen
    assert any("not screened" in n for n in det.notes)


# https://github.com/THUDM/Chinese-Transformer-XL/issues/7 (2019 Megatron: no colons, NAN)
THUDM_7 = """\
 iteration      700/    3000 | elapsed time per iteration (ms): 12932.3 | learning rate 9.773E-06 | lm loss NAN | loss scale 4.0 |
Warning: NaN or Inf found in input tensor.
 iteration      800/    3000 | elapsed time per iteration (ms): 11020.1 | learning rate 9.457E-06 | lm loss 5.193296E+00 | loss scale 0.1 |
"""  # noqa: E501


def test_2019_megatron_nan_is_read_and_is_an_incident(tmp_path: Path) -> None:
    det, _ = _detect(tmp_path, THUDM_7)
    assert [i.peak_step for i in det.incidents] == [700]
    assert math.isnan(det.incidents[0].peak_value)


def _megatron(n: int, loss: float, scale: float, skipped: int = 0) -> str:
    return (
        f" iteration {n:>8}/  300000 | consumed samples: {n * 1024:>12} | elapsed time per "
        f"iteration (ms): 21392.5 | learning rate: 6.000E-05 | global batch size:  1024 | "
        f"lm loss: {loss:.6E} | loss scale: {scale:.1f} | grad norm: 0.000 | "
        f"number of skipped iterations: {skipped:>3} | number of nan iterations:   0 |\n"
    )


def test_thirteen_b_spike_from_a_few_points(tmp_path: Path) -> None:
    # tr1-13B chronicle (SOURCES.md section 2): 2.768 (29040) -> 7.344 (29050) -> 8.716 ->
    # 6.849 (29090), loss scale 65536 -> 8192 -> 4096. The 5 lines before 29040 are filled
    # in at the level the chronicle gives.
    lines = [
        _megatron(29000 + 10 * i, v, 65536)
        for i, v in enumerate((2.771, 2.765, 2.776, 2.769, 2.772))
    ]
    lines += [
        _megatron(29050, 2.768, 65536),
        _megatron(29060, 7.344, 8192, 3),
        _megatron(29070, 8.716, 4096, 1),
        _megatron(29080, 7.912, 4096),
        _megatron(29090, 6.849, 4096),
    ]
    det, cov = _detect(tmp_path, "".join(lines))
    assert len(det.incidents) == 1
    inc = det.incidents[0]
    assert inc.onset_step <= 29060 <= inc.peak_step <= 29070
    hist = _evidence(inc, "history_points")
    assert hist is not None and hist.value <= 6
    assert cov is not None and cov["short_log"] and cov["screened_from_step"] <= 29050


# https://github.com/pytorch/torchtitan/pull/3393: a clean stretch of a run
TORCHTITAN = "".join(
    f"[rank0]:[titan] 2026-05-18 16:08:{16 + i},958 - root - INFO - step: {54 + i}  loss:  "
    f"{v}  grad_norm:  {g}  memory:  9.46GiB(64.99%)  tps: 7,084  tflops: 0.51  mfu: 0.16%\n"
    for i, (v, g) in enumerate(
        (
            ("2.77350", "0.5348"),
            ("2.78671", "0.4195"),
            ("2.82415", "0.3129"),
            ("2.84575", "0.4981"),
            ("2.80192", "0.4634"),
            ("2.77473", "0.4395"),
            ("2.76535", "0.4070"),
            ("2.80568", "0.3955"),
        )
    )
)


@pytest.mark.parametrize("text", [TORCHTITAN], ids=["torchtitan"])
def test_clean_excerpts_raise_nothing(tmp_path: Path, text: str) -> None:
    det, cov = _detect(tmp_path, text)
    assert det.incidents == []
    assert cov is not None and cov["points"] == 8


def test_clean_real_short_megatron_log_raises_nothing(real_logs: Path, tmp_path: Path) -> None:
    # 20 iteration lines with the normal fp16 loss-scale search at start-up (SOURCES 1.3)
    path = next((real_logs / "bigscience-workshop__bigscience").iterdir())
    det, cov = _detect(tmp_path, path.read_text(), "meg.out")
    assert det.incidents == []
    assert cov is not None and cov["unscreened_points"] > 0
    assert "screened only for jumps" in str(cov["note"])


def test_loss_scale_collapse_without_a_logged_loss(tmp_path: Path) -> None:
    # every window skipped: Megatron prints no `lm loss`, only the falling loss scale
    # (format of SOURCES.md section 1.3; values made up for the test)
    lines = "".join(
        f" iteration {n:>8}/  300000 | consumed samples: {n * 8:>10} | learning rate: 1.0E-04 |"
        f" global batch size:     8 | loss scale: {s:.1f} | number of skipped iterations:  10 |"
        " number of nan iterations:   0 |\n"
        for n, s in ((5010, 65536), (5020, 2048), (5030, 64), (5040, 2), (5050, 1))
    )
    det, cov = _detect(tmp_path, lines)
    assert len(det.incidents) == 1
    assert det.incidents[0].metric == "loss_scale"
    assert cov is not None and cov["screened_from_step"] is None
