"""The `forensics` command line: parses arguments and calls one library function per command.

Commands live in `forensics/commands/` (one module per stage). Every command is wrapped so
that a ForensicsError becomes one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

from forensics.errors import ForensicsError, UnexpectedError, one_line

err_console = Console(stderr=True, soft_wrap=True)
out_console = Console(soft_wrap=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]error:[/bold red] {message}", highlight=False, markup=True)
    return typer.Exit(code)


class _NoStatus:
    """`status` where stderr is no terminal: rich draws nothing there (a transient spinner)."""

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to redraw."""


@contextmanager
def status(message: str) -> Iterator[Any]:
    """A spinner on stderr while a command works, with `.update(text)`. Off a terminal
    (a pipe, a file, a CI log) rich's spinner shows nothing, so rich's live display,
    spinner and progress modules are not even imported (a few ms of every command)."""
    if not err_console.is_terminal:
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


def _is_cli_flow(exc: BaseException) -> bool:
    """typer/click's own Exit, Abort and usage errors: how a command ends, not a failure."""
    return type(exc).__module__.split(".")[0] in ("typer", "click")


class App(typer.Typer):
    """A Typer whose commands report ForensicsError as one line."""

    def command(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)

        def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(func)
            def guarded(*a: Any, **k: Any) -> Any:
                from rich.markup import escape

                try:
                    return func(*a, **k)
                except ForensicsError as exc:
                    raise fail(escape(str(exc)), exc.exit_code) from None
                except (KeyboardInterrupt, SystemExit, GeneratorExit):
                    raise
                except BaseException as exc:  # the last line of defence (a Rust panic too)
                    if _is_cli_flow(exc) or os.environ.get("FORENSICS_DEBUG"):
                        raise
                    raise fail(escape(str(unexpected(func.__name__, exc))), 1) from None

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
