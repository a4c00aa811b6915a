"""AsyncLogger: the writer's channel to one JournalNode (HDFS IPCLoggerChannel).

Why: the quorum writer talks to 2N+1 JournalNodes at once, and each of them
must see the writer's requests in the order the writer issued them, with a
strictly increasing IPC serial and the latest committed txid piggy-backed.
One ``AsyncLogger`` per JournalNode owns that order, the connection, and the
per-node bookkeeping (acked txid, lag, out-of-sync), so the
:class:`~qjournal.client.logger_set.AsyncLoggerSet` above it only fans out.

Theory of operation:

* Every write-path or consensus call (format, get_journal_state, new_epoch,
  start/finalize segment, journal, heartbeat, purge, prepare/accept recovery)
  is appended to one FIFO queue and returns an ``asyncio.Future`` at once.
  A single worker task sends the queued calls **one at a time, in queue
  order**; the ``RequestInfo`` (epoch, IPC serial, committed txid) is built
  when the call is *sent*, so serials rise in send order (invariant 1).
* Reads (``get_edit_log_manifest``) bypass the queue: they are not
  epoch-checked and may run in parallel with writes.
* The queue is bounded in bytes of queued ``journal`` batches
  (``dfs.qjournal.queued-edits.limit.mb``): a batch that would overflow it
  fails at once with :class:`LoggerTooFarBehindError`, except that one
  oversized batch is accepted when the queue is empty (invariant 3).
* A lagging node's consecutive queued batches of one segment are coalesced
  into one ``journal`` call (up to ``qjournal.qjm.coalesce.max.bytes``).
* A failed ``journal`` call marks the logger *out of sync* (seed 001 §2.1,
  HDFS-3726): later batches of the segment fail fast with
  :class:`JournalOutOfSyncError` without being sent, except for a
  ``heartbeat`` at most once per ``out_of_sync_heartbeat_interval_ms`` that
  keeps the node's committed txid fresh. ``start_log_segment`` succeeding
  clears the flag: the node rejoins at the next segment at the latest.
* Catch-up inside the segment (issue 12; Hadoop waits for the roll): the
  logger keeps the most recent batches of the open segment it was given, up to
  ``qjournal.qjm.catch-up.buffer.bytes``. When a heartbeat to an out-of-sync
  node succeeds, it asks the node where its open segment ends and resends,
  in one ``journal`` call, exactly the batches from there up to the batch it is
  about to send; if that succeeds the node is back in sync and that batch goes
  out normally. Safe because the node is only given, in order, records this
  writer already sent to the others (all committed or about to be, or the
  writer fails), through the same epoch-checked gate; a fenced writer gets an
  ``EpochError``, a node that lost its open segment (a restart) refuses the
  batch and waits for the next segment.
* Every ``journal`` batch leaves through one send path, :meth:`AsyncLogger._send_batch`
  (the request built and written at once with ``RpcClient.send``), and its answer
  comes back through one completion, :meth:`AsyncLogger._batch_done` (acknowledged;
  or failed: the node is out of sync, invariant 4). A batch that finds the logger
  idle (nothing queued or in flight, in sync, connected) is sent so at once,
  without the worker, which the completion starts if calls queued meanwhile; the
  worker sends the others (coalesced) and the catch-up resend the same way. The
  commit path of one batch at a time (the NameNode's group commit) then costs no
  task and no loop iteration before the send, and none between the answer and the
  quorum call: a batch's future is a :class:`~qjournal.util.futures.ListenedFuture` too.
* Names, deadlines and answer types of the calls are the QJournalProtocol table's
  (:data:`qjournal.protocol.protocols.QJOURNAL`): a call's deadline is the setting of
  its row's ``timeout_key``, its answer is decoded by its row's result type.
* The connection is opened lazily and re-opened after a transport failure.
* The logger is the codec boundary: calls take, and futures return, the
  message types of :mod:`qjournal.protocol.messages`. An answer is decoded
  (``from_wire``) here, so a malformed answer fails only that node's future,
  with :class:`ProtocolError` (it counts as that node failing, invariant 6).

Invariants:

1. Requests reach the transport in queue order, one at a time; the IPC
   serial of each request is greater than every earlier one of this logger.
2. The epoch is set once (``set_epoch``); an epoch-checked call without an
   epoch is a programmer error (:class:`InvariantViolation`).
3. ``queued_bytes`` is the sum of the sizes of the ``journal`` batches queued
   or in flight; it never exceeds the limit except by one batch that arrived
   when it was 0.
4. While ``out_of_sync``, no ``journal`` batch is sent except the catch-up batch
   after a successful heartbeat (which must continue the node's open segment
   exactly); ``finalize`` is refused.
5. ``prepare_recovery`` and ``accept_recovery`` carry no committed txid
   (INVALID_TXID). The RequestInfo is built when a call is sent, so a recovery
   call that waited behind a slow one could otherwise carry a txid this writer
   committed later in a *newer* segment, and the JournalNode would judge the old
   segment against it ("would discard already-committed txn", the simulator's
   KB2). A writer has committed nothing before its recovery ends, so nothing is lost.
6. No wire value leaves this module: a result is either decoded into its message
   type or the call fails with ``ProtocolError`` naming the node and the call.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from qjournal.client.settings import QJMSettings
from qjournal.errors import (InvalidRequestError, InvariantViolation, JournalOutOfSyncError,
                             LoggerTooFarBehindError, ProtocolError, QJournalError, TransportError)
from qjournal.protocol.messages import (JournaledEdits, JournalState, Manifest, NamespaceInfo,
                                        NewEpochResponse, PrepareRecoveryResponse, RequestInfo,
                                        SegmentState)
from qjournal.protocol.journal_uri import segment_url
from qjournal.protocol.protocols import QJOURNAL as QJ
from qjournal.protocol.rpc_contract import NONE, RpcMethod
from qjournal.protocol.segment import INVALID_TXID
from qjournal.util.futures import ListenedFuture, when_done

log = logging.getLogger(__name__)

__all__ = ["AsyncLogger", "Connector"]

#: an async factory of an RPC client (``RpcClient`` or a test proxy): it has
#: ``async call(method, timeout_ms=..., **kw)``, ``async close()``, ``is_closed``.
Connector = Callable[[], Awaitable[Any]]

#: recovery calls: sent without a committed txid (invariant 5)
_RECOVERY_CALLS = frozenset({QJ.prepare_recovery, QJ.accept_recovery})


def _consume_notice_result(fut: asyncio.Future) -> None:
    """A committed-txid notice's outcome is not awaited; retrieve it so a failure is not
    reported as lost (the next write meets the same failure and handles it)."""
    if not fut.cancelled() and fut.exception() is not None:
        log.debug("committed-txid notice failed: %s", fut.exception())


@dataclass(slots=True)
class _Op:
    method: RpcMethod
    kwargs: dict
    future: asyncio.Future
    nbytes: int = 0  # bytes of a journal batch (counted in queued_bytes)
    # journal batches only
    segment_txid: int = 0
    first_txid: int = 0
    num_txns: int = 0
    records: bytes = b""


class AsyncLogger:
    """The channel to one JournalNode.

    Args:
        name: the node's address as written in the URI (``host:port``); used in
            every message and as its key in quorum results.
        jid: journal id.
        connector: opens a new RPC connection to the node.
        settings: limits and timeouts.
        clock: returns the current time in seconds (default: the running loop's clock).
    """

    def __init__(self, name: str, jid: str, connector: Connector, settings: QJMSettings,
                 clock: Callable[[], float] | None = None) -> None:
        self.name = name
        self.jid = jid
        self._connector = connector
        self.settings = settings
        self._clock = clock
        self._client: Any = None
        self._connecting: asyncio.Future | None = None
        self.epoch: int | None = None
        self.ipc_serial = 0
        self.committed_txid = INVALID_TXID
        self._sent_committed_txid = INVALID_TXID  # the committed txid of the last request built
        self.committed_notices = 0
        self.highest_acked_txid = INVALID_TXID
        self.queued_bytes = 0
        self.out_of_sync = False
        self._last_heartbeat_s: float | None = None
        # catch-up buffer: (first txid, num txns, records) of the open segment, oldest first
        self._recent: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self._recent_segment: int | None = None
        self._recent_bytes = 0
        self.catch_ups = 0
        self.http_url: str | None = None
        self.last_ack_s: float | None = None
        self.rpcs_sent = 0
        self._queue: collections.deque[_Op] = collections.deque()
        self._worker: asyncio.Task | None = None
        self._direct: asyncio.Future | None = None  # the RPC of a batch sent without the worker
        self._closed = False
        #: each call's deadline: the setting of its protocol row's timeout key
        self._timeout_ms = {m.name: settings.timeout_ms(m.timeout_key) for m in QJ}

    def __repr__(self) -> str:
        return f"AsyncLogger({self.name}, jid={self.jid!r}, epoch={self.epoch})"

    # -- state -----------------------------------------------------------------------
    def _now(self) -> float:
        if self._clock is not None:
            return self._clock()
        return asyncio.get_running_loop().time()

    def set_epoch(self, epoch: int) -> None:
        """Set the writer's epoch (once; invariant 2).

        Raises:
            InvariantViolation: an epoch is already set.
        """
        if self.epoch is not None:
            raise InvariantViolation(f"{self.name}: epoch already established ({self.epoch})")
        self.epoch = epoch

    def set_committed_txid(self, txid: int) -> None:
        """Record the highest txid known on a quorum; piggy-backed on the next call.

        Raises:
            InvariantViolation: the committed txid would go backwards.
        """
        if txid < self.committed_txid:
            raise InvariantViolation(
                f"{self.name}: committed txid going backwards from {self.committed_txid} to {txid}")
        self.committed_txid = txid

    @property
    def lag_txns(self) -> int:
        """How far this node's acked txid trails the committed txid."""
        if self.committed_txid == INVALID_TXID:
            return 0
        acked = self.highest_acked_txid if self.highest_acked_txid != INVALID_TXID else 0
        return max(self.committed_txid - acked, 0)

    @property
    def queue_size_limit_bytes(self) -> int:
        """``dfs.qjournal.queued-edits.limit.mb`` in bytes."""
        return self.settings.queue_size_limit_bytes

    def report(self) -> str:
        """One line for status pages: acked txid, lag, queue, sync state."""
        state = "out of sync" if self.out_of_sync else "in sync"
        return (f"{self.name} (written txid {self.highest_acked_txid}, {self.lag_txns} txns behind, "
                f"{self.queued_bytes} bytes queued, {state})")

    def _make_req(self, with_committed: bool = True) -> dict:
        if self.epoch is None:
            raise InvariantViolation(f"{self.name}: epoch-checked call before an epoch was set")
        self.ipc_serial += 1
        committed = self.committed_txid if with_committed else INVALID_TXID
        if with_committed:
            self._sent_committed_txid = committed
        return RequestInfo(self.jid, self.epoch, self.ipc_serial, committed).to_wire()

    # -- connection ------------------------------------------------------------------
    async def _get_client(self) -> Any:
        c = self._client
        if c is not None and not getattr(c, "is_closed", False):
            return c
        if self._closed:
            raise TransportError(f"journal {self.jid!r}: logger for {self.name} is closed",
                                 node=self.name)
        if self._connecting is not None:  # a read and the worker may both need a connection
            return await asyncio.shield(self._connecting)
        self._client = None
        fut = asyncio.get_running_loop().create_future()
        self._connecting = fut
        try:
            # The connector applies ipc.client.connect.timeout itself (RpcClient does).
            c = await self._connector()
        except QJournalError as e:
            fut.set_exception(e)
            raise
        except OSError as e:
            err = TransportError(f"journal {self.jid!r}: cannot connect to {self.name}: {e}",
                                 node=self.name)
            fut.set_exception(err)
            raise err from e
        except BaseException as e:
            fut.set_exception(TransportError(f"journal {self.jid!r}: connecting to {self.name} "
                                             f"was interrupted: {e!r}", node=self.name))
            raise
        finally:
            self._connecting = None
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                pass  # retrieved here so an unawaited failure is not reported as lost
        fut.set_result(c)
        self._client = c
        return c

    async def _drop_client(self) -> None:
        c, self._client = self._client, None
        if c is not None:
            try:
                await c.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail any way
                pass

    def _forget_client(self) -> None:
        """:meth:`_drop_client` from a callback: the close runs in the background."""
        c, self._client = self._client, None
        if c is not None:
            asyncio.ensure_future(c.close()).add_done_callback(_consume_notice_result)

    async def _rpc(self, method: RpcMethod, **kw: Any) -> Any:
        """One call of anything but a ``journal`` batch (those leave through :meth:`_send_batch`)."""
        client = await self._get_client()
        self.rpcs_sent += 1
        try:
            return await client.call(method, timeout_ms=self._timeout_ms[method.name], **kw)
        except TransportError:
            await self._drop_client()
            raise

    # -- the FIFO queue ----------------------------------------------------------------
    def _enqueue(self, op: _Op) -> asyncio.Future:
        if self._closed:
            self._release(op)
            op.future.set_exception(TransportError(
                f"journal {self.jid!r}: logger for {self.name} is closed", node=self.name))
            return op.future
        if (op.method is QJ.journal and self._worker is None and self._direct is None and not self._queue
                and not self.out_of_sync):
            c = self._client
            if c is not None and not getattr(c, "is_closed", False) and hasattr(c, "send"):
                # idle: sent at once, without the worker (module docstring)
                done = self._send_batch(c, [op], op.segment_txid, op.first_txid, op.num_txns, op.records)
                if not done.done():  # (done already: it could not be sent, and _batch_done said so)
                    self._direct = done
                return op.future
        self._queue.append(op)
        self._start_worker()
        return op.future

    def _start_worker(self) -> None:
        if self._worker is None and self._direct is None and self._queue:
            self._worker = asyncio.get_running_loop().create_task(
                self._run(), name=f"qjm-logger-{self.name}")

    # -- the one send path of journal batches ----------------------------------------------
    def _send_batch(self, client: Any, ops: list[_Op], segment_txid: int, first_txid: int, num_txns: int,
                    records: bytes, error: BaseException | None = None) -> ListenedFuture:
        """Send one ``journal`` call carrying ``records`` (the batches ``ops``, or a catch-up resend with
        none) now; its answer comes to :meth:`_batch_done` (module docstring: one send path).

        Args:
            error: the batch cannot be sent (no connection): it fails with this, through the same
                completion.

        Returns:
            A future of the failure (None: acknowledged), done when :meth:`_batch_done` has run.
        """
        loop = asyncio.get_running_loop()
        rpc: asyncio.Future = ListenedFuture(loop=loop)
        if error is not None:
            rpc.set_exception(error)
        else:
            try:
                kw = dict(timeout_ms=self._timeout_ms[QJ.journal.name], req=self._make_req(),
                          segment_txid=segment_txid, first_txid=first_txid, num_txns=num_txns, records=records)
                send = getattr(client, "send", None)
                # RpcClient.send answers in a listener; a connection without it (a test's proxy) in a task
                rpc = send(QJ.journal, **kw) if send is not None else loop.create_task(client.call(QJ.journal, **kw))
                self.rpcs_sent += 1
            except BaseException as e:  # cannot be sent: the batch fails through the same completion
                rpc.set_exception(e)
        done = ListenedFuture(loop=loop)
        when_done(rpc, functools.partial(self._batch_done, ops, first_txid, first_txid + num_txns - 1, done))
        return done

    def _batch_done(self, ops: list[_Op], first: int, last: int, done: ListenedFuture, rpc: asyncio.Future) -> None:
        """The answer to a batch (the one completion of :meth:`_send_batch`): acknowledged, or failed
        (the node is out of sync until the next segment or a catch-up, invariant 4)."""
        err: BaseException | None = (TransportError(f"journal {self.jid!r}: call to {self.name} cancelled",
                                                    node=self.name) if rpc.cancelled() else rpc.exception())
        if err is None:
            self._acked(ops, last)
        else:
            if isinstance(err, TransportError):
                self._forget_client()
            if not isinstance(err, InvariantViolation):
                self._write_failed(first, last, err)
            for o in ops:
                self._release(o)
                if not o.future.done():
                    o.future.set_exception(err)
        if self._direct is done:  # a batch sent without the worker: calls queued meanwhile go now
            self._direct = None
            if not self._closed:
                self._start_worker()
        if not done.done():  # (the worker awaiting it was cancelled: the logger closes)
            done.set_result(err)

    def _submit(self, method: RpcMethod, **kwargs: Any) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        return self._enqueue(_Op(method, kwargs, fut))

    def _decode(self, method: RpcMethod, result: Any) -> Any:
        """The answer as its protocol row's result type (invariant 6).

        Raises:
            ProtocolError: the node answered ``method`` with a malformed value.
        """
        decode = method.result.decode
        if method.result is NONE or decode is None:  # the call answers nothing: its answer is not read
            return None
        try:
            return decode(result, method.name, "result")
        except InvalidRequestError as e:
            raise ProtocolError(f"journal {self.jid!r}: {self.name} answered {method} with a "
                                f"malformed result: {e}", node=self.name, jid=self.jid,
                                method=method) from e

    async def _run(self) -> None:
        try:
            while self._queue:
                op = self._queue.popleft()
                if op.method is QJ.journal:
                    await self._run_journal(op)
                else:
                    await self._run_one(op)
        finally:
            self._worker = None

    async def _run_one(self, op: _Op) -> None:
        if op.future.done():  # cancelled by the caller
            return
        if op.method is QJ.finalize_log_segment and self.out_of_sync:  # invariant 4
            op.future.set_exception(JournalOutOfSyncError(
                f"journal {self.jid!r}: {self.name} is out of sync; not finalizing segment "
                f"{op.kwargs['start_txid']}-{op.kwargs['end_txid']} there", node=self.name))
            return
        try:
            kw = dict(op.kwargs)
            if op.method.epoch_checked:
                # Invariant 5: recovery calls never carry a committed txid.
                kw["req"] = self._make_req(with_committed=op.method not in _RECOVERY_CALLS)
            result = await self._rpc(op.method, **kw)
            if op.method is QJ.start_log_segment:
                self._rejoin(op.kwargs["txid"])
        except asyncio.CancelledError:
            if not op.future.done():
                op.future.cancel()
            raise
        except BaseException as e:  # noqa: BLE001 - handed to the caller's future
            if not op.future.done():
                op.future.set_exception(e)
            return
        if op.future.done():
            return
        try:
            value = self._decode(op.method, result)
        except ProtocolError as e:
            op.future.set_exception(e)
            return
        op.future.set_result(value)

    def _coalesce(self, op: _Op) -> list[_Op]:
        """Take following queued batches of the same segment that continue ``op``."""
        ops = [op]
        total = op.nbytes
        next_txid = op.first_txid + op.num_txns
        while self._queue:
            nxt = self._queue[0]
            if (nxt.method is not QJ.journal or nxt.segment_txid != op.segment_txid
                    or nxt.first_txid != next_txid or nxt.future.done()
                    or total + nxt.nbytes > self.settings.coalesce_max_bytes):
                break
            self._queue.popleft()
            ops.append(nxt)
            total += nxt.nbytes
            next_txid += nxt.num_txns
        return ops

    async def _run_journal(self, op: _Op) -> None:
        ops = self._coalesce(op) if not self.out_of_sync else [op]
        first, seg = ops[0].first_txid, ops[0].segment_txid
        n = sum(o.num_txns for o in ops)
        last = first + n - 1
        try:
            if self.out_of_sync and not (await self._maybe_heartbeat() and await self._catch_up(seg, first)):
                raise JournalOutOfSyncError(
                    f"journal {self.jid!r} on {self.name}: disabled until the next segment roll "
                    f"(not sending txids {first}-{last} of segment {seg})",
                    node=self.name, jid=self.jid, first_txid=first, last_txid=last)
        except asyncio.CancelledError:
            self._cancel(ops)
            raise
        except BaseException as e:  # noqa: BLE001 - not sent: handed to the callers' futures
            for o in ops:
                self._release(o)
                if not o.future.done():
                    o.future.set_exception(e)
            return
        client, error = None, None
        try:
            client = await self._get_client()
        except asyncio.CancelledError:
            self._cancel(ops)
            raise
        except Exception as e:  # noqa: BLE001 - no connection: the batch fails (the one completion)
            error = e
        records = ops[0].records if len(ops) == 1 else b"".join(o.records for o in ops)
        try:
            await self._send_batch(client, ops, seg, first, n, records, error)  # its failure is _batch_done's
        except asyncio.CancelledError:  # the logger closes: the callers see their batches cancelled
            self._cancel(ops)
            raise

    def _cancel(self, ops: list[_Op]) -> None:
        for o in ops:
            self._release(o)
            if not o.future.done():
                o.future.cancel()

    def _write_failed(self, first: int, last: int, e: BaseException) -> None:
        """A batch was not written: the node is out of sync until the next segment (or a catch-up)."""
        log.warning("journal %r: %s failed to write txids %d-%d (%s); will try this "
                    "node again after the next segment roll", self.jid, self.name, first, last, e)
        self.out_of_sync = True
        self._last_heartbeat_s = self._now()

    def _acked(self, ops: list[_Op], last: int) -> None:
        self.highest_acked_txid = last
        self.last_ack_s = self._now()
        for o in ops:
            self._release(o)
            if not o.future.done():
                o.future.set_result(None)

    def _release(self, op: _Op) -> None:
        if op.nbytes:
            self.queued_bytes -= op.nbytes
            op.nbytes = 0
            if self.queued_bytes < 0:  # pragma: no cover - invariant 3
                raise InvariantViolation(f"{self.name}: queued bytes went negative")

    async def _maybe_heartbeat(self) -> bool:
        """A heartbeat to the out-of-sync node, at most once per interval; True when one was sent and
        the node accepted it (it is reachable and still takes this writer's epoch)."""
        now = self._now()
        interval = self.settings.out_of_sync_heartbeat_interval_ms / 1000.0
        if self._last_heartbeat_s is not None and now - self._last_heartbeat_s < interval:
            return False
        self._last_heartbeat_s = now
        try:
            await self._rpc(QJ.heartbeat, req=self._make_req())
        except InvariantViolation:
            raise
        except Exception as e:  # noqa: BLE001 - a heartbeat is best effort
            log.debug("journal %r: heartbeat to out-of-sync %s failed: %s", self.jid, self.name, e)
            return False
        return True

    def _remember(self, segment_txid: int, first_txid: int, num_txns: int, records: bytes) -> None:
        """Keep a batch for catching up (the newest ``catch_up_buffer_bytes`` of the open segment)."""
        limit = self.settings.catch_up_buffer_bytes
        if limit <= 0:
            return
        if self._recent_segment != segment_txid:
            self._recent.clear()
            self._recent_bytes = 0
            self._recent_segment = segment_txid
        self._recent.append((first_txid, num_txns, records))
        self._recent_bytes += len(records)
        while self._recent_bytes > limit and len(self._recent) > 1:
            self._recent_bytes -= len(self._recent.popleft()[2])

    async def _catch_up(self, segment_txid: int, next_first: int) -> bool:
        """Bring the out-of-sync node up to ``next_first`` inside ``segment_txid`` (invariant 4).

        Returns:
            True when the node now ends exactly at ``next_first - 1`` and is in sync again; False
            (nothing changed, or a refused resend) when it must wait for the next segment.
        """
        if self._recent_segment != segment_txid or not self._recent:
            return False
        try:
            m = await self.get_edit_log_manifest(segment_txid, True)
        except InvariantViolation:
            raise
        except Exception as e:  # noqa: BLE001 - no catch-up this time
            log.debug("journal %r: %s: no catch-up (manifest: %s)", self.jid, self.name, e)
            return False
        open_seg = [sg for sg in m.segments if sg.start_txid == segment_txid and sg.in_progress]
        node_next = open_seg[0].end_txid + 1 if open_seg else segment_txid
        if node_next > next_first:
            return False
        parts: list[bytes] = []
        t = node_next
        for first, n, records in self._recent:
            if first >= next_first or t >= next_first:
                break
            if first + n - 1 < t:
                continue
            if first != t:
                log.debug("journal %r: %s: no catch-up: its segment %d ends at txid %d, the buffer holds "
                          "txids from %d", self.jid, self.name, segment_txid, node_next - 1, first)
                return False
            parts.append(records)
            t = first + n
        if t != next_first:
            return False
        if parts:
            try:
                client = await self._get_client()
            except QJournalError as e:
                log.info("journal %r: %s: no catch-up (%s)", self.jid, self.name, e)
                return False
            # the one send path: a refused resend leaves the node out of sync until the next segment
            err = await self._send_batch(client, [], segment_txid, node_next, next_first - node_next,
                                         b"".join(parts))
            if isinstance(err, InvariantViolation):
                raise err
            if err is not None:
                log.info("journal %r: catching %s up with txids %d-%d failed: %s", self.jid, self.name,
                         node_next, next_first - 1, err)
                return False
        self.out_of_sync = False
        self._last_heartbeat_s = None
        self.highest_acked_txid = next_first - 1
        self.catch_ups += 1
        log.info("journal %r: %s caught up inside segment %d with txids %d-%d; back in sync", self.jid,
                 self.name, segment_txid, node_next, next_first - 1)
        return True

    # -- the QJournalProtocol calls ------------------------------------------------------
    def is_formatted(self) -> asyncio.Future:
        """Queue ``is_formatted``; the future's result is the node's bool."""
        return self._submit(QJ.is_formatted, jid=self.jid)

    def format(self, ns_info: NamespaceInfo, force: bool) -> asyncio.Future:
        """Queue ``format`` (fails with JournalAlreadyFormattedError on a journal with data
        unless ``force``)."""
        return self._submit(QJ.format, jid=self.jid, ns_info=ns_info.to_wire(), force=force)

    def get_journal_state(self) -> asyncio.Future:
        """Future of the node's :class:`JournalState`; remembers the node's HTTP URL."""
        fut = self._submit(QJ.get_journal_state, jid=self.jid)
        fut.add_done_callback(self._learn_http_url)
        return fut

    def _learn_http_url(self, fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        st: JournalState = fut.result()
        url = st.http_url
        if not url and st.http_port:
            url = f"http://{self.name.rsplit(':', 1)[0]}:{st.http_port}"
        if url:
            self.http_url = self._fix_wildcard_host(url)

    def _fix_wildcard_host(self, url: str) -> str:
        parts = urlsplit(url)
        if parts.hostname in ("0.0.0.0", "::", ""):
            host = self.name.rsplit(":", 1)[0]
            return f"{parts.scheme}://{host}:{parts.port}"
        return url.rstrip("/")

    def new_epoch(self, ns_info: NamespaceInfo, epoch: int) -> asyncio.Future:
        """Queue ``new_epoch``; the future's result is a :class:`NewEpochResponse`; EpochError
        if ``epoch`` is not above the node's promise."""
        return self._submit(QJ.new_epoch, jid=self.jid, ns_info=ns_info.to_wire(), epoch=epoch)

    def start_log_segment(self, txid: int, layout_version: int) -> asyncio.Future:
        """Start a segment; on success the logger is back in sync (it rejoins here)."""
        return self._submit(QJ.start_log_segment, txid=txid, layout_version=layout_version)

    def _rejoin(self, txid: int) -> None:
        """The node started segment ``txid``: it is back in sync. Called by the worker itself, before
        it takes the next queued call (a done-callback would run only after the worker had refused
        the segment's first batch as still out of sync)."""
        if self.out_of_sync:
            log.info("journal %r: restarting writes to %s in the segment starting at txid %d",
                     self.jid, self.name, txid)
        self.out_of_sync = False
        self._last_heartbeat_s = None

    def send_edits(self, segment_txid: int, first_txid: int, num_txns: int,
                   records: bytes) -> asyncio.Future:
        """Queue one batch for this node (invariant 3 bounds the queue).

        Returns:
            A future that completes when the node acknowledged (fsynced) the batch
            (a :class:`ListenedFuture`: the quorum call hears of it in the same call).
            It fails at once with LoggerTooFarBehindError when the queue is full.
        """
        fut = ListenedFuture(loop=asyncio.get_running_loop())
        size = len(records)
        limit = self.queue_size_limit_bytes
        self._remember(segment_txid, first_txid, num_txns, records)  # also a batch refused here
        if self.queued_bytes > 0 and self.queued_bytes + size > limit:
            fut.set_exception(LoggerTooFarBehindError(
                f"journal {self.jid!r}: {self.name} is too far behind: {self.queued_bytes} bytes "
                f"queued, a batch of {size} bytes (txids {first_txid}-{first_txid + num_txns - 1}) "
                f"would pass the limit of {limit} bytes (dfs.qjournal.queued-edits.limit.mb)",
                node=self.name, queued_bytes=self.queued_bytes, limit_bytes=limit))
            return fut
        self.queued_bytes += size
        op = _Op(QJ.journal, {}, fut, nbytes=size,
                 segment_txid=segment_txid, first_txid=first_txid, num_txns=num_txns,
                 records=records)
        return self._enqueue(op)

    def heartbeat(self) -> asyncio.Future:
        """Queue a ``heartbeat`` (carries the committed txid; fences like any epoch-checked call)."""
        return self._submit(QJ.heartbeat)

    def notify_committed(self) -> bool:
        """Queue a ``heartbeat`` carrying the committed txid, unless the node already has it or a
        queued call will carry it (so a tailer reading the node's edit cache sees the last batch
        committed without waiting for the next write). Fire and forget: a failure is left to
        the next write to find.

        Returns:
            Whether a heartbeat was queued.
        """
        if (self.epoch is None or self._closed or self._queue
                or self.committed_txid == INVALID_TXID or self.committed_txid <= self._sent_committed_txid):
            return False
        fut = self.heartbeat()
        fut.add_done_callback(_consume_notice_result)
        self.committed_notices += 1
        return True

    def finalize_log_segment(self, start_txid: int, end_txid: int) -> asyncio.Future:
        """Finalize; refused while out of sync (invariant 4), judged when the worker reaches the call:
        a ``start_log_segment`` queued before it may bring the node back in sync first."""
        return self._submit(QJ.finalize_log_segment, start_txid=start_txid, end_txid=end_txid)

    def purge_logs(self, min_txid_to_keep: int) -> asyncio.Future:
        """Queue ``purge_logs``: the node deletes segments ending before ``min_txid_to_keep``."""
        return self._submit(QJ.purge_logs, min_txid_to_keep=min_txid_to_keep)

    def prepare_recovery(self, segment_txid: int) -> asyncio.Future:
        """Queue ``prepare_recovery`` (Paxos phase 1a); the future's result is a
        :class:`PrepareRecoveryResponse`."""
        return self._submit(QJ.prepare_recovery, segment_txid=segment_txid)

    def accept_recovery(self, state: SegmentState, from_url: str) -> asyncio.Future:
        """Queue ``accept_recovery`` (Paxos phase 2a): the node syncs its copy from ``from_url``
        if it differs, then persists the accepted value."""
        return self._submit(QJ.accept_recovery, segment_state=state.to_wire(), from_url=from_url)

    async def get_edit_log_manifest(self, since_txid: int, in_progress_ok: bool) -> Manifest:
        """The node's :class:`Manifest` (a read call, outside the FIFO queue).

        Raises:
            ProtocolError: a malformed answer; TransportError, RpcTimeoutError, the node's error.
        """
        res = await self._rpc(QJ.get_edit_log_manifest, jid=self.jid, since_txid=since_txid,
                              in_progress_ok=in_progress_ok)
        return self._decode(QJ.get_edit_log_manifest, res)

    async def get_journaled_edits(self, since_txid: int, max_txns: int) -> JournaledEdits:
        """Committed edits from the node's edit cache (a read call, outside the FIFO queue).

        Raises:
            CacheMissError: the node cannot serve ``since_txid`` from its cache.
            ProtocolError: a malformed answer; TransportError, RpcTimeoutError, the node's error.
        """
        res = await self._rpc(QJ.get_journaled_edits, jid=self.jid, since_txid=since_txid, max_txns=max_txns)
        got = self._decode(QJ.get_journaled_edits, res)
        if got.first_txid != since_txid:
            raise ProtocolError(f"journal {self.jid!r}: {self.name} answered get_journaled_edits from "
                                f"txid {since_txid} with edits from txid {got.first_txid}",
                                node=self.name, jid=self.jid, method="get_journaled_edits")
        return got

    def segment_url(self, segment_txid: int, storage_info: str, in_progress_ok: bool = True) -> str:
        """The ``/getJournal`` URL of one segment on this node.

        Raises:
            TransportError: the node's HTTP address is not known yet.
        """
        if not self.http_url:
            raise TransportError(f"journal {self.jid!r}: HTTP address of {self.name} unknown "
                                 f"(no get_journal_state answer yet)", node=self.name)
        return segment_url(self.http_url, self.jid, segment_txid, storage_info, in_progress_ok)

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every queued call was sent and answered, at most ``timeout_s``.

        Returns:
            True when the queue is empty.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:  # a direct batch may start the worker when it is answered, and the worker end
            busy = {f for f in (self._direct, self._worker) if f is not None and not f.done()}
            left = end - loop.time()
            if not busy or left <= 0:
                break
            await asyncio.wait(busy, timeout=left)
        return not self._queue and self._direct is None and (self._worker is None or self._worker.done())

    async def close(self) -> None:
        """Fail every queued call, stop the worker, close the connection."""
        self._closed = True
        while self._queue:
            op = self._queue.popleft()
            self._release(op)
            if not op.future.done():
                op.future.set_exception(TransportError(
                    f"journal {self.jid!r}: logger for {self.name} closed", node=self.name))
        w = self._worker
        if w is not None and not w.done():
            w.cancel()
            await asyncio.wait({w}, timeout=1.0)
        await self._drop_client()
