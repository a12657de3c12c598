"""On fresh simulator runs -- seeds and injection steps that differ from the bundled sample
runs' (seed 1337, default steps) -- `forensics simulate` then `forensics analyze` with replay
states the injected cause, replay confirms it, and for stale_beta2 the rare-token trigger is
named beside it (bench/scenario_truth.py draws new pairs each time it runs).

Three pairs per scenario, as the issue asks, none the sample runs'. CI budget: each pair
trains a 200-step tiny run (checkpointed every 20 steps, as bench/scenario_truth.py does)
and replays it, a few seconds of CPU each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scenario_truth import SAMPLE_SEED, check  # type: ignore[import-not-found]
from forensics.sim.scenarios import SCENARIOS

STEPS = 200
PAIRS = [
    ("stale_beta2", 4242, 90),
    ("stale_beta2", 9001, 120),
    ("stale_beta2", 863917, 82),
    ("rare_tokens", 2718, 110),
    ("rare_tokens", 708123, 60),
    ("rare_tokens", 46693, 77),
    ("lr_too_high", 3141, 60),
    ("lr_too_high", 920123, 88),
    ("lr_too_high", 487758, 81),
    ("fp16_overflow", 1618, 100),
    ("fp16_overflow", 987745, 80),
    ("fp16_overflow", 796683, 116),
    ("data_corruption", 5772, 80),
    ("data_corruption", 445176, 132),
    ("data_corruption", 258250, 69),
    ("hardware_fault", 1414, 130),
    ("hardware_fault", 838083, 60),
    ("hardware_fault", 611867, 131),
    ("clean", 2023, 100),
    ("clean", 929658, 67),
    ("clean", 988287, 78),
]


def test_three_pairs_per_scenario_none_the_samples() -> None:
    for name in SCENARIOS:
        pairs = {(seed, at) for s, seed, at in PAIRS if s == name}
        assert len(pairs) == 3, name
        assert all(seed != SAMPLE_SEED for seed, _ in pairs), name


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
