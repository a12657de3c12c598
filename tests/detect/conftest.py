"""Fixtures of the detection tests (series helpers live in detect_helpers.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from forensics.detect import load_rules
from forensics.detect.rules import Rule

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # bench/ (the labelled generator) is not a package


Frame = Callable[..., pl.DataFrame]


@pytest.fixture
def frame() -> Frame:
    """frame(loss, every=1, **other_metrics) -> wide frame with step starting at 1."""

    def build(loss: np.ndarray, every: int = 1, **cols: Any) -> pl.DataFrame:
        steps = np.arange(1, len(loss) * every + 1, every)
        data: dict[str, Any] = {"step": steps, "loss": loss}
        data.update({k: np.asarray(v, dtype=float) for k, v in cols.items()})
        return pl.DataFrame(data)

    return build


@pytest.fixture(scope="session")
def rules() -> list[Rule]:
    return load_rules()
