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
        return {}, [f"{exc}; the batch size per step stays unknown"]
    return _keys(vars(args)), []


def _keys(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
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
