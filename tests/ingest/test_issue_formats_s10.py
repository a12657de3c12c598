"""Training-log styles quoted in public GitHub issues (sixth batch), one test per style.

Each fixture quotes the lines as printed in the issue (URL beside it). The tests check what
the ingest stores through the library path the CLI calls, and each says what the reader
did before.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from issue_log_helpers import stored as _stored

from forensics.detect import detect
from forensics.ingest import ingest
from forensics.store import open_store

# ----- ESPnet2 ------------------------------------------------------------------------------------
ESPNET_2675 = """\
[PC] 2020-11-11 16:30:04,578 (trainer:486) INFO: 1epoch:train:6376-6750batch: iter_time=0.001, forward_time=0.005, loss=2.386, backward_time=0.005, optim_step_time=1.949e-04, lr_0=0.100, train_time=0.013
[PC] 2020-11-11 16:30:09,675 (trainer:486) INFO: 1epoch:train:6751-7125batch: iter_time=0.001, forward_time=0.005, loss=2.367, backward_time=0.005, optim_step_time=1.953e-04, lr_0=0.100, train_time=0.013
[PC] 2020-11-11 16:30:14,840 (trainer:486) INFO: 1epoch:train:7126-7500batch: iter_time=0.001, forward_time=0.005, loss=2.339, backward_time=0.005, optim_step_time=1.963e-04, lr_0=0.100, train_time=0.014
[PC] 2020-11-11 16:30:18,406 (trainer:243) INFO: 1epoch results: [train] iter_time=0.001, forward_time=0.005, loss=2.853, backward_time=0.005, optim_step_time=1.974e-04, lr_0=0.100, train_time=0.013, time=1 minute and 42.6 seconds, total_count=7507, [valid] loss=2.387, time=3 seconds, total_count=240, [att_plot] time=0.28 seconds, total_count=0
[PC] 2020-11-11 16:30:18,969 (trainer:286) INFO: The best model has been updated: valid.loss
[PC] 2020-11-11 16:30:18,969 (trainer:184) INFO: 2/20epoch started. Estimated time to finish: 33 minutes and 42.59 seconds
[PC] 2020-11-11 16:30:24,312 (trainer:486) INFO: 2epoch:train:1-375batch: iter_time=0.001, forward_time=0.005, loss=2.313, backward_time=0.005, optim_step_time=2.000e-04, lr_0=0.100, train_time=0.014
"""  # noqa: E501  https://github.com/espnet/espnet/issues/2675

ESPNET_2674 = """\
[PC] 2020-11-11 16:41:00,521 (trainer:486) INFO: 7epoch:train:7126-7500batch: iter_time=0.001, forward_time=0.005, loss=1.601, backward_time=0.005, optim_step_time=1.977e-04, lr_0=0.100, train_time=0.014
[PC] 2020-11-11 16:41:04,070 (trainer:243) INFO: 7epoch results: [train] iter_time=0.001, forward_time=0.005, loss=1.613, backward_time=0.005, optim_step_time=1.986e-04, lr_0=0.100, train_time=0.014, time=1 minute and 44.19 seconds, total_count=52549, [valid] loss=1.854, time=3.12 seconds, total_count=1680, [att_plot] time=0.14 seconds, total_count=0
[PC] 2020-11-11 16:41:04,630 (trainer:286) INFO: The best model has been updated: valid.loss
[PC] 2020-11-11 16:41:04,632 (trainer:306) INFO: The model files were removed: exp/lm_train_lm_bpe250/6epoch.pth
[PC] 2020-11-11 16:41:04,632 (trainer:184) INFO: 8/20epoch started. Estimated time to finish: 23 minutes and 16.79 seconds
[PC] 2020-11-11 16:41:09,988 (trainer:486) INFO: 8epoch:train:1-375batch: iter_time=0.001, forward_time=0.005, loss=1.585, backward_time=0.005, optim_step_time=1.985e-04, lr_0=0.100, train_time=0.014
[PC] 2020-11-11 16:41:15,125 (trainer:486) INFO: 8epoch:train:376-750batch: iter_time=9.825e-04, forward_time=0.005, loss=1.568, backward_time=0.005, optim_step_time=1.995e-04, lr_0=0.100, train_time=0.013
"""  # noqa: E501  https://github.com/espnet/espnet/issues/2674


def test_espnet2_windows_are_stepped_over_the_run(tmp_path: Path) -> None:
    # before: `1epoch:train:` was stripped as a logger name, the step was the window's start
    # (6376, ...), epoch 2's `1-375batch` landed at step 1, the epoch results put both the
    # epoch average 2.853 and the validation loss into `loss` at step 1, and `2/20epoch
    # started` became a record (`started._estimated_time_to_finish` at step 2)
    _, m, _ = _stored(tmp_path, ESPNET_2675)
    # the window's end, epoch 2 counted on from epoch 1's `total_count=7507`
    assert m["loss"] == {6750: 2.386, 7125: 2.367, 7500: 2.339, 7882: 2.313}
    assert m["val_loss"] == {7507: 2.387}  # at the iteration count the epoch ended on
    assert m["epoch/loss"] == {7507: 2.853}  # the epoch average: never in `loss`
    assert min(s for series in m.values() for s in series) > 0
    assert not [k for k in m if "started" in k or "minute" in k or "total_count" in k]
    # ESPnet's `train_time` is seconds per iteration, its `iter_time` the data-loading time:
    # neither is the cumulative `train_time_ms` nor the per-iteration `iter_time_s`
    assert m["train_time"][7882] == 0.014 and m["iter_time"][6750] == 0.001
    assert "train_time_ms" not in m and "iter_time_s" not in m


def test_espnet2_log_that_starts_in_a_later_epoch(tmp_path: Path) -> None:
    # before: epoch 8's batches 1-375 and 376-750 were steps 1 and 376, below epoch 7's
    _, m, w = _stored(tmp_path, ESPNET_2674)
    # epoch 8 continues from epoch 7's count 52549; epoch 7 ends on its own count less the
    # iterations after its last window, which the log does not print (7500 of 7507)
    assert m["loss"] == {52549 - 7500 + 7500: 1.601, 52549 + 375: 1.585, 52549 + 750: 1.568}
    assert m["val_loss"] == {52549: 1.854} and m["epoch/loss"] == {52549: 1.613}
    assert any("ESPnet-style" in x for x in w)


# ----- TensorFlow Estimator's NaN report ----------------------------------------------------------
T2T_1074 = """\
INFO:tensorflow:Running local_init_op.
INFO:tensorflow:Done running local_init_op.
INFO:tensorflow:Saving checkpoints for 1 into /projects/nmt/t2t_train/translate_ende_wmt_bpe32k/transformer-transformer_base-v12-b4096-gpu2-b4096/model.ckpt.
INFO:tensorflow:step = 0, loss = 9.76205
ERROR:tensorflow:Model diverged with loss = NaN.
Traceback (most recent call last):
  File "/usr/local/bin/t2t-trainer", line 32, in <module>
    tf.app.run()
"""  # noqa: E501  https://github.com/tensorflow/tensor2tensor/issues/1074

T2T_106 = """\
INFO:tensorflow:loss = 1.8717, step = 31601 (182.200 sec)
INFO:tensorflow:Saving checkpoints for 31622 into /home/minjoong/t2t_train/koen_tokens_32k/transformer-transformer_big/margin/model.ckpt.
ERROR:tensorflow:Model diverged with loss = NaN.
Traceback (most recent call last):
  File "/home/minjoong/tf1_2/bin/t2t-trainer", line 82, in <module>
    tf.app.run()
"""  # noqa: E501  https://github.com/tensorflow/tensor2tensor/issues/106


def _ingest_events(tmp_path: Path, text: str) -> tuple[dict, list[tuple], list]:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / "train.log"
    path.write_text(text, encoding="utf-8")
    with open_store(folder / "t.duckdb") as store:
        (summary,) = ingest(store, [path])
        events = store.con.execute("select step, kind, detail from events").fetchall()
        loss = {s: v for s, n, v, _ in store.metrics_long(summary.run).iter_rows() if n == "loss"}
        found = detect(store, summary.run)
    return loss, events, found


def test_tf_model_diverged_is_an_event_after_the_last_step(tmp_path: Path) -> None:
    # before: a log with one record line (and the NaN report) was refused: unknown format
    loss, events, _ = _ingest_events(tmp_path, T2T_1074)
    assert loss == {0: 9.76205}  # no NaN value invented
    assert events == [
        (0, "nonfinite_loss", "ERROR:tensorflow:Model diverged with loss = NaN. (after step 0)")
    ]
    loss, events, _ = _ingest_events(tmp_path, T2T_106)
    assert loss == {31601: 1.8717}
    assert [(s, k) for s, k, _ in events] == [(31601, "nonfinite_loss")]
    assert "after step 31601" in events[0][2]


def test_tf_loss_lines_then_the_nan_report_make_an_incident(tmp_path: Path) -> None:
    # TF's own `loss = X, step = N (T sec)` lines (as in tensor2tensor#106), then its report
    lines = "".join(
        f"INFO:tensorflow:loss = {2.3 - s / 10000:.4f}, step = {s} (1.2 sec)\n"
        for s in range(100, 5100, 100)
    )
    loss, events, found = _ingest_events(tmp_path, lines + T2T_106.splitlines(True)[2])
    assert len(loss) == 50 and loss[5000] == 1.8
    assert [(s, k) for s, k, _ in events] == [(5000, "nonfinite_loss")]
    (detection,) = found
    hits = [i for i in detection.incidents if i.peak_step == 5000]
    assert hits and any(e.kind == "nonfinite_loss" for e in hits[0].events)


ESPNET_3104 = """\
INFO: 1epoch:train:1-1020batch: iter_time=0.002, forward_time=0.112, loss=6.474, backward_time=0.487, optim_step_time=0.097, optim0_lr0=5.130e-05, train_time=1.857
INFO: 1epoch:train:1021-2040batch: iter_time=1.498e-04, forward_time=0.109, loss=5.321, backward_time=0.490, optim_step_time=0.098, optim0_lr0=1.533e-04, train_time=1.662
INFO: 1epoch:train:2041-3060batch: iter_time=1.601e-04, forward_time=0.105, loss=4.930, backward_time=0.486, optim_step_time=0.099, optim0_lr0=2.553e-04, train_time=1.640
INFO: 1epoch:train:5101-6120batch: iter_time=1.574e-04, forward_time=0.110, loss=4.450, backward_time=0.489, optim_step_time=nan, optim0_lr0=4.498e-04, train_time=1.526
"""  # noqa: E501  https://github.com/espnet/espnet/issues/3104


def test_espnet2_optimizer_lr_is_the_learning_rate(tmp_path: Path) -> None:
    # ESPnet2 names the LR of optimizer 0, parameter group 0 `optim0_lr0`; before, it was a
    # metric of its own and the run's LR read as not logged
    _, m, _ = _stored(tmp_path, ESPNET_3104)
    assert m["lr"] == {1020: 5.13e-05, 2040: 1.533e-04, 3060: 2.553e-04, 6120: 4.498e-04}
    assert m["loss"][6120] == 4.45
    assert "optim0_lr0" not in m
