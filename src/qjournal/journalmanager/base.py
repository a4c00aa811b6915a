"""The generic edit-log (write-ahead log) interface of HDFS-1580: :class:`JournalManager`.

Why: the NameNode writes the same transactions to a local directory, to a
shared (NFS-style) directory and to a JournalNode quorum. Each of those is a
:class:`Journal`; a :class:`~qjournal.journalmanager.journalset.JournalSet` is a Journal
made of Journals. Code above this line never knows which storage it talks to.

Shape (seed 003 §4, with HDFS's segment model made explicit):

* A journal is a sequence of transactions with consecutive txids, stored as
  *segments*. ``start_log_segment(txid)`` opens the single output stream;
  ``finalize_log_segment(first, last)`` closes it; a roll is both.
* ``EditLogOutputStream``: ``write`` buffers a record, ``mark`` ends a batch
  (the seed's ``mark``, HDFS's ``setReadyToFlush``), ``sync`` makes every
  marked record durable and returns only then (the ``log_sync`` commit point).
* ``EditLogInputStream``: ``read_next`` returns the next :class:`EditRecord`
  (txid, opcode, version, bytes) or None at the end; ``async for`` iterates.
* Gaps: a reader asked for a range that crosses a hole raises
  :class:`GapInTransactionsError` (seed 003 §6.4, §6.5).

Everything that may touch a disk or the network is ``async`` so a NameNode's
event loop is never blocked; file back ends run their fsyncs in a thread.

Invariants every implementation keeps:

1. Records of one output stream have consecutive txids; ``write`` of any other
   txid raises ``JournalOutOfSyncError``.
2. ``sync`` returns only after every marked record is durable (fsync / quorum).
3. A second writer of the same journal gets ``JournalLockedError`` (or, for a
   quorum journal, fences the first through a newer epoch).
4. A reader never yields a record whose checksum fails.
"""

from __future__ import annotations

import abc

from qjournal.journalmanager.streams import (ChainedInputStream, EditLogInputStream, EditLogOutputStream,
                                             SegmentInfo, plan_read)
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.segment import LAYOUT_VERSION


class JournalManager(abc.ABC):
    """A journal back end (seed 003 ``Journal``, HDFS ``JournalManager``)."""

    uri: str = ""
    #: a required journal failing fails the whole JournalSet (HDFS "required journal")
    required: bool = False

    # -- lifecycle ---------------------------------------------------------------
    @abc.abstractmethod
    async def format(self, ns_info: NamespaceInfo, force: bool = False) -> None:
        """Create an empty journal. Raises JournalAlreadyFormattedError unless ``force``."""

    @abc.abstractmethod
    async def is_formatted(self) -> bool: ...

    async def has_some_data(self) -> bool:
        return await self.is_formatted()

    @abc.abstractmethod
    async def recover_unfinalized_segments(self) -> None:
        """Become the single writer and finalize what a crashed writer left open.

        File journals take their lock; the quorum journal takes a new epoch
        (fencing every older writer) and runs Paxos recovery.
        """

    # -- writing -----------------------------------------------------------------
    @abc.abstractmethod
    async def start_log_segment(self, txid: int,
                                layout_version: int = LAYOUT_VERSION) -> EditLogOutputStream: ...

    @abc.abstractmethod
    async def finalize_log_segment(self, first_txid: int, last_txid: int) -> None: ...

    @abc.abstractmethod
    async def purge_logs_older_than(self, min_txid_to_keep: int) -> None:
        """Delete segments that end before ``min_txid_to_keep`` (seed 003 purgeTransactions)."""

    # -- reading -----------------------------------------------------------------
    @abc.abstractmethod
    async def get_manifest(self, since_txid: int = 0,
                           in_progress_ok: bool = False) -> list[SegmentInfo]:
        """Segments holding txids >= since_txid, sorted by start txid."""

    @abc.abstractmethod
    async def open_segment(self, seg: SegmentInfo, from_txid: int | None = None) -> EditLogInputStream:
        """A stream over one listed segment, starting at ``from_txid`` (default: its start)."""

    async def open_input(self, from_txid: int, to_txid: int | None = None,
                         in_progress_ok: bool = False) -> EditLogInputStream:
        """A stream from ``from_txid`` (to ``to_txid`` inclusive, or the end), across segments.

        Raises:
            GapInTransactionsError: the manifest has a hole inside the range.
        """
        segs = await self.get_manifest(from_txid, in_progress_ok)
        plan = plan_read(segs, from_txid, to_txid, where=self.uri)
        return ChainedInputStream([(self, s) for s in plan], from_txid, to_txid)

    async def confirm_writer(self) -> None:
        """Return only if this object was still the journal's single writer at a moment after the call.

        A read barrier (``FSEditLog.read_barrier``): a NameNode answers a read only once it knows
        no newer writer could have acknowledged a write before the read arrived. A journal whose
        writer holds an exclusive lock is confirmed by holding it (this default); the quorum
        journal asks a quorum of JournalNodes (an epoch-checked ``heartbeat``).

        Raises:
            JournalError (and subclasses): not (or no longer provably) the writer.
        """
        return None

    async def count_transactions_since(self, since_txid: int, in_progress_ok: bool = False) -> int:
        """Number of contiguous txids available from ``since_txid`` (seed 003 getNumberOfTransactions).

        Raises:
            GapInTransactionsError: a later segment exists past a hole.
        """
        segs = await self.get_manifest(since_txid, in_progress_ok)
        plan = plan_read(segs, since_txid, None, where=self.uri)
        if not plan:
            return 0
        return plan[-1].end_txid - since_txid + 1

    async def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"
