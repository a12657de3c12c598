"""Step counters that restart at every epoch, in logs that print the epoch beside them.

A hand-written loop often prints `Epoch: 2, Iter: 100, loss: 2.31` with `Iter` counted
within the epoch (`for i, batch in enumerate(loader)`); Time-LLM prints `iters: 100, epoch:
3 | loss: ...`. Read as printed, epoch 2's step 100 lands on epoch 1's step 100 and the
dedupe calls the earlier epochs a resumed attempt, keeping only the last epoch. When the
counter goes back exactly where the printed epoch goes up (and nowhere else), the step is
the counter plus the batches of the epochs before: (epoch - base) x N, N the epoch's
length read off the counts (the last one of a full epoch, plus one logging stride when the
counter starts at 0). A counter that goes back without a new epoch is a restart, left to
the restart dedupe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.ingest.readers._text import SLOT
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
    import polars as pl
else:  # the generic reader is imported by every ingest; numpy/polars load when it runs
    np = lazy_module("numpy")
    pl = lazy_module("polars")


def counted_over_epochs(
    hit: pl.DataFrame, epoch_slots: dict[str, tuple[int, str]], notes: list[str]
) -> pl.DataFrame:
    """`hit` with the step of every record line of the templates in `epoch_slots` (template
    -> slot and name of its printed epoch) counted over epochs where its counter restarts
    per epoch. Other kinds of line printing the same epoch (llama-recipes' bar at 100%,
    one blank narrower than at 17%) are counted with the same epoch length."""
    records = {t: _records(hit, t) for t in epoch_slots}
    done: set[str] = set()
    for tpl in sorted(epoch_slots, key=lambda t: -records[t].height):
        if tpl in done:
            continue
        slot, name = epoch_slots[tpl]
        rows = records[tpl]
        printed = _printed_total(rows)
        offsets = _offsets(rows["step"].to_numpy(), _epochs(rows, slot), printed)
        if offsets is None:
            continue
        length, base, shifted = offsets
        shifts = [rows.select("line", pl.Series("_offset", shifted))]
        for other, (o_slot, o_name) in epoch_slots.items():
            if other == tpl or other in done or o_name != name:
                continue
            o_epochs = _epochs(records[other], o_slot)
            if not _whole(o_epochs):
                continue
            done.add(other)
            offset = ((o_epochs - base) * length).astype(np.int64)
            shifts.append(records[other].select("line", pl.Series("_offset", offset)))
        shifts += _in_step(hit, tpl, rows["line"].to_numpy(), shifted, set(epoch_slots))
        done.add(tpl)
        hit = hit.join(pl.concat(shifts), on="line", how="left").with_columns(
            (pl.col("step") + pl.col("_offset").fill_null(0)).alias("step")
        )
        hit = hit.drop("_offset")
        notes.append(
            f"generic reader: the step counter of lines like '{_shown(rows)}' starts again "
            f"at every epoch: steps are counted over epochs, {length} per epoch ("
            f"{'as printed' if length == printed else 'from the counts of a full epoch'}), "
            f"epoch {base} first"
        )
    return hit


def _epochs(rows: pl.DataFrame, slot: int) -> np.ndarray:
    return rows["nums"].list.get(slot, null_on_oob=True).cast(pl.Float64, strict=False).to_numpy()


def _whole(epochs: np.ndarray) -> bool:
    return bool(len(epochs)) and bool(np.all(np.isfinite(epochs) & (epochs == np.floor(epochs))))


def _records(hit: pl.DataFrame, tpl: str) -> pl.DataFrame:
    return hit.filter((pl.col("tpl") == tpl) & ~pl.col("cont") & pl.col("step").is_not_null())


def _in_step(
    hit: pl.DataFrame, tpl: str, lines: np.ndarray, shifted: np.ndarray, skip: set[str]
) -> list[pl.DataFrame]:
    """The other kinds of record line whose counter restarts with the epoch ones (Time-LLM's
    bare `1500it [..]` bar lines between its `iters:` lines): each restart falls between an
    epoch's last line and the next epoch's first, so their segments take those offsets."""
    starts = np.flatnonzero(np.diff(shifted) > 0) + 1  # first line of every new epoch
    out = []
    for other in hit.filter(~pl.col("cont"))["tpl"].unique().to_list():
        if other == tpl or other in skip:
            continue
        rows = _records(hit, other)
        back = np.flatnonzero(np.diff(rows["step"].to_numpy()) < 0) + 1
        if len(back) != len(starts):
            continue
        at = rows["line"].to_numpy()
        if not all(lines[s - 1] < at[b] <= lines[s] for b, s in zip(back, starts, strict=True)):
            continue
        segment = np.searchsorted(back, np.arange(len(at)), side="right")
        offset = np.concatenate([[shifted[0]], shifted[starts]])[segment]
        out.append(rows.select("line", pl.Series("_offset", offset)))
    return out


def _printed_total(rows: pl.DataFrame) -> int | None:
    """The epoch's length when the counter prints it (`step 10/64`), the same on every line."""
    if not rows.height or rows["step_slot"][0] is None:
        return None
    k = int(rows["step_slot"][0])
    lits = str(rows["tpl"][0]).split(SLOT)
    if k + 1 >= len(lits) or lits[k + 1].strip() != "/":
        return None
    totals = rows["nums"].list.get(k + 1, null_on_oob=True).cast(pl.Int64, strict=False)
    return int(totals[0]) if totals.n_unique() == 1 and totals[0] is not None else None


def _offsets(
    steps: np.ndarray, epochs: np.ndarray, printed: int | None = None
) -> tuple[int, int, np.ndarray] | None:
    """(epoch length, first epoch, offset per line) when the counter restarts exactly at
    every new epoch; None otherwise (a global step, a restart, a fractional epoch). The
    length is the printed total when the counter prints one and every count fits in it."""
    if len(steps) < 4 or not _whole(epochs):
        return None
    d_epoch, d_step = np.diff(epochs), np.diff(steps)
    new_epoch = d_epoch > 0
    if np.any(d_epoch < 0) or not new_epoch.any():
        return None
    # a new epoch's counter starts again: below the last one's, or equal to it where the log
    # prints one line per epoch (MXNet's Speedometer every 1000 batches: `Batch [1000]`)
    if np.any(d_step[new_epoch] > 0) or np.any(d_step[~new_epoch] < 0):
        return None  # not restarting at every new epoch, or going back inside one
    ends = np.flatnonzero(new_epoch)  # the last line of every full epoch
    within = d_step[~new_epoch]
    stride = int(np.median(within[within > 0])) if np.any(within > 0) else 1
    starts = np.concatenate([[0], ends + 1])
    zero_based = bool(np.min(steps[starts]) == 0)
    length = int(np.max(steps[ends])) + (stride if zero_based else 0)
    if printed is not None and printed >= int(np.max(steps)) + (1 if zero_based else 0):
        length = printed
    base = 0 if np.min(epochs) == 0 else 1
    return length, base, ((epochs - base) * length).astype(np.int64)


def _shown(rows: pl.DataFrame) -> str:
    text = str(rows["text"][0]) if "text" in rows.columns and rows.height else ""
    return " ".join(text.split())[:80]
