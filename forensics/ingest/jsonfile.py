"""One JSON document that must be an object: what the trainer_state and golden-values
readers both load, with the same one-line errors (file, line, what was expected)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forensics.errors import InputError


def read_json_object(path: Path, expected: str) -> dict[str, Any]:
    """The parsed object, or an InputError naming the file, the line and `expected`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON: {exc.msg}", line=exc.lineno) from exc
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(path, f"cannot read: {str(exc)[:80]}") from exc
    if not isinstance(data, dict):
        raise InputError(path, "not a JSON object", expected=expected)
    return data
