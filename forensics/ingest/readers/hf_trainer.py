"""Hugging Face Trainer `trainer_state.json`.

`log_history` mixes three kinds of entries in one list, all with `step` and `epoch`:
training entries (`loss`, `grad_norm`, `learning_rate`), evaluation entries (`eval_*`,
kept under their own raw names so `eval_loss` can never be mixed into `loss`), and one
closing summary (`train_runtime`, `train_loss`, ...). The summary's `train_loss` is the
average over the whole run: it is stored as `train_loss_final`, never as a per-step loss,
and the rest of the summary goes to the config under `trainer_summary.*`. `epoch` is
stored once per step although every entry repeats it.

A diverged step's loss: with `logging_nan_inf_filter` (on by default) the Trainer adds the
window's running mean instead of a NaN/Inf loss, so a window whose every step was
non-finite logs `loss: 0.0` (with `grad_norm: nan` where the grad norm is logged), as in
`{'loss': 0.0, 'grad_norm': nan, ...}` (AnswerDotAI/ModernBERT#233). A stretch of exact
0.0 losses is read as the NaN it stands for when the grad norm is non-finite in it, or,
without a grad norm, when the loss just before it was at least STANDIN_FLOOR (a real loss
cannot fall from there to under 5e-5, the Trainer's rounding, in one logging window);
a 0.0 beside a finite grad norm is a real (rounded) loss and kept. Each reading is a
warning of the source.

Config: the state's own fields (max_steps, train_batch_size, logging_steps, ...) plus a
sibling `config.json` / `training_args.json` when present (`training_args.bin` is a
pickle and is not loaded). An output dir without the model's `config.json` (no final
`save_model`) still has one in each `checkpoint-N/`: its `vocab_size` is taken from the
newest, the only model setting the detector reads (ln V, the loss of random tokens).
"""

from __future__ import annotations

import math
import re
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.checkpoints import HF_CHECKPOINT_DIR
from forensics.ingest.config import add_canonical, is_config_file, load_config, normalise_config
from forensics.ingest.jsonfile import read_json_object
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

_SUMMARY_KEYS = frozenset(
    {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos",
     "train_loss"}
)  # fmt: skip
_NONFINITE_TEXT = re.compile(r"[+-]?(nan|inf|infinity)", re.IGNORECASE)
_SIBLING_CONFIGS = ("config.json", "training_args.json", "args.json")
# A logged loss from which a fall to under 5e-5 (0.0 after the Trainer's rounding to 4
# decimals) in one window is no real loss curve: a fine-tune's loss approaches 0 gradually.
STANDIN_FLOOR = 0.01


@register
class HfTrainerReader(Reader):
    name = "hf_trainer"
    description = "Hugging Face Trainer trainer_state.json (log_history)"
    priority = 10  # a JSON document with log_history is never anything else

    def sniff(self, path: Path, head: str) -> bool:
        return head.lstrip().startswith("{") and '"log_history"' in head

    def read(self, path: Path) -> ReadResult:
        state = _load(path)
        history = state.get("log_history")
        if not isinstance(history, list):
            raise InputError(path, "not a list", field="log_history", expected="a list of dicts")
        rows, summary, warnings = _rows(history)
        metrics = pl.DataFrame(
            rows, schema={"step": pl.Int64, "raw_name": pl.Utf8, "value": pl.Float64}, orient="row"
        )
        return ReadResult(metrics, config=_config(path, state, summary), warnings=warnings)


def _load(path: Path) -> dict[str, Any]:
    return read_json_object(path, expected="a trainer_state.json document")


def _number(value: Any) -> float | None:
    """A log value as float. Text spelling NaN or Inf ("nan", "Infinity", "-inf": what some
    trainers write for a diverged loss, since strict JSON has no such token) is that value:
    NaN and Inf are the evidence. Other text is not a metric."""
    if isinstance(value, str):
        text = value.strip()
        return float(text) if _NONFINITE_TEXT.fullmatch(text) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


def _rows(history: list[Any]) -> tuple[list[tuple[int, str, float]], dict[str, Any], list[str]]:
    """(step, raw name, value) rows, the closing summary, and warnings."""
    rows: list[tuple[int, str, float]] = []
    summary: dict[str, Any] = {}
    epoch_steps: set[int] = set()
    skipped = 0
    for entry in history:
        step = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            skipped += 1
            continue
        rows += _entry_rows(entry, step, summary, epoch_steps)
    warnings = []
    if skipped:
        warnings.append(f"{skipped} log_history entries without an integer 'step' skipped")
    standins = nan_standins(history)
    if standins:
        rows = [(s, k, math.nan if k == "loss" and s in standins else v) for s, k, v in rows]
        warnings.append(standin_warning(standins))
    return rows, summary, warnings


def standin_warning(standins: set[int]) -> str:
    first, last = min(standins), max(standins)
    return (
        f"{len(standins)} 'loss: 0.0' entries (steps {first}..{last}) read as NaN: "
        "logging_nan_inf_filter logs 0.0 for a window whose every loss was NaN/Inf"
    )


def long_standins(metrics: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """The Trainer's own TensorBoard and W&B logs (`train/loss`, `train/grad_norm`,
    `train/epoch`: its callbacks' names) carry the same 0.0 stand-ins as trainer_state.json;
    read them the same way, so that a run's event file and its state file tell one story
    (a crashed run's last windows are often in the event file alone)."""
    names = set(metrics["raw_name"].unique().to_list())
    if not {"train/loss", "train/epoch"} <= names:
        return metrics
    loss = metrics.filter(pl.col("raw_name") == "train/loss").sort("step")
    grad = dict(
        metrics.filter(pl.col("raw_name") == "train/grad_norm").select("step", "value").iter_rows()
    )
    history = [
        {"step": int(st), "loss": v, "grad_norm": grad.get(st)}
        for st, v in loss.select("step", "value").iter_rows()
    ]
    standins = nan_standins(history)
    if not standins:
        return metrics
    warnings.append(standin_warning(standins))
    zero = (
        (pl.col("raw_name") == "train/loss")
        & pl.col("step").is_in(sorted(standins))
        & (pl.col("value") == 0.0)
    )
    return metrics.with_columns(pl.when(zero).then(float("nan")).otherwise("value").alias("value"))


def nan_standins(history: list[Any]) -> set[int]:
    """Steps whose logged `loss: 0.0` stands for a non-finite loss (see the module doc)."""
    train = [
        e for e in history
        if isinstance(e, dict) and isinstance(e.get("step"), int) and "loss" in e
        and "train_runtime" not in e and _number(e["loss"]) is not None
    ]  # fmt: skip
    out: set[int] = set()
    before: float | None = None  # the loss logged just before the current stretch
    for zero, group in groupby(train, key=lambda e: _number(e["loss"]) == 0.0):
        stretch = list(group)
        grads = [g for e in stretch if (g := _number(e.get("grad_norm"))) is not None]
        if zero and (
            (grads and not all(math.isfinite(g) for g in grads))
            or (not grads and before is not None and before >= STANDIN_FLOOR)
        ):
            out.update(e["step"] for e in stretch)
        before = _number(stretch[-1]["loss"])
    return out


def _entry_rows(
    entry: dict[str, Any], step: int, summary: dict[str, Any], epoch_steps: set[int]
) -> list[tuple[int, str, float]]:
    """One entry's values; the summary (it alone has train_runtime) fills `summary` instead."""
    is_summary = "train_runtime" in entry
    rows: list[tuple[int, str, float]] = []
    for key, value in entry.items():
        num = _number(value)
        if key == "step" or num is None:
            continue
        if is_summary and key in _SUMMARY_KEYS:
            summary[key] = value
            if key == "train_loss":  # the run's average, not the loss at this step
                rows.append((step, "train_loss_final", num))
        elif key == "epoch" and step in epoch_steps:
            continue  # every entry repeats the epoch: one row per step
        else:
            if key == "epoch":
                epoch_steps.add(step)
            rows.append((step, key, num))
    return rows


def _checkpoint_vocab(folder: Path) -> dict[str, Any]:
    """vocab_size from the model config of the newest `checkpoint-N/` in `folder`."""
    matches = ((HF_CHECKPOINT_DIR.match(d.name), d) for d in folder.glob("checkpoint-*"))
    for _, ckpt in sorted(((int(m.group(1)), d) for m, d in matches if m), reverse=True):
        model = ckpt / "config.json"
        if is_config_file(model):
            try:
                vocab = load_config(model).get("vocab_size")
            except InputError:  # a side lookup: a damaged model config only loses ln V
                return {}
            return {"vocab_size": vocab} if vocab else {}
    return {}


def _config(path: Path, state: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    if not is_config_file(path.parent / "config.json"):
        merged.update(_checkpoint_vocab(path.parent))
    for name in _SIBLING_CONFIGS:
        sibling = path.parent / name
        if is_config_file(sibling):
            merged.update(load_config(sibling))
    fields = {k: v for k, v in state.items() if k != "log_history"}
    merged.update(normalise_config({**fields, "trainer_summary": summary}))
    # Once more over all of it: the state's max_steps makes a warmup_ratio of
    # training_args.json (trained by epochs, max_steps -1) a number of steps.
    return add_canonical(merged)
