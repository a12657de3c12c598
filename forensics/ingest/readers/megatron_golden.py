"""Megatron-LM CI "golden values" JSON (tests/functional_tests/test_cases/**/golden_values*.json).

    {"lm loss": {"start_step": 1, "end_step": 24000, "step_interval": 5,
                 "values": {"1": 12.66411, "5": 12.64027, ...}}, "num-zeros": {...}, ...}

Each top-level key is a metric and becomes a raw name as written (`lm loss`, `mtp_1 loss`,
`iteration-time`, `mem-allocated-bytes`, `num-zeros`). Older files give `values` as a
list, one per `step_interval` from `start_step`. The *string* "nan" means "no data at this
step" (before a resumed run's first step, after the run stopped, or a hole in the middle):
nothing is stored, and the warning says where they lie. A numeric NaN (a bare NaN token)
is a real value and is stored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.jsonfile import read_json_object
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")


@register
class MegatronGoldenReader(Reader):
    name = "megatron_golden"
    description = "Megatron-LM CI golden-values JSON (per-metric start/end/interval/values)"
    priority = 10  # a JSON document this specific is never a generic log

    def sniff(self, path: Path, head: str) -> bool:
        return (
            head.lstrip().startswith("{")
            and '"values"' in head
            and ('"step_interval"' in head or '"start_step"' in head)
        )

    def read(self, path: Path) -> ReadResult:
        data = _load(path)
        rows: list[tuple[int, str, float]] = []
        warnings: list[str] = []
        gaps: dict[str, list[str]] = {}
        for name, spec in data.items():
            if not isinstance(spec, dict) or "values" not in spec:
                warnings.append(f"key {name!r} is not a metric series (no 'values'): skipped")
                continue
            got, missing = _series(path, name, spec)
            rows += got
            if missing:
                gaps.setdefault(_no_data(missing, [r[0] for r in got]), []).append(name)
        warnings += [f"{', '.join(names)}: {said}" for said, names in gaps.items()]
        return ReadResult(
            pl.DataFrame(
                rows,
                schema={"step": pl.Int64, "raw_name": pl.Utf8, "value": pl.Float64},
                orient="row",
            ),
            warnings=warnings,
        )


def _no_data(missing: list[int], have: list[int]) -> str:
    """Where a series' "nan" entries lie: before its first value (a resumed run, a timer
    that starts late), after its last (the run stopped there), or gaps inside the run, each
    named (a plotted line crosses them: nothing was logged there). Said without guessing
    why: "the run stopped early" was wrong for a run with holes in the middle."""
    first, last = (min(have), max(have)) if have else (None, None)
    interval = _gap_step(missing)
    runs: list[list[int]] = []
    for step in sorted(missing):
        inside = first is not None and first < step < last  # type: ignore[operator]
        if runs and inside == runs[-1][2] and step - runs[-1][1] <= interval:
            runs[-1][1] = step
        else:
            runs.append([step, step, inside])
    parts = []
    head = [r for r in runs if first is None or r[1] < first]
    gaps = [r for r in runs if r[2]]
    tail = [r for r in runs if last is not None and r[0] > last]
    if head:
        parts.append(f"{_span(head[0][0], head[-1][1])} before its first value at step {first}")
    if len(gaps) > _NAMED_GAPS:
        n = sum(b - a for a, b, _ in gaps) // interval + len(gaps)
        parts.append(f"{n} scattered between its values (it was logged at fewer steps)")
    elif gaps:
        shown = ", ".join(_span(a, b) for a, b, _ in gaps)
        parts.append(f"{len(gaps)} gap(s) inside the run ({shown}: nothing was logged there)")
    if tail:
        parts.append(f"{_span(tail[0][0], tail[-1][1])} after its last value at step {last}")
    return f'{len(missing)} "nan" entries hold no data: ' + "; ".join(parts)


_NAMED_GAPS = 4  # more gaps than this are a sparser series, not holes in the run


def _span(a: int, b: int) -> str:
    return f"step {a}" if a == b else f"steps {a}-{b}"


def _gap_step(missing: list[int]) -> int:
    """The series' step interval: the smallest distance between two "nan" entries."""
    steps = sorted(missing)
    diffs = [b - a for a, b in zip(steps, steps[1:], strict=False) if b > a]
    return min(diffs) if diffs else 1


def _load(path: Path) -> dict[str, Any]:
    return read_json_object(path, expected="{metric: {values: ...}}")


def _pairs(path: Path, name: str, spec: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(step, raw value) pairs from the dict form, or from the list form and its interval."""
    values = spec["values"]
    if isinstance(values, dict):
        return list(values.items())
    if isinstance(values, list):
        start, interval = spec.get("start_step", 1), spec.get("step_interval", 1)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, interval)):
            raise InputError(path, "start_step/step_interval must be integers", field=name)
        return [(start + i * interval, v) for i, v in enumerate(values)]
    raise InputError(path, "not a dict or list", field=f"{name}.values", expected="step: value")


def _series(
    path: Path, name: str, spec: dict[str, Any]
) -> tuple[list[tuple[int, str, float]], list[int]]:
    rows: list[tuple[int, str, float]] = []
    missing: list[int] = []
    for key, raw in _pairs(path, name, spec):
        step = _step(path, name, key)
        value = _value(raw)
        if value is None:
            if not (isinstance(raw, str) and raw.strip().lower() == "nan"):
                raise InputError(
                    path, f"value {raw!r} is not a number", field=f"{name}.values.{key}",
                    expected='a number or the string "nan" (no data)',
                )  # fmt: skip
            missing.append(step)
            continue
        rows.append((step, name, value))
    return rows, missing


def _step(path: Path, name: str, key: Any) -> int:
    try:
        return int(key)
    except (TypeError, ValueError):
        raise InputError(path, f"step {key!r} is not an integer", field=f"{name}.values") from None


def _value(raw: Any) -> float | None:
    """A number; the string "nan" is None (no data); other numeric strings are numbers."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        try:
            return float(raw)
        except OverflowError:
            return math.copysign(math.inf, raw)
    if isinstance(raw, str) and raw.strip().lower() != "nan":
        try:
            return float(raw)
        except ValueError:
            return None
    return None
