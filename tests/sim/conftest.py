"""Shared short simulated runs: each scenario is trained once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.sim.run import read_metrics
from forensics.sim.simulate import SimResult, simulate

# Short enough for CI on two CPU cores; the defaults of every scenario scale with the length.
TEST_STEPS = 240
# In a 240-step run warmup ends at step 100, too early for 100x the LR to spike reliably
# (the 1600-step sample run uses the default); 150x spikes at once.
TEST_ARGS: dict[str, dict] = {"lr_too_high": {"strength": 150.0}}


class Run:
    def __init__(self, result: SimResult) -> None:
        self.result = result
        self.dir = result.run_dir
        self.rows = read_metrics(result.run_dir)
        self.truth = result.truth

    def row(self, step: int) -> dict:
        return self.rows[step - 1]


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory: pytest.TempPathFactory):
    """sim_run(name) -> Run: the scenario trained for TEST_STEPS steps (cached per session)."""
    cache: dict[str, Run] = {}
    root: Path = tmp_path_factory.mktemp("sim")

    def get(name: str) -> Run:
        if name not in cache:
            kwargs = {
                "steps": TEST_STEPS,
                "device": "cpu",
                "plot": False,
                **TEST_ARGS.get(name, {}),
            }
            cache[name] = Run(simulate(name, root / name, **kwargs))
        return cache[name]

    return get
