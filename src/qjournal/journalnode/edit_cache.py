"""JournaledEditsCache: the recent edits of one journal, in memory, for ``get_journaled_edits``.

Why: a standby or observer NameNode that tails the in-progress segment by
downloading it again every round moves bytes in proportion to the segment
size, and reads them from disk. HDFS-13150 keeps the most recent batches each
JournalNode accepted in memory and serves a tailer exactly the edits after the
txid it asks for over RPC (reference §5.3), which is what makes millisecond
tailing cheap. This module is that cache: plain synchronous code, no I/O,
owned by one :class:`~qjournal.journalnode.journal.Journal`. ``store`` and
``clear`` run on the journal's thread; ``retrieve`` may run on another (the
daemon's event loop, so a tailer never queues behind the fsyncs of later
batches): every method holds the cache's lock while it touches the batches.

Theory of operation:

* ``store`` is called with every batch the journal appended *and made durable*
  (HDFS-17710: never a batch that could still be lost), exactly the bytes the
  writer sent. Batches are kept while their txids are contiguous, their writer
  epoch and layout version the same; anything else (a new writer, a gap, another
  layout) starts the cache afresh at that batch. The oldest batches are evicted
  to stay within ``capacity_bytes``; a batch larger than the capacity empties it.
* ``retrieve(since, max_txns, max_bytes, committed_txid, committed_epoch)``
  returns the records ``since..`` up to the committed txid, never past it.

Why an answer is safe (the rule the quorum reader builds on): the cache holds
edits of one writer epoch ``e`` only, as that writer sent them, and answers only
when the node's committed txid was reported by that same epoch ``e``. A writer
writes one linear history and reports as committed only txids a quorum made
durable, so every txid ``<= committed`` in the cache is in the committed
history, which no later recovery changes. A committed txid reported by another
epoch says nothing about these bytes (an older writer's unfinished tail may be
cut by recovery), so the cache then answers a miss and the reader reads the
finalized segments from disk instead.

Invariants:

1. The cached batches hold consecutive txids ``lowest_txid..highest_txid`` of one
   writer epoch and one layout version, and ``size_bytes`` is the sum of their lengths.
2. ``size_bytes <= capacity_bytes`` after every ``store``.
3. ``retrieve`` never returns a txid above the committed txid it is given, and
   returns nothing when that committed txid was reported by an epoch other than
   the cache's.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

from qjournal.errors import CacheMissError, InvariantViolation
from qjournal.protocol.segment import INVALID_TXID, LAYOUT_VERSION, record_span

__all__ = ["JournaledEditsCache", "CachedEdits"]


@dataclass(frozen=True, slots=True)
class CachedEdits:
    """What ``retrieve`` found: ``num_txns`` framed records from ``first_txid``."""

    first_txid: int
    num_txns: int
    records: bytes
    layout_version: int
    writer_epoch: int


class JournaledEditsCache:
    """The recent durable batches of one journal (module docstring).

    Args:
        jid: the journal id (messages).
        capacity_bytes: ``dfs.journalnode.edit-cache-size.bytes``; must be positive.
    """

    def __init__(self, jid: str, capacity_bytes: int) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"journal {jid}: edit cache capacity must be positive, got {capacity_bytes}")
        self.jid = jid
        self.capacity_bytes = capacity_bytes
        self._firsts: list[int] = []                     # first txid of each batch, ascending
        self._batches: list[tuple[int, int, bytes]] = []  # (first txid, last txid, records)
        self.size_bytes = 0
        self.writer_epoch = 0
        self.layout_version = LAYOUT_VERSION
        self._lock = threading.Lock()
        #: counters for metrics (Hadoop's JournalMetrics names in :meth:`metrics`)
        self.hits = 0
        self.misses = 0
        self.miss_txns = 0   # summed distance of the misses from the cache's lowest txid
        self.resets = 0
        self.empty_answers = 0
        self.txns_served = 0
        self.bytes_served = 0

    @property
    def lowest_txid(self) -> int:
        """First cached txid (INVALID_TXID when empty)."""
        return self._batches[0][0] if self._batches else INVALID_TXID

    @property
    def highest_txid(self) -> int:
        """Last cached txid (INVALID_TXID when empty)."""
        return self._batches[-1][1] if self._batches else INVALID_TXID

    def metrics(self) -> dict:
        """The cache's part of the ``Journal-<jid>`` bean: Hadoop's ``JournalMetrics`` names
        (``TxnsServedViaRpc``, ``BytesServedViaRpc``, ``RpcEmptyResponses``, the
        ``RpcRequestCacheMissAmount`` stat as ``...NumMisses`` / ``...AvgTxns``: how far below the
        cache's lowest txid the missed requests were, 0 for a miss of an empty or other-epoch
        cache), then qjournal's ``EditCache*`` and ``JournaledEditsRequests``."""
        with self._lock:
            return {"TxnsServedViaRpc": self.txns_served, "BytesServedViaRpc": self.bytes_served,
                    "RpcEmptyResponses": self.empty_answers,
                    "RpcRequestCacheMissAmountNumMisses": self.misses,
                    "RpcRequestCacheMissAmountAvgTxns": self.miss_txns / self.misses if self.misses else 0.0,
                    "EditCacheBytes": self.size_bytes, "EditCacheCapacityBytes": self.capacity_bytes,
                    "EditCacheLowestTxId": self.lowest_txid, "EditCacheHighestTxId": self.highest_txid,
                    "EditCacheResets": self.resets,
                    "JournaledEditsRequests": self.hits + self.misses + self.empty_answers}

    def clear(self) -> None:
        """Forget everything (format, a storage failure, a new writer)."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        if self._batches:
            self.resets += 1
        self._firsts.clear()
        self._batches.clear()
        self.size_bytes = 0

    def store(self, epoch: int, first_txid: int, last_txid: int, records: bytes,
              layout_version: int) -> None:
        """Keep a durable batch (invariants 1, 2).

        Raises:
            InvariantViolation: an empty or inverted range.
        """
        if last_txid < first_txid or not records:
            raise InvariantViolation(f"journal {self.jid}: edit cache asked to store txids "
                                     f"{first_txid}-{last_txid} in {len(records)} bytes")
        with self._lock:
            self._store(epoch, first_txid, last_txid, records, layout_version)

    def _store(self, epoch: int, first_txid: int, last_txid: int, records: bytes,
               layout_version: int) -> None:
        if (self._batches and (epoch != self.writer_epoch or layout_version != self.layout_version
                               or first_txid != self.highest_txid + 1)):
            self._clear()
        self.writer_epoch = epoch
        self.layout_version = layout_version
        if len(records) > self.capacity_bytes:
            self._clear()  # one batch larger than the whole cache: nothing contiguous fits
            return
        self._firsts.append(first_txid)
        self._batches.append((first_txid, last_txid, records))
        self.size_bytes += len(records)
        if self.size_bytes > self.capacity_bytes:
            k = 0
            while self.size_bytes > self.capacity_bytes:
                self.size_bytes -= len(self._batches[k][2])
                k += 1
            del self._batches[:k]
            del self._firsts[:k]

    def retrieve(self, since_txid: int, max_txns: int, max_bytes: int, committed_txid: int,
                 committed_epoch: int) -> CachedEdits:
        """The committed records ``since_txid..`` (at most ``max_txns``; beyond the part taken
        from the first batch, whole batch parts only while they fit in ``max_bytes``) (invariant 3).

        Returns:
            The records; ``num_txns`` 0 when no edit at or after ``since_txid`` is known committed.

        Raises:
            CacheMissError: ``since_txid`` is committed but not servable from the cache (older
                than its lowest txid, the cache is empty, or its writer is not the one that
                reported the committed txid).
        """
        with self._lock:
            got = self._retrieve(since_txid, max_txns, max_bytes, committed_txid, committed_epoch)
            if got.num_txns == 0:
                self.empty_answers += 1
            else:
                self.hits += 1
                self.txns_served += got.num_txns
                self.bytes_served += len(got.records)
        return got

    def _retrieve(self, since_txid: int, max_txns: int, max_bytes: int, committed_txid: int,
                  committed_epoch: int) -> CachedEdits:
        if committed_txid == INVALID_TXID or since_txid > committed_txid:
            return CachedEdits(since_txid, 0, b"", self.layout_version, self.writer_epoch)
        if not self._batches or committed_epoch != self.writer_epoch or since_txid < self.lowest_txid:
            self.misses += 1
            if self._batches and committed_epoch == self.writer_epoch:
                self.miss_txns += self.lowest_txid - since_txid
            why = ("it is empty" if not self._batches else
                   f"it holds edits of writer epoch {self.writer_epoch}, the committed txid "
                   f"{committed_txid} came from epoch {committed_epoch}"
                   if committed_epoch != self.writer_epoch else
                   f"it holds txids {self.lowest_txid}-{self.highest_txid}")
            raise CacheMissError(f"journal {self.jid}: txid {since_txid} is not in the edit cache: "
                                 f"{why}", jid=self.jid, since_txid=since_txid,
                                 lowest_txid=self.lowest_txid)
        end = min(committed_txid, self.highest_txid, since_txid + max(max_txns, 1) - 1)
        if since_txid > end:  # committed beyond the cache's end, nothing new cached yet
            return CachedEdits(since_txid, 0, b"", self.layout_version, self.writer_epoch)
        i = bisect.bisect_right(self._firsts, since_txid) - 1
        parts: list[bytes] = []
        got = 0
        txid = since_txid
        while txid <= end:
            first, last, data = self._batches[i]
            stop = min(last, end)
            lo, hi = (0, len(data)) if first == txid and stop == last else \
                record_span(data, first, txid, stop)
            if parts and got + hi - lo > max_bytes:
                break  # the first part always goes (a batch fits in a frame, writer invariant 4)
            parts.append(data[lo:hi] if (lo, hi) != (0, len(data)) else data)
            got += hi - lo
            txid = stop + 1
            i += 1
        return CachedEdits(since_txid, txid - since_txid, b"".join(parts), self.layout_version,
                           self.writer_epoch)
