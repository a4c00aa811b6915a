"""EditLogTailer: the standby NameNode follows the shared journal.

Why: a standby that already holds (almost) the whole namespace can become
active in the time it takes to read the last few segments, instead of
replaying the log from the last checkpoint. HDFS's ``EditLogTailer``; reference
§5.1.

Theory of operation: every ``dfs.ha.tail-edits.period`` the tailer asks the
shared journal for the *finalized* segments after the last applied txid
(``open_input(last + 1, in_progress_ok=False)``; the standby asks the active to
roll its segment every ``dfs.ha.log-roll.period``, ``log_roller.py``, so
finalized segments keep appearing), and
applies each op to the namespace and to the retry cache. With
``dfs.ha.tail-edits.in-progress`` and a quorum journal it also reads the
in-progress segment: the committed edits after its last txid that a majority
of the JournalNodes' edit caches hold, over RPC (HDFS-13150,
``client/rpc_reader.py``), or, when the caches cannot serve that txid, the
segments streamed and cut at the committed txid; either way the standby never
applies an edit that recovery could still drop. After a round that found
nothing the wait doubles, up to ``dfs.ha.tail-edits.period.backoff-max``, and
goes back to the period as soon as a round applies an edit. The same routine
(``catch_up``) is used at start-up replay and, after fencing, by
transition-to-active to read every remaining edit.

Invariants:

1. Ops are applied in txid order with no gap: an op whose txid is not
   ``last_applied_txid + 1`` stops the round with ``GapInTransactionsError``
   (the next round retries), nothing is skipped.
2. An op is applied under the NameNode's namespace lock, and
   ``last_applied_txid`` names the last op applied whenever the lock is free
   (it is set once per batch, before the lock is released, also when an op
   fails), so a checkpoint snapshot taken under the lock is exactly "the image
   at last_applied_txid".
3. Every op with a client id rebuilds its retry-cache entry
   (``retry_cache.py``) so a call retried after a failover gets its answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from qjournal.errors import GapInTransactionsError, QJournalError
from qjournal.journalmanager.base import JournalManager
from qjournal.namenode.namespace import Namespace
from qjournal.namenode.ops import decode_op
from qjournal.namenode.retry_cache import RetryCache
from qjournal.protocol.segment import EditRecord
from qjournal.util.proc import gc_paused
from qjournal.util.tasks import cancel_and_wait, spawn

log = logging.getLogger(__name__)


class EditLogTailer:
    """Applies finalized edits of ``journal`` to ``namespace`` (module docstring).

    Args:
        namespace: the namespace to keep up to date.
        retry_cache: rebuilt from the ops' client ids.
        lock: the NameNode's namespace lock (shared with FSEditLog).
        last_applied_txid: txid already in the namespace (image txid + replayed).
        clock_ms: "now" for retry cache entries: the NameNode's monotonic clock (their expiry is a
            duration; issue 28, H1).
        period_ms: ``dfs.ha.tail-edits.period``.
        backoff_max_ms: ``dfs.ha.tail-edits.period.backoff-max`` (0 or not above the period:
            no back-off).
        in_progress_ok: also tail the in-progress segment (``dfs.ha.tail-edits.in-progress``;
            only for journals whose readers stop at the committed txid, i.e. the quorum journal).
        on_crash: told if the tailing loop dies of an unexpected error (a bug: the NameNode fails
            rather than stand by for ever without applying edits).
        on_applied: told the new ``last_applied_txid`` after every batch that applied ops
            (an observer wakes the reads waiting for it, ``state_id.py``).
    """

    def __init__(self, namespace: Namespace, retry_cache: RetryCache, lock: asyncio.Lock,
                 last_applied_txid: int, clock_ms: Callable[[], int], period_ms: int,
                 in_progress_ok: bool = False,
                 on_crash: Callable[[BaseException], None] | None = None,
                 backoff_max_ms: int = 0,
                 on_applied: Callable[[int], None] | None = None) -> None:
        self.namespace = namespace
        self.on_crash = on_crash
        self.on_applied = on_applied
        self.retry_cache = retry_cache
        self.lock = lock
        self.last_applied_txid = last_applied_txid
        self.clock_ms = clock_ms
        self.period_ms = period_ms
        self.backoff_max_ms = backoff_max_ms
        #: the wait before the next round (the period, or more after empty rounds)
        self.sleep_ms = period_ms
        self.in_progress_ok = in_progress_ok
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self.journal: JournalManager | None = None
        self.rounds = 0
        self.last_error: str = ""
        #: the last round found a hole after last_applied_txid (edits purged before this standby read them)
        self.gap = False
        #: txids applied in total (bench: tail lag)
        self.applied_total = 0
        #: records applied per lock acquisition
        self.batch_txns = 1000

    async def catch_up(self, journal: JournalManager, in_progress_ok: bool = False,
                       to_txid: int | None = None) -> int:
        """Apply every available edit after ``last_applied_txid``.

        Args:
            journal: where to read (the shared journal, or the local one in non-HA mode).
            in_progress_ok: also read in-progress segments (after fencing they are all finalized).
            to_txid: stop after this txid.

        Returns:
            The number of ops applied.

        Raises:
            GapInTransactionsError: the journal has a hole after ``last_applied_txid``.
            CorruptRecordError: a record failed its checksum or did not decode.
        """
        start = self.last_applied_txid + 1
        if to_txid is not None and to_txid < start:
            return 0
        stream = await journal.open_input(start, to_txid, in_progress_ok)
        n = 0
        want = self.batch_txns
        try:
            with gc_paused():  # an inode per edit and no garbage cycles (util/proc.py)
                done = False
                while not done:
                    # read a batch (I/O, awaits; a stream batch per await), then apply it under one lock acquisition
                    batch: list[EditRecord] = []
                    while len(batch) < want:
                        recs = await stream.read_batch(want - len(batch))
                        if not recs:
                            done = True
                            break
                        batch += recs
                    n += await self._apply_batch(journal, batch)
        finally:
            await stream.close()
        self.applied_total += n
        return n

    async def _apply_batch(self, journal: JournalManager, batch: list[EditRecord]) -> int:
        """Decode and apply ``batch`` under the lock (invariants 1-3); ``last_applied_txid`` names the
        last op applied when the lock is released, also when an op fails."""
        n = 0
        now = self.clock_ms()
        apply, record_op, decode = self.namespace.apply, self.retry_cache.record_op, decode_op
        async with self.lock:
            last = self.last_applied_txid
            try:
                for txid, opcode, body, _crc in batch:
                    if txid <= last:
                        continue  # a redundant copy re-delivering an applied txid
                    if txid != last + 1:
                        raise GapInTransactionsError(
                            f"{journal.uri}: expected txid {last + 1}, read {txid}",
                            expected_txid=last + 1, next_txid=txid)
                    op = decode(opcode, body, txid)
                    apply(op)
                    last = txid
                    record_op(op, now, body)
                    n += 1
            finally:
                if n:
                    self.last_applied_txid = last
        if n and self.on_applied is not None:
            self.on_applied(self.last_applied_txid)
        return n

    # ------------------------------------------------------------- the loop
    def start(self, journal: JournalManager) -> None:
        """Start tailing ``journal`` every ``period_ms`` (idempotent)."""
        self.journal = journal
        if self._task is None or self._task.done():
            self._task = spawn(self._run(), name="edit-log-tailer", on_crash=self.on_crash)

    def trigger(self) -> None:
        """Tail now instead of at the end of the period."""
        self._wake.set()

    def next_sleep_ms(self, applied: int) -> int:
        """The wait after a round that applied ``applied`` edits (Hadoop's back-off): the
        period after progress, else twice the last wait, at most ``backoff_max_ms``."""
        if applied > 0 or self.backoff_max_ms <= self.period_ms:
            return self.period_ms
        return min(self.backoff_max_ms, max(2 * self.sleep_ms, self.period_ms, 1))

    async def _run(self) -> None:
        while True:
            applied = 0
            try:
                assert self.journal is not None
                applied = await self.catch_up(self.journal, self.in_progress_ok)
                self.last_error = ""
                self.gap = False
            except GapInTransactionsError as e:
                # the edits this standby needs were purged: it must be re-bootstrapped
                self.last_error = str(e)
                self.gap = True
                log.error("edit log tailing hit a gap (re-run namenode -bootstrapStandby): %s", e)
            except QJournalError as e:
                self.last_error = str(e)
                log.warning("edit log tailing failed, will retry: %s", e)
            except OSError as e:
                self.last_error = str(e)
                log.warning("edit log tailing failed (I/O), will retry: %s", e)
            self.rounds += 1
            self.sleep_ms = self.next_sleep_ms(applied)
            try:
                await asyncio.wait_for(self._wake.wait(), self.sleep_ms / 1000.0)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Stop the loop; waits for an in-flight round to end (it is cancelled)."""
        t, self._task = self._task, None
        if t is not None and t.done() and not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
        await cancel_and_wait(t)


__all__ = ["EditLogTailer"]
