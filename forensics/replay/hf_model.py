"""Tier 3 for a Hugging Face run: the user's own model, re-trained to the offending step by the
user's own Trainer.

The model is loaded with `AutoModelForCausalLM.from_pretrained(checkpoint-N/)` (local files
only, no hub), and `Trainer.train(resume_from_checkpoint=checkpoint-N/)` restores what the run
had there: AdamW's moments (`optimizer.pt`), the schedule (`scheduler.pt`), the RNG states and
the position in the data. The Trainer then re-runs the logged steps on the run's own batches
(its own dataloader over the user's dataset), so the replayed loss and grad norm come from the
same code that logged them. A callback keeps a copy of the model just before the offending
step (the state the batch probes measure) and stops the re-run at the end of the window.

`CausalLMProbe` makes the model look like the bundled GPT to the batch measurements
(`measure.token_losses`, `group_grad_norms`): `forward(x, y, reduction)` returns per-position
losses, with x = input_ids[:, :-1] and y = labels[:, 1:] (the shift the HF loss applies).
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from forensics.replay.hf_data import DataUnavailable, HFBatch, _local_args
from forensics.replay.measure import Batch
from forensics.replay.state import StateUnavailable

CHECKPOINT_FILES = ("config.json", "optimizer.pt", "scheduler.pt")


def is_hf_checkpoint(path: Path) -> bool:
    """A `checkpoint-N/` folder the Trainer wrote (config.json with a model_type)."""
    cfg = path / "config.json"
    if not (path.is_dir() and cfg.is_file()):
        return False
    try:
        return "model_type" in json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def check_checkpoint(path: Path) -> None:
    """Raise StateUnavailable naming what a resumable checkpoint lacks."""
    missing = [f for f in CHECKPOINT_FILES if not (path / f).is_file()]
    if "optimizer.pt" in missing:
        raise StateUnavailable(
            f"{path} has no optimizer.pt: replay needs AdamW's moments to re-run training steps "
            "(save with save_only_model=False)"
        )
    if missing:
        raise StateUnavailable(f"{path} lacks {', '.join(missing)} (needed to resume the run)")


def load_model(path: Path, device: torch.device) -> nn.Module:
    """The user's model from a local folder; StateUnavailable when transformers cannot build it."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # unknown architecture, missing weights, remote code...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StateUnavailable(
            f"{path}: architecture not loadable by transformers ({first})"
        ) from exc
    return model.to(device).float()  # type: ignore[arg-type]


@dataclass
class Rerun:
    """What the re-run produced: per-step rows (loss, grad norm, the LR the step used and the
    norm of its update) and the model before the offending step."""

    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    pre: nn.Module | None = None
    start_step: int = 0
    wall_s: float = 0.0
    beta2: float | None = None  # the run's AdamW beta2, as restored from optimizer.pt
    lr_source: str = "scheduler"  # where the steps' LR came from: "log" or "scheduler"


@dataclass
class Change:
    """A counterfactual: beta2 from the first re-run step on, the LR scaled by `lr_factor`,
    and Adam's second moment raised to the squared gradient at step `reset_at`; the steps in
    `batches` train those inputs (one collated dict per micro-batch, as `StepIndex.batch`
    gives them) instead of their own, the steps in `skip` make no update (their gradients
    are dropped before the optimizer's step)."""

    beta2: float | None = None
    lr_factor: float = 1.0
    reset_at: int | None = None
    batches: dict[int, list[Any]] = field(default_factory=dict)
    skip: frozenset[int] = frozenset()


def rerun(
    ckpt: Path,
    ckpt_step: int,
    args: Any,
    dataset: Any,
    offending: int,
    end: int,
    device: torch.device,
    *,
    logged_lr: dict[int, float] | None = None,
    change: Change | None = None,
    collator: Any = None,
) -> Rerun:
    """Resume the run from `ckpt` with its own Trainer and re-run steps ckpt_step+1..end.

    Each step uses the LR the run logged for it (`logged_lr`) when there is one: a custom
    scheduler passed to the Trainer (`optimizers=`) is not in training_args.bin, and its
    rebuilt stand-in would replay another schedule. `change` makes it a counterfactual."""
    import time

    import transformers
    from transformers import Trainer, default_data_collator
    from transformers.trainer_callback import PrinterCallback

    check_checkpoint(ckpt)
    transformers.logging.set_verbosity_error()
    model = load_model(ckpt, device)
    out = Rerun(start_step=ckpt_step)
    watch = _watch_class()(out, offending, end, logged_lr or {}, change or Change(), change is None)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="forensics-replay-") as tmp:
        local = _local_args(args, tmp, cpu=device.type == "cpu")
        cls = _trainer_class(Trainer, watch.change)
        trainer = cls(model=model, args=local, train_dataset=dataset,
                      data_collator=collator or default_data_collator,
                      callbacks=[watch])  # fmt: skip
        trainer.remove_callback(PrinterCallback)  # the re-run's logs go to `rows`, not stdout
        try:
            trainer.train(resume_from_checkpoint=str(ckpt))
        except (DataUnavailable, StateUnavailable):
            raise
        except Exception as exc:  # the Trainer refuses to resume: say why, in one line
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StateUnavailable(f"the Trainer cannot resume from {ckpt} ({first})") from exc
    out.wall_s = time.perf_counter() - t0
    if change is None and out.pre is None:
        raise StateUnavailable(f"the re-run from {ckpt} never reached step {offending}")
    return out


def _trainer_class(base: type, change: Change) -> type:
    """The Trainer, or, when `change` substitutes batches, a Trainer whose step t feeds
    its k-th micro-batch `change.batches[t][k]` to `training_step` instead of the one its
    dataloader gave (same shapes and collator: the dataloader and its sampler are left as
    they are, so every other step gets its own batch)."""
    if not change.batches:
        return base

    class Substituting(base):  # type: ignore[misc,valid-type]
        micro: tuple[int, int] = (-1, -1)  # (step, micro-batch) last fed

        def training_step(self, model: Any, inputs: Any, *args: Any, **kw: Any) -> Any:
            step = int(self.state.global_step) + 1
            subs = change.batches.get(step)
            if subs:
                last, k = self.micro
                self.micro = (step, k + 1 if last == step else 0)
                inputs = subs[self.micro[1] % len(subs)]
            return super().training_step(model, inputs, *args, **kw)

    return Substituting


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer under accelerate's wrapper."""
    return getattr(optimizer, "optimizer", optimizer)  # type: ignore[no-any-return]


def _watch_class() -> type:
    """The re-run's TrainerCallback (defined here: transformers is imported only when used)."""
    from transformers import TrainerCallback

    class Watch(TrainerCallback):  # type: ignore[misc]
        """Keeps the re-run's rows, the pre-offending model, and applies a counterfactual."""

        def __init__(self, out: Rerun, offending: int, end: int, logged_lr: dict[int, float],
                     change: Change, keep_pre: bool) -> None:  # fmt: skip
            self.out, self.offending, self.end, self.logged_lr = out, offending, end, logged_lr
            self.change, self.keep_pre = change, keep_pre
            self.before: list[torch.Tensor] = []
            self.lr = math.nan

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            opt = _inner(kw["optimizer"])
            if self.out.beta2 is None:
                self.out.beta2 = float(opt.param_groups[0]["betas"][1])
                if self.change.beta2 is not None:
                    for g in opt.param_groups:
                        g["betas"] = (g["betas"][0], self.change.beta2)
            if self.keep_pre and state.global_step == self.offending - 1 and self.out.pre is None:
                self.out.pre = copy.deepcopy(kw["model"]).eval()

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step, opt = state.global_step + 1, _inner(kw["optimizer"])
            lr = self.logged_lr.get(step)
            if lr is not None and opt.param_groups[0]["lr"] > 0:  # the logged LR, groups in ratio
                ratio = lr / float(opt.param_groups[0]["lr"])
                for g in opt.param_groups:
                    g["lr"] = float(g["lr"]) * ratio
                self.out.lr_source = "log"
            for g in opt.param_groups:
                g["lr"] = float(g["lr"]) * self.change.lr_factor
            if step in self.change.skip:  # the loss is logged, the update not made
                for p in kw["model"].parameters():
                    p.grad = None
            if self.change.reset_at == step:
                from forensics.replay.probes.counterfactual import raise_second_moment

                grads = {
                    p: p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None
                }
                raise_second_moment(opt, grads, 1.0)
            self.lr = float(opt.param_groups[0]["lr"])
            self.before = [p.detach().clone() for p in kw["model"].parameters()]

        @torch.no_grad()
        def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step = state.global_step + 1
            deltas = [
                (p.detach() - b).float().norm()
                for p, b in zip(kw["model"].parameters(), self.before, strict=True)
            ]
            norm = float(torch.linalg.vector_norm(torch.stack(deltas))) if deltas else 0.0
            self.before = []
            row = self.out.rows.setdefault(step, {"step": step})
            row |= {"update_norm": norm, "lr": self.lr}
            opt = _inner(kw["optimizer"])
            if self.change.lr_factor != 1.0:  # undo, so the scheduler's own arithmetic is untouched
                for g in opt.param_groups:
                    g["lr"] = float(g["lr"]) / self.change.lr_factor

        def on_log(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            logs = kw.get("logs")
            if logs and "loss" in logs:
                gn = logs.get("grad_norm")
                row = self.out.rows.setdefault(state.global_step, {"step": state.global_step})
                row |= {
                    "loss": float(logs["loss"]),
                    "grad_norm": math.nan if gn is None else float(gn),
                }

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if args.logging_steps == 1:  # a resumed state keeps the checkpoint's interval
                control.should_log = True
            if state.global_step >= self.end:
                control.should_training_stop = True

    return Watch


class CausalLMProbe(nn.Module):
    """A Hugging Face causal LM seen through the bundled GPT's measuring interface."""

    def __init__(self, model: nn.Module, vocab_size: int) -> None:
        super().__init__()
        self.hf = model
        self.cfg = SimpleNamespace(vocab_size=vocab_size)
        self.input_scale = 1.0

    def forward(
        self, x: torch.Tensor, y: torch.Tensor | None = None, reduction: str = "mean", **_: Any
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.hf(input_ids=x).logits  # (B, T, V)
        if y is None:
            return logits, None
        tok = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
        tok = tok.view(y.shape)
        return logits, tok if reduction == "none" else tok.mean()


def probe_batch(batch: HFBatch, device: torch.device) -> Batch:
    """(x, y, 1.0) per micro-batch: inputs and the next-token targets the HF loss uses
    (a label the loss ignores, -100, is read as the next input token)."""
    out = []
    for b in batch:
        ids = b["input_ids"].long()
        labels = b.get("labels", ids).long()
        labels = torch.where(labels < 0, ids, labels)
        out.append(
            (ids[:, :-1].contiguous().to(device), labels[:, 1:].contiguous().to(device), 1.0)
        )
    return out


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks: the longest ModuleList of identical block types."""
    best: list[nn.Module] = []
    for mod in model.modules():
        if not isinstance(mod, nn.ModuleList):
            continue
        blocks = list(mod)
        if len({type(m) for m in blocks}) == 1 and len(blocks) > len(best):
            best = blocks
    return best


@torch.no_grad()
def layer_trace(model: nn.Module, batch: Batch, dtype: torch.dtype) -> dict[str, Any]:
    """Forward of `batch` on a copy of `model` in `dtype`, the largest |output| of each decoder
    layer through forward hooks, the logits' too, and where it first goes non-finite."""
    m = copy.deepcopy(model).to(dtype)
    layers = decoder_layers(m)
    peaks = [0.0] * len(layers)

    def hook(i: int) -> Any:
        def keep(mod: nn.Module, args: Any, out: Any) -> None:
            t = out[0] if isinstance(out, tuple) else out
            v = float(t.detach().float().abs().max())
            peaks[i] = (
                v if (math.isnan(v) or v > peaks[i]) and not math.isnan(peaks[i]) else peaks[i]
            )

        return keep

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
    try:
        logit_max, loss = 0.0, 0.0
        for x, y, _ in batch:
            logits = m(input_ids=x).logits.float()
            logit_max = max(logit_max, float(logits.abs().max()))
            loss += float(F.cross_entropy(logits.flatten(0, 1), y.flatten())) / len(batch)
    finally:
        for h in handles:
            h.remove()
    names = [f"layer {i}" for i in range(len(layers))]
    first = next((n for n, v in zip(names, peaks, strict=True) if not math.isfinite(v)), None)
    if first is None and not math.isfinite(logit_max):
        first = "logits"
    return {
        "loss": loss,
        "max_abs_act": peaks,
        "logits_max_abs": logit_max,
        "first_nonfinite": first,
    }
