"""The report's domain text (types, causes, actions, metric advice), read from lessons.yaml.

The text is data so that a team can reword advice or add a cause without touching code;
this module only resolves the many spellings a detector may use onto one entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from forensics.errors import ForensicsError
from forensics.yamlio import safe_load

_SEP = re.compile(r"[\s\-]+")


class KnowledgeError(ForensicsError):
    """lessons.yaml is malformed: names the file and the key."""


def key(text: Any) -> str:
    """Lower-case, '-' and spaces to '_': how every lookup compares names."""
    return _SEP.sub("_", str(text).strip().lower())


@dataclass
class Entry:
    """One type, cause or action: its canonical key and its fields from the YAML."""

    key: str
    fields: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None


class Knowledge:
    """Lookups over lessons.yaml; unknown names get an explicit fallback entry."""

    def __init__(self, data: dict[str, Any], source: str) -> None:
        for section in ("types", "causes", "actions", "metrics"):
            if not isinstance(data.get(section), dict):
                raise KnowledgeError(f"{source}: key '{section}' must be a mapping")
        self.source = Path(source).name  # the report text names the file, not its folder
        self.metrics: dict[str, str] = {str(k): str(v) for k, v in data["metrics"].items()}
        self.fp16_only = [str(m) for m in data.get("fp16_only") or []]
        self._types = self._index(data["types"])
        self._causes = self._index(data["causes"])
        self._actions = self._index(data["actions"])

    @classmethod
    def from_text(cls, text: str, source: str) -> Knowledge:
        try:
            data = safe_load(text)
        except yaml.YAMLError as exc:
            raise KnowledgeError(f"{source}: not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise KnowledgeError(f"{source}: expected a mapping at the top level")
        return cls(data, source)

    @staticmethod
    def _index(section: dict[Any, Any]) -> dict[str, Entry]:
        index: dict[str, Entry] = {}
        for name, fields in section.items():
            entry = Entry(key(name), dict(fields or {}))
            for alias in [name, *entry.fields.get("aliases", [])]:
                index.setdefault(key(alias), entry)
        return index

    def incident_type(self, raw: str | None) -> Entry:
        """Type number and name for `1`, `type_1`, `recoverable`...; unknown types say so."""
        hit = self._types.get(key(raw)) if raw is not None else None
        if hit is not None:
            return hit
        return Entry(
            "?",
            {"name": "unclassified", "summary": f"type {raw!r} is not described in {self.source}."},
        )

    def cause(self, raw: str | None) -> Entry:
        hit = self._causes.get(key(raw)) if raw else None
        if hit is not None:
            return hit
        title = key(raw).replace("_", " ") if raw else "undetermined"
        fallback = self._causes.get("unknown")
        lessons = fallback.fields.get("lessons", []) if fallback else []
        return Entry(
            key(raw or "unknown"),
            {
                "title": title,
                "lessons": lessons,
                "description": f"no description of cause `{raw}` in {self.source}.",
            },
        )

    def action(self, raw: str | None) -> Entry | None:
        """The recovery action named by `raw` (its part before ':' or '('), if known."""
        if not raw:
            return None
        return self._actions.get(key(re.split(r"[:(=]", raw, maxsplit=1)[0]))
