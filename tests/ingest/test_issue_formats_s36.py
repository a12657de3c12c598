"""Logs of current LLM trainers pasted into issues around a loss spike or a NaN (session 36),
one test per style.

Each fixture quotes the lines as printed where they were found (the issue's URL beside
it; a fixture says so where lines are constructed in the shape of quoted ones); each test
says what the reader stored before where it stored something wrong, and stays a
regression test where it stored the log right already.
"""

from __future__ import annotations

import math
from pathlib import Path

from issue_log_helpers import stored as _stored

# ----- fairseq2: `Train Metrics (step N) - Loss: ... | ...` -----------------------------------
# fairseq2's LogMetricRecorder logs `f"{title} Metrics (step {step_nr}) - {name}: {value} | ..."`
# (https://github.com/facebookresearch/fairseq2/blob/main/src/fairseq2/metrics/recorders/_log.py;
# the `valid` section titled `Validation`). The first two lines are quoted as printed in a
# public project's notes on an fp16 run (found by code search); the log prefix and the
# other lines are constructed in their shape, the step-150 update overflowing to NaN/Inf.
FAIRSEQ2 = """\
[04/18/25 01:02:03] INFO     fairseq2.recipes - Train Metrics (step 50) - Loss: 540.044 | grad_scale: 0.0625
[04/18/25 01:03:03] INFO     fairseq2.recipes - Train Metrics (step 100) - Loss: 317.291 | grad_scale: 0.0625
[04/18/25 01:04:03] INFO     fairseq2.recipes - Train Metrics (step 150) - Loss: nan | Gradient Norm: inf | Learning Rate: 3.00e-04 | grad_scale: 0.0313
[04/18/25 01:04:33] INFO     fairseq2.recipes - Validation Metrics (step 150) - Loss: 280.5 | Number of Elapsed Examples: 1000
[04/18/25 01:05:03] INFO     fairseq2.recipes - Train Metrics (step 200) - Loss: 300.1 | Gradient Norm: 12.5 | Learning Rate: 3.00e-04 | grad_scale: 0.0313
"""  # noqa: E501


def test_fairseq2_step_in_parentheses_is_the_step(tmp_path: Path) -> None:
    # before: `(step 50)` gave the key `Train Metrics (step`, no step counter: the records
    # were numbered 1, 2 in file order, and the two lines without a gradient norm were
    # dropped as repeats of the others (the 540.044 and 317.291 losses lost)
    fmt, m, w = _stored(tmp_path, FAIRSEQ2)
    assert fmt == "generic_text"
    assert set(m["loss"]) == {50, 100, 150, 200} and m["loss"][100] == 317.291
    assert math.isnan(m["loss"][150]) and m["loss"][200] == 300.1
    assert math.isinf(m["grad_norm"][150]) and m["grad_norm"][200] == 12.5
    assert m["lr"] == {150: 3e-4, 200: 3e-4}
    assert m["loss_scale"] == {50: 0.0625, 100: 0.0625, 150: 0.0313, 200: 0.0313}
    assert m["val_loss"] == {150: 280.5}
    assert not any("no step counter" in x for x in w)


# ----- pith-train: `step N/M | ... | cross-entropy-loss X | load-balance-loss Y | ...` --------
# Quoted as printed in https://github.com/mlc-ai/pith-train/pull/7 (an MoE pretraining log).
PITH_7 = """\
2026-04-01 14:06:36 | INFO | step 00000001/00000015 | step-time 73.352 sec | cross-entropy-loss 2.6636 | load-balance-loss 0.001807 | learning-rate 1.000000e-06 | gradient-norm 20.2657 | tokens-per-second 28,590 | peak-gpu-memory 63.65 GB
2026-04-01 14:07:05 | INFO | step 00000002/00000015 | step-time 28.823 sec | cross-entropy-loss 2.5949 | load-balance-loss 0.001803 | learning-rate 1.000000e-06 | gradient-norm 20.0672 | tokens-per-second 72,759 | peak-gpu-memory 63.84 GB
2026-04-01 14:07:33 | INFO | step 00000003/00000015 | step-time 27.786 sec | cross-entropy-loss 2.6520 | load-balance-loss 0.001826 | learning-rate 1.000000e-06 | gradient-norm 19.9174 | tokens-per-second 75,474 | peak-gpu-memory 63.85 GB
2026-04-01 14:08:02 | INFO | step 00000004/00000015 | step-time 28.437 sec | cross-entropy-loss 2.6988 | load-balance-loss 0.001824 | learning-rate 1.000000e-06 | gradient-norm 19.7415 | tokens-per-second 73,748 | peak-gpu-memory 63.77 GB
2026-04-01 14:08:30 | INFO | step 00000005/00000015 | step-time 27.775 sec | cross-entropy-loss 2.6154 | load-balance-loss 0.001816 | learning-rate 1.000000e-06 | gradient-norm 19.8322 | tokens-per-second 75,504 | peak-gpu-memory 63.76 GB
"""  # noqa: E501


def test_pith_train_cross_entropy_loss_is_the_training_loss(tmp_path: Path) -> None:
    # before: `cross-entropy-loss` was no name of the training loss (`ce_loss` and
    # `cross_entropy` were): beside the load-balancing loss neither was taken for it, and
    # the loss screen had no `loss` to read
    fmt, m, w = _stored(tmp_path, PITH_7)
    assert fmt == "generic_text"
    assert m["loss"] == {1: 2.6636, 2: 2.5949, 3: 2.652, 4: 2.6988, 5: 2.6154}
    assert m["load_balance_loss"][5] == 0.001816
    assert m["grad_norm"][3] == 19.9174 and m["lr"][1] == 1e-06
    assert m["tokens_per_s"][2] == 72759
    assert not any("no training loss" in x for x in w)


# ----- TRL DPOTrainer: printed dicts, an evaluation's dict between them -----------------------
# Quoted as printed in https://github.com/huggingface/trl/pull/570 (DPOTrainer's console).
TRL_DPO_570 = """\
{'loss': 0.9073, 'learning_rate': 4.2e-05, 'rewards/chosen': -1.17503821849823, 'rewards/rejected': -1.4742968082427979, 'rewards/accuracies': 0.5625, 'rewards/margins': 0.2992585599422455, 'logps/rejected': -148.04446411132812, 'logps/chosen': -138.34176635742188, 'logits/rejected': -109.33012390136719, 'logits/chosen': -109.74278259277344, 'epoch': 0.16}
{'eval_loss': 0.8106440901756287, 'eval_runtime': 9.5817, 'eval_samples_per_second': 10.437, 'eval_steps_per_second': 1.357, 'eval_rewards/chosen': -0.26931989192962646, 'eval_rewards/rejected': -0.19057123363018036, 'eval_rewards/accuracies': 0.45192307233810425, 'eval_rewards/margins': -0.0787486881017685, 'eval_logps/rejected': -140.43345642089844, 'eval_logps/chosen': -115.501220703125, 'eval_logits/rejected': -112.14944458007812, 'eval_logits/chosen': -112.40476989746094, 'epoch': 0.2}
{'loss': 0.8165, 'learning_rate': 3.8e-05, 'rewards/chosen': -1.1095190048217773, 'rewards/rejected': -1.5209710597991943, 'rewards/accuracies': 0.625, 'rewards/margins': 0.41145211458206177, 'logps/rejected': -175.07534790039062, 'logps/chosen': -148.30918884277344, 'logits/rejected': -108.8155517578125, 'logits/chosen': -109.02369689941406, 'epoch': 0.24}
"""  # noqa: E501


def test_trl_dpo_evaluation_dict_stays_apart(tmp_path: Path) -> None:
    fmt, m, w = _stored(tmp_path, TRL_DPO_570)
    assert fmt == "generic_text"
    assert m["loss"] == {1: 0.9073, 2: 0.8165}  # no step printed: records in file order
    assert m["val_loss"] == {1: 0.8106440901756287}
    assert m["lr"] == {1: 4.2e-05, 2: 3.8e-05}
    assert m["rewards/chosen"] == {1: -1.17503821849823, 2: -1.1095190048217773}
    assert m["eval_rewards/chosen"] == {1: -0.26931989192962646}
    assert m["logps/rejected"][2] == -175.07534790039062
    assert any("numbered 1, 2" in x for x in w)


# Quoted as printed in https://github.com/huggingface/trl/issues/2435 (DPO, NaN logits).
TRL_DPO_2435 = """\
{'loss': 0.6931, 'grad_norm': 2.299546957015991, 'learning_rate': 1e-05, 'rewards/chosen': -0.05413971096277237, 'rewards/rejected': -0.054256755858659744, 'rewards/accuracies': 0.25, 'rewards/margins': 0.00011704633652698249, 'logps/chosen': -252.8257598876953, 'logps/rejected': -254.96127319335938, 'logits/chosen': nan, 'logits/rejected': nan, 'epoch': 0.03}
{'loss': 0.6928, 'grad_norm': 0.8526943922042847, 'learning_rate': 2e-05, 'rewards/chosen': -0.08855850994586945, 'rewards/rejected': -0.08932790160179138, 'rewards/accuracies': 0.20000000298023224, 'rewards/margins': 0.0007693897932767868, 'logps/chosen': -262.14874267578125, 'logps/rejected': -264.9452819824219, 'logits/chosen': nan, 'logits/rejected': nan, 'epoch': 0.05}
"""  # noqa: E501


def test_trl_dpo_nan_logits_are_kept_beside_a_finite_loss(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, TRL_DPO_2435)
    assert m["loss"] == {1: 0.6931, 2: 0.6928}
    assert m["grad_norm"] == {1: 2.299546957015991, 2: 0.8526943922042847}
    assert all(math.isnan(v) for v in m["logits/chosen"].values())
    assert set(m["logits/rejected"]) == {1, 2}
    assert m["logps/chosen"][1] == -252.8257598876953


# ----- TRL GRPOTrainer: loss 0.0 with rewards and KL ------------------------------------------
# Quoted as printed in https://github.com/huggingface/trl/issues/3452 (the blank line as
# pasted: tqdm's bar erased).
TRL_GRPO_3452 = """\
{'loss': 0.0, 'grad_norm': 0.08656957000494003, 'learning_rate': 6.916666666666667e-06, 'completion_length': 232.825, 'rewards/format_reward2': 1.0, 'rewards/hint_reward': 0.7171093255281449, 'reward': 1.7171093285083772, 'reward_std': 0.5700982138514519, 'kl': 0.0005371240986278281, 'epoch': 0.31}
{'loss': 0.0, 'grad_norm': 0.09666649252176285, 'learning_rate': 6.708333333333333e-06, 'completion_length': 237.0375, 'rewards/format_reward2': 1.0, 'rewards/hint_reward': 0.8844376325607299, 'reward': 1.8844376266002656, 'reward_std': 0.7487143039703369, 'kl': 0.0005386197401094251, 'epoch': 0.33}
{'loss': 0.0, 'grad_norm': 0.1058727279305458, 'learning_rate': 6.5000000000000004e-06, 'completion_length': 233.45, 'rewards/format_reward2': 1.0, 'rewards/hint_reward': 0.6797272339463234, 'reward': 1.6797272205352782, 'reward_std': 0.6311022289562971, 'kl': 0.0005338093222235329, 'epoch': 0.35}
{'loss': 0.0, 'grad_norm': 0.10363585501909256, 'learning_rate': 6.291666666666667e-06, 'completion_length': 235.6, 'rewards/format_reward2': 0.9875, 'rewards/hint_reward': 0.9810375615954399, 'reward': 1.968537563085556, 'reward_std': 0.786603014729917, 'kl': 0.0005278794225887396, 'epoch': 0.37}
                                                    
"""  # noqa: E501, W291, W293


def test_trl_grpo_zero_loss_with_finite_grad_norm_stays_zero(tmp_path: Path) -> None:
    # GRPO's loss is 0.0 at its first update of a batch (advantage-weighted ratio of 1):
    # with a finite gradient norm it is no NaN hidden by logging_nan_inf_filter
    _, m, w = _stored(tmp_path, TRL_GRPO_3452)
    assert m["loss"] == {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}
    assert m["reward"][4] == 1.968537563085556 and m["kl"][1] == 0.0005371240986278281
    assert m["grad_norm"][3] == 0.1058727279305458
    assert m["rewards/hint_reward"][2] == 0.8844376325607299
    assert not any("read as NaN" in x for x in w)


# ----- verl SFT trainer: `step:N - ... - train/loss:nan - ...` between tqdm bars -------------
# Quoted as printed in https://github.com/verl-project/verl/issues/6319 (SFT of Qwen3.5,
# every loss NaN).
VERL_SFT_6319 = """\
step:2 - perf/max_memory_allocated_gb:41.29401397705078 - perf/max_memory_reserved_gb:45.1640625 - perf/cpu_memory_used_gb:87.82434463500977 - train/loss:nan - train/grad_norm:0.0 - train/lr:1e-06 - train/mfu:0.0 - train/global_tokens:126 - train/total_tokens(B):1.97e-07
Epoch 1/1:   0%|                                                                                                                              | 2/7473 [00:04<3:50:53,  1.85s/it]
step:3 - perf/max_memory_allocated_gb:41.29401397705078 - perf/max_memory_reserved_gb:45.1640625 - perf/cpu_memory_used_gb:87.8277702331543 - train/loss:nan - train/grad_norm:0.0 - train/lr:1e-06 - train/mfu:0.0 - train/global_tokens:70 - train/total_tokens(B):2.67e-07
Epoch 1/1:   0%|                                                                                                                              | 3/7473 [00:04<2:29:50,  1.20s/it]
step:4 - perf/max_memory_allocated_gb:41.29401397705078 - perf/max_memory_reserved_gb:45.1640625 - perf/cpu_memory_used_gb:87.83476257324219 - train/loss:nan - train/grad_norm:0.0 - train/lr:1e-06 - train/mfu:0.0 - train/global_tokens:115 - train/total_tokens(B):3.82e-07
Epoch 1/1:   0%|                                                                                                                              | 4/7473 [00:05<1:52:18,  1.11it/s]
"""  # noqa: E501


def test_verl_sft_nan_loss_at_its_step(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, VERL_SFT_6319)
    assert fmt == "generic_text"
    assert set(m["loss"]) == {2, 3, 4} and all(math.isnan(v) for v in m["loss"].values())
    assert m["grad_norm"] == {2: 0.0, 3: 0.0, 4: 0.0}
    assert m["lr"] == {2: 1e-06, 3: 1e-06, 4: 1e-06}
    assert m["train/global_tokens"] == {2: 126, 3: 70, 4: 115}


# ----- LitGPT finetune: `Epoch E | iter I step S | loss train: X, val: Y | ...` ---------------
# Quoted as printed in https://github.com/Lightning-AI/litgpt/issues/1110 and
# https://github.com/Lightning-AI/litgpt/issues/1607 (the step counts optimizer steps;
# `val:` repeats the last evaluation on every line).
LITGPT_1110 = """\
Epoch 4 | iter 961 step 961 | loss train: 1.062, val: 1.057 | iter time: 529.46 ms (step)
Epoch 4 | iter 962 step 962 | loss train: 0.937, val: 1.057 | iter time: 503.53 ms (step)
Epoch 4 | iter 963 step 963 | loss train: 0.971, val: 1.057 | iter time: 522.10 ms (step)
Epoch 4 | iter 964 step 964 | loss train: 0.902, val: 1.057 | iter time: 115.27 ms (step)
Epoch 5 | iter 965 step 965 | loss train: 1.182, val: 1.057 | iter time: 743.31 ms (step)
Training time: 583.36s
Memory used: 14.49 GB
Saving LoRA weights to 'out/finetune/lora-tiny-llama-1.1b/final/lit_model.pth.lora'
"""
LITGPT_1607 = """\
Epoch 34 | iter 3050700 step 610140 | loss train: 2.846, val: 2.861 | iter time: 112.20 ms (step) remaining time: 0:01:54
Epoch 34 | iter 3050750 step 610150 | loss train: 2.750, val: 2.861 | iter time: 111.35 ms (step) remaining time: 0:01:49
Epoch 34 | iter 3050800 step 610160 | loss train: 2.815, val: 2.861 | iter time: 110.35 ms (step) remaining time: 0:01:43
Epoch 34 | iter 3050850 step 610170 | loss train: 2.860, val: 2.861 | iter time: 112.53 ms (step) remaining time: 0:01:38
"""  # noqa: E501


def test_litgpt_epoch_lines_step_and_carried_val(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, LITGPT_1110)
    assert fmt == "textlog"  # named pattern litgpt-epoch
    assert m["loss"] == {961: 1.062, 962: 0.937, 963: 0.971, 964: 0.902, 965: 1.182}
    assert "val_loss" not in m  # the last evaluation carried over, no value of these steps
    _, m, _ = _stored(tmp_path, LITGPT_1607)
    assert m["loss"] == {610140: 2.846, 610150: 2.75, 610160: 2.815, 610170: 2.86}
    assert m["iter"][610170] == 3050850  # the micro-iteration count is no step


# ----- mlx-lm LoRA: `Iter N: Train loss X, Learning Rate ...` and `Iter N: Val loss X` -------
# Quoted as printed in https://github.com/ml-explore/mlx-examples/issues/620 (a loss
# rising from 1.4 to 6.4 before the NaNs the issue reports).
MLX_620 = """\
Training
Starting training..., iters: 2596
Iter 1: Val loss 2.086, Val took 17.177s
Iter 25: Train loss 1.593, Learning Rate 7.000e-05, It/sec 0.999, Tokens/sec 387.697, Trained Tokens 9699, Peak mem 8.104 GB
Iter 50: Train loss 1.406, Learning Rate 7.000e-05, It/sec 0.942, Tokens/sec 369.778, Trained Tokens 19515, Peak mem 8.104 GB
Iter 75: Train loss 3.316, Learning Rate 7.000e-05, It/sec 0.933, Tokens/sec 366.098, Trained Tokens 29327, Peak mem 8.104 GB
Iter 100: Train loss 6.437, Learning Rate 7.000e-05, It/sec 0.921, Tokens/sec 371.347, Trained Tokens 39407, Peak mem 8.626 GB
Iter 100: Saved adapter weights to checkpoints/100_adapters.npz.
Iter 125: Train loss 5.478, Learning Rate 7.000e-05, It/sec 0.952, Tokens/sec 379.485, Trained Tokens 49374, Peak mem 8.626 GB
"""  # noqa: E501


def test_mlx_lm_train_and_val_lines(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, MLX_620)
    assert fmt == "generic_text"
    assert m["loss"] == {25: 1.593, 50: 1.406, 75: 3.316, 100: 6.437, 125: 5.478}
    assert m["val_loss"] == {1: 2.086}
    assert m["lr"][100] == 7e-05 and m["trained_tokens"][125] == 49374


# ----- nanotron behind srun's `[node:task]:` label --------------------------------------------
# Quoted as printed in https://github.com/huggingface/nanotron/issues/233 (the scheduler
# state line shortened to four of its learning rates).
NANOTRON_233 = """\
[0434:0]:11/01/2024 11:05:18 [INFO|DP=0|PP=0|TP=0|lrdn0434]: iteration: 12001 / 17500 | consumed_tokens: 25.2G | elapsed_time_per_iteration_ms: 28.2K | tokens_per_sec: 74.5K | tokens_per_sec_per_gpu: 2.33K | global_batch_size: 1.02K | lm_loss: 2.3 | lr: 0.000289 | model_tflops_per_gpu: 26.7 | hardware_tflops_per_gpu: 26.7 | grad_norm: 0.15 | cuda_memory_allocated: 8.86G | cuda_max_memory_reserved: 34.1G | hd_total_memory_tb: 9.25G | hd_used_memory_tb: 8.21G | hd_free_memory_tb: 1.03G
[0434:0]:11/01/2024 11:05:26 [INFO|DP=0|PP=0|TP=0|lrdn0434]: Learning rate scheduler state: {'base_lrs': [0.0003, 0.0003, 0.0003, 0.0003], 'last_epoch': 12001}
"""  # noqa: E501


def test_nanotron_line_behind_an_srun_label(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, NANOTRON_233)
    assert m["loss"] == {12001: 2.3} and m["grad_norm"] == {12001: 0.15}
    assert m["lr"] == {12001: 0.000289}
    assert m["consumed_tokens"] == {12001: 25.2e9} and m["iter_time_ms"] == {12001: 28200}


# ----- LLaMA-Factory PPO: the step's dict glued after tqdm's bar -------------------------------
# Quoted as printed in https://github.com/hiyouga/LlamaFactory/issues/357 (bloom PPO: every
# loss NaN while the reward moves; bars shortened to their counters' width as pasted).
LLAMAFACTORY_357 = """\
[INFO|configuration_utils.py:616] 2023-08-05 00:13:38,608 >> Generate config GenerationConfig {
  "_from_model_config": true,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "pad_token_id": 3,
  "transformers_version": "4.32.0.dev0"
}

  1%|█▍                                                                                                                                         | 9/860 [00:43<1:05:18,  4.60s/it]{'loss': nan, 'reward': 0.2684, 'learning_rate': 9.958763523679515e-06, 'epoch': 0.21}
  2%|███                                                                                                                                       | 19/860 [01:30<1:07:22,  4.81s/it]{'loss': nan, 'reward': -0.3129, 'learning_rate': 9.817090706862895e-06, 'epoch': 0.44}
  3%|████▎                                                                                                                                     | 27/860 [02:08<1:05:33,  4.72s/it]
"""  # noqa: E501


def test_llamafactory_ppo_nan_loss_at_the_bar_step(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, LLAMAFACTORY_357)
    assert set(m["loss"]) == {9, 19} and all(math.isnan(v) for v in m["loss"].values())
    assert m["reward"] == {9: 0.2684, 19: -0.3129}  # the reward is no loss
    assert m["lr"] == {9: 9.958763523679515e-06, 19: 9.817090706862895e-06}


# ----- torchtitan: one line per rank at each step ---------------------------------------------
# Quoted as printed in https://github.com/pytorch/torchtitan/pull/2389 (seven ranks' lines
# of step 4, then the first of step 5: the grad norm near doubling).
TORCHTITAN_2389 = """\
[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%
[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.69  mfu: 13.99%
[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.69  mfu: 13.99%
[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.69  mfu: 13.99%
[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,049  tflops: 314.68  mfu: 13.99%
[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.69  mfu: 13.99%
[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,049  tflops: 314.68  mfu: 13.99%
[titan] 2026-02-24 19:46:19,145 - root - INFO - step:  5  loss:  7.07623  grad_norm: 46.5000  memory: 66.91GiB(37.51%)  tps: 10,007  tflops: 313.36  mfu: 13.93%
"""  # noqa: E501


def test_torchtitan_rank_lines_are_one_record_per_step(tmp_path: Path) -> None:
    _, m, _ = _stored(tmp_path, TORCHTITAN_2389)
    assert m["loss"] == {4: 7.62585, 5: 7.07623}
    assert m["grad_norm"] == {4: 26.625, 5: 46.5}
    assert m["tokens_per_s"][5] == 10007


# ----- OLMo-core's console: `[step=N/M,epoch=E,eta=...]`, then indented `name=value` ----------
# Constructed in the shape OLMo-core's ConsoleLoggerCallback prints (f"[step={step}/
# {max_steps},epoch={epoch},eta={eta}]" and f"    {name}={format_float(value)}" lines,
# https://github.com/allenai/OLMo-core/blob/main/src/olmo_core/train/callbacks/console_logger.py);
# the step-20 update skipped on a NaN loss, an in-loop evaluation at step 30.
OLMO_CORE = """\
2025-01-10 10:00:01.123\tjupiter-cs-aus-101:0\tolmo_core.train.callbacks.console_logger:78\tINFO\t[step=10/5000,epoch=0,eta=2h1m]
    optim/total grad norm=0.8123
    optim/LR (group 0)=3.000E-05
    optim/step skipped=0.0000
    train/CE loss=7.2345
    train/PPL=1388.4
    train/Z loss=0.0102
2025-01-10 10:00:05.123\tjupiter-cs-aus-101:0\tolmo_core.train.callbacks.console_logger:71\tINFO\t[step=11/5000,epoch=0]
2025-01-10 10:00:09.123\tjupiter-cs-aus-101:0\tolmo_core.train.callbacks.console_logger:78\tINFO\t[step=20/5000,epoch=0,eta=2h0m]
    optim/total grad norm=inf
    optim/LR (group 0)=6.000E-05
    optim/step skipped=1.0000
    train/CE loss=nan
    train/PPL=nan
    train/Z loss=nan
2025-01-10 10:00:13.123\tjupiter-cs-aus-101:0\tolmo_core.train.callbacks.console_logger:78\tINFO\t[step=30/5000,epoch=0,eta=1h59m]
    optim/total grad norm=0.9001
    optim/LR (group 0)=9.000E-05
    optim/step skipped=0.0000
    train/CE loss=7.1001
    train/PPL=1212.0
    train/Z loss=0.0100
    eval/lm/c4_en-validation/CE loss=7.3000
"""  # noqa: E501


def test_olmo_core_console_nan_step_and_in_loop_eval(tmp_path: Path) -> None:
    fmt, m, _ = _stored(tmp_path, OLMO_CORE)
    assert fmt == "generic_text"
    assert m["loss"][10] == 7.2345 and m["loss"][30] == 7.1001 and math.isnan(m["loss"][20])
    assert set(m["loss"]) == {10, 20, 30}  # the bare `[step=11/5000,...]` has no loss
    assert math.isinf(m["grad_norm"][20]) and m["grad_norm"][30] == 0.9001
    assert m["lr"] == {10: 3e-05, 20: 6e-05, 30: 9e-05}
    assert m["optim/step_skipped"] == {10: 0.0, 20: 1.0, 30: 0.0}
    assert m["eval/lm/c4_en_validation/ce_loss"] == {30: 7.3}


# ----- TRL GRPO (unsloth): a step's dict broken over lines, then the evaluation's dict --------
# Quoted as printed in https://github.com/unslothai/unsloth/issues/3485 (GSPO through TRL's
# GRPOTrainer; the training dict pasted over four lines, their trailing blanks left out). The
# evaluation dict is quoted up to its `completions/min_length`; its closing `'epoch': 0.01}`
# is constructed.
UNSLOTH_3485 = """\
{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': 3.0303030303030305e-08, 'num_tokens': 83968.0, 'completions/mean_length': 77.5, 'completions/min_length': 74.0, 'completions/max_length': 81.0, 'completions/clipped_ratio': 0.0, 'completions/mean_terminated_length': 77.5, 'completions/min_terminated_length': 74.0, 'completions/max_terminated_length': 81.0,
'rewards/dimension_extraction_reward_func/mean': 3.0, 'rewards/dimension_extraction_reward_func/std': 0.0,
'rewards/json_format_reward_func/mean': 1.0, 'rewards/json_format_reward_func/std': 0.0,
'reward': 4.0, 'reward_std': 0.0, 'frac_reward_zero_std': 1.0, 'completion_length': 81.0, 'kl': 0.0, 'epoch': 0.01}

{'eval_loss': 3.451258479003627e-08, 'eval_runtime': 62.4148, 'eval_samples_per_second': 1.362, 'eval_steps_per_second': 0.096, 'num_tokens': 1001646.0, 'completions/mean_length': 40.13690476190476, 'completions/min_length': 25.476190476190474, 'epoch': 0.01}
"""  # noqa: E501


def test_trl_grpo_evaluation_dict_keeps_off_the_training_values(tmp_path: Path) -> None:
    # before: the evaluation dict's unprefixed `num_tokens` and `completions/*` replaced the
    # training step's (77.5 -> 40.14), and the three lines that continue the training dict
    # were dropped (no loss among them): its reward, reward_std and KL were lost
    fmt, m, _ = _stored(tmp_path, UNSLOTH_3485)
    assert fmt == "generic_text"
    assert m["loss"] == {1: 0.0} and m["grad_norm"] == {1: 0.0}
    assert m["val_loss"] == {1: 3.451258479003627e-08}
    assert m["completions/mean_length"] == {1: 77.5} and m["num_tokens"] == {1: 83968.0}
    assert m["eval_completions/mean_length"] == {1: 40.13690476190476}
    assert m["eval_num_tokens"] == {1: 1001646.0}
    assert m["reward"] == {1: 4.0} and m["kl"] == {1: 0.0}
    assert m["rewards/json_format_reward_func/mean"] == {1: 1.0}
