"""Logs pasted into issues around a loss spike or a NaN (session 35), one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it); each test says what the reader stored before where it stored something wrong, and
stays a regression test where it stored the log right already.
"""

from __future__ import annotations

from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- trlx: the losses in the tqdm bar's description, DeepSpeed overflows glued after it -----
# Quoted as printed in https://github.com/CarperAI/trlx/issues/342 (PPO with DeepSpeed fp16:
# `tbar.set_description(f"[{' | '.join(desc)}]")`, the bar counting optimizer steps; a
# rollout bar and the loss scaler's reports printed on the same physical lines).
TRLX_342 = """\
[losses/total_loss: 1.64 | losses/policy_loss: 0.12 | losses/value_loss: 7.62]:  16%|█████████████████                                                                                          | 1024/6400 [1:14:23<1:13:02,  1.23it/s][RANK 0] Collecting rollouts
[rollout 128 / 128]: 100%|████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████████| 128/128 [01:31<00:00,  1.40it/s][losses/total_loss: 1.34 | losses/policy_loss: -0.39 | losses/value_loss: 8.65]:  16%|█████████████████▎                                                                                        | 1044/6400 [1:16:09<1:07:04,  1.33it/s][2023-02-28 20:08:24,113] [INFO] [stage_1_and_2.py:1769:step] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 128.0, reducing to 64.0
[losses/total_loss: 4.35 | losses/policy_loss: -0.03 | losses/value_loss: 21.92]:  16%|█████████████████▍                                                                                         | 1045/6400 [1:16:09<53:12,  1.68it/s][2023-02-28 20:08:24,338] [INFO] [stage_1_and_2.py:1769:step] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64.0, reducing to 32.0
"""  # noqa: E501


def test_trlx_losses_in_the_bar_description(tmp_path: Path) -> None:
    # before: the bracketed description was taken for a logger's tag (`[rank0]:`) and
    # removed with the prefix: no loss at all, only `it/s`; the 1044 record, printed after
    # the rollout bar on one line, gave no step either
    fmt, m, w = _stored(tmp_path, TRLX_342)
    assert fmt == "generic_text"
    assert m["loss"] == {1024: 1.64, 1044: 1.34, 1045: 4.35}  # losses/total_loss
    assert m["losses/policy_loss"] == {1024: 0.12, 1044: -0.39, 1045: -0.03}
    assert m["losses/value_loss"] == {1024: 7.62, 1044: 8.65, 1045: 21.92}
    # each overflow skipped the step after the bar printed before it
    assert m["overflow"] == {1045: 1.0, 1046: 1.0}
    assert m["loss_scale"] == {1045: 64.0, 1046: 32.0}
    assert not any(k.startswith("rollout") or k.lower() == "rank" for k in m)
    assert not any("no training loss" in x for x in w)
