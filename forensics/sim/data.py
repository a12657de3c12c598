"""Training data without a hub: a synthetic Zipfian language, llm.c token shards, a batch manifest.

Why synthetic: nothing may be downloaded, and a generated language gives real learnable
structure (the loss falls from ln(V) towards the language's entropy) with a known unigram
distribution, a band of token ids that almost never occurs (the rare-token scenario feeds
those), and full determinism from one seed.

Layout under a run folder (see docs/simulate.md):

- `data/train_000.bin`, `data/inject_000.bin`: llm.c shards: 256 x int32 header (magic
  20240520, version 1, header[2] = n_tokens) then n_tokens uint16 tokens.
- `data/token_counts.npy`: 1-D int64 unigram counts of the training shard, indexed by token id.
- `batches.jsonl`: one `BatchRecord` per step and micro-batch. A record names a contiguous span
  of `n_tokens = batch_size * seq_len + 1` tokens starting at `token_offset` of `source`
  (relative to the run folder); the batch is `x = span[:-1].view(B, T)`,
  `y = span[1:].view(B, T)` (llm.c's DataLoader layout). `input_scale`, when present, is the
  factor the token embeddings were multiplied by for that batch (fp16_overflow scenario).

Replay API: `batch_from_manifest(run_dir, step)` rebuilds a logged batch exactly;
`read_manifest(run_dir)` gives every record; `read_batch(run_dir, record)` reads one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from forensics.errors import SimulationError

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
TRAIN_SHARD = "data/train_000.bin"
INJECT_SHARD = "data/inject_000.bin"
COUNTS_FILE = "data/token_counts.npy"
MANIFEST = "batches.jsonl"
SEP = 0  # token id that ends a sentence (and starts a new topic)


# ---------------------------------------------------------------------------- shards


def write_shard(path: Path, tokens: np.ndarray) -> None:
    """Write tokens as an llm.c `.bin` shard (header + uint16)."""
    assert tokens.ndim == 1, "a shard is a 1-D token stream"
    assert tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < 2**16), "tokens must fit u16"
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:3] = (MAGIC, VERSION, tokens.size)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def read_shard(path: Path) -> np.ndarray:
    """The tokens of an llm.c shard as a read-only uint16 memmap; checks the header."""
    header = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    if header.size < 3 or header[0] != MAGIC or header[1] != VERSION:
        raise SimulationError(f"{path}: not an llm.c token shard (magic {MAGIC}, version 1)")
    n = int(header[2])
    return np.memmap(path, dtype=np.uint16, mode="r", offset=HEADER_INTS * 4, shape=(n,))


# ---------------------------------------------------------------------------- the language


@dataclass(frozen=True)
class Language:
    """A Zipfian topic + bigram language over `vocab_size` ids; ids sorted by frequency.

    Id 0 ends a sentence. Ids [1, rare_start) are content words with Zipf(1.1) unigram weight.
    Ids [rare_start, vocab_size) are the rare band: emitted with probability `p_rare` per token
    (a handful of times per shard), so their embeddings stay essentially untrained.
    Each sentence picks a topic (a Zipfian distribution over 48 content words); each word
    continues with one of 8 Zipf-weighted successors, a topic word, or the sentence end.
    """

    vocab_size: int
    seed: int
    n_topics: int = 8
    topic_words: int = 48
    successors: int = 8
    p_end: float = 0.06
    p_topic: float = 0.3
    p_rare: float = 1e-5

    @property
    def rare_start(self) -> int:
        """First id of the rare band (the top 1/16 of the vocabulary)."""
        return self.vocab_size - max(1, self.vocab_size // 16)

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(successor ids, successor cdf, topic ids, topic cdf), drawn from `seed`."""
        rng = np.random.default_rng([self.seed, 7])
        content = np.arange(1, self.rare_start)
        unigram = 1.0 / np.arange(1, content.size + 1) ** 1.1
        unigram /= unigram.sum()
        succ = np.stack(
            [
                rng.choice(content, self.successors, replace=False, p=unigram)
                for _ in range(self.vocab_size)
            ]
        )  # (V, S)
        topics = np.stack(
            [
                rng.choice(content, self.topic_words, replace=False, p=unigram)
                for _ in range(self.n_topics)
            ]
        )  # (K, W)
        return succ, _zipf_cdf(self.successors, 1.0), topics, _zipf_cdf(self.topic_words, 1.0)

    def generate(self, n_tokens: int, streams: int = 256) -> np.ndarray:
        """n_tokens of text (uint16), generated as `streams` parallel chains then concatenated."""
        rng = np.random.default_rng([self.seed, 11])
        succ, succ_cdf, topics, topic_cdf = self.tables()
        length = -(-n_tokens // streams)
        out = np.empty((streams, length), dtype=np.int64)
        prev = np.full(streams, SEP)
        topic = rng.integers(0, self.n_topics, streams)
        rows = np.arange(streams)
        for t in range(length):
            u = rng.random(streams)
            from_topic = topics[topic, _draw(topic_cdf, rng.random(streams))]
            from_succ = succ[prev, _draw(succ_cdf, rng.random(streams))]
            tok = np.where(u < self.p_topic, from_topic, from_succ)
            tok = np.where((prev == SEP) | (u >= 1.0 - self.p_end), from_topic, tok)
            tok = np.where((u >= 1.0 - self.p_end) & (prev != SEP), SEP, tok)
            rare = rng.random(streams) < self.p_rare
            tok = np.where(rare, rng.integers(self.rare_start, self.vocab_size, streams), tok)
            topic = np.where(tok == SEP, rng.integers(0, self.n_topics, streams), topic)
            out[rows, t] = tok
            prev = tok
        return out.reshape(-1)[:n_tokens].astype(np.uint16)


def _zipf_cdf(n: int, a: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** a
    return np.cumsum(w / w.sum())


def _draw(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Index drawn from a categorical cdf for each uniform in u."""
    return np.minimum(np.searchsorted(cdf, u, side="right"), cdf.size - 1)


def prepare_data(run_dir: Path, vocab_size: int, n_tokens: int, seed: int) -> Language:
    """Write the training shard and the unigram counts of a run; return the language."""
    lang = Language(vocab_size=vocab_size, seed=seed)
    tokens = lang.generate(n_tokens)
    write_shard(run_dir / TRAIN_SHARD, tokens)
    counts = np.bincount(tokens.astype(np.int64), minlength=vocab_size).astype(np.int64)
    np.save(run_dir / COUNTS_FILE, counts)
    return lang


# ---------------------------------------------------------------------------- batches


@dataclass(frozen=True)
class BatchRecord:
    """One micro-batch: a contiguous span of a shard (see the module docstring)."""

    step: int
    micro: int
    source: str  # shard path relative to the run folder
    token_offset: int  # first token of the span
    n_tokens: int  # batch_size * seq_len + 1
    seq_len: int
    batch_size: int
    input_scale: float = 1.0  # factor on the token embeddings for this batch

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        if self.input_scale == 1.0:
            del data["input_scale"]
        return json.dumps(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchRecord:
        n, T = int(data["n_tokens"]), int(data["seq_len"])
        return cls(
            step=int(data["step"]),
            micro=int(data.get("micro", 0)),
            source=str(data["source"]),
            token_offset=int(data["token_offset"]),
            n_tokens=n,
            seq_len=T,
            batch_size=int(data.get("batch_size", (n - 1) // T)),
            input_scale=float(data.get("input_scale", 1.0)),
        )


def sample_record(
    step: int, micro: int, seed: int, shard_tokens: int, batch_size: int, seq_len: int
) -> BatchRecord:
    """The default batch of a step: a span at an offset drawn from (seed, step, micro).

    Stateless on purpose: a resumed run needs no data-loader state to draw the same batches.
    """
    span = batch_size * seq_len + 1
    assert shard_tokens >= span, f"shard of {shard_tokens} tokens is shorter than a batch ({span})"
    offset = int(np.random.default_rng([seed, step, micro]).integers(0, shard_tokens - span + 1))
    return BatchRecord(step, micro, TRAIN_SHARD, offset, span, seq_len, batch_size)


@lru_cache(maxsize=16)
def _shard(path: str, mtime: float) -> np.ndarray:
    return read_shard(Path(path))


def read_batch(run_dir: Path, record: BatchRecord) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) int64 tensors of shape (batch_size, seq_len) for one record."""
    path = Path(run_dir) / record.source
    if not path.is_file():
        raise SimulationError(f"{path}: token shard named by the manifest is missing")
    tokens = _shard(str(path), path.stat().st_mtime)
    end = record.token_offset + record.n_tokens
    if record.n_tokens != record.batch_size * record.seq_len + 1 or end > tokens.size:
        raise SimulationError(
            f"{path}: batch of step {record.step} (offset {record.token_offset}, "
            f"{record.n_tokens} tokens) does not fit the shard of {tokens.size} tokens"
        )
    span = torch.from_numpy(tokens[record.token_offset : end].astype(np.int64))
    x = span[:-1].view(record.batch_size, record.seq_len)  # (B, T)
    y = span[1:].view(record.batch_size, record.seq_len)  # (B, T)
    return x, y


def read_manifest(run_dir: Path) -> dict[int, list[BatchRecord]]:
    """Every record of `batches.jsonl`, grouped by step, micro-batches in order."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise SimulationError(f"{path}: no batch manifest (is this a `forensics simulate` run?)")
    out: dict[int, list[BatchRecord]] = {}
    with path.open() as f:
        for line in f:
            if line.strip():
                rec = BatchRecord.from_dict(json.loads(line))
                out.setdefault(rec.step, []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r.micro)
    return out


def batch_from_manifest(
    run_dir: Path, step: int, micro: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact (x, y) that the run trained on at `step` (micro-batch `micro`)."""
    recs = read_manifest(run_dir).get(step)
    if not recs or micro >= len(recs):
        raise SimulationError(f"{run_dir}/{MANIFEST}: no batch for step {step} micro {micro}")
    return read_batch(run_dir, recs[micro])
