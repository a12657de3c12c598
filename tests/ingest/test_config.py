"""Run-config files: recognition, parsing (JSON / YAML / Namespace dumps), canonical keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from forensics.detect.schedule import config_lr_frac
from forensics.errors import InputError
from forensics.ingest.config import add_canonical, flatten, is_config_file, load_config

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "name",
    ["config.json", "config.yaml", "hparams.yaml", "training_args.json", "train_config.json",
     "params.json", "args.json", "model_config.yaml", "my_run-config.yml"],
)  # fmt: skip
def test_config_names_are_recognised(tmp_path: Path, name: str) -> None:
    body = json.dumps({"lr": 0.1}) if name.endswith(".json") else "lr: 0.1\n"
    assert is_config_file(write(tmp_path / name, body))


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("trainer_state.json", json.dumps({"log_history": [], "max_steps": 1})),
        ("config.json", '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n'),  # JSONL
        ("config.json", json.dumps({"lm loss": {"step_interval": 5, "values": {"1": 2.0}}})),
        ("config.json", "[1, 2, 3]"),
        ("metrics.json", json.dumps({"lr": 0.1})),
        ("args.txt", "step:1 loss:2.0 this is a log line, not arguments\n"),
    ],
)
def test_metric_files_are_not_configs(tmp_path: Path, name: str, body: str) -> None:
    assert not is_config_file(write(tmp_path / name, body))


def test_json_nested_keys_are_flattened_and_kept(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path / "config.json", json.dumps({"optimizer": {"betas": [0.9, 0.95], "lr": 6e-4}})
        )
    )
    assert cfg["optimizer.betas"] == [0.9, 0.95] and cfg["optimizer.lr"] == 6e-4
    assert (cfg["beta1"], cfg["beta2"], cfg["peak_lr"]) == (0.9, 0.95, 6e-4)


def test_lightning_hparams_with_python_tags() -> None:
    cfg = load_config(FIX / "lightning" / "lightning_logs" / "version_0" / "hparams.yaml")
    assert cfg["betas"] == [0.9, 0.95] and cfg["beta2"] == 0.95 and cfg["peak_lr"] == 0.003


def test_argparse_namespace_dump(tmp_path: Path) -> None:
    text = "Namespace(lr=0.0003, adam_beta2=0.95, clip_grad=1.0, bf16=True, fp16=False, " \
        "seq_length=2048, global_batch_size=512, train_iters=1000, device=cuda(0))\n"  # fmt: skip
    cfg = load_config(write(tmp_path / "args.txt", text))
    assert cfg["lr"] == 0.0003 and cfg["device"] == "cuda(0)"
    assert cfg["beta2"] == 0.95 and cfg["grad_clip"] == 1.0 and cfg["precision"] == "bf16"
    assert cfg["tokens_per_step"] == 512 * 2048 and cfg["total_steps"] == 1000


def test_key_value_args_txt(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path / "args.txt", "--lr 3e-4\nwarmup_iters=100\nseed: 5\n"))
    assert cfg["peak_lr"] == 3e-4 and cfg["warmup_steps"] == 100 and cfg["seed"] == 5


def test_wandb_config_yaml_is_unwrapped() -> None:
    cfg = load_config(FIX / "wandb" / "config.yaml")
    assert cfg["optimizer.lr"] == 0.0006 and cfg["block_size"] == 1024
    assert not any(k.startswith("_wandb") for k in cfg)
    assert cfg["seq_len"] == 1024 and cfg["precision"] == "bf16" and cfg["warmup_steps"] == 2000
    assert "global_batch_size" not in cfg  # micro batch x accumulation, but world size unknown


CANONICAL_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"optimizer": {"betas": "(0.9, 0.98)"}}, {"beta1": 0.9, "beta2": 0.98}),
    ({"adam_beta1": 0.8, "adam_beta2": 0.99}, {"beta1": 0.8, "beta2": 0.99}),
    ({"beta1": 0.0, "betas": [0.9, 0.95]}, {"beta1": 0.0, "beta2": 0.95}),
    ({"learning_rate": "3e-4", "min_lr": 3e-5}, {"peak_lr": 3e-4, "min_lr": 3e-5}),
    ({"scheduler": {"max_lr": 1e-3, "eta_min": 1e-5}}, {"peak_lr": 1e-3, "min_lr": 1e-5}),
    ({"lr_warmup_iters": 2000}, {"warmup_steps": 2000}),
    ({"warmup_ratio": 0.05, "max_steps": 1000}, {"warmup_steps": 50, "total_steps": 1000}),
    ({"max_grad_norm": 1.0}, {"grad_clip": 1.0}),
    ({"gradient_clip_val": 0.5}, {"grad_clip": 0.5}),
    ({"precision": "16-mixed"}, {"precision": "fp16"}),
    ({"mixed_precision": "bf16"}, {"precision": "bf16"}),
    ({"dtype": "float32"}, {"precision": "fp32"}),
    ({"fp16": True, "bf16": False}, {"precision": "fp16"}),
    ({"num_nodes": 4, "gpus_per_node": 8}, {"world_size": 32}),
    ({"trainer": {"devices": 8}}, {"world_size": 8}),
    ({"n_gpus": 16}, {"world_size": 16}),
    ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8, "world_size": 8,
      "max_seq_length": 1024},
     {"global_batch_size": 256, "seq_len": 1024, "tokens_per_step": 262144}),
    ({"train_iters": 500000, "seed": 1234}, {"total_steps": 500000, "seed": 1234}),
    ({"model": {"vocab_size": 50280}}, {"vocab_size": 50280}),
    ({"padded_vocab_size": 50304}, {"vocab_size": 50304}),
    ({"max_steps": -1}, {}),
    ({"MODEL_ARGS": {"--lr": 3.0e-4, "--adam-beta2": 0.95, "--seq-length": 4096, "--bf16": True}},
     {"peak_lr": 3e-4, "beta2": 0.95, "seq_len": 4096, "precision": "bf16"}),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "expected"), CANONICAL_CASES)
def test_canonical_keys(raw: dict[str, Any], expected: dict[str, Any]) -> None:
    cfg = add_canonical(flatten(raw))
    for key, value in expected.items():
        assert cfg[key] == pytest.approx(value) if isinstance(value, float) else cfg[key] == value
    assert "total_steps" in cfg or "max_steps" not in raw or raw["max_steps"] == -1
    for key in flatten(raw):
        assert key in cfg  # raw keys are kept


def test_canonical_value_wins_raw_is_kept(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path / "hparams.yaml", "precision: bf16-mixed\n"))
    assert cfg["precision"] == "bf16" and cfg["precision_raw"] == "bf16-mixed"


@pytest.mark.parametrize(
    ("name", "body", "match"),
    [
        (
            "config.json",
            '{\n  "lr": 0.1,\n  "betas": [0.9,\n}\n',
            r"config\.json:4: not valid JSON",
        ),
        ("config.yaml", "lr: 0.1\nbetas: [0.9, 0.95\nseed: 1\n", r"config\.yaml:3: not valid YAML"),
        ("config.yaml", "- 1\n- 2\n", r"config\.yaml: config is a list \(expected a mapping\)"),
        ("args.txt", "Namespace(lr=0.1, \n", r"args\.txt:1: not a valid Namespace"),
    ],
)
def test_malformed_config_names_file_and_line(
    tmp_path: Path, name: str, body: str, match: str
) -> None:
    with pytest.raises(InputError, match=match):
        load_config(write(tmp_path / name, body))


def test_yaml_dump_of_config_round_trips(tmp_path: Path) -> None:
    raw = {"model": {"n_layer": 12, "seq_len": 2048}, "optim": {"lr": 6e-4, "betas": [0.9, 0.95]}}
    cfg = load_config(write(tmp_path / "config.yaml", yaml.safe_dump(raw)))
    assert cfg["model.n_layer"] == 12 and cfg["seq_len"] == 2048 and cfg["beta2"] == 0.95


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_hf_model_config_dtype_is_not_the_training_precision(tmp_path: Path, dtype: str) -> None:
    """`save_pretrained` writes the weights' storage dtype into config.json: float32 for an
    fp16-autocast run, bfloat16 for a model loaded in bf16. Neither says how the run trained
    (a run read as fp32 would turn its fp16 overflow steps into hardware faults); the
    Trainer's fp16/bf16 flags do (training_args.bin, forensics/ingest/hf_args.py)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, dtype=dtype,
    )  # fmt: skip
    cfg.save_pretrained(tmp_path)
    flat = flatten(load_config(tmp_path / "config.json"))
    assert "precision" not in add_canonical(flat)
    assert add_canonical({**flat, "fp16": True})["precision"] == "fp16"


def test_a_training_config_dtype_is_the_precision() -> None:
    """nanoGPT's config (`dtype = 'bfloat16'`) is the autocast dtype the run trained in."""
    assert add_canonical({"dtype": "bfloat16", "block_size": 1024})["precision"] == "bf16"


# llm-foundry's MPT-125M pre-training recipe, as printed in mosaicml/llm-foundry
# scripts/train/yamls/pretrain/mpt-125m.yaml (its optimisation part): Composer writes
# durations as time strings and the LR's floor as a share of the peak.
MPT_125M = """\
scheduler:
  name: cosine_with_warmup
  t_warmup: 100ba
  alpha_f: 0.1

optimizer:
  name: decoupled_adamw
  lr: 6.0e-4
  betas: [0.9, 0.95]
  eps: 1.0e-8
  weight_decay: 0.0

algorithms:
  gradient_clipping:
    clipping_type: norm
    clipping_threshold: 1.0

max_duration: 4800ba
eval_interval: 500ba
global_train_batch_size: 256
device_eval_batch_size: 16
device_train_microbatch_size: 16
precision: amp_bf16
"""


def test_llm_foundry_yaml_gives_the_schedule(tmp_path: Path) -> None:
    # before: warmup_steps, total_steps, min_lr and grad_clip missing (`100ba`, `4800ba` are
    # no numbers; alpha_f and Composer's clipping algorithm were not read), so a run that
    # logs no LR had no LR phase
    cfg = load_config(write(tmp_path / "mpt-125m.yaml", MPT_125M))
    got = {k: cfg.get(k) for k in ("peak_lr", "min_lr", "warmup_steps", "total_steps",
                                   "lr_schedule", "grad_clip", "beta2", "precision")}  # fmt: skip
    assert got == {"peak_lr": 6e-4, "min_lr": 6e-5, "warmup_steps": 100, "total_steps": 4800,
                   "lr_schedule": "cosine", "grad_clip": 1.0, "beta2": 0.95,
                   "precision": "bf16"}  # fmt: skip
    # Composer's cosine: alpha_f + (1 - alpha_f)(1 + cos(pi (t - 100) / 4700)) / 2
    assert config_lr_frac(50, cfg) == pytest.approx(0.5)
    assert config_lr_frac(2450, cfg) == pytest.approx(0.55)
    assert config_lr_frac(4800, cfg) == pytest.approx(0.1)


COMPOSER_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    # a share of the run, in Composer's and in HF's spelling
    ({"scheduler": {"t_warmup": "0.05dur"}, "max_duration": "2000ba"},
     {"warmup_steps": 100, "total_steps": 2000}),
    # an epoch count needs the epoch's length: no step count from it
    ({"scheduler": {"t_warmup": "100ba"}, "max_duration": "1ep"}, {"warmup_steps": 100}),
    # OLMo counting its schedule in tokens: t_warmup is no step count (max_duration, a
    # number, counts steps; "2e12T" would count tokens)
    ({"scheduler": {"units": "tokens", "t_warmup": 2000000000}, "max_duration": 1000},
     {"total_steps": 1000}),
    # an explicit floor wins over the share; a share above 1 is no share
    ({"lr": 1e-3, "min_lr": 1e-5, "alpha_f": 0.1}, {"min_lr": 1e-5}),
    ({"lr": 1e-3, "alpha_f": 2.0}, {}),
    ({"lr": 2e-5, "lr_scheduler_kwargs": {"min_lr_rate": 0.1}}, {"min_lr": 2e-6}),
    # adaptive (AGC) and value clipping thresholds are no norm to clip at
    ({"algorithms": {"gradient_clipping": {"clipping_type": "adaptive",
                                           "clipping_threshold": 0.01}}}, {}),
    ({"algorithms": {"gradient_clipping": {"clipping_threshold": 0.5}}}, {"grad_clip": 0.5}),
    ({"scheduler": {"name": "inv_sqrt_with_warmup"}}, {"lr_schedule": "inverse_sqrt"}),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "expected"), COMPOSER_CASES)
def test_composer_durations_and_floors(raw: dict[str, Any], expected: dict[str, Any]) -> None:
    cfg = add_canonical(flatten(raw))
    canon = ("warmup_steps", "total_steps", "min_lr", "grad_clip", "lr_schedule")
    assert {k: cfg[k] for k in canon if k in cfg} == expected


def test_llm_foundry_run_folder_reads_its_yaml(tmp_path: Path) -> None:
    """An llm-foundry run: the console log Composer wrote and the recipe YAML under the name
    its user gave it. Before, `mpt-125m.yaml` was no config name and the run had no config:
    no warm-up, no schedule, beta2 unknown."""
    from forensics.ingest import ingest
    from forensics.store import open_store

    run = tmp_path / "mpt-run"
    run.mkdir()
    write(run / "mpt-125m.yaml", MPT_125M)
    blocks = [f"[batch={s}/4800]:\n\t Train time/batch: {s - 1}\n\t Train loss/train/total: "
              f"{9.0 - 0.01 * s:.4f}\n" for s in range(1, 61)]  # fmt: skip
    write(run / "train.log", "".join(blocks))
    with open_store(tmp_path / "f.duckdb") as store:
        ingest(store, [run], run="mpt")
        cfg = json.loads(store.query("SELECT config FROM runs")["config"][0])
    assert (cfg["warmup_steps"], cfg["total_steps"], cfg["lr_schedule"]) == (100, 4800, "cosine")
    assert (cfg["beta2"], cfg["min_lr"], cfg["grad_clip"]) == (0.95, 6e-5, 1.0)
    assert config_lr_frac(50, cfg) == pytest.approx(0.5)
