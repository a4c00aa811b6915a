"""Small asyncio helpers shared by the daemons' background loops.

Why this module exists: the NameNode (roll loop, tailer, checkpointer) and
the HA controllers (elector driver, health monitor) each own a background
task that must be cancelled and waited for on shutdown. The few lines that
do it right (cancel only a running task, wait for it to unwind, swallow the
cancellation it raises) were written out at every site; they live here once.
"""

from __future__ import annotations

import asyncio

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Future | None, *, ignore_errors: bool = False) -> None:
    """Cancel ``task`` and wait until it has ended.

    A task that already ended is not cancelled; with ``ignore_errors`` it is
    still awaited so that its exception counts as retrieved.

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
