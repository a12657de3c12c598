"""Number and time formatting for the Markdown: one place so every report reads alike.

Every filter renders a missing value as an explicit phrase, never as "None".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

MISSING = "n/a"


def num(value: Any, digits: int = 4) -> str:
    """A measurement: 4 significant digits, thousands separators above 10,000, NaN/Inf kept."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, int | float):
        return str(value)
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if isinstance(value, int) or (x.is_integer() and abs(x) < 1e15):
        return f"{int(x):,}" if abs(x) >= 10_000 else str(int(x))
    if abs(x) >= 10_000:
        return f"{x:,.0f}"
    if 0 < abs(x) < 1e-3:
        mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"
    return f"{x:.{digits}g}"


def pct(value: Any, signed: bool = False) -> str:
    """A fraction as a percentage (0.82 -> 82%)."""
    if value is None or not isinstance(value, int | float) or not math.isfinite(value):
        return MISSING
    return f"{value * 100:+.0f}%" if signed else f"{value * 100:.0f}%"


def count(value: Any) -> str:
    """A large count in words: 1,310,720,000 -> "1.31 B"."""
    if value is None or not isinstance(value, int | float) or not math.isfinite(value):
        return MISSING
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {suffix}"
    return num(value)


def usd(value: Any) -> str:
    if value is None or not isinstance(value, int | float) or not math.isfinite(value):
        return MISSING
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"


def utc(wall_time: Any) -> str:
    """Unix seconds as `YYYY-MM-DD HH:MM UTC`."""
    if wall_time is None or not math.isfinite(float(wall_time)):
        return MISSING
    return datetime.fromtimestamp(float(wall_time), UTC).strftime("%Y-%m-%d %H:%M UTC")


def cell(value: Any) -> str:
    """Anything (evidence values, JSON) as a Markdown table cell: no pipes, no newlines."""
    if isinstance(value, list):
        text = f"list of {len(value)}" if len(value) > 6 else ", ".join(num(v) for v in value)
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={num(v)}" for k, v in sorted(value.items()))
    else:
        text = num(value)
    return text.replace("|", "\\|").replace("\n", " ")


def ratio(value: Any, reference: Any) -> str:
    """`value / reference` as "×2.21"; n/a when either is missing, non-finite or zero."""
    ok = all(isinstance(x, int | float) and math.isfinite(x) for x in (value, reference))
    if not ok or reference == 0:
        return MISSING
    r = value / reference
    return f"×{r:,.0f}" if abs(r) >= 1000 else f"×{r:.3g}"


def plural(n: Any, word: str, many: str | None = None) -> str:
    """`3 rows`, `1 row`: the count (formatted) and the word in the right number."""
    return f"{num(n)} {word if n == 1 else many or word + 's'}"


def sentence(text: Any) -> str:
    """Upper-case the first letter only (str.capitalize would lower-case "Adam")."""
    text = str(text)
    return text[:1].upper() + text[1:]


FILTERS: dict[str, Callable[..., str]] = {
    "num": num,
    "pct": pct,
    "count": count,
    "usd": usd,
    "utc": utc,
    "cell": cell,
    "ratio": ratio,
    "plural": plural,
    "sentence": sentence,
}
