"""A non-finite feature is stored, rendered and exported as what it is, never as "missing".

An fp16 overflow logs the gradient norm as Infinity at the spike, so the incident's
`grad_ratio` is Infinity. The stored features used to turn it into null: the page's
feature table said `grad_ratio` n/a while the rules' evidence on the same page said
Infinity, and incidents.json said null. The run is written by torch's SummaryWriter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from forensics.nonfinite import from_json
from forensics.store import open_store

pytest.importorskip("torch.utils.tensorboard")

SPIKE_AT = 250


def _overflow_run(folder: Path) -> None:
    """400 steps of a decaying loss; at 250 the loss doubles and the grad norm is Infinity."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(5)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, 401):
            loss = 4.0 * (step / 10 + 1) ** -0.15 * math.exp(rng.normal(0, 0.01))
            grad = math.exp(rng.normal(0, 0.05))
            if step == SPIKE_AT:
                loss, grad = 2 * loss, math.inf
            elif step == SPIKE_AT + 1:
                loss, grad = 1.3 * loss, 3.0
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/grad_norm", grad, step)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _strict(text: str) -> Any:
    """Standard JSON only: a bare NaN/Infinity token is what other tools cannot read."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def test_an_infinite_gradient_ratio_is_stored_and_rendered_as_infinite(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    _overflow_run(tmp_path / "run")
    out, db = analyzed(tmp_path / "run")
    with open_store(db, read_only=True) as store:
        (inc,) = store.query("SELECT incident_id, peak_step, features FROM incidents").to_dicts()
        hyps = store.query(
            "SELECT rule_id, evidence FROM hypotheses WHERE incident_id = ?", [inc["incident_id"]]
        ).to_dicts()
    assert inc["peak_step"] == SPIKE_AT
    feats = from_json(_strict(inc["features"]))
    assert feats["grad_ratio"] == math.inf

    # what every rule decided on is what the store holds as the feature
    used = 0
    for h in hyps:
        for e in from_json(_strict(h["evidence"])):
            if e["key"] in feats:
                assert _same(e["value"], feats[e["key"]]), (h["rule_id"], e, feats[e["key"]])
                used += e["key"] == "grad_ratio"
    assert used >= 3

    page = (out / "postmortems" / "spike-01.md").read_text()
    assert "| `grad_ratio` | +Inf |" in page
    assert "grad_ratio=+Inf" in page  # the hypotheses' evidence, spelled alike
    assert "`grad_ratio` | n/a" not in page

    exported = _strict((out / "incidents.json").read_text())
    assert exported["incidents"][0]["features"]["grad_ratio"] == "Infinity"
    assert exported["incidents"][0]["grad_norm_peak"] == "Infinity"
