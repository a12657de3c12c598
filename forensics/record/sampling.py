"""Dataset sample indices of each micro-batch, read from the dataloader's sampler.

The dataloader draws indices in the order it yields batches, also when it prefetches or
uses workers (the main process runs the sampler), so the training step that consumes a batch
of n rows takes the next n indices from the queue. Wrapping the sampler is done on the
`BatchSampler` object (a plain attribute), never on the DataLoader, which forbids it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any


class RecordingSampler:
    """Yields the wrapped sampler's indices, keeping each one for the micro-batch that uses it."""

    def __init__(self, inner: Any, sink: deque[int]) -> None:
        self.inner, self.sink = inner, sink

    def __iter__(self) -> Iterator[Any]:
        for index in self.inner:
            self.sink.append(int(index))
            yield index

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy/pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def record_indices(dataloader: Any) -> deque[int] | None:
    """Wrap the sampler of a train dataloader; None where that cannot be done safely.

    accelerate's `BatchSamplerShard` (several processes) interleaves every process's batches
    from one inner sampler, so there the indices are not recorded (hash and lengths only).
    """
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    if batch_sampler is None or hasattr(batch_sampler, "batch_sampler"):
        return None
    inner = getattr(batch_sampler, "sampler", None)
    if inner is None or isinstance(inner, RecordingSampler):
        return None
    sink: deque[int] = deque()
    batch_sampler.sampler = RecordingSampler(inner, sink)
    return sink


def take(indices: deque[int] | None, rows: int) -> list[int] | None:
    """The next `rows` indices, or None when the queue cannot supply them."""
    if indices is None or rows <= 0 or len(indices) < rows:
        return None
    return [indices.popleft() for _ in range(rows)]


def sampler_name(dataloader: Any) -> str | None:
    inner = getattr(getattr(dataloader, "batch_sampler", None), "sampler", None)
    inner = getattr(inner, "inner", inner)
    return type(inner).__name__ if inner is not None else None
