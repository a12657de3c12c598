"""A NaN the log only reports is not called the logged value at the step it is filed under.

tensor2tensor#106: TensorFlow's NanTensorHook prints `ERROR:tensorflow:Model diverged with
loss = NaN.` after the last `loss = 1.8717, step = 31601` line; no NaN value is logged. The
divergence is filed at 31601 ("after step 31601"), and the page said "`loss` went from
1.883 (pre-spike trend) to NaN at step 31601" beside an excerpt whose row 31601 reads
1.872. The log is the issue's tail after 100 lines in its own format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from consistency import check_report

from forensics.store import open_store

TAIL = """\
INFO:tensorflow:loss = 1.8717, step = 31601 (182.200 sec)
INFO:tensorflow:Saving checkpoints for 31622 into /home/minjoong/t2t_train/model.ckpt.
ERROR:tensorflow:Model diverged with loss = NaN.
Traceback (most recent call last):
  File "/home/minjoong/tf1_2/bin/t2t-trainer", line 82, in <module>
NanLossDuringTrainingError: NaN loss during training.
"""


def _log(path: Path) -> None:
    rng = np.random.default_rng(4)
    lines = []
    for step in range(21601, 31601, 100):
        loss = 2.2 * (step / 21601) ** -0.4 * float(np.exp(rng.normal(0, 0.01)))
        lines += [
            "INFO:tensorflow:global_step/sec: 0.548863",
            f"INFO:tensorflow:loss = {loss:.4f}, step = {step} (182.718 sec)",
        ]
    path.write_text("\n".join(lines) + "\n" + TAIL)


def test_a_reported_nan_is_not_quoted_as_the_logged_value(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    _log(tmp_path / "train.log")
    out, db = analyzed(tmp_path / "train.log")
    with open_store(db, read_only=True) as store:
        (inc,) = store.query("SELECT * FROM incidents").to_dicts()
        assert check_report(out, store, inc["run_id"]) == []
    assert inc["type"] == "divergent" and inc["peak_step"] == 31601
    page = (out / "postmortems" / "spike-01.md").read_text()
    assert "to NaN at step 31601" not in page
    assert "to NaN/Inf after step 31601" in page
    assert "its last logged value, at step 31601, is 1.872." in page
