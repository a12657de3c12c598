"""A small, fast version of bench/accuracy.py: one labelled run per cause (plus clean runs),
written in each log format, ingested through the real pipeline and scored."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.accuracy import _detect_pipeline, score, summarise  # type: ignore[import-not-found]
from bench.synth_runs import CAUSES, FORMATS, make_run  # type: ignore[import-not-found]
from forensics.detect import load_rules

CASES: list[tuple[str | None, str, int]] = [
    (c, FORMATS[i % len(FORMATS)], 1000 + i) for i, c in enumerate(CAUSES)
]
CASES += [(None, "megatron", 1100), (None, "tensorboard", 1101)]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list:  # type: ignore[type-arg]
    rules = load_rules()
    out = []
    for cause, fmt, seed in CASES:
        run = make_run(seed, cause=cause, clean=cause is None, fmt=fmt, n_steps=5000)
        work = tmp_path_factory.mktemp(f"acc{seed}")
        detected, last = _detect_pipeline(run, rules, Path(work))
        truth = {"run": run.name, "interval": run.interval,
                 "incidents": [t.as_dict() for t in run.truth]}  # fmt: skip
        out.append(score(truth, detected, last))
    return out


def test_every_injected_incident_is_found_and_nothing_else(results) -> None:  # type: ignore[no-untyped-def]
    s = summarise(results)
    assert s["recall"] == 1.0 and s["precision"] == 1.0, [
        (r.name, r.missed, r.false) for r in results
    ]
    assert s["false_alarms_clean"] == 0


def test_types_and_causes_are_mostly_right(results) -> None:  # type: ignore[no-untyped-def]
    s = summarise(results)
    assert s["type_acc"] >= 0.8 and s["cause_acc"] >= 0.8
