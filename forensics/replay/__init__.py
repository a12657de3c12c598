"""Replay: confirm or refute each suspected root cause by re-running the offending batches
through the bundled reference model.

Public API (everything else in this package is internal):

- `replay_run(store, run_id, *, incident_id=None, step=None, device="auto", k=20,
  progress=None) -> list[ReplayResult]`: replay the run's incidents, store the `replays` rows
  and apply the verdicts to `findings` / `incidents`; raises ReplayError when the run has no
  batch manifest at all (nothing can run), returns [] when it has no incident;
- `apply_verdicts(store, run_id)`: re-apply stored verdicts (idempotent);
- `replayable(store, run_id) -> str | None`: None when the run has both checkpoints and a
  batch manifest (every probe can run), else what is missing.

The names load on first use: the runner imports torch, and a command that only needs a
light part of this package (the replay sources of `forensics analyze --no-replay`) must not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.lazy import lazy_exports

if TYPE_CHECKING:
    from forensics.replay.context import replayable
    from forensics.replay.result import ReplayResult
    from forensics.replay.runner import replay_run
    from forensics.replay.verdicts import apply_verdicts

__all__ = ["ReplayResult", "apply_verdicts", "replay_run", "replayable"]
_FROM = {
    "ReplayResult": "forensics.replay.result",
    "apply_verdicts": "forensics.replay.verdicts",
    "replay_run": "forensics.replay.runner",
    "replayable": "forensics.replay.context",
}

__getattr__ = lazy_exports(__name__, _FROM)
