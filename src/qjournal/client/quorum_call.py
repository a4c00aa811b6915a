"""QuorumCall: wait for the answers of one call fanned out to every JournalNode.

Why: every step of the writer (new epoch, start segment, journal a batch,
recovery, finalize, manifest) sends the same request to 2N+1 nodes and must
return as soon as the outcome is known, never later: a slow or dead node must
add no latency once a majority answered (seed 000 §1.3.3 goal 2). This shell
owns the asyncio side (futures, a deadline on the loop's clock); the decision
itself is the pure :func:`qjournal.protocol.quorum.quorum_outcome`.

Theory of operation: a ``QuorumCall`` is built from ``{node name: awaitable}``.
Each awaitable is wrapped in a task (a future stays itself) whose completion is
recorded by a done-callback (by a listener, in the same call, for a
:class:`~qjournal.util.futures.ListenedFuture`: a logger's ``journal`` batch);
:meth:`QuorumCall.wait` sleeps on one future that the callback completes once
the outcome is decided (WON, LOST, or a broken
invariant), or a timer at the deadline (or the next progress log line). One
wake-up per wait, however many nodes answer: the commit path of every
``journal`` batch goes through here.
Stragglers are *not* cancelled: they are write-path calls whose completion
updates their logger's state (acked txid, out-of-sync flag); they finish or
time out on their own per-call deadline.

Invariants:

1. ``wait`` returns only with ``Outcome.WON``: a dict of the successes seen
   (node -> result). Every other exit raises.
2. An :class:`InvariantViolation` answered by any node is re-raised as soon as
   it is seen, even when a quorum of other nodes succeeded (STYLE.md
   principle 5); it is never folded into a ``QuorumError``.
3. ``QuorumError`` and ``RpcTimeoutError`` name the operation, the journal and
   every node's error (or "no answer"), in sorted node order.
4. Time is the event loop's clock (``loop.time()``), so the simulator's
   virtual clock drives deadlines. A wait that lasts past 30% of its timeout
   logs its progress every second (INFO, WARNING past 70%), naming who answered.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Mapping

from qjournal.errors import (EpochError, FencedError, InvariantViolation, QJournalError,
                             QuorumError, RpcTimeoutError)
from qjournal.protocol.quorum import Outcome, WaitRule, quorum_outcome
from qjournal.util.futures import when_done

log = logging.getLogger(__name__)

__all__ = ["QuorumCall"]


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _describe(err: BaseException) -> str:
    name = type(err).__name__
    msg = str(err) or repr(err)
    return f"{name}: {msg}"


class QuorumCall:
    """One call fanned out to several nodes, waited on as a whole.

    Args:
        calls: node name -> awaitable (coroutine or future) of that node's answer.
        op_name: the operation, for messages ("journal", "new_epoch", ...).
        jid: the journal id, for messages.
    """

    def __init__(self, calls: Mapping[str, Awaitable[Any]], op_name: str, jid: str) -> None:
        self.op_name = op_name
        self.jid = jid
        self.names = sorted(calls)
        self._tasks: dict[str, asyncio.Future] = {
            name: c if isinstance(c, asyncio.Future) else asyncio.ensure_future(c)
            for name, c in sorted(calls.items())}
        self._name_of: dict[asyncio.Future, str] = {}
        self.successes: dict[str, Any] = {}
        self.errors: dict[str, BaseException] = {}
        self._rule: WaitRule | None = None  # the rule of the wait in progress
        self._decided: asyncio.Future | None = None  # completed when that rule is decided
        for name, t in self._tasks.items():
            if t.done():
                self._record(name, t)
            else:
                self._name_of[t] = name
                when_done(t, self._on_done)  # a logger's batch: heard in the call that completes it

    # -- bookkeeping -------------------------------------------------------------
    def _record(self, name: str, task: asyncio.Future) -> None:
        """Note one node's answer (retrieving its exception, so a straggler's is never "lost")."""
        if name in self.successes or name in self.errors:
            return
        if task.cancelled():
            self.errors[name] = asyncio.CancelledError(f"call to {name} cancelled")
            return
        exc = task.exception()
        if exc is None:
            self.successes[name] = task.result()
        else:
            self.errors[name] = exc

    def _on_done(self, task: asyncio.Future) -> None:
        self._record(self._name_of[task], task)
        decided, rule = self._decided, self._rule
        if decided is None or decided.done() or rule is None:
            return
        err = self.errors.get(self._name_of[task])
        if isinstance(err, InvariantViolation) or self.outcome(rule) is not Outcome.PENDING:
            decided.set_result(None)

    def _check_invariants(self) -> None:
        for name in self.names:
            err = self.errors.get(name)
            if isinstance(err, InvariantViolation):
                raise InvariantViolation(
                    f"{self.op_name!r} on journal {self.jid!r}: node {name} reported a broken "
                    f"invariant: {err}") from err

    @property
    def responses(self) -> int:
        return len(self.successes) + len(self.errors)

    def error_report(self) -> str:
        """``node: error`` for every node, sorted; nodes still pending say so."""
        parts = []
        for name in self.names:
            if name in self.errors:
                parts.append(f"{name}: {_describe(self.errors[name])}")
            elif name in self.successes:
                parts.append(f"{name}: ok")
            else:
                parts.append(f"{name}: no answer")
        return "; ".join(parts)

    def outcome(self, rule: WaitRule) -> Outcome:
        """The pure decision over what has been recorded so far."""
        return quorum_outcome(len(self.successes), len(self.errors), rule)

    # -- waiting -------------------------------------------------------------------
    async def wait(self, rule: WaitRule, timeout_ms: int) -> dict[str, Any]:
        """Wait until ``rule`` is decided or ``timeout_ms`` passed.

        Args:
            rule: what to wait for (``majority_rule(n)``, ``all_rule(n)``).
            timeout_ms: overall deadline for this call.

        Returns:
            node -> result for every success seen so far (invariant 1).

        Raises:
            InvariantViolation: a node reported one (invariant 2).
            FencedError: the quorum was lost and some node refused our epoch.
            QuorumError: too many nodes failed; lists every node's error.
            RpcTimeoutError: no decision before the deadline; lists who answered.
        """
        if rule.n != len(self.names):
            raise InvariantViolation(
                f"{self.op_name}: wait rule for {rule.n} nodes used on {len(self.names)} calls")
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeout_ms / 1000.0
        next_log = start + 0.3 * timeout_ms / 1000.0  # progress logging from 30% of the timeout
        while True:
            self._check_invariants()
            out = self.outcome(rule)
            if out is Outcome.WON:
                return dict(self.successes)
            if out is Outcome.LOST:
                raise self._lost_error(rule)
            now = loop.time()
            if deadline - now <= 0:
                raise RpcTimeoutError(
                    f"{self.op_name!r} on journal {self.jid!r}: timed out after {timeout_ms} ms "
                    f"waiting for a {rule.name} of {rule.n} nodes ({rule.min_successes} needed, "
                    f"{len(self.successes)} succeeded): {self.error_report()}",
                    op=self.op_name, jid=self.jid, timeout_ms=timeout_ms,
                    errors={n: _describe(e) for n, e in sorted(self.errors.items())})
            if now >= next_log:
                waited_ms = int((now - start) * 1000)
                level = logging.WARNING if waited_ms > 0.7 * timeout_ms else logging.INFO
                log.log(level, "waited %d ms (timeout=%d ms) for a %s of %s on journal %r: %s",
                        waited_ms, timeout_ms, rule.name, self.op_name, self.jid, self.error_report())
                next_log = now + 1.0
            decided = self._decided = loop.create_future()
            self._rule = rule
            timer = loop.call_at(min(deadline, max(next_log, now + 0.001)), _wake, decided)
            try:
                await decided
            finally:
                timer.cancel()
                self._decided = self._rule = None

    def _lost_error(self, rule: WaitRule) -> QJournalError:
        errors = {n: _describe(e) for n, e in sorted(self.errors.items())}
        msg = (f"{self.op_name!r} on journal {self.jid!r}: got too many errors to achieve a "
               f"{rule.name} of {rule.min_successes}/{rule.n} nodes: {self.error_report()}")
        epoch_errs = [e for _, e in sorted(self.errors.items()) if isinstance(e, EpochError)]
        if epoch_errs:
            return FencedError(f"fenced by a newer writer: {msg}", op=self.op_name, jid=self.jid,
                               errors=errors)
        return QuorumError(msg, op=self.op_name, jid=self.jid, errors=errors)

