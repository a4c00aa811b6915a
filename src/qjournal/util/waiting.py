"""The one way to wait for something: a condition polled until it holds, with a deadline.

Why one helper: a sleep is not synchronisation (it is too short on a loaded machine and too long
everywhere else), and every hand-written polling loop picks its own deadline, clock and failure
message. Here the deadline is on the wall clock (``time.monotonic``), so a wait is bounded in real
time even on the simulator's virtual-time loop, and a timeout raises :class:`WaitTimeout` naming
what was waited for and the last value the condition returned. The tests use it for every wait on
a condition (docs/testing.md, isolation rule 6), and so do the test hosts (``qjournal.hosts``).

* :func:`wait_until` polls a plain callable from synchronous code (real processes, ZooKeeper).
* :func:`async_wait_until` polls from a coroutine; the condition may be a plain callable or return
  an awaitable (an RPC, a manifest query). ``poll_s=0`` only yields to the event loop between polls,
  for conditions that other tasks of the same loop make true (no timer needed).

Both return the condition's last (truthy) value, so a test can wait for something and use it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable

__all__ = ["WaitTimeout", "wait_until", "async_wait_until"]


class WaitTimeout(TimeoutError):
    """The condition did not hold before the deadline (the message names what was waited for)."""


def _deadline(what: str, timeout_s: float) -> float:
    if not isinstance(what, str) or isinstance(timeout_s, str):
        # the old helpers took (cond, timeout_s, what): a call in that order fails here, named
        raise TypeError(f"wait_until(cond, what, timeout_s): got what={what!r}, timeout_s={timeout_s!r}")
    return time.monotonic() + timeout_s


def _timed_out(what: str, timeout_s: float, last: Any) -> WaitTimeout:
    return WaitTimeout(f"timed out after {timeout_s}s waiting for {what} (last value: {last!r})")


def wait_until(cond: Callable[[], Any], what: str, timeout_s: float = 30.0, poll_s: float = 0.02) -> Any:
    """Poll ``cond()`` until it returns a truthy value.

    Args:
        cond: the condition; called at least once, then every ``poll_s`` seconds.
        what: what is waited for, in words (the failure message names it).
        timeout_s: the deadline, in seconds of wall-clock time from the call.
        poll_s: the pause between two polls.

    Returns:
        the condition's first truthy value.

    Raises:
        WaitTimeout: the deadline passed with the condition still false.
    """
    deadline = _deadline(what, timeout_s)
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, v)
        time.sleep(poll_s)


async def async_wait_until(cond: Callable[[], Any | Awaitable[Any]], what: str, timeout_s: float = 30.0,
                           poll_s: float = 0.01) -> Any:
    """:func:`wait_until` from a coroutine: ``cond()`` may return an awaitable (awaited before the test), and
    ``poll_s=0`` only yields to the event loop between polls. Same arguments, result and ``WaitTimeout``."""
    deadline = _deadline(what, timeout_s)
    while True:
        v = cond()
        if inspect.isawaitable(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, v)
        await asyncio.sleep(poll_s)
