"""Reading a quorum journal: merge the manifests, stream a segment with replica failover.

Why: a reader (the standby NameNode, ``qjournal log read``, the Spark
pipeline) must see, for every txid, the same bytes whichever JournalNode
serves it (seed 000 §1.3.2 requirement 4), and must keep reading when one
JournalNode dies mid-read (seed 000 §3, reference §5.1).

Theory of operation:

* :func:`merge_manifests` (pure) takes the ``get_edit_log_manifest`` answers of
  a quorum, groups the segments by start txid and keeps the best copy of each:
  finalized beats in-progress (HDFS-6777: never mix them), then the longer
  copy. An in-progress copy is cut at the highest committed txid a responder
  reported *from the writer that wrote the copy* (invariant 6), so a reader never
  sees a txid that recovery could still drop (requirement 3). Every node holding a copy at least as long as the chosen one
  is a *replica* of it.
* :class:`QuorumSegmentInputStream` downloads the segment from one replica
  over HTTP (``/getJournal``) as a :class:`~qjournal.transport.download.SegmentDownload`
  and decodes it while it arrives (:class:`~qjournal.protocol.segment.SegmentDecoder`):
  each record is returned once its own checksum verified, so memory holds one
  chunk (``qjournal.segment-transfer.chunk.bytes``) and one record, whatever the
  segment's size. The whole-body CRC32C header is computed over the chunks and
  checked once the body ended, before the segment's last record is returned;
  a body that ends before the chosen end txid is a short copy. On any failure
  (connection, status, checksum, short copy, corrupt record, a txid out of
  order) it moves to the next replica and skips the txids it already returned.

Invariants:

1. A replica is never shorter than the chosen copy of its segment: failover
   never goes to a shorter copy.
2. Records are returned in consecutive txid order from ``from_txid`` to the
   chosen end; each one passed its record checksum, and the replica's records
   run consecutively from the segment's start. The last one is returned only
   after the replica's whole body matched its CRC32C header.
3. Replicas are tried in a fixed (sorted) order.
4. In-progress copies come only from nodes whose last writer epoch is the newest
   among the holders (when the manifests report it), so an out-of-sync node's
   copy left by an older writer is never read.
5. An in-progress copy never reaches past the start of a later segment that any
   responder lists: a writer starts segment ``s'`` only once the segments before
   it end at ``s' - 1`` on a quorum, so the txids ``>= s'`` of an older in-progress
   copy were written by a deposed writer and never committed. (Found by the
   whole-cluster simulator, seed 529: an out-of-sync JournalNode still held the
   fenced writer's in-progress segment 269-303, the only copy in an answer whose
   other responder listed the new writer's segment 303 but, asked from 303, not
   the finalized 269-302; the committed txid, 311, came from the new writer.)
   Consequently the merged segments never overlap (checked).
6. An in-progress copy written in epoch ``E`` (its holders' last writer epoch) is
   cut at the highest committed txid reported by epoch ``E`` itself (a manifest's
   ``committed_epoch``; one that does not report it counts for any epoch). A
   committed txid reported by a newer writer describes that writer's history, not
   the older writer's unfinished tail. (Found by the journal simulator, seed 1256:
   a node out of sync for the new writer of epoch 3 still held the epoch-2
   writer's in-progress 8-9, never committed, while epoch 3's heartbeats had told
   it "committed 12"; the other answer in the quorum had been computed before
   epoch 3 started a segment, so the reader returned the lost 8-9.)
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from qjournal.errors import CorruptSegmentError, InvariantViolation, JournalError, QJournalError
from qjournal.journalmanager.streams import EditLogInputStream, SegmentInfo
from qjournal.protocol.messages import Manifest
from qjournal.protocol.segment import (DEFAULT_MAX_RECORD_BYTES, INVALID_TXID, EditRecord, SegmentDecoder,
                                       crc32c)
from qjournal.transport.download import SegmentDownload

log = logging.getLogger(__name__)

__all__ = ["MergedManifest", "merge_manifests", "QuorumSegmentInputStream", "Fetcher"]


@dataclass(frozen=True, slots=True)
class MergedManifest:
    """The readable segments of a quorum and where each can be read.

    Attributes:
        segments: chosen copy per start txid, sorted.
        replicas: start txid -> node names holding a copy at least that long (sorted).
        committed_txid: highest committed txid reported (INVALID_TXID when unknown).
    """

    segments: tuple[SegmentInfo, ...]
    replicas: dict[int, tuple[str, ...]]
    committed_txid: int


def merge_manifests(manifests: Mapping[str, Manifest], in_progress_ok: bool,
                    writer_epochs: Mapping[str, int] | None = None) -> MergedManifest:
    """Merge per-node manifests into one readable view (pure).

    Args:
        manifests: node name -> its manifest.
        in_progress_ok: include in-progress segments (cut at the committed txid).
        writer_epochs: node name -> its ``last_writer_epoch`` when known. In-progress
            copies of a segment are only taken from the nodes with the newest writer
            epoch among its holders: an out-of-sync node may keep an older writer's
            in-progress copy of the same start txid whose bytes differ (invariant 4).

    Returns:
        A :class:`MergedManifest`.
    """
    def committed_by(epoch: int | None) -> int:
        """The highest committed txid reported by ``epoch`` (invariant 6; None: by any)."""
        best = INVALID_TXID
        for name in sorted(manifests):
            m = manifests[name]
            if (m.committed_txid != INVALID_TXID and m.committed_txid > best
                    and (epoch is None or m.committed_epoch is None or m.committed_epoch == epoch)):
                best = m.committed_txid
        return best

    committed = committed_by(None)
    copies: dict[int, list[tuple[str, Any]]] = {}
    starts: set[int] = set()
    for name in sorted(manifests):
        for s in manifests[name].segments:
            starts.add(s.start_txid)
            if s.in_progress and not in_progress_ok:
                continue
            copies.setdefault(s.start_txid, []).append((name, s))
    ordered_starts = sorted(starts)
    segments: list[SegmentInfo] = []
    replicas: dict[int, tuple[str, ...]] = {}
    for start in sorted(copies):
        group = copies[start]
        finalized = [(n, s) for n, s in group if not s.in_progress]
        if finalized:
            end = max(s.end_txid for _, s in finalized)
            holders = tuple(n for n, s in finalized if s.end_txid == end)
            seg = SegmentInfo(start, end, False)
        else:
            newest: int | None = None
            if writer_epochs:
                newest = max(writer_epochs.get(n, -1) for n, _ in group)
                group = [(n, s) for n, s in group if writer_epochs.get(n, -1) == newest]
            end = max(s.end_txid for _, s in group)
            cut = committed_by(newest)  # invariant 6
            if cut == INVALID_TXID:
                continue
            end = min(end, cut)
            later = bisect.bisect_right(ordered_starts, start)
            if later < len(ordered_starts):  # invariant 5
                end = min(end, ordered_starts[later] - 1)
            if end < start:
                continue
            holders = tuple(n for n, s in group if s.end_txid >= end)
            seg = SegmentInfo(start, end, True)
        if segments and segments[-1].end_txid >= seg.start_txid:
            raise InvariantViolation(
                f"merged manifest overlaps: {segments[-1]} then {seg} "
                f"(from {', '.join(sorted(manifests))})")
        segments.append(seg)
        replicas[start] = holders
    return MergedManifest(tuple(segments), replicas, committed)


#: fetch(node name, segment start txid, in_progress_ok) -> the node's copy, as it streams in
Fetcher = Callable[[str, int, bool], Awaitable[SegmentDownload]]


class QuorumSegmentInputStream(EditLogInputStream):
    """Records of one segment, read from any of its replicas while they stream in.

    Args:
        jid: journal id (messages).
        seg: the chosen copy (its end is the last txid returned).
        replicas: node names to read from, in order (invariant 3).
        fetch: starts the download of a node's copy of the segment.
        from_txid: first txid to return (default: the segment start).
        max_record_bytes: the largest record accepted (``dfs.namenode.max.op.size``).
        on_bytes: told the size of every chunk downloaded (the reader's byte counters).
    """

    def __init__(self, jid: str, seg: SegmentInfo, replicas: tuple[str, ...], fetch: Fetcher,
                 from_txid: int | None = None, *,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 on_bytes: Callable[[int], None] | None = None) -> None:
        self.jid = jid
        self.seg = seg
        self.replicas = list(replicas)
        self._fetch = fetch
        self._next_txid = seg.start_txid if from_txid is None else from_txid
        if not seg.start_txid <= self._next_txid <= seg.end_txid + 1:
            raise JournalError(f"journal {jid!r}: txid {self._next_txid} is outside segment "
                               f"{seg.start_txid}-{seg.end_txid}", jid=jid)
        self._from_txid = self._next_txid
        self._max_record_bytes = max_record_bytes
        self._on_bytes = on_bytes
        self._download: SegmentDownload | None = None
        self._decoder: SegmentDecoder | None = None
        self._body_crc = 0
        self._replica_txid = seg.start_txid  # the next txid the current replica must send
        self._replica_idx = -1
        self._errors: list[str] = []
        self.current_replica: str | None = None

    @property
    def first_txid(self) -> int:
        return self._from_txid

    @property
    def last_txid(self) -> int:
        return self.seg.end_txid

    def _where(self) -> str:
        return f"segment {self.seg.start_txid} from {self.current_replica}"

    async def _open_next(self) -> None:
        while True:
            self._replica_idx += 1
            if self._replica_idx >= len(self.replicas):
                raise JournalError(
                    f"journal {self.jid!r}: cannot read txid {self._next_txid} of segment "
                    f"{self.seg.start_txid}-{self.seg.end_txid} from any replica: "
                    f"{'; '.join(self._errors) or 'no replica holds it'}",
                    jid=self.jid, txid=self._next_txid)
            name = self.replicas[self._replica_idx]
            try:
                self._download = await self._fetch(name, self.seg.start_txid, self.seg.in_progress)
            except (QJournalError, OSError) as e:  # aiohttp client errors derive from OSError
                self._errors.append(f"{name}: {type(e).__name__}: {e}")
                log.warning("journal %r: segment %d from %s failed: %s", self.jid,
                            self.seg.start_txid, name, e)
                continue
            self.current_replica = name
            self._decoder = SegmentDecoder(where=f"journal {self.jid!r}: {self._where()}",
                                           max_record_bytes=self._max_record_bytes)
            self._body_crc = 0
            self._replica_txid = self.seg.start_txid
            return

    async def _drop_replica(self, why: str) -> None:
        self._errors.append(f"{self.current_replica}: {why}")
        log.warning("journal %r: %s failed at txid %d: %s", self.jid, self._where(), self._next_txid, why)
        download, self._download, self._decoder = self._download, None, None
        if download is not None:
            await download.aclose()

    async def _feed_next_chunk(self) -> bool:
        """Feed the decoder the next chunk; False at the end of the body (whose CRC32C is then checked).

        Raises:
            TransportError, CorruptSegmentError.
        """
        assert self._download is not None and self._decoder is not None
        chunk = await self._download.next_chunk()
        if chunk is None:
            self._check_body_crc()
            return False
        self._account(chunk)
        self._decoder.feed(chunk)
        return True

    def _account(self, chunk: bytes) -> None:
        """Count a downloaded chunk and fold it into the body's CRC32C."""
        if self._on_bytes is not None:
            self._on_bytes(len(chunk))
        self._body_crc = crc32c(chunk, self._body_crc)

    def _check_body_crc(self) -> None:
        assert self._download is not None
        want = self._download.crc
        if want is not None and self._body_crc != want:
            raise CorruptSegmentError(
                f"journal {self.jid!r}: {self._where()}: body checksum mismatch (header {want:08x}, "
                f"body {self._body_crc:08x})", where=self._where())

    async def _drain(self) -> None:
        """Read the rest of the body without decoding it, to check its CRC32C (invariant 2)."""
        assert self._download is not None
        while (chunk := await self._download.next_chunk()) is not None:
            self._account(chunk)
        self._check_body_crc()

    async def _batch_from_replica(self, max_records: int) -> list[EditRecord]:
        """The current replica's next records (consecutive from the segment start), ``[]`` at its end."""
        assert self._decoder is not None
        while True:
            recs = self._decoder.next_records(max_records, expected_txid=self._replica_txid)
            if recs:
                self._replica_txid += len(recs)
                return recs
            if self._decoder.ended:
                await self._drain()
                return []
            if not await self._feed_next_chunk():
                return []

    async def read_next(self) -> EditRecord | None:
        """Next record, or None past the segment's chosen end (see :meth:`read_batch`)."""
        recs = await self.read_batch(1)
        return recs[0] if recs else None

    async def read_batch(self, max_records: int) -> list[EditRecord]:
        """The next records (at most ``max_records``), or ``[]`` past the segment's chosen end
        (invariant 2). Records decoded before a replica failed are returned before the next
        replica is opened."""
        out: list[EditRecord] = []
        end = self.seg.end_txid
        while len(out) < max_records and self._next_txid <= end:
            if self._download is None:
                if out:
                    break
                await self._open_next()
            # a new replica starts at the segment start: the txids returned already are read again
            want = min(end, self._next_txid - 1 + max_records - len(out)) - self._replica_txid + 1
            try:
                recs = await self._batch_from_replica(want)
                if recs and recs[-1].txid == end:
                    await self._drain()  # the body's CRC32C before the last record (invariant 2)
            except (QJournalError, OSError) as e:
                await self._drop_replica(f"{type(e).__name__}: {e}")
                continue
            if not recs:
                assert self._decoder is not None
                problem = self._decoder.finish()
                await self._drop_replica(f"premature end of segment at txid {self._next_txid}"
                                         + (f" ({problem.kind}: {problem.detail})" if problem else ""))
                continue
            if recs[0].txid < self._next_txid:  # returned already, from this replica or an earlier one
                recs = recs[self._next_txid - recs[0].txid:]
            out += recs
            self._next_txid += len(recs)
        if self._next_txid > end:
            await self.close()
        return out

    async def close(self) -> None:
        """Stop the current download."""
        download, self._download, self._decoder = self._download, None, None
        if download is not None:
            await download.aclose()

