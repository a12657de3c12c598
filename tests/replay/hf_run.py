"""A real Hugging Face Trainer run, built from scratch on CPU: the tier-3 replay's test subject.

A tiny Llama (built from a LlamaConfig, never downloaded), a word-level tokenizer built with
`tokenizers`, a synthetic corpus saved with `datasets.save_to_disk`, trained by the real
`Trainer` with a checkpoint every SAVE_EVERY steps. The rows that the Trainer's own sampler
puts into step RARE_STEP are overwritten with words that appear nowhere else: one injected
batch of rare tokens. A collator wrapper records the token ids of every batch the Trainer
fed, so tests can compare them with the batches that replay rebuilds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

N_WORDS = 120  # common words
N_RARE = 40  # rare words (only in the injected batch)
SEQ = 32
BATCH = 8
STEPS = 150
SAVE_EVERY = 50
RARE_STEP = 115  # half of this step's rows are overwritten with rare words
SEED = 7
RUN_NAME = "hf_tiny"


def _vocab() -> dict[str, int]:
    words = (
        ["<pad>", "<unk>"] + [f"w{i}" for i in range(N_WORDS)] + [f"r{i}" for i in range(N_RARE)]
    )
    return {w: i for i, w in enumerate(words)}


def build_tokenizer(out: Path) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=_vocab(), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(out / "tokenizer.json"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")


def _corpus(n_rows: int, rng: np.random.Generator) -> list[str]:
    """A learnable language: each word is mostly followed by one of three successors."""
    succ = rng.integers(0, N_WORDS, size=(N_WORDS, 3))
    rows = []
    for _ in range(n_rows):
        w = int(rng.integers(0, N_WORDS))
        words = []
        for _ in range(SEQ):
            words.append(f"w{w}")
            w = (
                int(succ[w, rng.integers(0, 3)])
                if rng.random() < 0.9
                else int(rng.integers(N_WORDS))
            )
        rows.append(" ".join(words))
    return rows


def build_dataset(path: Path, tokenizer: Any, rare_rows: list[int]) -> Any:
    from datasets import Dataset

    rng = np.random.default_rng(SEED)
    texts = _corpus(STEPS * BATCH, rng)
    for i in rare_rows:  # one injected batch: words that appear nowhere else
        texts[i] = " ".join(f"r{int(j)}" for j in rng.integers(0, N_RARE, size=SEQ))
    ids = [tokenizer(t)["input_ids"] for t in texts]
    assert all(len(x) == SEQ for x in ids)
    ds = Dataset.from_dict({"input_ids": ids, "labels": ids})
    ds.save_to_disk(str(path))
    return ds


def tiny_model(vocab: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def training_args(out: Path, steps: int = STEPS, save_every: int = SAVE_EVERY) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=BATCH,
        max_steps=steps,
        learning_rate=3e-3,
        warmup_steps=10,
        weight_decay=0.0,
        logging_steps=1,
        save_steps=save_every,
        save_strategy="steps",
        report_to="none",
        seed=SEED,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


class Recorder:
    """Wraps the collator: keeps the input_ids (and labels) of every micro-batch it fed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.batches: list[list[list[int]]] = []
        self.labels: list[list[list[int]]] = []

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        out = self.inner(features)
        self.batches.append(out["input_ids"].tolist())
        self.labels.append(out["labels"].tolist() if "labels" in out else [])
        return out


def rows_of_step(args: Any, dataset: Any, vocab: int, step: int) -> list[int]:
    """Dataset indices the Trainer's sampler puts into `step` (1-based, one epoch, GA = 1),
    found by asking a Trainer with these arguments for its train dataloader's sampler."""
    from transformers import Trainer, default_data_collator

    trainer = Trainer(model=tiny_model(vocab), args=args, train_dataset=dataset,
                      data_collator=default_data_collator)  # fmt: skip
    dl = trainer.get_train_dataloader()
    sampler = (
        dl.batch_sampler.batch_sampler
        if hasattr(dl.batch_sampler, "batch_sampler")
        else dl.batch_sampler
    )
    if hasattr(sampler, "sampler") and hasattr(sampler.sampler, "set_epoch"):
        sampler.sampler.set_epoch(0)
    return list(list(sampler)[step - 1])


def build_hf_run(root: Path) -> dict[str, Any]:
    """Train the run; returns paths and what the Trainer fed (batches by global step)."""
    from transformers import Trainer, default_data_collator

    out, data = root / "run", root / "dataset"
    out.mkdir(parents=True)
    tokenizer = build_tokenizer(out)
    vocab = len(_vocab())
    args = training_args(out)
    probe_ds = build_dataset(root / "probe_ds", tokenizer, [])
    rare_rows = rows_of_step(args, probe_ds, vocab, RARE_STEP)[: BATCH // 2]
    dataset = build_dataset(data, tokenizer, rare_rows)
    recorder = Recorder(default_data_collator)
    trainer = Trainer(model=tiny_model(vocab), args=args, train_dataset=dataset,
                      data_collator=recorder, processing_class=tokenizer)  # fmt: skip
    trainer.train()
    trainer.save_state()
    (out / "fed_batches.json").write_text(json.dumps(recorder.batches))
    return {
        "out": out,
        "dataset": data,
        "fed": {i + 1: b for i, b in enumerate(recorder.batches)},
        "rare_rows": rare_rows,
    }


def build_lm_collator_run(root: Path, steps: int, save_every: int) -> dict[str, Any]:
    """A run whose dataset has input_ids only (every third row 5 words short) and whose labels
    come from `DataCollatorForLanguageModeling(tokenizer, mlm=False)` (pads -> -100), the
    common causal-LM recipe; the tokenizer is saved in each checkpoint (processing_class)."""
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer

    out = root / "run"
    out.mkdir(parents=True)
    tokenizer = build_tokenizer(out)
    texts = _corpus(steps * BATCH, np.random.default_rng(SEED))
    texts = [" ".join(t.split()[:-5]) if i % 3 == 0 else t for i, t in enumerate(texts)]
    ds = Dataset.from_dict({"input_ids": [tokenizer(t)["input_ids"] for t in texts]})
    ds.save_to_disk(str(root / "dataset"))
    recorder = Recorder(DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False))
    args = training_args(out, steps, save_every)
    trainer = Trainer(model=tiny_model(len(_vocab())), args=args, train_dataset=ds,
                      data_collator=recorder, processing_class=tokenizer)  # fmt: skip
    trainer.train()
    trainer.save_state()
    pairs = zip(recorder.batches, recorder.labels, strict=True)
    fed = {i + 1: (b, lab) for i, (b, lab) in enumerate(pairs)}
    return {"out": out, "dataset": root / "dataset", "fed": fed}


def build_lr_jump_run(root: Path, steps: int, save_every: int, jump: int, factor: float) -> Path:
    """A clean run (no rare batch) whose LR is multiplied by `factor` at optimizer step `jump`
    only: the Trainer's own AdamW, with a LambdaLR set on it before training (a custom
    schedule, which training_args.bin does not describe; replay follows the logged LR)."""
    from transformers import Trainer, default_data_collator

    out = root / "run"
    out.mkdir(parents=True)
    tokenizer = build_tokenizer(out)
    args = training_args(out, steps, save_every)
    rng = np.random.default_rng(SEED)
    ids = [tokenizer(t)["input_ids"] for t in _corpus(steps * BATCH, rng)]
    from datasets import Dataset

    ds = Dataset.from_dict({"input_ids": ids, "labels": ids})
    ds.save_to_disk(str(root / "dataset"))
    trainer = Trainer(model=tiny_model(len(_vocab())), args=args, train_dataset=ds,
                      data_collator=default_data_collator, processing_class=tokenizer)  # fmt: skip
    trainer.create_optimizer()
    warm = args.warmup_steps

    def lam(s: int) -> float:  # LambdaLR counts from 0: s = optimizer step - 1
        base = min(1.0, (s + 1) / warm)
        return base * factor if s == jump - 1 else base

    trainer.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lam)
    trainer.train()
    trainer.save_state()
    return out


if __name__ == "__main__":
    import sys
    import time

    t0 = time.perf_counter()
    info = build_hf_run(Path(sys.argv[1]))
    print(f"built in {time.perf_counter() - t0:.1f}s, rare rows {info['rare_rows']}")
