"""One manifest record per (step, micro-batch): where the data came from and what it was.

The record is the batch manifest of `docs/batches.md` (the format replay already reads),
with optional fields added by the recorder: `sample_indices`, `lengths`, `batch_size`,
`hash`, `rank`. What the caller knows about provenance (a shard and a token span, or dataset
sample indices) is copied as given; what the recorder can see itself (shape, lengths, the
token content) it measures.

`hash` is `sha256:` + the hex SHA-256 of the micro-batch's input token ids as fed to the
model: a (batch_size, seq_len) array in row-major order, each id as a little-endian int64.
Replay recomputes it on the batch it rebuilt to prove it is the same one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

_TOKEN_KEYS = ("input_ids", "idx", "tokens", "x", "inputs")
_MASK_KEYS = ("attention_mask",)
_INDEX_KEYS = ("sample_indices", "indices", "index")
UNRECORDED = "unrecorded"  # `source` of a batch whose caller gave no provenance


@dataclass
class PendingBatch:
    """A micro-batch seen this interval; tensors stay on the device until the flush."""

    step: int
    micro: int
    fields: dict[str, Any]
    tokens: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_record(
        self, manifest_dir: Path, ids: np.ndarray | None = None, lengths: list[int] | None = None
    ) -> dict[str, Any]:
        """The JSON record; `ids` (B, T) int64 and `lengths` are the host copies of the
        tokens and per-row lengths (`to_records` makes them for a whole interval at once)."""
        rec: dict[str, Any] = {"step": self.step, "micro": self.micro}
        rec.update(self.fields)
        rec.update(self.extra)
        if "source" in rec:
            rec["source"] = _relative_source(str(rec["source"]), manifest_dir)
        if ids is None and self.tokens is not None:
            ids = _host_ids(self.tokens)
        if ids is not None:
            rec.setdefault("batch_size", int(ids.shape[0]))
            rec.setdefault("seq_len", int(ids.shape[-1]))
            rec["lengths"] = lengths if lengths is not None else [int(ids.shape[-1])] * len(ids)
            rec["hash"] = batch_hash(ids)
        if "source" not in rec:
            rec["source"] = UNRECORDED
        return rec


def batch_hash(ids: np.ndarray | torch.Tensor) -> str:
    """`sha256:` + hex SHA-256 of the token ids as a row-major little-endian int64 array.

    The definition replay re-checks (docs/recorder.md): pass the (batch_size, seq_len) ids.
    """
    if isinstance(ids, torch.Tensor):
        ids = _host_ids(ids)
    arr = np.ascontiguousarray(ids, dtype="<i8")
    return "sha256:" + hashlib.sha256(arr.tobytes()).hexdigest()


def _host_ids(tokens: torch.Tensor) -> np.ndarray:
    ids = tokens.detach().to("cpu", torch.int64)
    return (ids.unsqueeze(0) if ids.dim() == 1 else ids).numpy()


def to_records(batches: list[PendingBatch], manifest_dir: Path) -> list[dict[str, Any]]:
    """The records of an interval's micro-batches, with one device-to-host copy for all of
    their token ids and one for their attention masks (not one per micro-batch)."""
    with_tokens = [b for b in batches if b.tokens is not None]
    ids = _host_batches([b.tokens for b in with_tokens])  # type: ignore[misc]
    masks = [
        b.mask if b.mask is not None and b.mask.numel() == b.tokens.numel() else None  # type: ignore[union-attr]
        for b in with_tokens
    ]
    present = [m for m in masks if m is not None]
    host_masks = iter(_host_batches(present)) if present else iter(())
    by_id: dict[int, tuple[np.ndarray, list[int]]] = {}
    for b, arr, mask in zip(with_tokens, ids, masks, strict=True):
        arr = arr.reshape(1, -1) if arr.ndim == 1 else arr
        if mask is None:
            lengths = [int(arr.shape[-1])] * int(arr.shape[0])
        else:
            lengths = [int(n) for n in next(host_masks).reshape(arr.shape[0], -1).sum(-1)]
        by_id[id(b)] = (arr, lengths)
    out = []
    for b in batches:
        arr_len = by_id.get(id(b))
        out.append(b.to_record(manifest_dir, *(arr_len or (None, None))))
    return out


def _host_batches(tensors: list[torch.Tensor]) -> list[np.ndarray]:
    """Each tensor as an int64 host array, through one concatenated copy per device."""
    if not tensors:
        return []
    flat = torch.cat([t.detach().reshape(-1).to(torch.int64) for t in tensors])
    host = flat.cpu().numpy()
    out, start = [], 0
    for t in tensors:
        n = t.numel()
        out.append(host[start : start + n].reshape(t.shape))
        start += n
    return out


@lru_cache(maxsize=256)  # a run names a few shards many times
def _relative_source(source: str, manifest_dir: Path) -> str:
    """A shard path relative to the manifest's folder (the reader resolves it from there).

    A path the caller gave relative is taken relative to the working directory, where their
    loop opened it; a label that is no file (a dataset name) is kept as it is.
    """
    path = Path(source)
    if not path.is_absolute():
        if not path.exists():
            return source
        path = path.resolve()
    try:
        return os.path.relpath(path, manifest_dir)
    except ValueError:  # another drive on Windows
        return str(path)


def _json_value(value: Any) -> Any:
    """A provenance value as JSON (tensors and arrays become lists/numbers); None if not JSON."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist() if value.numel() <= 65536 else None
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Sequence):
        items = [_json_value(v) for v in value]
        return items if all(i is not None for i in items) else None
    return None


def _is_token_tensor(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and not value.is_floating_point()
        and value.dtype != torch.bool
        and value.dim() in (1, 2)
    )


def split_micro(batch: Any) -> list[Any]:
    """A list is one entry per micro-batch; anything else (tensor, tuple, mapping) is one."""
    return list(batch) if isinstance(batch, list) else [batch]


def pending(step: int, micro: int, batch: Any) -> PendingBatch:
    """What one micro-batch tells the manifest.

    `batch` is a token tensor (B, T), an `(x, y, ...)` tuple whose first item is the
    tokens, or a mapping: `input_ids` (or idx/tokens/x) and `attention_mask` tensors are
    measured; every other JSON-able value (`source`, `token_offset`, `n_tokens`,
    `sample_index`, `sample_indices`, `seq_len`, `doc_ids`...) is copied into the record.
    """
    if isinstance(batch, torch.Tensor):
        return PendingBatch(step, micro, {}, tokens=batch)
    if isinstance(batch, tuple):
        first = batch[0] if batch else None
        return PendingBatch(step, micro, {}, tokens=first if _is_token_tensor(first) else None)
    if not isinstance(batch, Mapping):
        return PendingBatch(step, micro, {})
    tokens = next((batch[k] for k in _TOKEN_KEYS if _is_token_tensor(batch.get(k))), None)
    mask = next((batch[k] for k in _MASK_KEYS if isinstance(batch.get(k), torch.Tensor)), None)
    fields: dict[str, Any] = {}
    for key, value in batch.items():
        if key in _TOKEN_KEYS or key in _MASK_KEYS or key == "labels":
            continue
        name = "sample_indices" if key in _INDEX_KEYS else key
        if isinstance(value, torch.Tensor) and name != "sample_indices":
            continue  # model inputs (position_ids...), not provenance
        converted = _json_value(value)
        if converted is not None:
            if name == "sample_indices" and isinstance(converted, int):
                converted = [converted]
            fields[name] = converted
    return PendingBatch(step, micro, fields, tokens=tokens, mask=mask)
