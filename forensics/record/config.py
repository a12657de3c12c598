"""config.json of a recorded run: what the later stages need to know about the run's set-up.

Keys are spelt the way `forensics.ingest.config` finds them without help: `beta1`, `beta2`,
`peak_lr`, `weight_decay`, `eps`, `grad_clip`, `precision`, `world_size`, `seed`, `seq_len`,
`micro_batch_size`, `gradient_accumulation_steps`; the optimizer's own hyper-parameters sit
under `optimizer`, the model's configuration under `model`, the data order under `data`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def run_config(
    *,
    model: nn.Module | None,
    optimizer: torch.optim.Optimizer | None,
    world_size: int,
    framework: str,
    recorder: dict[str, Any],
) -> dict[str, Any]:
    out: dict[str, Any] = {"framework": framework, "recorder": recorder, "world_size": world_size}
    if optimizer is not None:
        opt = optimizer_config(optimizer)
        out["optimizer"] = opt
        for key in ("beta1", "beta2", "eps", "weight_decay"):
            if key in opt:
                out[key] = opt[key]
        if "initial_lr" in opt:  # set by torch LR schedulers: the schedule's base LR
            out["peak_lr"] = opt["initial_lr"]
    if model is not None:
        out["model"] = model_config(model)
        out["n_params"] = sum(p.numel() for p in model.parameters())
        out["precision"] = param_precision(model)
    return out


def optimizer_config(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Class name and the first param group's scalar hyper-parameters (betas split)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate/Lightning wrappers
    groups = getattr(inner, "param_groups", [])
    out: dict[str, Any] = {"name": type(inner).__name__, "n_param_groups": len(groups)}
    if not groups:
        return out
    for key, value in groups[0].items():
        if key == "params":
            continue
        plain = _plain(value)
        if plain is not None:
            out[key] = plain
    if "lr" in out:  # the LR when the config was written, not the peak: not spelt `lr`
        out["start_lr"] = out.pop("lr")
    betas = out.get("betas")
    if isinstance(betas, list) and len(betas) == 2:
        out["beta1"], out["beta2"] = betas
    decays = sorted({float(g.get("weight_decay", 0.0)) for g in groups})
    if len(decays) > 1:
        out["weight_decay_groups"] = decays
    return out


def model_config(model: nn.Module) -> dict[str, Any]:
    """The model's own configuration: HF `config`, the bundled model's `cfg`, Lightning
    `hparams`, else the class name."""
    out: dict[str, Any] = {"class": type(model).__name__}
    for attr in ("config", "cfg", "hparams"):
        cfg = getattr(model, attr, None)
        if cfg is None:
            continue
        data = _as_dict(cfg)
        if data:
            out.update({k: v for k, v in data.items() if _plain(v) is not None})
            break
    return out


def param_precision(model: nn.Module) -> str:
    """fp32 / bf16 / fp16 of the parameters (autocast and loss scaling are set by callers)."""
    for p in model.parameters():
        return _DTYPE_NAMES.get(p.dtype, str(p.dtype).removeprefix("torch."))
    return "fp32"


def _as_dict(cfg: Any) -> dict[str, Any]:
    if hasattr(cfg, "to_dict"):
        data = cfg.to_dict()
        return dict(data) if isinstance(data, Mapping) else {}
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    if isinstance(cfg, Mapping):
        return dict(cfg)
    return {}


def _plain(value: Any) -> Any:
    """A JSON-able copy of a setting (tensors become numbers, tuples lists), else None."""
    if isinstance(value, torch.Tensor):
        return float(value) if value.numel() == 1 else None
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        items = [_plain(v) for v in value]
        return items if all(i is not None for i in items) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if _plain(v) is not None}
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return None
