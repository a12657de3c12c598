"""Where a run's batches come from when it wrote no manifest: sequential token-shard loaders.

A run that read `.bin` token shards in order can have its batches reconstructed from its
settings alone. The optimizer step logged as n consumed micro-batches (n - first) * GA ..
(n - first + 1) * GA - 1 of each rank's stream, where `first` is the number the log gives the
first step (modded-nanogpt prints `step:1`, llm.c's main.log `s:0`); every micro-batch is a span of
B * T + 1 tokens of one shard (x = span[:-1], y = span[1:]). Two loaders are emulated:

- `modded` -- modded-nanogpt / llm.c `train_gpt2.py` `DistributedDataLoader`: rank r starts
  at token r * B * T of the first shard (sorted file names), advances by B * T * W after each
  batch, and moves to the next shard (wrapping around) as soon as the next span would not fit
  (`current_position + B * T * W + 1 > len(tokens)`);
- `llmc` -- llm.c's C `dataloader.h` without shuffling (the default of `train_gpt2.c`): a
  shard holds (ntok - 1) // (W * B * T) global batches; batch i of rank r starts at token
  i * W * B * T + r * B * T; then the next shard. nanoGPT-style headerless `uint16` files
  read sequentially use the same rule with no header.

The llm.c CUDA trainer's shuffled mode (`-sl`/`should_shuffle`) permutes shards and samples
with its own RNG and is not reproduced. The reconstructed records are stored in `batches` like
a manifest (with `extra.loader`), so every later replay reads them from the store.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from forensics.errors import ReplayError
from forensics.sim.data import BatchRecord

LLMC_MAGIC = 20240520
HEADER_INTS = 256
LOADERS = ("modded", "llmc")
# modded-nanogpt prints `step:{step+1}`; llm.c main.log writes `s:{step}` (0-based)
FIRST_STEP = {"modded": 1, "llmc": 0}


@dataclass
class Sources:
    """What the user told replay about the run's data and model (CLI flags; all optional)."""

    dataset: Path | None = None  # HF: a datasets.save_to_disk folder
    tokenizer: Path | None = None  # a tokenizer.json (else looked for beside the checkpoints)
    shards: list[Path] = field(default_factory=list)  # token shards, in the run's order
    loader: str = "modded"  # modded | llmc (see the module docstring)
    batch_size: int | None = None  # B: sequences per micro-batch per rank
    seq_len: int | None = None  # T
    world_size: int | None = None  # W: data-parallel ranks
    grad_accum: int | None = None  # GA: micro-batches per optimizer step
    first_step: int | None = None  # the logged step number of the first step (modded 1, llmc 0)
    judge: bool = True  # tier 2: train the bundled model on the run's stream when needed


@dataclass
class Shard:
    path: Path
    header_bytes: int
    dtype: str
    n_tokens: int


def open_shard(path: Path) -> Shard:
    """An llm.c shard (256 x int32 header: magic, version 1 = uint16 / 2 = uint32, ntok) or a
    headerless uint16 stream."""
    if not path.is_file():
        raise ReplayError(f"{path}: token shard missing")
    head = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    size = path.stat().st_size
    if head.size >= 3 and int(head[0]) == LLMC_MAGIC:
        dtype = {1: "uint16", 2: "uint32"}.get(int(head[1]))
        if dtype is None:
            raise ReplayError(f"{path}: llm.c header version {int(head[1])}, expected 1 or 2")
        n = int(head[2])
        if HEADER_INTS * 4 + n * np.dtype(dtype).itemsize > size:
            raise ReplayError(f"{path}: header promises {n} tokens, the file is shorter")
        return Shard(path, HEADER_INTS * 4, dtype, n)
    if size % 2:
        raise ReplayError(f"{path}: {size} bytes is not a whole number of uint16 tokens")
    return Shard(path, 0, "uint16", size // 2)


def read_tokens(path: Path) -> np.ndarray:
    """The tokens of any shard `open_shard` accepts (or a .npy), as a read-only memmap."""
    if path.suffix.lower() == ".npy":
        return np.load(path, mmap_mode="r", allow_pickle=False)
    s = open_shard(path)
    return np.memmap(path, dtype=s.dtype, mode="r", offset=s.header_bytes, shape=(s.n_tokens,))


def resolve_shards(patterns: list[Path]) -> list[Path]:
    """Files named or matched by glob patterns, each pattern's matches sorted by name (the
    order `sorted(glob.glob(pattern))` gives the loaders)."""
    out: list[Path] = []
    for p in patterns:
        hits = sorted(glob.glob(str(p))) if any(c in str(p) for c in "*?[") else [str(p)]
        if not hits:
            raise ReplayError(f"{p}: no token shard matches")
        out += [Path(h) for h in hits]
    return out


@dataclass
class Settings:
    batch_size: int
    seq_len: int
    world_size: int
    grad_accum: int
    loader: str
    first_step: int


def settings(src: Sources, config: dict[str, Any]) -> Settings:
    """B, T, W, GA from the flags, else from the run's config; ReplayError naming what is
    missing."""
    keys = {
        "batch_size": ("batch_size", "B", "device_batch_size", "micro_batch_size"),
        "seq_len": ("seq_len", "sequence_length", "T", "block_size", "max_seq_len"),
        "world_size": ("world_size", "ddp_world_size", "num_processes"),
        "grad_accum": ("grad_accum", "gradient_accumulation_steps", "train_accumulation_steps"),
    }
    got: dict[str, int | None] = {}
    for name, names in keys.items():
        v = getattr(src, name)
        if v is None:
            v = next((config[k] for k in names if isinstance(config.get(k), int)), None)
        got[name] = v
    if got["batch_size"] is None or got["seq_len"] is None:
        raise ReplayError(
            "the shard loader needs the micro-batch size and sequence length "
            "(--batch-size B --seq-len T; not found in the run's config)"
        )
    if src.loader not in LOADERS:
        raise ReplayError(f"--loader must be one of {', '.join(LOADERS)}, not {src.loader!r}")
    return Settings(
        int(got["batch_size"]),
        int(got["seq_len"]),
        int(got["world_size"] or 1),
        int(got["grad_accum"] or 1),
        src.loader,
        src.first_step if src.first_step is not None else FIRST_STEP[src.loader],
    )


def loader_records(shards: list[Path], st: Settings, last: int) -> dict[int, list[BatchRecord]]:
    """BatchRecords of logged steps first_step..last (micro = accumulation step * W + rank):
    logged step n took micro-batches (n - first_step) * GA .. + GA - 1 of each rank."""
    if not shards:
        raise ReplayError("no token shard given (--shards)")
    opened = [open_shard(p) for p in shards]
    bt = st.batch_size * st.seq_len
    for s in opened:
        if s.n_tokens < st.world_size * bt + 1:
            raise ReplayError(f"{s.path}: {s.n_tokens} tokens, fewer than one global batch")
    n_steps = max(0, last - st.first_step + 1)
    per_rank = [_rank_stream(opened, st, r, n_steps * st.grad_accum) for r in range(st.world_size)]
    out: dict[int, list[BatchRecord]] = {}
    for n in range(st.first_step, last + 1):
        recs = []
        for a in range(st.grad_accum):
            m = (n - st.first_step) * st.grad_accum + a
            for r in range(st.world_size):
                shard, pos = per_rank[r][m]
                recs.append(
                    BatchRecord(
                        n,
                        a * st.world_size + r,
                        str(shard.path.resolve()),
                        pos,
                        bt + 1,
                        st.seq_len,
                        st.batch_size,
                    )  # fmt: skip
                )
        out[n] = recs
    return out


def _rank_stream(opened: list[Shard], st: Settings, rank: int, n: int) -> list[tuple[Shard, int]]:
    """(shard, first token) of the first n micro-batches one rank reads."""
    bt, w = st.batch_size * st.seq_len, st.world_size
    out: list[tuple[Shard, int]] = []
    idx = 0
    if st.loader == "modded":
        pos = rank * bt
        while len(out) < n:
            out.append((opened[idx], pos))
            pos += bt * w
            if pos + bt * w + 1 > opened[idx].n_tokens:
                idx, pos = (idx + 1) % len(opened), rank * bt
        return out
    sample = 0
    while len(out) < n:
        if sample >= (opened[idx].n_tokens - 1) // (w * bt):
            idx, sample = (idx + 1) % len(opened), 0
        out.append((opened[idx], sample * w * bt + rank * bt))
        sample += 1
    return out
