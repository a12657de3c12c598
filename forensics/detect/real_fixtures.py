"""Rule fixtures taken from real public logs (../shared/real_logs, see its SOURCES.md).

A fixture `{real_log: FILE, step: N}` is the incident of that log whose peak (any merged
peak) is within FIXTURE_SLACK steps of N, with the features detection computed for it:
the rule is proven on what a real log gives, not on numbers written by hand. Each file is
ingested and detected once per process (a temporary store).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

FIXTURE_SLACK = 5


def default_root() -> Path:
    """FORENSICS_REAL_LOGS, else ../shared/real_logs beside the repository."""
    env = os.environ.get("FORENSICS_REAL_LOGS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "real_logs"


class RealFixtures:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_root()
        self._cache: dict[str, list[Any]] = {}

    def features(self, name: str, step: int) -> tuple[dict[str, Any] | None, str | None]:
        """(features, None), or (None, why) when the log or its incident is not there."""
        path = self.root / name
        if not path.is_file():
            return None, f"real log {path} not found (real-log fixtures need ../shared/real_logs)"
        incidents = self._incidents(path)
        for inc in incidents:
            if any(abs(s - step) <= FIXTURE_SLACK for s, _ in inc.peaks):
                return dict(inc.features), None
        found = [i.peak_step for i in incidents]
        return {"origin": "none"}, f"no incident peaks at {step} in {name} (peaks: {found})"

    def _incidents(self, path: Path) -> list[Any]:
        key = str(path)
        if key not in self._cache:
            from forensics.detect import detect
            from forensics.ingest import ingest
            from forensics.store import open_store

            with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "f.duckdb") as s:
                ingest(s, [path], run="fixture")
                self._cache[key] = detect(s, "fixture")[0].incidents
        return self._cache[key]
