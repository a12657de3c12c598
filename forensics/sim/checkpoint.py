"""Checkpoint files of the simulator: a plain dict that `torch.load(..., weights_only=True)` reads.

Layout of `<run>/checkpoints/ckpt_000500.pt` (the state AFTER step 500):

    {"model": state_dict (fp32 master weights),
     "optimizer": AdamW state_dict (exp_avg, exp_avg_sq, step per parameter; param_groups),
     "scaler": LossScaler.state_dict(),
     "rng": {"torch": uint8 tensor, "cuda": [uint8 tensors], "numpy": {...}, "python": {...}},
     "config": GPTConfig.to_dict() (has "arch": "forensics-gpt"),
     "train_config": TrainConfig.to_dict(),
     "step": 500}

Only tensors, numbers, strings, lists, tuples and dicts, so no pickled code runs on load.
Replay API: `load_checkpoint(path)` -> the model alone; `read_checkpoint(path)` -> the dict.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from forensics.errors import SimulationError
from forensics.sim.model import ARCH, GPT, GPTConfig


def checkpoint_path(run_dir: Path, step: int) -> Path:
    """Where the checkpoint of `step` lives in a run folder."""
    return Path(run_dir) / "checkpoints" / f"ckpt_{step:06d}.pt"


def list_checkpoints(run_dir: Path) -> list[int]:
    """Steps that have a checkpoint in a run folder, ascending."""
    folder = Path(run_dir) / "checkpoints"
    return sorted(int(p.stem.split("_")[1]) for p in folder.glob("ckpt_*.pt"))


def read_checkpoint(path: Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint dict, loaded with weights_only=True; checks it is ours."""
    path = Path(path)
    if not path.is_file():
        raise SimulationError(f"{path}: checkpoint not found")
    from forensics.ingest.checkpoints import load_torch_file

    ckpt = load_torch_file(path, device)  # untrusted file: one line, never a traceback
    if not isinstance(ckpt, dict) or ckpt.get("config", {}).get("arch") != ARCH:
        raise SimulationError(f"{path}: not a forensics-gpt checkpoint (config.arch != {ARCH})")
    return ckpt


def load_checkpoint(path: Path, device: str | torch.device = "cpu") -> GPT:
    """Rebuild the model (fp32, eval mode) from a checkpoint file alone."""
    ckpt = read_checkpoint(path, device)
    model = GPT(GPTConfig.from_dict(ckpt["config"])).to(device)
    model.load_state_dict(ckpt["model"])
    return model.eval()


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically (tmp file then rename) so a crash never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)


def rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors/numbers (weights_only-safe)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    version, py_state, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
        "numpy": {
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "python": {
            "version": int(version),
            "state": torch.tensor(py_state, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of rng_state."""
    torch.set_rng_state(state["torch"].cpu())
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, n["pos"], n["has_gauss"], n["cached"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["state"].tolist()), p["gauss_next"]))
