"""The `forensics` command line: parses arguments and calls one library function per command.

Commands live in `forensics/commands/` (one module per stage). Every command is wrapped so
that a ForensicsError becomes one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import pkgutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO, cast

import typer

from forensics.errors import ForensicsError, UnexpectedError, one_line

if TYPE_CHECKING:
    from rich.console import Console


class _LazyConsole:
    """A rich Console made on first use. Importing rich.console costs ~15 ms, which a
    command that prints nothing through rich (ingest into a pipe) need not pay; rich
    finds sys.stdout/sys.stderr when it prints, not when it is made, so nothing else
    changes."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def real(self) -> Console:
        """The Console itself (made now if it was not yet)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        if name in ("_options", "_console"):  # not set yet (a copy made without __init__)
            raise AttributeError(name)
        return getattr(self.real(), name)

    # Special methods are looked up on the type, never through __getattr__.
    def __enter__(self) -> Console:
        return self.real().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.real().__exit__(*exc)


err_console = cast("Console", _LazyConsole(stderr=True, soft_wrap=True))
out_console = cast("Console", _LazyConsole(soft_wrap=True))


def rich_console(stderr: bool = False) -> Console:
    """The rich Console behind `err_console` or `out_console`, for rich objects that are
    handed a console (Progress, Live) and may use more of it than attributes."""
    return cast(_LazyConsole, err_console if stderr else out_console).real()


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]error:[/bold red] {message}", highlight=False, markup=True)
    return typer.Exit(code)


def is_terminal(stream: TextIO) -> bool:
    """Is `stream` a terminal (not a pipe, a file, a CI log or a test's capture)?"""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stream-less replacement
        return False


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> None:
    """A result table on stdout: drawn by rich on a terminal; elsewhere one tab-separated
    line per row under a header line, which `cut`, `awk` and spreadsheets read as it is
    (and which spares a piped command rich's import and layout, ~20 ms)."""
    if is_terminal(sys.stdout):
        from rich.table import Table
        from rich.text import Text

        table = Table(*columns, title=title or None)
        for row in rows:
            table.add_row(*(Text(str(cell)) for cell in row))  # text, not rich markup
        out_console.print(table)
        return
    for line in (columns, *rows):
        print("\t".join(_cell(c) for c in line))


def _cell(text: str) -> str:
    """A table cell on one line of a tab-separated table."""
    return " ".join(str(text).split())


def warn(message: str) -> None:
    """`warning: <message>` on stderr (yellow on a terminal); the message is not markup."""
    if not is_terminal(sys.stderr):
        print(f"warning: {message}", file=sys.stderr)
        return
    from rich.markup import escape

    err_console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)


class _NoStatus:
    """`status` where stderr is no terminal: rich draws nothing there (a transient spinner)."""

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to redraw."""


@contextmanager
def status(message: str) -> Iterator[Any]:
    """A spinner on stderr while a command works, with `.update(text)`. Off a terminal
    (a pipe, a file, a CI log) rich's spinner shows nothing, so rich's live display,
    spinner and progress modules are not even imported (a few ms of every command)."""
    if not is_terminal(sys.stderr):
        yield _NoStatus()
        return
    with err_console.status(message) as spinner:
        yield spinner


def unexpected(command: str, exc: BaseException) -> UnexpectedError:
    """One line for an exception no stage turned into a ForensicsError: its type, its
    message (capped) and the file it names when it names one (OSError's filename)."""
    where = getattr(exc, "filename", None)
    detail = one_line(str(exc), 160) or "no message"
    prefix = f"{where}: " if where else ""
    return UnexpectedError(
        f"{prefix}`forensics {command}` failed: {type(exc).__name__}: {detail} "
        "(set FORENSICS_DEBUG=1 for the traceback)"
    )


def _escape(text: str) -> str:
    """`text` shown as it is by rich (imported only when a command fails)."""
    from rich.markup import escape

    return escape(text)


def _is_cli_flow(exc: BaseException) -> bool:
    """typer/click's own Exit, Abort and usage errors: how a command ends, not a failure."""
    return type(exc).__module__.split(".")[0] in ("typer", "click")


def reflow(doc: str | None) -> str | None:
    """The docstring with each paragraph on one line: typer's rich help keeps the source's
    line breaks and then wraps to the terminal too, breaking lines mid-sentence. A paragraph
    that starts with \\b keeps its lines (click's marker for a preformatted block)."""
    if doc is None:
        return None
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


class App(typer.Typer):
    """A Typer whose commands report ForensicsError as one line."""

    def command(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)

        def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(func)
            def guarded(*a: Any, **k: Any) -> Any:
                try:
                    return func(*a, **k)
                except ForensicsError as exc:
                    raise fail(_escape(str(exc)), exc.exit_code) from None
                except (KeyboardInterrupt, SystemExit, GeneratorExit):
                    raise
                except BaseException as exc:  # the last line of defence (a Rust panic too)
                    if _is_cli_flow(exc) or os.environ.get("FORENSICS_DEBUG"):
                        raise
                    raise fail(_escape(str(unexpected(func.__name__, exc))), 1) from None

            guarded.__doc__ = reflow(func.__doc__)
            register(guarded)
            return func

        return wrap


app = App(
    name="forensics",
    help="Post-hoc forensics for finished LLM training runs: ingest logs into DuckDB, find and "
    "classify loss spikes, replay the offending batches, write post-mortems.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        from forensics import __version__

        out_console.print(f"forensics {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Post-hoc forensics for finished LLM training runs."""


def _load_commands() -> None:
    import forensics.commands as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{mod.name}")


_load_commands()
