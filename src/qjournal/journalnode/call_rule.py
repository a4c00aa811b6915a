"""The journal's one-call-at-a-time rule, enforced: a call that overlaps another one of the same journal
from another thread is a broken invariant, not a race left to chance.

Why: ``Journal`` (with its index and its sync installer) is a plain synchronous object whose state is
not locked; it is correct because its host runs one call of a journal at a time (the daemon: on the
journal's worker thread, or inline on the event loop when nothing of that journal is on the thread;
``service.py`` decides). Stated only in prose, a new caller that forgets it would corrupt a journal
silently. So every public call of a journal takes this guard, without waiting: a second thread that
finds it held raises :class:`~qjournal.errors.InvariantViolation` naming the journal and both calls.
The same thread may nest calls (a call that uses another public call).

The two documented exceptions do not take it: ``Journal.get_journaled_edits`` (reads the committed
``(txid, epoch)`` pair as one tuple and the edit cache under its own lock) and
``Journal.sync.finalized_digest`` (a finalized file never changes; its cache entry is replaced whole).

Invariants:

1. At most one thread is inside the guarded calls of one journal at any moment; an overlap raises
   before the second call touches anything.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, TypeVar

from qjournal.errors import InvariantViolation

__all__ = ["CallRule", "one_at_a_time"]

F = TypeVar("F", bound=Callable[..., Any])


class CallRule:
    """The guard of one journal (shared by its acceptor and its sync installer)."""

    __slots__ = ("jid", "_lock", "_running")

    def __init__(self, jid: str) -> None:
        self.jid = jid
        self._lock = threading.RLock()
        self._running = ""  # the outermost call in progress, for the message

    def enter(self, call: str) -> bool:
        """Take the guard for ``call`` (invariant 1). Returns whether this is the outermost call.

        Raises:
            InvariantViolation: another thread is inside a call of this journal.
        """
        if not self._lock.acquire(blocking=False):
            raise InvariantViolation(
                f"journal {self.jid}: {call} called on thread {threading.current_thread().name} while "
                f"{self._running or 'another call'} runs on another thread: a journal runs one call at a time")
        if self._running:
            return False
        self._running = call
        return True

    def leave(self, outermost: bool) -> None:
        if outermost:
            self._running = ""
        self._lock.release()


def one_at_a_time(fn: F) -> F:
    """Guard a public call of a journal object (its ``_rule`` is the journal's :class:`CallRule`)."""
    name = fn.__name__

    @functools.wraps(fn)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        rule = self._rule
        outermost = rule.enter(name)
        try:
            return fn(self, *args, **kwargs)
        finally:
            rule.leave(outermost)
    return guarded  # type: ignore[return-value]
