"""Logs users bring, read wrong or not at all before (session 42), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it); a fixture says so where lines are constructed in the shape of quoted ones, and a
fixture quoted by an earlier session is imported from its test. Each test says what the
reader stored before.
"""

from __future__ import annotations

from pathlib import Path

from issue_log_helpers import stored as _stored
from test_issue_formats_s33 import TF_43014

# ----- TensorFlow's `global_step/sec: 0.803899`: the training rate ------------------------
# TF1's StepCounterHook prints the steps per second over the last report's steps on a line
# of its own, before the Estimator's `loss = ..., step = 100 (124.394 sec)` of the same run
# (100 / 0.803899 = 124.39). TF_43014 (tensorflow/tensorflow#43014) ends with a rate line
# whose record the quote does not hold.


def test_tf_estimator_steps_per_second(tmp_path: Path) -> None:
    # before: the `global_step/sec` lines were ignored (no step): the run's rate was lost
    fmt, m, _ = _stored(tmp_path, TF_43014)
    assert fmt == "generic_text"
    assert m["steps_per_sec"] == {100: 0.803899}  # the last, after every record: not stored
    assert m["loss"] == {0: 96.96749, 100: 4.264659}  # as before
    assert not {"sec", "global_step/sec", "global_step", "global_steps"} & set(m)


# TF-slim's training loop under a Supervisor, whose step counter thread prints the rate on a
# timer; TensorFlow 1.x's logger printed every line twice here. Quoted as printed in
# https://github.com/tensorflow/models/issues/2980 ("what is global step and loss?").
TF_SLIM_2980 = """\
INFO:tensorflow:Recording summary at step 0.
INFO:tensorflow:Recording summary at step 0.
INFO:tensorflow:global step 1: loss = 79.3501 (57.126 sec/step)
INFO:tensorflow:global step 1: loss = 79.3501 (57.126 sec/step)
INFO:tensorflow:global step 2: loss = 72.8609 (17.053 sec/step)
INFO:tensorflow:global step 2: loss = 72.8609 (17.053 sec/step)
INFO:tensorflow:global step 3: loss = 67.3308 (16.534 sec/step)
INFO:tensorflow:global step 3: loss = 67.3308 (16.534 sec/step)
INFO:tensorflow:global step 4: loss = 64.2655 (16.926 sec/step)
INFO:tensorflow:global step 4: loss = 64.2655 (16.926 sec/step)
INFO:tensorflow:Recording summary at step 4.
INFO:tensorflow:Recording summary at step 4.
INFO:tensorflow:global_step/sec: 0.0339311
INFO:tensorflow:global_step/sec: 0.0339311
INFO:tensorflow:global step 5: loss = 62.5264 (20.205 sec/step)
INFO:tensorflow:global step 5: loss = 62.5264 (20.205 sec/step)
INFO:tensorflow:global step 6: loss = 60.8808 (17.060 sec/step)
INFO:tensorflow:global step 6: loss = 60.8808 (17.060 sec/step)
"""


def test_tf_slim_steps_per_second_between_step_lines(tmp_path: Path) -> None:
    # before: the two `global_step/sec` lines were ignored; the step's time was stored
    fmt, m, _ = _stored(tmp_path, TF_SLIM_2980)
    assert fmt == "generic_text"
    assert m["steps_per_sec"] == {5: 0.0339311}  # the step of the record after it
    assert m["loss"] == {1: 79.3501, 2: 72.8609, 3: 67.3308, 4: 64.2655, 5: 62.5264, 6: 60.8808}
    assert m["iter_time_s"][5] == 20.205  # as before: `sec/step` is the step's own time
    assert not {"sec", "global_step/sec"} & set(m)
