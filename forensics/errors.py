"""Every error the library raises on bad input or bad state.

The CLI turns any ForensicsError into one line on stderr and a non-zero exit, so each
message must name the object (file, line, field, run) and say what was expected.
"""

from __future__ import annotations

from pathlib import Path

MAX_MESSAGE = 300  # characters of a one-line message; a 50 MB field must not print 50 MB


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` on one line (newlines and control characters shown as spaces), at most
    `limit` characters, the cut marked with '…'."""
    head = text[: limit + 1]  # only what can be shown is looked at
    flat = "".join(c if c.isprintable() else " " for c in head)
    return flat if len(text) <= limit else flat[: limit - 1] + "…"


def shown(value: object, limit: int = 60) -> str:
    """A user-supplied value quoted for an error message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ForensicsError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code = 1

    def __str__(self) -> str:
        return one_line(super().__str__())


class InputError(ForensicsError):
    """A source file is malformed: names the file, the line or record, and what was expected."""

    exit_code = 2

    def __init__(
        self,
        path: Path | str,
        problem: str,
        *,
        line: int | None = None,
        field: str | None = None,
        expected: str | None = None,
    ) -> None:
        where = one_line(str(path), 160)  # the file is always named, however long the rest
        problem, expected = one_line(problem, 200), expected and one_line(expected, 100)
        if line is not None:
            where += f":{line}"
        parts = [where]
        if field is not None:
            parts.append(f"field '{field}'")
        msg = ": ".join(parts) + f": {problem}"
        if expected:
            msg += f" (expected {expected})"
        super().__init__(msg)
        self.path, self.line, self.field = str(path), line, field


class UnknownFormatError(ForensicsError):
    """No reader recognised a file; lists what was tried so the user can pick `--format`."""

    exit_code = 2

    def __init__(self, path: Path | str, tried: list[str]) -> None:
        super().__init__(
            f"{path}: format not recognised (tried: {', '.join(tried)}); "
            "pass --format NAME to force one"
        )


class StoreError(ForensicsError):
    """The DuckDB store is missing, locked, or lacks what a command needs."""


class RunNotFoundError(StoreError):
    def __init__(self, db: Path | str, run: str, known: list[str]) -> None:
        hint = f"known runs: {', '.join(known)}" if known else "the database holds no run yet"
        super().__init__(
            f'"{db}" has no run named "{run}" ({hint}); run `forensics ingest` first or pass --run'
        )


class RuleError(ForensicsError):
    """A rule file is broken: names the file and the field."""

    exit_code = 2

    def __init__(self, path: Path | str, field: str, problem: str) -> None:
        super().__init__(f"{path}: field '{field}': {problem}")


class UnexpectedError(ForensicsError):
    """An exception no stage expected (a library's own error on hostile input), reported
    as one line naming the command and, where known, the file; never a traceback."""


class ReplayError(ForensicsError):
    """A replay cannot run at all (as opposed to a probe that is inconclusive)."""


class ReportOptionError(ForensicsError):
    """A report option has a value the report cannot use."""

    exit_code = 2


class SimulationError(ForensicsError):
    """A simulator scenario or its parameters are invalid."""
