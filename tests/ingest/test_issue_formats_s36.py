"""Logs of current LLM trainers pasted into issues around a loss spike or a NaN (session 36),
one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it; a fixture says so where lines are constructed in the shape of quoted ones); each test
says what the reader stored before where it stored something wrong, and stays a
regression test where it stored the log right already.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- fairseq2: `Train Metrics (step N) - Loss: ... | ...` -----------------------------------
# fairseq2's LogMetricRecorder logs `f"{title} Metrics (step {step_nr}) - {name}: {value} | ..."`
# (https://github.com/facebookresearch/fairseq2/blob/main/src/fairseq2/metrics/recorders/_log.py;
# the `valid` section titled `Validation`). The first two lines are quoted as printed in a
# public project's notes on an fp16 run (found by code search); the log prefix and the
# other lines are constructed in their shape, the step-150 update overflowing to NaN/Inf.
FAIRSEQ2 = """\
[04/18/25 01:02:03] INFO     fairseq2.recipes - Train Metrics (step 50) - Loss: 540.044 | grad_scale: 0.0625
[04/18/25 01:03:03] INFO     fairseq2.recipes - Train Metrics (step 100) - Loss: 317.291 | grad_scale: 0.0625
[04/18/25 01:04:03] INFO     fairseq2.recipes - Train Metrics (step 150) - Loss: nan | Gradient Norm: inf | Learning Rate: 3.00e-04 | grad_scale: 0.0313
[04/18/25 01:04:33] INFO     fairseq2.recipes - Validation Metrics (step 150) - Loss: 280.5 | Number of Elapsed Examples: 1000
[04/18/25 01:05:03] INFO     fairseq2.recipes - Train Metrics (step 200) - Loss: 300.1 | Gradient Norm: 12.5 | Learning Rate: 3.00e-04 | grad_scale: 0.0313
"""  # noqa: E501


def test_fairseq2_step_in_parentheses_is_the_step(tmp_path: Path) -> None:
    # before: `(step 50)` gave the key `Train Metrics (step`, no step counter: the records
    # were numbered 1, 2 in file order, and the two lines without a gradient norm were
    # dropped as repeats of the others (the 540.044 and 317.291 losses lost)
    fmt, m, w = _stored(tmp_path, FAIRSEQ2)
    assert fmt == "generic_text"
    assert set(m["loss"]) == {50, 100, 150, 200} and m["loss"][100] == 317.291
    assert math.isnan(m["loss"][150]) and m["loss"][200] == 300.1
    assert math.isinf(m["grad_norm"][150]) and m["grad_norm"][200] == 12.5
    assert m["lr"] == {150: 3e-4, 200: 3e-4}
    assert m["loss_scale"] == {50: 0.0625, 100: 0.0625, 150: 0.0313, 200: 0.0313}
    assert m["val_loss"] == {150: 280.5}
    assert not any("no step counter" in x for x in w)
