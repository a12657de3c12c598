"""The batches of a recorded run (`forensics.record`), rebuilt from the recorder's manifest.

For every micro-batch the recorder writes the dataset `sample_indices` the sampler yielded,
the dataset it read (`source`: a `datasets.save_to_disk` folder, also in
`config.data.train_dataset`) and `hash`, the SHA-256 of the token ids as fed (docs/recorder.md).
So replay needs neither the Trainer's sampler nor its seed: each micro-batch is the dataset's
rows at those indices, collated as transformers' `default_data_collator` does, and is
re-hashed. A micro-batch whose hash differs from the recorded one means the folder is not the
data the run trained on (another dataset, rows changed or re-tokenized since): the replay is
then refused with the step, micro-batch and both hashes, rather than run on other batches.

Used by the Hugging Face replay (hf_replay) for runs recorded by `ForensicsCallback` and by
`ForensicsLightningCallback` (given `data_source=`); a run whose manifest gives token spans
(the bundled loop) is read by the span path instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from forensics.replay.hf_data import DataUnavailable, StepIndex, load_dataset
from forensics.store.db import Store

MODEL_COLUMNS = ("input_ids", "attention_mask", "labels")  # what default_data_collator stacks
WINDOW = 200  # steps around each incident whose hashes are checked before replay


@dataclass
class RecordedBatches:
    """The manifest's micro-batches that name dataset rows, by step, in (rank, micro) order."""

    path: Path  # the dataset folder the records name
    steps: dict[int, list[list[int]]] = field(default_factory=dict)
    hashes: dict[int, list[str | None]] = field(default_factory=dict)
    checked: int = 0  # micro-batches whose rebuilt hash was compared (and matched)


def recorded_batches(
    store: Store, run_id: str, folder: Path | None = None
) -> RecordedBatches | None:
    """The run's recorder records with `sample_indices` and a dataset folder as `source`
    (None when it has none: no manifest, token-span records, or a loader label).

    folder: the dataset folder to read instead of the one the records name (`--dataset`,
    for a dataset that moved since the run); the hashes still decide whether it is the same.
    """
    frame = store.query(
        "SELECT step, micro, source, extra FROM batches "
        "WHERE run_id = ? AND token_offset IS NULL ORDER BY step, micro",
        [run_id],
    )
    found: dict[str, list[tuple[int, int, int, list[int], str | None]]] = {}
    for row in frame.iter_rows(named=True):
        extra = json.loads(row["extra"]) if row["extra"] else {}
        indices = extra.get("sample_indices")
        if not isinstance(indices, list) or not indices:
            continue
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            continue
        rank = extra.get("rank", 0)
        item = (
            int(row["step"]),
            int(rank or 0),
            int(row["micro"] or 0),
            indices,
            extra.get("hash"),
        )
        found.setdefault(str(folder or row["source"]), []).append(item)
    folders = {src: items for src, items in found.items() if Path(src).is_dir()}
    if not folders:
        return None
    source, items = max(folders.items(), key=lambda kv: len(kv[1]))  # one dataset per run
    out = RecordedBatches(Path(source))
    for step, _, _, indices, digest in sorted(items, key=lambda t: t[:3]):
        out.steps.setdefault(step, []).append(indices)
        out.hashes.setdefault(step, []).append(digest if isinstance(digest, str) else None)
    return out


def manifest_index(rec: RecordedBatches, dataset: Any, check: Iterable[int]) -> StepIndex:
    """A StepIndex over the manifest's rows, its hashes checked at the steps in `check`.

    Raises DataUnavailable naming the first micro-batch whose rebuilt ids hash differently.
    """
    from transformers import default_data_collator

    keep = [c for c in MODEL_COLUMNS if c in dataset.column_names]
    pruned = dataset.select_columns(keep)
    n = len(pruned)
    for step, micro in rec.steps.items():
        bad = [i for rows in micro for i in rows if not 0 <= i < n]
        if bad:
            raise DataUnavailable(
                f"{rec.path}: the manifest's step {step} names row {bad[0]}, the dataset has "
                f"{n} rows: not the dataset the run trained on"
            )
    index = StepIndex(pruned, default_data_collator, rec.steps, max(rec.steps))
    for step in sorted(set(check) & set(rec.steps)):
        verify(index, rec, step)
    return index


def verify(index: StepIndex, rec: RecordedBatches, step: int) -> None:
    """Re-hash the rebuilt micro-batches of `step` against the recorder's hashes."""
    from forensics.record.manifest import batch_hash

    for m, (batch, want) in enumerate(zip(index.batch(step), rec.hashes[step], strict=True)):
        if want is None:
            continue
        got = batch_hash(np.asarray(batch["input_ids"], dtype=np.int64))
        if got != want:
            raise DataUnavailable(
                f"the batch rebuilt from {rec.path} for step {step} (micro-batch {m}) does not "
                f"match the recorder's hash ({got[:19]}... vs {want[:19]}...): not the data the "
                "run trained on"
            )
        rec.checked += 1


def steps_to_check(incidents: Iterable[Any], steps: Iterable[int]) -> set[int]:
    """The steps a replay of these incidents can read: WINDOW steps around each of them."""
    want: set[int] = set()
    for inc in incidents:
        lo, hi = int(inc.onset) - WINDOW, int(getattr(inc, "peak", inc.onset)) + WINDOW
        want |= {t for t in steps if lo <= t <= hi}
    return want


def load_recorded(
    store: Store, run_id: str, incidents: Iterable[Any], folder: Path | None = None
) -> tuple[Any, StepIndex]:
    """(the dataset, the manifest's StepIndex) of a recorded run, hashes checked around the
    incidents; DataUnavailable when the run has no such manifest or a hash differs."""
    rec = recorded_batches(store, run_id, folder)
    if rec is None:
        raise DataUnavailable("no recorder manifest with sample_indices and a dataset folder")
    dataset = load_dataset(rec.path)
    index = manifest_index(rec, dataset, steps_to_check(incidents, rec.steps))
    return dataset, index
