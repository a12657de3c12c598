"""Training-log styles quoted in public GitHub issues and code (session 28), one test per style.

Each fixture quotes the lines as printed where they were found (URL or source beside it).
The tests check what the ingest stores through the library path the CLI calls, and each
says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- OLMo-core: the learning rate of each parameter group -----------------------------------
# OLMo-core's train modules record `self.trainer.record_metric(f"LR (group {group_idx})",
# new_lr, namespace="optim")` (allenai/OLMo-core, src/olmo_core/train/train_module/
# transformer/train_module.py), and its console logger prints each metric indented under the
# step line as `name=value`, like `optim/total grad norm=0.4017`; the official training
# report (src/scripts/official/README.md) plots `optim/LR (group 0)` beside `optim/LR
# (group 1)`. The values here follow that shape around a NaN.
OLMO_CORE_LR = """\
2026-08-08 12:01:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=999/2,000,epoch=0,eta=5h11m]
    optim/total grad norm=0.4017
    optim/LR (group 0)=3.0e-04
    optim/LR (group 1)=3.0e-05
    train/CE loss=6.2341
2026-08-08 12:04:00 INFO [olmo_core.train.callbacks.console_logger:68] [step=1,000/2,000,epoch=0,eta=4h58m]
    optim/total grad norm=37.5
    optim/LR (group 0)=2.9e-04
    optim/LR (group 1)=2.9e-05
    train/CE loss=nan
"""  # noqa: E501


def test_olmo_core_learning_rate_of_the_first_group_is_the_lr(tmp_path: Path) -> None:
    # before: `(group 0)` made the index a slot and left the value without a key (`)=`):
    # "lines ignored", no learning rate at all
    fmt, m, w = _stored(tmp_path, OLMO_CORE_LR)
    assert fmt == "generic_text"
    assert m["lr"] == {999: 3.0e-04, 1000: 2.9e-04}
    assert m["optim/lr_(group_1)"] == {999: 3.0e-05, 1000: 2.9e-05}
    assert m["loss"][999] == 6.2341 and math.isnan(m["loss"][1000])
    assert not any("lines ignored" in x for x in w)
