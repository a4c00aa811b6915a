"""AsyncLoggerSet: fan one call out to every JournalNode and wait for a quorum.

Why: the QuorumJournalManager thinks in quorum operations ("start segment 151
on a quorum"), not in per-node calls. This module turns each such operation
into one :class:`~qjournal.client.quorum_call.QuorumCall` over the loggers
and applies the right wait rule and per-operation timeout.

Invariants:

1. The set of loggers is fixed at construction, in URI order; results are
   keyed by node name and iterated in sorted order.
2. The epoch is set on every logger at once, once.
3. Write-path calls are enqueued on every logger synchronously, in call order,
   so each JournalNode sees the writer's operations in the same order.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from qjournal.client.logger import AsyncLogger
from qjournal.client.quorum_call import QuorumCall
from qjournal.errors import InvariantViolation
from qjournal.protocol.quorum import WaitRule, all_rule, majority, majority_rule, quorum_string

__all__ = ["AsyncLoggerSet"]


class AsyncLoggerSet:
    """The loggers of one journal.

    Args:
        loggers: one :class:`AsyncLogger` per JournalNode, in URI order.
    """

    def __init__(self, loggers: list[AsyncLogger]) -> None:
        if not loggers:
            raise InvariantViolation("an AsyncLoggerSet needs at least one logger")
        names = [lg.name for lg in loggers]
        if len(set(names)) != len(names):
            raise InvariantViolation(f"duplicate JournalNode in logger set: {names}")
        self.loggers = list(loggers)
        self.jid = loggers[0].jid
        self.epoch: int | None = None
        self._majority_rule = majority_rule(len(self.loggers))  # immutable: one for every wait

    def __len__(self) -> int:
        return len(self.loggers)

    @property
    def majority(self) -> int:
        """Nodes needed for a quorum."""
        return majority(len(self.loggers))

    @property
    def quorum_string(self) -> str:
        """``"2/3"``-style quorum size."""
        return quorum_string(len(self.loggers))

    def by_name(self, name: str) -> AsyncLogger:
        """The logger of node ``name``. Raises: KeyError."""
        for lg in self.loggers:
            if lg.name == name:
                return lg
        raise KeyError(name)

    def set_epoch(self, epoch: int) -> None:
        """Adopt ``epoch`` on every logger (invariant 2)."""
        if self.epoch is not None:
            raise InvariantViolation(f"journal {self.jid!r}: epoch already established "
                                     f"({self.epoch}), cannot set {epoch}")
        self.epoch = epoch
        for lg in self.loggers:
            lg.set_epoch(epoch)

    def set_committed_txid(self, txid: int) -> None:
        """Push the committed txid into every logger (it rides on their next call)."""
        for lg in self.loggers:
            lg.set_committed_txid(txid)

    def notify_committed(self) -> int:
        """Send the committed txid to every node that has not got it and has nothing queued
        that would carry it (:meth:`AsyncLogger.notify_committed`); returns how many."""
        return sum(1 for lg in self.loggers if lg.notify_committed())

    # -- fan-out -----------------------------------------------------------------------
    def fan_out(self, op_name: str, fn: Callable[[AsyncLogger], Any]) -> QuorumCall:
        """Call ``fn(logger)`` for every logger, in order (invariant 3)."""
        return QuorumCall({lg.name: fn(lg) for lg in self.loggers}, op_name, self.jid)

    def majority_rule(self) -> WaitRule:
        """Wait rule: a majority of successes."""
        return self._majority_rule

    def all_rule(self) -> WaitRule:
        """Wait rule: every node succeeds."""
        return all_rule(len(self.loggers))

    async def wait_for_quorum(self, call: QuorumCall, timeout_ms: int) -> dict[str, Any]:
        """Wait for a majority of successes (see :meth:`QuorumCall.wait`)."""
        return await call.wait(self.majority_rule(), timeout_ms)

    async def wait_for_all(self, call: QuorumCall, timeout_ms: int) -> dict[str, Any]:
        """Wait for every node to succeed."""
        return await call.wait(self.all_rule(), timeout_ms)

    def report(self) -> str:
        """``QJM to [a, b, c]``-style status with each node's progress."""
        return "; ".join(lg.report() for lg in self.loggers)

    async def close(self) -> None:
        """Close every logger."""
        await asyncio.gather(*(lg.close() for lg in self.loggers), return_exceptions=True)
