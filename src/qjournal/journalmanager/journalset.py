"""JournalSet: a JournalManager made of Journals, written in parallel, read from the best copy.

Why: a NameNode writes every transaction to its local directories and to the
shared journal (seed 003 §7). One slow or broken disk must not stop it while
another copy is healthy, and a copy that comes back must be used again. This
is HDFS's ``JournalSet``.

Theory of operation:

* Writing. ``start_log_segment`` opens a stream on every journal; the set's
  stream forwards ``write``/``mark`` to each and ``sync`` runs every journal's
  sync concurrently (``asyncio.gather``; a set of one journal awaits it directly). A journal whose start, write or sync
  fails is marked *failed* (logged with the reason), its stream aborted, and
  it is skipped from then on. The set's call fails with
  ``NoJournalsAvailableError`` only when no journal is left, or when a
  ``required`` journal failed.
* Restore (seed 003 §6.2-§6.3). At the next ``start_log_segment`` every failed
  journal is retried: its unfinalized segment is recovered (finalized at its
  last valid txid) and a new segment is started at the new txid. A restored
  journal therefore lacks the txids it missed; its manifest has a hole that
  readers route around through the other journals.
* Reading. Manifests of every journal are merged: per start txid the longest
  copy (finalized preferred) stands for the segment, and every copy with that
  start becomes a candidate of a
  :class:`~qjournal.journalmanager.streams.RedundantInputStream`, so a damaged copy
  falls over to another journal's copy in mid-read. A journal marked failed
  (its disk refused a write) still lends its *finalized* segments: they may be
  the only copy of acknowledged txids (a member that failed during segment S and
  was restored at S+1 lacks S; the member that held S may have failed at the
  start of S+1). A journal whose manifest cannot be read is skipped (logged).
* ``format`` must succeed on every journal; ``recover_unfinalized_segments``,
  ``finalize_log_segment`` and ``purge_logs_older_than`` go to all healthy
  journals, failures marking the journal failed.

Invariants:

1. Txids reaching the set's stream are consecutive (checked once, in the set,
   so a caller's mistake does not mark healthy journals failed).
2. ``sync`` returns only when every journal still in the set has synced; a
   journal that did not is out of the set before ``sync`` returns.
3. ``InvariantViolation`` from any journal propagates; it never marks a
   journal failed.
4. Journals are visited in the order given to the constructor.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from qjournal.errors import (
    InvariantViolation,
    JournalOutOfSyncError,
    NoJournalsAvailableError,
    QJournalError,
    SegmentNotFoundError,
)
from qjournal.journalmanager.streams import EditLogInputStream, EditLogOutputStream, SegmentInfo, plan_read
from qjournal.journalmanager.base import JournalManager
from qjournal.protocol.messages import NamespaceInfo
from qjournal.journalmanager.streams import ChainedInputStream, RedundantInputStream
from qjournal.protocol.segment import (
    DEFAULT_MAX_RECORD_BYTES,
    LAYOUT_VERSION,
    OP_DATA,
    encode_record,
    scan_batch,
)

log = logging.getLogger("qjournal.journalmanager.journalset")


@dataclass(eq=False)
class JournalAndStream:
    """One member of a JournalSet with its current stream and health."""

    journal: JournalManager
    stream: EditLogOutputStream | None = None
    failed: bool = False
    failure: str = ""
    #: txid from which this journal holds the log again after a restore (None: never failed)
    restored_at_txid: int | None = None
    failures: int = field(default=0)

    @property
    def name(self) -> str:
        return self.journal.uri or repr(self.journal)


class JournalSet(JournalManager):
    """Several journals behaving as one (seed 003 §7).

    Args:
        journals: the members, in preference order for reads (local first).
        uri: a name for messages (default: the members' URIs joined by ``,``).
    """

    def __init__(self, journals: Sequence[JournalManager], uri: str | None = None) -> None:
        if not journals:
            raise NoJournalsAvailableError("a JournalSet needs at least one journal")
        self.members = [JournalAndStream(j) for j in journals]
        self.uri = uri or ",".join(m.name for m in self.members)
        self.required = any(j.required for j in journals)
        #: the smallest record limit among the members (checked before forwarding a write)
        self.max_record_bytes = min(int(getattr(j, "max_record_bytes", DEFAULT_MAX_RECORD_BYTES))
                                    for j in journals)
        self._stream: JournalSetOutputStream | None = None

    # -- health -------------------------------------------------------------------------
    def healthy(self) -> list[JournalAndStream]:
        """Members not marked failed, in constructor order."""
        return [m for m in self.members if not m.failed]

    def failed(self) -> list[JournalAndStream]:
        """Members marked failed, in constructor order."""
        return [m for m in self.members if m.failed]

    async def _mark_failed(self, m: JournalAndStream, op: str, err: BaseException) -> None:
        m.failed = True
        m.failures += 1
        m.failure = f"{op}: {type(err).__name__}: {err}"
        log.error("journal failed; removed from the set", extra={
            "journal": m.name, "op": op, "reason": str(err), "error_type": type(err).__name__,
            "required": m.journal.required})
        st, m.stream = m.stream, None
        if st is not None:
            try:
                await st.abort()
            except Exception as e:  # best effort: the journal is already out
                log.warning("abort after failure failed", extra={"journal": m.name, "reason": str(e)})

    def _check_enough(self, op: str) -> None:
        """Raise if the set cannot go on (no journal left, or a required one failed)."""
        req = [m for m in self.members if m.failed and m.journal.required]
        if req:
            raise NoJournalsAvailableError(
                f"{op}: required journal {req[0].name} failed ({req[0].failure})",
                journal=req[0].name, op=op)
        if not self.healthy():
            detail = "; ".join(f"{m.name}: {m.failure}" for m in self.members)
            raise NoJournalsAvailableError(f"{op}: no journal left in the set ({detail})", op=op)

    async def _each(self, members: list[JournalAndStream], op: str,
                    fn: Callable[[JournalAndStream], Awaitable[Any]]) -> list[Any]:
        """Run ``fn`` on members concurrently; failures mark the member failed.

        Returns: results in member order (None for failed members).
        Raises: InvariantViolation from any member (invariant 3).
        """
        if len(members) == 1:  # the common HA set-up (the shared journal alone): no task, no gather
            try:
                results: list[Any] = [await fn(members[0])]
            except Exception as e:  # as gather(return_exceptions=True) hands it over
                results = [e]
        else:
            results = await asyncio.gather(*(fn(m) for m in members), return_exceptions=True)
        out = []
        for m, r in zip(members, results):
            if isinstance(r, InvariantViolation):
                raise r
            if isinstance(r, BaseException):
                if not isinstance(r, (QJournalError, OSError)):
                    # an unexpected error is still a failure of that journal, but say so loudly
                    log.exception("unexpected error from journal", exc_info=r,
                                  extra={"journal": m.name, "op": op})
                await self._mark_failed(m, op, r)
                out.append(None)
            else:
                out.append(r)
        return out

    # -- lifecycle ----------------------------------------------------------------------
    async def format(self, ns_info: NamespaceInfo, force: bool = False) -> None:
        """Format every journal; any failure fails the format (nothing is marked failed).

        Raises:
            The first member's error (JournalAlreadyFormattedError, JournalLockedError, ...).
        """
        results = await asyncio.gather(*(m.journal.format(ns_info, force) for m in self.members),
                                       return_exceptions=True)
        for m, r in zip(self.members, results):
            if isinstance(r, BaseException):
                raise r
        for m in self.members:
            m.failed, m.failure, m.restored_at_txid = False, "", None

    async def is_formatted(self) -> bool:
        """True when every journal is formatted."""
        res = await asyncio.gather(*(m.journal.is_formatted() for m in self.members))
        return all(res)

    async def has_some_data(self) -> bool:
        """True when any journal holds data."""
        res = await asyncio.gather(*(m.journal.has_some_data() for m in self.members))
        return any(res)

    async def recover_unfinalized_segments(self) -> None:
        """Recover every healthy journal; failures mark the journal failed.

        Raises:
            JournalOutOfSyncError: the set's own segment is still open (nothing is marked failed).
            NoJournalsAvailableError: none left, or a required one failed.
        """
        if self._stream is not None and not self._stream.closed:
            raise JournalOutOfSyncError(
                f"{self.uri}: cannot recover while segment {self._stream.segment_txid} is open for writing",
                txid=self._stream.segment_txid)
        await self._each(self.healthy(), "recover_unfinalized_segments",
                         lambda m: m.journal.recover_unfinalized_segments())
        self._check_enough("recover_unfinalized_segments")

    # -- writing ------------------------------------------------------------------------
    async def start_log_segment(self, txid: int,
                                layout_version: int = LAYOUT_VERSION) -> "JournalSetOutputStream":
        """Start a segment on every journal, first trying to restore failed ones.

        Raises:
            JournalOutOfSyncError: the previous segment is still open.
            NoJournalsAvailableError: no journal could start, or a required one failed.
        """
        if self._stream is not None and not self._stream.closed:
            raise JournalOutOfSyncError(
                f"{self.uri}: cannot start segment at txid {txid}: segment {self._stream.segment_txid} "
                f"is still open", txid=txid)
        to_restore = self.failed()
        restoring = {id(m) for m in to_restore}  # identity, not dataclass equality
        for m in to_restore:
            m.failed, m.failure = False, ""

        async def restore_and_start(m: JournalAndStream) -> EditLogOutputStream:
            if id(m) in restoring:
                await m.journal.recover_unfinalized_segments()
            return await m.journal.start_log_segment(txid, layout_version)

        members = self.healthy()
        streams = await self._each(members, "start_log_segment", restore_and_start)
        for m, st in zip(members, streams):
            m.stream = st
            if st is not None and id(m) in restoring:
                m.restored_at_txid = txid
                log.info("journal restored", extra={"journal": m.name, "txid": txid})
        self._check_enough("start_log_segment")
        self._stream = JournalSetOutputStream(self, txid, layout_version)
        return self._stream

    async def finalize_log_segment(self, first_txid: int, last_txid: int) -> None:
        """Finalize on every healthy journal.

        Raises:
            NoJournalsAvailableError: none left, or a required one failed.
        """
        st = self._stream
        if st is not None and st.segment_txid == first_txid and not st.closed:
            st.mark()
            await st.close()
        await self._each(self.healthy(), "finalize_log_segment",
                         lambda m: m.journal.finalize_log_segment(first_txid, last_txid))
        for m in self.members:
            m.stream = None
        self._check_enough("finalize_log_segment")

    async def purge_logs_older_than(self, min_txid_to_keep: int) -> None:
        """Purge on every healthy journal; failures mark the journal failed."""
        await self._each(self.healthy(), "purge_logs_older_than",
                         lambda m: m.journal.purge_logs_older_than(min_txid_to_keep))
        self._check_enough("purge_logs_older_than")

    # -- reading ------------------------------------------------------------------------
    async def _manifests(self, since_txid: int, in_progress_ok: bool) -> list[tuple[JournalManager, list[SegmentInfo]]]:
        """Every member's manifest; a failed member's finalized segments only (module docstring)."""
        members = self.members
        res = await asyncio.gather(*(m.journal.get_manifest(since_txid, in_progress_ok and not m.failed)
                                     for m in members), return_exceptions=True)
        out = []
        for m, r in zip(members, res):
            if isinstance(r, InvariantViolation):
                raise r
            if isinstance(r, BaseException):
                log.warning("cannot read manifest; skipping journal", extra={
                    "journal": m.name, "reason": str(r)})
                continue
            out.append((m.journal, r))
        return out

    @staticmethod
    def _group(manifests: list[tuple[JournalManager, list[SegmentInfo]]]) -> dict[int, list[tuple[JournalManager, SegmentInfo]]]:
        """Copies per start txid; a finalized copy drops the in-progress ones (HDFS-6777)."""
        groups: dict[int, list[tuple[JournalManager, SegmentInfo]]] = {}
        for journal, segs in manifests:
            for s in segs:
                groups.setdefault(s.start_txid, []).append((journal, s))
        for start in sorted(groups):
            g = groups[start]
            if any(not s.in_progress for _, s in g):
                groups[start] = [(j, s) for j, s in g if not s.in_progress]
        return groups

    @staticmethod
    def _best(copies: list[tuple[JournalManager, SegmentInfo]]) -> SegmentInfo:
        return max((s for _, s in copies), key=lambda s: (s.end_txid, not s.in_progress))

    async def get_manifest(self, since_txid: int = 0,
                           in_progress_ok: bool = False) -> list[SegmentInfo]:
        """The merged manifest: per start txid the longest copy (failed journals: finalized only)."""
        groups = self._group(await self._manifests(since_txid, in_progress_ok))
        return [self._best(groups[start]) for start in sorted(groups)]

    async def open_segment(self, seg: SegmentInfo, from_txid: int | None = None) -> EditLogInputStream:
        """A redundant stream over every copy of the segment starting at ``seg.start_txid``.

        Raises:
            SegmentNotFoundError: no journal lists it.
        """
        groups = self._group(await self._manifests(seg.start_txid, seg.in_progress))
        copies = groups.get(seg.start_txid)
        if not copies:
            raise SegmentNotFoundError(f"{self.uri}: no journal holds a segment starting at txid "
                                       f"{seg.start_txid}", txid=seg.start_txid)
        return RedundantInputStream(copies, from_txid)

    async def open_input(self, from_txid: int, to_txid: int | None = None,
                         in_progress_ok: bool = False) -> EditLogInputStream:
        """A stream over ``from_txid .. to_txid`` across segments and journals.

        Raises:
            GapInTransactionsError: no journal covers some txid of the range.
        """
        groups = self._group(await self._manifests(from_txid, in_progress_ok))
        best = [self._best(groups[start]) for start in sorted(groups)]
        plan = plan_read(best, from_txid, to_txid, where=self.uri)
        parts = [(_RedundantSource(groups[s.start_txid]), s) for s in plan]
        return ChainedInputStream(parts, from_txid, to_txid)

    async def confirm_writer(self) -> None:
        """Confirm on every required member that is not failed (the shared, fencing journal).

        Raises:
            what the required member raises (it is then the NameNode's fatal journal failure).
        """
        for m in self.members:
            if m.journal.required and not m.failed:
                await m.journal.confirm_writer()

    async def close(self) -> None:
        """Close the open stream (if any) and every journal."""
        if self._stream is not None and not self._stream.closed:
            try:
                await self._stream.close()
            except QJournalError as e:
                log.warning("closing the set's stream failed", extra={"journal": self.uri, "reason": str(e)})
        for m in self.members:
            try:
                await m.journal.close()
            except QJournalError as e:
                log.warning("closing a journal failed", extra={"journal": m.name, "reason": str(e)})


class _RedundantSource:
    """An ``open_segment`` provider over the copies of one segment (for ChainedInputStream)."""

    def __init__(self, copies: list[tuple[JournalManager, SegmentInfo]]) -> None:
        self.copies = copies
        self.uri = ",".join(j.uri for j, _ in copies)

    async def open_segment(self, seg: SegmentInfo, from_txid: int | None = None) -> EditLogInputStream:
        """A :class:`RedundantInputStream` over the copies, from ``from_txid``."""
        return RedundantInputStream(self.copies, from_txid)


class JournalSetOutputStream(EditLogOutputStream):
    """Forwards every call to the streams of the set's healthy members."""

    def __init__(self, jset: JournalSet, segment_txid: int, layout_version: int = LAYOUT_VERSION) -> None:
        self._set = jset
        self._segment_txid = segment_txid
        self._layout_version = layout_version
        self._last_written = segment_txid - 1
        self._marked = segment_txid - 1
        self._last_synced = segment_txid - 1
        self._to_abort: list[tuple[EditLogOutputStream, str]] = []
        self.closed = False

    async def _abort_failed(self) -> None:
        pending, self._to_abort = self._to_abort, []
        for st, name in pending:
            await _quiet_abort(st, name)

    def _live(self) -> list[JournalAndStream]:
        return [m for m in self._set.members if not m.failed and m.stream is not None]

    @property
    def segment_txid(self) -> int:
        return self._segment_txid

    @property
    def last_written_txid(self) -> int:
        return self._last_written

    @property
    def last_synced_txid(self) -> int:
        return self._last_synced

    @property
    def pending_bytes(self) -> int:
        live = self._live()
        return max((m.stream.pending_bytes for m in live if m.stream is not None), default=0)

    def _fail_members(self, op: str, failed: list[tuple[JournalAndStream, BaseException]]) -> None:
        for m, e in failed:
            m.failed = True
            m.failures += 1
            m.failure = f"{op}: {type(e).__name__}: {e}"
            log.error("journal failed; removed from the set", extra={
                "journal": m.name, "op": op, "reason": str(e), "required": m.journal.required})
            st, m.stream = m.stream, None
            if st is not None:
                self._to_abort.append((st, m.name))  # aborted at the next sync/close/abort
        if failed:
            self._set._check_enough(op)

    def _forward(self, op: str, fn: Callable[[EditLogOutputStream], None]) -> None:
        """Apply a synchronous call to each live stream; a failure marks that journal failed."""
        failed: list[tuple[JournalAndStream, BaseException]] = []
        for m in self._live():
            assert m.stream is not None
            try:
                fn(m.stream)
            except InvariantViolation:
                raise
            except (QJournalError, OSError) as e:
                failed.append((m, e))
        self._fail_members(op, failed)

    def _check_txid(self, txid: int) -> None:
        if self.closed:
            raise JournalOutOfSyncError(f"{self._set.uri}: stream of segment {self._segment_txid} is closed",
                                        txid=txid)
        if txid != self._last_written + 1:
            raise JournalOutOfSyncError(
                f"{self._set.uri}: write of txid {txid}, expected {self._last_written + 1}",
                txid=txid, expected_txid=self._last_written + 1)

    def write(self, txid: int, body: bytes, opcode: int = OP_DATA) -> None:
        """Buffer one record on every live journal.

        The record is checked here first (txid order, opcode, size against the
        smallest member limit), so a caller's mistake raises without marking
        any journal failed and without some members holding the record and
        others not.

        Raises:
            JournalOutOfSyncError: txid out of order.
            RecordTooLargeError / ValueError: as ``protocol.segment.encode_record``.
            NoJournalsAvailableError: the write failed on every journal or a required one.
        """
        if txid != self._last_written + 1 or self.closed:
            self._check_txid(txid)
        if len(body) > self._set.max_record_bytes or not 0 < opcode < 0xFF:
            encode_record(txid, opcode, body, self._set.max_record_bytes)  # raises the precise error
        failed = None
        for m in self._set.members:  # hot path: no closures, no list building
            st = m.stream
            if st is None or m.failed:
                continue
            try:
                st.write(txid, body, opcode)
            except InvariantViolation:
                raise
            except (QJournalError, OSError) as e:
                failed = (failed or []) + [(m, e)]
        if failed:
            self._fail_members("write", failed)
        self._last_written = txid

    def write_raw(self, data: bytes, first_txid: int, num_txns: int) -> None:
        """Buffer framed records on every live journal (validated once here; see :meth:`write`).

        Raises:
            CorruptRecordError: the bytes are not exactly ``num_txns`` valid records.
        """
        self._check_txid(first_txid)
        scan_batch(data, first_txid, num_txns, max_record_bytes=self._set.max_record_bytes,
                   where=f"{self._set.uri} batch {first_txid}")
        self._forward("write_raw", lambda s: s.write_raw(data, first_txid, num_txns))
        self._last_written = first_txid + num_txns - 1

    def set_version(self, layout_version: int) -> None:
        """Forward ``set_version`` to every live stream, all or none: a stream that refuses (a file journal
        after its first record, a quorum journal always) is a refusal of the call, not a failure of its journal,
        so the streams that took the new version are set back and the refusal is raised.

        Raises:
            JournalError (or the refusing stream's error): some journal cannot take ``layout_version`` now.
        """
        changed: list[EditLogOutputStream] = []
        for m in self._live():
            assert m.stream is not None
            try:
                m.stream.set_version(layout_version)
            except (QJournalError, OSError):
                for st in changed:
                    st.set_version(self._layout_version)
                raise
            changed.append(m.stream)
        self._layout_version = layout_version

    def mark(self) -> None:
        """End the batch on every live stream; the next ``sync`` covers it."""
        self._forward("mark", lambda s: s.mark())
        self._marked = self._last_written

    def send_marked(self) -> None:
        """Forward ``send_marked`` to every live stream (a refusal marks that journal failed)."""
        if not self._to_abort:  # else the next sync aborts the failed streams first
            self._forward("send_marked", lambda s: s.send_marked())

    async def sync(self) -> None:
        """Sync every live journal concurrently (invariant 2).

        Raises:
            NoJournalsAvailableError: no journal synced, or a required one failed.
        """
        await self._abort_failed()
        upto = self._marked
        live = self._live()
        await self._set._each(live, "sync", lambda m: m.stream.sync())  # type: ignore[union-attr]
        self._set._check_enough("sync")
        if upto > self._last_synced:
            self._last_synced = upto

    async def close(self) -> None:
        """Sync and close every live stream."""
        if self.closed:
            return
        await self._abort_failed()
        self.mark()
        try:
            await self._set._each(self._live(), "close", lambda m: m.stream.close())  # type: ignore[union-attr]
            self._set._check_enough("close")
            self._last_synced = self._marked
        finally:
            self.closed = True

    async def abort(self) -> None:
        """Abort every live stream without syncing."""
        await self._abort_failed()
        for m in self._live():
            assert m.stream is not None
            await _quiet_abort(m.stream, m.name)
        self.closed = True


async def _quiet_abort(stream: EditLogOutputStream, name: str) -> None:
    try:
        await stream.abort()
    except Exception as e:  # the journal is out of the set already
        log.warning("abort failed", extra={"journal": name, "reason": str(e)})
