"""On fresh simulator runs -- seeds and injection steps that differ from the bundled sample
runs' (seed 1337, default steps) -- `forensics simulate` then `forensics analyze` with replay
states the injected cause, replay confirms it, and for stale_beta2 the rare-token trigger is
named beside it (bench/scenario_truth.py draws new pairs each time it runs).

CI budget: each pair trains a 200-step tiny run and replays it (~10-15 s of CPU), so this
pins two pairs for stale_beta2 (the trigger/amplifier case) and one for every other
scenario, not three each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scenario_truth import check  # type: ignore[import-not-found]

STEPS = 200
PAIRS = [
    ("stale_beta2", 4242, 90),
    ("stale_beta2", 9001, 120),
    ("rare_tokens", 2718, 110),
    ("lr_too_high", 3141, 60),
    ("fp16_overflow", 1618, 100),
    ("data_corruption", 5772, 80),
    ("hardware_fault", 1414, 130),
    ("clean", 2023, 100),
]


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "seed", "at"), PAIRS)
def test_fresh_run_states_the_injected_cause(
    scenario: str, seed: int, at: int, tmp_path: Path
) -> None:
    row = check(scenario, seed, at, STEPS, tmp_path)
    assert row["ok"], row
    if scenario == "stale_beta2":
        assert row["trigger"].startswith("rare_tokens"), row
        assert row["amplifier"].startswith("stale_beta2"), row
