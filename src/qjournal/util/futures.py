"""ListenedFuture: an asyncio future that also tells its listeners at once, in the call that completes it.

Why this module exists: a one-record quorum commit passes an answer up three
layers (the RPC client's future of the ``journal`` call, the logger's future of
the batch, the quorum call's decision), and an asyncio done-callback runs one
event-loop iteration after its future completes: three iterations, each a
``Handle`` and a pass of the loop (its clock, its heap of timers, a ``select``),
between the JournalNode's answer arriving and the writer waking. A listener
runs in the same call instead, so an answer reaches the quorum call in the
iteration it was read in (issue 17 item 2: the writer's CPU per commit).

Theory of operation: :meth:`ListenedFuture.listen` registers ``fn(future)``;
``set_result``, ``set_exception`` and a successful ``cancel`` complete the
future as asyncio's own does (its done-callbacks and awaiting tasks still run
one iteration later), then call each listener in registration order. A future
already done calls a new listener at once. Only code that owns both sides uses
it (``RpcClient.send`` and the quorum writer's loggers): a listener is short,
never awaits, and must not complete futures of its caller's caller in a way
that re-enters it.

Invariants:

1. Each listener is called exactly once, after the future is done.
2. A listener that raises is reported to the loop's exception handler, as a
   failing done-callback is; the other listeners and the code that completed
   the future go on.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

__all__ = ["ListenedFuture", "when_done"]


class ListenedFuture(asyncio.Future):
    """An :class:`asyncio.Future` with synchronous listeners (module docstring)."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(loop=loop)
        self._listeners: list[Callable[["ListenedFuture"], Any]] | None = None

    def listen(self, fn: Callable[["ListenedFuture"], Any]) -> None:
        """Call ``fn(self)`` when the future completes (at once when it is done already)."""
        if self.done():
            self._call(fn)
        elif self._listeners is None:
            self._listeners = [fn]
        else:
            self._listeners.append(fn)

    def _call(self, fn: Callable[["ListenedFuture"], Any]) -> None:
        try:
            fn(self)
        except Exception as exc:  # invariant 2
            self.get_loop().call_exception_handler({
                "message": f"listener {fn!r} of a future failed", "exception": exc, "future": self})

    def _tell(self) -> None:
        listeners, self._listeners = self._listeners, None
        if listeners is not None:
            for fn in listeners:
                self._call(fn)

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self._tell()

    def set_exception(self, exception: Any) -> None:
        super().set_exception(exception)
        self._tell()

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg):
            return False
        self._tell()
        return True


def when_done(fut: asyncio.Future, fn: Callable[[asyncio.Future], Any]) -> None:
    """Call ``fn(fut)`` once ``fut`` is done: in the completing call for a :class:`ListenedFuture`,
    one loop iteration later (a done-callback) for any other future."""
    if isinstance(fut, ListenedFuture):
        fut.listen(fn)
    else:
        fut.add_done_callback(fn)
