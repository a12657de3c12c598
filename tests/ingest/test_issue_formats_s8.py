"""Training-log styles quoted in public GitHub issues (fourth batch), one test per style.

Each fixture quotes the lines as printed in the issue (URL beside it; the few synthetic
lines some tests add say so). The tests check what the ingest stores through the library
path the CLI calls, and each says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored
from test_issue_formats_s7 import COLOSSAL_1375, INTERNEVO_375, MINFM_4


def _nan_at(series: dict[int, float]) -> list[int]:
    return sorted(s for s, v in series.items() if math.isnan(v))


# ----- skips and overflows --------------------------------------------------------------------
def test_internevo_grad_norm_per_parameter_group(tmp_path: Path) -> None:
    # before: `grad_norm={'0_default': 2.16, '1_fp32': 0.0}` stored nothing (no grad norm)
    _, m, w = _stored(tmp_path, INTERNEVO_375)  # https://github.com/InternLM/InternEvo/issues/375
    assert m["grad_norm/default"] == {642: 2.156615516531637, 643: 1.7590333217221075}
    assert m["grad_norm/fp32"] == {642: 0.0, 643: 0.0}
    assert m["grad_norm"] == m["grad_norm/default"]  # sqrt(2.16**2 + 0**2): the whole gradient
    assert any("one norm per parameter group" in x for x in w)
    # `inf_nan_skip_batches` counts since the start, like DeepSpeed's `skipped=`
    assert m["skipped_iters"] == {642: 3.0, 643: 0.0}


def test_internevo_group_sentinels_are_inf_and_nan(tmp_path: Path) -> None:
    # synthetic lines in the quoted syntax: InternEvo returns a group's norm as -1 (Inf found)
    # or -2 (NaN found), `if -1 in norms.values(): found_inf = True` (hybrid_zero_optim.py)
    line = INTERNEVO_375.splitlines()[0]
    text = "\n".join(
        line.replace("step=642", f"step={s}").replace("2.156615516531637", v)
        for s, v in ((642, "2.156615516531637"), (643, "-1"), (644, "-2"))
    )
    _, m, _ = _stored(tmp_path, text + "\n")
    assert math.isinf(m["grad_norm"][643]) and math.isinf(m["grad_norm/default"][643])
    assert _nan_at(m["grad_norm"]) == [644] and m["grad_norm"][642] == 2.156615516531637


def test_a_line_saying_its_step_was_skipped(tmp_path: Path) -> None:
    # before: the four `Step N: detected ... (norm=X); skipping optimizer step.` lines were
    # ignored (the skipped steps and the norms that made minFM skip them were lost)
    _, m, w = _stored(tmp_path, MINFM_4)  # https://github.com/Kai-46/minFM/issues/4
    assert m["skipped_iters"] == {1557: 1.0, 1558: 1.0, 1559: 1.0, 1560: 1.0}
    assert m["grad_norm"] == {
        1557: 2.1966569423675537,
        1558: 2.164307117462158,
        1559: 2.1794376373291016,
        1560: 2.29,  # the record's own figure (the window's largest norm) wins at its step
    }
    assert not any("also logged" in x for x in w)  # no conflict left for the store to settle


def test_colossalai_found_inf_is_an_overflow(tmp_path: Path) -> None:
    # before: the `found inf during ShardedOptimV2 step` warnings were ignored lines
    # https://github.com/hpcaitech/ColossalAI/issues/1375
    _, m, _ = _stored(tmp_path, COLOSSAL_1375)
    assert m["overflow"] == {431: 1.0, 432: 1.0}  # each warning precedes the bar it interrupts
    assert _nan_at(m["loss"]) == [431, 432]
