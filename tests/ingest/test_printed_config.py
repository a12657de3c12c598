"""The config a text log printed at start-up is the run's config (ingest/printed_config.py).

OLMo's trainer log and llm.c's stdout carry no config file beside them: the only record of
their β2, precision, warm-up and vocabulary size is what they printed before the first
step (an OLMo `TrainConfig(...)` repr, llm.c's `| key | value |` table). Hugging Face's
`TrainingArguments` printout and argparse's `Namespace(...)` are printed by their real
classes here."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from forensics.ingest import ingest
from forensics.ingest.config import load_config
from forensics.ingest.printed_config import printed_config
from forensics.store import open_store

STEPS = "".join(f"step {s:4d} | loss {3.0 - s / 1000:.4f} | lr 3.0e-04\n" for s in range(1, 60))


def _ingested_config(path: Path, tmp_path: Path) -> dict[str, Any]:
    with open_store(tmp_path / "c.duckdb") as store:
        ingest(store, [path], run="r")
        return store.run_config("r")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _pick(cfg: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    return {k: cfg.get(k) for k in keys}


def _real_config(real_logs: Path, rel: str, tmp_path: Path) -> dict[str, Any]:
    path = real_logs / rel
    if not path.is_file():
        pytest.skip(f"{rel} is not in this copy of real_logs")
    return _ingested_config(path, tmp_path)


OLMO = {
    "beta1": 0.9, "beta2": 0.95, "peak_lr": 3e-4, "warmup_steps": 500, "precision": "bf16",
    "grad_clip": 1.0, "seq_len": 4096, "global_batch_size": 512, "vocab_size": 50280,
    "seed": 6198,
    "lr_schedule": "cosine",  # scheduler.name='cosine_with_warmup'
    "total_steps": 15000,  # max_duration=15000
    "min_lr": 3e-5,  # alpha_f=0.1: OLMo's cosine ends at 10% of the peak
    "fsdp.sharding_strategy": "<ShardingStrategy.FULL_SHARD: 1>",  # an enum, kept as text
}  # fmt: skip
LLMC = {
    "peak_lr": 6e-4, "warmup_steps": 700, "precision": "bf16", "seq_len": 1024,
    "lr_schedule": "cosine", "vocab_size": 50257,
    # "total batch size" counts tokens: 512 sequences of 1024, not 524288 sequences
    "tokens_per_step": 524288, "global_batch_size": 512,
}  # fmt: skip


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("AntonioLopardo__OLMo/training.log", OLMO),
        ("HectorFCardenas__llm.c/gpt2_train.11685414.log", LLMC),
    ],
    ids=["olmo-train-config-repr", "llmc-start-up-table"],
)
def test_real_logs_printed_config(
    real_logs: Path, tmp_path: Path, rel: str, expected: dict[str, Any]
) -> None:
    cfg = _real_config(real_logs, rel, tmp_path)
    assert _pick(cfg, list(expected)) == expected


def test_hf_training_arguments_printout(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        learning_rate=3e-4,
        adam_beta2=0.98,
        warmup_steps=100,
        max_steps=1000,
        lr_scheduler_type="cosine",
        report_to=[],
        run_name="Bob's run",  # printed unquoted: a quote left open is a character
    )
    log = tmp_path / "train.log"
    log.write_text(f"loading model\n{args}\n{STEPS}")  # one `key=value,` per line, unquoted
    cfg = _ingested_config(log, tmp_path)
    assert _pick(cfg, ["beta2", "peak_lr", "warmup_steps", "total_steps", "lr_schedule"]) == {
        "beta2": 0.98,
        "peak_lr": 3e-4,
        "warmup_steps": 100,
        "total_steps": 1000,
        "lr_schedule": "cosine",
    }
    assert cfg["output_dir"] == str(tmp_path / "out")
    assert cfg["run_name"] == "Bob's run"


def test_argparse_namespace_printout(tmp_path: Path) -> None:
    ns = argparse.Namespace(lr=6e-4, beta2=0.99, precision="fp16", warmup_iters=200, seed=3)
    log = tmp_path / "train.log"
    log.write_text(f"{ns}\n{STEPS}")
    cfg = _ingested_config(log, tmp_path)
    assert _pick(cfg, ["peak_lr", "beta2", "precision", "warmup_steps", "seed"]) == {
        "peak_lr": 6e-4,
        "beta2": 0.99,
        "precision": "fp16",
        "warmup_steps": 200,
        "seed": 3,
    }


def test_a_printed_model_is_no_config(tmp_path: Path) -> None:
    """`print(model)` shows every module's repr: `Linear(in_features=64, out_features=256,
    bias=True)` has three fields but is no config."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    assert "Linear(in_features=64, out_features=256, bias=True)" in str(model)
    assert printed_config(f"{model}\n{STEPS}") == {}


def test_a_step_record_printed_as_a_repr_is_no_config() -> None:
    text = "".join(f"TrainParams(step={s}, loss={2.0 - s / 100}, lr=0.001)\n" for s in range(1, 20))
    assert printed_config(text) == {}


@pytest.mark.parametrize(
    "head",
    [
        "Config(lr=0.1, name='unterminated\n",  # a quote never closed
        "Config(lr=0.1, betas=(0.9, 0.95\n",  # a bracket never closed
        "Config(lr=0.1 beta2=0.9, x=1)\n",  # no comma between fields
        "Config(a=1, b=2)\n",  # too few fields to be a config
    ],
)
def test_a_broken_or_small_repr_adds_nothing(head: str) -> None:
    assert printed_config(head + STEPS) == {}


# ----- DeepSpeed's printed engine configuration ---------------------------------------------
# DeepSpeed prints its config at start-up (DeepSpeedConfig.print): `DeepSpeedEngine
# configuration:`, one `  name ..... value` line per setting, then `json = {` and the user's
# ds_config. Before, none of it reached the run config: a DeepSpeed log without its
# ds_config.json beside it had no precision, schedule, β2 or batch.

# Lines quoted verbatim (some of the block's ~90 settings left out, their order kept) from a
# ZeRO-1 run's log in
# https://github.com/hwang2006/large-scale-lm-tutorials/blob/013391eba2e0f88b43f436a32b7ab0358dbcb223/docs/07_zero_redundancy_optimization.md
# (DeepSpeed 0.14: `bfloat16_enabled`; the client's own Adam, so `optimizer_params None`).
DS_ZERO1_LOG = """\
[2024-09-15 00:13:21,397] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed using configured LR scheduler = WarmupDecayLR
[2024-09-15 00:13:21,397] [INFO] [logging.py:96:log_dist] [Rank 0] step=0, skipped=0, lr=[3e-05], mom=[(0.9, 0.999)]
[2024-09-15 00:13:21,398] [INFO] [config.py:999:print] DeepSpeedEngine configuration:
[2024-09-15 00:13:21,398] [INFO] [config.py:1003:print]   activation_checkpointing_config  {
    "partition_activations": false,
    "contiguous_memory_optimization": false,
    "cpu_checkpointing": false,
    "number_checkpoints": null,
    "synchronize_checkpoint_boundary": false,
    "profile": false
}
[2024-09-15 00:13:21,398] [INFO] [config.py:1003:print]   amp_enabled .................. False
[2024-09-15 00:13:21,398] [INFO] [config.py:1003:print]   bfloat16_enabled ............. False
[2024-09-15 00:13:21,398] [INFO] [config.py:1003:print]   bfloat16_immediate_grad_update  False
[2024-09-15 00:13:21,399] [INFO] [config.py:1003:print]   data_efficiency_config ....... {'enabled': False, 'seed': 1234, 'data_sampling': {'enabled': False, 'num_epochs': 1000, 'num_workers': 0, 'curriculum_learning': {'enabled': False}}, 'data_routing': {'enabled': False, 'random_ltd': {'enabled': False, 'layer_token_lr_schedule': {'enabled': False}}}}
[2024-09-15 00:13:21,399] [INFO] [config.py:1003:print]   fp16_auto_cast ............... False
[2024-09-15 00:13:21,399] [INFO] [config.py:1003:print]   fp16_enabled ................. True
[2024-09-15 00:13:21,399] [INFO] [config.py:1003:print]   gradient_accumulation_steps .. 1
[2024-09-15 00:13:21,399] [INFO] [config.py:1003:print]   gradient_clipping ............ 0.0
[2024-09-15 00:13:21,399] [INFO] [config.py:1003:print]   loss_scale ................... 0
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   monitor_config ............... tensorboard=TensorBoardConfig(enabled=False, output_path='', job_name='DeepSpeedJobName') comet=CometConfig(enabled=False, samples_log_interval=100, project=None, workspace=None, api_key=None, experiment_name=None, experiment_key=None, online=None, mode=None) wandb=WandbConfig(enabled=False, group=None, team=None, project='deepspeed') csv_monitor=CSVConfig(enabled=False, output_path='', job_name='DeepSpeedJobName')
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   optimizer_legacy_fusion ...... False
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   optimizer_name ............... None
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   optimizer_params ............. None
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   scheduler_name ............... WarmupDecayLR
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   scheduler_params ............. {'total_num_steps': 300, 'warmup_min_lr': 0, 'warmup_max_lr': 3e-05, 'warmup_num_steps': 30}
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   steps_per_print .............. 9999999999
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   train_batch_size ............. 16
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   train_micro_batch_size_per_gpu  4
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   world_size ................... 4
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   zero_enabled ................. True
[2024-09-15 00:13:21,400] [INFO] [config.py:1003:print]   zero_optimization_stage ...... 1
[2024-09-15 00:13:21,400] [INFO] [config.py:989:print_user_config]   json = {
    "train_batch_size": 16,
    "gradient_accumulation_steps": 1,
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {
            "total_num_steps": 300,
            "warmup_min_lr": 0,
            "warmup_max_lr": 3e-05,
            "warmup_num_steps": 30
        }
    },
    "fp16": {
        "enabled": true,
        "initial_scale_power": 32,
        "loss_scale_window": 1000,
        "hysteresis": 2,
        "min_loss_scale": 1
    },
    "zero_optimization": {
        "stage": 1
    },
    "zero_allow_untested_optimizer": true,
    "wall_clock_breakdown": false,
    "steps_per_print": 1.000000e+10
}
[2024-09-15 00:13:28,261] [INFO] [loss_scaler.py:190:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4294967296, but hysteresis is 2. Reducing hysteresis to 1
step:0, loss:5.453125
[2024-09-15 00:13:28,307] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4294967296, reducing to 2147483648
step:10, loss:3.650390625
step:20, loss:3.546875
step:30, loss:3.71875
step:40, loss:2.87890625
step:50, loss:2.400390625
step:60, loss:2.5234375
step:70, loss:2.2578125
step:80, loss:2.5
step:90, loss:2.9375
step:100, loss:2.7890625
"""  # noqa: E501
DS_CANONICAL = (
    "precision", "lr_schedule", "peak_lr", "min_lr", "warmup_steps", "lr_warmup_shape",
    "total_steps", "grad_clip", "global_batch_size", "beta1", "beta2",
)  # fmt: skip


def test_deepspeed_engine_configuration_is_the_run_config(tmp_path: Path) -> None:
    # before: nothing of DeepSpeed's (the printed TensorBoardConfig(...) repr's fields only)
    log = tmp_path / "train.log"
    log.write_text(DS_ZERO1_LOG)
    cfg = _ingested_config(log, tmp_path)
    assert _pick(cfg, list(DS_CANONICAL)) == {
        "precision": "fp16", "lr_schedule": "linear", "peak_lr": 3e-5, "min_lr": 0.0,
        "warmup_steps": 30, "lr_warmup_shape": "log", "total_steps": 300,
        "grad_clip": None,  # `gradient_clipping 0.0`: DeepSpeed's default, no clipping
        "global_batch_size": 16,  # train_batch_size: global (4 per GPU x 4 GPUs)
        "beta1": None, "beta2": None,  # the client's Adam: DeepSpeed printed no betas
    }  # fmt: skip
    # as its user JSON would read beside the log, as ds_config.json
    user = DS_ZERO1_LOG.split("json = ", 1)[1].split("\n[", 1)[0]
    beside = load_config(_write(tmp_path / "side" / "ds_config.json", user))
    assert _pick(beside, list(DS_CANONICAL)) == _pick(cfg, list(DS_CANONICAL))


# The DeepSpeed CIFAR-10 tutorial's output (DeepSpeed 0.1: `DeepSpeedLight configuration:`,
# every line behind pdsh's `worker-0: `), quoted verbatim from
# https://github.com/microsoft/DeepSpeed/blob/06bb3a61c4069bb88ea60aa8bb5fa587c4174af6/docs/_tutorials/cifar-10.md
DS_LIGHT_PDSH = """\
worker-0: [INFO 2020-02-06 19:53:56] rank:0 step=0, skipped=0, lr=[0.001], mom=[[0.8, 0.999]]
worker-0: DeepSpeedLight configuration:
worker-0:   allgather_size ............... 500000000
worker-0:   allreduce_always_fp32 ........ False
worker-0:   disable_allgather ............ False
worker-0:   dump_state ................... False
worker-0:   dynamic_loss_scale_args ...... None
worker-0:   fp16_enabled ................. False
worker-0:   global_rank .................. 0
worker-0:   gradient_accumulation_steps .. 1
worker-0:   gradient_clipping ............ 0.0
worker-0:   initial_dynamic_scale ........ 4294967296
worker-0:   loss_scale ................... 0
worker-0:   optimizer_name ............... adam
worker-0:   optimizer_params ............. {'lr': 0.001, 'betas': [0.8, 0.999], 'eps': 1e-08, 'weight_decay': 3e-07}
worker-0:   prescale_gradients ........... False
worker-0:   scheduler_name ............... WarmupLR
worker-0:   scheduler_params ............. {'warmup_min_lr': 0, 'warmup_max_lr': 0.001, 'warmup_num_steps': 1000}
worker-0:   sparse_gradients_enabled ..... False
worker-0:   steps_per_print .............. 2000
worker-0:   tensorboard_enabled .......... False
worker-0:   tensorboard_job_name ......... DeepSpeedJobName
worker-0:   tensorboard_output_path ......
worker-0:   train_batch_size ............. 4
worker-0:   train_micro_batch_size_per_gpu  4
worker-0:   wall_clock_breakdown ......... False
worker-0:   world_size ................... 1
worker-0:   zero_enabled ................. False
worker-0:   json = {
worker-0:     "optimizer":{
worker-0:         "params":{
worker-0:             "betas":[
worker-0:                 0.8,
worker-0:                 0.999
worker-0:             ],
worker-0:             "eps":1e-08,
worker-0:             "lr":0.001,
worker-0:             "weight_decay":3e-07
worker-0:         },
worker-0:         "type":"Adam"
worker-0:     },
worker-0:     "scheduler":{
worker-0:         "params":{
worker-0:             "warmup_max_lr":0.001,
worker-0:             "warmup_min_lr":0,
worker-0:             "warmup_num_steps":1000
worker-0:         },
worker-0:         "type":"WarmupLR"
worker-0:     },
worker-0:     "steps_per_print":2000,
worker-0:     "train_batch_size":4,
worker-0:     "wall_clock_breakdown":false
worker-0: }
worker-0: [INFO 2020-02-06 19:53:56] 0/50, SamplesPerSec=1292.6411179579866
"""  # noqa: E501


def test_deepspeed_light_configuration_behind_pdsh() -> None:
    # before: {}
    cfg = printed_config(DS_LIGHT_PDSH)
    assert _pick(cfg, list(DS_CANONICAL)) == {
        "precision": None,  # fp16_enabled False, and no bf16 in DeepSpeed 0.1
        "lr_schedule": "constant", "peak_lr": 0.001, "min_lr": None, "warmup_steps": 1000,
        "lr_warmup_shape": "log", "total_steps": None, "grad_clip": None,
        "global_batch_size": 4, "beta1": 0.8, "beta2": 0.999,
    }  # fmt: skip
    assert cfg["optimizer.type"] == "adam"  # the printed setting over its JSON's "Adam"


# The block's optimizer and scheduler lines as quoted (its head cut off) in
# https://github.com/deepspeedai/DeepSpeed/issues/4904 (a bf16 run, DeepSpeed 0.16):
# WarmupCosineLR, a warm-up from 0.1 x lr. No header: the lines' `[config.py:N:print]` tag
# says whose they are.
DS_4904 = """\
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   optimizer_legacy_fusion ...... False
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   optimizer_name ............... adamw
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   optimizer_params ............. {'lr': 0.0003, 'betas': [0.9, 0.95], 'weight_decay': 0.1}
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   pipeline ..................... {'stages': 'auto', 'partition': 'best', 'seed_layers': False, 'activation_checkpoint_interval': 0, 'pipe_partitioned': True, 'grad_partitioned': True}
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   pld_enabled .................. False
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   pld_params ................... False
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   prescale_gradients ........... False
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   scheduler_name ............... WarmupCosineLR
[2025-05-13 07:17:50,570] [INFO] [config.py:1007:print]   scheduler_params ............. {'warmup_min_ratio': 0.1, 'cos_min_ratio': 0.1, 'total_num_steps': 20000, 'warmup_num_steps': 1000, 'warmup_type': 'linear'}
"""  # noqa: E501


def test_deepspeed_printed_lines_without_their_header() -> None:
    # before: {}
    cfg = printed_config(DS_4904)
    assert _pick(cfg, list(DS_CANONICAL)) == {
        "precision": None, "lr_schedule": "cosine", "peak_lr": 3e-4,
        "min_lr": 3e-5,  # cos_min_ratio 0.1 x the optimizer's lr
        "warmup_steps": 1000, "lr_warmup_shape": "linear", "total_steps": 20000,
        "grad_clip": None, "global_batch_size": None, "beta1": 0.9, "beta2": 0.95,
    }  # fmt: skip
