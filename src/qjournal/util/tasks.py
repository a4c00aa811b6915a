"""Background tasks of the daemons: started so that they never die silently, and stopped cleanly.

Why this module exists: every daemon runs background loops (the NameNode's roll
loop, tailer and checkpointer; the controller's health monitor and elector
driver; the JournalNode's workers). A loop whose task ends with an exception
nobody awaits is a silent stall: the controller that never rejoins the election
(issue 11) was exactly that. So every background task is started with
:func:`spawn`, which watches it, and stopped with :func:`cancel_and_wait`.

Rules (numbered, cited where relied on):

1. A background task that ends with an exception (not a cancellation) is logged
   as an error with its traceback, always.
2. Then its owner's ``on_crash`` decides (restart the loop, or fail the
   component so the daemon exits non-zero); with no ``on_crash`` the process
   ends through :func:`fatal`.
3. A broken invariant (:class:`~qjournal.errors.InvariantViolation`, outside the
   ``Exception`` tree) always ends the process through :func:`fatal`, whatever
   the owner wanted.
4. :func:`fatal` calls the process's fatal handler: by default it logs and exits
   with status 70 (EX_SOFTWARE) at once; a test run installs one that records
   the failure and fails the test (``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any, Callable, Coroutine

__all__ = ["spawn", "cancel_and_wait", "fatal", "set_fatal_handler", "EXIT_FATAL"]

log = logging.getLogger("qjournal.util.tasks")

#: exit status of a process ended by :func:`fatal` (sysexits.h EX_SOFTWARE)
EXIT_FATAL = 70

FatalHandler = Callable[[str, BaseException], None]


def _exit_now(message: str, exc: BaseException) -> None:
    log.critical("fatal: %s: %r; the process exits with status %d", message, exc, EXIT_FATAL,
                 exc_info=(type(exc), exc, exc.__traceback__))
    for h in logging.getLogger().handlers:
        try:
            h.flush()
        except Exception:  # noqa: BLE001 - best effort while dying
            pass
    sys.stderr.flush()
    os._exit(EXIT_FATAL)


_fatal_handler: FatalHandler = _exit_now


def set_fatal_handler(handler: FatalHandler) -> FatalHandler:
    """Install the process's fatal handler (rule 4); returns the previous one."""
    global _fatal_handler
    previous, _fatal_handler = _fatal_handler, handler
    return previous


def fatal(message: str, exc: BaseException) -> None:
    """End the process (rule 4): a broken invariant, or a crashed task nobody can restart."""
    _fatal_handler(message, exc)


def spawn(coro: Coroutine[Any, Any, Any], *, name: str,
          on_crash: Callable[[BaseException], None] | None = None) -> asyncio.Task:
    """Start ``coro`` as a watched background task on the running loop (rules 1-3).

    Args:
        coro: the loop to run.
        name: the task's name, in logs.
        on_crash: called (on the loop) with the exception the task died of; None: :func:`fatal`.

    Returns:
        The task (stop it with :func:`cancel_and_wait`).
    """
    task = asyncio.get_running_loop().create_task(coro, name=name)

    def _watch(t: asyncio.Task) -> None:
        if t.cancelled():
            return
        exc = t.exception()
        if exc is None:
            return
        log.error("background task %s died: %r", name, exc,  # rule 1
                  exc_info=(type(exc), exc, exc.__traceback__),
                  extra={"event": "task_crashed", "task": name, "error": repr(exc)})
        if on_crash is None or not isinstance(exc, Exception):  # rules 2, 3
            fatal(f"background task {name} died", exc)
        else:
            on_crash(exc)

    task.add_done_callback(_watch)
    return task


async def cancel_and_wait(task: asyncio.Future | None, *, ignore_errors: bool = False) -> None:
    """Cancel ``task`` and wait until it has ended.

    A task that already ended is not cancelled; with ``ignore_errors`` it is
    still awaited so that its exception counts as retrieved (a task started with
    :func:`spawn` has already reported it).

    Args:
        task: the task (None: nothing to do).
        ignore_errors: also swallow an ``Exception`` the task ended with
            (otherwise only its ``CancelledError``, and an ended task is left as is).

    Raises:
        Exception: without ``ignore_errors``, what the task raised while
            unwinding from the cancellation.
    """
    if task is None:
        return
    if not ignore_errors:
        if task.done():
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass
