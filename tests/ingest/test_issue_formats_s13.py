"""Training-log styles quoted in public GitHub issues (ninth batch), one test per style.

Each fixture quotes the lines as printed in the issue or PR (URL beside it); where a test
needs a longer run, the lines after the quoted ones are written in the same format. Each
test says what the tool did before.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

from forensics.ingest.base import sniff_format

# ----- TRL PPOTrainer printed dicts (hongbo-miao/hongbomiao.com#37684) -------------------------
# TRL >= 0.11 prints one dict per logging step: no `loss` key (the losses are
# `loss/policy_avg` and `loss/value_avg`) and no step (`episode` counts samples).
_TRL_PPO = [
    "{'eps': 1, 'objective/kl': 10.507803916931152, 'objective/entropy': 99.79830932617188, 'objective/non_score_reward': -0.5253901481628418, 'objective/rlhf_reward': 1.1074223518371582, 'objective/scores': 1.6328125, 'policy/approxkl_avg': 0.002309529110789299, 'policy/clipfrac_avg': 0.00634765625, 'loss/policy_avg': 0.00090751051902771, 'loss/value_avg': 0.15319222211837769, 'val/clipfrac_avg': 0.0, 'policy/entropy_avg': 0.9802191257476807, 'val/ratio': 0.968413770198822, 'val/ratio_var': 6.904094334458932e-05, 'val/num_eos_tokens': 0, 'lr': 2.0634920634920634e-06, 'episode': 816, 'epoch': 0.91}",  # noqa: E501
    "{'eps': 1, 'objective/kl': 11.28681755065918, 'objective/entropy': 111.95989990234375, 'objective/non_score_reward': -0.5643408298492432, 'objective/rlhf_reward': 1.1153466701507568, 'objective/scores': 1.6796875, 'policy/approxkl_avg': 0.0024537513963878155, 'policy/clipfrac_avg': 0.004638671875, 'loss/policy_avg': -0.0024606515653431416, 'loss/value_avg': 0.08711372315883636, 'val/clipfrac_avg': 0.0, 'policy/entropy_avg': 1.0863183736801147, 'val/ratio': 0.9656732678413391, 'val/ratio_var': 2.2886375518282875e-05, 'val/num_eos_tokens': 0, 'lr': 1.904761904761905e-06, 'episode': 832, 'epoch': 0.92}",  # noqa: E501
]


def _ppo_record(episode: int, *, nan: bool) -> str:
    """A later record in the quoted format, its losses and KL NaN when `nan`."""
    line = _TRL_PPO[1].replace("'episode': 832", f"'episode': {episode}")
    if nan:
        for key in ("objective/kl", "loss/policy_avg", "loss/value_avg"):
            head, rest = line.split(f"'{key}': ", 1)
            line = f"{head}'{key}': nan," + rest.split(",", 1)[1]
    return line


def test_trl_ppo_dicts_without_a_loss_key_are_records(tmp_path: Path) -> None:
    # before: "no metric log found": a printed dict with no key named exactly `loss` was no
    # record, so no TRL PPO stdout could be read
    more = [_ppo_record(848 + 16 * i, nan=i >= 2) for i in range(4)]
    fmt, m, w = _stored(tmp_path, "\n".join(_TRL_PPO + more) + "\n")
    assert fmt == "generic_text"
    assert m["loss/policy_avg"][1] == 0.00090751051902771
    assert m["loss/value_avg"][2] == 0.08711372315883636
    assert sorted(m["loss/value_avg"]) == [1, 2, 3, 4, 5, 6]
    assert all(math.isnan(m[k][s]) for k in ("loss/value_avg", "objective/kl") for s in (5, 6))
    assert m["episode"][2] == 832 and m["lr"][1] == 2.0634920634920634e-06
    assert "loss" not in m  # an actor's and a critic's loss: neither is the run's loss
    assert any("numbered 1, 2, ... in file order" in x for x in w)
    assert any("no training loss: loss/policy_avg, loss/value_avg" in x for x in w)


def test_eval_dicts_alone_are_not_numbered_as_training_records(tmp_path: Path) -> None:
    """Step-less dicts whose only loss is an evaluation's are no training records."""
    lines = [
        f"{{'eval_loss': {2.0 - i / 10}, 'eval_runtime': 1.5, 'epoch': {i}.0}}" for i in range(4)
    ]
    text = "\n".join(lines) + "\n"
    path = tmp_path / "eval.log"
    path.write_text(text)
    reader = sniff_format(path)
    assert reader is None or reader.name != "generic_text"
