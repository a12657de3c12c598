"""Training-log styles quoted in public GitHub issues (ninth batch), one test per style.

Each fixture quotes the lines as printed in the issue or PR (URL beside it); where a test
needs a longer run, the lines after the quoted ones are written in the same format. Each
test says what the tool did before.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from issue_log_helpers import stored as _stored

from forensics.errors import InputError
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


# ----- TRL / HF notebook table pasted as Markdown (huggingface/open-r1#704) ---------------------
_GRPO_TABLE = [
    "Step | Training Loss | reward | reward_std | kl | entropy",
    "-- | -- | -- | -- | -- | --",
    "1 | -0.283600 | 13.437500 | 21.810942 | nan | 0",
    "2 | -0.149100 | 6.931818 | 14.526671 | nan | No Log",
    "3 | -0.110500 | 6.250000 | 17.677670 | nan | No Log",
    "4 | -0.014500 | 6.422414 | 12.048451 | nan | No Log",
]


def test_markdown_table_of_the_notebook_callback_is_read(tmp_path: Path) -> None:
    # before: "format not recognised": a ` | `-separated table was no log of any reader
    more = [f"{s} | 0.0{s} | 7.5 | 15.2 | nan | No Log" for s in range(5, 8)]
    fmt, m, w = _stored(tmp_path, "\n".join(_GRPO_TABLE + more) + "\n")
    assert fmt == "table"
    assert m["loss"] == {1: -0.2836, 2: -0.1491, 3: -0.1105, 4: -0.0145, 5: 0.05, 6: 0.06, 7: 0.07}
    assert sorted(m["kl"]) == list(range(1, 8)) and all(math.isnan(v) for v in m["kl"].values())
    assert m["entropy"] == {1: 0.0}  # `No Log` is no value, not a 0 or a NaN
    assert m["reward_std"][2] == 14.526671
    assert any("a table pasted as text (header on line 1, 7 rows)" in x for x in w)


def test_tab_separated_notebook_table_after_its_progress_line(tmp_path: Path) -> None:
    """The same table copied out of Jupyter: cells split by tabs, `No log` as the Trainer
    writes it, under the progress line it prints above the table."""
    lines = [
        "[30/30 00:41, Epoch 3/3]",
        "Step\tTraining Loss\tValidation Loss",
        "10\t2.305600\tNo log",
        "20\t1.873200\t1.902341",
        "30\tnan\tnan",
    ]
    fmt, m, w = _stored(tmp_path, "\n".join(lines) + "\n", name="notebook.txt")
    assert fmt == "table"
    assert m["loss"][10] == 2.3056 and math.isnan(m["loss"][30])
    assert sorted(m["val_loss"]) == [20, 30]
    assert any("1 lines before the table's header not read" in x for x in w)


def test_a_log_that_prints_a_small_table_stays_a_log(tmp_path: Path) -> None:
    """A table that is not most of the head (Lightning's model summary is one) is no
    pasted table: the log's own records are read."""
    lines = [
        "step | loss | lr",
        "0 | 9.1 | 0.0",
        "1 | 9.0 | 0.0",
        *[f"step {s} | loss {5 - s / 100:.3f} | lr 1e-4" for s in range(2, 40)],
    ]
    fmt, m, _ = _stored(tmp_path, "\n".join(lines) + "\n")
    assert fmt != "table"
    assert m["loss"][39] == 4.61


def test_pasted_table_with_a_fractional_step_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("Step | Training Loss\n-- | --\n1 | 2.0\n2.5 | 1.9\n3 | 1.8\n")
    reader = sniff_format(path)
    assert reader is not None and reader.name == "table"
    with pytest.raises(InputError, match=r"train.log:4: field 'Step': step '2.5' is not an"):
        reader.read(path)


# ----- marian (marian-nmt/marian#376) ----------------------------------------------------------
# `Up.` counts updates (the step), `Cost` is the training loss; the `[valid]` lines report
# the validation set's cross-entropy and perplexity at that update.
_MARIAN = [
    "[2021-07-17 12:54:33] Ep. 1 : Up. 14000 : Sen. 965,843 : Cost 5.20174599 : Time 359.59s : 3007.81 words/s",  # noqa: E501
    "[2021-07-17 13:13:46] Ep. 1 : Up. 16000 : Sen. 1,052,108 : Cost 6.59608603 : Time 1153.11s : 1942.28 words/s",  # noqa: E501
    "[2021-07-17 13:32:37] Ep. 1 : Up. 18000 : Sen. 1,123,604 : Cost 6.29688978 : Time 1131.22s : 2070.52 words/s",  # noqa: E501
    "[2021-07-17 13:49:01] Ep. 1 : Up. 20000 : Sen. 1,212,903 : Cost 5.85167885 : Time 984.07s : 2382.72 words/s",  # noqa: E501
    "[2021-07-17 13:49:01] Saving model weights and runtime parameters to model/model.npz.orig.npz",  # noqa: E501
    "[2021-07-17 13:49:15] Saving model weights and runtime parameters to model/model.iter20000.npz",  # noqa: E501
    "[2021-07-17 13:49:25] Saving model weights and runtime parameters to model/model.npz",  # noqa: E501
    "[2021-07-17 13:49:39] Saving Adam parameters to model/model.npz.optimizer.npz",  # noqa: E501
    "[2021-07-17 13:50:36] [valid] Ep. 1 : Up. 20000 : cross-entropy : 130.97 : new best",  # noqa: E501
    "[2021-07-17 13:51:02] [valid] Ep. 1 : Up. 20000 : perplexity : 187.458 : new best",  # noqa: E501
    "[2021-07-17 13:51:53] [valid] Ep. 1 : Up. 20000 : translation : 2.35 : new best",  # noqa: E501
    "[2021-07-17 14:06:01] Ep. 1 : Up. 22000 : Sen. 1,316,283 : Cost 5.25472784 : Time 1019.73s : 2097.49 words/s",  # noqa: E501
    "[2021-07-17 14:19:04] Ep. 1 : Up. 24000 : Sen. 1,454,670 : Cost 4.57147598 : Time 783.38s : 2713.49 words/s",  # noqa: E501
    "[2021-07-17 14:29:40] Ep. 1 : Up. 26000 : Sen. 1,650,105 : Cost 3.89087892 : Time 636.06s : 2924.37 words/s",  # noqa: E501
]


def test_marian_updates_are_steps_cost_is_loss_and_valid_lines_are_validation(
    tmp_path: Path,
) -> None:
    # before: the training lines were ignored ("no step and metric found"); the `[valid]`
    # cross-entropy was stored as `loss` at steps 1, 2, ... ("no step counter")
    nan = "[2021-07-17 14:40:35] Ep. 1 : Up. 28000 : Sen. 1,842,818 : Cost nan : Time 655.17s : 2902.30 words/s"  # noqa: E501
    fmt, m, _ = _stored(tmp_path, "\n".join([*_MARIAN, nan]) + "\n")
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == list(range(14000, 30000, 2000))
    assert m["loss"][14000] == 5.20174599 and math.isnan(m["loss"][28000])
    assert m["val_loss"] == {20000: 130.97} and m["val_ppl"] == {20000: 187.458}
    assert m["sen."][16000] == 1052108  # the thousands' commas read
    assert m["epoch"][26000] == 1


def test_an_eval_tag_keeps_its_loss_out_of_the_training_loss(tmp_path: Path) -> None:
    """A split's tag where a logger's tag stands (`[eval] step 100 | loss 3.60`)."""
    # before: the tag was cut off with the prefix, and the eval loss overwrote the training
    # loss of its step (kept as "logged again at once")
    lines = [
        "[2024-05-01 12:00:00] step 100 | loss 3.10 | lr 1e-4",
        "[2024-05-01 12:00:01] [eval] step 100 | loss 3.60",
        "[2024-05-01 12:00:02] step 200 | loss 2.90 | lr 1e-4",
        "[2024-05-01 12:00:03] [eval] step 200 | loss 3.40",
        "[2024-05-01 12:00:04] step 300 | loss 2.80 | lr 1e-4",
    ]
    _, m, _ = _stored(tmp_path, "\n".join(lines) + "\n")
    assert m["loss"] == {100: 3.10, 200: 2.90, 300: 2.80}
    assert m["val_loss"] == {100: 3.60, 200: 3.40}


# ----- MXNet Speedometer (apache/mxnet#6175) ----------------------------------------------------
# `Epoch[E] Batch [i]` counts batches within the epoch (one line every 1000 batches here);
# `Epoch[E] Train-CrossEntropy=` closes the epoch with its mean.
_MXNET = [
    "[15:02:18] src/operator/tensor/./matrix_op-inl.h:144: Using target_shape will be deprecated.",  # noqa: E501
    "[15:02:18] src/operator/tensor/./matrix_op-inl.h:144: Using target_shape will be deprecated.",  # noqa: E501
    "2017-05-09 15:07:21,268 Epoch[0] Batch [1000]\tSpeed: 133.53 samples/sec\tTrain-CrossEntropy=22.763932",  # noqa: E501
    "2017-05-09 15:07:21,269 Epoch[0] Batch [1000]\tSpeed: 133.53 samples/sec\tTrain-Acc_exclude_padding=0.001401",  # noqa: E501
    "2017-05-09 15:08:50,952 Epoch[0] Train-CrossEntropy=23.025851",  # noqa: E501
    "2017-05-09 15:08:50,952 Epoch[0] Train-Acc_exclude_padding=0.000000",  # noqa: E501
    "2017-05-09 15:08:50,952 Epoch[0] Time cost=389.625",  # noqa: E501
    "2017-05-09 15:09:10,193 Epoch[0] Dev-CrossEntropy=23.025851",  # noqa: E501
    "2017-05-09 15:09:10,193 Epoch[0] Dev-Acc_exclude_padding=0.000000",  # noqa: E501
    '2017-05-09 15:09:10,687 Saved checkpoint to "/home/user/tools/kaldi/egs/timit/s5/checkpoints/exp_mxnet/timit-0001.params"',  # noqa: E501
    "2017-05-09 15:13:50,847 Epoch[1] Batch [1000]\tSpeed: 142.84 samples/sec\tTrain-CrossEntropy=23.025851",  # noqa: E501
    "2017-05-09 15:13:50,847 Epoch[1] Batch [1000]\tSpeed: 142.84 samples/sec\tTrain-Acc_exclude_padding=0.000000",  # noqa: E501
    "2017-05-09 15:15:19,026 Epoch[1] Train-CrossEntropy=23.025851",  # noqa: E501
    "2017-05-09 15:15:19,026 Epoch[1] Train-Acc_exclude_padding=0.000000",  # noqa: E501
    "2017-05-09 15:15:19,026 Epoch[1] Time cost=368.338",  # noqa: E501
    "2017-05-09 15:15:38,196 Epoch[1] Dev-CrossEntropy=23.025851",  # noqa: E501
    "2017-05-09 15:15:38,196 Epoch[1] Dev-Acc_exclude_padding=0.000000",  # noqa: E501
]


def test_mxnet_speedometer_counts_batches_over_epochs(tmp_path: Path) -> None:
    # before: "the log prints no step counter": the records were numbered 1, 2, ... and the
    # `Epoch[N]` counter was not read (the epoch's closing mean was dropped as a repeat)
    more = [
        f"2017-05-09 15:2{e}:18,962 Epoch[{e}] Batch [1000]\tSpeed: 140.30 samples/sec"
        f"\tTrain-CrossEntropy={'nan' if e == 3 else '23.025851'}"
        for e in (2, 3)
    ]
    fmt, m, w = _stored(tmp_path, "\n".join(_MXNET + more) + "\n")
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [1000, 2000, 3000, 4000]
    assert m["loss"][1000] == 22.763932 and m["loss"][2000] == 23.025851
    assert math.isnan(m["loss"][4000])
    assert m["epoch/loss"][1000] == 23.025851  # the epoch's mean, kept apart
    assert any("steps are counted over epochs, 1000 per epoch" in x for x in w)


def test_mxnet_speedometer_with_several_batches_per_epoch(tmp_path: Path) -> None:
    """The usual Speedometer output: a line every 50 batches, the counter restarting at
    every epoch."""
    lines = [
        f"INFO:root:Epoch[{e}] Batch [{b}]\tSpeed: 1000.5 samples/sec\taccuracy=0.5"
        f"\tcross-entropy={3 - e - b / 1000:.3f}"
        for e in range(3)
        for b in (50, 100, 150)
    ]
    _, m, _ = _stored(tmp_path, "\n".join(lines) + "\n")
    assert sorted(m["loss"]) == [50, 100, 150, 200, 250, 300, 350, 400, 450]
    assert m["loss"][200] == 1.95


# ----- OpenNMT-py validation lines (OpenNMT/OpenNMT-py#1072) ------------------------------------
_ONMT = [
    "[2018-11-26 14:13:56,049 INFO] Step 4850/50000; acc:  50.68; ppl:  8.44; xent: 2.13; lr: 0.00060; 1809/2279 tok/s;  18139 sec",  # noqa: E501
    "[2018-11-26 14:16:58,654 INFO] Step 4900/50000; acc:  51.45; ppl:  8.06; xent: 2.09; lr: 0.00060; 1045/2263 tok/s;  18326 sec",  # noqa: E501
    "[2018-11-26 14:20:03,559 INFO] Step 4950/50000; acc:  51.79; ppl:  8.62; xent: 2.15; lr: 0.00061; 1011/1981 tok/s;  18513 sec",  # noqa: E501
    "[2018-11-26 14:23:02,176 INFO] Step 5000/50000; acc:  52.21; ppl:  8.26; xent: 2.11; lr: 0.00062; 1170/1902 tok/s;  18700 sec",  # noqa: E501
    "[2018-11-26 14:23:02,701 INFO] Validation perplexity: 9.1289",  # noqa: E501
    "[2018-11-26 14:23:02,769 INFO] Validation accuracy: 51.2066",  # noqa: E501
    "[2018-11-26 14:23:02,143 INFO] Saving checkpoint ./disc_data/model_step_5000.pt",  # noqa: E501
    "[2018-11-26 14:26:08,820 INFO] Step 5050/50000; acc:  51.80; ppl:  8.23; xent: 2.11; lr: 0.00062; 1241/1911 tok/s;  18887 sec",  # noqa: E501
]


def test_opennmt_validation_lines_belong_to_the_step_before(tmp_path: Path) -> None:
    # before: `Validation perplexity: 9.1289` and `Validation accuracy:` were ignored (no
    # step and metric found)
    fmt, m, _ = _stored(tmp_path, "\n".join(_ONMT) + "\n")
    assert fmt == "generic_text"
    assert m["val_ppl"] == {5000: 9.1289}
    assert m["validation_accuracy"] == {5000: 51.2066}
    assert m["loss"][5000] == 2.11 and sorted(m["loss"]) == [4850, 4900, 4950, 5000, 5050]


def test_a_printed_dict_with_its_step_key_last_is_a_record(tmp_path: Path) -> None:
    """A dict has no order that makes a late `'step'` a setting (the probe's variant of the
    TRL dict: with four keys before `'step'` it was "format not recognised")."""
    lines = [
        f"{{'loss': {2.0 - s / 100}, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': "
        f"{s / 100}, 'step': {s}}}"
        for s in range(10, 60, 10)
    ]
    lines[3] = lines[3].replace("'loss': 1.6", "'loss': nan")
    fmt, m, _ = _stored(tmp_path, "\n".join(lines) + "\n")
    assert fmt == "generic_text"
    assert sorted(m["loss"]) == [10, 20, 30, 40, 50] and math.isnan(m["loss"][40])
    assert m["lr"][50] == 1e-05 and "step" not in m
