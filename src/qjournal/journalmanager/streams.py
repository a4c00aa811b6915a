"""Edit-log streams (HDFS-1580): the output and input stream interfaces, and the input combinators.

The interfaces: :class:`EditLogOutputStream` (``write``/``mark``/``sync`` of one open
segment), :class:`EditLogInputStream` (``read_next``, or ``read_batch`` for many records per
await, in txid order), :class:`SegmentInfo`
(one manifest entry) and :func:`plan_read` (which segments cover a txid range).

The combinators: a chain of segments, and failover between copies of one segment.

Why: a reader (a NameNode loading its log, a standby tailing it, the Spark
decoder) asks for "txids from A to B" and must not care that they are spread
over several segments, nor that one copy of a segment is damaged while another
journal holds a good one (seed 003 §6.6-§6.7: on a bad record, drop that
journal or reopen from the next txid elsewhere).

* :class:`ChainedInputStream` reads ``(source, SegmentInfo)`` parts in order,
  opening each lazily with ``source.open_segment(seg, from_txid)``, and checks
  that txids stay consecutive across parts.
* :class:`RedundantInputStream` holds several copies of the *same* segment
  (same start txid), longest first. It reads from the first; on an error (or
  an early end) it falls over to the next copy positioned just after the last
  txid it returned, refusing a copy that ends earlier than the failed one
  (reference §5.1: "all of the remaining edit log streams are shorter than the
  current one"). Each copy is tried at most once.

Invariants:

1. Both streams return strictly consecutive txids; a part that breaks the
   sequence raises ``CorruptRecordError``, never yields the record.
2. A txid is returned at most once, even across a failover.
3. ``RedundantInputStream`` never fails over to a copy shorter than the one
   that failed.
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterable, Sequence

from qjournal.errors import (CorruptRecordError, GapInTransactionsError, InvariantViolation, JournalError,
                             QJournalError)
from qjournal.protocol.segment import LAYOUT_VERSION, OP_DATA, EditRecord

log = logging.getLogger("qjournal.journalmanager.streams")


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

    def send_marked(self) -> None:
        """Start writing what is marked now, in the caller's step, without waiting (optional: the
        next :meth:`sync` waits for it, and sends whatever this did not). A stream that cannot
        start a write synchronously does nothing here; the quorum stream sends its batches, so a
        NameNode's group commit puts them on the wire before its request handler yields."""

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

    async def read_batch(self, max_records: int) -> list[EditRecord]:
        """The next 1 to ``max_records`` records (a new list the caller owns), or ``[]`` at the end.

        The records and errors of as many ``read_next`` calls: a reader that replays many edits
        (the tailer) pays one await per batch instead of one per record through every stream
        layer. This default loops over ``read_next`` and stops at the first None; the built-in
        streams override it (and answer ``read_next`` with a batch of one). An error after some
        records were taken is raised by the next call, once those records are returned.
        """
        err: BaseException | None = getattr(self, "_batch_error", None)
        if err is not None:
            self._batch_error = None
            raise err
        out: list[EditRecord] = []
        while len(out) < max_records:
            try:
                rec = await self.read_next()
            except (QJournalError, OSError) as e:
                if not out:
                    raise
                self._batch_error = e
                break
            if rec is None:
                break
            out.append(rec)
        return out

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


def check_consecutive(recs: Sequence[EditRecord], first_txid: int, what: str) -> None:
    """Raise unless ``recs`` hold the txids ``first_txid``, ``first_txid + 1``, ... (a batch's rule).

    Raises:
        CorruptRecordError: naming ``what`` returned the first txid out of sequence.
    """
    if [r.txid for r in recs] == list(range(first_txid, first_txid + len(recs))):
        return
    k = next(k for k, r in enumerate(recs) if r.txid != first_txid + k)
    raise CorruptRecordError(f"{what} returned txid {recs[k].txid}, expected {first_txid + k}",
                             txid=recs[k].txid, expected_txid=first_txid + k)


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


class ChainedInputStream(EditLogInputStream):
    """Reads txids ``from_txid .. to_txid`` across segments in order.

    Args:
        parts: ``(source, SegmentInfo)`` pairs sorted by start txid; ``source``
            has ``async open_segment(seg, from_txid)`` (a Journal, or a
            redundant source built by JournalSet).
        from_txid: first txid returned.
        to_txid: last txid returned (inclusive); None reads to the end of the last part.
    """

    def __init__(self, parts: Sequence[tuple[Any, SegmentInfo]], from_txid: int,
                 to_txid: int | None = None) -> None:
        self._parts = list(parts)
        self._from = from_txid
        self._to = to_txid
        self._index = 0
        self._current: EditLogInputStream | None = None
        self._next_txid = from_txid
        self._version: int | None = None

    @property
    def first_txid(self) -> int:
        return self._from

    @property
    def last_txid(self) -> int:
        if self._to is not None:
            return self._to
        if self._parts:
            return self._parts[-1][1].end_txid
        return self._from - 1

    @property
    def version(self) -> int:
        if self._current is not None:
            return self._current.version
        return super().version

    async def read_next(self) -> EditRecord | None:
        """The next txid of the range, or None at its end (see :meth:`read_batch`)."""
        recs = await self.read_batch(1)
        return recs[0] if recs else None

    async def read_batch(self, max_records: int) -> list[EditRecord]:
        """The next txids of the range (at most ``max_records``, from one part), or ``[]`` at its end.

        Raises:
            CorruptRecordError: a part returned a txid out of sequence or is damaged.
            GapInTransactionsError: the parts ran out before ``to_txid``.
        """
        while True:
            if self._to is not None and self._next_txid > self._to:
                await self.close()
                return []
            if self._current is None:
                if self._index >= len(self._parts):
                    if self._to is not None and self._next_txid <= self._to:
                        raise GapInTransactionsError(
                            f"transactions {self._next_txid}-{self._to} are not available: "
                            f"the segments end at txid {self._next_txid - 1}",
                            expected_txid=self._next_txid)
                    return []
                source, s = self._parts[self._index]
                if s.end_txid < self._next_txid:
                    self._index += 1
                    continue
                if s.start_txid > self._next_txid:
                    raise GapInTransactionsError(
                        f"{getattr(source, 'uri', source)}: gap in transactions: expected txid "
                        f"{self._next_txid}, next segment starts at {s.start_txid}",
                        expected_txid=self._next_txid, next_txid=s.start_txid)
                self._current = await source.open_segment(s, self._next_txid)
            want = max_records if self._to is None else min(max_records, self._to - self._next_txid + 1)
            recs = await self._current.read_batch(want)
            if not recs:
                s = self._parts[self._index][1]
                if self._next_txid <= s.end_txid:
                    raise CorruptRecordError(
                        f"segment {s.start_txid}-{s.end_txid} ended at txid {self._next_txid - 1}, "
                        f"before its listed end", txid=self._next_txid - 1, expected_txid=s.end_txid)
                await self._current.close()
                self._current = None
                self._index += 1
                continue
            check_consecutive(recs, self._next_txid, "stream")
            self._next_txid += len(recs)
            return recs

    async def close(self) -> None:
        if self._current is not None:
            cur, self._current = self._current, None
            await cur.close()
        self._index = len(self._parts)


class RedundantInputStream(EditLogInputStream):
    """Several copies of one segment; reads the best and fails over on error.

    Args:
        candidates: ``(source, SegmentInfo)`` pairs, all with the same start txid.
            They are ordered longest first (finalized before in-progress at equal
            length); the caller's order breaks remaining ties (put local copies first).
        from_txid: first txid returned.
    """

    def __init__(self, candidates: Sequence[tuple[Any, SegmentInfo]], from_txid: int | None = None) -> None:
        if not candidates:
            raise InvariantViolation("RedundantInputStream needs at least one candidate")
        starts = sorted({c[1].start_txid for c in candidates})
        if len(starts) != 1:
            raise InvariantViolation(f"RedundantInputStream candidates start at different txids {starts}")
        indexed = list(enumerate(candidates))
        indexed.sort(key=lambda ic: (-ic[1][1].end_txid, ic[1][1].in_progress, ic[0]))
        self._candidates = [c for _, c in indexed]
        self._start = starts[0]
        self._from = self._start if from_txid is None else from_txid
        self._next_txid = self._from
        self._index = 0
        self._current: EditLogInputStream | None = None
        self._errors: list[str] = []

    @property
    def first_txid(self) -> int:
        return self._from

    @property
    def last_txid(self) -> int:
        return self._candidates[0][1].end_txid

    @property
    def version(self) -> int:
        if self._current is not None:
            return self._current.version
        return super().version

    def _current_end(self) -> int:
        return self._candidates[self._index][1].end_txid

    async def _fail_over(self, err: BaseException) -> None:
        source, s = self._candidates[self._index]
        where = getattr(source, "uri", repr(source))
        self._errors.append(f"{where}: {err}")
        log.warning("edit log stream failed; failing over", extra={
            "journal": where, "segment_txid": s.start_txid, "next_txid": self._next_txid,
            "reason": str(err)})
        if self._current is not None:
            cur, self._current = self._current, None
            try:
                await cur.close()
            except Exception:  # closing a broken stream is best effort
                pass
        failed_end = s.end_txid
        self._index += 1
        while self._index < len(self._candidates):
            if self._candidates[self._index][1].end_txid < failed_end:
                raise JournalError(
                    f"segment {self._start}: got an error at txid {self._next_txid}; all of the remaining "
                    f"copies end before txid {failed_end}, the end of the failed copy; refusing to continue "
                    f"(metadata would be lost): {'; '.join(self._errors)}",
                    segment_txid=self._start, txid=self._next_txid)
            if self._candidates[self._index][1].end_txid >= self._next_txid:
                return
            self._index += 1
        raise JournalError(
            f"segment {self._start}: no copy left to read txid {self._next_txid} from: "
            f"{'; '.join(self._errors)}", segment_txid=self._start, txid=self._next_txid)

    async def read_next(self) -> EditRecord | None:
        """The next record, failing over between copies on error (see :meth:`read_batch`)."""
        recs = await self.read_batch(1)
        return recs[0] if recs else None

    async def read_batch(self, max_records: int) -> list[EditRecord]:
        """The next records (at most ``max_records``), failing over between copies on error.

        Raises:
            JournalError: every usable copy failed (their errors are listed).
        """
        while True:
            if self._index >= len(self._candidates):
                return []
            if self._next_txid > self._current_end():
                await self.close()
                return []
            try:
                if self._current is None:
                    source, s = self._candidates[self._index]
                    self._current = await source.open_segment(s, self._next_txid)
                recs = await self._current.read_batch(min(max_records, self._current_end() - self._next_txid + 1))
                if not recs:
                    raise CorruptRecordError(
                        f"premature end of file at txid {self._next_txid - 1}; expected the copy to "
                        f"reach {self._current_end()}", txid=self._next_txid - 1,
                        expected_txid=self._current_end())
                check_consecutive(recs, self._next_txid, "copy")
            except (QJournalError, OSError) as e:
                await self._fail_over(e)
                continue
            self._next_txid += len(recs)
            return recs

    async def close(self) -> None:
        if self._current is not None:
            cur, self._current = self._current, None
            await cur.close()
        self._index = len(self._candidates)
