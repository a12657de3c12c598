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
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import torch
from torch import nn

from forensics.record import stats
from forensics.record.config import run_config
from forensics.record.layers import LayerProbe
from forensics.record.manifest import PendingBatch, pending, split_micro

FOLDER = "forensics"
METRICS = "metrics.jsonl"
BATCHES = "batches.jsonl"
CONFIG = "config.json"
FORMAT_VERSION = 1

# How each per-step tensor is combined across ranks. Replicated values (DDP keeps parameters,
# gradients and Adam state identical on every rank) are averaged, which leaves them as they
# are; a sharded model's sums of squares and element counts are summed.
_MEAN = ("loss", "loss_scale", "g_sq_global")
_NORM_PARTS = ("g_sq", "p_sq", "u_sq", "v_sq", "m_sq", "v_sum", "v_count")
_MAX = ("v_max", "skipped")


@dataclass
class _Row:
    step: int
    dev: dict[str, torch.Tensor] = field(default_factory=dict)  # reduced across ranks
    local: dict[str, torch.Tensor] = field(default_factory=dict)  # rank 0's own (layers)
    host: dict[str, float] = field(default_factory=dict)
    tokens: float = 0.0
    seconds: float = 0.0


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
        self._pending: list[PendingBatch] = []
        self._micro = 0
        self._g_sq: torch.Tensor | None = None
        self._g_key = "g_sq"  # g_sq_global: a norm the framework reduced across ranks already
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
        self._pending.append(pending(self.step + 1, m, batch))
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
        if grad_norm is not None:
            norm = torch.as_tensor(grad_norm).detach().float().reshape(())
            self._g_sq, self._g_key = norm * norm, "g_sq_global"
        elif measure:
            self._g_sq, self._g_key = stats.sq_sum(stats.grads_of(self._params)), "g_sq"
        self._scale_before = stats.loss_scale_of(scaler)
        if self._stats_due():
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
        for p in self._pending:
            if p.step == self.step + 1:
                p.step = this
        row = _Row(this)
        self._measure(row, optimizer, loss, scaler, skipped)
        now = time.perf_counter()
        row.seconds, self._t_last = now - self._t_last, now
        row.tokens = float(tokens) if tokens is not None else self._tokens_of(this)
        row.host["lr"] = float(lr if lr is not None else _lr_of(optimizer))
        row.host["wall_time"] = round(time.time(), 3)
        self._rows.append(row)
        self.step, self._micro = this, 0
        self._g_sq, self._before, self._scale_before = None, None, None
        self._arm_layers()
        if len(self._rows) >= self.log_every:
            self.flush()

    def _measure(
        self,
        row: _Row,
        optimizer: torch.optim.Optimizer,
        loss: torch.Tensor | float | None,
        scaler: Any,
        skipped: bool | torch.Tensor | None,
    ) -> None:
        if loss is not None:
            t = loss.detach() if isinstance(loss, torch.Tensor) else torch.tensor(float(loss))
            row.dev["loss"] = t.float().reshape(-1).mean() if t.numel() else t.float().sum()
        if self._g_sq is not None:
            row.dev[self._g_key] = self._g_sq
        if self._before is not None:
            row.dev["p_sq"] = stats.sq_sum(self._params)  # type: ignore[assignment]
            u = stats.update_sq(self._params, self._before)
            if u is not None:
                row.dev["u_sq"] = u
            row.dev.update(stats.adam_moments(optimizer))
        scale = self._scale_before
        if scale is not None:
            row.dev["loss_scale"] = scale
            after = stats.loss_scale_of(scaler)
            if skipped is None and after is not None:
                skipped = after.to(scale.device) < scale
        if skipped is not None:
            flag = skipped if isinstance(skipped, torch.Tensor) else torch.tensor(bool(skipped))
            row.dev["skipped"] = flag.float().reshape(())
        if self._probe is not None:
            row.local.update(self._probe.take())
        dev = next(iter(row.dev.values())).device if row.dev else None
        if dev is not None and any(v.device != dev for v in row.dev.values()):
            row.dev = {k: v.to(dev) for k, v in row.dev.items()}  # one device for the flush

    def _tokens_of(self, step: int) -> float:
        total = 0
        for p in self._pending:
            if p.step == step and p.tokens is not None:
                total += p.tokens.numel()
        return float(total)

    def _stats_due(self) -> bool:
        return (self.step + 1) % self.stats_every == 0

    def _arm_layers(self) -> None:
        if self._probe is not None and self.layers_every:
            self._probe.armed = (self.step + 1) % self.layers_every == 0

    # ----- the logging interval ---------------------------------------------------------
    def flush(self) -> None:
        """Move the interval's statistics to the host (one transfer) and write them."""
        rows, self._rows = self._rows, []
        done = [p for p in self._pending if p.step <= self.step]
        self._pending = [p for p in self._pending if p.step > self.step]
        records = [p.to_record(self.dir) for p in done]
        values = _host_values(rows, self.world, bool(self.sharded))
        records = _gather_records(records, self.rank, self.world)
        if self.rank != 0 or self._metrics is None or self._batches is None:
            return
        for row, vals in zip(rows, values, strict=True):
            self._metrics.write(json.dumps(_metrics_row(row, vals)) + "\n")
        for rec in records:
            self._batches.write(json.dumps(rec, default=str) + "\n")
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


def _host_values(rows: list[_Row], world: int, sharded: bool) -> list[dict[str, float]]:
    """Every row's device values as floats, reduced across ranks: one transfer in all."""
    if not rows:
        return []
    sums: list[tuple[int, str, torch.Tensor]] = []
    maxes: list[tuple[int, str, torch.Tensor]] = []
    local: list[tuple[int, str, torch.Tensor]] = []
    for i, row in enumerate(rows):
        for key, t in row.dev.items():
            (maxes if key in _MAX else sums).append((i, key, t.float().reshape(())))
        local.extend((i, k, t.float().reshape(())) for k, t in row.local.items())
        sums.append((i, "tokens", torch.tensor(row.tokens)))
    device = next((t.device for _, _, t in sums + maxes if t.device.type != "cpu"), None)
    device = device or torch.device("cpu")
    sum_vec = torch.stack([t.to(device) for _, _, t in sums])
    max_vec = torch.stack([t.to(device) for _, _, t in maxes]) if maxes else sum_vec[:0]
    if world > 1:
        dist = torch.distributed
        dist.all_reduce(sum_vec, op=dist.ReduceOp.SUM)
        if maxes:
            dist.all_reduce(max_vec, op=dist.ReduceOp.MAX)
    loc_vec = torch.stack([t.to(device) for _, _, t in local]) if local else sum_vec[:0]
    flat = torch.cat([sum_vec, max_vec, loc_vec]).double().cpu().tolist()  # the one sync
    out: list[dict[str, float]] = [{} for _ in rows]
    for (i, key, _), value in zip(sums + maxes + local, flat, strict=True):
        if world > 1 and (key in _MEAN or (key in _NORM_PARTS and not sharded)):
            value /= world
        out[i][key] = value
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
    g_sq = vals.get("g_sq", vals.get("g_sq_global"))
    if g_sq is not None:
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
    out["lr"] = _f32(row.host["lr"])
    if "loss_scale" in vals:
        out["loss_scale"] = vals["loss_scale"]
    if "skipped" in vals:
        out["skipped"] = int(vals["skipped"] > 0)
    tokens = vals.get("tokens", 0.0)
    if tokens and row.seconds > 0:
        out["tokens_per_s"] = round(tokens / row.seconds, 1)
    out["wall_time"] = row.host["wall_time"]
    for key in sorted(vals, key=_layer_order):
        if "/" in key:
            out[key] = _f32(vals[key])
    return out


def _layer_order(key: str) -> tuple[str, int]:
    name, _, idx = key.partition("/")
    return name, int(idx) if idx.isdigit() else -1
