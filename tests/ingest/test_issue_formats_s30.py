"""Training-log styles quoted in public GitHub issues and code (session 30), one test per style.

Each fixture quotes the lines as printed where they were found (URL or source beside it).
The tests check what the ingest stores through the library path the CLI calls, and each
says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- MaxText: `eval metrics after step: N, loss=...` ----------------------------------------
# MaxText's metric logger prints `eval metrics after step: {step}, loss={eval/avg_loss:.3f},
# total_weights={eval/total_weights}` after each evaluation. The eval lines are quoted as
# printed in MaxText's pre-training tutorial
# (https://github.com/AI-Hypercomputer/maxtext/blob/main/docs/tutorials/pretraining.md, the
# `...` between its eval steps cut); the training lines of steps 1 and 9 are quoted from the
# same page, step 9's loss (printed 9.436) made a NaN, and step 4's line constructed in
# their shape.
MAXTEXT_EVAL = """\
completed step: 1, seconds: 0.287, TFLOP/s/device: 110.951, Tokens/s/device: 7131.788, total_weights: 7517, loss: 12.021
completed step: 4, seconds: 1.008, TFLOP/s/device: 31.602, Tokens/s/device: 2031.361, total_weights: 7652, loss: 10.164
Completed eval step 0
Completed eval step 9
eval metrics after step: 4, loss=9.855, total_weights=75264.0
completed step: 9, seconds: 1.010, TFLOP/s/device: 31.541, Tokens/s/device: 2027.424, total_weights: 7979, loss: nan
Completed eval step 0
Completed eval step 9
eval metrics after step: 9, loss=9.420, total_weights=75264.0
"""  # noqa: E501


def test_maxtext_eval_loss_after_its_step(tmp_path: Path) -> None:
    # before: the eval line was read as a step-less line of the training step before it: its
    # loss replaced the training loss (loss {1: 12.021, 4: 9.855, 9: 9.42}, step 9's NaN lost)
    # and `eval_metrics_after_step` was a metric
    fmt, m, _ = _stored(tmp_path, MAXTEXT_EVAL)
    assert fmt == "generic_text"
    assert m["loss"][1] == 12.021 and m["loss"][4] == 10.164 and math.isnan(m["loss"][9])
    assert m["val_loss"] == {4: 9.855, 9: 9.420}
    assert m["total_weights"][9] == 7979 and m["eval/total_weights"][9] == 75264.0
    assert not any("after" in k for k in m)
