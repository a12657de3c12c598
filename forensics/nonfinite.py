"""Non-finite numbers through JSON: NaN and ±Inf are evidence, so they are spelled, not dropped.

Standard JSON has no NaN or Infinity, and turning them into `null` loses them: an
incident's `grad_ratio` of Infinity (the largest gradient overflowed) read back as
"missing" while the rule evidence beside it said Infinity, and a page then contradicted
itself. Every JSON column and file we write spells them as the strings "NaN",
"Infinity" and "-Infinity" (`to_json`); readers turn those back into floats
(`from_json`), and pages spell them "NaN", "+Inf", "-Inf" (`spell`).
"""

from __future__ import annotations

import math
from typing import Any

TOKENS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def token(x: float) -> str | float:
    """A float as JSON can hold it: itself when finite, else its token."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def to_json(value: Any) -> Any:
    """Dicts, lists and numbers (numpy scalars too) with non-finite floats spelled as tokens."""
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if hasattr(value, "item"):  # numpy / torch scalars
        value = value.item()
    if isinstance(value, float):
        return token(value)
    return value if isinstance(value, bool | int | str) else str(value)


def from_json(value: Any) -> Any:
    """The inverse of `to_json`: the tokens back into floats, anywhere in the structure."""
    if isinstance(value, dict):
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if isinstance(value, str):
        return TOKENS.get(value, value)
    return value


def spell(x: float) -> str:
    """How a page writes a non-finite number ("NaN", "+Inf", "-Inf")."""
    if math.isnan(x):
        return "NaN"
    return "+Inf" if x > 0 else "-Inf"


def signed_percent(x: float, decimals: int = 0) -> str:
    """A relative change as a signed percentage (0.027 -> "+2.7%" with one decimal). A
    change that rounds to nothing is "+0%", never "-0.0%": a near-miss's "loss -0.0% vs
    trend" read as a drop that was not there. Non-finite values are spelled."""
    if not math.isfinite(x):
        return spell(x)
    value = round(x * 100, decimals) + 0.0  # + 0.0 turns a rounded -0.0 into 0.0
    return f"{value:+.{decimals}f}%"
