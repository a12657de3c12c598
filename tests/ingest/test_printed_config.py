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
from forensics.ingest.printed_config import printed_config
from forensics.store import open_store

STEPS = "".join(f"step {s:4d} | loss {3.0 - s / 1000:.4f} | lr 3.0e-04\n" for s in range(1, 60))


def _ingested_config(path: Path, tmp_path: Path) -> dict[str, Any]:
    with open_store(tmp_path / "c.duckdb") as store:
        ingest(store, [path], run="r")
        return store.run_config("r")


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
