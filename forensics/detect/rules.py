"""Cause rules as data: one YAML file per rule, validated, evaluated, and tested here.

Where the shipped rules live: `rules/` at the top of the repository (beside the package;
the package is installed editable, so `<forensics>/../rules` finds it). When the package
runs without its repository, `forensics/data/rules/` is tried, then the folder named by
the FORENSICS_RULES_DIR environment variable; `--rules DIR` adds a user's folder on top
(a user rule with the id of a shipped rule replaces it).

Keys, in this order: id, title, status, description, references, cause, condition,
against, needs, confidence, recovery, level, falsepositives, fixtures (docs/detection.md
shows each). `against` (what in the log refutes the cause) and `needs` (what must be
logged to evaluate it) turn a rule into a hypothesis with a status: supported, against or
not evaluable (forensics/detect/evidence.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from forensics.detect.expr import ExprError, Expression, parse
from forensics.detect.model import CAUSES, RECOVERIES, Evidence, Finding
from forensics.detect.vocab import EVIDENCE_SOURCES, FEATURES, TYPES
from forensics.errors import RuleError
from forensics.nonfinite import token
from forensics.yamlio import safe_load

KEYS = (
    "id",
    "title",
    "status",
    "description",
    "references",
    "cause",
    "condition",
    "against",
    "needs",
    "confidence",
    "recovery",
    "level",
    "falsepositives",
    "fixtures",
)
STATUSES = ("experimental", "test", "stable")
LEVELS = ("informational", "low", "medium", "high", "critical")
DESCRIPTION_PARTS = ("What it detects", "Why it matters", "What to do")
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True)
class Adjust:
    when: Expression
    add: float


@dataclass
class Rule:
    id: str
    title: str
    status: str
    description: str
    references: list[str]
    cause: str
    condition: Expression
    against: Expression | None
    needs: list[tuple[str, ...]]  # each entry: alternatives, any one of which evaluates it
    base_confidence: float
    adjust: list[Adjust]
    recovery: dict[str, str]  # type -> action
    level: str
    falsepositives: list[str]
    fixtures: dict[str, list[dict[str, Any]]]
    path: Path
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def names(self) -> list[str]:
        """Features the rule reads, in a stable order (its evidence)."""
        used = set(self.condition.names)
        if self.against is not None:
            used |= self.against.names
        for a in self.adjust:
            used |= a.when.names
        return sorted(used)

    def evaluate(self, features: Mapping[str, Any]) -> Finding:
        """The rule's verdict on one incident, with the features it used as evidence."""
        verdict = self.condition.evaluate(features)
        hit = verdict is True
        conf = self.base_confidence
        for a in self.adjust:
            if a.when.evaluate(features) is True:
                conf += a.add
        conf = round(min(1.0, max(0.0, conf)), 3) if hit else 0.0
        kind = str(features.get("type") or "recoverable")
        evidence = [
            Evidence(n, _plain(features.get(n)), "" if features.get(n) is not None else "missing")
            for n in self.names
        ]
        return Finding(
            self.id, self.cause, hit, conf, self.recovery.get(kind), evidence, verdict is None
        )


def _plain(v: Any) -> float | str | None:
    """A JSON-safe evidence value; NaN/±Inf are kept as the strings the replays table uses."""
    if v is None or isinstance(v, str):
        return v
    return token(float(v))


# ----- loading ------------------------------------------------------------------------------
def _need(path: Path, data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in data or data[key] is None:
        raise RuleError(path, key, "is required")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RuleError(path, key, f"must be a {names}, got {type(value).__name__}")
    return value


def _one_of(path: Path, key: str, value: str, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise RuleError(path, key, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def _expression(path: Path, key: str, text: Any) -> Expression:
    if not isinstance(text, str):
        raise RuleError(path, key, "must be an expression string")
    try:
        expr = parse(text)
    except ExprError as exc:
        raise RuleError(path, key, f"invalid expression: {exc}") from None
    unknown = sorted(expr.names - set(FEATURES))
    if unknown:
        raise RuleError(
            path, key, f"unknown feature(s) {', '.join(unknown)} (see docs/detection.md)"
        )
    return expr


def _needs(path: Path, value: Any) -> list[tuple[str, ...]]:
    """`needs`: a list of evidence sources; `a|b` means either one evaluates the rule."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise RuleError(path, "needs", "must be a list of evidence sources (a or a|b)")
    out = []
    for item in value:
        alts = tuple(a.strip() for a in item.split("|"))
        unknown = [a for a in alts if a not in EVIDENCE_SOURCES]
        if unknown:
            known = ", ".join(EVIDENCE_SOURCES)
            raise RuleError(path, "needs", f"unknown evidence source {unknown[0]!r} ({known})")
        out.append(alts)
    return out


def _strings(path: Path, data: Mapping[str, Any], key: str) -> list[str]:
    items = _need(path, data, key, list)
    if not items or not all(isinstance(x, str) and x.strip() for x in items):
        raise RuleError(path, key, "must be a non-empty list of strings")
    return list(items)


def _check_keys(path: Path, data: Mapping[str, Any]) -> None:
    extra = [k for k in data if k not in KEYS]
    if extra:
        raise RuleError(path, str(extra[0]), f"unknown key (allowed: {', '.join(KEYS)})")
    present = [k for k in KEYS if k in data]
    for want, got in zip(present, data, strict=True):
        if want != got:
            raise RuleError(path, str(got), f"out of order: keys go {', '.join(KEYS)}")


def _description(path: Path, data: Mapping[str, Any]) -> str:
    text = _need(path, data, "description", str)
    for part in DESCRIPTION_PARTS:
        if part.lower() not in text.lower():
            raise RuleError(path, "description", f"lacks its '{part}' part")
    return text


def _confidence(path: Path, value: Any) -> tuple[float, list[Adjust]]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        base, adjust = float(value), []
    elif isinstance(value, dict):
        raw_base = value.get("base")
        if not isinstance(raw_base, int | float) or isinstance(raw_base, bool):
            raise RuleError(path, "confidence.base", "must be a number")
        base = float(raw_base)
        raw = value.get("adjust") or []
        if not isinstance(raw, list):
            raise RuleError(path, "confidence.adjust", "must be a list of {when, add}")
        adjust = [_adjust(path, i, a) for i, a in enumerate(raw)]
        extra = set(value) - {"base", "adjust"}
        if extra:
            raise RuleError(path, f"confidence.{sorted(extra)[0]}", "unknown key")
    else:
        raise RuleError(path, "confidence", "must be a number or {base, adjust}")
    if not 0 < base <= 1:
        raise RuleError(path, "confidence", f"base {base} is not in (0, 1]")
    return float(base), adjust


def _adjust(path: Path, i: int, item: Any) -> Adjust:
    where = f"confidence.adjust[{i}]"
    if not isinstance(item, dict) or set(item) != {"when", "add"}:
        raise RuleError(path, where, "must be a mapping with exactly 'when' and 'add'")
    if not isinstance(item["add"], int | float) or isinstance(item["add"], bool):
        raise RuleError(path, f"{where}.add", "must be a number")
    return Adjust(_expression(path, f"{where}.when", item["when"]), float(item["add"]))


def _recovery(path: Path, value: Any) -> dict[str, str]:
    if isinstance(value, str):
        return dict.fromkeys(TYPES, _one_of(path, "recovery", value, RECOVERIES))
    if not isinstance(value, dict):
        raise RuleError(path, "recovery", "must be an action or a mapping type -> action")
    default = value.get("default")
    out: dict[str, str] = {}
    for key, action in value.items():
        _one_of(path, "recovery", str(key), (*TYPES, "default"))
        _one_of(path, f"recovery.{key}", str(action), RECOVERIES)
    for t in TYPES:
        action = value.get(t, default)
        if action is None:
            raise RuleError(path, f"recovery.{t}", "is required (or give recovery.default)")
        out[t] = str(action)
    return out


REAL_KEYS = {"real_log", "step"}


def _fixtures(path: Path, value: Any) -> dict[str, list[dict[str, Any]]]:
    """Feature dicts, or {real_log: FILE under ../shared/real_logs, step: N}: the incident of
    that real log whose peak is at step N (within 5 steps), with its computed features."""
    if not isinstance(value, dict) or set(value) != {"trigger", "no_trigger"}:
        raise RuleError(path, "fixtures", "must be a mapping with 'trigger' and 'no_trigger' lists")
    out: dict[str, list[dict[str, Any]]] = {}
    for key in ("trigger", "no_trigger"):
        items = value[key]
        if not isinstance(items, list) or not items:
            raise RuleError(path, f"fixtures.{key}", "must be a non-empty list of feature dicts")
        for i, item in enumerate(items):
            where = f"fixtures.{key}[{i}]"
            if not isinstance(item, dict):
                raise RuleError(path, where, "must be a feature dict")
            if "real_log" in item:
                if set(item) != REAL_KEYS or not isinstance(item["step"], int):
                    raise RuleError(path, where, "a real-log fixture is {real_log: FILE, step: N}")
                continue
            unknown = sorted(set(item) - set(FEATURES))
            if unknown:
                raise RuleError(path, where, f"unknown feature {unknown[0]}")
        out[key] = [dict(x) for x in items]
    return out


def load_rule(path: Path) -> Rule:
    """Parse and validate one rule file; RuleError names the file and the field."""
    try:
        data = safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RuleError(path, "(file)", f"not readable YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise RuleError(path, "(file)", "must be a mapping of the rule's keys")
    _check_keys(path, data)
    rule_id = _need(path, data, "id", str)
    if not _ID.match(rule_id):
        raise RuleError(path, "id", f"{rule_id!r} must be lower-case letters, digits, - or _")
    base, adjust = _confidence(path, _need(path, data, "confidence", (int, float, dict)))
    return Rule(
        id=rule_id,
        title=_need(path, data, "title", str),
        status=_one_of(path, "status", _need(path, data, "status", str), STATUSES),
        description=_description(path, data),
        references=_strings(path, data, "references"),
        cause=_one_of(path, "cause", _need(path, data, "cause", str), CAUSES[:-1]),
        condition=_expression(path, "condition", _need(path, data, "condition", str)),
        against=(
            _expression(path, "against", data["against"])
            if data.get("against") is not None
            else None
        ),
        needs=_needs(path, data.get("needs")),
        base_confidence=base,
        adjust=adjust,
        recovery=_recovery(path, _need(path, data, "recovery", (str, dict))),
        level=_one_of(path, "level", _need(path, data, "level", str), LEVELS),
        falsepositives=_strings(path, data, "falsepositives"),
        fixtures=_fixtures(path, _need(path, data, "fixtures", dict)),
        path=path,
        raw=data,
    )


def shipped_rules_dir() -> Path:
    """The shipped rules (see module doc); RuleError when none can be found."""
    here = Path(__file__).resolve().parent.parent
    candidates = [here.parent / "rules", here / "data" / "rules"]
    env = os.environ.get("FORENSICS_RULES_DIR")
    if env:
        candidates.append(Path(env))
    for c in candidates:
        if c.is_dir() and any(c.glob("*.yaml")):
            return c
    raise RuleError(
        candidates[0],
        "(folder)",
        "no shipped rules found; pass --rules DIR or set FORENSICS_RULES_DIR",
    )


def rule_files(extra: Iterable[Path] = (), *, shipped: bool = True) -> list[Path]:
    dirs = ([shipped_rules_dir()] if shipped else []) + [Path(d) for d in extra]
    files: list[Path] = []
    for d in dirs:
        if not d.is_dir():
            raise RuleError(d, "(folder)", "rules folder not found")
        files += sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml"))
    return files


def load_rules(extra: Iterable[Path] = (), *, shipped: bool = True) -> list[Rule]:
    """Every rule, shipped first; a later file with the same id replaces the earlier one."""
    by_id: dict[str, Rule] = {}
    for path in rule_files(extra, shipped=shipped):
        rule = load_rule(path)
        by_id[rule.id] = rule
    return list(by_id.values())


@dataclass
class LintResult:
    validated: int
    total: int
    errors: list[RuleError]


def lint(extra: Iterable[Path] = (), *, shipped: bool = True) -> LintResult:
    """Validate every rule file, collecting every broken one instead of stopping at the first."""
    files = rule_files(extra, shipped=shipped)
    errors: list[RuleError] = []
    seen: dict[str, Path] = {}
    for path in files:
        try:
            rule = load_rule(path)
        except RuleError as exc:
            errors.append(exc)
            continue
        if rule.id in seen and seen[rule.id].parent == path.parent:
            errors.append(RuleError(path, "id", f"{rule.id!r} is also used by {seen[rule.id]}"))
            continue
        seen[rule.id] = path
    return LintResult(len(files) - len(errors), len(files), errors)


@dataclass
class FixtureResult:
    rule_id: str
    kind: str  # trigger | no_trigger
    index: int
    passed: bool
    features: dict[str, Any]
    skipped: str | None = None  # why a real-log fixture could not run


def run_fixtures(rules: Iterable[Rule], real_logs: Path | None = None) -> list[FixtureResult]:
    """Each rule against its own fixtures: `trigger` ones must fire, `no_trigger` must not.
    Real-log fixtures are detected from the file (real_fixtures.py), or skipped with the
    reason when the real logs are not there."""
    from forensics.detect.real_fixtures import RealFixtures

    real = RealFixtures(real_logs)
    out: list[FixtureResult] = []
    for rule in rules:
        for kind, want in (("trigger", True), ("no_trigger", False)):
            for i, feats in enumerate(rule.fixtures[kind]):
                if "real_log" in feats:
                    got, why = real.features(feats["real_log"], feats["step"])
                    if got is None:
                        out.append(FixtureResult(rule.id, kind, i, True, feats, why))
                        continue
                    feats = {**feats, **got}
                fired = rule.condition.evaluate(feats) is True
                out.append(FixtureResult(rule.id, kind, i, fired == want, feats))
    return out
