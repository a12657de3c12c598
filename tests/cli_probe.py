"""`forensics ARGS` in a fresh interpreter, reporting what it imported: the start-up tests
(tests/core/test_cli_startup.py) and the no-polars ingest test (tests/ingest) share it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

PROBE = """
import json, sys
sys.argv = ["forensics"] + sys.argv[1:]
from forensics.cli import app
code = 0
try:
    app()
except SystemExit as exc:
    code = exc.code or 0
print(json.dumps([code, sorted(sys.modules)]))
"""


@dataclass
class Probed:
    code: int
    modules: list[str]  # every module the command had imported when it exited
    printed: list[str]  # its stdout lines
    stderr: str


def run_cli(*args: str) -> Probed:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    *printed, last = out.stdout.strip().splitlines()
    code, modules = json.loads(last)
    return Probed(code, modules, printed, out.stderr)
