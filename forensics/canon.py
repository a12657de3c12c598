"""Canonical metric names: the many spellings of one metric mapped onto one vocabulary.

The table is data (`forensics/data/aliases.yaml`, extensible with a user file) so that a
user with an exotic logger fixes a mapping without touching code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from forensics.errors import InputError
from forensics.yamlio import safe_load

_SEP = re.compile(r"[\s\-]+")
# Prefixes a reader puts before a metric's name to keep a kind of line apart (an epoch's
# averages, `epoch/<name>`; a run's closing summary, `summary/<name>`): the name after one
# is canonical as it would be alone, and the prefix keeps it out of the per-step series (a
# run-average `summary/train_loss` is `summary/loss`, never `loss`).
_APART = ("epoch/", "summary/")


def natural_key(text: str) -> list[tuple[int, int | str]]:
    """Sort key that orders numbered names as a reader counts: `checkpoint-50` before
    `checkpoint-150`."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p]


def normalise(raw: str) -> str:
    """Lower-case, trim, and collapse spaces/dashes to '_' so spellings compare equal."""
    return _SEP.sub("_", raw.strip().lower())


@dataclass
class AliasTable:
    """Maps raw metric names onto canonical ones; keeps a cache because logs repeat names."""

    exact: dict[str, str] = field(default_factory=dict)
    patterns: list[tuple[re.Pattern[str], str]] = field(default_factory=list)
    descriptions: dict[str, str] = field(default_factory=dict)
    _cache: dict[str, str] = field(default_factory=dict, repr=False)

    def canonical(self, raw: str) -> str:
        hit = self._cache.get(raw)
        if hit is not None:
            return hit
        norm = normalise(raw)
        name = self.exact.get(norm)
        if name is None:
            for pat, canon in self.patterns:
                m = pat.fullmatch(norm)
                if m:
                    layer = m.groupdict().get("layer")
                    name = f"{canon}/{int(layer)}" if layer is not None else canon
                    break
        if name is None:
            name = self._apart(norm)
        self._cache[raw] = name
        return name

    def _apart(self, norm: str) -> str:
        """`epoch/<name>` and `summary/<name>` with `<name>` canonical (fairseq's epoch
        `gnorm` is `epoch/grad_norm`, as its per-iteration `gnorm` is `grad_norm`); any
        other name as it is."""
        for prefix in _APART:
            rest = norm.removeprefix(prefix)
            if rest != norm and rest:
                return prefix + self.canonical(rest)
        return norm

    def names(self) -> list[str]:
        """The scalar canonical names, in table order (the columns of `metrics_wide`)."""
        return list(self.descriptions)

    def extend(self, data: dict[str, Any], source: str) -> None:
        """Add a table of the same shape; its entries win over earlier ones."""
        canon = data.get("canonical")
        if not isinstance(canon, dict):
            raise InputError(source, "no 'canonical' mapping", field="canonical")
        exact: dict[str, str] = {}
        pats: list[tuple[re.Pattern[str], str]] = []
        for name, spec in canon.items():
            if not isinstance(spec, dict):
                raise InputError(source, "must be a mapping", field=f"canonical.{name}")
            for alias in spec.get("aliases", []) or []:
                exact[normalise(str(alias))] = name
            for pat in spec.get("patterns", []) or []:
                try:
                    pats.append((re.compile(pat), name))
                except re.error as exc:
                    raise InputError(
                        source, f"bad regular expression: {exc}", field=f"canonical.{name}"
                    ) from exc
            self.descriptions.setdefault(name, str(spec.get("description", "")))
            exact.setdefault(normalise(name), name)
        self.exact = {**self.exact, **exact}
        self.patterns = pats + self.patterns
        self._cache.clear()


def _load_yaml(path: Path | str, text: str) -> dict[str, Any]:
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(path, f"not valid YAML: {exc}".splitlines()[0]) from exc
    if not isinstance(data, dict):
        raise InputError(path, "expected a mapping at top level")
    return data


def alias_table(user_file: str | None = None) -> AliasTable:
    """The shipped table, extended by a user's file when one is given."""
    return _alias_table(user_file)  # one cache entry whether None is passed or defaulted


@lru_cache(maxsize=8)
def _alias_table(user_file: str | None) -> AliasTable:
    table = AliasTable()
    text = resources.files("forensics").joinpath("data/aliases.yaml").read_text()
    table.extend(_load_yaml("forensics/data/aliases.yaml", text), "forensics/data/aliases.yaml")
    if user_file:
        path = Path(user_file)
        if not path.is_file():
            raise InputError(path, "alias file not found")
        table.extend(_load_yaml(path, path.read_text()), str(path))
    return table
