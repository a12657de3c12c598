"""Logs users bring, read wrong or not at all before (session 40), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it); a fixture says so where lines are constructed in the shape of quoted ones, and a
fixture quoted by an earlier session is imported from its test. Each test says what the
reader stored before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored
from test_issue_formats_s7 import ACCESSORY_48, BEIT_598
from test_issue_formats_s32 import DEIT


def _nan_at(series: dict[int, float]) -> list[int]:
    return sorted(s for s, v in series.items() if math.isnan(v))


# ----- MAE / DeiT / BEiT MetricLogger: `Averaged stats: ... loss: 6.5993 (6.5925)` ---------------
# MetricLogger prints each SmoothedValue as `{median:.4f} ({global_avg:.4f})`: the median of
# its 20-value window (this rank's; `synchronize_between_processes` all-reduces count and
# total only), then the mean since the epoch began. train_one_epoch returns the global
# averages (`{k: meter.global_avg ...}`, what log.txt holds): the epoch's statistic.


def test_averaged_stats_are_the_epochs_averages(tmp_path: Path) -> None:
    # before: `epoch/loss` 6.5993 and `epoch/grad_norm` 0.3922, the window medians; the
    # epoch's NaN grad norm average `(nan)` (unilm#598, BEiT under fp16) was lost
    _, m, w = _stored(tmp_path, BEIT_598)
    step = 114 * 1299 + 1298
    assert m["epoch/loss"] == {step: 6.5925} and m["epoch/mlm_acc"] == {step: 0.0345}
    assert _nan_at(m["epoch/grad_norm"]) == [step]
    assert m["epoch/lr"] == {step: 0.001435}  # one number: the value, as printed
    assert m["grad_norm"] == {step: 0.3922}  # the training line keeps its window value
    assert any("(<epoch/mlm_acc>)" in x for x in w)  # the warning shows which number


def test_averaged_stats_of_llama_accessory(tmp_path: Path) -> None:
    # before: `epoch/loss` 0.6884 (the `closs` window median), not the epoch's 0.8518
    _, m, _ = _stored(tmp_path, ACCESSORY_48)
    assert m["epoch/loss"] == {3004: 0.8518} and m["epoch/grad_norm"] == {3004: 0.3311}
    assert m["loss"][3004] == 0.6923  # the per-iteration lines as before


# ----- evaluation lines that count their batches: `Test: [ 195/195]  Loss: 5.5 (3.98)` -----------
# DeiT's evaluate() updates its MetricLogger once a batch and prints `Test:  [95/96] ...
# acc1: 89.0625 (88.3813)`: the window median, then the mean over the evaluation so far.


def test_deit_test_lines_are_the_evaluations_means(tmp_path: Path) -> None:
    # before: `test/acc1` 89.0625, a 20-batch window median; DeiT's own summary after it
    # (`* Acc@1 88.381`) is the running mean `(88.3813)`
    _, m, _ = _stored(tmp_path, DEIT)
    last = 49 * 31 + 30
    assert m["test/acc1"] == {last: 88.3813} and m["test/acc5"] == {last: 96.779}
    assert m["test_loss"] == {last: 0.445}  # the summary line's, printed after them
