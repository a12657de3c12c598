"""Logs pasted into issues around a loss spike or a NaN (session 37): fixes of the generic
reader's names and units, one test per defect.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it; a fixture says so where lines are constructed in the shape of quoted ones); each test
says what the reader stored before where it stored something wrong, and stays a
regression test where it stored the log right already.
"""

from __future__ import annotations

from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- TRL DPO: the evaluation dict's `epoch` over the training record's ---------------------
# Quoted as printed in https://github.com/huggingface/trl/pull/570 (DPOTrainer's console).
TRL_DPO_570 = """\
{'loss': 0.9073, 'learning_rate': 4.2e-05, 'rewards/chosen': -1.17503821849823, 'rewards/rejected': -1.4742968082427979, 'rewards/accuracies': 0.5625, 'rewards/margins': 0.2992585599422455, 'logps/rejected': -148.04446411132812, 'logps/chosen': -138.34176635742188, 'logits/rejected': -109.33012390136719, 'logits/chosen': -109.74278259277344, 'epoch': 0.16}
{'eval_loss': 0.8106440901756287, 'eval_runtime': 9.5817, 'eval_samples_per_second': 10.437, 'eval_steps_per_second': 1.357, 'eval_rewards/chosen': -0.26931989192962646, 'eval_rewards/rejected': -0.19057123363018036, 'eval_rewards/accuracies': 0.45192307233810425, 'eval_rewards/margins': -0.0787486881017685, 'eval_logps/rejected': -140.43345642089844, 'eval_logps/chosen': -115.501220703125, 'eval_logits/rejected': -112.14944458007812, 'eval_logits/chosen': -112.40476989746094, 'epoch': 0.2}
{'loss': 0.8165, 'learning_rate': 3.8e-05, 'rewards/chosen': -1.1095190048217773, 'rewards/rejected': -1.5209710597991943, 'rewards/accuracies': 0.625, 'rewards/margins': 0.41145211458206177, 'logps/rejected': -175.07534790039062, 'logps/chosen': -148.30918884277344, 'logits/rejected': -108.8155517578125, 'logits/chosen': -109.02369689941406, 'epoch': 0.24}
"""  # noqa: E501


def test_trl_evaluation_epoch_keeps_off_the_training_epoch(tmp_path: Path) -> None:
    # before: epoch {1: 0.2, 2: 0.24}: the evaluation dict, attached to training record 1,
    # replaced its epoch 0.16 with the evaluation's 0.2
    _, m, _ = _stored(tmp_path, TRL_DPO_570)
    assert m["epoch"] == {1: 0.16, 2: 0.24}
    assert m["val_loss"] == {1: 0.8106440901756287}
    assert m["loss"] == {1: 0.9073, 2: 0.8165}
