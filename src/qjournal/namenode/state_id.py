"""Waiting for a txid to be applied: the observer's reads park here until the tailer catches up.

Why a module: an observer read that is behind its client's state id must wake the
moment the tailer applies that txid (``observer_rules`` rule 3), neither later (a
polling period of added latency per read) nor never (a bounded wait). The tailer
calls :meth:`AppliedTxidWaiters.notify` after every applied batch; each read waits
on a future keyed by the txid it needs.

Invariants:

1. A waiter is woken by the first ``notify`` whose txid reaches its own, or by
   its timeout; it never misses a notify that happened before it registered
   (``wait_for`` checks the applied txid first).
2. Waiters are bounded: at most ``max_waiters`` at a time (one per read in flight;
   beyond it a read is refused with the retriable error at once rather than queued).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

__all__ = ["AppliedTxidWaiters"]


class AppliedTxidWaiters:
    """Futures keyed by txid, resolved when the applied txid reaches them (module docstring).

    Args:
        applied_txid: the txid applied so far.
        max_waiters: most reads parked at once (invariant 2).
    """

    def __init__(self, applied_txid: int = 0, max_waiters: int = 10000) -> None:
        self.applied_txid = applied_txid
        self.max_waiters = max_waiters
        self._heap: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def notify(self, applied_txid: int) -> None:
        """The tailer applied every txid up to ``applied_txid``: wake the reads waiting for them."""
        if applied_txid > self.applied_txid:
            self.applied_txid = applied_txid
        heap = self._heap
        while heap and heap[0][0] <= self.applied_txid:
            _txid, _seq, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result(None)

    async def wait_for(self, txid: int, timeout_ms: int) -> bool:
        """Wait until ``txid`` is applied, at most ``timeout_ms``.

        Returns:
            True when it is applied; False after the timeout or when too many reads wait.
        """
        if txid <= self.applied_txid:  # invariant 1
            return True
        if timeout_ms <= 0 or len(self._heap) >= self.max_waiters:
            return False
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (txid, next(self._seq), fut))
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_ms / 1000.0)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()
                self._heap = [e for e in self._heap if e[2] is not fut]
                heapq.heapify(self._heap)
