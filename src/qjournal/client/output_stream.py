"""QuorumOutputStream: the output stream of one segment written to a JournalNode quorum.

Why: the NameNode's group commit writes records into a buffer while an
earlier batch is being made durable. This stream is that double buffer
(``write`` fills the current buffer, ``mark`` moves it to the ready side,
``sync`` sends what is ready) and the commit point of the quorum journal:
``sync`` returns only once a majority of JournalNodes fsynced the batch
(seed 000 §2.11, reference §4.6).

Theory of operation: ``sync`` detaches the ready batches and enqueues them,
synchronously and in txid order, on every logger (one ``journal`` call per
batch; each logger sends its queue in order), then waits for a write quorum.
``send_marked`` is that first half alone, for a caller that wants the batches
on the wire before it yields (the NameNode's ``log_sync``): the batches it sent
wait in the stream until a ``sync`` claims them and waits for their quorum.
Syncs may overlap (group commit); a lagging logger coalesces what queued up.
Then it pushes the new committed txid into every logger (it rides on the next
call); when no call follows within ``qjournal.qjm.committed-txid.notify.delay.ms``
a heartbeat carries it, so the JournalNodes' edit caches can serve the last
batch to tailers (``get_journaled_edits`` never passes the committed txid). A slow or dead node adds no latency: the quorum call returns
at the majority and the node's own queue absorbs (or rejects) the backlog.
Any failure of a sync is final for the stream and for the writer (the QJM
refuses further writes): a writer that lost its quorum may have been fenced.

The stream is handed what it uses of its writer explicitly (the logger set,
the settings and four callbacks), so it never imports the QuorumJournalManager
that creates it.

Invariants:

1. Records are written with consecutive txids starting at the segment txid.
2. ``last_synced_txid`` only grows, and only after a quorum acknowledged every
   txid up to it (FIFO per JournalNode makes a later batch's quorum cover the
   earlier batches).
3. After a failed sync no further record is accepted or sent.
4. No ``journal`` call carries more than ``max_frame_bytes`` minus a margin
   (HDFS-13977): larger ready data is sent as several consecutive batches.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from qjournal.client.logger_set import AsyncLoggerSet
from qjournal.client.quorum_call import QuorumCall
from qjournal.client.settings import QJMSettings
from qjournal.errors import InvariantViolation, JournalError, JournalOutOfSyncError, QJournalError
from qjournal.journalmanager.streams import EditLogOutputStream
from qjournal.protocol.segment import OP_DATA, encode_record
from qjournal.protocol.protocols import QJOURNAL

log = logging.getLogger(__name__)

__all__ = ["QuorumOutputStream"]

#: bytes kept free in every journal frame for the request header and kwargs
_FRAME_MARGIN_BYTES = 64 * 1024


class QuorumOutputStream(EditLogOutputStream):
    """The single output stream of an open segment on a JournalNode quorum.

    Args:
        loggers: the writer's loggers (its epoch is set).
        settings: limits and timeouts (frame size, output buffer, write timeout).
        segment_txid: first txid of the segment.
        layout_version: layout version of the segment.
        check_writer: raises the writer's typed error when it stopped (FencedError, ...)
            or is no longer the writer; called before every record and sync.
        on_synced: told every txid a quorum acknowledged (the writer's committed txid).
        on_failure: told the error of a failed sync (the writer stops, invariant 3).
        on_closed: told when the stream is closed or aborted.
    """

    def __init__(self, loggers: AsyncLoggerSet, settings: QJMSettings, segment_txid: int,
                 layout_version: int, *, check_writer: Callable[[], None],
                 on_synced: Callable[[int], None], on_failure: Callable[[BaseException], None],
                 on_closed: Callable[["QuorumOutputStream"], None]) -> None:
        self._loggers = loggers
        self._settings = settings
        self._jid = loggers.jid
        self._check_writer = check_writer
        self._on_synced = on_synced
        self._on_failure = on_failure
        self._on_closed = on_closed
        self._segment_txid = segment_txid
        self.layout_version = layout_version
        self._next_txid = segment_txid
        self._last_synced = segment_txid - 1
        # current buffer (being written)
        self._cur: list[bytes] = []
        self._cur_bytes = 0
        self._cur_first = segment_txid
        self._cur_n = 0
        # ready batches: (first_txid, num_txns, [parts], size)
        self._ready: list[tuple[int, int, list[bytes], int]] = []
        self._ready_bytes = 0
        self._closed = False
        self._failed: BaseException | None = None
        self._inflight: list[asyncio.Future] = []  # one per sync waiting for its quorum
        #: what each ``send_marked`` put on the wire, for the next ``sync`` to wait on: its batches
        #: (first txid, txns, their quorum call) and its future in _inflight, resolved when waited
        self._sent: list[tuple[list[tuple[int, int, QuorumCall]], asyncio.Future]] = []
        self._max_batch_bytes = max(settings.max_frame_bytes - _FRAME_MARGIN_BYTES, 1)
        self._notice: asyncio.TimerHandle | None = None

    # -- EditLogOutputStream ---------------------------------------------------------
    @property
    def segment_txid(self) -> int:
        return self._segment_txid

    @property
    def last_written_txid(self) -> int:
        return self._next_txid - 1

    @property
    def last_synced_txid(self) -> int:
        return self._last_synced

    @property
    def pending_bytes(self) -> int:
        return self._cur_bytes + self._ready_bytes

    def _check_open(self) -> None:
        self._check_writer()  # a failed writer re-raises its typed error (FencedError, ...)
        if self._failed is not None:
            raise JournalError(
                f"journal {self._jid!r}: segment {self._segment_txid} stream failed earlier "
                f"and takes no more records: {self._failed}", jid=self._jid)
        if self._closed:
            raise JournalError(f"journal {self._jid!r}: segment {self._segment_txid} stream "
                               f"is closed", jid=self._jid)

    def write(self, txid: int, body: bytes, opcode: int = OP_DATA) -> None:
        """Buffer one record (invariant 1).

        Raises:
            JournalOutOfSyncError: ``txid`` is not the next txid.
            RecordTooLargeError: the body is over the record size limit.
            JournalError: the stream or the writer failed earlier.
        """
        self._check_open()
        if txid != self._next_txid:
            raise JournalOutOfSyncError(
                f"journal {self._jid!r}: write of txid {txid} in segment {self._segment_txid}, "
                f"expected txid {self._next_txid}", jid=self._jid, txid=txid)
        rec = encode_record(txid, opcode, body)
        self._cur.append(rec)
        self._cur_bytes += len(rec)
        self._cur_n += 1
        self._next_txid += 1

    def write_raw(self, data: bytes, first_txid: int, num_txns: int) -> None:
        """Buffer already framed records ``first_txid .. first_txid+num_txns-1``.

        The JournalNodes validate every record of a batch (``scan_batch``), so a
        malformed ``data`` fails the sync on every node.

        Raises:
            JournalOutOfSyncError: ``first_txid`` is not the next txid.
        """
        self._check_open()
        if first_txid != self._next_txid:
            raise JournalOutOfSyncError(
                f"journal {self._jid!r}: raw write of txid {first_txid} in segment "
                f"{self._segment_txid}, expected txid {self._next_txid}", jid=self._jid)
        if num_txns <= 0:
            return
        self._cur.append(bytes(data))
        self._cur_bytes += len(data)
        self._cur_n += num_txns
        self._next_txid += num_txns

    def set_version(self, layout_version: int) -> None:
        """Records after this use ``layout_version`` (seed 003 §5.6): on a quorum journal only the version the
        segment started with, which every JournalNode wrote into its segment's header at ``start_log_segment``;
        a new version takes a new segment (``start_log_segment(txid, layout_version)``). A file journal can still
        change an empty segment's header; JournalNodes cannot be asked to rewrite one without risking copies of a
        segment with different headers, so a change is refused here, before anything reaches them.

        Raises:
            JournalError: ``layout_version`` differs from the segment's (naming journal, segment and both
                versions), or the stream is closed or failed.
        """
        self._check_open()
        if layout_version == self.layout_version:
            return
        raise JournalError(
            f"journal {self._jid!r}: segment {self._segment_txid} was started with layout version "
            f"{self.layout_version}, which each JournalNode wrote into the segment's header; a quorum journal does "
            f"not change it in an open segment: finalize the segment and start the next one with "
            f"start_log_segment(txid, layout_version={layout_version})", jid=self._jid, txid=self._segment_txid,
            layout_version=layout_version)

    def mark(self) -> None:
        """Move the current buffer to the ready side (the next ``sync`` sends it)."""
        if self._cur_n == 0:
            return
        self._ready.append((self._cur_first, self._cur_n, self._cur, self._cur_bytes))
        self._ready_bytes += self._cur_bytes
        self._cur = []
        self._cur_bytes = 0
        self._cur_first = self._next_txid
        self._cur_n = 0

    def _take_batches(self) -> list[tuple[int, int, bytes]]:
        """Merge ready batches into journal calls of at most the frame limit (invariant 4)."""
        out: list[tuple[int, int, bytes]] = []
        first = n = size = 0
        parts: list[bytes] = []
        for (f, k, ps, sz) in self._ready:
            if parts and size + sz > self._max_batch_bytes:
                out.append((first, n, b"".join(parts)))
                parts, n, size = [], 0, 0
            if not parts:
                first = f
            parts.extend(ps)
            n += k
            size += sz
        if parts:
            out.append((first, n, b"".join(parts)))
        self._ready = []
        self._ready_bytes = 0
        return out

    async def sync(self) -> None:
        """Send every ready batch and return once a quorum acknowledged all of them.

        Several ``sync`` calls may be in flight at once (the NameNode's group
        commit): each sends its own ready batches, in txid order, and waits for
        its own quorum. Every JournalNode applies batches in the order they were
        queued, so a quorum acknowledging a later batch has also made every
        earlier one durable.

        Raises:
            FencedError: a newer writer took over (the JournalNodes refused our epoch).
            QuorumError / RpcTimeoutError: no quorum acknowledged in time.
            InvariantViolation: a JournalNode reported a broken invariant.
        """
        self._check_open()
        self._send_ready()
        sent, self._sent = self._sent, []
        if not sent:
            # Nothing new, but an overlapping sync may still be waiting for its quorum:
            # "every marked record durable" includes the records it carries.
            pending = [f for f in self._inflight if not f.done()]
            if pending:
                await asyncio.wait(pending)
                self._check_open()  # raises the failure of an earlier sync
            return
        loggers = self._loggers
        try:  # one coroutine per sync: the quorum wait is inlined here
            try:
                for first, n, call in (b for batches, _done in sent for b in batches):
                    await call.wait(loggers.majority_rule(), self._settings.write_txns_timeout_ms)
                    self._check_open()  # an earlier concurrent sync may have failed meanwhile
                    last = first + n - 1
                    if last > self._last_synced:
                        self._last_synced = last
                        loggers.set_committed_txid(last)
                        self._on_synced(last)
                        if self._notice is None:
                            self._notice = asyncio.get_running_loop().call_later(
                                self._settings.committed_notify_delay_ms / 1000.0, self._send_notice)
            except BaseException as e:
                if self._failed is None:
                    self._failed = e
                self._on_failure(e)
                raise
        finally:
            self._release(sent)

    def send_marked(self) -> None:
        """Detach the ready batches and enqueue them on every logger now (the first half of
        :meth:`sync`, module docstring); the next ``sync`` waits for their quorum. Does nothing
        once the stream failed or closed or the writer stopped (``sync`` raises then)."""
        if not self._ready or self._failed is not None or self._closed:
            return
        try:
            self._check_writer()
        except InvariantViolation:
            raise
        except QJournalError:
            return  # no longer the writer: sync raises it
        self._send_ready()

    def _send_ready(self) -> None:
        """:meth:`send_marked` once the stream is known open (``sync`` checked it)."""
        if not self._ready:
            return
        done = asyncio.get_running_loop().create_future()  # resolved by the sync that waits for them
        self._inflight.append(done)
        loggers = self._loggers
        try:  # detach and enqueue synchronously: the enqueue order on every logger is the txid order
            batches = [(first, n, loggers.fan_out(
                QJOURNAL.journal, lambda lg, f=first, k=n, d=data: lg.send_edits(self._segment_txid, f, k, d)))
                for (first, n, data) in self._take_batches()]
        except BaseException:
            self._release([([], done)])
            raise
        self._sent.append((batches, done))

    def _release(self, sent: list[tuple[list, asyncio.Future]]) -> None:
        """Nobody waits for these sends any more (waited for, failed, or the stream aborted)."""
        for _batches, done in sent:
            self._inflight.remove(done)
            done.set_result(None)

    def _send_notice(self) -> None:
        """The committed txid to every node that has nothing queued to carry it (module docstring)."""
        self._notice = None
        if self._failed is None:
            self._loggers.notify_committed()

    async def close(self) -> None:
        """Sync what is marked, then release the stream (the segment stays open)."""
        if self._closed:
            return
        if self._failed is None:
            await self.sync()
        self._closed = True
        self._on_closed(self)

    async def abort(self) -> None:
        """Release the stream without syncing."""
        self._closed = True
        sent, self._sent = self._sent, []
        self._release(sent)
        if self._notice is not None:
            self._notice.cancel()
            self._notice = None
        self._cur, self._cur_bytes, self._cur_n = [], 0, 0
        self._ready, self._ready_bytes = [], 0
        self._on_closed(self)
