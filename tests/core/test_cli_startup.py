"""Issue 11: `forensics --help` imports only the CLI (a frozen set), never the pipeline."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
sys.argv = ["forensics"] + sys.argv[1:]
from forensics.cli import app
try:
    app()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""

# What `forensics --help` may import from the project: the CLI and its command modules,
# nothing that pulls in numpy, polars, duckdb, scipy, torch or plotly.
FROZEN = {
    "forensics",
    "forensics.cli",
    "forensics.commands",
    "forensics.commands.compare",
    "forensics.commands.demo",
    "forensics.commands.detect",
    "forensics.commands.ingest",
    "forensics.commands.replay",
    "forensics.commands.report",
    "forensics.commands.rules",
    "forensics.commands.simulate",
    "forensics.errors",
}
HEAVY = ("torch", "scipy", "plotly", "polars", "duckdb", "numpy", "transformers", "kaleido")


def _modules(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_help_imports_a_frozen_set_of_modules() -> None:
    mods = _modules("--help")
    ours = {m for m in mods if m == "forensics" or m.startswith("forensics.")}
    assert ours == FROZEN
    assert not [m for m in mods if m.split(".")[0] in HEAVY]


def test_scenario_names_in_help_match_the_simulator() -> None:
    from forensics.commands.simulate import SCENARIO_NAMES
    from forensics.sim.scenarios import SCENARIOS

    assert list(SCENARIO_NAMES) == list(SCENARIOS)
