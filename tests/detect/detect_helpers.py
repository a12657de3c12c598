"""Series builders shared by the detection tests: a clean pre-training curve plus shapes."""

from __future__ import annotations

import numpy as np


def curve(n: int = 4000, *, noise: float = 0.01, seed: int = 0, start: int = 1) -> np.ndarray:
    """A noisy power-law loss from ~10.8 down to ~2.5 over n steps."""
    rng = np.random.default_rng(seed)
    t = np.arange(start, start + n, dtype=float)
    return (2.2 + 8.6 * (1 + t / 80) ** -0.6) * np.exp(rng.normal(0, noise, n))


def spike(loss: np.ndarray, at: int, amp: float, tau: float, offset: float = 0.0) -> np.ndarray:
    """Multiply the loss by exp(profile): a jump of `amp` (log) at index `at` decaying with tau
    towards `offset`."""
    out = loss.copy()
    k = np.arange(len(loss) - at, dtype=float)
    out[at:] *= np.exp(offset + (amp - offset) * np.exp(-k / tau))
    return out
