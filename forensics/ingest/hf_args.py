"""The batch settings a Hugging Face Trainer saved in `training_args.bin` beside its checkpoints.

`training_args.bin` is a torch pickle of `transformers.TrainingArguments` (the Trainer saves
it in every `checkpoint-N/`); loading it needs torch and transformers (the `[hf]` extra),
imported here only when a run has one, and `weights_only=False`, as transformers loads it
itself: it must be the user's own file. What it gives the run config:

- `per_device_train_batch_size`, `gradient_accumulation_steps` (canonical `micro_batch_size`,
  `grad_accum`);
- `world_size` only where the args record it: `local_rank == -1` means the Trainer ran as one
  process (no torchrun/accelerate launcher), on max(1, n_gpu) devices; a launched run's
  world size is not saved (`TrainingArguments.world_size` is computed from the environment
  of whoever loads the file), so it stays unknown and `world_size_from` says so.

- the optimizer and schedule the rules read: `learning_rate`, `adam_beta1`, `adam_beta2`,
  `adam_epsilon`, `max_grad_norm`, `weight_decay`, `warmup_steps` / `warmup_ratio` (where
  set), `lr_scheduler_type`, `max_steps`, `seed` (canonical `peak_lr`, `beta2`,
  `grad_clip`...: stale beta2 and LR-too-high become evaluable from an HF run);
- `fp16` / `bf16` where one is true: the training's mixed precision, which wins over the
  `dtype` of the model's `config.json` (the dtype its weights are stored in). Both false
  leaves that dtype: a model loaded in bf16 without autocast trains in bf16.

A file that cannot be read gives a warning naming it; ingest goes on without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

NAME = "training_args.bin"


def training_args_config(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Config keys from one `training_args.bin` (module doc), and warnings."""
    try:
        from forensics.replay.hf_data import DataUnavailable, load_training_args
    except ImportError as exc:
        return {}, [f"{path}: not read ({exc.name} is not installed: the [hf] extra)"]
    try:
        args = load_training_args(path)
    except DataUnavailable as exc:
        return {}, [f"{exc}; the batch size and optimizer settings stay unknown"]
    return _keys(vars(args)), []


SETTINGS = ("learning_rate", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm",
            "weight_decay", "seed")  # fmt: skip
POSITIVE = ("warmup_steps", "warmup_ratio", "max_steps")  # 0 / -1 mean "not set"


def _keys(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: d[k] for k in SETTINGS if _number(d.get(k))}
    out |= {k: d[k] for k in POSITIVE if _number(d.get(k)) and d[k] > 0}
    if d.get("lr_scheduler_type") is not None:
        kind = d["lr_scheduler_type"]
        out["lr_scheduler_type"] = str(getattr(kind, "value", kind))
    out |= {k: True for k in ("fp16", "bf16") if d.get(k) is True}
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        if isinstance(d.get(key), int) and d[key] > 0:
            out[key] = d[key]
    if d.get("local_rank") == -1:
        n_gpu = d.get("_n_gpu")
        out["world_size"] = max(1, n_gpu if isinstance(n_gpu, int) else 1)
        out["world_size_from"] = f"{NAME} (one process: local_rank -1, n_gpu {n_gpu})"
    else:
        out["world_size_from"] = (
            f"not recorded: {NAME} says the run was launched on several processes "
            f"(local_rank {d.get('local_rank')}) but not how many"
        )
    return out


def _number(v: Any) -> bool:
    """A set number (seed 0 and beta 0.0 are set values; None and bools are not)."""
    return isinstance(v, int | float) and not isinstance(v, bool)
