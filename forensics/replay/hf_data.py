"""Tier 1 for a Hugging Face Trainer run: the batches it fed, rebuilt by transformers itself.

The Trainer draws its batches from `Trainer.get_train_dataloader()`: the sampler (accelerate's
seedable sampler, seeded with `data_seed` or `seed`, reseeded per epoch with `set_epoch`), the
column pruning and the collator are all the Trainer's. So the run's batches are rebuilt by
building a Trainer from the run's own `training_args.bin` and the user's dataset
(`datasets.load_from_disk`), asking it for its train dataloader, and walking the batch sampler
to the wanted optimizer steps: each step takes `gradient_accumulation_steps` micro-batches
(fewer for the last step of an epoch), exactly as `Trainer._inner_training_loop` chunks them.
Only the wanted steps' rows are fetched and collated, so reaching step N costs N sampler draws,
not N collations.

The run's collator object is not saved with the run, so it is inferred from the dataset
(`run_collator`): a dataset with a `labels` column was fed through `default_data_collator`
(the Trainer's choice without a tokenizer; with rows of one length it is also what
`DataCollatorWithPadding` gives); a dataset without one cannot have trained a causal LM through
`default_data_collator` (no labels, no loss), so its labels were made by the collator:
`DataCollatorForLanguageModeling(tokenizer, mlm=False)` (labels = input_ids, pad -> -100),
rebuilt with the tokenizer the Trainer saved in `checkpoint-N/`. Any other collator (custom
masking, packing with position ids, MLM) is not reproduced; the `reproduce` row then shows the
mismatch.

Limits (said in the detail when hit): the dataset must be pre-tokenized (`input_ids`,
optionally `labels` and `attention_mask`) with rows of one length; one process only (world size
1); and `training_args.bin` is a pickle, loaded with `weights_only=False`, so it must be the
user's own file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

HFBatch = list[dict[str, torch.Tensor]]  # the micro-batches of one optimizer step


class DataUnavailable(Exception):
    """The run's batches cannot be rebuilt; the message says why (one line)."""


class _Dummy(nn.Module):
    """Stands for the model when only the data is rebuilt: the Trainer prunes the dataset's
    columns to the model's forward arguments, which are these for a causal LM."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        return {"loss": self.w.sum()}


def load_training_args(path: Path) -> Any:
    """The run's TrainingArguments from `training_args.bin` (a pickle: the user's own file)."""
    if not path.is_file():
        raise DataUnavailable(
            f"{path}: no training_args.bin (the Trainer saves it in each checkpoint)"
        )
    try:
        return torch.load(path, weights_only=False)
    except Exception as exc:  # a pickle can fail in many ways
        raise DataUnavailable(
            f"{path}: cannot load the TrainingArguments ({exc})".splitlines()[0]
        ) from exc


def load_dataset(path: Path | None) -> Any:
    if path is None:
        raise DataUnavailable("no dataset given (pass --dataset, the datasets.save_to_disk folder)")
    if not path.exists():
        raise DataUnavailable(f"{path}: dataset folder missing")
    from datasets import load_from_disk

    try:
        ds = load_from_disk(str(path))
    except Exception as exc:  # datasets raises FileNotFoundError, ValueError...
        raise DataUnavailable(
            f"{path}: not a datasets.save_to_disk folder ({exc})".splitlines()[0]
        ) from exc
    if hasattr(ds, "keys") and "train" in ds:
        ds = ds["train"]
    if "input_ids" not in getattr(ds, "column_names", []):
        raise DataUnavailable(f"{path}: no input_ids column (replay needs a pre-tokenized dataset)")
    return ds


def run_collator(dataset: Any, tokenizer_dirs: list[Path]) -> Any:
    """The collator the run fed its batches through, inferred from the dataset (module doc)."""
    from transformers import default_data_collator

    if "labels" in getattr(dataset, "column_names", []):
        return default_data_collator
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    for folder in tokenizer_dirs:
        if (folder / "tokenizer_config.json").is_file() or (folder / "tokenizer.json").is_file():
            try:
                tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            except Exception:  # a broken or foreign tokenizer: try the next folder
                continue
            if tok.pad_token is None:  # the collator pads with it; causal LMs often have none
                tok.pad_token = tok.eos_token
            return DataCollatorForLanguageModeling(tokenizer=tok, mlm=False)
    raise DataUnavailable(
        "the dataset has no labels column, so the run made them in its collator (taken to be "
        "DataCollatorForLanguageModeling(mlm=False)), which needs the run's tokenizer: none "
        "saved in its checkpoint-N/ folders (pass processing_class to the Trainer)"
    )


def data_trainer(
    args: Any, dataset: Any, model: nn.Module | None = None, collator: Any = None
) -> Any:
    """A Trainer with the run's arguments on this machine's CPU, saving and reporting nothing."""
    import transformers
    from transformers import Trainer, default_data_collator

    transformers.logging.set_verbosity_error()
    args = _local_args(args, "/tmp/forensics-replay-unused", cpu=True)
    return Trainer(model=model or _Dummy(), args=args, train_dataset=dataset,
                   data_collator=collator or default_data_collator)  # fmt: skip


def _local_args(args: Any, out: str, cpu: bool) -> Any:
    """The run's TrainingArguments with side effects off (no saving, reporting, hub)."""
    from dataclasses import replace

    return replace(
        args, output_dir=out, save_strategy="no", report_to="none", push_to_hub=False,
        eval_strategy="no", use_cpu=cpu, disable_tqdm=True, dataloader_num_workers=0,
        load_best_model_at_end=False,
    )  # fmt: skip


@dataclass
class StepIndex:
    """Which dataset rows each optimizer step of the run took, micro-batch by micro-batch."""

    dataset: Any  # the Trainer-pruned dataset
    collate: Any
    steps: dict[int, list[list[int]]]
    max_step: int

    def batch(self, step: int) -> HFBatch:
        if step not in self.steps:
            raise DataUnavailable(f"step {step} is past the run's data (last step {self.max_step})")
        return [self.collate([self.dataset[i] for i in rows]) for rows in self.steps[step]]

    def tokens(self, step: int) -> np.ndarray:
        """The step's input_ids rows, (rows, seq_len) int64."""
        return np.concatenate([b["input_ids"].numpy() for b in self.batch(step)]).astype(np.int64)


def index_steps(args: Any, dataset: Any, until: int, collator: Any = None) -> StepIndex:
    """Rows of every optimizer step 1..until, from the Trainer's own dataloader and sampler."""
    trainer = data_trainer(args, dataset, collator=collator)
    dl = trainer.get_train_dataloader()
    ga = max(1, int(args.gradient_accumulation_steps))
    micro = len(dl)
    if micro == 0:
        raise DataUnavailable("the dataloader yields no batch (dataset smaller than a batch?)")
    per_epoch = math.ceil(micro / ga)
    steps: dict[int, list[list[int]]] = {}
    epoch, step = 0, 0
    while step < until:
        rows = _epoch_rows(dl, epoch)
        for u in range(per_epoch):
            step += 1
            steps[step] = rows[u * ga : (u + 1) * ga]
            if step >= until:
                break
        epoch += 1
    return StepIndex(dl.dataset, dl.collate_fn, steps, step)


def _epoch_rows(dl: Any, epoch: int) -> list[list[int]]:
    """The batch sampler's index lists for one epoch, reseeded as the Trainer reseeds it."""
    if hasattr(dl, "set_epoch"):
        dl.set_epoch(epoch)
    wrapper: Any = dl.batch_sampler
    inner: Any = getattr(wrapper, "batch_sampler", None)
    if inner is not None and hasattr(inner, "set_epoch"):
        inner.set_epoch(epoch)
    base: Any = getattr(inner if inner is not None else wrapper, "sampler", None)
    if base is not None and hasattr(base, "set_epoch"):
        base.set_epoch(epoch)
    return [list(map(int, b)) for b in wrapper]


def unigram_counts(dataset: Any, limit: int = 5_000_000) -> np.ndarray:
    """Token counts over the dataset's input_ids (the first `limit` tokens)."""
    counts = np.zeros(1, dtype=np.int64)
    seen = 0
    for chunk in dataset.iter(batch_size=1024):
        ids = np.concatenate([np.asarray(r, dtype=np.int64).ravel() for r in chunk["input_ids"]])
        c = np.bincount(ids)
        if c.size > counts.size:
            counts = np.pad(counts, (0, c.size - counts.size))
        counts[: c.size] += c
        seen += ids.size
        if seen >= limit:
            break
    return counts
