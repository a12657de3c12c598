"""`Recorder`: the statistics and batch records of a live run, written to `<run>/forensics/`.

    with Recorder("runs/my_run", model=model) as rec:
        for step, (x, y) in enumerate(loader, start=1):
            loss = model(x, y)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # pre-clip norm
            rec.after_backward(model, grad_norm=norm)  # or before clipping, without grad_norm
            optimizer.step(); optimizer.zero_grad()
            rec.after_step(model, optimizer, loss, batch={"input_ids": x, "sample_indices": idx})

Every statistic of a step stays a device tensor until the logging interval (`log_every`
steps): then all of them go to the host in one transfer (and, in a distributed run, across
ranks in one all-reduce per kind), rank 0 writes the rows, and the files are flushed. Nothing
else synchronises the device. Formats: docs/recorder.md.
"""

from __future__ import annotations

import atexit
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import torch
from torch import nn

from forensics.record import stats
from forensics.record.config import run_config
from forensics.record.layers import LayerProbe
from forensics.record.manifest import (
    _INDEX_KEYS,
    _MASK_KEYS,
    _TOKEN_KEYS,
    pending,
    split_micro,
    to_records,
)

FOLDER = "forensics"
METRICS = "metrics.jsonl"
BATCHES = "batches.jsonl"
CONFIG = "config.json"
FORMAT_VERSION = 1

# How each per-step tensor is combined across ranks. Replicated values (DDP keeps parameters,
# gradients and Adam state identical on every rank) are averaged, which leaves them as they
# are; a sharded model's sums of squares and element counts are summed.
_MEAN = ("loss", "loss_scale", "g_norm")
_NORM_PARTS = ("g_sq", "p_sq", "u_sq", "v_sq", "m_sq", "v_sum", "v_count")
_MAX = ("v_max", "skipped")


Scalar = torch.Tensor | float


@dataclass(slots=True)
class _Row:
    """One step as it was recorded: device values are kept as given (no op, no sync) until
    the flush turns every row's values into a few stacked columns."""

    step: int
    loss: Scalar | None  # the step loss as the caller handed it (any shape: its mean)
    grad: Scalar | None  # the pre-clip norm, or its square for key "g_sq" (see g_key)
    g_key: str
    lr: float
    wall_time: float
    seconds: float
    tokens: float | None  # None: the token positions of its recorded batches (at the flush)
    dev: dict[str, torch.Tensor] | None = None  # stats-step and AMP values, reduced over ranks
    local: dict[str, torch.Tensor] | None = None  # rank 0's own (layer samples)


class Recorder:
    """Writes `forensics/metrics.jsonl`, `batches.jsonl` and `config.json` under `run_dir`.

    log_every: steps between host syncs (and file flushes). stats_every: steps between
    measurements of param_norm, update_norm and Adam's moments (1 = every step; these cost a
    copy of the parameters and a pass over the optimizer state). layers_every: steps between
    per-layer act_norm / max_attn_logit samples (0 = never). sharded: the parameters are
    split across ranks (FSDP, ZeRO), so norms are summed over ranks; None guesses from the
    model (DTensor parameters or an FSDP wrapper). config: extra keys for config.json.
    """

    def __init__(
        self,
        run_dir: str | Path = ".",
        *,
        model: nn.Module | None = None,
        log_every: int = 20,
        stats_every: int = 10,
        layers_every: int = 100,
        sharded: bool | None = None,
        config: Mapping[str, Any] | None = None,
        framework: str = "torch",
        step: int = 0,
    ) -> None:
        if log_every < 1 or stats_every < 1 or layers_every < 0:
            raise ValueError("log_every and stats_every must be >= 1, layers_every >= 0")
        self.dir = Path(run_dir) / FOLDER
        self.log_every, self.stats_every, self.layers_every = log_every, stats_every, layers_every
        self.step = step  # last completed optimizer step
        self.extra_config = dict(config or {})
        self.framework = framework
        self.sharded = sharded
        self.rank, self.world = _rank_world()
        self._metrics: IO[str] | None = None
        self._batches: IO[str] | None = None
        self._config_written = False
        self._closed = False
        self._params: list[torch.Tensor] = []
        self._probe: LayerProbe | None = None
        self._rows: list[_Row] = []
        # micro-batches as handed over, read at the flush: (step, micro, batch) of the steps
        # done, and (micro, batch) of the step in progress
        self._pending: list[tuple[int, int, Any]] = []
        self._open: list[tuple[int, Any]] = []
        self._micro = 0
        self._g: Scalar | None = None
        self._g_key = "g_sq"  # g_norm: a norm the framework reduced across ranks already
        self._before: list[torch.Tensor] | None = None
        self._scale_before: torch.Tensor | None = None
        self._t_last = time.perf_counter()
        if self.rank == 0:
            self.dir.mkdir(parents=True, exist_ok=True)
            mode = "a" if step > 0 else "w"  # a resumed run continues its files
            self._metrics = (self.dir / METRICS).open(mode, encoding="utf-8")
            self._batches = (self.dir / BATCHES).open(mode, encoding="utf-8")
        if model is not None:
            self.watch(model)
        if self.world == 1:  # a crash keeps its last steps (not with ranks: no collectives)
            atexit.register(self.close)

    # ----- set-up -----------------------------------------------------------------------
    def watch(self, model: nn.Module) -> None:
        """Remember the parameters and hook the blocks for the per-layer samples."""
        self._params = [p for p in model.parameters() if p.requires_grad]
        if self.sharded is None:
            self.sharded = _looks_sharded(model, self._params)
        if self._probe is None and self.layers_every:
            self._probe = LayerProbe(_unwrap(model))
            self._arm_layers()

    def write_config(
        self,
        model: nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        **extra: Any,
    ) -> None:
        """config.json: optimizer hyper-parameters, precision, model config, data order."""
        self._config_written = True
        if self.rank != 0:
            return
        settings = {
            "log_every": self.log_every,
            "stats_every": self.stats_every,
            "layers_every": self.layers_every,
        }
        cfg = run_config(
            model=_unwrap(model) if model is not None else None,
            optimizer=optimizer,
            world_size=self.world,
            framework=self.framework,
            recorder=settings | {"format_version": FORMAT_VERSION, "sharded": bool(self.sharded)},
        )
        cfg.update(self.extra_config)
        cfg.update(extra)
        text = json.dumps(cfg, indent=2, default=str, allow_nan=True)
        (self.dir / CONFIG).write_text(text + "\n", encoding="utf-8")

    # ----- per micro-batch / per step ---------------------------------------------------
    def record_batch(self, batch: Any, micro: int | None = None) -> None:
        """Note one micro-batch of the step in progress (call once per micro-batch)."""
        m = self._micro if micro is None else micro
        self._open.append((m, _kept(batch)))
        self._micro = m + 1

    def after_backward(
        self,
        model: nn.Module,
        scaler: Any = None,
        *,
        grad_norm: torch.Tensor | float | None = None,
        measure: bool = True,
    ) -> None:
        """After the step's last backward, before clipping: the pre-clip gradient norm.

        Under AMP call it after `scaler.unscale_(optimizer)` so the gradients are true ones.
        grad_norm: the pre-clip norm when the framework already computed it (it is then
        used as it is, global across ranks); measure=False: record no gradient norm (the
        gradients are already clipped).
        """
        if not self._params:
            self.watch(model)
        if grad_norm is not None:  # kept as handed over: squared at the flush, with the rest
            norm = grad_norm.detach() if isinstance(grad_norm, torch.Tensor) else grad_norm
            self._g, self._g_key = norm, "g_norm"
        elif measure:
            self._g, self._g_key = stats.sq_sum(stats.grads_of(self._params)), "g_sq"
        if scaler is not None:
            self._scale_before = stats.loss_scale_of(scaler)
        if (self.step + 1) % self.stats_every == 0:
            self._before = stats.snapshot(self._params)

    def after_step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss: torch.Tensor | float | None,
        batch: Any = None,
        *,
        scaler: Any = None,
        step: int | None = None,
        tokens: int | None = None,
        skipped: bool | torch.Tensor | None = None,
        lr: float | None = None,
    ) -> None:
        """After `optimizer.step()` (and `scaler.update()`): one metrics row for the step.

        batch: the step's batch (a list = one entry per micro-batch), see `record_batch`.
        step: the step number the framework counts (default: one more than the last).
        tokens: tokens trained on (default: token positions of the recorded batches).
        """
        if not self._params:
            self.watch(model)
        if not self._config_written:
            self.write_config(model, optimizer)
        if batch is not None:
            for mb in split_micro(batch):
                self.record_batch(mb)
        this = self.step + 1 if step is None else step
        self._pending += [(this, m, b) for m, b in self._open]
        self._open = []
        if loss is not None and isinstance(loss, torch.Tensor):
            loss = loss.detach()
        now = time.perf_counter()
        row = _Row(
            this, loss, self._g, self._g_key,
            lr=float(lr if lr is not None else _lr_of(optimizer)),
            wall_time=time.time(), seconds=now - self._t_last,
            tokens=float(tokens) if tokens is not None else None,
        )  # fmt: skip
        self._t_last = now
        if self._before is not None or self._scale_before is not None or skipped is not None:
            row.dev = self._measure(optimizer, scaler, skipped)
        if self._probe is not None and self._probe.armed:
            row.local = self._probe.take()
        self._rows.append(row)
        self.step, self._micro = this, 0
        self._g, self._before, self._scale_before = None, None, None
        self._arm_layers()
        if len(self._rows) >= self.log_every:
            self.flush()

    def _measure(
        self,
        optimizer: torch.optim.Optimizer,
        scaler: Any,
        skipped: bool | torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        """The stats-step statistics (parameters, update, Adam) and the AMP values."""
        dev: dict[str, torch.Tensor] = {}
        if self._before is not None:
            p_sq = stats.sq_sum(self._params)
            if p_sq is not None:
                dev["p_sq"] = p_sq
            u = stats.update_sq(self._params, self._before)
            if u is not None:
                dev["u_sq"] = u
            dev.update(stats.adam_moments(optimizer))
        scale = self._scale_before
        if scale is not None:
            dev["loss_scale"] = scale
            after = stats.loss_scale_of(scaler)
            if skipped is None and after is not None:
                skipped = after.to(scale.device) < scale
        if skipped is not None:
            flag = skipped if isinstance(skipped, torch.Tensor) else torch.tensor(bool(skipped))
            dev["skipped"] = flag.float().reshape(())
        return dev

    def _arm_layers(self) -> None:
        if self._probe is not None and self.layers_every:
            self._probe.armed = (self.step + 1) % self.layers_every == 0

    # ----- the logging interval ---------------------------------------------------------
    def flush(self) -> None:
        """Move the interval's statistics to the host (one transfer) and write them."""
        rows, self._rows = self._rows, []
        done = [pending(step, m, batch) for step, m, batch in self._pending]
        self._pending = []
        counted: dict[int, float] = {}
        for b in done:
            if b.tokens is not None:
                counted[b.step] = counted.get(b.step, 0.0) + b.tokens.numel()
        for row in rows:
            if row.tokens is None:
                row.tokens = counted.get(row.step, 0.0)
        records = to_records(done, self.dir)
        values = _host_values(rows, self.world, bool(self.sharded))
        records = _gather_records(records, self.rank, self.world)
        if self.rank != 0 or self._metrics is None or self._batches is None:
            return
        pairs = zip(rows, values, strict=True)
        self._metrics.write("".join(json.dumps(_metrics_row(r, v)) + "\n" for r, v in pairs))
        self._batches.write("".join(json.dumps(rec, default=str) + "\n" for rec in records))
        self._metrics.flush()
        self._batches.flush()

    def close(self) -> None:
        """Write what is left and close the files (the context manager calls this; so does
        interpreter exit in a single-process run that died without closing it)."""
        atexit.unregister(self.close)
        if self._closed:
            return
        self._closed = True
        if self._rows or self._pending:
            self.flush()
        if self._probe is not None:
            self._probe.remove()
            self._probe = None
        for fh in (self._metrics, self._batches):
            if fh is not None:
                fh.close()
        self._metrics = self._batches = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# ----- helpers ------------------------------------------------------------------------------
_KEPT_TENSORS = frozenset(_TOKEN_KEYS + _MASK_KEYS + _INDEX_KEYS)


def _kept(batch: Any) -> Any:
    """A micro-batch mapping as the flush will read it: a shallow copy (the caller may reuse
    the dict) without the tensors the record does not read (labels, pixel values...), so
    that they are not held until the flush."""
    if type(batch) is dict:
        return {k: v for k, v in batch.items() if k in _KEPT_TENSORS or not torch.is_tensor(v)}
    return batch


def _rank_world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside DDP/FSDP-style wrappers (`.module`)."""
    while isinstance(getattr(model, "module", None), nn.Module):
        model = model.module  # type: ignore[assignment]
    return model


def _looks_sharded(model: nn.Module, params: list[torch.Tensor]) -> bool:
    if "FullyShardedDataParallel" in type(model).__name__:
        return True
    return any(type(p).__name__ == "DTensor" or type(p.data).__name__ == "DTensor" for p in params)


def _lr_of(optimizer: torch.optim.Optimizer) -> float:
    lr = optimizer.param_groups[0].get("lr", math.nan) if optimizer.param_groups else math.nan
    return float(lr)


def _column(values: list[Scalar], device: torch.device) -> torch.Tensor:
    """One fp32 vector on `device`, each value reduced to its mean (a loss may be a vector).

    The common case (every value a tensor of one shape, dtype and device) is a single stack.
    """
    first = values[0]
    if isinstance(first, torch.Tensor) and all(
        isinstance(v, torch.Tensor)
        and v.shape == first.shape
        and v.dtype == first.dtype
        and v.device == first.device
        for v in values
    ):
        col = torch.stack(values).to(device, torch.float32)  # type: ignore[arg-type]
        return col.reshape(len(values), -1).mean(1) if first.numel() != 1 else col.reshape(-1)
    return torch.stack([
        torch.as_tensor(v).detach().to(device, torch.float32).reshape(-1).mean() for v in values
    ])  # fmt: skip


def _host_values(rows: list[_Row], world: int, sharded: bool) -> list[dict[str, float]]:
    """Every row's device values as floats, reduced across ranks: one transfer in all.

    The values are gathered per key into columns (one stack each), the columns joined into a
    SUM vector and a MAX vector for the all-reduce and a vector of rank 0's own samples.
    """
    if not rows:
        return []
    cols: dict[str, tuple[list[int], list[Scalar]]] = {}
    local: dict[str, tuple[list[int], list[Scalar]]] = {}

    def put(into: dict[str, tuple[list[int], list[Scalar]]], i: int, key: str, v: Scalar) -> None:
        idx, vals = into.setdefault(key, ([], []))
        idx.append(i)
        vals.append(v)

    for i, row in enumerate(rows):
        if row.loss is not None:
            put(cols, i, "loss", row.loss)
        if row.grad is not None:
            put(cols, i, row.g_key, row.grad)
        for key, t in (row.dev or {}).items():
            put(cols, i, key, t)
        for key, t in (row.local or {}).items():
            put(local, i, key, t)
    device = next(
        (v.device for _, vals in cols.values() for v in vals[:1]
         if isinstance(v, torch.Tensor) and v.device.type != "cpu"),
        torch.device("cpu"),
    )  # fmt: skip
    order_sum = [k for k in cols if k not in _MAX]
    order_max = [k for k in cols if k in _MAX]
    parts = [_column(cols[k][1], device) for k in order_sum]
    parts.append(torch.tensor([row.tokens for row in rows], device=device))
    sum_vec = torch.cat(parts)
    max_vec = torch.cat([_column(cols[k][1], device) for k in order_max]) if order_max else None
    if world > 1:
        dist = torch.distributed
        dist.all_reduce(sum_vec, op=dist.ReduceOp.SUM)
        if max_vec is not None:
            dist.all_reduce(max_vec, op=dist.ReduceOp.MAX)
    loc = [_column(local[k][1], device) for k in local]
    vecs = [sum_vec] + ([max_vec] if max_vec is not None else []) + loc
    flat = iter(torch.cat(vecs).double().cpu().tolist())  # the one sync
    out: list[dict[str, float]] = [{} for _ in rows]
    for key in order_sum:
        divide = world > 1 and (key in _MEAN or (key in _NORM_PARTS and not sharded))
        for i in cols[key][0]:
            value = next(flat)
            out[i][key] = value / world if divide else value
    for i in range(len(rows)):
        out[i]["tokens"] = next(flat)
    for key in [*order_max, *local]:
        for i in (cols if key in cols else local)[key][0]:
            out[i][key] = next(flat)
    return out


def _gather_records(records: list[dict[str, Any]], rank: int, world: int) -> list[dict[str, Any]]:
    """Every rank's batch records on rank 0 (each tagged with its rank), in step order."""
    if world == 1:
        return records
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, records)
    if rank != 0:
        return []
    out = [{**rec, "rank": r} for r, recs in enumerate(gathered) for rec in recs]
    return sorted(out, key=lambda rec: (rec["step"], rec["rank"], rec["micro"]))


def _f32(x: float) -> float:
    """As the simulator logs fp32-derived statistics: shortest decimal that round-trips."""
    return x if not math.isfinite(x) else float(f"{x:.9g}")


def _metrics_row(row: _Row, vals: dict[str, float]) -> dict[str, Any]:
    """One metrics.jsonl line; canonical names (forensics/data/aliases.yaml)."""
    out: dict[str, Any] = {"step": row.step}
    if "loss" in vals:
        out["loss"] = vals["loss"]
    if "g_norm" in vals:
        out["grad_norm"] = _f32(vals["g_norm"])
    elif "g_sq" in vals:
        g_sq = vals["g_sq"]
        out["grad_norm"] = math.sqrt(g_sq) if g_sq >= 0 else math.nan
    for key, name in (("p_sq", "param_norm"), ("u_sq", "update_norm")):
        if key in vals:
            out[name] = _f32(math.sqrt(vals[key]))
    if vals.get("v_count"):
        out["adam_v_mean"] = _f32(vals["v_sum"] / vals["v_count"])
        out["adam_v_norm"] = _f32(math.sqrt(vals["v_sq"]))
        out["adam_v_max"] = _f32(vals["v_max"])
    if "m_sq" in vals:
        out["adam_m_norm"] = _f32(math.sqrt(vals["m_sq"]))
    out["lr"] = _f32(row.lr)
    if "loss_scale" in vals:
        out["loss_scale"] = vals["loss_scale"]
    if "skipped" in vals:
        out["skipped"] = int(vals["skipped"] > 0)
    tokens = vals.get("tokens", 0.0)
    if tokens and row.seconds > 0:
        out["tokens_per_s"] = round(tokens / row.seconds, 1)
    out["wall_time"] = round(row.wall_time, 3)
    if row.local:  # the sampled layer statistics, in layer order
        for key in sorted((k for k in vals if "/" in k), key=_layer_order):
            out[key] = _f32(vals[key])
    return out


def _layer_order(key: str) -> tuple[str, int]:
    name, _, idx = key.partition("/")
    return name, int(idx) if idx.isdigit() else -1
