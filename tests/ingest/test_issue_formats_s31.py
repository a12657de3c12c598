"""Training-log styles quoted in public GitHub issues and code (session 31), one test per style.

Each fixture quotes the lines as printed where they were found (URL or source beside it).
The tests check what the ingest stores through the library path the CLI calls, and each
says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- Flax examples (CLU LoggingWriter): `train_learning_rate=...` ----------------------------
# The Flax ImageNet example's train.py writes `train_learning_rate` with its training summary.
# Quoted as printed in its README's sample run
# (https://github.com/google/flax/blob/main/examples/imagenet/README.md, the Markdown indent
# cut); step 200's `train_loss` (printed 6.772485733032227) made a NaN.
FLAX_LR = """\
I0919 14:15:27.775955 140151934879488 logging_writer.py:35] [100] steps_per_second=2.183623, train_accuracy=0.0013867187080904841, train_learning_rate=0.003165467409417033, train_loss=6.95107364654541
I0919 14:15:41.729644 140151934879488 logging_writer.py:35] [200] steps_per_second=7.168900, train_accuracy=0.007822265848517418, train_learning_rate=0.009560351260006428, train_loss=nan
"""  # noqa: E501


def test_flax_train_learning_rate_is_lr(tmp_path: Path) -> None:
    # before: stored under its own name `train_learning_rate`: no `lr` for the run
    fmt, m, _ = _stored(tmp_path, FLAX_LR)
    assert fmt == "generic_text"
    assert m["lr"] == {100: 0.003165467409417033, 200: 0.009560351260006428}
    assert "train_learning_rate" not in m
    assert m["loss"][100] == 6.95107364654541 and math.isnan(m["loss"][200])
