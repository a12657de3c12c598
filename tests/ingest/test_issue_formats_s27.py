"""Training-log styles quoted in public GitHub issues and code (session 27), one test per style.

Each fixture quotes the lines as printed where they were found (URL or source beside it).
The tests check what the ingest stores through the library path the CLI calls, and each
says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- torchtitan: colour codes that lost their ESC byte in the paste -----------------------
# pytorch/torchtitan PR #3393 (https://github.com/pytorch/torchtitan/pull/3393) quotes these
# step lines without colour; torchtitan prints each field in its colour (`\x1b[31mstep:`,
# `\x1b[32mloss:`, `\x1b[38;2;180;60;0mgrad_norm:` ... `\x1b[39m`), and a copy from a
# terminal or a GitHub comment drops the ESC byte and keeps the rest, as here. (A plot
# script's comment quotes such a line: `[36mstep:   20,000 token: ...  [32mloss:  3.1234`.)
TITAN_BARE_SGR = """\
[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - [31mstep: 14  [32mloss:  3.24405  [38;2;180;60;0mgrad_norm:  0.8319  [38;2;54;234;195mmemory:  9.46GiB(64.99%)  [34mtps: 7,282  [36mtflops: 0.52  [35mmfu: 0.17%[39m
[rank0]:[titan] 2026-05-18 16:04:47,456 - root - INFO - [31mstep: 15  [32mloss:  3.10680  [38;2;180;60;0mgrad_norm:  0.8587  [38;2;54;234;195mmemory:  9.46GiB(64.99%)  [34mtps: 7,334  [36mtflops: 0.53  [35mmfu: 0.17%[39m
[rank0]:[titan] 2026-05-18 16:04:48,577 - root - INFO - [31mstep: 16  [32mloss:  3.05047  [38;2;180;60;0mgrad_norm:  0.5443  [38;2;54;234;195mmemory:  9.46GiB(64.99%)  [34mtps: 7,313  [36mtflops: 0.52  [35mmfu: 0.17%[39m
"""  # noqa: E501


def test_torchtitan_colour_codes_without_their_escape_byte(tmp_path: Path) -> None:
    # before: the remnants were read as names and numbers: metrics `mstep`, `mloss`,
    # `mgrad_norm` ..., every line at step 31 (the `[31m` before `step:`), no training loss
    fmt, m, w = _stored(tmp_path, TITAN_BARE_SGR)
    assert fmt == "generic_text"
    assert m["loss"] == {14: 3.24405, 15: 3.1068, 16: 3.05047}
    assert m["grad_norm"] == {14: 0.8319, 15: 0.8587, 16: 0.5443}
    assert m["tokens_per_s"] == {14: 7282.0, 15: 7334.0, 16: 7313.0}
    assert not any(k.startswith("m") and k != "memory" and k != "mfu_(%)" for k in m)
    assert not any("no training loss" in x for x in w)


def test_a_bracketed_duration_is_no_colour_code(tmp_path: Path) -> None:
    # `[10m]` is followed by `]`: left as it is (not read as a colour code and removed)
    _, m, _ = _stored(tmp_path, "step 1 loss 2.5 [10m]\nstep 2 loss nan [12m]\n")
    assert m["loss"][1] == 2.5 and math.isnan(m["loss"][2])


# ----- OLMo-core: the console logger's step grouped in thousands ------------------------------
# The console logger's block as a public test fixture quotes it ("What the OLMo-core
# console logger actually writes"): `[step=100/2000,epoch=0,eta=5h11m]` with indented
# `train/CE loss=6.2341`; public log parsers for OLMo-core runs match its step as
# `\[step=([0-9,]+)/([0-9,]+),epoch=`: past 999 it is printed `1,000/2,000`. The steps and
# values here follow that shape around a NaN.
OLMO_CORE_THOUSANDS = """\
2026-08-08 12:00:01 INFO [olmo_core.train.trainer:734] Training for 2,000 steps
2026-08-08 12:01:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=999/2,000,epoch=0,eta=5h11m]
    optim/total grad norm=0.4017
    train/CE loss=6.2341
    train/PPL=511.9
2026-08-08 12:04:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=1,000/2,000,epoch=0,eta=4h58m]
    optim/total grad norm=37.5
    train/CE loss=nan
    train/PPL=nan
2026-08-08 12:05:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=1,001/2,000,epoch=0,eta=4h57m]
    optim/total grad norm=nan
    train/CE loss=nan
"""  # noqa: E501

# A hand-written loop's `f"step: {step:,} | train loss: {tl:.8f} | ..."` (public source)
STEP_THOUSANDS = """\
step: 999 | train loss: 3.12340000 | train ppl: 22.7
step: 1,000 | train loss: 3.13010000 | train ppl: 22.9
step: 1,001 | train loss: nan | train ppl: nan
"""


def test_olmo_core_steps_grouped_in_thousands(tmp_path: Path) -> None:
    # before: "2 lines whose step field is not an integer: ignored": the NaN at 1,000 and
    # everything after step 999 was lost, with the indented values under them
    fmt, m, w = _stored(tmp_path, OLMO_CORE_THOUSANDS)
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [999, 1000, 1001] and m["loss"][999] == 6.2341
    assert math.isnan(m["loss"][1000]) and math.isnan(m["loss"][1001])
    assert m["grad_norm"][1000] == 37.5 and math.isnan(m["grad_norm"][1001])
    assert not any("not an integer" in x for x in w)
    _, m, _ = _stored(tmp_path, STEP_THOUSANDS)
    assert sorted(m["loss"]) == [999, 1000, 1001] and math.isnan(m["loss"][1001])


# ----- OLMo-core: an evaluator named with a number ---------------------------------------------
# Public scripts over OLMo-core runs read the evaluator's line as
# `dclm-validation-0802/CE loss=([0-9]+(?:\.[0-9]+)?)` beside `train/CE loss=`; here it
# stands in the block of a step whose training loss is NaN.
OLMO_CORE_EVALUATOR = """\
2026-08-08 12:01:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=200/2000,epoch=0,eta=5h11m]
    train/CE loss=6.2341
    train/PPL=511.9
2026-08-08 12:04:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=300/2000,epoch=0,eta=4h58m]
    train/CE loss=nan
    train/PPL=nan
    dclm-validation-0802/CE loss=3.2101
"""  # noqa: E501


def test_olmo_core_evaluator_name_with_a_number_is_not_the_training_loss(tmp_path: Path) -> None:
    # before: `0802` was a value slot and the key `/CE loss` the training loss: loss at 300
    # was 3.2101 (the validation value, by the "canonical name" rule), the NaN hidden
    _, m, _ = _stored(tmp_path, OLMO_CORE_EVALUATOR)
    assert m["loss"][200] == 6.2341 and math.isnan(m["loss"][300])
    assert m["dclm_validation_0802/ce_loss"] == {300: 3.2101}
