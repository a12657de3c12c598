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


# ----- pith-train: `step N/M | ... | cross-entropy-loss X | load-balance-loss Y | ...` --------
# Quoted as printed in https://github.com/mlc-ai/pith-train/pull/7 (an MoE pretraining log).
PITH_7 = """\
2026-04-01 14:06:36 | INFO | step 00000001/00000015 | step-time 73.352 sec | cross-entropy-loss 2.6636 | load-balance-loss 0.001807 | learning-rate 1.000000e-06 | gradient-norm 20.2657 | tokens-per-second 28,590 | peak-gpu-memory 63.65 GB
2026-04-01 14:07:05 | INFO | step 00000002/00000015 | step-time 28.823 sec | cross-entropy-loss 2.5949 | load-balance-loss 0.001803 | learning-rate 1.000000e-06 | gradient-norm 20.0672 | tokens-per-second 72,759 | peak-gpu-memory 63.84 GB
2026-04-01 14:07:33 | INFO | step 00000003/00000015 | step-time 27.786 sec | cross-entropy-loss 2.6520 | load-balance-loss 0.001826 | learning-rate 1.000000e-06 | gradient-norm 19.9174 | tokens-per-second 75,474 | peak-gpu-memory 63.85 GB
2026-04-01 14:08:02 | INFO | step 00000004/00000015 | step-time 28.437 sec | cross-entropy-loss 2.6988 | load-balance-loss 0.001824 | learning-rate 1.000000e-06 | gradient-norm 19.7415 | tokens-per-second 73,748 | peak-gpu-memory 63.77 GB
2026-04-01 14:08:30 | INFO | step 00000005/00000015 | step-time 27.775 sec | cross-entropy-loss 2.6154 | load-balance-loss 0.001816 | learning-rate 1.000000e-06 | gradient-norm 19.8322 | tokens-per-second 75,504 | peak-gpu-memory 63.76 GB
"""  # noqa: E501


def test_pith_train_cross_entropy_loss_is_the_training_loss(tmp_path: Path) -> None:
    # before: `cross-entropy-loss` was no name of the training loss (`ce_loss` and
    # `cross_entropy` were): beside the load-balancing loss neither was taken for it, and
    # the loss screen had no `loss` to read
    fmt, m, w = _stored(tmp_path, PITH_7)
    assert fmt == "generic_text"
    assert m["loss"] == {1: 2.6636, 2: 2.5949, 3: 2.652, 4: 2.6988, 5: 2.6154}
    assert m["load_balance_loss"][5] == 0.001816
    assert m["grad_norm"][3] == 19.9174 and m["lr"][1] == 1e-06
    assert m["tokens_per_s"][2] == 72759
    assert not any("no training loss" in x for x in w)
