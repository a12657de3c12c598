"""Record what a post-mortem needs while a run trains: `forensics/` beside the run's logs.

Three entry points, one recorder underneath (`Recorder`):

    from forensics.record import Recorder                    # a plain PyTorch loop
    from forensics.record import ForensicsCallback           # Hugging Face Trainer
    from forensics.record import ForensicsLightningCallback  # PyTorch Lightning

They write `forensics/metrics.jsonl`, `forensics/batches.jsonl` and `forensics/config.json`
(docs/recorder.md), which `forensics ingest` reads without flags. Importing this package
imports neither torch nor transformers nor lightning: each name loads its module on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forensics.record.hf import ForensicsCallback
    from forensics.record.lightning import ForensicsLightningCallback
    from forensics.record.recorder import Recorder

__all__ = ["ForensicsCallback", "ForensicsLightningCallback", "Recorder"]

_WHERE = {
    "Recorder": "forensics.record.recorder",
    "ForensicsCallback": "forensics.record.hf",
    "ForensicsLightningCallback": "forensics.record.lightning",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'forensics.record' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
