"""The simulator's training loop: AdamW, clipping, warmup + cosine, fp32/bf16/fp16, full logging.

Replay builds on this module, so the loop is split into pieces that can be driven step by step:

    state = resume(run_dir, 500)                 # rebuild model/optimizer/scaler/RNG after 500
    state = resume(run_dir, 500, beta2=0.95)     # ... with a changed beta2 (or peak_lr, ...)
    state = resume_from_checkpoint(path)         # same, from a checkpoint file anywhere
    rows = train_steps(state, 20)                # steps 501..520 on the logged batches
    row = train_step(state, records)             # one step on any BatchRecords you choose

With CPU deterministic mode, a resumed state fed the manifest's batches reproduces the logged
loss bit for bit (tests/sim/test_reproduce.py).

Non-finite gradients (Megatron's found_inf): when the global grad norm is NaN/Inf the step is
SKIPPED (no optimizer update, `skipped: 1`), in every precision; fp16 also halves the loss scale.
Set `skip_nonfinite=False` to let the NaN propagate into the weights, as a plain PyTorch loop
would. Each logged row is one optimizer step (see `METRIC_KEYS`).
"""

from __future__ import annotations

import copy
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from forensics.errors import SimulationError
from forensics.sim import checkpoint as ckpt_io
from forensics.sim.data import BatchRecord, read_batch, read_manifest, read_shard, sample_record
from forensics.sim.model import GPT, GPTConfig, known_fields, preset
from forensics.sim.precision import LossScaler, compute_dtype

METRIC_KEYS = (
    "step", "loss", "grad_norm", "param_norm", "update_norm", "adam_v_mean", "lr",
    "tokens_per_s", "loss_scale", "skipped", "wall_time",
)  # fmt: skip


@dataclass
class TrainConfig:
    """Everything that defines a run; `to_dict()` is the run's config.json."""

    model: GPTConfig = field(default_factory=lambda: preset("tiny"))
    preset: str = "tiny"  # name of the model preset the model config came from
    total_steps: int = 1600  # optimizer steps; also the end of the cosine decay
    batch_size: int = 8  # sequences per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    seq_len: int = 64  # tokens per sequence
    peak_lr: float = 1e-2  # LR at the end of warmup
    min_lr: float = 1e-3  # LR at the end of the cosine decay
    warmup_steps: int = 100  # linear warmup from peak_lr/warmup_steps to peak_lr
    beta1: float = 0.9  # AdamW first-moment decay
    beta2: float = 0.95  # AdamW second-moment decay (0.999 is the stale_beta2 scenario)
    eps: float = 1e-8  # AdamW epsilon
    weight_decay: float = 0.1  # decoupled decay on matrices (not on norm weights)
    grad_clip: float = 1.0  # max global grad norm; 0 = no clipping
    precision: str = "fp32"  # fp32 | bf16 | fp16 (fp16 uses the dynamic loss scaler)
    device: str = "auto"  # auto | cpu | cuda[:i]
    seed: int = 1337  # model init and batch sampling
    data_seed: int = 1234  # the synthetic language and its shard
    data_tokens: int = 65536  # tokens in data/train_000.bin
    log_layers_every: int = 20  # per-layer act_norm/max_attn_logit every this many steps
    ckpt_steps: list[int] = field(default_factory=list)  # steps after which to checkpoint
    skip_nonfinite: bool = True  # skip the update when the grad norm is NaN/Inf
    loss_scale_init: float = 65536.0  # fp16: initial loss scale
    loss_scale_window: int = 1000  # fp16: good steps before the scale doubles (DeepSpeed's)
    threads: int = 1  # torch CPU threads: tiny models run fastest on one; 0 = torch's default

    def to_dict(self) -> dict[str, Any]:
        """config.json: every field plus the canonical keys forensics ingest looks for."""
        data = {k: v for k, v in asdict(self).items() if k != "model"}
        data["model"] = self.model.to_dict()
        data["global_batch_size"] = self.batch_size * self.grad_accum
        data["tokens_per_step"] = self.batch_size * self.grad_accum * self.seq_len
        data["world_size"] = 1
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        kwargs = known_fields(cls, data)
        kwargs.pop("model", None)
        return cls(model=GPTConfig.from_dict(data["model"]), **kwargs)


@dataclass
class TrainState:
    """A live run: fp32 master model, its compute copy, optimizer, scaler, last finished step."""

    cfg: TrainConfig
    model: GPT  # fp32 master weights (what checkpoints hold)
    compute: GPT  # the model in the compute dtype; the same object for fp32
    optimizer: torch.optim.AdamW
    scaler: LossScaler
    device: torch.device
    step: int = 0  # last completed optimizer step (0 = none yet)
    run_dir: Path | None = None  # where batches are read from


class Fault(Protocol):
    """Something done to a step from outside the data (e.g. a hardware fault's bit flip)."""

    step: int

    def apply(self, model: GPT) -> dict[str, Any]:
        """Act on the master model after its gradients are final; return what was done."""
        ...


BatchFn = Callable[[int], list[BatchRecord]]
StepHook = Callable[[dict[str, Any], list[BatchRecord]], None]


# ---------------------------------------------------------------------------- set-up


def seed_everything(seed: int, deterministic: bool = True) -> None:
    """Seed python/numpy/torch and (by default) force deterministic kernels."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    # warn_only: on CUDA a kernel without a deterministic variant warns instead of raising;
    # every CPU kernel the model uses is deterministic, which is what the replay tests rely on.
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    torch.backends.cudnn.benchmark = False


def resolve_device(name: str) -> torch.device:
    """'auto' is CUDA when available, else CPU; a named CUDA device must exist."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SimulationError(f"device {name!r} asked for but CUDA is not available; use cpu")
    return torch.device(name)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warmup to peak_lr over warmup_steps, then cosine to min_lr at total_steps."""
    if step <= cfg.warmup_steps:
        return cfg.peak_lr * step / max(1, cfg.warmup_steps)
    span = max(1, cfg.total_steps - cfg.warmup_steps)
    frac = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * frac)) * (cfg.peak_lr - cfg.min_lr)


def make_optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; matrices (ndim >= 2) decay, norm weights do not."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.peak_lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)


def build_state(cfg: TrainConfig, run_dir: Path | None = None) -> TrainState:
    """A freshly initialised run (seeds everything from cfg.seed)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    assert cfg.seq_len <= cfg.model.block_size, "seq_len must not exceed the model's block_size"
    model = GPT(cfg.model).to(device)
    dtype = compute_dtype(cfg.precision)
    compute = model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)
    scaler = LossScaler(
        enabled=cfg.precision == "fp16", scale=cfg.loss_scale_init, window=cfg.loss_scale_window
    )
    return TrainState(cfg, model, compute, make_optimizer(model, cfg), scaler, device, 0, run_dir)


# ---------------------------------------------------------------------------- one step


def _f32(x: float) -> float:
    """The shortest decimal that round-trips as float32: fp32-derived statistics carry no more
    precision, and it keeps metrics.jsonl small. Loss and grad norm are logged exactly."""
    return float(str(np.float32(x)))


@torch.no_grad()
def _global_norm(tensors: Sequence[torch.Tensor]) -> float:
    if not tensors:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([t.float().norm() for t in tensors])))


def _forward_backward(state: TrainState, records: list[BatchRecord]) -> float:
    """Accumulate gradients of all micro-batches into the compute model; return mean loss."""
    assert state.run_dir is not None, "state.run_dir must point at the run's folder"
    total = 0.0
    for rec in records:
        x, y = read_batch(state.run_dir, rec)
        x, y = x.to(state.device), y.to(state.device)
        state.compute.input_scale = rec.input_scale
        _, loss = state.compute(x, y)
        assert loss is not None
        (loss * (state.scaler.factor / len(records))).backward()
        total += float(loss.detach())
    state.compute.input_scale = 1.0
    return total / len(records)


def _master_grads(state: TrainState) -> None:
    """Move the compute copy's gradients into the fp32 master model, unscaled."""
    inv = 1.0 / state.scaler.factor
    if state.compute is state.model:
        if inv != 1.0:
            for p in state.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(inv)
        return
    for pm, pc in zip(state.model.parameters(), state.compute.parameters(), strict=True):
        pm.grad = None if pc.grad is None else pc.grad.float() * inv
        pc.grad = None


def _apply_update(state: TrainState, lr: float) -> tuple[float, bool]:
    """Clip, step AdamW, sync the compute copy. Returns (pre-clip grad norm, skipped)."""
    params = [p for p in state.model.parameters() if p.grad is not None]
    clip = state.cfg.grad_clip if state.cfg.grad_clip > 0 else math.inf
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip, error_if_nonfinite=False))
    finite = math.isfinite(grad_norm)
    state.scaler.update(finite)
    if not finite and state.cfg.skip_nonfinite:
        return grad_norm, True
    for group in state.optimizer.param_groups:
        group["lr"] = lr
    state.optimizer.step()
    if state.compute is not state.model:
        with torch.no_grad():
            for pm, pc in zip(state.model.parameters(), state.compute.parameters(), strict=True):
                pc.copy_(pm)
    return grad_norm, False


def _adam_v_mean(opt: torch.optim.AdamW) -> float:
    total, count = 0.0, 0
    for st in opt.state.values():
        if "exp_avg_sq" in st:
            total += float(st["exp_avg_sq"].float().sum())
            count += st["exp_avg_sq"].numel()
    return total / count if count else 0.0


@torch.no_grad()
def layer_stats(state: TrainState, record: BatchRecord) -> dict[str, float]:
    """act_norm/<i> and max_attn_logit/<i> of one batch (a separate no-grad forward, so the
    training numerics never depend on whether stats were logged)."""
    assert state.run_dir is not None
    x, _ = read_batch(state.run_dir, record)
    state.compute.input_scale = record.input_scale
    state.compute(x.to(state.device), record=True)
    state.compute.input_scale = 1.0
    out: dict[str, float] = {}
    for name, values in state.compute.stats.items():
        out.update({f"{name}/{i}": _f32(v) for i, v in enumerate(values)})
    return out


def train_step(
    state: TrainState, records: list[BatchRecord], faults: Sequence[Fault] = ()
) -> dict[str, Any]:
    """Run optimizer step `state.step + 1` on `records`; return its metrics row."""
    step = state.step + 1
    t0 = time.perf_counter()
    lr = lr_at(state.cfg, step)
    state.optimizer.zero_grad(set_to_none=True)
    loss = _forward_backward(state, records)
    _master_grads(state)
    for fault in faults:
        if fault.step == step:
            fault.apply(state.model)
    before = [p.detach().clone() for p in state.model.parameters()]
    loss_scale = state.scaler.scale
    grad_norm, skipped = _apply_update(state, lr)
    deltas = [p.detach() - b for p, b in zip(state.model.parameters(), before, strict=True)]
    if state.device.type == "cuda":
        torch.cuda.synchronize(state.device)
    dt = time.perf_counter() - t0
    tokens = sum(r.batch_size * r.seq_len for r in records)
    state.step = step
    row: dict[str, Any] = {
        "step": step,
        "loss": loss,
        "grad_norm": grad_norm,
        "param_norm": _f32(_global_norm(list(state.model.parameters()))),
        "update_norm": _f32(_global_norm(deltas)),
        "adam_v_mean": _f32(_adam_v_mean(state.optimizer)),
        "lr": _f32(lr),
        "tokens_per_s": round(tokens / dt, 1) if dt > 0 else 0.0,
        "skipped": int(skipped),
        "wall_time": round(time.time(), 3),
    }
    if state.scaler.enabled:
        row["loss_scale"] = loss_scale
    every = state.cfg.log_layers_every
    if every and step % every == 0:
        row.update(layer_stats(state, records[0]))
    return row


# ---------------------------------------------------------------------------- many steps


def manifest_batches(run_dir: Path) -> BatchFn:
    """Batches as logged in a run's batches.jsonl (what replay feeds by default)."""
    manifest = read_manifest(run_dir)

    def batches(step: int) -> list[BatchRecord]:
        if step not in manifest:
            raise SimulationError(f"{run_dir}/batches.jsonl has no batch for step {step}")
        return manifest[step]

    return batches


def sampled_batches(
    cfg: TrainConfig, shard_tokens: int, overrides: dict[int, list[BatchRecord]] | None = None
) -> BatchFn:
    """Default batches of a fresh run (random spans of the train shard), with overrides."""
    overrides = overrides or {}

    def batches(step: int) -> list[BatchRecord]:
        if step in overrides:
            return overrides[step]
        return [
            sample_record(step, m, cfg.seed, shard_tokens, cfg.batch_size, cfg.seq_len)
            for m in range(cfg.grad_accum)
        ]

    return batches


def train_steps(
    state: TrainState,
    steps: int,
    batches: BatchFn | None = None,
    faults: Sequence[Fault] = (),
    on_step: StepHook | None = None,
) -> list[dict[str, Any]]:
    """Run `steps` optimizer steps; batches default to the run's manifest. Returns the rows."""
    if batches is None:
        assert state.run_dir is not None, "pass batches= or set state.run_dir"
        batches = manifest_batches(state.run_dir)
    rows = []
    for _ in range(steps):
        records = batches(state.step + 1)
        row = train_step(state, records, faults)
        rows.append(row)
        if on_step is not None:
            on_step(row, records)
    return rows


# ---------------------------------------------------------------------------- checkpoints


def save_state(state: TrainState, path: Path | None = None) -> Path:
    """Checkpoint the state (default: <run>/checkpoints/ckpt_<step>.pt); returns the path."""
    if path is None:
        assert state.run_dir is not None
        path = ckpt_io.checkpoint_path(state.run_dir, state.step)
    payload = {
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "scaler": state.scaler.state_dict(),
        "rng": ckpt_io.rng_state(),
        "config": state.cfg.model.to_dict(),
        "train_config": state.cfg.to_dict(),
        "step": state.step,
    }
    ckpt_io.save_checkpoint(path, payload)
    return path


def resume(run_dir: Path, step: int, **overrides: Any) -> TrainState:
    """Rebuild the full training state saved after `step` in `run_dir`.

    `overrides` replace TrainConfig fields (e.g. beta2=0.95, peak_lr=1e-3, device="cpu",
    grad_clip=0.5); betas/eps/weight decay are also pushed into the restored optimizer. The
    returned state reads batches from the run's manifest, so `train_steps(state, n)` re-runs
    the logged steps `step+1 ... step+n`.
    """
    path = ckpt_io.checkpoint_path(Path(run_dir), step)
    return resume_from_checkpoint(path, Path(run_dir), **overrides)


def resume_from_checkpoint(path: Path, run_dir: Path | None = None, **overrides: Any) -> TrainState:
    """`resume` from a checkpoint file anywhere; `run_dir` (default: the folder above
    `checkpoints/`) is where relative batch sources are resolved."""
    path = Path(path)
    raw = ckpt_io.read_checkpoint(path)
    return state_from_checkpoint(raw, Path(run_dir) if run_dir is not None else path.parent.parent,
                                 **overrides)  # fmt: skip


def state_from_checkpoint(raw: dict[str, Any], run_dir: Path, **overrides: Any) -> TrainState:
    """The live training state a read checkpoint holds (model, Adam moments, loss scaler,
    RNG), with TrainConfig fields overridden: what both resume and replay start from."""
    cfg = TrainConfig.from_dict(raw["train_config"])
    bad = set(overrides) - {f.name for f in fields(TrainConfig)}
    if bad:
        raise SimulationError(f"resume: unknown TrainConfig fields {sorted(bad)}")
    cfg = replace(cfg, **overrides)
    state = build_state(cfg, run_dir)
    state.model.load_state_dict(raw["model"])
    state.optimizer.load_state_dict(raw["optimizer"])
    for group in state.optimizer.param_groups:
        group["betas"] = (cfg.beta1, cfg.beta2)
        group["eps"] = cfg.eps
        group["weight_decay"] = cfg.weight_decay if group["weight_decay"] else 0.0
    state.scaler.load_state_dict(raw["scaler"])
    if state.compute is not state.model:
        state.compute.load_state_dict(state.model.state_dict())
    ckpt_io.set_rng_state(raw["rng"])
    state.step = int(raw["step"])
    return state


def shard_tokens(run_dir: Path, source: str) -> int:
    """Token count of a shard in a run folder."""
    return int(read_shard(Path(run_dir) / source).size)
