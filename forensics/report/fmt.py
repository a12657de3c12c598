"""Number and time formatting for the Markdown: one place so every report reads alike.

Every filter renders a missing value as an explicit phrase, never as "None".
"""

from __future__ import annotations

import html
import math
import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from forensics.nonfinite import signed_percent, spell

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
    if not math.isfinite(x):
        return spell(x)
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
    return signed_percent(value) if signed else f"{value * 100:.0f}%"


def share(value: Any) -> str:
    """A replay share removed, as replay words it: never rounded across the line at which an
    amplifier is stated (verdicts.share_text: 0.498 -> "49.8%")."""
    from forensics.replay.verdicts import share_text

    return share_text(value) if finite(value) else MISSING


def count(value: Any) -> str:
    """A large count in words: 1,310,720,000 -> "1.31 B"."""
    if value is None or not isinstance(value, int | float) or not math.isfinite(value):
        return MISSING
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {suffix}"
    return num(value)


def gpu_hours(value: Any) -> str:
    """GPU-hours a reader can say aloud: "1,234", "2.5", "0.012", "< 0.001 (22 GPU-seconds)"."""
    if value is None or not isinstance(value, int | float) or not math.isfinite(value):
        return MISSING
    if value == 0:
        return "0"
    if abs(value) >= 0.001:
        return num(round(value, 3) if abs(value) < 10 else value, 3)
    return f"< 0.001 ({num(value * 3600, 2)} GPU-seconds)"


def steps_after(n: Any, what: str = "the onset") -> str:
    """ "at the onset step itself" for 0, else "N step(s) after the onset"."""
    if n == 0:
        return f"at {what} step itself" if what == "the onset" else f"at {what} itself"
    return f"{plural(n, 'step')} after {what}"


def back_after(recovery: int, onset: int, after_peak: Any) -> str:
    """How long after the onset the loss was back, and after the last peak when that differs:
    the detector's `recovery_steps` counts from the last peak, so the prose names both rather
    than quote a count that disagrees with the appendix."""
    text = steps_after(recovery - onset)
    if finite(after_peak) and int(after_peak) != recovery - onset:
        text += f" and {plural(int(after_peak), 'step')} after the last peak"
    return text


def code(value: Any) -> str:
    """User text (run, metric, file names) as one inline code span that cannot break out:
    one line, no backtick, pipes escaped for tables. A code span shows `<img>` as text."""
    text = " ".join(str(value).split()).replace("`", "'").replace("|", "\\|")
    return f"`{text}`"


EXCERPT_CHARS = 160  # longest excerpt shown in the post-mortem (the rest is counted)
_SHOWN = {"\n": "⏎", "\t": "⇥"}
_HIDDEN = ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")  # control, format (bidi, zero-width), ...


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """Decoded training text (untrusted: anything a corpus holds) as one inline code span that
    shows it as it is and cannot break out: newlines and tabs drawn as ⏎ and ⇥, other control
    and format characters (bidi overrides, zero-width) as `\\u` and their hex code, cut at
    `limit` characters (the rest counted), fenced with more backticks than any run inside (a
    code span shows `<script>`, `**` or `](x)` as text)."""
    chars = []
    for ch in str(value):
        if ch in _SHOWN:
            chars.append(_SHOWN[ch])
        elif unicodedata.category(ch) in _HIDDEN:
            chars.append(f"\\u{ord(ch):04x}")
        else:
            chars.append(ch)
    shown = "".join(chars)
    rest = ""
    if len(shown) > limit:
        rest, shown = f" … (+{plural(len(shown) - limit, 'character')})", shown[:limit]
    if not shown.strip():
        return f"(blank: {plural(len(shown), 'character')})"
    fence = "`" * (max((len(r) for r in re.findall(r"`+", shown)), default=0) + 1)
    pad = " " if shown[0] in "` " or shown[-1] in "` " else ""
    return f"{fence}{pad}{shown}{pad}{fence}{rest}"


_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|!])")


def text(value: Any) -> str:
    """User text as plain Markdown prose: one line, HTML escaped, Markdown specials escaped
    (no heading, no link, no emphasis, no table cell break)."""
    one = " ".join(str(value).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(one, quote=False))


def usd(value: Any) -> str:
    if value is None or not isinstance(value, int | float) or not math.isfinite(value):
        return MISSING
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"


def utc(wall_time: Any, zoned: bool = True) -> str:
    """Unix seconds as `YYYY-MM-DD HH:MM UTC`; without the `UTC` for a time read off a text
    log's own clock (`zoned` False), which prints no time zone: the ingest stored it as if
    it were UTC, and calling it UTC would shift it by the machine's offset."""
    if wall_time is None or not math.isfinite(float(wall_time)):
        return MISSING
    shown = datetime.fromtimestamp(float(wall_time), UTC).strftime("%Y-%m-%d %H:%M")
    return f"{shown} UTC" if zoned else shown


NEGATIVE_ZERO = re.compile(r"(^|[\s(=])-(0(?:\.0+)?)(?![\d.]|e)")


def cell(value: Any) -> str:
    """Anything (evidence values, JSON) as a Markdown table cell: no pipes, no newlines."""
    if isinstance(value, list):
        text = f"list of {len(value)}" if len(value) > 6 else ", ".join(num(v) for v in value)
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={num(v)}" for k, v in sorted(value.items()))
    else:
        text = num(value)
    text = NEGATIVE_ZERO.sub(r"\1\2", text)  # "-0.00 bits" (a probe's rounding) reads "0.00"
    return text.replace("|", "\\|").replace("\n", " ")


def ratio(value: Any, reference: Any) -> str:
    """`value / reference` as "×2.21"; n/a when either is missing, non-finite or zero. A
    loss that is not positive (an RL policy loss near 0) has no meaningful ratio: the
    change is given instead ("+3.43")."""
    ok = all(isinstance(x, int | float) and math.isfinite(x) for x in (value, reference))
    if not ok or reference == 0:
        return MISSING
    if value <= 0 or reference <= 0:
        return change(value, reference)
    r = value / reference
    return f"×{r:,.0f}" if abs(r) >= 1000 else f"×{r:.3g}"


def change(value: Any, reference: Any) -> str:
    """`value - reference` as "+3.43": the size of a move of a loss that is not positive
    everywhere (an RL policy loss around 0), where a ratio says nothing."""
    ok = all(isinstance(x, int | float) and math.isfinite(x) for x in (value, reference))
    return f"{value - reference:+.3g}" if ok else MISSING


def plural(n: Any, word: str, many: str | None = None) -> str:
    """`3 rows`, `1 row`: the count (formatted) and the word in the right number."""
    return f"{num(n)} {word if n == 1 else many or word + 's'}"


def sentence(text: Any) -> str:
    """Upper-case the first letter only (str.capitalize would lower-case "Adam")."""
    text = str(text)
    return text[:1].upper() + text[1:]


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


FILTERS: dict[str, Callable[..., Any]] = {
    "finite": finite,
    "num": num,
    "pct": pct,
    "share": share,
    "count": count,
    "usd": usd,
    "gpu_hours": gpu_hours,
    "steps_after": steps_after,
    "back_after": back_after,
    "code": code,
    "excerpt": excerpt,
    "text": text,
    "utc": utc,
    "cell": cell,
    "ratio": ratio,
    "change": change,
    "plural": plural,
    "sentence": sentence,
}
