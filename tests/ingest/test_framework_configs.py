"""Configs as real frameworks write them: DeepSpeed, NeMo, axolotl, LLaMA-Factory,
torchtitan and the HF Trainer. Each test writes the file as its framework does, checks the
canonical keys forensics reads from it and, for a schedule, config_lr_frac at a few steps
worked out by hand from the framework's own formula (quoted beside each)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_printed_config import DS_4904

from forensics.detect.schedule import config_lr_frac
from forensics.ingest.config import add_canonical, flatten, is_config_file, load_config
from forensics.ingest.printed_config import printed_config
from forensics.ingest.readers.hf_trainer import HfTrainerReader


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def canon(cfg: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: cfg.get(k) for k in keys}


# ----- DeepSpeed ---------------------------------------------------------------------------

# DeepSpeed docs (docs/_pages/config-json.md): the optimizer, fp16 and scheduler examples.
# deepspeed/runtime/lr_schedules.py, WarmupDecayLR: lr = min + (max - min) * gamma with
# gamma = log(i + 1) / log(warmup_num_steps) in the warm-up (warmup_type defaults to "log"),
# then (total_num_steps - i) / (total_num_steps - warmup_num_steps).
DS_DECAY = {
    "train_batch_size": 512,
    "train_micro_batch_size_per_gpu": 8,
    "gradient_clipping": 1.0,
    "optimizer": {
        "type": "Adam",
        "params": {"lr": 0.00015, "betas": [0.8, 0.999], "eps": 1e-8, "weight_decay": 3e-7},
    },
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": 0,
            "warmup_max_lr": 0.001,
            "warmup_num_steps": 1000,
            "total_num_steps": 10000,
        },
    },  # fmt: skip
    "fp16": {
        "enabled": True,
        "loss_scale": 0,
        "initial_scale_power": 16,
        "loss_scale_window": 1000,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },  # fmt: skip
    "zero_optimization": {"stage": 2},
}


def test_deepspeed_warmup_decay_lr(tmp_path: Path) -> None:
    path = write(tmp_path / "ds_config_zero2.json", json.dumps(DS_DECAY, indent=2))
    assert is_config_file(path)
    cfg = load_config(path)
    assert canon(cfg, "lr_schedule", "peak_lr", "min_lr", "warmup_steps", "total_steps") == {
        "lr_schedule": "linear", "peak_lr": 0.001,  # warmup_max_lr: the optimizer's lr unused
        "min_lr": 0.0, "warmup_steps": 1000, "total_steps": 10000,
    }  # fmt: skip
    assert canon(cfg, "precision", "global_batch_size", "grad_clip", "beta1", "beta2") == {
        "precision": "fp16", "global_batch_size": 512, "grad_clip": 1.0,
        "beta1": 0.8, "beta2": 0.999,
    }  # fmt: skip
    assert cfg["lr_warmup_shape"] == "log"  # DeepSpeed's default warmup_type
    assert config_lr_frac(99, cfg) == pytest.approx(math.log(100) / math.log(1000))  # 2/3
    assert config_lr_frac(5500, cfg) == pytest.approx((10000 - 5500) / 9000)  # 0.5
    assert config_lr_frac(10000, cfg) == pytest.approx(0.0)


# deepspeed/runtime/lr_schedules.py, WarmupCosineLR: a share of the optimizer's lr, linear in
# the warm-up (warmup_type "linear"), then cos_min_ratio + (1 - cos_min_ratio) *
# (1 + cos(pi * (i - warmup) / (total - warmup))) / 2.
DS_COSINE = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 8,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95]}},
    "scheduler": {
        "type": "WarmupCosineLR",
        "params": {
            "total_num_steps": 10000,
            "warmup_num_steps": 500,
            "warmup_type": "linear",
            "cos_min_ratio": 0.1,
        },
    },  # fmt: skip
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 3},
}


def test_deepspeed_warmup_cosine_lr(tmp_path: Path) -> None:
    path = write(tmp_path / "ds_config.json", json.dumps(DS_COSINE, indent=2))
    cfg = load_config(path)
    assert canon(cfg, "lr_schedule", "peak_lr", "min_lr", "warmup_steps", "total_steps") == {
        "lr_schedule": "cosine", "peak_lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 500,
        "total_steps": 10000,
    }  # fmt: skip
    assert cfg["precision"] == "bf16" and cfg["lr_warmup_shape"] == "linear"
    assert config_lr_frac(250, cfg) == pytest.approx(0.5)
    assert config_lr_frac(5250, cfg) == pytest.approx(0.1 + 0.9 * 0.5)
    assert config_lr_frac(10000, cfg) == pytest.approx(0.1)


# The HF Trainer's DeepSpeed docs (transformers docs/source/en/deepspeed.md) ship
# ds_config_zero3.json with "auto" everywhere: the Trainer fills those from its own
# arguments, which this file does not hold. "auto" is left unknown, never DeepSpeed's default.
DS_AUTO = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,
             "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto",
                                                 "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": False,
}  # fmt: skip


def test_deepspeed_auto_values_stay_unknown(tmp_path: Path) -> None:
    path = write(tmp_path / "ds_config_zero3.json", json.dumps(DS_AUTO, indent=4))
    assert is_config_file(path)
    cfg = load_config(path)
    assert cfg["lr_schedule"] == "constant"  # WarmupLR holds its peak after the warm-up
    for key in ("peak_lr", "warmup_steps", "precision", "global_batch_size", "grad_clip"):
        assert key not in cfg, key
    # a JSON named like DeepSpeed's without its keys (a dataset) is no config
    assert not is_config_file(write(tmp_path / "ds_train.json", '{"text": "a b c"}'))


# deepspeed/runtime/lr_schedules.py: WarmupLR/WarmupDecayLR's warm-up is warmup_min_lr +
# (warmup_max_lr - warmup_min_lr) x gamma, WarmupCosineLR's lr x (warmup_min_ratio + (1 -
# warmup_min_ratio) x gamma), with gamma = log(i + 1) / log(warmup_num_steps) (warmup_type
# "log", the default) or i / warmup_num_steps ("linear").
def ds_warmup(i: int, start: float, top: float, steps: int, kind: str = "log") -> float:
    gamma = math.log(i + 1) / math.log(steps) if kind == "log" else i / steps
    return start + (top - start) * gamma


@pytest.mark.parametrize(
    ("scheduler", "warmup_type"),
    [("WarmupLR", "log"), ("WarmupDecayLR", "linear"), ("WarmupLR", "linear")],
)
def test_deepspeed_warmup_starts_at_warmup_min_lr(
    tmp_path: Path, scheduler: str, warmup_type: str
) -> None:
    # before: the warm-up rose from 0 (at step 9 of a log warm-up: 0.5 instead of 0.55)
    params = {"warmup_min_lr": 1e-5, "warmup_max_lr": 1e-4, "warmup_num_steps": 100,
              "total_num_steps": 1000, "warmup_type": warmup_type}  # fmt: skip
    ds = {**DS_DECAY, "scheduler": {"type": scheduler, "params": params}}
    cfg = load_config(write(tmp_path / "ds_config.json", json.dumps(ds)))
    for step in (0, 9, 50):
        want = ds_warmup(step, 1e-5, 1e-4, 100, warmup_type) / 1e-4
        assert config_lr_frac(step, cfg) == pytest.approx(want)
    assert config_lr_frac(0, cfg) == pytest.approx(0.1)  # the warm-up's first LR: 1e-5
    assert cfg["lr_warmup_start"] == 1e-5


def test_deepspeed_warmup_cosine_lr_warmup_min_ratio() -> None:
    # WarmupCosineLR as DeepSpeed printed it in https://github.com/deepspeedai/DeepSpeed/issues/4904
    # (tests/ingest/test_printed_config.py): warmup_min_ratio 0.1, linear over 1000 steps.
    # before: the warm-up rose from 0 (0.5 at step 500, not 0.55)
    cfg = printed_config(DS_4904)
    for step in (0, 500, 900):
        want = ds_warmup(step, 3e-5, 3e-4, 1000, "linear") / 3e-4
        assert config_lr_frac(step, cfg) == pytest.approx(want)
    assert cfg["lr_warmup_start"] == 3e-5  # 0.1 x the optimizer's lr 3e-4
    # a log warm-up from the ratio, as a ds_config.json gives it
    ds = {**DS_COSINE, "scheduler": {"type": "WarmupCosineLR", "params": {
        "total_num_steps": 10000, "warmup_num_steps": 500, "warmup_min_ratio": 0.2}}}  # fmt: skip
    cfg = add_canonical(flatten(ds))
    want = ds_warmup(49, 0.2 * 3e-4, 3e-4, 500) / 3e-4
    assert config_lr_frac(49, cfg) == pytest.approx(want)  # 0.2 + 0.8 x log(50)/log(500)


# ----- NeMo --------------------------------------------------------------------------------

# NVIDIA/NeMo examples/nlp/language_modeling/conf/megatron_gpt_config.yaml (trimmed).
# nemo/core/optim/lr_scheduler.py, CosineAnnealing with constant_steps > 0: linear warm-up,
# then min_lr + (max_lr - min_lr) * 0.5 * (cos(pi * (step - warmup) / decay_steps) + 1) with
# decay_steps = max_steps - (constant_steps + warmup_steps), min_lr after.
NEMO_GPT = """\
name: megatron_gpt
trainer:
  devices: 1
  num_nodes: 1
  accelerator: gpu
  precision: 16
  max_epochs: 1000 # PTL default. In practice, max_steps will be reached first.
  max_steps: 100000
  gradient_clip_val: 1.0
model:
  micro_batch_size: 4 # limited by GPU memory
  global_batch_size: 8 # will use more micro batches to reach global batch size
  encoder_seq_length: 512
  max_position_embeddings: ${.encoder_seq_length}
  seed: 1234
  data:
    data_prefix: ???
    seq_length: ${model.encoder_seq_length}
  optim:
    name: fused_adam
    lr: 2e-4
    weight_decay: 0.01
    betas:
    - 0.9
    - 0.98
    sched:
      name: CosineAnnealing
      warmup_steps: 500
      constant_steps: 50000
      min_lr: 2e-5
"""


def test_nemo_cosine_annealing_with_constant_steps(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path / "megatron_gpt_config.yaml", NEMO_GPT))
    assert canon(cfg, "lr_schedule", "peak_lr", "min_lr", "warmup_steps", "total_steps",
                 "lr_decay_steps") == {
        "lr_schedule": "cosine", "peak_lr": 2e-4, "min_lr": 2e-5, "warmup_steps": 500,
        "total_steps": 100000, "lr_decay_steps": 50000,
    }  # fmt: skip
    assert canon(cfg, "precision", "grad_clip", "beta2", "global_batch_size", "seq_len") == {
        "precision": "fp16", "grad_clip": 1.0, "beta2": 0.98, "global_batch_size": 8,
        "seq_len": 512,
    }  # fmt: skip
    assert config_lr_frac(250, cfg) == pytest.approx(0.5)
    assert config_lr_frac(500 + 24750, cfg) == pytest.approx(0.1 + 0.9 * 0.5)
    assert config_lr_frac(75000, cfg) == pytest.approx(0.1)  # held at min_lr


# A NeMo model's hparams.yaml (exp_manager's log dir): the model config under `cfg:`, with
# Lightning's `precision: bf16-mixed`.
NEMO_HPARAMS = """\
cfg:
  precision: bf16-mixed
  optim:
    name: distributed_fused_adam
    lr: 0.0003
    betas:
    - 0.9
    - 0.95
    sched:
      name: CosineAnnealing
      warmup_steps: 2000
      constant_steps: 0
      min_lr: 3.0e-05
"""


def test_nemo_hparams_schedule_name(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path / "hparams.yaml", NEMO_HPARAMS))
    assert canon(cfg, "lr_schedule", "peak_lr", "min_lr", "warmup_steps", "precision") == {
        "lr_schedule": "cosine", "peak_lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 2000,
        "precision": "bf16",
    }  # fmt: skip
    assert "lr_decay_steps" not in cfg  # constant_steps 0: the decay runs to max_steps


# NeMo's other schedulers by `optim.sched.name`, as nemo/core/optim/lr_scheduler.py computes
# them (get_lr at last_epoch = step). Before, only CosineAnnealing had a shape: every other
# name left the schedule, and so the LR phase, unknown (config_lr_frac None).
def nemo_lr(name: str, step: int, sched: dict[str, Any], lr: float, max_steps: int) -> float:
    warm, min_lr = sched["warmup_steps"], sched.get("min_lr", 0.0)
    if name == "NoamAnnealing":  # _noam_annealing, step = max(1, last_epoch)
        s = max(1, step)
        out = lr * sched["d_model"] ** -0.5 * min(s**-0.5, s * warm**-1.5)
        return max(out, min_lr) if s > warm else out
    if warm > 0 and step <= warm:  # WarmupPolicy._get_warmup_lr
        return lr * (step + 1) / (warm + 1)
    hold = sched.get("hold_ratio", 0) * max_steps + warm  # WarmupHoldPolicy.hold_steps
    if name == "WarmupHoldPolicy" and warm <= step < hold:
        return lr
    if step > max_steps:
        return min_lr
    if name in ("WarmupPolicy", "WarmupHoldPolicy"):
        return lr
    if name == "WarmupAnnealing":
        mult = (step - warm) / (max_steps - warm)
        return min_lr + (1 - mult) * (lr - min_lr)
    if name == "InverseSquareRootAnnealing":
        return lr / ((step + 1) / (warm + 1)) ** 0.5
    if name == "SquareRootAnnealing":  # _squareroot_annealing(step=step, max_steps=max_steps)
        return max(lr * ((max_steps - step) / max_steps) ** 0.5, min_lr)
    assert name == "PolynomialDecayAnnealing"  # _poly_decay
    s, decay = step - warm, max_steps - warm
    if sched.get("cycle"):
        decay *= 1.0 if s == 0 else math.ceil(s / decay)
    else:
        s = min(s, decay)
    return (lr - min_lr) * (1 - s / decay) ** sched.get("power", 1.0) + min_lr


NEMO_SCHEDULERS = [
    ("WarmupPolicy", {}, "constant", (5000, 9999)),
    ("WarmupHoldPolicy", {"hold_ratio": 0.2}, "constant", (2000, 5000)),  # in, after the hold
    ("WarmupAnnealing", {"min_lr": 1e-4}, "linear", (3000, 5500, 10000)),
    ("InverseSquareRootAnnealing", {}, "inverse_sqrt", (2000, 9000)),
    ("SquareRootAnnealing", {"min_lr": 1e-4}, "sqrt_annealing", (1001, 5000, 9990)),  # clamped
    ("PolynomialDecayAnnealing", {"power": 2.0, "cycle": True, "min_lr": 1e-4}, "polynomial",
     (3000, 5500, 10000)),
    ("PolynomialDecayAnnealing", {"power": 1.0}, "linear", (5500,)),
    ("NoamAnnealing", {"d_model": 256, "min_lr": 2e-3}, "inverse_sqrt", (2000, 9000)),  # clamped
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "extra", "shape", "steps"), NEMO_SCHEDULERS, ids=[c[0] for c in NEMO_SCHEDULERS]
)
def test_nemo_schedulers(
    tmp_path: Path, name: str, extra: dict[str, Any], shape: str, steps: tuple[int, ...]
) -> None:
    lr = 2.0 if name == "NoamAnnealing" else 1e-3  # Noam's lr scales lr / sqrt(d_model x warmup)
    sched = {"name": name, "warmup_steps": 1000, **extra}
    raw = {"trainer": {"max_steps": 10000, "precision": "bf16"},
           "model": {"optim": {"name": "fused_adam", "lr": lr, "sched": sched}}}  # fmt: skip
    cfg = load_config(write(tmp_path / "hparams.yaml", json.dumps({"cfg": raw})))
    assert (cfg["lr_schedule"], cfg["warmup_steps"], cfg["total_steps"]) == (shape, 1000, 10000)
    peak = nemo_lr(name, 1000, sched, lr, 10000)  # the LR at the warm-up's end
    assert cfg["peak_lr"] == pytest.approx(peak)
    # its warm-up is (step + 1) / (warmup + 1) of the peak: a step from the linear one
    half = nemo_lr(name, 500, sched, lr, 10000) / peak
    assert config_lr_frac(500, cfg) == pytest.approx(half, abs=1 / 1000)
    # InverseSquareRootAnnealing counts from step + 1 too: within 1/warmup of its value
    rel = 1 / 1000 if name == "InverseSquareRootAnnealing" else 1e-9
    for step in steps:
        want = nemo_lr(name, step, sched, lr, 10000) / peak
        assert config_lr_frac(step, cfg) == pytest.approx(want, rel=rel), step


# ----- axolotl and LLaMA-Factory -----------------------------------------------------------

# axolotl-ai-cloud/axolotl examples/llama-3/lora-8b.yml (trimmed).
AXOLOTL = """\
base_model: NousResearch/Meta-Llama-3-8B
model_type: LlamaForCausalLM
tokenizer_type: AutoTokenizer
load_in_8bit: true
datasets:
  - path: mhenrichsen/alpaca_2k_test
    type: alpaca
val_set_size: 0.05
output_dir: ./outputs/lora-out
sequence_len: 4096
sample_packing: true
adapter: lora
lora_r: 32
gradient_accumulation_steps: 4
micro_batch_size: 2
num_epochs: 4
optimizer: adamw_bnb_8bit
lr_scheduler: cosine
learning_rate: 0.0002
bf16: auto
tf32: false
gradient_checkpointing: true
warmup_ratio: 0.1
weight_decay: 0.0
"""


def test_axolotl_yaml(tmp_path: Path) -> None:
    path = write(tmp_path / "lora-8b.yml", AXOLOTL)
    assert is_config_file(path)
    cfg = load_config(path)
    assert canon(cfg, "lr_schedule", "peak_lr", "seq_len", "micro_batch_size") == {
        "lr_schedule": "cosine", "peak_lr": 2e-4, "seq_len": 4096, "micro_batch_size": 2,
    }  # fmt: skip
    # `bf16: auto` is bf16 only where the GPU has it; num_epochs leaves the steps (and the
    # warm-up's share of them) unknown
    for key in ("precision", "total_steps", "warmup_steps"):
        assert key not in cfg, key
    # a metrics YAML with a learning rate is no config: no model, no trainer keys
    metrics = write(tmp_path / "eval_results.yaml", "learning_rate: 0.0002\nloss: 1.2\nepoch: 3\n")
    assert not is_config_file(metrics)


# axolotl's cosine with `cosine_min_lr_ratio` (src/axolotl/utils/schedulers.py,
# _get_cosine_schedule_with_min_lr_lambda): step / warmup, then
# (1 - min_lr_ratio) * 0.5 * (1 + cos(pi * progress)) + min_lr_ratio.
def test_axolotl_cosine_min_lr_ratio(tmp_path: Path) -> None:
    text = AXOLOTL.replace("warmup_ratio: 0.1", "warmup_steps: 100\nmax_steps: 1100")
    text += "cosine_min_lr_ratio: 0.1\n"
    cfg = load_config(write(tmp_path / "qwen_lora.yaml", text))
    assert canon(cfg, "min_lr", "warmup_steps", "total_steps") == {
        "min_lr": 2e-5, "warmup_steps": 100, "total_steps": 1100,
    }  # fmt: skip
    assert config_lr_frac(50, cfg) == pytest.approx(0.5)
    assert config_lr_frac(600, cfg) == pytest.approx(0.9 * 0.5 + 0.1)
    assert config_lr_frac(1100, cfg) == pytest.approx(0.1)


# hiyouga/LLaMA-Factory examples/train_lora/llama3_lora_sft.yaml
LLAMA_FACTORY = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
"""


def test_llama_factory_yaml(tmp_path: Path) -> None:
    path = write(tmp_path / "llama3_lora_sft.yaml", LLAMA_FACTORY)
    assert is_config_file(path)
    cfg = load_config(path)
    assert canon(cfg, "lr_schedule", "peak_lr", "precision", "seq_len") == {
        "lr_schedule": "cosine", "peak_lr": 1e-4, "precision": "bf16", "seq_len": 2048,
    }  # fmt: skip
    assert "warmup_steps" not in cfg and "total_steps" not in cfg  # by epochs


# ----- torchtitan --------------------------------------------------------------------------

# pytorch/torchtitan torchtitan/models/llama3/train_configs/llama3_8b.toml (trimmed).
TITAN_8B = """\
# torchtitan Config.toml
[job]
dump_folder = "./outputs"
description = "Llama 3 8B training"

[model]
name = "llama3"
flavor = "8B"

[optimizer]
name = "AdamW"
lr = 3e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 200  # lr scheduler warm up

[training]
local_batch_size = 1
seq_len = 8192
max_norm = 1.0  # grad norm clipping
steps = 1000
dataset = "c4"

[validation]
enabled = false
steps = 10
"""


def titan_lambda(c: int, steps: int, warm: int, ratio: float | None, kind: str, floor: float
                 ) -> float:  # fmt: skip
    """torchtitan/components/lr_scheduler.py, linear_warmup_stable_decay at scheduler step
    c (train step c + 1): decay = round(steps * ratio) (steps - warm when unset), stable =
    steps + 1 - warm - decay; (c + 1) / warm, then 1, then progress = (c + 1 - warm -
    stable) / decay shaped linear, sqrt or cosine, scaled into [min_lr_factor, 1]."""
    decay = steps - warm if ratio is None else round(steps * ratio)
    stable = steps + 1 - warm - decay
    if c < warm:
        return (c + 1) / warm
    if c < warm + stable:
        return 1.0
    p = (c + 1 - warm - stable) / decay
    adj = {"linear": 1 - p, "sqrt": 1 - math.sqrt(p), "cosine": 0.5 * (1 + math.cos(math.pi * p))}
    return floor + (1 - floor) * adj[kind]


def test_torchtitan_linear_decay_after_warmup(tmp_path: Path) -> None:
    path = write(tmp_path / "llama3_8b.toml", TITAN_8B)
    assert is_config_file(path)
    cfg = load_config(path)
    assert canon(cfg, "lr_schedule", "peak_lr", "warmup_steps", "total_steps", "min_lr") == {
        "lr_schedule": "linear", "peak_lr": 3e-4, "warmup_steps": 200, "total_steps": 1000,
        "min_lr": 0.0,
    }  # fmt: skip
    assert canon(cfg, "grad_clip", "seq_len") == {"grad_clip": 1.0, "seq_len": 8192}
    for step in (100, 600, 999):  # the LR of train step s is the lambda at s - 1
        want = titan_lambda(step - 1, 1000, 200, None, "linear", 0.0)
        assert config_lr_frac(step, cfg) == pytest.approx(want, abs=1 / 800)


def test_torchtitan_wsd(tmp_path: Path) -> None:
    text = TITAN_8B.replace(
        "warmup_steps = 200  # lr scheduler warm up",
        'warmup_steps = 200\ndecay_ratio = 0.2\ndecay_type = "cosine"\nmin_lr_factor = 0.1',
    ).replace('dataset = "c4"', 'dataset = "c4"\nmixed_precision_param = "bfloat16"')
    cfg = load_config(write(tmp_path / "llama3_8b_wsd.toml", text))
    assert canon(cfg, "lr_schedule", "lr_wsd_decay_steps", "lr_wsd_decay_shape", "min_lr",
                 "precision") == {
        "lr_schedule": "wsd", "lr_wsd_decay_steps": 200, "lr_wsd_decay_shape": "cosine",
        "min_lr": 3e-5, "precision": "bf16",
    }  # fmt: skip
    for step in (700, 900, 1000):  # stable at 700 (past the run's half), then the cosine
        want = titan_lambda(step - 1, 1000, 200, 0.2, "cosine", 0.1)
        assert config_lr_frac(step, cfg) == pytest.approx(want, abs=0.01)


def test_torchtitan_old_lr_min_is_a_factor(tmp_path: Path) -> None:
    # Older torchtitan (job_config.py LRScheduler.lr_min: "Min lr ratio for lr scheduler"):
    # the floor is optimizer.lr * lr_min, not lr_min itself (timm's lr_min is absolute).
    text = TITAN_8B.replace("warmup_steps = 200  # lr scheduler warm up",
                            'warmup_steps = 200\ndecay_type = "sqrt"\nlr_min = 0.1')  # fmt: skip
    cfg = load_config(write(tmp_path / "llama3_8b.toml", text))
    assert cfg["min_lr"] == 3e-5
    # sqrt has no canonical shape of its own: a WSD whose decay starts after the warm-up
    assert canon(cfg, "lr_schedule", "lr_wsd_decay_steps", "lr_wsd_decay_shape") == {
        "lr_schedule": "wsd", "lr_wsd_decay_steps": 800, "lr_wsd_decay_shape": "sqrt",
    }  # fmt: skip
    want = titan_lambda(599, 1000, 200, None, "sqrt", 0.1)
    assert config_lr_frac(600, cfg) == pytest.approx(want, abs=0.01)
    # a pyproject.toml is no config
    assert not is_config_file(write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n'))


# ----- HF Trainer --------------------------------------------------------------------------


def hf_run(tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    """training_args.json as transformers writes it, and a trainer_state.json whose
    max_steps (300) is all that says how long an epochs-run was."""
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), learning_rate=2e-5, num_train_epochs=3, adam_beta2=0.98,
        report_to="none", use_cpu=True, **kwargs,
    )  # fmt: skip
    write(tmp_path / "training_args.json", args.to_json_string())
    history = [{"step": s, "epoch": s / 100, "loss": 2.0} for s in range(10, 301, 10)]
    state = {"max_steps": 300, "global_step": 300, "log_history": history}
    path = write(tmp_path / "trainer_state.json", json.dumps(state))
    return HfTrainerReader().read(path).config


# transformers optimization.py, _get_cosine_with_min_lr_schedule_with_warmup_lr_lambda:
# step / warmup, then factor = 0.5 * (1 + cos(pi * progress)) * (1 - min_lr_rate) +
# min_lr_rate; min_lr gives min_lr_rate = min_lr / learning_rate. transformers 5:
# warmup_steps < 1 is a share, ceil(0.1 * 300) = 30 steps.
@pytest.mark.parametrize(
    "kwargs", [{"min_lr_rate": 0.1}, {"min_lr": 2e-6}], ids=["min_lr_rate", "min_lr"]
)
def test_hf_cosine_with_min_lr_by_epochs(tmp_path: Path, kwargs: dict[str, float]) -> None:
    cfg = hf_run(tmp_path, lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs=kwargs,
                 warmup_steps=0.1)  # fmt: skip
    assert canon(cfg, "lr_schedule", "peak_lr", "min_lr", "warmup_steps", "total_steps") == {
        "lr_schedule": "cosine", "peak_lr": 2e-5, "min_lr": 2e-6, "warmup_steps": 30,
        "total_steps": 300,
    }  # fmt: skip
    assert cfg["beta2"] == 0.98
    assert config_lr_frac(15, cfg) == pytest.approx(0.5)
    assert config_lr_frac(165, cfg) == pytest.approx(0.5 * 0.9 + 0.1)
    assert config_lr_frac(300, cfg) == pytest.approx(0.1)


def test_hf_v4_warmup_ratio_beside_zero_steps(tmp_path: Path) -> None:
    # transformers 4.x training_args.json: warmup_steps 0 is "not set", the ratio applies
    # (get_warmup_steps: warmup_steps if > 0 else ceil(num_training_steps * warmup_ratio)).
    args = {"learning_rate": 5e-5, "lr_scheduler_type": "linear", "warmup_ratio": 0.05,
            "warmup_steps": 0, "max_steps": 2000, "num_train_epochs": 3.0,
            "per_device_train_batch_size": 8}  # fmt: skip
    cfg = load_config(write(tmp_path / "training_args.json", json.dumps(args, indent=2)))
    assert cfg["warmup_steps"] == 100 and cfg["warmup_steps_raw"] == 0
    assert config_lr_frac(50, cfg) == pytest.approx(0.5)
    assert config_lr_frac(1050, cfg) == pytest.approx(0.5)


# Megatron-LM's WSD arguments (megatron/training/arguments.py: --lr-decay-style WSD,
# --lr-wsd-decay-style, --lr-wsd-decay-iters), as its CI model_config.yaml writes them. Its
# scheduler (megatron/core/optimizer_param_scheduler.py) holds the peak until
# lr_decay_iters - lr_wsd_decay_iters, then min_lr + coeff x (lr - min_lr) with coeff
# 1 - sqrt(r) (minus_sqrt) or 2 x 0.5^r - 1 (exponential), r the share of the decay done.
MEGATRON_WSD = {
    "MODEL_ARGS": {
        "--lr": 3.0e-4, "--min-lr": 3.0e-5, "--lr-warmup-iters": 100, "--train-iters": 10000,
        "--lr-decay-style": "WSD", "--lr-wsd-decay-style": "minus_sqrt",
        "--lr-wsd-decay-iters": 1000,
    }
}  # fmt: skip


@pytest.mark.parametrize(
    ("style", "coeff"), [("minus_sqrt", 1 - 0.5**0.5), ("exponential", 2 * 0.5**0.5 - 1)]
)
def test_megatron_wsd_decay(style: str, coeff: float) -> None:
    # before: wsd with no decay length, so only the run's first half was known (stable)
    raw = {"MODEL_ARGS": {**MEGATRON_WSD["MODEL_ARGS"], "--lr-wsd-decay-style": style}}
    cfg = add_canonical(flatten(raw))
    assert (cfg["lr_schedule"], cfg["lr_wsd_decay_steps"]) == ("wsd", 1000)
    assert config_lr_frac(8000, cfg) == 1.0  # still stable: the decay starts at 9000
    assert config_lr_frac(9500, cfg) == pytest.approx(0.1 + 0.9 * coeff)
    assert config_lr_frac(10000, cfg) == pytest.approx(0.1)


def test_megatron_warmup_fraction_is_of_the_decay_length() -> None:
    # Megatron: lr_warmup_steps = lr_warmup_fraction x lr_decay_steps; before, the fraction
    # was taken of train_iters (100 here instead of 80)
    raw = {"MODEL_ARGS": {"--lr-warmup-fraction": 0.01, "--train-iters": 10000,
                          "--lr-decay-iters": 8000, "--lr-decay-style": "cosine"}}  # fmt: skip
    assert add_canonical(flatten(raw))["warmup_steps"] == 80
    # without lr_decay_iters Megatron decays over train_iters, and so warms up on them
    del raw["MODEL_ARGS"]["--lr-decay-iters"]
    assert add_canonical(flatten(raw))["warmup_steps"] == 100
    # HF's warmup_ratio stays a share of the run
    hf = {"warmup_ratio": 0.1, "max_steps": 1000, "lr_decay_steps": 500}
    assert add_canonical(hf)["warmup_steps"] == 100
