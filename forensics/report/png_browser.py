"""One kaleido browser on its own event-loop thread, whose every call has a deadline.

Why not kaleido's `write_fig_from_object_sync` / `start_sync_server`: both block the caller
until the browser answers, with no limit (`Thread.join()`, `Queue.join()`). A browser that
starts and never answers on its DevTools pipe blocks them forever (this hung `forensics
report` and CI once, under load), and when the shared server's browser fails to open, its
callers wait on a queue that nobody serves any more. A worker thread with `join(timeout)`
only lets the caller stop waiting: the hung call and its browser live on, and the browser
(a new session, see below) even outlives our process.

So we drive `kaleido.Kaleido` (its public async API) ourselves, on an event loop in a daemon
thread, and wait for each call's `concurrent.futures.Future` with a timeout. Past it we kill
the browser's whole process group: choreographer starts the browser in a new session
(`start_new_session=True`; a small Python wrapper that runs Chromium, whose zygote, renderer
and GPU processes stay in that group), so one `killpg` ends all of it and nothing else. We
cancel the pending call; choreographer's watchdog sees the process end and closes the
browser (removing its temporary profile) in the loop thread, which `close()` gives a few
seconds before it stops the loop. Whatever might still hang stays in the daemon thread,
which can no longer drive a browser nor block the exit of the CLI. While waiting we also
watch the browser's process: one that exited fails the call at once (see `_until_done`).

A subprocess per export would be as robust, but it costs a Python start and a plotly import
(~1 s) per report plus pickled figures, and the browser would still be a grandchild in
another session to hunt down; holding the `Kaleido` object gives us its `Popen` directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)

UNWIND_S = 5.0  # what a killed browser's process and our loop thread get to end
CHOREO_LOGGER = "choreographer.browser_async"  # its watchdog logs the kill as a warning
POLL_S = 0.25  # how often a waiting call looks at the browser's process
EXITED_GRACE_S = 1.0  # how long a call may still wait on a browser whose process ended
SETTLE_S = 3.0  # what choreographer's watchdog gets to close a killed browser (it takes ~1 s)


class BrowserTimeout(Exception):
    """A browser call did not finish by its deadline; the browser was killed."""


class BrowserExited(Exception):
    """The browser's process ended while a call still waited for its answer."""


class KaleidoBrowser:
    """A kaleido browser that starts at construction (in the background) and is used by
    `write` and `close`, each bounded by a deadline (`time.monotonic()` seconds)."""

    def __init__(self, kopts: dict[str, Any]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="forensics-kaleido", daemon=True
        )
        self._thread.start()
        self._kaleido: Any = None
        self.failure: BaseException | None = None  # set once killed: every later call re-raises it
        self._opened = self._submit(self._open(kopts))
        logging.getLogger(CHOREO_LOGGER).addFilter(self._quiet_after_kill)

    def _quiet_after_kill(self, record: logging.LogRecord) -> bool:
        """Drop choreographer's "Wait expired, Browser is being closed by watchdog." (and the
        like) about a browser we killed: our one-line warning already says what happened."""
        return self.failure is None or record.thread != self._thread.ident

    def _submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _open(self, kopts: dict[str, Any]) -> Exception | None:
        """Start the browser; returns (not raises) why it failed: whoever waits for it, or
        nobody, no "exception was never retrieved" is logged."""
        import kaleido

        try:
            self._kaleido = kaleido.Kaleido(**kopts)
            await self._kaleido.open()
        except Exception as exc:  # noqa: BLE001 - raised again by every write
            return exc
        return None

    async def _write(self, jobs: list[dict[str, Any]]) -> None:
        # shielded: cancelling a timed-out write must not cancel the shared opening as well
        failed = await asyncio.shield(asyncio.wrap_future(self._opened))
        if failed is not None:
            raise failed
        await self._kaleido.write_fig_from_object(jobs)

    def write(self, jobs: list[dict[str, Any]], deadline: float, why_late: str) -> None:
        """Render kaleido figure dicts by `deadline`; past it kill the browser and raise
        `BrowserTimeout(why_late)`. After a kill every call raises that same error, so a
        session of many reports says it once."""
        if self.failure is not None:
            raise self.failure
        self._wait(self._submit(self._write(jobs)), deadline, why_late, watch_exit=True)

    def close(self, seconds: float) -> None:
        """Close the browser within `seconds`, else kill it; then stop the loop thread.

        After a kill this still runs: it removes the browser's temporary profile, kills
        again in case the browser was only being started at the first kill, and ends
        choreographer's watchdog task, which would otherwise be destroyed pending (and say
        so on stderr) when the loop stops.
        """
        if self.failure is not None:
            kill_process_tree(getattr(self._kaleido, "subprocess", None))
        try:
            self._wait(self._submit(self._shutdown()), time.monotonic() + seconds, "closing")
        except Exception as exc:  # noqa: BLE001 - nothing is left to save, only to tidy up
            log.info("closing the PNG browser: %r", exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(UNWIND_S)
        if not self._thread.is_alive():
            self._loop.close()
            logging.getLogger(CHOREO_LOGGER).removeFilter(self._quiet_after_kill)

    async def _shutdown(self) -> None:
        if self.failure is None:
            with contextlib.suppress(Exception):  # it did not open: still clean up its leftovers
                await asyncio.wrap_future(self._opened)
            if self._kaleido is not None:
                await self._kaleido.close()
        # After a kill, choreographer's watchdog closes the dead browser itself (a second
        # close() would cancel the first one's work); let it, then end what is left.
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=SETTLE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # retrieves every exception

    def _wait(
        self,
        future: concurrent.futures.Future[Any],
        deadline: float,
        why: str,
        *,
        watch_exit: bool = False,
    ) -> None:
        """The call's result by `deadline`; on a timeout, an exited browser (`watch_exit`)
        or Ctrl-C, kill the browser and cancel the call before raising."""
        try:
            self._until_done(future, deadline, why, watch_exit)
        except BaseException as exc:
            self._abandon(future, exc)
            raise
        future.result()  # the call's own error, if any

    def _until_done(
        self, future: concurrent.futures.Future[Any], deadline: float, why: str, watch_exit: bool
    ) -> None:
        """Return once `future` is done. Raise `BrowserTimeout(why)` past `deadline`, and
        `BrowserExited` when the browser's process is gone but the call still waits on it:
        choreographer's watchdog normally fails such a call within ~1 s, but in a loop
        thread of ours it sometimes ends at once and the call would wait for the limit."""
        exited_at: float | None = None
        while True:
            left = deadline - time.monotonic()
            if concurrent.futures.wait([future], timeout=min(POLL_S, max(0.0, left))).done:
                return
            if left <= 0:
                raise BrowserTimeout(why)
            if watch_exit and self._exited():
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > EXITED_GRACE_S:
                    raise BrowserExited("the browser exited without answering")

    def _exited(self) -> bool:
        proc = getattr(self._kaleido, "subprocess", None)
        return proc is not None and proc.poll() is not None

    def _abandon(self, future: concurrent.futures.Future[Any], failure: BaseException) -> None:
        """Kill the browser and cancel the hung call; every later call raises `failure`."""
        self.failure = failure
        kill_process_tree(getattr(self._kaleido, "subprocess", None))
        future.cancel()


def kill_process_tree(proc: subprocess.Popen[Any] | None) -> None:
    """SIGKILL a browser and everything it started, then reap it.

    choreographer starts the browser as the leader of a new session (its pid is its process
    group), so the group is exactly the browser's processes. Never our own group.
    """
    if proc is None:
        return  # the browser was not started yet: nothing runs
    if os.name == "nt":
        subprocess.run(
            ["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True, check=False
        )
    elif proc.pid != os.getpgrp():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()  # not a group leader after all (or already gone): the process itself
    try:
        proc.wait(timeout=UNWIND_S)
    except subprocess.TimeoutExpired:
        log.warning("browser process %d did not exit after SIGKILL", proc.pid)
