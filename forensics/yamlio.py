"""One YAML loader for the YAML documents forensics reads as data: its own tables (aliases,
line patterns, lessons), rules, users' alias and pattern files, MLflow's meta.yaml during
discovery. A run's config goes through ingest/config.py's `safe_yaml` instead (lenient tags,
bounded alias expansion), as does the run config the MLflow reader reads.

Why: libyaml's safe loader, when PyYAML was built with it, reads the same documents ~10x
faster than the pure-Python SafeLoader, which was half of `forensics rules list`'s start-up
and ~15 ms of every ingest (the alias table). Both refuse arbitrary Python objects.
"""

from __future__ import annotations

from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """`yaml.safe_load`, through libyaml when available (raises yaml.YAMLError)."""
    return yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader
