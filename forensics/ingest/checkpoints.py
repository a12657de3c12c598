"""Index model checkpoints: what they hold, and per-parameter weight and Adam statistics.

Replay needs to know which checkpoints exist (step, optimizer state, model config); detection
rules want per-parameter norms and Adam's second-moment statistics around an incident. Both
come from one pass over each checkpoint that keeps no tensor: torch files are loaded with
`mmap=True, weights_only=True` (no code from the file runs; the few non-tensor types real
checkpoints carry, argparse.Namespace and numpy arrays/scalars, are allow-listed), safetensors
are read one tensor at a time, and each tensor is reduced to a few numbers before the next.

Layouts understood: a dict with the model under 'model'/'model_state_dict'/'state_dict'/
'module' and the optimizer under 'optimizer'/'optimizer_state_dict'/'optim'; a bare state
dict; `.safetensors` files; Hugging Face `checkpoint-N/` folders (safetensors or
pytorch_model*.bin, optimizer.pt, config.json, trainer_state.json).

Optimizer indices are matched to parameter names by shape, in order: torch numbers
parameters across param_groups in group order, and groups (decay / no-decay, as nanoGPT and
the HF Trainer build them) keep model order, so the i-th optimizer entry is the first
not-yet-matched parameter of the same shape. Entries that match nothing are named
`param_<idx>` (with a warning).
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import struct
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from forensics.errors import InputError
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
    import polars as pl
else:
    np = lazy_module("numpy")
    pl = lazy_module("polars")

if TYPE_CHECKING:  # torch is imported on first use: `forensics` commands that never read a
    import torch  # checkpoint should not pay for importing it


def stats_schema() -> dict[str, Any]:
    return {
        "step": pl.Int64,
        "param": pl.Utf8,
        "numel": pl.Int64,
        "param_norm": pl.Float64,
        "exp_avg_norm": pl.Float64,
        "exp_avg_sq_mean": pl.Float64,
        "exp_avg_sq_max": pl.Float64,
        "adam_step": pl.Float64,
        "nonfinite": pl.Int64,
    }


REFERENCE_ARCH = "forensics-gpt"  # model_config["arch"] of the bundled reference model

_MODEL_KEYS = ("model", "model_state_dict", "state_dict", "module")
_OPTIM_KEYS = ("optimizer", "optimizer_state_dict", "optim")
_STEP_KEYS = ("step", "iteration", "global_step", "iter_num")
_CONFIG_KEYS = ("model_config", "model_args", "config")
# Entries of a checkpoint dict that are never model weights (when no model key is present).
_NOT_MODEL_KEYS = {*_OPTIM_KEYS, "scaler", "rng", "rng_state", "scheduler", "lr_scheduler"}
_TORCH_SUFFIXES = {".pt", ".pth"}
# Files a training framework writes beside a checkpoint that are not checkpoints themselves.
_AUXILIARY = re.compile(r"^(scheduler\.pt|scaler\.pt|rng_state.*\.pth|training_args\.bin)$")
# Folder names that say "checkpoint" (checkpoint-1500, ckpt_000500, iter_0001000, step_100).
_CKPT_DIR = re.compile(r"(checkpoint|ckpt|global_step|iter|step)[-_]?\d+", re.I)
# Files that only a run folder holds, never a checkpoint folder.
_LOG_FILES = re.compile(r"\.(jsonl|csv|log|out|parquet)$|^events\.out\.tfevents")
# The HF Trainer's checkpoint-N/ folder, N its step.
HF_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
# A step in a name: trailing digits after a separator, or digits after a step-like word.
_NAME_STEP = re.compile(
    r"(?:^|[-_.=])(\d+)$|(?:step|iter|iteration|ckpt|checkpoint)[-_=]?(\d+)", re.I
)
_SHARD_SUFFIX = re.compile(r"-\d+-of-\d+$")
_TORCH_ERRORS = (RuntimeError, pickle.UnpicklingError, EOFError, zipfile.BadZipFile, ValueError)


@dataclass
class CheckpointIndex:
    row: dict[str, Any]  # one `checkpoints` row (without run_id/path/source)
    stats: pl.DataFrame  # `checkpoint_stats` rows, columns stats_schema()
    warnings: list[str] = field(default_factory=list)


# ----- recognising checkpoints --------------------------------------------------------------
def is_checkpoint(path: Path) -> bool:
    """A torch/safetensors weights file, or a folder that is one checkpoint (HF checkpoint-N).

    Plain `.bin` files are not checkpoints (nanoGPT/llm.c token shards use that suffix); only
    `pytorch_model*.bin` is.
    """
    if path.is_dir():
        return _is_checkpoint_folder(path)
    return _is_weights_file(path.name)


def _is_weights_file(name: str) -> bool:
    lower = name.lower()
    if _AUXILIARY.match(lower):
        return False
    suffix = Path(lower).suffix
    return (
        suffix in _TORCH_SUFFIXES
        or suffix == ".safetensors"
        or (lower.startswith("pytorch_model") and suffix == ".bin")
    )


def _is_checkpoint_folder(path: Path) -> bool:
    """One model's weights directly inside (a file or its shards), no log files, and a
    checkpoint-like name or nothing run-level.

    A run folder that holds a final model.safetensors next to its logs, subfolders or
    trainer_state.json is not one checkpoint: its files are ingested one by one.
    """
    try:
        children = [c for c in path.iterdir() if not c.name.startswith(".")]
    except OSError:
        return False
    files = [c.name for c in children if c.is_file()]
    weights = [n for n in files if _is_model_file(n)]
    unsharded = [n for n in weights if not _SHARD_SUFFIX.search(Path(n).stem)]
    if not weights or len(unsharded) > 1 or any(_LOG_FILES.search(n) for n in files):
        return False  # no model, several checkpoints side by side, or a run folder
    if _CKPT_DIR.search(path.name):
        return True
    subdirs = [c for c in children if c.is_dir() and not c.name.startswith("global_step")]
    return not subdirs and "trainer_state.json" not in files


def _is_model_file(name: str) -> bool:
    lower = name.lower()
    return lower.endswith(".safetensors") or (
        lower.startswith("pytorch_model") and lower.endswith(".bin")
    )


# ----- indexing -----------------------------------------------------------------------------
Tensors = Iterable[tuple[str, "torch.Tensor"]]


def _is_tensor(value: Any) -> TypeGuard[torch.Tensor]:
    import torch

    return isinstance(value, torch.Tensor)


def index_checkpoint(path: Path) -> CheckpointIndex:
    """Read one checkpoint (file or folder) into its `checkpoints` row and per-param stats."""
    if path.is_dir():
        return _index_folder(path)
    if path.suffix.lower() == ".safetensors":
        step, how = _safetensors_step(path)
        tensors = _safetensors([path])
        idx = _build(path, "safetensors", tensors, None, step, _sibling_config(path))
        if step is None:
            idx.warnings.append(f"{path}: no step in its name, metadata or folder: step unknown")
        elif how:
            idx.warnings.append(f"{path}: step {step} taken from {how}")
        return idx
    model, optim, step, config = _unpack(_torch_load(path))
    return _build(path, "torch", model.items(), optim, _step_of(step, path), config, _tied(model))


def _index_folder(path: Path) -> CheckpointIndex:
    """A Hugging Face style folder: weights file(s), optimizer.pt, config.json, trainer_state."""
    files = sorted(p for p in path.iterdir() if p.is_file())
    config = _read_json(path / "config.json") if (path / "config.json").is_file() else None
    optim_file = path / "optimizer.pt"
    optim = _torch_load(optim_file) if optim_file.is_file() else None
    weights = [p for p in files if p.suffix == ".safetensors"]
    step = _folder_step(path)
    if weights:
        return _build(path, "hf-folder", _safetensors(weights), optim, step, config)
    model: dict[str, torch.Tensor] = {}
    for f in (p for p in files if _is_model_file(p.name)):
        model.update(_tensors(_torch_load(f)))  # memory-mapped: nothing is read yet
    return _build(path, "hf-folder", model.items(), optim, step, config, _tied(model))


def _safetensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor of the files in turn, read only when its turn comes."""
    from safetensors import safe_open

    for f in files:
        try:
            with safe_open(str(f), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                    yield key, handle.get_tensor(key)
        except InputError:
            raise
        except Exception as exc:  # safetensors raises its own SafetensorError
            raise _unreadable(f, exc, "a safetensors file") from exc


# ----- torch files --------------------------------------------------------------------------
def _safe_globals() -> list[Any]:
    """Non-tensor types that real checkpoints carry and that are safe to unpickle."""
    core = np._core.multiarray  # type: ignore[attr-defined]
    dtypes = [getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType")]
    return [argparse.Namespace, core._reconstruct, core.scalar, np.ndarray, np.dtype, *dtypes]


def load_torch_file(path: Path, map_location: Any = "cpu") -> Any:
    """torch.load of an untrusted file: weights_only (no code runs), and any failure of a
    malicious, truncated or foreign file is one InputError naming it. The one loader of
    ingest and replay (forensics.sim.checkpoint.read_checkpoint)."""
    return _torch_load(path, map_location)


def _torch_load(path: Path, map_location: Any = "cpu") -> Any:
    """torch.load without running code from the file; memory-mapped when the format allows."""
    import torch

    try:
        with path.open("rb") as fh:
            head = fh.read(2)
    except OSError as exc:
        raise InputError(path, f"cannot read checkpoint ({exc.strerror or exc})") from exc
    if head != b"PK" and head[:1] != b"\x80":
        raise InputError(
            path, "not a torch.save file", expected="the zip or pickle format torch.save writes"
        )
    with torch.serialization.safe_globals(_safe_globals()):
        try:
            return torch.load(
                path, map_location=map_location, mmap=head == b"PK", weights_only=True
            )
        except pickle.UnpicklingError as exc:
            raise _unreadable(
                path, exc, "tensors, numbers, strings, lists and dicts (weights_only=True)"
            ) from exc
        except _TORCH_ERRORS as exc:
            raise _unreadable(path, exc, "a complete torch.save file") from exc
        except (
            OSError, KeyError, IndexError, TypeError, AttributeError, AssertionError, struct.error
        ) as exc:  # fmt: skip
            # a file cut short or forged inside its zip: torch fails in many ways
            raise _unreadable(path, exc, "a complete torch.save file") from exc


def _unreadable(path: Path, exc: BaseException, expected: str) -> InputError:
    """The informative line of a loader's error (torch's weights_only error is a page long)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
    line = next((ln for ln in lines if "Unsupported global" in ln), lines[0])
    return InputError(path, f"cannot read checkpoint: {line[:300]}", expected=expected)


def _unpack(obj: Any) -> tuple[dict[str, Any], Any, Any, dict[str, Any] | None]:
    """(model tensors, optimizer state dict, step value, model config) of a loaded file."""
    if not isinstance(obj, dict):
        return {}, None, None, None
    if _is_optimizer_state(obj):
        return {}, obj, None, None
    model_key = next((k for k in _MODEL_KEYS if isinstance(obj.get(k), dict)), None)
    if model_key:
        model = _tensors(obj[model_key])
    else:
        model = _tensors({k: v for k, v in obj.items() if k not in _NOT_MODEL_KEYS})
    optim = next((obj[k] for k in _OPTIM_KEYS if isinstance(obj.get(k), dict)), None)
    step = next((obj[k] for k in _STEP_KEYS if obj.get(k) is not None), None)
    config = next((_as_dict(obj[k]) for k in _CONFIG_KEYS if obj.get(k) is not None), None)
    return model, optim, step, config


def _is_optimizer_state(obj: dict[str, Any]) -> bool:
    return isinstance(obj.get("state"), dict) and isinstance(obj.get("param_groups"), list)


def _tensors(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Tensors of a (possibly nested) state dict, dotted names, `_orig_mod.` (torch.compile)
    removed as nanoGPT does when it loads."""
    out: dict[str, torch.Tensor] = {}
    if not isinstance(obj, dict):
        return out
    for key, value in obj.items():
        name = f"{prefix}{key}".replace("_orig_mod.", "")
        if _is_tensor(value):
            out[name] = value
        elif isinstance(value, dict):
            out.update(_tensors(value, name + "."))
    return out


def _as_dict(value: Any) -> dict[str, Any] | None:
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if not isinstance(value, dict):
        return None
    return json.loads(json.dumps(value, default=_jsonable))


def _jsonable(value: Any) -> Any:
    if _is_tensor(value) and value.numel() == 1:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


# ----- steps and configs --------------------------------------------------------------------
def _step_of(value: Any, path: Path) -> int | None:
    if _is_tensor(value) and value.numel() == 1:
        value = value.item()
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value) if abs(int(value)) < _MAX_STEP else _name_step(path)
    if isinstance(value, (float, np.floating)) and abs(float(value)) < _MAX_STEP:
        return int(value)  # NaN fails the comparison too
    return _name_step(path)


_MAX_STEP = 2**62  # a stored step is a BIGINT: a checkpoint's 1e308 "step" is no step


def _name_step(path: Path) -> int | None:
    """A step in the name: ckpt_000500.pt, checkpoint-1500, iter_0001000; not gpt2-124M.pt."""
    stem = path.name if path.is_dir() else path.stem
    found = _NAME_STEP.findall(_SHARD_SUFFIX.sub("", stem))
    if not found:
        return None
    trailing, worded = found[-1]
    return int(trailing or worded)


def _safetensors_step(path: Path) -> tuple[int | None, str]:
    """A lone .safetensors file's step: from its name, its `__metadata__` (step /
    global_step / iteration), or the folder it sits in (trainer_state.json, checkpoint-N);
    with where it came from when not the name."""
    step = _name_step(path)
    if step is not None:
        return step, ""
    meta = _safetensors_metadata(path)
    for key in ("step", "global_step", "iteration"):
        if key in meta and re.fullmatch(r"-?\d{1,18}", meta[key].strip()):
            return int(meta[key]), f"its metadata '{key}'"
    step = _folder_step(path.parent)
    return (step, "its folder") if step is not None else (None, "")


def _safetensors_metadata(path: Path) -> dict[str, str]:
    """The header's `__metadata__` (string to string), {} when absent or unreadable."""
    try:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if size > 100 << 20:
                return {}
            header = json.loads(fh.read(size))
    except (OSError, struct.error, ValueError, RecursionError):
        return {}
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict):
        return {}
    return {str(k): v for k, v in meta.items() if isinstance(v, str)}


def _folder_step(path: Path) -> int | None:
    state = path / "trainer_state.json"
    if state.is_file():
        step = _read_json(state).get("global_step")
        if isinstance(step, int) and abs(step) < _MAX_STEP:
            return step
    return _name_step(path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"not valid JSON: {exc}", expected="a JSON object") from exc
    if not isinstance(data, dict):
        raise InputError(path, "not a JSON object", expected="a JSON object")
    return data


def _sibling_config(path: Path) -> dict[str, Any] | None:
    config = path.parent / "config.json"
    if not config.is_file():
        return None
    try:
        return _read_json(config)
    except InputError:
        return None


# ----- statistics ---------------------------------------------------------------------------
def _build(
    path: Path,
    fmt: str,
    tensors: Tensors,
    optim: Any,
    step: int | None,
    config: dict[str, Any] | None,
    tied: dict[str, str] | None = None,
) -> CheckpointIndex:
    """Reduce each tensor to its statistics as it comes, then add the optimizer's.

    `tied` maps a tensor sharing memory with an earlier one (tied embeddings) to that one:
    the optimizer holds a single entry for both, and both rows get its statistics.
    """
    tied = tied or {}
    warnings: list[str] = []
    shapes: dict[str, tuple[int, ...]] = {}
    rows: list[dict[str, Any]] = []
    dtypes: dict[str, int] = {}
    for name, tensor in tensors:
        rows.append({"step": step, "param": name, **_param_stats(tensor)})
        shapes[name] = tuple(tensor.shape)
        key = str(tensor.dtype).removeprefix("torch.")
        dtypes[key] = dtypes.get(key, 0) + tensor.numel()
        del tensor  # nothing of the tensor outlives its statistics
    has_optimizer = isinstance(optim, dict) and _is_optimizer_state(optim)
    if has_optimizer:
        rows = _merge_optimizer(rows, shapes, tied, optim, step, warnings)
    elif optim is not None:
        warnings.append(f"{path}: optimizer entry is not a torch.optim state dict; ignored")
    if not rows:
        warnings.append(f"{path}: no tensors found")
    n_params = sum(r["numel"] for r in rows if r["param"] in shapes and r["param"] not in tied)
    row = {
        "step": step,
        "format": fmt,
        "has_optimizer": has_optimizer,
        "bytes": _size(path),
        "n_params": int(n_params),
        "n_tensors": len(shapes),
        "dtype": max(dtypes, key=lambda d: dtypes[d]) if dtypes else None,
        "model_config": config,
        "reference_model": bool(config and config.get("arch") == REFERENCE_ARCH),
    }
    return CheckpointIndex(row, pl.DataFrame(rows, schema=stats_schema()), warnings)


def _param_stats(tensor: torch.Tensor) -> dict[str, Any]:
    """L2 norm (accumulated in float64) and count of non-finite elements."""
    import torch

    if not tensor.is_floating_point():
        return {
            "numel": tensor.numel(),
            "param_norm": float(torch.linalg.vector_norm(tensor.double())),
            "nonfinite": 0,
        }
    return {
        "numel": tensor.numel(),
        "param_norm": float(torch.linalg.vector_norm(tensor, dtype=torch.float64)),
        "nonfinite": int(tensor.numel() - int(torch.isfinite(tensor).sum())),
    }


def _tied(model: dict[str, torch.Tensor]) -> dict[str, str]:
    """Names whose tensor views the same memory as an earlier one -> that earlier name."""
    seen: dict[tuple[int, int], str] = {}
    tied = {}
    for name, tensor in model.items():
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), int(tensor.storage_offset()))
        if key in seen and storage.nbytes():
            tied[name] = seen[key]
        seen.setdefault(key, name)
    return tied


def _merge_optimizer(
    rows: list[dict[str, Any]],
    shapes: dict[str, tuple[int, ...]],
    tied: dict[str, str],
    optim: dict[str, Any],
    step: int | None,
    warnings: list[str],
) -> list[dict[str, Any]]:
    """Add Adam statistics to each parameter's row; unmatched entries get `param_<idx>` rows."""
    by_name = {r["param"]: r for r in rows}
    free = [n for n in shapes if n not in tied]
    unmatched = []
    for idx in _param_order(optim):
        entry = optim["state"].get(idx)
        if not isinstance(entry, dict):
            continue
        shape = _entry_shape(entry)
        name = next((n for n in free if shapes[n] == shape), None) if shape is not None else None
        if name is None:
            unmatched.append(idx)
            numel = _entry_numel(entry)
            rows.append(
                {"step": step, "param": f"param_{idx}", "numel": numel, **_adam_stats(entry)}
            )
            continue
        free.remove(name)
        by_name[name].update(_adam_stats(entry))
    for name, original in tied.items():
        by_name[name].update({k: by_name[original].get(k) for k in _ADAM_COLUMNS})
    if unmatched and shapes:
        warnings.append(
            f"{len(unmatched)} optimizer entries match no model parameter by shape; "
            "stored as param_<idx>"
        )
    return rows


_ADAM_COLUMNS = ("exp_avg_norm", "exp_avg_sq_mean", "exp_avg_sq_max", "adam_step")


def _param_order(optim: dict[str, Any]) -> list[Any]:
    """Optimizer state keys in parameter order (param_groups order, then any others)."""
    order: list[Any] = []
    for group in optim["param_groups"]:
        if isinstance(group, dict):
            order.extend(group.get("params", []))
    order.extend(k for k in optim["state"] if k not in set(order))
    return order


def _entry_shape(entry: dict[str, Any]) -> tuple[int, ...] | None:
    moment = entry.get("exp_avg", entry.get("exp_avg_sq"))
    return tuple(moment.shape) if _is_tensor(moment) else None


def _entry_numel(entry: dict[str, Any]) -> int | None:
    moment = entry.get("exp_avg", entry.get("exp_avg_sq"))
    return moment.numel() if _is_tensor(moment) else None


def _adam_stats(entry: dict[str, Any]) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    m, v, step = entry.get("exp_avg"), entry.get("exp_avg_sq"), entry.get("step")
    if _is_tensor(m):
        out["exp_avg_norm"] = float(torch.linalg.vector_norm(m, dtype=torch.float64))
    if _is_tensor(v) and v.numel():
        out["exp_avg_sq_mean"] = float(v.mean(dtype=torch.float64))
        out["exp_avg_sq_max"] = float(v.max())
    if _is_tensor(step) and step.numel() == 1:
        out["adam_step"] = float(step.item())
    elif isinstance(step, (int, float)):
        out["adam_step"] = float(step)
    return out


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
