"""FSEditLog: apply a mutation and log its ops atomically; group-commit the syncs.

Why: every acknowledged namespace change must be durable on the journals
first (PRODUCT correctness requirement 1), and syncing each client's edit
separately would cap the NameNode at one journal round trip per op. HDFS's
answer, kept here: apply-and-append under one lock (cheap, in memory), then
``log_sync`` outside the lock, where one *syncer* flushes everything buffered
so far in a single journal sync and every client whose txid that sync covered
returns together (group commit).

Theory of operation:

* ``log_edit(mutation)``: under :attr:`lock` (an ``asyncio.Lock``), run the
  mutation against the namespace (it returns its ops and has already applied
  them), give each op the next txid and ``write`` it to the open segment's
  output stream. Returns the last txid (or the current one when the mutation
  logged nothing). That step never awaits, so when the lock is free it runs
  without taking it: no holder (a roll, a close, the tailer) can start or
  resume in the middle of it, which is all the lock guarantees.
* ``log_sync(txid)``: while ``synced_txid < txid``: if no sync is running,
  start one (``mark`` then ``sync`` on the stream: it flushes everything
  written up to the mark); otherwise wait for the running one. Exactly one
  sync runs at a time; callers that arrive during it are served by the next.
  A caller waits on a future of its own, which the sync completes as it ends
  (its error, or nothing: the caller checks again), so cancelling a caller
  never cancels the shared sync, and a caller wakes one loop iteration after
  the sync, not two (as through ``asyncio.shield``).
* Sending at once: a caller that starts a sync while the last one was small
  (not gathering, below) marks the batch and has the stream put it on the wire
  (``send_marked``) in its own step; the sync task, which starts one loop
  iteration later, waits for its quorum (a one-client create's journal calls
  leave one iteration earlier).
* Gathering under load: when the last sync carried at least
  ``GATHER_MIN_BATCH_TXNS`` txns, the next one yields to the event loop before
  it takes its mark, again while the yield brought new edits (at most
  ``GATHER_MAX_YIELDS`` times): the requests already read are applied and join
  this sync instead of the next. Each journal sync costs every JournalNode a
  receive, a write, an ``fdatasync`` and an answer, and the NameNode three
  requests and three answers, whatever its size, so at 64 clients one sync
  per ~50 creates instead of ~29 cut the CPU per create of every process
  (issue 17 item 3). One client (batches of one) never waits for it.
* Segments: ``open_for_write(txid)`` starts a segment and logs
  ``OP_START_LOG_SEGMENT``; ``roll()`` logs ``OP_END_LOG_SEGMENT``, syncs,
  finalizes and opens the next segment; ``close()`` ends and finalizes the
  current one. Rolls happen on ``roll_period_ms`` (driven by the server) and
  once a segment holds ``roll_txns`` txns.
* Failure: a sync or write failure of the journal (fenced by a newer epoch,
  quorum lost, disk error of the required journal) is fatal. The edit log
  records it, fails every waiter and every later call with that error, and
  calls ``on_fatal`` once; the NameNode stops serving and exits (it never
  carries on with a namespace ahead of its durable log).

Invariants:

1. Txids are consecutive; the op logged at txid *t* was applied to the
   namespace right after the op at *t-1* (same lock).
2. ``log_sync(t)`` returns only once ``t`` is durable on the journal (the
   stream's ``sync`` returned after covering it); it never returns normally
   after a fatal failure.
3. At most one journal sync is in flight.
4. After a fatal failure nothing more is written.
5. ``read_barrier()`` returns only once every edit logged before the call is
   durable and the journal confirmed, with a round sent after the call, that
   this edit log's writer was still the only writer (``confirm_writer``).
   Reads on the active answer only after it (PRODUCT requirement 7): nothing a
   client reads can be lost, nor be older than a write acknowledged elsewhere
   before the read began. One confirmation round serves every read that arrived
   before it was sent (group confirmation, like group commit).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from qjournal.errors import InvariantViolation, JournalError, QJournalError, StandbyError, register_error
from qjournal.journalmanager.streams import EditLogOutputStream
from qjournal.journalmanager.base import JournalManager
from qjournal.namenode.ops import (NO_CALL_ID, NO_CLIENT_ID, EditOp, EndLogSegmentOp,
                                   StartLogSegmentOp, encode_body)
from qjournal.protocol.segment import LAYOUT_VERSION
from qjournal.util.tasks import spawn

log = logging.getLogger(__name__)

#: a sync after one that carried at least this many txns gathers first (theory of operation)
GATHER_MIN_BATCH_TXNS = 8
#: at most this many event-loop iterations of gathering before a sync takes its mark
GATHER_MAX_YIELDS = 3


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


@register_error
class EditLogFatalError(JournalError):
    """The edit log failed (a required journal could not sync); the NameNode must stop."""


class FSEditLog:
    """The NameNode's edit log over one (possibly composite) :class:`JournalManager`.

    Args:
        journal: where edits go (a JournalSet of the local and shared journals).
        clock_ms: returns "now" in ms (segment marker timestamps).
        user: the NameNode's user (segment marker ops).
        roll_txns: roll once a segment holds this many txns (0 = never by size).
        on_fatal: called once with the error when the journal fails.
        lock: the namespace lock to use (shared with the tailer); a new one by default.
    """

    def __init__(self, journal: JournalManager, *, clock_ms: Callable[[], int], user: str = "root",
                 roll_txns: int = 0, on_fatal: Callable[[BaseException], None] | None = None,
                 lock: asyncio.Lock | None = None) -> None:
        self.journal = journal
        self.clock_ms = clock_ms
        self.user = user
        self.roll_txns = roll_txns
        self.on_fatal = on_fatal
        #: held while applying a mutation and appending its ops (invariant 1)
        self.lock = lock if lock is not None else asyncio.Lock()
        self._stream: EditLogOutputStream | None = None
        self.segment_txid = 0
        self.last_written_txid = 0
        self.synced_txid = 0
        self._sync_task: asyncio.Future | None = None
        self._sync_waiters: list[asyncio.Future] = []  # log_sync callers waiting for the running sync
        self._roll_task: asyncio.Task | None = None
        self._confirm_waiters: list[asyncio.Future] = []
        self._confirm_task: asyncio.Task | None = None
        self.fatal: BaseException | None = None
        # statistics (bench, /jmx)
        self.num_syncs = 0
        #: txns the last sync carried (a large batch: the next sync gathers first)
        self._last_batch_txns = 0
        self.num_txns_synced = 0
        self.max_batch_txns = 0

    # ------------------------------------------------------------- lifecycle
    def _check_usable(self) -> None:
        if self.fatal is not None:
            raise EditLogFatalError(f"edit log failed earlier: {self.fatal}", cause=str(self.fatal))
        if self._stream is None:
            # only a NameNode that left the active state has a closed edit log: clients fail over
            raise StandbyError("the edit log is closed (this NameNode is not active)")

    def _marker(self, cls: type) -> EditOp:
        return cls(self.user, NO_CLIENT_ID, NO_CALL_ID, self.clock_ms())

    async def open_for_write(self, txid: int) -> None:
        """Start a segment at ``txid`` and log ``OP_START_LOG_SEGMENT`` durably.

        The caller has recovered the journal (``recover_unfinalized_segments``)
        and replayed everything before ``txid``.

        Raises:
            JournalError (and subclasses): the journal refused the segment (fatal).
        """
        async with self.lock:
            if self._stream is not None:
                raise InvariantViolation(f"open_for_write({txid}) while segment {self.segment_txid} is open")
            self.fatal = None
            self.last_written_txid = self.synced_txid = txid - 1
            await self._start_segment(txid)
        await self.log_sync(txid)

    async def _start_segment(self, txid: int) -> None:
        try:
            self._stream = await self.journal.start_log_segment(txid, LAYOUT_VERSION)
        except Exception as e:
            self._fail(e)
            raise
        self.segment_txid = txid
        self._write(self._marker(StartLogSegmentOp))

    def _write(self, op: EditOp) -> int:
        txid = self.last_written_txid + 1
        try:
            self._stream.write(txid, encode_body(op), op.OPCODE)  # type: ignore[union-attr]
        except Exception as e:
            self._fail(e)
            raise
        self.last_written_txid = txid
        return txid

    # --------------------------------------------------------------- logging
    async def log_edit(self, mutation: Callable[[], list[EditOp]]) -> tuple[int, list[EditOp]]:
        """Apply ``mutation`` and log its ops under :attr:`lock` (invariant 1).

        Args:
            mutation: a callable that checks, applies and returns the ops
                (a bound Namespace method with its arguments).

        Returns:
            ``(txid to sync, ops)``; the txid is the last one logged, or the
            current last written txid when the mutation logged nothing.

        Raises:
            whatever the mutation raises (the namespace is then unchanged), or
            EditLogFatalError when the edit log failed earlier.
        """
        if self.lock.locked():
            async with self.lock:
                txid, ops = self._apply_and_write(mutation)
        else:  # free: nothing below awaits, so no holder can come between (no lock round trip)
            txid, ops = self._apply_and_write(mutation)
        if self.roll_txns and txid - self.segment_txid + 1 >= self.roll_txns:
            self._schedule_roll()
        return txid, ops

    def _apply_and_write(self, mutation: Callable[[], list[EditOp]]) -> tuple[int, list[EditOp]]:
        """The body of :meth:`log_edit`: no await, so it runs whole between two holders of the lock."""
        self._check_usable()
        ops = mutation()
        for op in ops:
            self._write(op)
        return self.last_written_txid, ops

    async def log_sync(self, txid: int | None = None) -> None:
        """Return once ``txid`` (default: the last written) is durable (group commit, invariants 2-3).

        Raises:
            EditLogFatalError: the journal failed (now or earlier).
        """
        if txid is None:
            txid = self.last_written_txid
        while self.synced_txid < txid:
            if self.fatal is not None:
                raise EditLogFatalError(f"edit log failed: {self.fatal}; txid {txid} is not durable",
                                        txid=txid, cause=str(self.fatal))
            task = self._sync_task
            if task is not None and task.done():
                # a syncer cancelled before its first step never ran its `finally`: start a new one
                # (without this the loop below awaited the same cancelled task for ever, never
                # yielding: the cluster soak's worker spun in a NameNode's shutdown)
                self._sync_task = task = None
            if task is None:
                stream = self._stream
                if stream is not None and not self._gathering:
                    # not gathering: the batch goes on the wire now, before this caller yields
                    # (the sync task starts an iteration later and waits for its quorum)
                    try:
                        stream.mark()
                        stream.send_marked()
                    except InvariantViolation:
                        raise
                    except QJournalError:
                        pass  # the sync task meets it again, fails the edit log and tells the waiters
                task = self._sync_task = asyncio.ensure_future(self._sync_once())
                # its failure is the edit log's (self.fatal) and its waiters'; retrieved here
                task.add_done_callback(self._sync_ended)
            waiter = asyncio.get_running_loop().create_future()
            self._sync_waiters.append(waiter)
            try:
                await waiter
            except Exception:
                if self.fatal is None:
                    raise
                continue  # self.fatal is set; the loop raises EditLogFatalError

    def _release_sync_waiters(self, error: BaseException | None) -> None:
        """Wake every caller of the sync that ends: with its error, or to check again."""
        waiters, self._sync_waiters = self._sync_waiters, []
        for w in waiters:
            if not w.done():
                if error is None:
                    w.set_result(None)
                else:
                    w.set_exception(error)

    def _sync_ended(self, task: asyncio.Future) -> None:
        """Done-callback of a sync: a task cancelled before its first step released nobody."""
        _retrieve(task)
        if self._sync_task is task:  # else its `finally` ran (or a new sync took over its waiters)
            self._sync_task = None
            self._release_sync_waiters(None)

    async def read_barrier(self) -> None:
        """Invariant 5: durable, and still the writer after the call began.

        Raises:
            EditLogFatalError: the journal failed or could not confirm this writer (fatal);
            StandbyError: the edit log is closed (not active).
        """
        self._check_usable()
        await self.log_sync(self.last_written_txid)
        fut = asyncio.get_running_loop().create_future()
        self._confirm_waiters.append(fut)
        if self._confirm_task is None:
            self._confirm_task = spawn(self._confirm_rounds(), name="read-barrier", on_crash=self._fail)
        await fut

    async def _confirm_rounds(self) -> None:
        """Send confirmation rounds while readers wait; each round serves the readers that arrived
        before it was sent (invariant 5)."""
        batch: list[asyncio.Future] = []
        try:
            while self._confirm_waiters:
                batch, self._confirm_waiters = self._confirm_waiters, []
                try:
                    self._check_usable()
                    await self.journal.confirm_writer()
                except (JournalError, StandbyError) as e:
                    if not isinstance(e, (EditLogFatalError, StandbyError)):
                        self._fail(e)
                        e = EditLogFatalError(f"edit log failed: {e}; this NameNode cannot confirm it is "
                                              f"still the writer", cause=str(e))
                    for f in batch:
                        if not f.done():
                            f.set_exception(e)
                else:
                    for f in batch:
                        if not f.done():
                            f.set_result(None)
                batch = []
        except BaseException as e:  # a bug or a broken invariant: no reader waits for ever on it
            for f in batch + self._confirm_waiters:
                if not f.done():
                    f.set_exception(EditLogFatalError(f"read barrier failed: {e!r}"))
            raise
        finally:
            self._confirm_task = None

    @property
    def _gathering(self) -> bool:
        """The next sync gathers before its mark: the last one was large (theory of operation)."""
        return self._last_batch_txns >= GATHER_MIN_BATCH_TXNS

    async def _sync_once(self) -> None:
        error: BaseException | None = None
        if self._gathering:
            # under load: let the callers already on their way write their edits first (theory of operation)
            for _ in range(GATHER_MAX_YIELDS):
                seen = self.last_written_txid
                await asyncio.sleep(0)
                if self.last_written_txid == seen:
                    break
        stream = self._stream
        try:
            if stream is None:
                raise JournalError("edit log closed while a sync was pending")
            upto = stream.last_written_txid
            before = self.synced_txid
            stream.mark()
            try:
                await stream.sync()
            except Exception as e:
                self._fail(e)
                raise
            if upto > self.synced_txid:
                self.synced_txid = upto
            n = upto - before
            self._last_batch_txns = n
            if n > 0:
                self.num_syncs += 1
                self.num_txns_synced += n
                self.max_batch_txns = max(self.max_batch_txns, n)
        except asyncio.CancelledError:
            raise  # the waiters check again (a new sync), as after a success
        except BaseException as e:
            error = e
            raise
        finally:
            self._sync_task = None
            self._release_sync_waiters(error)

    def _fail(self, e: BaseException) -> None:
        if isinstance(e, InvariantViolation):
            raise e
        if self.fatal is None:
            self.fatal = e
            log.error("edit log failed, the NameNode must stop: %s", e)
            if self.on_fatal is not None:
                self.on_fatal(e)

    # ----------------------------------------------------------------- rolls
    def _schedule_roll(self) -> None:
        if self._roll_task is None or self._roll_task.done():
            self._roll_task = asyncio.ensure_future(self._roll_quietly())

    async def _roll_quietly(self) -> None:
        try:
            await self.roll()
        except Exception as e:  # the failure is recorded in self.fatal and reported there
            log.warning("log roll failed: %s", e)

    async def roll(self, min_txns: int = 1) -> int | None:
        """End the current segment, finalize it and start the next.

        Args:
            min_txns: do nothing when the segment holds fewer txns than this
                (besides its start marker).

        Returns:
            The first txid of the new segment, or None when nothing was rolled.

        Raises:
            EditLogFatalError / JournalError: the journal failed (fatal).
        """
        async with self.lock:
            if self._stream is None or self.fatal is not None:
                return None
            if self.last_written_txid - self.segment_txid < min_txns:
                return None
            await self._end_segment_locked()
            await self._start_segment(self.last_written_txid + 1)
            new_start = self.segment_txid
        await self.log_sync(new_start)
        return new_start

    async def _end_segment_locked(self) -> None:
        self._write(self._marker(EndLogSegmentOp))
        last = self.last_written_txid
        await self.log_sync(last)
        stream, self._stream = self._stream, None
        try:
            await stream.close()  # type: ignore[union-attr]
            await self.journal.finalize_log_segment(self.segment_txid, last)
        except Exception as e:
            self._fail(e)
            raise

    async def close(self) -> None:
        """End and finalize the current segment (clean shutdown, transition to standby).

        Raises:
            JournalError: the journal failed while finalizing.
        """
        if self._roll_task is not None and not self._roll_task.done():
            try:
                await self._roll_task
            except Exception:
                pass
        async with self.lock:
            if self._stream is None:
                return
            if self.fatal is not None:
                await self.abort_locked()
                return
            await self._end_segment_locked()

    async def abort_locked(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                await stream.abort()
            except Exception as e:  # already failing; nothing more to do
                log.warning("abort of the edit stream failed: %s", e)

    async def abort(self) -> None:
        """Stop writing at once without syncing (fenced / fatal shutdown)."""
        await self.abort_locked()

    def stats(self) -> dict:
        """Counters for the bench and the status page."""
        return {"segment_txid": self.segment_txid, "last_written_txid": self.last_written_txid,
                "synced_txid": self.synced_txid, "num_syncs": self.num_syncs,
                "num_txns_synced": self.num_txns_synced, "max_batch_txns": self.max_batch_txns,
                "avg_batch_txns": (self.num_txns_synced / self.num_syncs) if self.num_syncs else 0.0}


__all__ = ["FSEditLog", "EditLogFatalError"]
