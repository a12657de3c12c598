"""Training-log styles quoted in public GitHub issues (fourth batch), one test per style.

Each fixture quotes the lines as printed in the issue (URL beside it; the few synthetic
lines some tests add say so). The tests check what the ingest stores through the library
path the CLI calls, and each says what the reader did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored
from test_issue_formats_s7 import COLOSSAL_1375, DSCHAT_444, INTERNEVO_375, MINFM_4

from forensics.ingest.readers.generic import read_generic


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
    # `inf_nan_skip_batches` counts since the start, like DeepSpeed's `skipped=`; the log
    # starts at step 642, so its first count (3) holds skips made before it: none of 642's
    assert m["skipped_iters"] == {643: 0.0}
    assert any("counts skips made before the log begins" in x for x in w)


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


# ----- counters in brackets after their key ---------------------------------------------------
XTUNER_658 = """\
2024/05/07 11:45:16 - mmengine - INFO - Iter(train) [ 510/2046]  lr: 1.7590e-04  eta: 1:25:37  time: 22.5450  data_time: 19.6772  memory: 15266  loss: 0.6919  grad_norm: nan
2024/05/07 11:45:45 - mmengine - INFO - Iter(train) [ 520/2046]  lr: 1.7486e-04  eta: 1:24:50  time: 2.9098  data_time: 0.0234  memory: 15266  loss: 0.6479  grad_norm: nan
2024/05/07 11:46:14 - mmengine - INFO - Iter(train) [ 530/2046]  lr: 1.7380e-04  eta: 1:24:05  time: 2.9166  data_time: 0.0211  memory: 15266  loss: 0.6724  grad_norm: nan
"""  # noqa: E501  https://github.com/InternLM/xtuner/issues/658


def test_mmengine_iter_train_counter(tmp_path: Path) -> None:
    # before: no step found; the records were numbered 1, 2, 3 in file order
    _, m, w = _stored(tmp_path, XTUNER_658)
    assert m["loss"] == {510: 0.6919, 520: 0.6479, 530: 0.6724}
    assert _nan_at(m["grad_norm"]) == [510, 520, 530] and m["lr"][520] == 1.7486e-04
    assert not any("file order" in x for x in w)


RCTRANS_6 = """\
2025-04-18 21:58:31,047 - mmdet - INFO - Iter [10100/316440]\tlr: 3.990e-04, eta: 7 days, 4:23:57, time: 2.125, data_time: 0.014, memory: 15378, frame_0_loss_cls: 0.0000, frame_0_loss_bbox: 0.0000, frame_0_d0.loss_cls: 0.0000, frame_0_d0.loss_bbox: 0.0000, frame_0_d1.loss_cls: 0.0000, frame_0_d1.loss_bbox: 0.0000, frame_0_d2.loss_cls: 0.0000, frame_0_d2.loss_bbox: 0.0000, frame_0_d3.loss_cls: 0.0000, frame_0_d3.loss_bbox: 0.0000, frame_0_d4.loss_cls: 0.0000, frame_0_d4.loss_bbox: 0.0000, frame_0_dn_loss_cls: 0.0000, frame_0_dn_loss_bbox: 0.0000, frame_0_d0.dn_loss_cls: 0.0000, frame_0_d0.dn_loss_bbox: 0.0000, frame_0_d1.dn_loss_cls: 0.0000, frame_0_d1.dn_loss_bbox: 0.0000, frame_0_d2.dn_loss_cls: 0.0000, frame_0_d2.dn_loss_bbox: 0.0000, frame_0_d3.dn_loss_cls: 0.0000, frame_0_d3.dn_loss_bbox: 0.0000, frame_0_d4.dn_loss_cls: 0.0000, frame_0_d4.dn_loss_bbox: 0.0000, frame_0_enc_loss_cls: nan, frame_0_enc_loss_bbox: nan, frame_0_enc_loss_iou: nan, frame_0_centers2d_losses: nan, frame_0_centerness_losses: nan, loss: nan, grad_norm: nan
"""  # noqa: E501  https://github.com/liyih/RCTrans/issues/6


def test_mmcv_iter_counter_and_an_eta_in_days(tmp_path: Path) -> None:
    # before: no record at all (`Iter [` named nothing), and `7 days` would have been `eta` = 7
    path = tmp_path / "train.log"  # one line: too little for the format sniff, read directly
    path.write_text(RCTRANS_6, encoding="utf-8")
    long = read_generic(path, RCTRANS_6).metrics
    got = {n: (s, v) for s, n, v, _ in long.iter_rows()}
    assert got["loss"][0] == 10100 and math.isnan(got["loss"][1])
    assert math.isnan(got["frame_0_enc_loss_iou"][1]) and got["lr"] == (10100, 3.990e-04)
    assert "eta" not in got and got["frame_0_d4.dn_loss_bbox"][1] == 0.0


# ----- RLHF ---------------------------------------------------------------------------------------
AGENT_R1_30 = """\
(main_task pid=63313) step:83 - global_seqlen/min:22900.000 - global_seqlen/max:23135.000 - global_seqlen/minmax_diff:235.000 - global_seqlen/balanced_min:23017.000 - global_seqlen/balanced_max:23018.000 - global_seqlen/mean:23017.500 - state_tokens/total:20560.000 - state_tokens/coverage:1.000 - actor/kl_loss:nan - actor/kl_coef:0.001 - actor/entropy_loss:nan - actor/pg_loss:nan - actor/pg_clipfrac:0.000 - actor/ppo_kl:nan - actor/grad_norm:nan - mfu/actor:0.041 - actor/lr:0.000 - critic/score/mean:-1.000 - critic/score/max:-1.000 - critic/score/min:-1.000
"""  # noqa: E501  https://github.com/AgentR1/Agent-R1/issues/30 (the line goes on; cut after a field)


def test_verl_line_behind_a_ray_worker_prefix(tmp_path: Path) -> None:
    # before: Ray's `(main_task pid=63313)` prefix was read as a metric `main_task pid`
    path = tmp_path / "train.log"  # one line: too little for the format sniff, read directly
    path.write_text(AGENT_R1_30, encoding="utf-8")
    result = read_generic(path, AGENT_R1_30)
    got = {n: (s, v) for s, n, v, _ in result.metrics.iter_rows()}
    assert not [n for n in got if "pid" in n]
    assert got["actor/pg_loss"][0] == 83 and math.isnan(got["actor/pg_loss"][1])
    assert got["global_seqlen/mean"] == (83, 23017.5)
    # RLHF: the actor's and the critic's objectives keep their names; none becomes `loss`
    assert "loss" not in got
    assert any("no training loss: actor/kl_loss" in x for x in result.warnings)


def test_rlhf_actor_and_critic_losses_are_not_the_training_loss(tmp_path: Path) -> None:
    # before: the same series, and no word that the log has no `loss` for the loss screen
    _, m, w = _stored(tmp_path, DSCHAT_444)  # DeepSpeed-Chat step 3 (PPO)
    assert "loss" not in m and math.isinf(m["act_loss"][3184]) and math.isinf(m["cri_loss"][3184])
    assert any("no training loss: act_loss, cri_loss, unsuper_loss" in x for x in w)


# ----- lines cut at the terminal's width ---------------------------------------------------------
MMDET_2739 = """\
 loss_mask: 0.5553, loss: 1.8553
2020-05-15 14:41:49,633 - mmdet - INFO - Epoch [1][250/2500]    lr: 0.00125, eta: 1 day, 15:06:01, time: 1.870, data_time: 1.108, memory: 6226, loss_rpn_cls: 0.2658, loss_rpn_bbox: 0.2572, loss_cls: 0.3341, acc: 86.3379, loss_bbox: 0.3521$
 loss_mask: 0.5561, loss: 1.7653
2020-05-15 14:43:24,071 - mmdet - INFO - Epoch [1][300/2500]    lr: 0.00150, eta: 1 day, 15:05:35, time: 1.889, data_time: 1.121, memory: 6226, loss_rpn_cls: 0.2355, loss_rpn_bbox: 0.2700, loss_cls: 0.3596, acc: 84.7324, loss_bbox: 0.4131$
 loss_mask: 0.5532, loss: 1.8316
"""  # noqa: E501  https://github.com/open-mmlab/mmdetection/issues/2739 (the paste's trailing blanks dropped)


def test_a_wrapped_tail_before_the_first_record_belongs_to_none(tmp_path: Path) -> None:
    # before: the first line, the tail of a record cut off the paste, was stored at step 249
    # (the step before the first record, as for llm.c's unindented `val loss` line); and
    # `eta: 1 day, 15:06:01` gave a metric `eta` = 1
    _, m, _ = _stored(tmp_path, MMDET_2739)
    assert m["loss"] == {250: 1.7653, 300: 1.8316} and m["loss_mask"][300] == 0.5532
    assert m["loss_bbox"] == {250: 0.3521, 300: 0.4131} and "eta" not in m
