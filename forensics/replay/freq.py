"""How common each token is in training: the `token_counts` table, else a sample of the shard.

The rare-token probe compares a batch's tokens with their training frequency, and the data
corruption probe leaves rare tokens out of its bigram statistic; both need counts. A run
ingested without `token_counts` still has its shards, so the counts are then taken from the
first TRAIN_SAMPLE tokens of the shard that the control batches come from (and say so).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from forensics.errors import ReplayError
from forensics.replay.context import RunData
from forensics.replay.sources import read_tokens

TRAIN_SAMPLE = 2_000_000
RARE_MASS = 0.01  # rare ids: the least frequent ids that together hold 1% of the token mass


@dataclass
class Freq:
    counts: np.ndarray  # float64 counts indexed by token id
    source: str  # "token_counts" or the shard path sampled

    def prob(self, ids: np.ndarray, vocab: int) -> np.ndarray:
        """Add-one smoothed unigram probability of each id (ids past the table get 1 count)."""
        size = max(vocab, self.counts.size, int(ids.max(initial=0)) + 1)
        c = np.zeros(size, dtype=np.float64)
        c[: self.counts.size] = self.counts
        return (c[ids] + 1.0) / (c.sum() + size)

    def rare_ids(self) -> np.ndarray:
        order = np.argsort(self.counts, kind="stable")
        mass = np.cumsum(self.counts[order]) / max(float(self.counts.sum()), 1.0)
        return order[mass <= RARE_MASS].astype(np.int64)


def short(path: Path) -> str:
    """A path as stored for the report: its folder and name (the analysing machine's absolute
    paths mean nothing to the team that reads the post-mortem)."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def train_freq(data: RunData, shard_hint: str | None) -> Freq | None:
    """Counts from the store, else from a sample of `shard_hint`; None when neither exists."""
    if data.token_counts is not None:
        return Freq(data.token_counts, "token_counts")
    if shard_hint is None:
        return None
    try:
        shard = read_tokens(Path(shard_hint))
    except (ReplayError, OSError, ValueError):
        return None
    sample = np.asarray(shard[: min(shard.size, TRAIN_SAMPLE)], dtype=np.int64)
    return Freq(np.bincount(sample).astype(np.float64), f"sample of {short(Path(shard_hint))}")
