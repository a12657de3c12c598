"""Any line-oriented training log, read by inferring a template per kind of line.

A log no named pattern knows (`line_patterns.yaml`, the Megatron reader) still prints one
record per step: a step counter and `name value` fields in some syntax. This reader finds
them without a pattern written for the format:

1. Each line loses the prefix that carries no metric: a timestamp, `[rank0]:`, a glog
   header, everything up to a logger level (`INFO:root:`, `... | INFO | mod:fn:12 - `,
   OLMo's tab-separated `time<TAB>host<TAB>logger<TAB>INFO<TAB>`).
2. Every number (scientific notation, `2,097,152`, `85.8G`, NaN/Inf spelt any way) is
   replaced by a slot. Lines that are the same text around their slots are one *template*
   (a train line, a validation line, a banner): a 5M-line log has a handful.
3. Each template is read once, in Python: which slot is the step (`step N`, `iter N`,
   `iteration N/M`, `[step=N/M]`, `s:N`, `completed step: N`, `num_updates=N`, `[batch=N/M]`,
   a training progress bar's `n/N`, an epoch with the batch counter of that epoch, a bare
   leading `N/M` or `N`), which slots are totals (`/M`) or annotations (`(+nanz)`), and the
   name of every other slot (the text before it within its field, fields being cut at `|`,
   `,`, `;`, tabs, runs of blanks; the unit after it when nothing precedes it).
4. The values of all lines of accepted templates come out in one vectorised pass.

Lines without a step that follow a record (OLMo's indented `    train/CrossEntropyLoss=2.998`,
llm.c's `val loss 3.28`, the Hugging Face Trainer's `{'loss': 1.66, ...}` under its bar) take
the step of the record before them. Per-epoch summary lines are kept apart (`epoch/<name>`),
a run's closing summary too (`summary/<name>`), and loss-scaler overflow lines become an
`overflow` count and events at the step they interrupted (docs/ingest.md). The reader says what it
read (each metric with the line template it came from, how many lines it ignored, a sample
of them) in its warnings, so that a user can check it.

Why not a log-template miner such as Drain3: it clusters line by line in Python (tens of
microseconds a line: minutes on 5M lines) and still leaves naming the fields and finding the
step to us; slots from one vectorised regex give the same templates for numeric logs, in
the speed class of the named-pattern reader (bench/ingest_textlog.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.canon import alias_table, normalise
from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.printed_config import printed_config
from forensics.ingest.readers._bar_validation import carried_once, without_validation_counts
from forensics.ingest.readers._data_errors import data_error_events
from forensics.ingest.readers._epoch_restarts import counted_over_epochs
from forensics.ingest.readers._generic_groups import dict_entries, group_totals
from forensics.ingest.readers._rewrites import unpadded_nonfinite, yolo_rows
from forensics.ingest.readers._scale_name import scale_as_loss_scale
from forensics.ingest.readers._step_rate import STEP_RATE, step_rate_rows
from forensics.ingest.readers._text import (
    SLOT,
    head_lines,
    line_frame,
    looks_like_text_log,
    parse_number,
    parse_timestamp,
    read_text,
    scan_beyond_head,
)
from forensics.ingest.readers._validation_sections import (
    one_per_pass,
    summary_names,
    validation_passes,
)
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

# A number as logs print it. The leading \b keeps digits inside names (`gpt2`, `mtp_1`,
# `h100`) out; NaN/Inf need a trailing \b too so that `nanz`, `info`, `inference` stay text.
NUM = (
    r"(?:[-+]?\b(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?:[KMGT]\b)?"
    r"|[-+]?\b(?i:nan|inf(?:inity)?)\b)"
)
# Prefixes that carry no metric, removed before templating (applied repeatedly).
_LEVEL = r"(?:INFO|WARNING|WARN|DEBUG|ERROR|CRITICAL|TRACE|SUCCESS)"
_PREFIX = (
    r"^(?:\s*(?:"
    rf".{{0,160}}?\b{_LEVEL}\b(?:\|[^\]\s]*\])?"  # `[INFO|DP=0|TP=0]` (nanotron)
    # a logger's name in parentheses after the level, `%(levelname)-8s (%(name)s)`
    # (ba-dls-deepspeech's `INFO    (__main__) Epoch: 7, ...`)
    r"(?:\s+\([A-Za-z_][\w.]*\)\s)?"
    r"(?:\s*\|\s*[\w.<>]+:[\w.<>]+:\d+\s*-"  # loguru `| mod:fn:12 -`
    r"|\s*\|\s*[\w.<>]+:\d+\s+-"  # loguru `| {name}:{line} -` (YOLOX `| yolox.core.trainer:253 -`)
    r"|\s+[\w.$<>]+:\d+\s+-"  # log4j `Class$:295 -`
    # `%(levelname)s - %(filename)s - %(asctime)s - ` (DDIM and the repos built on it):
    # `INFO - diffusion.py - 2023-01-04 22:14:28,975 - Epoch: 0, step: 3, loss: ...`
    r"|\s+-\s+\w+\.py\s+-"
    # `INFO:root:`; a logger's name starts with a letter (ESPnet2's `INFO: 1epoch:train:`
    # is the epoch and the loop, not a logger)
    r"|[\s:|\]\-]*(?:[A-Za-z_]\w*)?:(?:[A-Za-z_][\w.]*)?:)?[\s:|\]\-]*"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]"  # glog (torchrun warnings)
    # XLM's LogFormatter: `INFO - 10/04/19 14:41:25 - 0:11:11 - ` (`%x %X`, then the time
    # elapsed): left on, the run's counter after them was no leading number
    r"|\d\d/\d\d/\d\d \d\d:\d\d:\d\d(?: - (?:\d+ days?, )?\d+:\d\d:\d\d)? -"
    # a timestamp, after an upper-case tag (NVIDIA DLLogger's `DLL 2020-05-29 11:31:45.76 - `);
    # `2022-11-19_07:48:23.57` (ProbTransformer) joins date and time with `_`
    r"|(?:[A-Z]{2,8}\s+)?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
    r"(?:\s+-\s)?"
    # [rank0]:, [2024-05-01 12:00:00], [titan] ... but not [step=1/10] nor [Iteration 5]
    r"|\[(?:[^\]=sSiI][^\]=]*)?\]:?"
    r"|>\s"  # a Markdown quote of a pasted log
    r"|\[\d+,\d+\]<\w+>:"  # mpirun --tag-output
    r"|rank\s*\d+\s*:"
    r"|\((?:\w+\s+)?pid=\d+(?:,\s*ip=[\d.]+)?\)"  # Ray's `(TaskRunner pid=87031)` (verl)
    r"))+\s*"
)
# A split's tag where a logger's would stand (marian's `[valid] Ep. 1 : Up. 20000 :
# cross-entropy : 130.97`): it says the line's loss is an evaluation's, so it is kept out of
# the prefix (masked as \x01split\x01 while the prefix goes, then restored).
_SPLIT_TAG = r"\[((?i:val|valid|validation|eval|test))\]"
_MASKED_TAG = r"\x01([A-Za-z]+)\x01"
# A bracket of two or more `name: number` fields holds a record's values, not a logger's tag
# (trlx's tqdm description: `[losses/total_loss: 1.64 | losses/policy_loss: 0.12]:  16%|...|
# 1024/6400`): taken for a prefix, the losses went with it. Masked as \x02...\x03 while the
# prefix goes, then restored.
_BRACKET_FIELD = r"[A-Za-z_][\w./\-]*:\s+[-+]?(?:\d|(?i:nan|inf))"
_FIELDS_BRACKET = rf"\[([^\]]*?{_BRACKET_FIELD}[^\]]*?[|,]\s*{_BRACKET_FIELD}[^\]]*)\]"
# One field in brackets, no logger's tag: a counter and its total or a named value
# (PyTorch-GAN's `[Epoch 4/151] [Batch 200/200] [D loss: 0.69] [G loss: nan]`). Taken for tags,
# every bracket of such a line went with the prefix and nothing was left to read. (A blank
# after the colon: `[olmo_core.train.callbacks.console_logger:68]` is a logger's tag.)
_FIELD_BRACKET = (
    r"\[(\s*[A-Za-z][\w .\-]*?(?:\s\d+\s*/\s*\d+|:\s+[-+]?(?:\d|(?i:nan|inf)))[^\]]*)\]"
)
# CLU's LoggingWriter (Flax examples, T5X) logs `[%d]%s %s`: the step in brackets, then
# `k=v, ...` (`I0919 ... logging_writer.py:35] [100] train_loss=6.95`, T5X's `[100]
# collection=train loss=4.25`); big_vision's writer logs `[%d] name = value`, one metric a line.
# Taken for a logger's tag, the bracket went with the prefix and the step with it: written
# `[step=N]` (which the prefix keeps).
_CLU_HEAD = r"^(|.*?\]\s+|[A-Z]+:absl:)\[(\d+)\]\s+"  # after absl's glog or `INFO:absl:`
_CLU_VALUE = r"[A-Za-z][\w./\-]*\s?=\s?[-+]?(?:\d|(?i:nan|inf))"
_CLU_STEP = _CLU_HEAD + r"(?:collection=train\s+)?(" + _CLU_VALUE + ")"
# an evaluation's collection (`validation`; T5X's `training_eval/<task>`): every value is
# the evaluation's, named `eval/<key>`
_CLU_EVAL = (
    _CLU_HEAD + r"collection=(?:(?i:val|valid|validation|eval|test)|\w*eval\S*)\s+" + _CLU_VALUE
)
_CLU_COLLECTION = _CLU_HEAD + r"collection=\S+\s+"
_CLU_KEY = r"(^|[\s,])([A-Za-z][\w./\-]*)=(\s?[-+]?(?:\d|(?i:nan|inf)))"
# bts's header `[epoch][s/s_per_e/gs]: [4][...]` opens with `[epoch]`, which the prefix would
# take for a logger's tag: masked the same way (see _slash_header)
_EPOCH_HEAD = r"\[((?i:epoch))\]\["
# PaddlePaddle v1 prints a `.` per batch (`--dot_period`) with no newline, so its next log
# line follows a run of dots: `.......Pass      0, Batch 500, Cost nan, time 98.47 s`.
# Left on, the dots were part of the first key (no name: the line was no record).
_PROGRESS_DOTS = r"^\.{3,}"
# Keys that name the step counter, best first (litgpt prints `iter N step M`: M is the step;
# fairseq prints `epoch 001:  450 / 1891 ... num_updates=445`: the update count is the step;
# `g_step 2000, step 152, ...`: the global count wins over a count within the epoch).
_STEP_KEYS = (
    "global_step",
    "global step",
    "global_steps",  # a LoggingTensorHook's `global_steps = 1000, loss = 3.37` (TF Estimator)
    "g_step",
    "num_updates",
    "step",
    "step_i",  # PaxML's `[PAX STATUS] step_i: 100, training loss: 6.358`
    "steps",
    "iteration",
    "iterations",
    "iter",
    "it",
    "s",
    "i",
    "up.",  # marian `Ep. 1 : Up. 14000 : Sen. 965,843 : Cost 5.20`: the update count
    # Chinese: `训练次数：100, Loss：1.98` ("training steps", the PyTorch tutorial of
    # xiaotudui/pytorch-tutorial and its many copies count `total_train_step`), `迭代次数`
    # ("iterations")
    "训练次数",
    "迭代次数",
)
# Step keys that name a global counter wherever they stand in the line (fairseq prints
# num_updates after a dozen other fields); the others count only among the first slots.
_LATE_STEP_KEYS = {"global_step", "global step", "global_steps", "g_step", "num_updates"}
# `completed step: 10` (MaxText), `Training Iteration: 1787` (NVIDIA DLLogger): a phrase whose
# last word names the step, unless another word says it is a setting, not the counter.
_PHRASE_STEP = {"step", "iteration", "iter"}
# MaxText's `eval metrics after step: 4, loss=9.855, total_weights=75264.0`: a phrase naming an
# evaluation and the training step it ran after (its values are the evaluation's); OpenRLHF's
# evaluation bar `Eval stage of steps 40: 100%|...| 5/5 [..., eval gpt_loss=1.12]` names it
# so too (its counter counts the evaluation's batches)
_AFTER_STEP = re.compile(
    r"(?:\A|\s)(val|valid|validation|eval|evaluation|test)\b.*"
    r"\b(?:after (?:step|iteration|iter)|of steps)\Z"
)
# TensorFlow Estimator's evaluation summary `Saving dict for global step 1000: accuracy = 0.85,
# global_step = 1000, loss = 0.52` (estimator.py `_write_dict_to_summary`): its values are the
# evaluation's, at the training step it evaluated
_EVAL_DICT_STEP = re.compile(r"(?:\A|\s)saving dict for global step\Z")
# DeiT's evaluate() closes with `* Acc@1 88.381 Acc@5 96.779 loss 0.445` (MAE, BEiT, ConvNeXt,
# LLaMA-Adapter copy it): the test set's averages, under no split word of their own
_EVAL_SUMMARY = re.compile(r"\A\s*\*\s*Acc@\Z")
_NOT_COUNTER = {
    *("max", "total", "num", "warmup", "save", "log", "every", "per", "of"),
    *("eval", "val", "valid", "validation", "test", "inner", "micro"),
}
# Words a tqdm bar's description may hold when it is the training loop's bar (Lightning
# `Epoch 0:`, Hugging Face Trainer's bare bar); `Map:`, `Loading checkpoint shards:` and
# validation bars count something else.
_TRAIN_BAR_WORDS = {"epoch", "train", "training", "step", "steps", "iteration", "iterations"}
# A loss scaler's overflow report, and the scale it sets (`... reducing to 4194304.0`).
# ColossalAI's `found inf during ShardedOptimV2 step` (rich wraps it after `found`): the
# scaler found an Inf and skipped the step, as an overflow line says.
_OVERFLOW = (
    r"(?i)\boverflow\b.*(?:skip|loss.?scal)|^\s*(?:.*\bfound\s+)?inf during \S+ step\b"
    r"|\boptimizer not run\b.*\bscale_before\b"  # PaddleNLP's skipped step, scale halved
)
# A line that says the loss became NaN without printing it at a step: TensorFlow's
# NanTensorHook `ERROR:tensorflow:Model diverged with loss = NaN.` (and its glog copy, the
# `NanLossDuringTrainingError: NaN loss during training.` after it), OpenNMT-tf's
# `RuntimeError: Model diverged with loss = NaN.`
# detectron2's `FloatingPointError: Loss became infinite or NaN at iteration=2137!`.
_DIVERGED = (
    r"(?i)\bmodel diverged with loss\s*=\s*(?:nan|[-+]?inf)\b|\bnan loss during training\b"
    r"|\bloss became infinite or nan\b"
    # MAE / DeiT / BEiT / LLaMA-Adapter's engine: `print("Loss is {}, stopping training")`
    r"|\bloss is (?:nan|[-+]?inf), stopping training\b"
    # Keras' TerminateOnNaN: `Batch 3: Invalid loss, terminating training` (NaN or Inf)
    r"|\binvalid loss, terminating training\b"
)
_DIVERGED_AT = r"(?i)\bat iteration\s*=?\s*(\d+)"  # the step such a report prints, if any
# A line at a step that says the step was skipped (minFM `Step 1557: detected nan/inf/spiky
# gradient (norm=2.19); skipping optimizer step.`): not an overflow, it has its own step.
_SKIPS = re.compile(r"(?i)\bskip(?:ping|ped|s)?\s+(?:\w+\s+){0,2}?(?:step|update|iteration)\b")
# (`reducing to 4`, `setting loss scale to: 0.0625`, apex `reducing loss scale to 32768.0`;
# DeepSpeed's `... but hysteresis is 2. Reducing hysteresis to 1` leaves the scale as it is)
_OVERFLOW_DETAIL = r"(?i)(\S*overflow.*?|optimizer not run.*?)\s*$"  # the line from its words on
_NEW_SCALE = (
    r"(?i).*\b(?:(?:reducing|scale)\s+to:?|scale_after:)\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
)
_COUNTER = re.compile(r"\x00\s*/\s*\x00")  # an `i / N` progress counter in a template
# a line of two numbers and nothing else (yanmtt's `76980 nan`): see _step_value_pairs
_PAIR_LINE = r"^\s*\x00[ \t]+\x00\s*$"
_BAR = re.compile(r"%\|[^|\x00]*\|")  # tqdm's bar glyphs, which vary from line to line
# `Epoch 2/10` alone on a line (Keras): the epoch of the records after it.
_EPOCH_HEADER = re.compile(r"^\s*(?i:epoch)\s*\x00(?:\s*/\s*\x00)?\s*:?\s*$")
# PccAI's `Training at epoch 4 (total 4) with lr 0.0008 ...`: a line that says an epoch
# starts, before records whose counters restart with it (see _batch_counters)
# SpeechBrain's `speechbrain.utils.epoch_loop - Going into epoch 2` (its logger's name left
# on where the level is not printed)
_EPOCH_START = (
    r"(?i)^\s*(?:[\w.]+ - )?(?:training|train|starting|start|going into)\s+(?:at\s+)?epoch\s*\x00"
)
_COUNT_AFTER = {"updates", "steps", "iterations", "iters"}
_STEP_WORDS = {"iter", "iters", "iteration", "iterations", "step", "steps"}
# Counts of skipped steps since the start of the run (DeepSpeed, InternEvo)
_SKIP_COUNTS = {"skipped", "inf_nan_skip_batches"}
_SUMMARY_WORDS = {"averaged", "average", "summary", "epoch"}
# `][`, `]  [ `, `](` (baby-llama2 `Epoch:[0/2](7000/293491)`): the next bracketed counter
_NEXT_BRACKET = re.compile(r"\]\s*[\[(]\s*\Z")
_TRAIN_EPOCH_BRACKET = re.compile(r"(?i)(?:^|\s)train:\s*\[\s*\Z")
_TRAIN_EPOCH = re.compile(r"(?i)(?:^|\s)train:\s*\Z")  # timm `Train: 12 [`: the epoch after it
# mmengine's evaluation loops (`Epoch(val)`, `Iter(test)`) and what their lines time
_EVAL_LOOP = re.compile(r"(?i)\b(?:epoch|iter)\((val|test)\)")
_LOOP_STATS = {"time", "data_time", "memory", "eta"}
# Keras' bar before its timings: `[==========] - `, Keras 3's `━━━━━━━━━━ ` (U+2501)
_KERAS_BAR_END = re.compile(r"(?:\]\s+-|\u2501)\s+\Z")
# Lightning's bar postfix `v_num=0`: the logger's experiment version, no training metric
_NO_METRIC = {"v_num"}
_MAGNITUDES = {"K", "M", "B", "G", "T", "k"}  # `124 M`: the unit of a count, not a name
# an evaluation's own counter named with its split (`valid step 2000`, `eval iter 30`)
# (PaddlePaddle v2's `Test with Pass 0, Cost 2.01, {...}`: the pass the test followed)
# Kaldi's and WeNet's `cv` (cross-validation) set is the validation set: `CV Batch 4/0 loss`
_SPLIT_COUNTER = re.compile(
    r"(?:val|valid|validation|eval|evaluation|test|cv)[ _](?:with[ _])?"
    r"(?:step|iter|iteration|batch|epoch|pass)s?\Z"
)
_SPLITS = {"train", "val", "valid", "validation", "eval", "test"}
_AT_STEP = re.compile(r"\s+at\s+(?:step|iteration|iter)\b")  # `Eval 12 at step 48000`
_FIELD_SEP = re.compile(r"[|,;\t\]]|\s{2,}|:\s|\s-+\s|=(?=\s)")  # `-`, `--` (InternEvo)
_WORD = re.compile(r"[A-Za-z]")
_ANSI = r"\x1b\[[0-9;]*[A-Za-z]"  # colour codes (torchtitan colours its step lines)
# A name segment that ends in a number before a `/` and a word (OLMo-core's evaluator
# `dclm-validation-0802/CE loss=3.21`): the number is part of the name, not a value; left
# a number, the key was `/CE loss`, the training loss, and the validation value stood in
# for it. Joined with `_` (as the metric name writes `-` anyway) so NUM's \b skips it.
_NAMED_NUMBER = r"([A-Za-z])-(\d+)/([A-Za-z])"
# A key that ends in `-k` before its value (mmcls's `accuracy_top-1: 22.0000`): the top-k
# is part of the name; left a number, the key was lost with it and the line read nothing
_TOP_K_KEY = r"([A-Za-z])-(\d{1,2}):(\s*[-+]?\d)"
# A top-k accuracy meter printed as `value (running mean)` (timm's validate() `Acc@1:  80.000
# ( 79.512)`, Swin's and the PyTorch ImageNet example's `Acc@1 45.312 (45.312)`): the k is
# part of the name, written `Acc1` (as DeiT's MetricLogger names the meter `acc1`). Left a
# number, the meter had no name and its values were dropped. A closing summary that prints
# one number (DeiT's `* Acc@1 88.381`) keeps its `@`: the running mean before it says it.
_TOP_K_METER = r"([A-Za-z])@(\d{1,2})(:?\s+[-+]?(?:\d|(?i:nan|inf))[^\s(]*\s*\()"
# mmcv's own ProgressBar (`[>>>>] 50/50, 163.1 task/s, elapsed: 0s, ETA:     0s`) counts an
# evaluation's samples: no training step, however its `n/N` reads
_TASK_BAR = r"\d+/\d+, [\d.]+ task/s, elapsed: \d+s"
# A parameter group's index in a name (OLMo-core's `optim/LR (group 0)=3.0e-04`, one line per
# group): part of the name, not a value. Left a number, the line had no key before its value
# (`)=`) and the learning rate was lost; joined with `_` (`group_0`) so NUM skips it, and
# each group keeps its own name (group 1 never overwrites group 0, the run's `lr`).
_GROUP_INDEX = r"\((group) (\d+)\)"
# The same colour codes once a paste lost their ESC byte (GitHub and most terminals' copy
# drop it): `[31mstep:  1  [32mloss: 12.2486 ... [35mmfu: 0.62%[39m`. Only style and
# colour codes (0-9, 22-29, 30-49 with 38/48's `;`-lists, 90-107) and never one followed
# by `]`, so that a bracketed duration (`[10m]`, `[5m]`) is left alone; the character
# after the run is kept (no look-ahead in polars' regex).
_BARE_SGR = r"(?:\[(?:(?:[0-9]|2[2-9]|[34][0-9]|9[0-7]|10[0-7])(?:;[0-9]{1,3})*)?m)+([^\]]|$)"
_GLUED = re.compile(r"([A-Za-z%]{1,4})(?:[\s|,;)]|$)")
_GLUED_NAME = re.compile(r"_|x[0-9a-fA-F]")  # `0_default`, `0x7fc6480`: a name, not a number
_UNIT_GLUED = re.compile(r"^[^\s|,;:=()\[\]]+(?=[\s|,;])")
_KEY = re.compile(r"[A-Za-z%][\w .%/()@\-]*\Z")
# The opening of a value printed in brackets or quotes after its key: `lr=[`, `loss: [`, `': '`.
# Also a counter in brackets after its key and a blank (mmcv `Iter [10100/316440]`, mmengine
# `Iter(train) [ 510/2046]`).
_OPEN_VALUE = re.compile(
    r"(?:(?<=[=:])\s*\[|(?<=[\w)])\s+\[|(?<=[Ee]poch)\[|(?<=['\"]:\s)['\"]|(?<=['\"]:)['\"]|(?<==)['\"]"
    r"|(?<=[=:])\s*tensor\()\s*\Z"  # `eval_ppl=tensor(nan, device='cuda:0')` (llama-recipes)
)
# XLM's `56.12 sent/s -  2143.80 words/s`: the text between two values is the first one's
# rate unit and a dash; it names no value after it (the words/s were stored as `sent/s_`)
_RATE_UNIT_SEP = re.compile(r"\s+[A-Za-z]+/[A-Za-z]+\s+-+\s+")
# Caffe's `(* 1 = 0.66597 loss)` after an output's value: its loss weight, then its share
_WEIGHTED = re.compile(r"\(\*\s*\Z")
# A key in brackets right before its value (LION's loguru lines: `| [Loss] 51566519.44 |`).
_TAG_KEY = re.compile(r"(?:^|[\s|,;])\[([A-Za-z][\w .%/()\-]{0,40})\]\Z")
# `(norm=2.19)`: a key and its value inside parentheses, after other words; also a counter
# named in parentheses before a blank (fairseq2's `Train Metrics (step 50) - Loss: ...`: the
# step, not a metric `Train Metrics`). Only a counter: `(version 2.1)` in prose is no field.
_PAREN_KEY = re.compile(
    r"\(([A-Za-z][\w.]*)\s*[=:]\s*\Z|\(((?i:step|iter|iteration|update|batch|epoch)s?)\s+\Z"
)
# `file.cu:675` in an error or warning message is a source line, not a metric.
_SOURCE_FILE = re.compile(r"\.(?:py|pyx|cu|cuh|c|cc|cpp|cxx|h|hpp|rs|go|java|js|ts|sh)\Z")
# ESPnet2 glues its counts to what they count: `1epoch:train:3376-3750batch:` (epoch 1, the
# window of batches 3376 to 3750 of that epoch), `2/20epoch started`, `1epoch results:`.
_GLUED_EPOCH = re.compile(r"(?i)\Aepochs?(?![A-Za-z])")
_GLUED_COUNT = re.compile(r"(?i)\A(?:batch|batches|iter|iters|iteration|iterations|step|steps)\b")
# `time=1 minute and 42.6 seconds`, `1 hour, 31 minutes and 58.52 seconds`: a duration spelt
# out, whose numbers are no values of their own
_DUR_UNIT = r"(?:days?|hours?|minutes?|seconds?)"
_DUR_AFTER = re.compile(rf"\A {_DUR_UNIT}(?: and |, )\Z")
_DUR_BEFORE = re.compile(rf"\b{_DUR_UNIT}(?: and |, )\Z")
# A duration glued into one word (OLMo-core's `eta=5h11m`, `57m12s`): its first number is a
# slot, the rest stays text; without this, every minute of the ETA made a kind of line of
# its own. Its tail becomes `~` in the template (`eta=<slot>h~`).
_DUR_TAIL = r"(\x00[dhm])\d+(?:\.\d+)?(?:[dhm]\d+(?:\.\d+)?)*[hms]\b"
# An estimate of the time left (`eta`, bts's `time left: 66.27h`): no training metric,
# whatever unit it is printed in (a clock `eta: 2:46:39` is no value anyway)
_ETA_KEY = re.compile(r"eta|time[ _]left|(?:time[ _])?remaining(?:[ _]time)?")
# `[train] loss=2.85, ... [valid] loss=2.39, ...`: a bracketed word before a key opens a
# section of the line, whose names belong to it
_SECTION = re.compile(r"\[([A-Za-z][\w.\-]*)\]\s+(?=[A-Za-z])")
_SECTION_SPLIT = {
    "valid": "val",
    "validation": "val",
    "val": "val",
    "eval": "eval",
    "evaluation": "eval",
    "test": "test",
}
# bts `[epoch][s/s_per_e/gs]: [`: bracketed, slash-joined names before their values
_SLASH_HEADER = re.compile(r"^\s*((?:\[[A-Za-z_]\w*(?:/[A-Za-z_]\w*)*\])+):?\s*\[\Z")
_HEADER_ABBREV = {"gs": "global_step"}  # bts: `gs` (global step), beside `s` (the epoch's)
# IMDLBenCo's `predict_loss: [local: 0.6921 | reduced: 0.6936]`: see _local_values
# A named group of fields opening before a slot: `tot_loss[ctc_loss=` (icefall), its name
# glued to the `[` (a value in brackets follows a separator: `lr=[1e-06]`, `loss: [nan]`)
_GROUP_OPEN = re.compile(r"(?:^|[\s,;|])([A-Za-z_][\w.]*)\[([A-Za-z_][\w.]*)\s*[=:]\s*\Z")
_LOCAL_OPEN = re.compile(r"([A-Za-z][\w./\-]*):\s*\[local:\s*\Z")
_REDUCED = re.compile(r"\s*\|\s*reduced:\s*")
_MAX_STEP_SLOT = 3  # the step is among the first numbers of a record
_MAX_FIELDS = 40  # more named numbers on one line is a config dump
_MAX_CONT_FIELDS = 12  # a step-less line with a loss and more fields than this is not a record
_REWARD = re.compile(r"(?i)\breward")  # an RLHF step's reward (`average reward score`)
_LOSSES = {"loss", "val_loss", "test_loss"}
# A loss named before its split (cellpose `Loss 0.6758, Loss Test 0.3793`): the split's loss,
# named as the split's own lines name it (`Test Loss`), never a metric `loss_test` of its own
_LOSS_SPLIT = re.compile(r"(?i)\A(loss)[ _](test|val|valid|validation|eval)\Z")
# llama-recipes `Epoch 4: train_perplexity=nan, train_epoch_loss=nan, epoch time 242.3s`
_EPOCH_LOSS = re.compile(r"(?i)^(?:train|training|eval|val|valid|validation)?[_ ]?epoch[_ ]loss$")
# A CJK phrase before a metric's ASCII name that says the evaluation set it was measured on
# (xiaotudui/pytorch-tutorial's `整体测试集上的Loss: 262.6`, "the Loss on the whole test set"):
# the words for test and validation (Chinese simplified and traditional, Japanese, Korean)
_CJK_SPLITS = {
    **dict.fromkeys(("测试", "測試", "テスト", "테스트"), "test"),
    **dict.fromkeys(("验证", "驗證", "検証", "검증"), "val"),
}
_CJK_NAMED = re.compile(r"\A([^\x00-\x7f]+)([A-Za-z][\w .%/()@\-]*)\Z")
_PAREN_STEP_TIME = re.compile(r"\s*(?:sec|s|ms|us)/step\s*\)")  # `(2.34 sec/step)`
_MAX_TEMPLATES = 5000  # distinct templates examined at most (the most frequent first)
_SAMPLES = 3


@dataclass
class Template:
    """One kind of line: its text with numbers as slots, and what each slot is."""

    text: str
    lines: int
    step_slot: int | None = None
    names: dict[int, str] = field(default_factory=dict)  # slot -> metric name
    cont: bool = False  # no step: takes the step of the record before it

    keyed: bool = False  # the step is named (`step N`), not a bare leading number
    epoch_slot: int | None = None  # mmengine `[epoch][i/N]`: step = (epoch - 1) * N + i
    total_slot: int | None = None
    epoch_from_zero: bool = False  # timm counts epochs from 0 whatever the file's first one
    ordinal: bool = False  # no step counter at all: records numbered in file order
    bar: bool = False  # the step is a training progress bar's counter (tqdm `n/N`)
    per_epoch: bool = False  # a bare `n/N` counter, which may restart after `Epoch E` lines
    in_epoch: bool = False  # fairseq's `epoch 001:  450 / 1891`: batches within the epoch
    global_count: bool = False  # the step is a global update count (`num_updates=445`)
    groups: dict[int, str] = field(default_factory=dict)  # slot -> key of its dict (`grad_norm`)
    # ESPnet2 `1epoch:train:3376-3750batch:`: the step is the window's end counted over the
    # run (the epoch's offset added, `_restart_offsets`); `1epoch results:` lines are
    # epoch summaries whose step is their cumulative `total_count`
    glued: bool = False
    window: bool = False  # the step slot is the end of an `a-b` window (printed as `-b`)

    @property
    def is_record(self) -> bool:
        """A step record: named numbers, or a named step alone (OLMo's `[step=N/M]` line,
        whose metrics follow on indented lines)."""
        return self.ordinal or (self.step_slot is not None and (bool(self.names) or self.keyed))

    def shown(self) -> str:
        parts = self.text.split(SLOT)
        out = parts[0]
        for i, lit in enumerate(parts[1:]):
            label = (
                "<step>"
                if i == self.step_slot
                else f"<{self.names[i]}>"
                if i in self.names
                else "#"
            )
            out += label + lit
        return out.strip()


def _clean_key(text: str) -> str:
    # a closing bracket first ends the counter before (`(7000/293491) loss:`): not the key's
    key = text.strip().lstrip(")]'\" ").strip("{}<>#*'\"").strip()
    while key[:1] in "[(" and key and key.count(key[0]) > key.count(")]"["[(".index(key[0])]):
        key = key[1:].strip()
    while key[-1:] in ")]" and key and key.count(key[-1]) > key.count("(["[")]".index(key[-1])]):
        key = key[:-1].strip()
    return re.sub(r"\s+", " ", key)


def _key_before(lit: str) -> str:
    """The name a slot's preceding text gives it: the last field's text, separators off.
    A value printed in brackets or quotes (`lr=[1e-06]`, `loss: [nan]`, `'loss': '1.02'`)
    keeps its key; a key in brackets (`[Loss] 51566519.44 | [step] 89`) is that key."""
    inner = _PAREN_KEY.search(lit)
    if inner:  # minFM `detected spiky gradient (norm=2.19)`: the key inside the parentheses
        return inner.group(1) or inner.group(2)
    body = _key_body(lit)
    if not body:
        return ""
    tag = _TAG_KEY.search(body)
    if tag:
        return _clean_key(tag.group(1))
    return _clean_key(_comma_key(body) or _FIELD_SEP.split(body)[-1])


def _comma_key(body: str) -> str:
    """The key of a field `; LR, 3e-05;` in a line whose fields end at `;`: the field's text
    before its one comma (nengdong96/CSDN#6 prints `Epoch: 69; LR, 3e-05; pid_loss: nan;`).
    Cut at the comma as a field separator, the key was empty and the learning rate lost."""
    _, semicolon, field = body.rpartition(";")
    field = field.strip()
    if semicolon and field.endswith(",") and field.count(",") == 1:
        return field[:-1]
    return ""


def _glued_date(lits: list[str], i: int) -> bool:
    """Slot i opens three numbers glued by their signs, a date `2024-10-31` (the `-10`, `-31`
    already skipped as glued to it): the year is no value of the key before it."""
    return i + 3 < len(lits) and lits[i + 1] == "" and lits[i + 2] == "" and bool(lits[i][-1:])


def _rate_by_unit(key: str, after: str) -> str:
    """A throughput named for what it counts by the unit printed after it: ColossalAI's
    `throughput=0.28555 sample_per_sec` counts samples, not tokens."""
    canon = alias_table().canonical(key)
    if canon not in ("tokens_per_s", "samples_per_s"):
        return key
    unit = after.strip().split(" ")[0].lower() if after[:1] == " " else ""
    if "sample" in unit:
        return "samples_per_s"
    return "tokens_per_s" if "token" in unit else key


def _key_body(lit: str) -> str:
    """A slot's preceding text without the opening of a bracketed or quoted value and the
    separators before it: where its key ends (XLM's `valid_en_mlm_ppl -> 2206.38`: the arrow
    too)."""
    return _OPEN_VALUE.sub("", lit).rstrip(" \t:=#").removesuffix("->").rstrip(" \t")


def _tagged(lit: str) -> bool:
    """The slot's key is printed in brackets (`| [step]    89`): a key, wherever it stands."""
    return _TAG_KEY.search(_key_body(lit)) is not None


def _quoted_key(lit: str) -> bool:
    """The slot's key is a printed dict's (`..., 'epoch': 0.1, 'step': 10}`): a key
    wherever it stands in the dict, as a dict has no order that would make a late `step` a
    setting (a config dump is printed once; a record's dict on many lines)."""
    return re.search(r"""['"][\w/ .-]+['"]:\s*['"]?\Z""", lit) is not None


def _cjk_split_key(key: str) -> str:
    """`test Loss` for `整体测试集上的Loss` (a phrase that names the test set, then the
    metric): the ASCII name under the split the phrase names, as an evaluation's loss must
    never join the training loss. Any other CJK phrase before a name is left as it is (no
    key: a translation of every phrase would guess)."""
    named = _CJK_NAMED.match(key)
    if named is None:
        return key
    split = next((s for word, s in _CJK_SPLITS.items() if word in named.group(1)), "")
    return f"{split} {named.group(2)}" if split else key


def _step_time_in_parens(before: str, after: str) -> bool:
    """A number alone in parentheses with a per-step time unit (TF-slim's train_step logs
    `global step 2458: loss = nan (2.34 sec/step)`): the step's time, named by its unit.
    Other numbers in parentheses annotate the value before them and are skipped; this one
    was too, and the time of a NaN step was lost."""
    return before.rstrip().endswith("(") and _PAREN_STEP_TIME.match(after) is not None


def _key_after(lit: str) -> str:
    """The unit or name after a slot (`4230.95 ms`, `31.9% bf16 MFU`, `123917 tok/s`)."""
    return _clean_key(_FIELD_SEP.split(lit.lstrip())[0]) if lit.strip() else ""


def infer(text: str, count: int) -> Template:
    """What each slot of one template is (see the module docstring)."""
    tpl = Template(text, count)
    lits = text.split(SLOT)
    n = len(lits) - 1
    # a unit glued to the previous number (`0.0m tok/s:`, `12ms, mfu`) is not part of a key
    befores = [_key_before(_UNIT_GLUED.sub("", lits[i]) if i else lits[i]) for i in range(n)]
    skip: set[int] = set()
    weighted = False  # a loss term printed with its weight: a line under its iteration's
    eval_batches = False  # an evaluation's line that counts its batches (`Test: [ 50/195]`)
    for i in range(n):
        before = lits[i]
        if i and before.strip() in ("/", "of"):  # `N/M`: M is a total
            skip.add(i)
        elif _step_time_in_parens(before, lits[i + 1]):
            pass  # TF-slim's `loss = nan (2.34 sec/step)`: the step's time, named by its unit
        elif before.rstrip().endswith(("(", "(+", "(-")) and not before.endswith("tensor("):
            skip.add(i)  # `(+nanz)`, `(-1.20z)`: an annotation of the value before it
        elif before.endswith("[") and lits[i + 1].startswith("%]"):
            skip.add(i)  # `Epoch 1 complete [10%]`: the loop's progress, no metric
        elif _WEIGHTED.search(before):
            # Caffe's `loss_cls = 2.69 (* 1 = 2.69 loss)`: the output's weight and weighted
            # share of the total, not the solver's `loss` (which its own line prints)
            skip.add(i)
            weighted = True
            if re.fullmatch(r"\s*=\s*", lits[i + 1]):
                skip.add(i + 1)
        elif before.endswith("#") and lits[i + 1][:1] == ":":
            skip.add(i)  # Caffe's `Train net output #3: name = ...`: an index, not a value
        elif (
            (i and not before)
            or before[-1:].isalpha()
            or before[-1:] == "@"
            or _GLUED_NAME.match(lits[i + 1])
        ):
            # glued to the previous number (`1.5.2`, a date), to a word (`-100.000x1e-2`,
            # Swin's `Acc@1 45.3`) or to a name after it (InternEvo's group `'0_default'`, an
            # address `0x7fc6480`): part of a token, not a value
            skip.add(i)
        elif _in_quoted_text(lits, i):
            skip.add(i)  # ms-swift `'elapsed_time': '4h 45m 21s'`: a number inside a text
        elif i + 2 < len(lits) and lits[i + 1] == "/" and lits[i + 2][:1] == "/":
            skip.update({i, i + 1})  # `nan/inf/spiky`, a date `2024/05/01`: words, not values
        elif _glued_date(lits, i):
            skip.add(i)  # CSDN's `Time: 2024-10-31 18:32:24;`: a date's year, no value
        elif i and before == ":" and i + 1 < len(lits) - 1 and lits[i + 1] == ":":
            skip.update({i - 1, i, i + 1})  # a clock `2:46:39` (an ETA), not three values
        elif lits[i + 1] == ":" and _key_before(before).lower() == "eta":
            skip.update({i, i + 1})  # Keras' `ETA: 1:06` (minutes:seconds): a clock too
        elif re.match(r" days?, \Z", lits[i + 1]):
            skip.add(i)  # mmcv `eta: 7 days, 4:23:57`: the days of a clock
        elif _DUR_AFTER.match(lits[i + 1]) or _DUR_BEFORE.search(before):
            skip.add(i)  # ESPnet2 `time=1 minute and 42.6 seconds`: a duration spelt out
    _local_values(lits, befores, skip)
    qualifier = _qualified_split_counter(lits, befores)
    _slash_header(lits, befores, skip)
    _bracket_groups(lits, befores)
    # mmengine names the loop a counter belongs to: `Iter(train) [ 510/2046]` is an `iter`
    lowered = [b.lower().lstrip("[").removesuffix("(train)") for b in befores]
    bar = _progress_bar(lits, skip)
    _glued_epoch(tpl, lits, lowered, skip)
    after_split = "" if tpl.glued else _evaluation_after_step(tpl, lowered, skip)
    if tpl.step_slot is None and not tpl.glued:
        _step_key(tpl, lowered, lits, skip)
    bar_split = _evaluation_bar(lowered, bar, skip) if bar is not None else ""
    if tpl.step_slot is None and bar is not None and not bar_split:
        _bar_step(tpl, lits, lowered, bar)
    if tpl.step_slot is None:
        _epoch_counter(tpl, lits, lowered, skip)
    if (
        tpl.step_slot is None
        and n
        and not lits[0].strip(" \t[")
        and 0 not in skip
        and not tpl.glued
    ):
        tpl.step_slot = 0  # a bare leading `N` or `N/M`
        if n > 1 and lits[1].strip() == "/":
            tpl.per_epoch, tpl.total_slot = True, 1
    if tpl.step_slot is None:
        _epoch_iteration(tpl, lits, skip)
    split_word = after_split or _split_of(lits, befores) or _summary_split(lits) or bar_split
    if split_word and qualifier:
        split_word = f"{split_word}_{qualifier}"  # timm `Test (EMA):`: the EMA model's test
    # the line names its evaluation's counter (`Test with Pass 0`) or step (`after step 4`)
    counted_split = bool(after_split)
    entries = dict_entries(lits)
    sections = _sections(lits)
    for i in range(n):
        if i == tpl.step_slot or i in skip:
            continue
        if i in entries:  # `grad_norm={'0_default': 2.16, ...}`: `grad_norm/default`
            tpl.groups[i] = entries[i][0]
            tpl.names[i] = "/".join(entries[i])
            continue
        key = "" if i and _RATE_UNIT_SEP.fullmatch(lits[i]) else befores[i]
        if not _WORD.search(key):
            if _after_glued_index(lits, i, skip):
                continue  # `Acc@1 88.381`: the value of `Acc@1`, whose 1 the template lost
            after = lits[i + 1]
            spaced = not lits[i] or lits[i][-1:] in " \t|,;"  # `| 4230.95 ms`, not `:39  time`
            spaced = spaced or _step_time_in_parens(lits[i], after)
            key = _key_after(after) if spaced and (after[:1] in " %" or after[:1].isalpha()) else ""
            if key in _MAGNITUDES:  # Lightning's model summary `0 | model | GPT | 124 M`
                key = ""  # a count in millions, no metric's name
            if key == "%":  # a bar's `20%|███` left before its redraw: a percent of nothing
                key = ""
            if _keras_wall_time(key, lits, i):
                key = ""
        key = _cjk_split_key(key)
        if not _good_key(key) or _ETA_KEY.fullmatch(key.lower()) or key.lower() in _NO_METRIC:
            continue
        key = _LOSS_SPLIT.sub(r"\2 \1", key)  # cellpose `Loss Test 0.3793`: `Test Loss`
        unit = _GLUED.match(lits[i + 1])
        if unit and befores[i] and not key.lower().endswith(unit.group(1).lower()):
            key = f"{key} ({unit.group(1)})"  # `time 1019.95ms` -> `time (ms)`, `0.0m` -> minutes
        if tpl.step_slot is None and _SPLIT_COUNTER.match(key.lower()):
            counted_split = True
            continue  # PaddleNLP `valid step 2000, batch: 10, loss:`: the counter, no metric
        if key.lower() in _SPLITS and lits[i + 1].strip() == "/":
            skip.add(i + 1)  # timm `Test: [  50/195]`: the evaluation's batch counter
            eval_batches = True
            continue
        if key.lower() in _SPLITS and _AT_STEP.match(lits[i + 1]):
            continue  # Transformer-XL `| Eval  12 at step 48000 |`: the evaluations' count
        if key.lower() in _SPLITS and n - len(skip) == 2:  # build-nanogpt: `0 train 10.955`
            key = f"{key} loss"
        elif split_word and not _names_split(key) and _split_loss(key):
            key = _split_named(split_word, key)
        tpl.names[i] = _in_section(_rate_by_unit(key, lits[i + 1]), sections[i])
    if split_word:
        _evaluation_names(tpl, split_word, sections, counted_split)
        if eval_batches:
            _read_running_averages(tpl)
    elif tpl.step_slot is None:
        _evaluation_dict(tpl, lits)
    if tpl.glued:
        _glued_summary(tpl, lowered, sections)
    _batch_in_epoch(tpl)
    if tpl.step_slot is None:
        _total_counter(tpl, lowered)
    elif _counted(lowered[tpl.step_slot]) in _LATE_STEP_KEYS or lowered[tpl.step_slot].startswith(
        "global "
    ):
        tpl.global_count = True
    late = (
        tpl.bar
        or tpl.global_count
        or tpl.glued
        or (tpl.step_slot is not None and _tagged(lits[tpl.step_slot]))
        or (tpl.step_slot is not None and count > 1 and _quoted_key(lits[tpl.step_slot]))
    )
    # verl prints 40 to 100+ `key:value` fields after its leading `step:1 - `: a record
    # that opens with its named step is no config dump, however many fields follow
    leading = tpl.keyed and tpl.step_slot == 0 and lowered[0] == "step"
    leading = leading or _opens_with_progress(tpl, lits)
    if tpl.step_slot is not None and (
        (tpl.step_slot > _MAX_STEP_SLOT and not late)
        or (len(tpl.names) > _MAX_FIELDS and not leading)
    ):
        tpl.step_slot, tpl.keyed, tpl.bar = None, False, False  # a config dump or a table
        tpl.names = {}
    if tpl.step_slot is None:
        keys = list(tpl.names.values())
        indented = lits[0][:1] in (" ", "\t") and len(keys) <= 3
        lossy = any(map(_is_loss, keys)) or any(_EPOCH_LOSS.match(k) for k in keys)
        tpl.cont = indented or (len(keys) <= _MAX_CONT_FIELDS and lossy) or _evaluation(keys)
        tpl.cont = tpl.cont or (weighted and bool(keys)) or _step_reward(keys)
        tpl.cont = tpl.cont or (bool(keys) and _dict_tail(tpl.text, lits))
        # an evaluation that counts its batches (`Test (EMA): [ 50/195]`) ran after the step
        tpl.cont = tpl.cont or (eval_batches and bool(keys))
    loop = _EVAL_LOOP.search(lits[0])
    if loop:
        _evaluation_loop(tpl, loop.group(1).lower(), sections)
    return tpl


_QUALIFIED_SPLIT = re.compile(r"(?i)(val|valid|validation|eval|test)\s*\(\s*([a-z]\w*)\s*\)")


def _qualified_split_counter(lits: list[str], befores: list[str]) -> str:
    """timm's validate() names its line `'Test' + log_suffix`, and evaluates the EMA weights
    with `log_suffix=' (EMA)'`: `Test (EMA): [  50/195]` is an evaluation's batch counter
    like `Test: [  50/195]`, of another model. Its counter's key becomes the split word and
    the qualifier (`ema`) is returned, to join the split of the line's names. Before, the
    counter was a metric `test_(ema)` and the EMA model's loss replaced the training loss of
    the step."""
    for i, key in enumerate(befores):
        found = _QUALIFIED_SPLIT.fullmatch(key.strip())
        if found and lits[i + 1].strip() == "/":
            befores[i] = found.group(1)
            return found.group(2).lower()
    return ""


def _running_average_slot(text: str, slot: int) -> int:
    """The slot of the running average a meter prints after its value, `A (B)`, else `slot`.
    timm's and the PyTorch ImageNet example's AverageMeter print `{val} ({avg})` (the batch's
    value, then the mean since the meter was reset), and MetricLogger's SmoothedValue
    `{median} ({global_avg})` (the median of a 20-value window, then the mean since reset):
    either way the number in parentheses is the one over the whole loop. IMDLBenCo's
    MetricLogger prints the same two as `[local: {median} | reduced: {global_avg}]`."""
    lits = text.split(SLOT)
    after = lits[slot + 2].lstrip()[:1] if slot + 2 < len(lits) else ""
    paired = lits[slot + 1].strip() == "(" and after == ")"
    return slot + 1 if paired or (_REDUCED.fullmatch(lits[slot + 1]) and after == "]") else slot


def _read_running_averages(tpl: Template) -> None:
    """A line that closes a loop reports the loop by the running averages it prints beside
    each value (`loss: 6.5993 (6.5925)`): MAE / DeiT / BEiT's `Averaged stats:` line (the
    meters, reset every epoch, after `synchronize_between_processes`, which all-reduces
    their count and total but not their window) and the lines of an evaluation that counts
    its batches (timm's `Test: [ 50/195]  Loss:  5.331 ( 5.310)`; `validate()` returns
    `losses_m.avg`). The window median or last batch before it is no statistic of the epoch
    or the evaluation, and would hide a NaN that the average kept (`grad_norm: 0.3922
    (nan)`)."""
    tpl.names = {_running_average_slot(tpl.text, i): k for i, k in tpl.names.items()}


def _dict_tail(text: str, lits: list[str]) -> bool:
    """A printed dict broken over lines (unsloth#3485's GRPO step: `{'loss': 0.0, ...,` then
    `'reward': 4.0, 'reward_std': 0.0, ..., 'kl': 0.0, 'epoch': 0.01}`): a step-less line that
    opens with a quoted key and no brace is the rest of the dict before it. Read as lines of
    their own, its rewards and KL were dropped (no loss among them)."""
    return bool(re.match(r"\s*['\"][^'\"]+['\"]:\s*\Z", lits[0])) and "{" not in text


def _local_values(lits: list[str], befores: list[str], skip: set[int]) -> None:
    """IMDLBenCo's MetricLogger prints a meter as `predict_loss: [local: 0.6921 | reduced:
    0.6936]`: MAE's `{median} ({global_avg})` under other words, the median of this rank's
    last 20 values, then the mean since the epoch began (all-reduced over the ranks only by
    `synchronize_between_processes`, before the epoch's `Averaged stats:` line). The local
    value is the iteration line's, stored under the meter's name, as MAE's median is; a
    line that closes a loop reads the reduced one (_running_average_slot). Before, `local`
    and `reduced` were two metrics and `predict_loss` none."""
    for i in range(len(lits) - 2):
        opened = _LOCAL_OPEN.search(lits[i])
        if opened and _REDUCED.fullmatch(lits[i + 1]) and lits[i + 2].lstrip().startswith("]"):
            befores[i] = opened.group(1)
            skip.add(i + 1)


def _group_opened(lit: str) -> tuple[str, str] | None:
    """(group, key) where `lit` opens a named group of fields (`, loss[ctc_loss=`), or None."""
    opened = _GROUP_OPEN.search(lit)
    return (opened.group(1), opened.group(2)) if opened else None


def _bracket_groups(lits: list[str], befores: list[str]) -> None:
    """icefall prints a batch's values and their running totals as named groups of the same
    fields: `loss[ctc_loss=0.76, loss=0.74, over 2223 frames.], tot_loss[ctc_loss=1.10,
    loss=1.09, over 438207.7 frames.]`. A group's first field is named after its `[`; a
    later group's fields that an earlier group of the line already named are
    `<group>/<field>` (`tot_loss/loss`), the first group's keep their names. Before, the
    first field of each group had no name and both groups' fields had one, the later group's
    values (the running totals) replacing the batch's."""
    group = ""
    named: set[str] = set()  # the fields of the group open now
    earlier: set[str] = set()  # the fields of the line's groups before it
    for i in range(len(lits) - 1):
        opened = _group_opened(lits[i])
        if opened:
            earlier |= named
            group, named = opened[0], set()
            befores[i] = opened[1]
        elif "]" in lits[i]:
            group = ""
        if not group:
            continue
        named.add(befores[i])
        if befores[i] in earlier:
            befores[i] = f"{group}/{befores[i]}"


def _slash_header(lits: list[str], befores: list[str], skip: set[int]) -> None:
    """bts prints its counters as a header of names, then their values in the same brackets
    and slashes: `[epoch][s/s_per_e/gs]: [4][2564/6058/26796], lr: ..., loss: ...` (the
    epoch, the step in the epoch, the steps per epoch, the global step). Each value takes
    its name by position; `gs` is the global step, and beside it the count within the
    epoch and a `_per_` total are no metrics. Before, the header was one name
    (`s/s_per_e/gs`) given to the epoch, and the records were numbered in file order."""
    head = _SLASH_HEADER.match(lits[0])
    if not head:
        return
    inner = head.group(1)[1:-1]
    names = re.split(r"\]\[|/", inner)
    seps = re.findall(r"\]\[|/", inner)
    k = len(names)
    if len(lits) <= k or [lits[j].strip() for j in range(1, k)] != seps:
        return
    if not lits[k].startswith("]"):
        return
    names = [_HEADER_ABBREV.get(n.lower(), n) for n in names]
    glob = any(n in _LATE_STEP_KEYS for n in names)
    for i, name in enumerate(names):
        skip.discard(i)
        low = name.lower()
        if "_per_" in low or (glob and low in _STEP_KEYS and low not in _LATE_STEP_KEYS):
            skip.add(i)
        else:
            befores[i] = name


def _split_named(split: str, key: str) -> str:
    """A loss named for the split of its line: `val cross-entropy` (marian), and `test loss`
    for a synonym of the loss the table knows under no split (PaddlePaddle v2's `Test with
    Pass 0, Cost 2.01`: `test Cost` would be a metric of its own, no evaluation loss)."""
    named = f"{split} {key}"
    table = alias_table()
    if "loss" in key.lower() or table.canonical(key) != "loss":  # `lm_loss`: its own name
        return named
    if table.canonical(named) == normalise(named):
        return f"{split} loss"
    return named


def _evaluation_names(
    tpl: Template, split: str, sections: list[str], counted: bool = False
) -> None:
    """An evaluation line holds the evaluation's values only: each is stored under the
    split (`test/classification_error_evaluator`, `val/wps`, `test/acc1`), as the line
    follows the training record of the same step and, under the training name, replaced
    its value (fairseq's `valid | ... | wps 88225 | wpb 21176.3 | num_updates 40200` put
    the validation's throughput and batch size in the training series of update 40200).
    Its losses already carry the split (`val loss`, `test loss`); a name that says its
    split (`valid_loss`, `train loss`), the epoch it ran in, and a name of a section of the
    line (`[valid] loss`) keep theirs. A line that names its evaluation's counter
    (PaddlePaddle v2's `Test with Pass 0, Cost 2.01, {...}`, PaddleNLP's `valid step 2000,
    ...`) or step (`after step 4`) prefixes every name that does not start with its split."""
    prefix = split if counted else _SECTION_SPLIT.get(split, split)
    tpl.names = {
        i: k if _keeps_name(k, split, sections[i], counted) else f"{prefix}/{k}"
        for i, k in tpl.names.items()
    }


_EVAL_DICT_KEY = re.compile(r"(?i)(?:eval|val|valid|test)_")


def _evaluation_dict(tpl: Template, lits: list[str]) -> None:
    """The Hugging Face Trainer prints an evaluation as a dict of its own after the training
    step's, its first key the split's loss (`{'eval_loss': 0.81, 'eval_runtime': 9.58, ...`).
    TRL's GRPO trainer puts its evaluation's generation statistics in that dict without the
    prefix (`'num_tokens': 1001646.0, 'completions/mean_length': 40.1`, unsloth#3485): under
    their own names they replaced the training record's values of the step. A key of such a
    dict that does not name the split takes the first key's prefix
    (`eval_completions/mean_length`). Its epoch is not stored: the dict prints no step and
    is attached to the training record before it, whose epoch it replaced (TRL's DPO,
    trl#570: the evaluation's `'epoch': 0.2` over the training step's 0.16)."""
    if not tpl.names or not lits[0].lstrip().startswith("{"):
        return
    first = tpl.names[min(tpl.names)]
    head = _EVAL_DICT_KEY.match(first)
    if head is None:
        return
    tpl.names = {
        i: k if _names_split(k) else head.group(0) + k
        for i, k in tpl.names.items()
        if alias_table().canonical(k) != "epoch"
    }


def _keeps_name(key: str, split: str, section: str, counted: bool) -> bool:
    """A name on an evaluation line that is no training metric's (see _evaluation_names)."""
    if key.lower().startswith(split) or key.strip().lower() == "rank":
        return True  # (the rank that printed the line: no value, see _per_rank)
    if counted:
        return False
    return bool(section) or _names_split(key) or alias_table().canonical(key) == "epoch"


def _summary_split(lits: list[str]) -> str:
    """`test` for DeiT's closing `* Acc@1 88.381 Acc@5 96.779 loss 0.445` (see
    _EVAL_SUMMARY): its loss is the test set's, which replaced the training loss of the
    step before it."""
    return "test" if _EVAL_SUMMARY.match(lits[0]) else ""


def _keras_wall_time(key: str, lits: list[str], i: int) -> bool:
    """The first number after Keras' bar (`423/423 [=====] - 192s 454ms/step - loss: ...`,
    Keras 3's `100/100 ━━━━━━━━━━ 3s 30ms/step`, Keras 1's `- 1s - loss:`) or right after
    its counter with `verbose=2` (`1875/1875 - 3s - loss: ...`) is the epoch's wall time so
    far, named by nothing but its glued `s`: no metric `s` at the epoch's last step (the
    per-step time beside it keeps its `ms/step`)."""
    if key != "s" or lits[i + 1][:1] != "s":
        return False
    after_count = lits[i].strip() == "-" and i >= 2 and lits[i - 1].strip() == "/"
    return after_count or _KERAS_BAR_END.search(lits[i]) is not None


def _after_glued_index(lits: list[str], i: int, skip: set[int]) -> bool:
    """Slot i follows a number glued to an `@` (`Acc@1 88.381`, `Acc@5 96.779 loss 0.445`):
    it is that metric's value, not one named by the word after it (which named DeiT's
    top-5 accuracy `loss`, replacing the evaluation's loss on the same line)."""
    return i > 0 and (i - 1) in skip and lits[i - 1].endswith("@")


def _evaluation(keys: list[str]) -> bool:
    """A step-less line of an evaluation's few results (OpenNMT's `Validation perplexity:
    9.1289`, llama-recipes' ` eval_ppl=tensor(nan, ...) eval_epoch_loss=tensor(nan, ...)`):
    every key names the evaluation and one a result (not Lightning's `Validation sanity
    check: 0it`), so it belongs to the training step before it. Composer's indented
    `Eval metrics/eval/LanguageCrossEntropy: 2.1` under its `[Eval batch=10/10] Eval on eval
    data:` line names a cross-entropy (left out, it was dropped as a record's wrapped tail)."""
    result = any(re.search(r"(?i)loss|ppl|perplexity|acc|cross.?entropy", k) for k in keys)
    return 0 < len(keys) <= 3 and result and all(_eval_key(k) for k in keys)


def _evaluation_loop(tpl: Template, split: str, sections: list[str]) -> None:
    """mmengine's `Epoch(val) [1][ 50/1000]` counts the evaluation loop's iterations, not
    training steps: its progress lines give no step (and their loop timings are no training
    metric), and the closing `Epoch(val) [1][1000/1000] coco/bbox_mAP: ...` belongs to the
    training step before it, as a continuation, its results under the loop's split
    (`val/coco/bbox_mAP`; mmcv 1.x's `Epoch(val) [6][500]  bbox_mAP: 0.35, loss: 1.9`:
    `val/bbox_mAP`, `val/loss`), as the loop's `(val)` is no word the line's split is read
    from. (Under their own names, mmcv's were taken for the epoch's training summary:
    `epoch/loss` was the evaluation's loss.)"""
    tpl.step_slot = tpl.epoch_slot = tpl.total_slot = None
    tpl.keyed = tpl.bar = tpl.per_epoch = False
    tpl.names = {
        i: k
        for i, k in tpl.names.items()
        if k.lower() not in _LOOP_STATS and not _EVAL_LOOP.search(k)  # nor its epoch counter
    }
    tpl.cont = True  # even with no metric left: the val lines between keep the summary attached
    _evaluation_names(tpl, split, sections)


def _opens_with_progress(tpl: Template, lits: list[str]) -> bool:
    """The line opens with its progress counter `N/M` (mmcv's `Iter [16881/87900]`,
    `Epoch [1][1/30895]`: nothing but the epoch before it). A config dump never does: such a
    record stays one however many fields follow (SparseDrive's mmdet lines print 40+ loss
    terms, and were dropped as a config dump, NaN and all)."""
    step = tpl.step_slot
    if step is None or step + 1 >= len(lits) - 1 or lits[step + 1].strip() != "/":
        return False
    return all(j == tpl.epoch_slot for j in range(step))


def _evaluation_after_step(tpl: Template, lowered: list[str], skip: set[int]) -> str:
    """The split of a line that names an evaluation and the training step it ran after
    (MaxText's `eval metrics after step: 4, loss=9.855, total_weights=75264.0`), its step
    slot set. Read as a step-less line, its loss replaced the training loss of step 4 (a
    NaN of the training line lost under the evaluation's value)."""
    for i, key in enumerate(lowered):
        hit = _AFTER_STEP.search(key)
        tf_dict = _EVAL_DICT_STEP.search(key) is not None
        if (hit or tf_dict) and i not in skip:
            tpl.step_slot, tpl.keyed = i, True
            # TensorFlow prints the step again (`global_step = 1000`): no metric
            skip.update(j for j, k in enumerate(lowered) if k in _STEP_KEYS and j != i)
            return _SECTION_SPLIT[hit.group(1)] if hit else "eval"
    return ""


def _step_key(tpl: Template, lowered: list[str], lits: list[str], skip: set[int]) -> None:
    """The slot a key names as the step: `step N`, `num_updates=N`, `completed step: N`,
    `[batch=N/M]` (Composer: a batch counter with its total)."""
    n = len(lowered)
    for key in _STEP_KEYS:
        hits = [i for i in range(n) if lowered[i] == key and i not in skip]
        if hits:
            tpl.step_slot, tpl.keyed = hits[0], True
            return
    for i in range(n - 1):  # ms-swift `'global_step/max_steps': '105/250250'`
        if i not in skip and lits[i + 1] == "/" and _counted(lowered[i]) in _STEP_KEYS:
            tpl.step_slot, tpl.keyed = i, True
            return
    phrases = []
    for i in range(n):
        words = lowered[i].split()
        phrase = 1 < len(words) <= 3 and words[-1] in _PHRASE_STEP
        if i not in skip and phrase and not _NOT_COUNTER & set(words):
            phrases.append(i)
    if phrases:  # `inner iter: 3/ 8 | ... | global iter: 27/ 5000`: the global count wins
        glob = [i for i in phrases if lowered[i].startswith("global ")]
        tpl.step_slot, tpl.keyed = (glob or phrases)[0], True
        return
    for i in range(n):  # fairseq-lua `| epoch 000 | 0001000 updates |`: the key after
        after = lits[i + 1].strip(" |").lower()
        if not lowered[i] and i not in skip and after.split(" ")[0] in _COUNT_AFTER:
            tpl.step_slot, tpl.keyed = i, True
            return
    counted = _counter_of_steps(lowered, lits, skip)
    if counted is not None:
        tpl.step_slot, tpl.keyed = counted, True
        return
    for i in range(1, n):  # PaddlePaddle v2 `Pass 0, Batch 100, Cost 2.24`: batch in pass
        if lowered[i] == "batch" and lowered[i - 1] == "pass" and not {i - 1, i} & skip:
            tpl.step_slot, tpl.keyed = i, True
            return
    for i in range(n):  # MXNet's Speedometer `Epoch[0] Batch [1000]`: the batch in the epoch
        bracketed = lits[i].rstrip().endswith("[") and lits[i + 1].startswith("]")
        if lowered[i] == "batch" and bracketed and i not in skip:
            tpl.step_slot, tpl.keyed = i, True
            return
    for i in range(n - 1):
        if lowered[i] == "batch" and lits[i + 1] == "/" and i not in skip:
            tpl.step_slot, tpl.keyed = i, True
            epochs = [j for j in range(i) if lowered[j] == "epoch" and j not in skip]
            if epochs:  # `[epoch=2][batch=5/100]`: the batch counts within the epoch
                tpl.epoch_slot, tpl.total_slot = epochs[-1], i + 1
                skip.add(epochs[-1])
            return


def _counter_of_steps(lowered: list[str], lits: list[str], skip: set[int]) -> int | None:
    """The slot of an unnamed `N/M steps` counter, the word after its total naming what it
    counts (UER-py's `|    15000/  300000 steps| 45762.33 tokens/s| loss    3.85|`). Left
    alone, the log had no step: its records were numbered 1, 2, ... in file order."""
    for i in range(len(lowered) - 1):
        if lowered[i] or i in skip or lits[i + 1].strip() != "/":
            continue
        if re.split(r"[\s|,;:]+", lits[i + 2].strip(" |").lower())[0] in _COUNT_AFTER:
            return i
    return None


def _counted(key: str) -> str:
    """The counter a `counter/total` key names (`global_step/max_steps` -> `global_step`), the
    key itself otherwise: the value of such a key is printed `N/M`."""
    head, sep, _ = key.partition("/")
    return head if sep else key


def _glued_epoch(tpl: Template, lits: list[str], lowered: list[str], skip: set[int]) -> None:
    """ESPnet2 glues its counts to what they count. `1epoch:train:3376-3750batch:` is epoch 1
    and the window of batches 3376-3750 of that epoch (printed `3376` and `-3750`): the step
    is the window's end, counted over the epochs (`_restart_offsets`). `2/20epoch started`
    counts epochs only: no step, so the line is no record. `1epoch results:` (no batch
    window) summarises the epoch: `_glued_summary` finds its step."""
    for i in range(len(lits) - 1):
        if i in skip or not _GLUED_EPOCH.match(lits[i + 1]) or lits[i][-1:].isalnum():
            continue
        if lits[i].rstrip().endswith("/"):  # `2/20epoch`: an epoch of so many, no step
            skip.update({i - 1, i})
            return
        tpl.glued, tpl.epoch_slot, tpl.keyed = True, i, True
        skip.add(i)
        lowered[i] = "epoch"
        for j in range(i + 1, len(lits) - 1):
            if _GLUED_COUNT.match(lits[j + 1]):
                tpl.step_slot = j
                if j - 1 > i and lits[j] == "":  # `3376-3750batch`: the window's end
                    tpl.window = True
                    skip.add(j - 1)
                    skip.discard(j)  # (glued to its start, which is not a value either)
                return
        return


def _glued_summary(tpl: Template, lowered: list[str], sections: list[str]) -> None:
    """ESPnet2's `1epoch results: [train] ... total_count=7507, [valid] loss=2.387, ...`:
    the first `total_count` counts the training iterations of the whole run up to the end of
    the epoch, the step of the line; its other counts are no metrics. The training section's
    values are epoch averages (`epoch/<name>`), the others keep their section (`val/loss`)."""
    if tpl.step_slot is not None:
        return
    counts = [i for i in sorted(tpl.names) if lowered[i] == "total_count"]
    if not counts:
        tpl.glued, tpl.epoch_slot, tpl.keyed = False, None, False
        return
    tpl.step_slot = counts[0]
    tpl.names = {
        i: f"epoch/{k}" if sections[i] in ("", "train") else k
        for i, k in tpl.names.items()
        if i not in counts
    }


def _sections(lits: list[str]) -> list[str]:
    """The section of the line each slot stands in (`[train] loss=... [valid] loss=...`),
    '' for all when the line has fewer than two sections."""
    out, current, opened = [], "", 0
    for lit in lits[:-1]:
        tags = _SECTION.findall(lit)
        if tags:
            current, opened = tags[-1].lower(), opened + len(tags)
        out.append(current)
    return out if opened >= 2 else [""] * len(out)


def _in_section(key: str, section: str) -> str:
    """A name in a section of the line: an evaluation split's (`[valid] loss` -> `val/loss`),
    another's (`[att_plot] time` -> `att_plot/time`); the training section's as printed."""
    if not section or section == "train":
        return key
    return f"{_SECTION_SPLIT.get(section, section)}/{key}"


def _in_quoted_text(lits: list[str], i: int) -> bool:
    """Slot i lies in a quoted string of a printed dict that holds more than the number or an
    `N/M` counter (ms-swift's `'remaining_time': '472d 8h 9m 53s'`, `'percentage': '0.04%'`):
    text, not a value. `'loss': '1.02'` (a number printed as a string) stays a value."""
    before = SLOT.join(lits[: i + 1])
    start = before.rfind("{")
    if start < 0:
        return _in_wrapped_dict_text(lits, i)
    opened = before[start:]
    quote = next((q for q in "'\"" if opened.count(q) % 2), None)
    if quote is None:
        return False
    after = SLOT.join(lits[i + 1 :])
    content = opened[opened.rfind(quote) + 1 :] + SLOT + after[: max(after.find(quote), 0)]
    return re.fullmatch("\x00(?:/\x00)?", content) is None


_DICT_ITEM = re.compile(r"""['"][\w/ .()%-]+['"]:\s""")  # `'elapsed_time': `: a dict's item
_ITEM_VALUE = re.compile(r"""['"]:\s*""")  # an item's `': ` (the value follows it)
_BARE_TEXT = re.compile("\\s*\x00(?:/\x00)?")  # a number or `N/M` printed as a string
_CLOSING_QUOTE = re.compile(r"""['"]\s*[,}]""")  # a string's end before the next item


def _in_wrapped_dict_text(lits: list[str], i: int) -> bool:
    """Slot i lies in a quoted string of a printed dict whose line lacks its `{`: a long
    dict wrapped by the terminal or the paste (ms-swift's `..., 'elapsed_time': '1h 22m
    38s', 'remaining_time': '2h 57m 4s'}` on a line of its own). Without the brace to count
    quotes from, the times became metrics `elapsed_time (h)`, `m` and `s`. The slot is in
    text when the value of the last item opened before it is quoted, or, with no item
    before it, when the line starts inside a string (`22m 38s', 'remaining_time': ...`)."""
    if not _DICT_ITEM.search(SLOT.join(lits)):
        return False
    before = SLOT.join(lits[: i + 1])
    after = SLOT.join(lits[i + 1 :])
    items = list(_ITEM_VALUE.finditer(before))
    if items:
        value = before[items[-1].end() :]
        if not value or value[0] not in "'\"":
            return False
        end = after.find(value[0])
        content = value[1:] + SLOT + (after[:end] if end >= 0 else after)
        return _BARE_TEXT.fullmatch(content) is None
    closing = _CLOSING_QUOTE.search(after)
    if closing is None or re.search(r"""['"]""", after[: closing.start()]):
        return False  # no closing quote follows before another string opens
    return _BARE_TEXT.fullmatch(before + SLOT + after[: closing.start()]) is None


def _progress_bar(lits: list[str], skip: set[int]) -> tuple[int, int] | None:
    """A tqdm bar `desc: 12%|BAR| n/N [elapsed<left, rate, postfix]`: (percent slot, counter
    slot). The percentage is not a metric; the counter may be the step (`_bar_step`)."""
    for i in range(len(lits) - 3):
        # `12%|██▏ | 4/18 [...]`, or without the glyphs as rich / notebooks print it
        # (`0% 431/788222 [29:28<796:09:33, ...]`, ColossalAI)
        drawn = lits[i + 1].startswith("%|") or (
            lits[i + 1] == "% " and lits[i + 3].startswith(" [")
        )
        if drawn and lits[i + 2].strip() == "/":
            skip.add(i)
            return i, i + 1
    return None


def _evaluation_bar(lowered: list[str], bar: tuple[int, int], skip: set[int]) -> str:
    """The split of a bar whose description keys name it (`Valid Epoch: 16 Loss: nan: 100%|
    660/660`, DMRGCN#1, beside its `Train Epoch: 16 Loss: 0.36: 100%| 2785/2785`): the
    evaluation's bar, no record of its own. Its counter and epoch are no values; its loss is
    the split's, at the training step before it. (Read as a training bar, it counted to
    another total than the training bar's and was dropped, the validation's NaN lost.)"""
    pct, counter = bar
    for key in lowered[:pct]:
        words = re.findall(r"[a-z]+", key)
        split = next((w for w in words if w in _SPLITS and w != "train"), "")
        if split and len(words) > 1 and _epoch_key(" ".join(w for w in words if w != split)):
            skip.update({j for j in range(pct) if lowered[j] == key} | {counter})
            return _SECTION_SPLIT.get(split, split)
    return ""


def _bar_step(tpl: Template, lits: list[str], lowered: list[str], bar: tuple[int, int]) -> None:
    """A training-loop bar's counter is the step: Hugging Face Trainer's bare bar counts
    optimizer steps; Lightning's `Epoch E: ... n/N` counts batches within epoch E. Bars of
    other work (`Map:`, `Loading checkpoint shards:`, validation) are not records."""
    pct, counter = bar
    desc = " ".join(lits[: pct + 1]).lower()
    for key in lowered[:pct]:
        desc = desc.replace(key, " ") if key and key != "epoch" else desc
    words = set(re.findall(r"[a-z]+", desc))
    if not words <= _TRAIN_BAR_WORDS:
        return
    tpl.step_slot, tpl.keyed, tpl.bar = counter, True, True
    epochs = [j for j in range(pct) if _epoch_key(lowered[j])]
    if epochs:
        tpl.epoch_slot, tpl.total_slot = epochs[-1], counter + 1
    else:  # SpeechBrain's bare bar restarts after its `Going into epoch E` (_epoch_headers)
        tpl.per_epoch, tpl.total_slot = True, counter + 1


def _epoch_key(key: str) -> bool:
    """A key that names the epoch: `epoch`, or a phrase the aliases call the epoch (the
    PyTorch MNIST example's `Train Epoch: 3`, which open_clip and many bars print; OpenRLHF's
    `Train step of epoch 0`). Only `epoch` itself was taken for one: `Train Epoch` was a
    metric `train_epoch`, and the counter beside it was never counted over epochs."""
    return key == "epoch" or (bool(key) and alias_table().canonical(key) == "epoch")


def _epoch_counter(tpl: Template, lits: list[str], lowered: list[str], skip: set[int]) -> None:
    """`epoch 010  2000 / 8223 loss=...` (fairseq before 0.6): an epoch number right before
    a counter of the batches in that epoch."""
    for i in range(len(lowered) - 2):
        counter = lits[i + 2].strip() == "/" and not _WORD.search(lits[i + 1])
        if lowered[i] == "epoch" and counter and i not in skip:
            tpl.epoch_slot, tpl.step_slot, tpl.total_slot = i, i + 1, i + 2
            tpl.keyed = tpl.in_epoch = True
            skip.add(i)
            return


def _is_loss(key: str) -> bool:
    """A key that names a loss itself (`val loss`, `valid_loss`, `train loss`), not a
    setting about one (`auxiliary_loss_multiplier` in a config dump)."""
    return alias_table().canonical(key) in _LOSSES or key.lower().strip() == "loss"


def _step_reward(keys: list[str]) -> bool:
    """A step-less line of a few values, one a reward: DeepSpeed-Chat's PPO step prints
    `average reward score: -7.8` on a line of its own under the step's `epoch: 0|step:
    3183|ppo_ep: 1|act_loss: ...` (DeepSpeedExamples#444). It is that step's, as a loss
    line's continuation is; read as a record of its own it had no step and was ignored, and
    the reward's fall, which an RLHF post-mortem looks for first, was lost."""
    return 0 < len(keys) <= 3 and any(_REWARD.search(k) for k in keys)


def _epoch_iteration(tpl: Template, lits: list[str], skip: set[int]) -> None:
    """mmengine / mmcv `Epoch [E][i/N]` or `Epoch(train) [E][i/N]`, the PyTorch examples'
    `Epoch: [E/M][ i/N]` (or `Epoch:[E/M](i/N)`, baby-llama2), MAE-style MetricLogger
    `Epoch: [E]  [  i/N]` (LLaMA-Adapter, BEiT), timm's `Train: E [ i/N (p%)]`, Swin's
    `Train: [E/M][i/N]`: the step is the iteration counted over epochs."""
    for i in range(1, len(lits) - 2):
        if lits[i + 1].strip() != "/":
            continue
        timm = _TRAIN_EPOCH.search(lits[i - 1]) is not None
        if lits[i].strip() == "[" and (timm or _epoch_key(_key_before(lits[i - 1]).lower())):
            # timm's `Train: 12 [  50/1251 (  4%)]`: epoch 12, its batch 50 of 1251; the
            # MNIST example's `Train Epoch: 0 [ 6464/109468 (3%)]` (open_clip): its samples
            tpl.epoch_slot, tpl.step_slot, tpl.total_slot = i - 1, i, i + 1
            tpl.epoch_from_zero = timm  # `for epoch in range(start_epoch, num_epochs)`
            skip.update({i - 1, i + 1})
            return
        if not _NEXT_BRACKET.search(lits[i]):
            continue
        j = i - 2 if i >= 2 and lits[i - 1].strip() == "/" else i - 1  # `[E/M]`: M epochs
        train = _TRAIN_EPOCH_BRACKET.search(lits[j]) is not None  # Swin `Train: [14/300][250/1251]`
        if lits[j].rstrip().endswith("[") and ("epoch" in lits[j].lower() or train):
            tpl.epoch_slot, tpl.step_slot, tpl.total_slot = j, i, i + 1
            tpl.epoch_from_zero = train  # Swin, like timm, counts `range(start_epoch, EPOCHS)`
            skip.update({j, i - 1, i + 1} if j == i - 2 else {j, i + 1})
            return


def _batch_in_epoch(tpl: Template) -> None:
    """A line with its own step and an epoch counts its batch within that epoch: the batch
    is a counter, no metric (Transformer-XL's `| epoch   1 step    48200 |  48200 batches |`,
    rnnt-speech-recognition's `Epoch: 0, Batch: 7, Global Step: 7, Loss: ...`)."""
    if tpl.step_slot is None or tpl.epoch_slot is not None:
        return
    keys = {i: k.strip().lower() for i, k in tpl.names.items()}
    if "epoch" in keys.values():
        for i, k in keys.items():
            if k in ("batch", "batches"):
                del tpl.names[i]


def _total_counter(tpl: Template, lowered: list[str]) -> None:
    """`Total iter: 10, epoch: 0, batch: 10, loss: [nan]` (PaddleSlim): a `total` counter is
    the step of a line that also reports a loss (alone, `Total steps = 1548` is a setting)."""
    for i in list(tpl.names):
        words = lowered[i].split()
        if len(words) == 2 and words[0] == "total" and words[1] in _STEP_WORDS:
            if any(_is_loss(k) for j, k in tpl.names.items() if j != i):
                del tpl.names[i]
                tpl.step_slot, tpl.keyed = i, True
            return


def _good_key(key: str) -> bool:
    """A metric name as logs print them: starts with a letter, a few words, no code."""
    if not _KEY.match(key) or len(key) > 60 or len(key.split()) > 6:
        return False
    if _SOURCE_FILE.search(key):
        return False
    return key.count("(") == key.count(")")


def _names_split(key: str) -> bool:
    """The key names its split already (Transformer-XL's `| Eval 12 at step 48000 | ...
    | valid loss 4.16`: `valid loss` on an eval line is the validation loss, not a metric
    `eval_valid_loss`)."""
    return any(w in _SPLITS for w in re.findall(r"[a-z]+", key.lower()))


def _split_loss(key: str) -> bool:
    """A loss (or its perplexity) that an evaluation line's split word makes the split's:
    `loss`, and the names that mean the training loss elsewhere (marian's `[valid]` line
    prints `cross-entropy`, as its training lines' `Cost` is the loss)."""
    lowered = key.lower()
    if "loss" in lowered or lowered in ("ppl", "perplexity"):
        return True
    return alias_table().canonical(key) == "loss"


def _split_of(lits: list[str], befores: list[str]) -> str:
    """`val`/`eval`/`test` when the template's literal text says it is an evaluation line
    (a word outside its keys, before its loss: `validation | loss 3.4`, fairseq's
    `epoch 001 | valid on 'valid' subset | loss 3.1`), so its loss never joins `loss`."""
    upto = next((i for i, b in enumerate(befores) if "loss" in b.lower()), 0)
    text = " ".join(lits[: upto + 1])
    for key in befores[: upto + 1]:
        # a split word that names a counter (timm's `Test: [  50/195]`) still says what
        # kind of line this is
        named = (
            key
            and _good_key(key)
            and key.strip().lower() not in _SPLITS
            and not _SPLIT_COUNTER.match(key.strip().lower())
        )
        text = text.replace(key, " ") if named else text
    words = re.findall(r"[A-Za-z]+", text.lower())
    cv = "cv" in re.findall(r"[a-z0-9]+", text.lower())  # WeNet's `CV Batch`, not `cv2`
    for w in words:
        if w in ("val", "valid", "validation") or (w == "cv" and cv):
            return "val"
        if w in ("eval", "evaluation", "test"):
            return w
    return ""


# Full-width punctuation a CJK input method types (`训练次数：100, Loss：1.98`): the ASCII
# separator and the blank that the full width holds
_FULL_WIDTH = {"\uff1a": ": ", "\uff0c": ", ", "\uff1b": "; "}


def _ascii_punctuation(text: pl.Expr) -> pl.Expr:
    """`text` with full-width colons, commas and semicolons as ASCII ones. A log printed
    from code written with a Chinese or Japanese input method separates its keys and values
    with `：` (xiaotudui/pytorch-tutorial#1: `训练次数：100, Loss：1.98`): no key ended
    there, so no value had a name and the file was no known format."""
    for wide, narrow in _FULL_WIDTH.items():
        text = text.str.replace_all(wide, narrow, literal=True)
    return text


def _prepared(lines: pl.DataFrame) -> pl.DataFrame:
    """line, text (prefix removed), tpl (numbers as slots, blank runs collapsed)."""
    body = (
        _ascii_punctuation(pl.col("text"))
        .str.replace_all(_ANSI, "")
        .str.replace_all(_BARE_SGR, "${1}")
        .str.replace_all(_NAMED_NUMBER, "${1}_${2}/${3}")
        .str.replace_all(_TOP_K_KEY, "${1}_${2}:${3}")
        .str.replace_all(_TOP_K_METER, "${1}${2}${3}")
        .str.replace_all(_GROUP_INDEX, "(${1}_${2})")
        .pipe(_clu_steps)
        .str.replace_all(_SPLIT_TAG, "\x01${1}\x01")
        .str.replace_all(_EPOCH_HEAD, "\x01${1}\x01[")
        .str.replace_all(_FIELDS_BRACKET, "\x02${1}\x03")
        .str.replace_all(_FIELD_BRACKET, "\x02${1}\x03")
        .str.replace(_PREFIX, "")
        .str.replace(_PROGRESS_DOTS, "")
        .str.replace_all(_MASKED_TAG, "[${1}]")
        .str.replace_all("\x02", "[", literal=True)
        .str.replace_all("\x03", "]", literal=True)
    )
    tpl = pl.col("body").str.replace_all(NUM, SLOT).str.replace_all(r"[ ]{2,}", "  ")
    # LION's `| E5 iter[ 14/ 15] |`: an epoch glued to its `E` would make one template per
    # epoch; the templates share a `E#` (the number stays out of the slots: NUM skips it)
    tpl = tpl.str.replace_all(r"(^|[\s|\[])E\d+(\s)", "${1}E#${2}")
    tpl = tpl.str.replace_all(_DUR_TAIL, "${1}~")
    if lines["text"].str.contains("%|", literal=True).any():
        tpl = tpl.str.replace_all(_BAR.pattern, "%|BAR|")  # one template for every bar fill
    return (
        lines.filter(pl.col("text").str.contains(r"\d|(?i:nan|inf)"))
        .filter(~pl.col("text").str.contains(_TASK_BAR))
        .with_columns(body.alias("body"))
        .with_columns(tpl.alias("tpl"))
    )


def _clu_steps(text: pl.Expr) -> pl.Expr:
    """CLU's `[N] k=v, ...` lines with their step written `[step=N]` (see _CLU_STEP); the
    line of an evaluation's collection with its keys named `eval/<key>`, as its `loss`,
    `accuracy`... would replace the training values of the same step."""
    evaluation = text.str.replace_all(_CLU_KEY, "${1}eval/${2}=${3}").str.replace(
        _CLU_COLLECTION, "${1}[step=${2}] "
    )
    training = text.str.replace(_CLU_STEP, "${1}[step=${2}] ${3}")
    return pl.when(text.str.contains(_CLU_EVAL)).then(evaluation).otherwise(training)


def templates(prepared: pl.DataFrame, notes: list[str]) -> dict[str, Template]:
    """Infer every template that may hold a record, most frequent first."""
    counts = (
        prepared.filter(pl.col("tpl").str.contains(SLOT, literal=True))
        .group_by("tpl")
        .len()
        .sort(["len", "tpl"], descending=[True, False])
    )
    if counts.height > _MAX_TEMPLATES:
        notes.append(
            f"{counts.height} distinct line templates; only the {_MAX_TEMPLATES} most frequent "
            "were examined"
        )
        counts = counts.head(_MAX_TEMPLATES)
    out = {}
    for text, count in counts.iter_rows():
        tpl = infer(text, count)
        if tpl.is_record or tpl.cont or any("loss" in k.lower() for k in tpl.names.values()):
            out[text] = tpl
    _before_updates(out, notes)
    return out


def _before_updates(found: dict[str, Template], notes: list[str]) -> None:
    """fairseq prints `epoch 001:   2 / 78 loss_scale=32, ...` without `num_updates` while
    its loss scaler skips the first batches: where records count global updates, a kind
    of record counting batches within the epoch belongs to the update before it."""
    if not any(t.global_count and t.is_record for t in found.values()):
        return
    for t in found.values():
        if t.in_epoch and not t.global_count and t.is_record:
            t.step_slot = t.epoch_slot = t.total_slot = None
            t.keyed = t.in_epoch = False
            t.cont = True
            notes.append(
                f"generic reader: {t.lines} lines like '{t.shown()[:80]}' print no update "
                "count: they belong to the update before them"
            )


def _number_in_order(found: dict[str, Template], notes: list[str]) -> bool:
    """A log with no step counter at all (Hugging Face Trainer's stdout prints
    `{'loss': 2.3, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.53}`): its
    training-loss lines become records numbered 1, 2, ... in file order, and lines with
    another loss (an eval dict) follow the record before them. Says so in a note."""
    table = alias_table()
    stepless = [t for t in found.values() if t.step_slot is None]
    ordinal = [t for t in stepless if any(table.canonical(k) == "loss" for k in t.names.values())]
    if not ordinal:  # TRL's PPOTrainer: `{..., 'loss/policy_avg': ..., 'loss/value_avg': ...}`
        ordinal = [t for t in stepless if _term_losses(t)]
    if not ordinal:
        return False
    ordinal = _one_print_per_record(ordinal, found, notes)
    chosen = {id(t) for t in ordinal}
    for t in found.values():
        t.ordinal = id(t) in chosen
        lossy = any("loss" in k.lower() for k in t.names.values())
        tail = bool(t.names) and _dict_tail(t.text, t.text.split(SLOT))
        t.cont = not t.ordinal and (lossy or tail)
    notes.append(
        "generic reader: the log prints no step counter; its "
        f"{sum(t.lines for t in ordinal)} training-loss records are numbered 1, 2, ... in "
        "file order (the step axis is the record's rank, not the optimizer step)"
    )
    return True


def _term_losses(t: Template) -> list[str]:
    """The training losses of a step-less record that has no plain `loss`: the losses of
    several models or terms (TRL's PPOTrainer prints `'loss/policy_avg'` and
    `'loss/value_avg'` in its dicts, with no step but `episode`, a count of samples). Not an
    evaluation's loss, nor a run or epoch summary's (whose records are no training steps)."""
    return [
        k
        for k in t.names.values()
        if "loss" in k.lower()
        and not _eval_key(k)
        and not k.startswith(("summary/", "epoch/"))
        and alias_table().canonical(k) not in _LOSSES
    ]


def _counts_before_values(
    prepared: pl.DataFrame, found: dict[str, Template], notes: list[str]
) -> None:
    """A loss printed after the iteration it belongs to, with nothing but a blank or a colon
    between (NVIDIA tacotron2 and its forks: `Train loss 15 47.531357 Grad Norm 11.61
    2.96s/it`, `Validation loss 6312:  0.149928`): in a kind of line without another step,
    the integer that rises from line to line is the step and the number after it the loss.
    Read as two values, the iteration was stored as the loss and the loss under the next
    field's name, and a log of validation lines alone held no record at all."""
    for t in found.values():
        if t.step_slot is not None or t.bar or t.glued:
            continue
        lits = t.text.split(SLOT)
        for i in range(len(lits) - 2):
            key = t.names.get(i, "")
            if "loss" not in key.lower() or not re.fullmatch(r"\s*:?\s+", lits[i + 1]):
                continue
            if not _rising_count(prepared, t.text, i, i + 1):
                continue
            t.names.pop(i)
            t.names[i + 1] = key
            t.step_slot, t.keyed = i, True
            notes.append(
                f"generic reader: {t.lines} lines like '{t.shown()[:80]}' print the iteration "
                "before its loss: the iteration is the step"
            )
            break


def _leading_epoch_batch(
    prepared: pl.DataFrame, found: dict[str, Template], notes: list[str]
) -> None:
    """Two bare integers opening a record (Learning-to-See-in-the-Dark prints `print("%d %d
    Loss=%.3f Time=%.3f" % (epoch, cnt, ...))`: `333 154 Loss=nan Time=0.040`): when the
    first repeats from line to line while the second rises under it, the first is the
    epoch and the second the batch within it, the step (counted over epochs where it starts
    again, `counted_over_epochs`). Read as the step, the epoch put every line of an epoch
    on one step, all but its last line lost."""
    for t in found.values():
        lits = t.text.split(SLOT)
        if t.step_slot != 0 or t.keyed or len(lits) < 4 or 1 in t.names:
            continue
        if lits[0].strip() or not re.fullmatch(r"[ \t]+", lits[1]):
            continue
        pair = _slot_ints(prepared, t.text, {"e": 0, "b": 1})
        if pair is None or not _batch_under_epoch(pair, strictly=True):
            continue
        t.step_slot, t.names = 1, {0: "epoch", **t.names}
        notes.append(
            f"generic reader: {t.lines} lines like '{t.shown()[:80]}' open with the epoch and "
            "the batch within it: the batch is the step"
        )


def _epoch_of_counter(prepared: pl.DataFrame, found: dict[str, Template], notes: list[str]) -> None:
    """YOLOX prints `epoch: 7/300, iter: 10/102`, MindOCR `epoch: [12/20] step: [700/4468]`:
    the epoch of M and a counter of N. Counted over the run, the counter would stand near
    (E - 1) * N / M at epoch E, rise by at most N / M steps within an epoch and rise with
    every new epoch; a counter below that, rising faster, or not rising into a new epoch
    counts the epoch's iterations, and the step is counted
    over epochs ((E - first epoch) * N + i, as mmcv's `Epoch [E][i/N]`). Before, every
    epoch's iterations fell on the same steps."""
    for t in found.values():
        if t.step_slot is None or t.epoch_slot is not None or t.bar or not t.is_record:
            continue
        lits = t.text.split(SLOT)
        k = t.step_slot
        if k + 2 >= len(lits) or lits[k + 1].strip(" [") != "/" or k + 1 in t.names:
            continue
        epochs = [
            j
            for j, n in t.names.items()
            if j < k and n.strip().lower() == "epoch" and lits[j + 1].strip(" [") == "/"
        ]
        if len(epochs) != 1 or not _counts_within_epoch(prepared, t.text, epochs[0], k):
            continue
        t.epoch_slot, t.total_slot = epochs[0], k + 1
        del t.names[epochs[0]]
        notes.append(
            f"generic reader: {t.lines} lines like '{t.shown()[:80]}' count iterations within "
            "the epoch: the step is counted over epochs"
        )


def _counts_within_epoch(prepared: pl.DataFrame, text: str, e_slot: int, i_slot: int) -> bool:
    """The counter in `i_slot` of `text`'s lines (`i/N` after an epoch `E/M` in `e_slot`)
    cannot be a count over the run (see _epoch_of_counter)."""
    frame = _slot_ints(prepared, text, {"e": e_slot, "m": e_slot + 1, "i": i_slot, "n": i_slot + 1})
    if frame is None or (frame["i"] > frame["n"]).any() or (frame["m"] <= 0).any():
        return False
    per_epoch = frame["n"] / frame["m"]  # the steps of an epoch, were the counter the run's
    below = (frame["i"] < (frame["e"] - 1) * per_epoch).any()
    d_epoch, d_count = frame["e"].diff(), frame["i"].diff()
    faster = (d_count > per_epoch).filter(d_epoch == 0).any()
    restarts = (d_count <= 0).filter(d_epoch > 0).any()  # a count over the run only rises
    return bool(below or faster or restarts)


def _epoch_slash_batch(
    prepared: pl.DataFrame, found: dict[str, Template], notes: list[str]
) -> None:
    """WeNet prints `TRAIN Batch {epoch}/{batch_idx} loss ...`: a counter's `N/M` where M
    is no total (a total stays the same from line to line) but rises under an N that
    never falls. N is then the epoch and M the batch within it, the step (counted over
    epochs where it starts again, `counted_over_epochs`). Read as `batch N of M`, the epoch
    was a metric `train_batch` and the records were numbered in file order."""
    for t in found.values():
        if t.step_slot is not None or t.bar:
            continue
        lits = t.text.split(SLOT)
        for i in range(len(lits) - 2):
            words = t.names.get(i, "").lower().split()
            if not words or words[-1] not in _STEP_WORDS | {"batch"}:
                continue
            if lits[i + 1].strip() != "/" or i + 1 in t.names:
                continue
            if not _epoch_then_count(prepared, t.text, i):
                continue
            t.names[i], t.step_slot, t.keyed = "epoch", i + 1, True
            notes.append(
                f"generic reader: {t.lines} lines like '{t.shown()[:80]}' print `epoch/batch`: "
                "the batch within the epoch is the step"
            )
            break


def _epoch_then_count(prepared: pl.DataFrame, text: str, slot: int) -> bool:
    """The lines of template `text` print in `slot` an integer that never falls and repeats,
    and after it one that changes, never falling while the first stays (see
    _epoch_slash_batch)."""
    pair = _slot_ints(prepared, text, {"e": slot, "b": slot + 1})
    if pair is None or pair["b"].n_unique() < 2:
        return False
    return _batch_under_epoch(pair, strictly=False)


def _slot_ints(prepared: pl.DataFrame, text: str, slots: dict[str, int]) -> pl.DataFrame | None:
    """The integers the lines of template `text` print in `slots` (a column per name), or
    None when a line has none there or there are fewer than two lines to compare."""
    nums = prepared.filter(pl.col("tpl") == text)["body"].str.extract_all(NUM)
    frame = pl.DataFrame(
        {
            name: nums.list.get(slot, null_on_oob=True).cast(pl.Int64, strict=False)
            for name, slot in slots.items()
        }
    )
    if frame.null_count().sum_horizontal().item() or frame.height < 2:
        return None
    return frame


def _batch_under_epoch(pair: pl.DataFrame, strictly: bool) -> bool:
    """Column `e` never falls and repeats from line to line, and `b` rises (`strictly`) or
    at least never falls while `e` stays: an epoch and the batch within it."""
    d_epoch, d_batch = pair["e"].diff().drop_nulls(), pair["b"].diff().drop_nulls()
    same = d_epoch == 0
    under = d_batch.filter(same)
    rising = (under > 0).all() if strictly else (under >= 0).all()
    return bool(not (d_epoch < 0).any() and same.any() and rising)


def _step_value_pairs(prepared: pl.DataFrame, found: dict[str, Template], notes: list[str]) -> bool:
    """A log whose records are bare `<counter> <value>` lines (yanmtt prints `print(ctr,
    lv)` every 10 batches: `76970 2.6265104`, then `76980 nan`): the counter is the step
    and the number the training loss. Two numbers on a line say nothing by themselves, so
    only where no other kind of line is a record, such lines are at least half of the
    lines with numbers, the counter rises on every line and the value is not always an
    integer (a loss, not a table of counts). Before, such a log was no known format."""
    numeric = prepared.filter(pl.col("tpl").str.contains(SLOT, literal=True))
    pairs = numeric.filter(pl.col("tpl").str.contains(_PAIR_LINE))
    if pairs.height < 2 or pairs.height * 2 < numeric.height or pairs["tpl"].n_unique() > 1:
        return False
    text = str(pairs["tpl"][0])
    if not _rising_count(prepared, text, 0, 1):
        return False
    found[text] = Template(text, pairs.height, step_slot=0, names={1: "loss"})
    notes.append(
        f"generic reader: {pairs.height} lines print only a rising counter and a number "
        "(yanmtt's `print(ctr, lv)`): the counter is the step, the number the training loss"
    )
    return True


def _rising_count(prepared: pl.DataFrame, text: str, slot: int, value: int) -> bool:
    """The lines of template `text` print an integer in `slot` that rises from line to line,
    and in `value` a number that is not always an integer (a loss, not another count)."""
    nums = prepared.filter(pl.col("tpl") == text)["body"].str.extract_all(NUM)
    counts = nums.list.get(slot, null_on_oob=True)
    values = nums.list.get(value, null_on_oob=True)
    if counts.null_count() or values.null_count():
        return False
    if not counts.str.contains(r"^\d+$").all() or values.str.contains(r"^[-+]?\d+$").all():
        return False
    return bool((counts.cast(pl.Int64).diff().drop_nulls() > 0).all())


def _epochs_as_steps(prepared: pl.DataFrame, found: dict[str, Template], notes: list[str]) -> None:
    """Records numbered in file order that count whole epochs (`epoch: 3451 loss: nan`, one
    line per epoch) take the epoch as their step when it is an integer that rises from
    record to record: by one, or by the epochs between two prints (cellpose logs `Epoch 5`,
    then every 10th: `Epoch 190, Time 43354.3s, Loss 0.6758, ...`). A fractional epoch,
    as the Hugging Face Trainer prints, stays a metric."""
    for t in [t for t in found.values() if t.ordinal]:
        slots = [i for i, k in t.names.items() if k.strip().lower() == "epoch"]
        if len(slots) != 1:
            continue
        raw = prepared.filter(pl.col("tpl") == t.text).select(
            pl.col("body").str.extract_all(NUM).list.get(slots[0], null_on_oob=True)
        )
        epochs = raw.to_series().cast(pl.Int64, strict=False)
        if epochs.null_count() or len(epochs) < 2 or not (epochs.diff().drop_nulls() > 0).all():
            continue
        del t.names[slots[0]]
        t.step_slot, t.keyed, t.ordinal = slots[0], True, False
        notes.append(
            f"generic reader: the {t.lines} records like '{t.shown()[:80]}' count whole "
            "epochs: the epoch is their step"
        )
    if not any(t.ordinal for t in found.values()):  # the file-order note no longer holds
        notes[:] = [n for n in notes if "in file order" not in n]


def _one_print_per_record(
    ordinal: list[Template], found: dict[str, Template], notes: list[str]
) -> list[Template]:
    """Two kinds of step-less loss lines, as many of each, print the same records twice
    (LLaMA-Factory's callback logs `{'loss': 0.0000, 'learning_rate': 4.9999e-02, ...}`
    beside the Trainer's own `{'loss': 0.0, 'grad_norm': nan, ...}` for every step): the
    kind with the most fields is numbered; the other's duplicate fields are not read."""
    if len(ordinal) < 2 or len({t.lines for t in ordinal}) > 1:
        return ordinal
    table = alias_table()
    keep = max(ordinal, key=lambda t: (len(t.names), t.text))
    kept = {table.canonical(k) for k in keep.names.values()}
    for t in ordinal:
        if t is keep:
            continue
        t.names = {i: k for i, k in t.names.items() if table.canonical(k) not in kept}
        notes.append(
            f"generic reader: {t.lines} lines like '{t.shown()[:80]}' repeat the records of "
            f"'{keep.shown()[:80]}' (as many, the same loss): read once"
        )
        if not t.names:
            found.pop(t.text, None)
    return [keep]


def _summaries(found: dict[str, Template], notes: list[str]) -> None:
    """A step-less line that reports a runtime is a summary of the whole run (Hugging Face
    Trainer's closing `{'train_runtime': ..., 'train_loss': 1.23, 'epoch': 3.0}`): its
    metrics keep a `summary/` prefix, so that a run-average loss never joins `loss`."""
    for t in found.values():
        keys = [k.lower() for k in t.names.values()]
        evaluation = any(re.search(r"\b(?:eval|val|valid|test)", k) for k in keys)
        # unsloth prints `train_runtime` in every step's dict beside that step's `loss`; the
        # closing summary names its loss `train_loss`
        per_step = "loss" in keys
        if (
            t.step_slot is None
            and any("runtime" in k for k in keys)
            and not evaluation
            and not per_step
        ):
            t.names = {i: f"summary/{k}" for i, k in t.names.items()}
            notes.append(f"generic reader: '{t.shown()[:100]}' is a run summary (summary/...)")


def _bar_running_loss(found: dict[str, Template], notes: list[str]) -> None:
    """Lightning 1.x's progress bar shows `loss=` as a running mean of the last 20 batches
    beside the step's own `train_loss_step=` (what `self.log(..., prog_bar=True)` puts
    there): the bar's `loss` is kept as `loss (bar running mean)`, so that `loss` is the
    per-step value, whose spike the running mean spreads over 20 steps at a fraction of
    its height."""
    table = alias_table()
    said = False
    for t in found.values():
        if not t.bar:
            continue
        plain = [i for i, k in t.names.items() if k.strip().lower() == "loss"]
        other = [k for k in t.names.values() if k.strip().lower() != "loss"
                 and table.canonical(k) == "loss"]  # fmt: skip
        if plain and other:
            t.names[plain[0]] = "loss (bar running mean)"
            if not said:
                notes.append(
                    f"generic reader: the progress bar's `loss=` is its running mean; the "
                    f"loss is read from `{other[0]}` (the step's own value)"
                )
                said = True


def _epoch_summaries(found: dict[str, Template], notes: list[str]) -> None:
    """Per-epoch summary lines beside per-iteration lines are kept apart as `epoch/<name>`:
    fairseq's `| epoch 027 | loss 6.3 | ... | num_updates 10198` after its `epoch 027:  450 /
    1891 loss=...` lines (when the most frequent kind of record giving the training loss
    counts its progress `i / N`, a kind with an `epoch` field, no such counter and at most a
    fifth as many lines), and, beside records with a step, a line without one that has an
    `epoch` field or says it averages (MAE-style `Averaged stats: lr: ... loss: 6.6 (6.59)`,
    nanoVLM's `Epoch 1 | Train Loss: 2.1 | Val Loss: 2.3`)."""
    trains = _training_loss_names(found)
    lossy = [
        t
        for t in found.values()
        if (t.is_record or t.cont or _averages(t)) and any(map(trains, t.names.values()))
    ]
    if len(lossy) < 2:
        return
    main = max(lossy, key=lambda t: (t.is_record, t.lines))
    counted = _COUNTER.search(main.text) is not None
    stepped = main.is_record and main.step_slot is not None
    for t in lossy:
        keys = {k.lower() for k in t.names.values()}
        rarer = t.lines * 5 <= main.lines or _repeats_fields(t, main)
        summary = counted and "epoch" in keys and rarer and not _COUNTER.search(t.text)
        if stepped and not t.is_record:
            summary = summary or "epoch" in keys or bool(_SUMMARY_WORDS & _literal_words(t))
        if summary:
            t.names = {i: _summary_name(k) for i, k in t.names.items()}
            _read_running_averages(t)
            t.cont = t.cont or not t.is_record  # the epoch's, at its last step
            notes.append(
                f"generic reader: {t.lines} lines like '{t.shown()[:100]}' summarise an epoch: "
                "stored as epoch/<name>, apart from the per-iteration values"
            )


def _epoch_averages(found: dict[str, Template], notes: list[str]) -> None:
    """PccAI closes an epoch with `Epoch: 1/1 --- time: 1067.1, lr: 0.000800, avg_bpp_loss:
    ..., avg_loss: 0.145311`: the epoch's averages (`avg_<name>`) of the values its batch
    records print (`loss: ...`). A step-less line with an `epoch` field whose `avg_<name>`
    values repeat a record's names, one the training loss, is an epoch summary: stored at
    the epoch's last step as `epoch/<name>`, its `lr` as `epoch/lr`. Left out: its `time`
    (PccAI's is the seconds since training began, not the epoch's) and its `epoch`, which
    at the epoch's last step would tell schedule_shifts that a new epoch begins there.
    Before, the line was ignored (no name the table knows as the loss), and the epoch's
    average loss was lost."""
    table = alias_table()
    printed = {k.lower() for t in found.values() if t.is_record for k in t.names.values()}
    for t in found.values():
        if t.step_slot is not None or t.is_record or t.cont:
            continue
        keys = {i: k.lower() for i, k in t.names.items()}
        avg = {i: k[4:] for i, k in keys.items() if k.startswith("avg_") and k[4:] in printed}
        trains = any(table.canonical(k) == "loss" for k in avg.values())
        if "epoch" not in keys.values() or not trains:
            continue
        t.names = {
            i: f"epoch/{t.names[i][4:]}" if i in avg else _summary_name(k)
            for i, k in t.names.items()
            if keys[i] not in ("time", "epoch")
        }
        t.cont = True  # the epoch's, at its last step
        notes.append(
            f"generic reader: {t.lines} lines like '{t.shown()[:100]}' summarise an epoch: "
            "its `avg_<name>` values stored as epoch/<name>, apart from the per-iteration values"
        )


def _training_loss_names(found: dict[str, Template]) -> Callable[[str], bool]:
    """What names a training loss among `found`: the table's `loss`, or, in a log where no
    name is (IMDLBenCo's `predict_loss`, each model its own), a name with `loss` in it that
    is no evaluation's (_term_losses). Without the second, such a log's epoch summary was
    never told from its iterations."""
    table = alias_table()
    if any(table.canonical(k) == "loss" for t in found.values() for k in t.names.values()):
        return lambda k: table.canonical(k) == "loss"
    return lambda k: _loss_named(k) and not _eval_key(k)


def _loss_named(name: str) -> bool:
    """A name that says loss and is no fp16 loss scale (DeepSpeed's `reducing to 2` beside
    a diffusers bar): the other losses a log with no `loss` may have."""
    return "loss" in name.lower() and alias_table().canonical(name) != "loss_scale"


def _averages(t: Template) -> bool:
    """A step-less line that says it averages (MAE's `Averaged stats: lr: ... loss: ...`)."""
    return t.step_slot is None and bool({"averaged", "average"} & _literal_words(t))


def _summary_name(key: str) -> str:
    """An epoch summary's training averages are `epoch/<name>`; its `epoch` counter and its
    validation results (SpeechBrain's `epoch: 2, lr: ... - train loss: 0.73 - valid loss:
    1.27`) keep their names: the validation ran once, at the epoch's end, and no
    per-iteration line gives it (as `epoch/valid_loss` it was no validation loss)."""
    return key if key.lower() == "epoch" or _eval_key(key) else f"epoch/{key}"


def _repeats_fields(t: Template, main: Template) -> bool:
    """A kind of line no more frequent than the per-iteration one that prints the same
    fields (fairseq's `| epoch 009 | loss 6.233 | nll_loss ... | wps ...` after two
    `epoch 009:  1000 / 2737 loss=6.220, nll_loss=..., wps=...` lines a 2737-batch epoch
    logs every 1000): the epoch's averages of those fields, however few lines an epoch
    prints before it (a fifth as many missed fairseq's `--log-interval` near the epoch's
    length, its average replacing the loss of the epoch's last update)."""
    if t is main or t.lines > main.lines:
        return False
    ours = {k.lower() for k in t.names.values()} - {"epoch"}
    theirs = {k.lower() for k in main.names.values()}
    return "loss" in ours and len(ours & theirs) * 4 >= len(ours) * 3


def _epoch_loss_lines(found: dict[str, Template], notes: list[str]) -> None:
    """A step-less line that names the training loss of the epoch (llama-recipes' `Epoch 4:
    train_perplexity=nan, train_epoch_loss=nan, epoch time 242.3s`) closes that epoch: its
    values are kept as `epoch/<name>` at the epoch's last step, apart from the per-step loss.
    (An evaluation's `eval_epoch_loss` is the validation loss, under its own alias.)"""
    for t in found.values():
        train = [k for k in t.names.values() if _EPOCH_LOSS.match(k) and not _eval_key(k)]
        if t.step_slot is not None or not t.cont or not train:
            continue
        t.names = {i: k if k.lower() == "epoch" else f"epoch/{k}" for i, k in t.names.items()}
        notes.append(
            f"generic reader: {t.lines} lines like '{t.shown()[:100]}' summarise an epoch: "
            "stored as epoch/<name> at the epoch's last step"
        )


def _checkpoint_lines(found: dict[str, Template], notes: list[str]) -> None:
    """fairseq-lua prints, at each checkpoint, `| checkpoint 001 | epoch 001 | 0002645 updates
    | trainloss 7.40 | train ppl 169.38`: the epoch's mean training loss at its last update,
    beside the `| epoch 001 | 0003645 updates | ... | trainloss 5.85 |` of every 1000. The
    checkpoint line's training values are kept as `epoch/<name>`, apart from the loss curve
    (its validation and test values keep their names)."""
    table = alias_table()

    def trains(t: Template) -> bool:
        return t.is_record and any(table.canonical(k) == "loss" for k in t.names.values())

    saved = [t for t in found.values() if trains(t) and "checkpoint" in t.names.values()]
    if not saved or not any(trains(t) and t not in saved for t in found.values()):
        return
    for t in saved:
        t.names = {
            i: f"epoch/{k}" if table.canonical(k) == "loss" or k.lower().startswith("train") else k
            for i, k in t.names.items()
        }
        notes.append(
            f"generic reader: {t.lines} lines like '{t.shown()[:100]}' report the epoch at a "
            "checkpoint: its training values are stored as epoch/<name>"
        )


def _eval_key(key: str) -> bool:
    return re.match(r"(?i)(?:eval|val|valid|validation)\b|(?:eval|val|valid)_", key) is not None


def _literal_words(t: Template) -> set[str]:
    """The words of a template outside its metric names (`Averaged stats: lr: <lr>` ->
    {averaged, stats})."""
    text = t.text
    for key in sorted(t.names.values(), key=len, reverse=True):
        text = text.replace(key, " ")
    return set(re.findall(r"[a-z]+", text.lower()))


def _attach_to_bars(found: dict[str, Template], notes: list[str]) -> None:
    """A training progress bar gives the step, and lines without a step printed under it
    belong to that step (Hugging Face Trainer writes its `{'loss': 1.66, ...}` dict right
    after the bar reached the optimizer step it logs)."""
    attached = [t for t in found.values() if t.step_slot is None and t.names]
    for t in attached:
        t.cont = True
    if attached:
        notes.append(
            f"generic reader: {sum(t.lines for t in attached)} lines without a step take the "
            "step of the progress bar printed before them"
        )


def _slot_table(found: dict[str, Template]) -> tuple[pl.DataFrame, pl.DataFrame]:
    steps = pl.DataFrame(
        {
            "tpl": list(found),
            "step_slot": [t.step_slot for t in found.values()],
            "epoch_slot": [t.epoch_slot for t in found.values()],
            "total_slot": [t.total_slot for t in found.values()],
            "epoch_from_zero": [t.epoch_from_zero for t in found.values()],
            "ordinal": [t.ordinal for t in found.values()],
            "cont": [t.cont and not t.is_record for t in found.values()],
            "per_epoch": [t.per_epoch for t in found.values()],
            "glued": [t.glued for t in found.values()],
            "window": [t.window for t in found.values()],
        },
        schema={
            "tpl": pl.Utf8,
            "step_slot": pl.Int64,
            "epoch_slot": pl.Int64,
            "total_slot": pl.Int64,
            "epoch_from_zero": pl.Boolean,
            "ordinal": pl.Boolean,
            "cont": pl.Boolean,
            "per_epoch": pl.Boolean,
            "glued": pl.Boolean,
            "window": pl.Boolean,
        },
    )
    rows = [(k, i, n) for k, t in found.items() for i, n in t.names.items()]
    names = pl.DataFrame(
        {
            "tpl": [r[0] for r in rows],
            "slot": [r[1] for r in rows],
            "raw_name": [r[2] for r in rows],
        },
        schema={"tpl": pl.Utf8, "slot": pl.Int64, "raw_name": pl.Utf8},
    )
    return steps, names


def extract(
    lines: pl.DataFrame,
    notes: list[str],
    *,
    with_time: bool = True,
    events: list[pl.DataFrame] | None = None,
    overflow_lines: list[int] | None = None,
    read_lines: list[int] | None = None,
) -> tuple[pl.DataFrame, dict[str, Template], int]:
    """Long rows (line, step, raw_name, value, wall_time) of every record line, the
    templates used, and how many non-blank lines were left unread; loss-scaler overflow
    lines are appended to `events` (step, kind, detail) when it is given, and their line
    numbers to `overflow_lines` (the one pass of the overflow regex over the log); the lines
    of validation passes read into one value per pass (one_per_pass: a row names one of
    them) to `read_lines`."""
    prepared = _prepared(lines)
    overflows = prepared.filter(pl.col("text").str.contains(_OVERFLOW))
    diverged = prepared.filter(pl.col("text").str.contains(_DIVERGED))
    said = pl.concat([overflows["line"], diverged["line"]])
    if overflow_lines is not None:
        overflow_lines.extend(said.to_list())
    if said.len():
        prepared = prepared.filter(~pl.col("line").is_in(said.implode()))
    rates = prepared.filter(pl.col("text").str.contains(STEP_RATE))
    if rates.height:  # TensorFlow's `global_step/sec: 2.12`: a rate, stored by step_rate_rows
        prepared = prepared.filter(~pl.col("line").is_in(rates["line"].implode()))
    found = templates(prepared, notes)
    _counts_before_values(prepared, found, notes)
    _leading_epoch_batch(prepared, found, notes)
    _epoch_slash_batch(prepared, found, notes)
    _epoch_of_counter(prepared, found, notes)
    empty = pl.DataFrame(
        schema={
            "line": pl.Int64,
            "step": pl.Int64,
            "raw_name": pl.Utf8,
            "value": pl.Float64,
            "wall_time": pl.Float64,
        }
    )
    _summaries(found, notes)
    _epoch_loss_lines(found, notes)
    _checkpoint_lines(found, notes)
    _epoch_summaries(found, notes)
    _epoch_averages(found, notes)
    _bar_running_loss(found, notes)
    if any(t.bar and t.is_record for t in found.values()):
        _attach_to_bars(found, notes)
    elif not any(t.is_record for t in found.values()):
        if not _step_value_pairs(prepared, found, notes) and not _number_in_order(found, notes):
            return empty, {}, 0
        _epochs_as_steps(prepared, found, notes)
    averages = {k: t for k, t in found.items() if t.step_slot is None}
    found = {k: t for k, t in found.items() if t.is_record or t.cont}
    _batch_counters(prepared, found)
    counted = [k for k, t in found.items() if t.per_epoch and t.is_record]
    summaries = {k: (t, n) for k, t in averages.items() if (n := summary_names(k, t.names))}
    passes = validation_passes(prepared, _EPOCH_START, counted, list(summaries))
    validating = passes.filter(~pl.col("summary"))["line"]
    _validation_summaries(summaries, passes, found)
    step_tbl, name_tbl = _slot_table(found)
    hit = prepared.join(step_tbl, on="tpl", how="inner", maintain_order="left").with_columns(
        pl.col("body").str.extract_all(NUM).alias("nums")
    )
    hit = _validation_batches(hit, validating, notes)
    hit = _steps(hit, _epoch_headers(prepared, found, notes), notes)
    hit = counted_over_epochs(hit, _printed_epochs(found), notes)
    if any(t.bar for t in found.values()):
        bars = [k for k, t in found.items() if t.bar]
        hit = _training_bar_only(hit, bars, notes)
        hit = without_validation_counts(hit, prepared, bars, notes)
    # records whose step slot is not an integer (a decimal where a step was): not records
    bad_step = hit.filter(~pl.col("cont") & pl.col("step").is_null())
    hit = hit.filter(pl.col("cont") | pl.col("step").is_not_null())
    evaluations = [k for k, t in found.items() if t.cont and _evaluation(list(t.names.values()))]
    hit = _attach_continuations(hit, lines, evaluations, validating)
    stamped = (
        with_time
        and hit.height
        and bool(hit.head(1000).select(parse_timestamp(pl.col("text")).is_not_null().any()).item())
    )  # most logs print no time: skip the regex over every line then
    wall = parse_timestamp(pl.col("text")) if stamped else pl.lit(None, pl.Float64)
    hit = hit.with_columns(wall.alias("wall_time"))
    rows = (
        hit.select("line", "tpl", "step", "nums", "wall_time")
        .join(name_tbl, on="tpl", how="inner")
        .with_columns(pl.col("nums").list.get(pl.col("slot"), null_on_oob=True).alias("raw"))
        .with_columns(pl.col("raw").cast(pl.Float64, strict=False).alias("value"))
    )
    rows = _validation_names(rows, validating)
    odd = rows.filter(pl.col("value").is_null())  # `2,097,152`, `85.8G`, `Infinity`: few rows
    if odd.height:
        odd = odd.with_columns(
            _memory_megabytes(parse_number(pl.col("raw").str.replace_all(",", ""))).alias("value")
        ).filter(pl.col("value").is_not_null())
        rows = pl.concat([rows.filter(pl.col("value").is_not_null()), odd])
    rows, averaged = one_per_pass(rows, passes)
    _averaged_note(averaged, notes)
    rows = _per_rank(_step_seconds(rows.sort(["line", "slot"]), notes), notes)
    rows = _bar_validation_once(rows, found, notes)
    used = set(rows["tpl"].unique().to_list())
    found = {k: t for k, t in found.items() if k in used}
    grouped = {t.names[i]: key for t in found.values() for i, key in t.groups.items()}
    rows = _skipped_steps(rows.select(empty.columns), hit, found, notes)
    out = scale_as_loss_scale(_skip_increments(group_totals(rows, grouped, notes), notes), notes)
    records = hit.filter(~pl.col("cont")).select("line", "step")
    out = step_rate_rows(rates, records, out, notes)
    if overflows.height:
        out = _overflow_rows(overflows, records, out, notes, events)
    if diverged.height and events is not None:
        events.append(_diverged_events(diverged, records, notes))
    if events is not None:
        errors = data_error_events(lines, records, notes)
        if errors.height:
            events.append(errors)
    nonblank = lines.filter(pl.col("text").str.strip_chars().str.len_bytes() > 0).height
    if read_lines is not None:
        read_lines.extend(passes["line"].to_list())
    ignored = nonblank - pl.concat([out["line"], said, passes["line"]]).n_unique()
    if bad_step.height:
        notes.append(f"{bad_step.height} lines whose step field is not an integer: ignored")
    return out, found, ignored


# Keras' per-step time, named by its unit (`454ms/step`, `265us/step`, `2s/step`): the
# unit is chosen per epoch by the time's size, so one run prints several. TF 2.0-2.1 count
# numpy input by samples (`133us/sample`), and `verbose=2` closes each epoch with its wall
# time and the step's (`- 3s/epoch - 30ms/step`); TF-slim logs `(2.34 sec/step)`. Each is stored
# in seconds under one name.
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e3, "us": 1e6}  # divisors to seconds
_PER_WHAT = {"step": "iter_time_s", "sample": "sample_time_s", "epoch": "epoch_time_s"}
_PER_UNIT = {
    f"{unit}/{what}": (divisor, name)
    for unit, divisor in _TIME_UNITS.items()
    for what, name in _PER_WHAT.items()
}


def _step_seconds(rows: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """`rows` with per-step (per-sample, per-epoch) times in seconds, as
    `iter_time_s` (`sample_time_s`, `epoch_time_s`): Keras prints each epoch's in the unit
    that suits its size, so a run whose first epoch took 12ms/step and the next 265us/step
    was stored as two metrics (`ms/step`, `us/step`), each with a gap where the other unit
    was printed, and neither known as the time per step."""
    named = rows.filter(pl.col("raw_name").is_in(list(_PER_UNIT)))
    if not named.height:
        return rows
    units = sorted(named["raw_name"].unique().to_list(), key=lambda u: (u.split("/")[1], u))
    stored = sorted({_PER_UNIT[u][1] for u in units})
    notes.append(
        f"generic reader: per-step time, or per sample or epoch ({', '.join(units)}) "
        "stored in seconds "
        f"as {', '.join(f'`{n}`' for n in stored)}"
    )
    scales = {u: d for u, (d, _) in _PER_UNIT.items()}
    names = {u: n for u, (_, n) in _PER_UNIT.items()}
    is_time = pl.col("raw_name").is_in(list(_PER_UNIT))
    scale = pl.col("raw_name").replace_strict(scales, default=1.0, return_dtype=pl.Float64)
    renamed = pl.col("raw_name").replace_strict(names, default=None, return_dtype=pl.Utf8)
    return rows.with_columns(
        pl.when(is_time).then(pl.col("value") / scale).otherwise("value").alias("value"),
        pl.when(is_time).then(renamed).otherwise("raw_name").alias("raw_name"),
    )


_MEGABYTES = r"^\d+M$"  # detectron2's `max_mem: 2996M`: whole megabytes, `M` their unit


def _memory_megabytes(parsed: pl.Expr) -> pl.Expr:
    """`parsed` (a captured value read with its magnitude suffix), but a memory field's
    whole number glued to an `M` as printed: detectron2 prints `max_mem: {:.0f}M`, the peak
    allocated memory in megabytes (max_memory_allocated / 1024 / 1024), which the suffix
    rule multiplied by 1e6 (2996M stored as 2.996e9). Kept in megabytes as printed, the
    unit mmcv's `memory: 3342` has too."""
    megabytes = pl.col("raw_name").str.to_lowercase().str.contains("mem") & pl.col(
        "raw"
    ).str.contains(_MEGABYTES)
    number = pl.col("raw").str.strip_suffix("M").cast(pl.Float64, strict=False)
    return pl.when(megabytes).then(number).otherwise(parsed)


def _bar_validation_once(
    rows: pl.DataFrame, found: dict[str, Template], notes: list[str]
) -> pl.DataFrame:
    """A training bar's evaluation values (Lightning's `val_loss=`) are stored once, where
    they change (see carried_once)."""
    bars = [k for k, t in found.items() if t.bar]
    carried = sorted({n for k in bars for n in found[k].names.values() if _eval_key(n)})
    return carried_once(rows, bars, carried, notes) if carried else rows


def _per_rank(rows: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """DeepSpeed-Chat's step-1 `Epoch: 0, Step: 1, Rank: 3, loss = 2.42` is printed by every
    rank, each its own loss: the lowest rank's values keep their names, another rank's are
    `<name>/rank<r>` (its epoch, the same for all, is not repeated), and the rank is no
    metric. (The ranks' lines replaced one another at a step, the last printed kept: a NaN
    of rank 3 lost under rank 1's value, and `rank` was a metric.)"""
    is_rank = pl.col("raw_name").str.to_lowercase() == "rank"
    ranks = rows.filter(is_rank).select("line", pl.col("value").alias("rank_of_line"))
    if ranks.height == 0:
        return rows
    first = int(ranks.select(pl.col("rank_of_line").min()).item())
    other = pl.col("rank_of_line").is_not_null() & (pl.col("rank_of_line") != first)
    table = alias_table()
    epochs = [n for n in rows["raw_name"].unique().to_list() if table.canonical(n) == "epoch"]
    named = pl.format("{}/rank{}", "raw_name", pl.col("rank_of_line").cast(pl.Int64))
    out = rows.filter(~is_rank).join(ranks, on="line", how="left", maintain_order="left")
    out = out.filter(~(other & pl.col("raw_name").is_in(epochs)))
    out = out.with_columns(pl.when(other).then(named).otherwise("raw_name").alias("raw_name"))
    n = ranks["rank_of_line"].n_unique()
    if n > 1:
        notes.append(
            f"generic reader: records printed by {n} ranks (`Rank: r`): rank {first}'s "
            "values keep their names, another rank's are stored as `<name>/rank<r>`"
        )
    return out.drop("rank_of_line")


def _skipped_steps(
    rows: pl.DataFrame, hit: pl.DataFrame, found: dict[str, Template], notes: list[str]
) -> pl.DataFrame:
    """A record that says its step was skipped (minFM's warning) adds `skipped_iters` = 1 at
    its step; the values it quotes (the norm that made the trainer skip) are kept where no
    other record gives that metric at that step (minFM's own record prints the window's
    largest norm at the same step)."""
    skips = [k for k, t in found.items() if t.is_record and _SKIPS.search(t.text)]
    if not skips:
        return rows
    said = hit.filter(pl.col("tpl").is_in(skips) & ~pl.col("cont"))
    table = alias_table()
    canon = {n: table.canonical(n) for n in rows["raw_name"].unique().to_list()}
    keyed = rows.with_columns(pl.col("raw_name").replace_strict(canon).alias("_c"))
    mine = pl.col("line").is_in(said["line"].implode())
    taken = keyed.filter(~mine).select("step", "_c").unique()
    kept = keyed.filter(mine).join(taken, on=["step", "_c"], how="anti")
    counts = said.select(
        "line",
        "step",
        pl.lit("skipped_iters").alias("raw_name"),
        pl.lit(1.0).alias("value"),
        pl.col("wall_time").cast(pl.Float64),
    )
    notes.append(
        f"generic reader: {said.height} lines say their step was skipped: skipped_iters = 1 "
        "at each; the values they quote are kept where no other record gives them"
    )
    return pl.concat([keyed.filter(~mine).drop("_c"), kept.drop("_c"), counts]).sort(
        "line", maintain_order=True
    )


def _skip_increments(rows: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """DeepSpeed's `[Rank 0] step=510, skipped=8, lr=[...]` and InternEvo's
    `inf_nan_skip_batches=3` count the steps skipped since the run began; `skipped_iters`
    counts those of the logging window (as Megatron prints them). The count becomes the
    increase since the line before (a drop, a restarted count, starts a new run of
    increases)."""
    is_skipped = pl.col("raw_name").str.to_lowercase().is_in(list(_SKIP_COUNTS))
    if not rows.filter(is_skipped).height:
        return rows
    inc = pl.col("value") - pl.col("value").shift(1).over("raw_name")
    counted = (
        rows.filter(is_skipped)
        .sort("line")
        .with_columns(
            pl.when(inc.is_null() | (inc < 0)).then(pl.col("value")).otherwise(inc).alias("value")
        )
    )
    counted = _before_the_log(counted, notes)
    notes.append(
        "generic reader: `skipped=` (DeepSpeed), `inf_nan_skip_batches=` (InternEvo) count "
        "skipped steps since the start: stored as "
        "the increase from one logged step to the next (skipped_iters of the window)"
    )
    return pl.concat([rows.filter(~is_skipped), counted]).sort("line", maintain_order=True)


def _before_the_log(counted: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """A log that starts well into the run (InternEvo's excerpt from step 642, whose first
    line already says `inf_nan_skip_batches=3`) holds, in its first count, skips made before
    its first line: they are no skips of that step and are not stored (the note says how
    many). "Well into": the first step is more than twice the gap to the next."""
    out = []
    for _, part in counted.group_by("raw_name", maintain_order=True):
        steps = part["step"].to_list()
        first = part["value"][0] if part.height else None
        if len(steps) > 1 and steps[0] > 2 * max(1, steps[1] - steps[0]) and first:
            notes.append(
                f"generic reader: the first `{part['raw_name'][0]}` ({first:g}, at step "
                f"{steps[0]}) counts skips made before the log begins: not stored as skips "
                "of that step"
            )
            part = part.slice(1)
        out.append(part)
    return pl.concat(out) if out else counted


def _overflow_rows(
    overflows: pl.DataFrame,
    records: pl.DataFrame,
    rows: pl.DataFrame,
    notes: list[str],
    events: list[pl.DataFrame] | None,
) -> pl.DataFrame:
    """Loss-scaler overflow lines (fairseq `overflow detected, setting loss scale to: 0.06`,
    DeepSpeed `OVERFLOW! ... Skipping step. Attempted loss scale: 8, reducing to 4`, apex
    `Gradient overflow.  Skipping step, ... reducing loss scale to 32768.0`): printed while
    a step runs, so they belong to the next record's step (the step after the last record
    when none follows). Each step gets `overflow` = how many, and `loss_scale` = the scale
    the last one set where no record prints the loss scale at that step; each line is an
    event."""
    if records.height == 0:
        return rows
    last = int(records["step"].max())  # type: ignore[arg-type]
    hit = (
        overflows.select(
            "line",
            pl.col("text").str.extract(_OVERFLOW_DETAIL, 1).alias("detail"),
            pl.col("text").str.extract(_NEW_SCALE, 1).cast(pl.Float64, strict=False).alias("scale"),
        )
        .join_asof(records.sort("line"), on="line", strategy="forward")
        .with_columns(pl.col("step").fill_null(last + 1))
    )
    if events is not None:
        events.append(hit.select("step", pl.lit("overflow").alias("kind"), "detail"))
    per_step = hit.group_by("step", maintain_order=True).agg(
        pl.col("line").last(), pl.len().cast(pl.Float64).alias("count"), pl.col("scale").last()
    )
    table = alias_table()
    scaled = {n for n in rows["raw_name"].unique().to_list() if table.canonical(n) == "loss_scale"}
    printed = rows.filter(pl.col("raw_name").is_in(list(scaled)))["step"].unique()
    none = pl.lit(None, pl.Float64).alias("wall_time")
    counts = per_step.select(
        "line", "step", pl.lit("overflow").alias("raw_name"), pl.col("count").alias("value"), none
    )
    scales = per_step.filter(
        pl.col("scale").is_not_null() & ~pl.col("step").is_in(printed.implode())
    ).select(
        "line", "step", pl.lit("loss_scale").alias("raw_name"), pl.col("scale").alias("value"), none
    )
    notes.append(
        f"generic reader: {hit.height} loss-scaler overflow lines, counted as `overflow` at "
        "the step of the record after them (events of kind 'overflow')"
    )
    return pl.concat([rows, counts, scales]).sort("line", maintain_order=True)


def _diverged_events(
    diverged: pl.DataFrame, records: pl.DataFrame, notes: list[str]
) -> pl.DataFrame:
    """`Model diverged with loss = NaN.` prints no step, and is often the only NaN a log
    shows (TensorFlow stops there): one event of kind 'nonfinite_loss' at the last step a
    record printed before it ("after step N" in its detail; no step when none did), or at
    the iteration the report prints (detectron2's `... NaN at iteration=2137!`). No
    NaN value is stored: the log prints none at any step. The copies of one report (glog's
    line, the exception's message) at the same step are one event. Keras' TerminateOnNaN
    (`Batch 3: Invalid loss, terminating training`) reports the batch that just ended, whose
    bar Keras draws after the report: that report belongs to the record after it."""
    said = (
        r"(?i)((?:batch \d+: )?\S*(?:model diverged|nan loss|loss became infinite|loss is"
        r"|invalid loss).*?)\s*$"
    )
    ahead = records.sort("line").rename({"step": "_next"})
    hit = (
        diverged.select(
            "line",
            pl.col("text").str.extract(said, 1),
            pl.col("text").str.extract(_DIVERGED_AT, 1).cast(pl.Int64, strict=False).alias("_at"),
            pl.col("text").str.contains(r"(?i)invalid loss, terminating").alias("_keras"),
        )
        .join_asof(records.sort("line"), on="line", strategy="backward")
        .join_asof(ahead, on="line", strategy="forward")
    )
    printed = pl.col("_at").is_not_null()
    before_bar = pl.col("_keras") & pl.col("_next").is_not_null()
    step = pl.coalesce("_at", pl.when(before_bar).then("_next").otherwise("step"))
    hit = hit.with_columns(step.alias("step"), printed.alias("_printed"), before_bar.alias("_bar"))
    hit = hit.unique(subset=["step"], keep="first", maintain_order=True)
    after = (
        pl.when(pl.col("_printed"))
        .then(pl.lit(""))
        .when(pl.col("_bar"))
        .then(pl.lit(" (the batch of step ") + pl.col("step").cast(pl.Utf8) + pl.lit(")"))
        .when(pl.col("step").is_null())
        .then(pl.lit(" (before any step the log prints)"))
        .otherwise(pl.lit(" (after step ") + pl.col("step").cast(pl.Utf8) + pl.lit(")"))
    )
    notes.append(
        f"generic reader: {hit.height} reports of a NaN loss ('model diverged with loss = "
        "NaN', 'Loss is nan, stopping training', ...): events of kind 'nonfinite_loss' at the "
        "iteration they print, else at the last step printed before them (Keras': at the "
        "step of the bar after them; no value stored)"
    )
    return hit.select(
        "step",
        pl.lit("nonfinite_loss").alias("kind"),
        (pl.col("text") + after).alias("detail"),
    )


def _printed_epochs(found: dict[str, Template]) -> dict[str, tuple[int, str]]:
    """Record templates with a step counter and, beside it, an epoch printed as a value
    (`Epoch: 2, Iter: 100, loss:`, llama-recipes' `Training Epoch: 1/4, step 10/64`):
    template -> the epoch's slot and name."""
    table = alias_table()
    out = {}
    for key, t in found.items():
        if not t.is_record or t.step_slot is None or t.epoch_slot is not None or t.ordinal:
            continue
        for i, n in t.names.items():
            if table.canonical(n) == "epoch" or re.split(r"[\s_]+", n.lower())[-1] == "epoch":
                out[key] = (i, n.lower())
                break
    return out


def _steps(hit: pl.DataFrame, headers: pl.DataFrame | None, notes: list[str]) -> pl.DataFrame:
    """The `step` of every record line: its step slot; with an epoch, the counter within the
    epoch added to the batches of the epochs before (`Epoch [E][i/N]`, `Epoch E: .. i/N`,
    `[epoch=E][batch=i/N]`, or `i/N` after an `Epoch E/M` line); in file order for logs
    without a counter. Epochs count from 0 when a 0 is printed or the kind of log always
    counts from 0 (timm), else from 1."""
    slot = pl.col("step_slot")
    num = pl.col("nums").list.get
    step = _integer(num(slot, null_on_oob=True))
    ordinal = pl.col("ordinal").cast(pl.Int64).cum_sum()
    if headers is None and hit["epoch_slot"].is_null().all():  # most logs: the step as printed
        return hit.with_columns(
            pl.when(pl.col("ordinal")).then(ordinal).otherwise(step).alias("step")
        )
    hit = hit.with_columns(
        step.alias("_step"),
        num(pl.col("epoch_slot"), null_on_oob=True).cast(pl.Int64, strict=False).alias("_epoch"),
        num(pl.col("total_slot"), null_on_oob=True).cast(pl.Int64, strict=False).alias("_total"),
    )
    if headers is not None:
        hit = hit.join_asof(headers, on="line", strategy="backward")
        hit = hit.with_columns(
            pl.when(pl.col("per_epoch") & pl.col("_header").is_not_null())
            .then(pl.col("_header"))
            .otherwise(pl.col("_epoch"))
            .alias("_epoch")
        ).drop("_header")
    epoch, total = pl.col("_epoch"), pl.col("_total")
    # one base for the file: a kind of line that first appears in a later epoch (Lightning's
    # bar grows `val_loss=` after the first validation) counts from the same epoch 0 or 1
    base = (
        pl.when(pl.col("epoch_from_zero").any())
        .then(pl.lit(0))
        .otherwise(pl.min_horizontal(epoch.filter(total.is_not_null()).min(), pl.lit(1)))
    )
    hit = hit.with_columns(
        pl.when(pl.col("ordinal"))
        .then(ordinal)
        .when(epoch.is_not_null() & total.is_not_null())
        .then((epoch - base) * total + pl.col("_step"))
        .when(pl.col("window"))
        .then(pl.col("_step").abs())  # `3376-3750batch`: the end was read as -3750
        .when(slot.is_not_null())
        .then(pl.col("_step"))
        .alias("step")
    )
    if hit["glued"].any():
        hit = _restart_offsets(hit, notes)
    return hit.drop("_step", "_epoch", "_total")


def _integer(raw: pl.Expr) -> pl.Expr:
    """A printed counter as an integer: `540`, or `540.0` as Lightning prints every logged
    metric (NeMo's progress bar `global_step=540.0`); a fraction (`1.5`) is no counter.
    A counter grouped in thousands (`step: 20,000`, Python's `{step:,}`) is the number NUM
    matched whole, as its values are: without the commas it would not parse and every
    line past step 999 would lose its step."""
    raw = raw.str.replace_all(",", "", literal=True)
    f = raw.cast(pl.Float64, strict=False)
    whole = pl.when(f.is_finite() & (f == f.floor())).then(f.cast(pl.Int64, strict=False))
    return pl.coalesce(raw.cast(pl.Int64, strict=False), whole)


def _restart_offsets(hit: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """ESPnet2 counts batches from 1 again in every epoch and prints no epoch length. Its
    reporter counts iterations over the whole run, and the epoch's summary line prints that
    count (`total_count=`, its step): the next epoch's windows are counted on from there, or
    from the previous epoch's last window where its summary is not in the file. The first
    epoch of a file that starts later than epoch 1 is placed before its own summary's count
    (less its last window), else counted from 0 (said in a note)."""
    glued = hit.filter(pl.col("glued") & ~pl.col("cont") & pl.col("step").is_not_null())
    ends = dict(
        glued.filter(pl.col("window")).group_by("_epoch").agg(pl.col("step").max()).iter_rows()
    )
    totals = dict(
        glued.filter(~pl.col("window")).group_by("_epoch").agg(pl.col("step").max()).iter_rows()
    )
    offsets: dict[int, int] = {}
    previous: int | None = None
    for e in sorted(ends):
        if previous is not None and previous == e - 1:
            offsets[e] = totals.get(previous, offsets[previous] + ends[previous])
        elif e - 1 in totals:
            offsets[e] = totals[e - 1]
        elif e in totals and e != 1:
            offsets[e] = totals[e] - ends[e]
        else:
            offsets[e] = 0
            if e != 1:
                notes.append(
                    f"generic reader: epoch {e} is the first the log shows and no count of "
                    "the iterations before it is printed: its batches are counted from 0"
                )
        previous = e
    notes.append(
        f"generic reader: {glued.filter(pl.col('window')).height} ESPnet-style "
        "`<epoch>epoch:<loop>:<a>-<b>batch:` lines: the step is the window's end b counted "
        "over the run (each epoch continues from the iteration count of the summary before it)"
    )
    table = pl.DataFrame(
        {"_epoch": list(offsets), "_offset": list(offsets.values())},
        schema={"_epoch": pl.Int64, "_offset": pl.Int64},
    )
    hit = hit.join(table, on="_epoch", how="left", maintain_order="left")
    shift = pl.col("glued") & pl.col("window") & pl.col("_offset").is_not_null()
    return hit.with_columns(
        pl.when(shift).then(pl.col("step") + pl.col("_offset")).otherwise(pl.col("step"))
    ).drop("_offset")


def _training_bar_only(hit: pl.DataFrame, bars: list[str], notes: list[str]) -> pl.DataFrame:
    """Bars without a description count other loops too: the Hugging Face Trainer draws its
    evaluation bar (`100%|...| 25/25`) like its training bar (`...| 320/2724`). The bar with
    the largest total is the training loop's; the others' lines are not records (so that an
    eval dict printed under the eval bar takes the training step before it)."""
    total = (
        pl.col("nums")
        .list.get(pl.col("step_slot") + 1, null_on_oob=True)
        .cast(pl.Int64, strict=False)
    )
    is_bar = pl.col("tpl").is_in(bars)
    totals = hit.filter(is_bar).select(total.alias("t"))["t"].drop_nulls()
    if totals.n_unique() <= 1:
        return hit
    main = int(totals.max())  # type: ignore[arg-type]
    other = is_bar & (total != main)
    notes.append(
        f"generic reader: {hit.filter(other).height} progress-bar lines counting to another "
        f"total than the training bar's {main} (an evaluation loop) give no step"
    )
    return hit.filter(~other)


def _validation_batches(hit: pl.DataFrame, validating: pl.Series, notes: list[str]) -> pl.DataFrame:
    """`hit` with the record lines of a validation (`validating`: line numbers, PccAI's
    batches under `Validation at epoch E`, see _validation_sections) made continuations: no
    training steps of their own, their values the validation's at the training step
    before them (as timm's `Test: [ 50/195]` lines). Before, each was a training step
    counted with the validation's total, its loss in the training loss series."""
    if validating.len() == 0:
        return hit
    notes.append(
        f"generic reader: {validating.len()} batch lines under `Validation at epoch E` lines "
        "are the validation's (PccAI prints them like its training batches), not training "
        "steps: each validation is one value per name (`val` names) at the training step "
        "before it, the averages its `Validation ---` line prints where it prints one"
    )
    val = pl.col("line").is_in(validating.implode())
    return hit.with_columns((pl.col("cont") | val).alias("cont"))


def _validation_names(rows: pl.DataFrame, validating: pl.Series) -> pl.DataFrame:
    """`rows` (line, raw_name, ...) with the names on a validation's batch lines
    (`validating`) made the validation's, as an evaluation line's (_evaluation_names): a
    loss takes the split (`loss` -> `val loss`, the validation loss; `bpp_loss` -> `val
    bpp_loss`), any other value is `val/<name>`."""
    if validating.len() == 0:
        return rows
    val = pl.col("line").is_in(validating.implode())
    names = rows.filter(val)["raw_name"].unique().to_list()
    renamed = pl.col("raw_name").replace({n: _validation_name(n) for n in names})
    return rows.with_columns(pl.when(val).then(renamed).otherwise("raw_name").alias("raw_name"))


def _validation_summaries(
    summaries: dict[str, tuple[Template, dict[int, str]]],
    passes: pl.DataFrame,
    found: dict[str, Template],
) -> None:
    """PccAI's `Validation --- avg_val_bpp_loss: ..., avg_val_loss: ...` (`summaries`:
    templates with their names as the batch lines name them, summary_names) after a
    validation's batches (`passes`, see validation_passes) gives the validation's values:
    it joins `found` as a continuation (at the training step before the validation) with
    its names as the batch lines' (`avg_val_loss` -> `val loss`, _validation_name).
    Before, the line was ignored and the validation's value was its last printed batch's."""
    if not passes["summary"].any():
        return
    for key, (t, names) in summaries.items():
        t.names = {i: _validation_name(n) for i, n in names.items()}
        t.cont = True
        found[key] = t


def _averaged_note(averaged: pl.DataFrame, notes: list[str]) -> None:
    """Say which validations (`averaged`: pass, batches) print no `Validation ---` line,
    their values the mean of the batch lines the log prints."""
    if averaged.height == 0:
        return
    most = averaged.select(pl.col("batches").max()).item()
    notes.append(
        "generic reader: validations with no `Validation --- avg_val_...` line (a log cut "
        f"off): {averaged.height}; each value is the mean of its printed batch lines "
        f"({most} at most; PccAI's own average counts every batch, "
        "printed or not), NaN when one of them is"
    )


def _validation_name(key: str) -> str:
    """The name of a value on a validation's batch line (see _validation_names)."""
    if _names_split(key):
        return key
    return _split_named("val", key) if _split_loss(key) else f"val/{key}"


def _batch_counters(prepared: pl.DataFrame, found: dict[str, Template]) -> None:
    """PccAI prints `Training at epoch 4 (total 4) with lr ...`, then records `batch count:
    280/308, iter: 280, ...` whose counters start again at 0 every epoch: in a log with
    such epoch lines, a record's `batch count: i/N` counts the epoch's batches, N of them.
    Its template counts like Keras' `i/N` under `Epoch E/M` (`_epoch_headers`: over epochs
    only where the counter goes back), and the batch counter is no metric of its own.
    Before, every epoch's steps fell on the first epoch's."""
    if not prepared["tpl"].str.contains(_EPOCH_START).any():
        return
    for t in found.values():
        if not t.is_record or t.step_slot is None or t.epoch_slot is not None or t.per_epoch:
            continue
        lits = t.text.split(SLOT)
        for i, key in list(t.names.items()):
            batch = "batch" in key.lower().split()
            if batch and i + 2 < len(lits) and lits[i + 1].strip() == "/":
                t.per_epoch, t.total_slot = True, i + 1
                del t.names[i]
                break


def _epoch_headers(
    prepared: pl.DataFrame, found: dict[str, Template], notes: list[str]
) -> pl.DataFrame | None:
    """`Epoch E/M` lines (Keras) before records counted `i/N` that restart every epoch:
    (line, _header = E). None when the log has no such lines or its counters never restart
    (a global `i/N` counter stays as printed)."""
    counted = [k for k, t in found.items() if t.per_epoch and t.is_record]
    if not counted:
        return None
    either = f"(?:{_EPOCH_HEADER.pattern})|(?:{_EPOCH_START})"
    heads = prepared.filter(pl.col("tpl").str.contains(either)).select(
        "line", pl.col("body").str.extract(r"(\d+)", 1).cast(pl.Int64).alias("_header")
    )
    if heads.height == 0:
        return None
    firsts = (
        prepared.filter(pl.col("tpl").is_in(counted))
        .select("tpl", pl.col("body").str.extract(r"(\d+)", 1).cast(pl.Int64).alias("n"))
        .with_columns((pl.col("n").diff().over("tpl") <= 0).alias("back"))
    )
    if not firsts["back"].any():
        return None
    for k in counted:
        found[k].per_epoch = True
    notes.append(
        f"generic reader: `i/N` counters restart after {heads.height} `Epoch E` lines: the step "
        "is the batch counted over epochs ((E - first epoch) * N + i)"
    )
    return heads


def _attach_continuations(
    hit: pl.DataFrame,
    lines: pl.DataFrame,
    evaluations: list[str] | None = None,
    validating: pl.Series | None = None,
) -> pl.DataFrame:
    """Continuation lines take the step of the nearest record line before them, when
    nothing but other continuation lines sits between them; an unindented loss line
    (llm.c's `val loss`) before the first record takes the step before the first one, an
    indented one there belongs to no record of the file and is dropped. An indented line of
    an evaluation's results (`evaluations`: templates; llama-recipes prints its eval loss
    as ` eval_ppl=... eval_epoch_loss=...` after its memory report and eval bar) is no
    wrapped tail of a record: it takes the step before it like an unindented one, and so
    does an indented line of a validation's batches (`validating`: line numbers; PccAI's,
    see _validation_batches), after the epoch's summary and its `Validation at epoch` line."""
    cont = hit.filter(pl.col("cont"))
    recs = hit.filter(~pl.col("cont"))
    if cont.height == 0:
        return recs
    anchors = recs.select(pl.col("line").alias("rec_line"), pl.col("step").alias("rec_step"))
    joined = cont.drop("step").join_asof(
        anchors, left_on="line", right_on="rec_line", strategy="backward"
    )
    # lines between the record and the continuation that are neither blank nor continuations
    all_lines = lines.filter(pl.col("text").str.strip_chars().str.len_bytes() > 0).select("line")
    marks = all_lines.join(cont.select("line", pl.lit(True).alias("c")), on="line", how="left")
    marks = marks.join(recs.select("line", pl.lit(True).alias("r")), on="line", how="left")
    marks = marks.with_columns(
        (pl.col("c").is_null() & pl.col("r").is_null()).cast(pl.Int64).cum_sum().alias("other")
    )
    joined = joined.join(marks.select("line", "other"), on="line", how="left")
    joined = joined.join(
        marks.select(pl.col("line").alias("rec_line"), pl.col("other").alias("rec_other")),
        on="rec_line",
        how="left",
    )
    steps = recs["step"].drop_nulls()
    first_step = int(steps.min()) if len(steps) else None  # type: ignore[arg-type]
    indented = (
        pl.col("body").str.contains(r"^[ \t]") | pl.col("text").str.contains(r"^[ \t]")
    ) & ~pl.col("tpl").is_in(evaluations or [])
    if validating is not None and validating.len():
        indented = indented & ~pl.col("line").is_in(validating.implode())
    step = (
        pl.when(pl.col("rec_line").is_null())
        .then(pl.lit(max(first_step - 1, 0) if first_step is not None else None))
        .when((pl.col("other") == pl.col("rec_other")) | ~indented)
        .then(pl.col("rec_step"))
        .otherwise(None)
    )
    # (an indented one there is the wrapped tail of a record the file does not hold: mmdet
    # lines cut at the terminal's width, ` loss_mask: 0.5553, loss: 1.8553`)
    before_first = pl.col("rec_line").is_null() & pl.col("tpl").str.contains("(?i)loss") & ~indented
    joined = joined.with_columns(step.cast(pl.Int64).alias("step")).filter(
        pl.col("step").is_not_null() & (pl.col("rec_line").is_not_null() | before_first)
    )
    return pl.concat([recs, joined.select(recs.columns)]).sort("line")


def describe(
    found: dict[str, Template],
    ignored: int,
    lines: pl.DataFrame,
    used: set[int],
    redraws: int = 0,
) -> list[str]:
    """What was read, for the user to check: metric <- template, lines ignored (and how many
    lines came from carriage-return redraws of a progress display), a sample."""
    out = []
    for tpl in sorted(found.values(), key=lambda t: -t.lines):
        metrics = ", ".join(tpl.names.values())
        kind = "continuation lines" if not tpl.is_record else "lines"
        out.append(f"generic reader: {metrics} from {tpl.lines} {kind} like '{tpl.shown()[:160]}'")
    if ignored:
        rest = lines.filter(
            ~pl.col("line").is_in(pl.Series(list(used), dtype=pl.Int64).implode())
            & (pl.col("text").str.strip_chars().str.len_bytes() > 0)
        ).head(_SAMPLES)
        sample = " / ".join(f"{r[0]}: '{r[1].strip()[:80]}'" for r in rest.iter_rows())
        cr = f"; the log has {redraws} carriage-return redraws, each a line" if redraws else ""
        out.append(
            f"generic reader: {ignored} lines ignored (no step and metric found{cr}), e.g. {sample}"
        )
    return out


def read_generic(path: Path, text: str) -> ReadResult:
    lines = unpadded_nonfinite(text, yolo_rows(text, line_frame(text)))
    notes: list[str] = []
    events: list[pl.DataFrame] = []
    overflow_lines: list[int] = []
    passes: list[int] = []
    rows, found, ignored = extract(
        lines, notes, events=events, overflow_lines=overflow_lines, read_lines=passes
    )
    if rows.height == 0:
        raise InputError(
            path,
            "no line with a step counter and a named number",
            expected="lines like 'step 10 | loss 2.31' or 'iter 10: loss=2.31'",
        )
    used = set(rows["line"].to_list()) | set(passes)
    if events:
        used |= set(overflow_lines)
    redraws = text.count("\r") - text.count("\r\n") if "\r" in text else 0
    rows = _hf_standins(_placeholders(rows, notes), lines, notes)
    notes = describe(found, ignored, lines, used, redraws) + notes + _no_training_loss(rows)
    return ReadResult(
        metrics=rows.select("step", "raw_name", "value", "wall_time"),
        config=printed_config(text),
        warnings=notes,
        events=pl.concat(events) if events else None,
    )


def _placeholders(rows: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """A name that is NaN on every line, beside another name of the same metric that holds
    finite values, is a placeholder, not a divergence: NeMo 1's Lightning progress bar prints
    `loss=nan` (the bar's running loss, which NeMo's step does not feed) beside
    `reduced_train_loss=3.950`. A divergence is NaN under both names. It keeps its values
    under `<name> (placeholder)`, so the metric is read from the name that carries it."""
    table = alias_table()
    finite = rows.group_by("raw_name").agg(pl.col("value").is_finite().any().alias("any"))
    carriers: dict[str, str] = {}  # metric -> a name of it that holds finite values
    for name, has in finite.sort("raw_name").iter_rows():
        if has:
            carriers.setdefault(table.canonical(name), name)
    empty = {  # name NaN on every line -> the name that carries its metric
        name: carriers[table.canonical(name)]
        for name, has in finite.iter_rows()
        if not has and table.canonical(name) in carriers
    }
    for name, carrier in sorted(empty.items()):
        notes.append(
            f"generic reader: `{name}` is NaN on every line while `{carrier}` holds values: "
            f"read as a placeholder (stored as `{name} (placeholder)`), not as a NaN loss"
        )
    if not empty:
        return rows
    renamed = pl.col("raw_name").replace({n: f"{n} (placeholder)" for n in empty})
    return rows.with_columns(renamed.alias("raw_name"))


def _hf_standins(rows: pl.DataFrame, lines: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """The Hugging Face Trainer's printed dicts (`{'loss': 0.0, 'learning_rate': ...}` on
    stdout) log 0.0 for a window whose every loss was NaN/Inf, as its trainer_state.json
    does: the same reading as hf_trainer's (nan_standins), so a run's stdout and its
    trainer_state.json tell the same story."""
    from forensics.ingest.readers.hf_trainer import nan_standins, standin_warning

    printed = lines.filter(pl.col("text").str.contains(r"^\s*\{'loss': ", literal=False))
    if printed.height == 0:
        return rows
    mine = rows.filter(
        pl.col("line").is_in(printed["line"].implode())
        & pl.col("raw_name").is_in(["loss", "grad_norm"])
    ).sort("line")
    entries: dict[int, dict[str, float | int]] = {}
    for line, step, name, value in mine.select("line", "step", "raw_name", "value").iter_rows():
        entries.setdefault(line, {"step": step})[name] = value
    standins = nan_standins([e for e in entries.values() if "loss" in e])
    if not standins:
        return rows
    notes.append(standin_warning(standins))
    at = pl.col("line").is_in(list(entries)) & pl.col("step").is_in(list(standins))
    zero = at & (pl.col("raw_name") == "loss") & (pl.col("value") == 0.0)
    return rows.with_columns(pl.when(zero).then(float("nan")).otherwise("value").alias("value"))


# XLM's objectives, each printed with its languages: `MLM-en`, `MLM-en-fr` (TLM), `CLM-fr`,
# `MT-en-fr`, `BT-en-fr-en`, `AE-en`, `PC-en-fr` (its trainer's `'{}: {:7.4f}'` per loss)
_XLM_OBJECTIVE = re.compile(r"\A(?:MLM|CLM|MT|BT|AE|PC)(?:-[a-z]{2,3}){1,3}\Z")


def _no_training_loss(rows: pl.DataFrame) -> list[str]:
    """A log whose losses all have other names (RLHF: DeepSpeed-Chat's `act_loss` and
    `cri_loss`, verl's `actor/pg_loss` and `critic/vf_loss`) trains two models, each on its
    own objective; the PPO actor's is a clipped surrogate near 0, not a loss whose level
    tells a divergence. None of them becomes `loss`: the note says the detector's loss
    screen has nothing to read."""
    table = alias_table()
    names = rows["raw_name"].unique(maintain_order=True).to_list()
    if any(table.canonical(n) in _LOSSES for n in names):
        return []
    # epoch/ and summary/ names are the same losses, averaged
    lossy = [n for n in names if _loss_named(n) and not n.startswith(("epoch/", "summary/"))]
    objectives = [n for n in names if _XLM_OBJECTIVE.match(n)]
    if not lossy and objectives:
        said = (
            f"objective {objectives[0]} keeps its name"
            if len(objectives) == 1
            else f"objectives {', '.join(objectives[:6])} keep their names"
        )
        return [
            f"generic reader: no training loss: {said} (XLM's cross-entropy of each objective "
            "and language); the loss screen has no `loss` to read"
        ]
    if not lossy:
        return []
    if len(lossy) == 1:
        kept = f"{lossy[0]} keeps its name (no name the reader knows as the training loss)"
    else:
        kept = (
            f"{', '.join(lossy[:6])} keep their names (the losses of several models or terms, "
            "e.g. an RLHF actor and critic)"
        )
    return [f"generic reader: no training loss: {kept}; the loss screen has no `loss` to read"]


def has_records(lines: list[str], *, min_lines: int = 2) -> bool:
    """Sniff: at least `min_lines` record lines among `lines` (a log head)."""
    if not lines:
        return False
    frame = pl.DataFrame({"text": lines}, schema={"text": pl.Utf8}).with_row_index("line", 1)
    head = "\n".join(lines)
    frame = yolo_rows(head, frame.with_columns(pl.col("line").cast(pl.Int64)))
    frame = unpadded_nonfinite(head, frame)
    said: list[int] = []
    rows, _, _ = extract(frame, [], with_time=False, overflow_lines=said)
    records = rows["line"].n_unique()
    if records and records < min_lines:  # one record, then TensorFlow's NaN report
        records += frame.filter(
            pl.col("line").is_in(said) & pl.col("text").str.contains(_DIVERGED)
        ).height
    return records >= min_lines


@register
class GenericTextReader(Reader):
    name = "generic_text"
    structured = False  # numbers parsed back from printed text
    description = (
        "any line-oriented log with a step counter and named numbers (inferred): fairseq, "
        "MaxText, Composer, Keras, TF, MetricLogger/ProgressMeter, DeepSpeed, InternEvo, tqdm bars"
    )
    priority = 95  # after every named format and the named line patterns

    def sniff(self, path: Path, head: str) -> bool:
        if not looks_like_text_log(path, head.lstrip("\ufeff")):
            return False
        if has_records(head_lines(head)):
            return True
        return scan_beyond_head(path, lambda chunk: has_records(chunk.splitlines()))

    def read(self, path: Path) -> ReadResult:
        return read_generic(path, read_text(path))
