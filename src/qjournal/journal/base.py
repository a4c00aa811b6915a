"""The generic edit-log (write-ahead log) interface of HDFS-1580, in Python.

Why: the NameNode writes the same transactions to a local directory, to a
shared (NFS-style) directory and to a JournalNode quorum. Each of those is a
:class:`Journal`; a :class:`~qjournal.journal.journalset.JournalSet` is a Journal
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
from dataclasses import dataclass
from typing import AsyncIterator, Iterable

from qjournal.errors import GapInTransactionsError
from qjournal.protocol.segment import LAYOUT_VERSION, OP_DATA, EditRecord


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """Identity of the namespace a journal belongs to (checked on every writer).

    Attributes:
        namespace_id: random id chosen at ``namenode -format``.
        cluster_id: human-readable cluster id.
        layout_version: layout of the edit records.
    """

    namespace_id: int
    cluster_id: str
    layout_version: int = LAYOUT_VERSION

    def to_wire(self) -> dict:
        return {"namespace_id": self.namespace_id, "cluster_id": self.cluster_id,
                "layout_version": self.layout_version}

    @classmethod
    def from_wire(cls, d: dict) -> "NamespaceInfo":
        return cls(int(d["namespace_id"]), str(d["cluster_id"]),
                   int(d.get("layout_version", LAYOUT_VERSION)))


@dataclass(frozen=True, slots=True, order=True)
class SegmentInfo:
    """A segment as listed in a manifest (HDFS RemoteEditLog / SegmentStateProto)."""

    start_txid: int
    end_txid: int  # for an in-progress segment: the highest txid written so far
    in_progress: bool = False

    @property
    def num_txns(self) -> int:
        return self.end_txid - self.start_txid + 1

    def to_wire(self) -> list:
        return [self.start_txid, self.end_txid, self.in_progress]

    @classmethod
    def from_wire(cls, w) -> "SegmentInfo":
        return cls(int(w[0]), int(w[1]), bool(w[2]))


class EditLogOutputStream(abc.ABC):
    """The single output stream of one open segment."""

    @property
    @abc.abstractmethod
    def segment_txid(self) -> int:
        """First txid of the segment this stream writes."""

    @abc.abstractmethod
    def write(self, txid: int, body: bytes, opcode: int = OP_DATA) -> None:
        """Buffer one record (no I/O). Raises JournalOutOfSyncError on a txid out of order."""

    @abc.abstractmethod
    def write_raw(self, data: bytes, first_txid: int, num_txns: int) -> None:
        """Buffer already-framed records ``first_txid .. first_txid+num_txns-1``."""

    @abc.abstractmethod
    def set_version(self, layout_version: int) -> None:
        """Records written after this call use ``layout_version`` (seed 003 §5.6)."""

    @abc.abstractmethod
    def mark(self) -> None:
        """End the current batch: what was written so far is what the next ``sync`` flushes."""

    @abc.abstractmethod
    async def sync(self) -> None:
        """Make every marked record durable; return only then."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Sync what is marked and release the stream (the segment stays in progress)."""

    @abc.abstractmethod
    async def abort(self) -> None:
        """Release the stream without syncing (after a failure)."""

    @property
    @abc.abstractmethod
    def last_written_txid(self) -> int:
        """Highest txid buffered (segment_txid - 1 when none)."""

    @property
    @abc.abstractmethod
    def last_synced_txid(self) -> int:
        """Highest txid known durable."""

    @property
    def pending_bytes(self) -> int:
        """Bytes buffered but not yet synced (for auto-sync decisions)."""
        return 0


class EditLogInputStream(abc.ABC):
    """Reads records in txid order from one segment or a chain of them."""

    @property
    @abc.abstractmethod
    def first_txid(self) -> int: ...

    @property
    @abc.abstractmethod
    def last_txid(self) -> int:
        """Last txid this stream is expected to reach (may be a lower bound if in progress)."""

    @property
    def version(self) -> int:
        return LAYOUT_VERSION

    @abc.abstractmethod
    async def read_next(self) -> EditRecord | None:
        """Next record, or None at the end. Raises CorruptRecordError on damage."""

    async def close(self) -> None:
        return None

    def __aiter__(self) -> AsyncIterator[EditRecord]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[EditRecord]:
        while True:
            rec = await self.read_next()
            if rec is None:
                return
            yield rec


class Journal(abc.ABC):
    """A journal back end (seed 003 ``Journal``; HDFS ``JournalManager``)."""

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
        from qjournal.journal.streams import ChainedInputStream

        segs = await self.get_manifest(from_txid, in_progress_ok)
        plan = plan_read(segs, from_txid, to_txid, where=self.uri)
        return ChainedInputStream([(self, s) for s in plan], from_txid, to_txid)

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


def plan_read(segs: Iterable[SegmentInfo], from_txid: int, to_txid: int | None,
              where: str = "journal") -> list[SegmentInfo]:
    """Choose the segments that cover ``from_txid .. to_txid`` contiguously.

    Pure. Where several segments start at the same txid the longest wins
    (finalized before in-progress at equal length). A segment starting after
    the next needed txid is a gap.

    Raises:
        GapInTransactionsError: naming the missing range and ``where``.
    """
    by_start: dict[int, SegmentInfo] = {}
    for s in segs:
        cur = by_start.get(s.start_txid)
        if cur is None or (s.end_txid, not s.in_progress) > (cur.end_txid, not cur.in_progress):
            by_start[s.start_txid] = s
    plan: list[SegmentInfo] = []
    need = from_txid
    for start in sorted(by_start):
        s = by_start[start]
        if s.end_txid < need:
            continue
        if to_txid is not None and need > to_txid:
            break
        if start > need:
            raise GapInTransactionsError(
                f"{where}: gap in transactions: expected txid {need}, next segment starts at {start}",
                expected_txid=need, next_txid=start)
        plan.append(s)
        need = s.end_txid + 1
    if to_txid is not None and need <= to_txid:
        raise GapInTransactionsError(
            f"{where}: transactions {need}-{to_txid} are not available (log ends at {need - 1})",
            expected_txid=need, next_txid=None)
    return plan
