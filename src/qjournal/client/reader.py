"""Reading a quorum journal: merge the manifests, stream a segment with replica failover.

Why: a reader (the standby NameNode, ``qjournal log read``, the Spark
pipeline) must see, for every txid, the same bytes whichever JournalNode
serves it (seed 000 §1.3.2 requirement 4), and must keep reading when one
JournalNode dies mid-read (seed 000 §3, reference §5.1).

Theory of operation:

* :func:`merge_manifests` (pure) takes the ``get_edit_log_manifest`` answers of
  a quorum, groups the segments by start txid and keeps the best copy of each:
  finalized beats in-progress (HDFS-6777: never mix them), then the longer
  copy. An in-progress copy is cut at the highest committed txid any responder
  reported, so a reader never sees a txid that recovery could still drop
  (requirement 3). Every node holding a copy at least as long as the chosen one
  is a *replica* of it.
* :class:`QuorumSegmentInputStream` fetches the segment from one replica over
  HTTP (``/getJournal``), verifies the whole-body CRC32C header and that the
  copy holds every txid up to the chosen end, then yields records. On any
  failure (connection, status, checksum, short copy, corrupt record) it moves
  to the next replica and skips the txids it already returned.

Invariants:

1. A replica is never shorter than the chosen copy of its segment: failover
   never goes to a shorter copy.
2. Records are returned in consecutive txid order from ``from_txid`` to the
   chosen end; each one passed its record checksum.
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
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

import crc32c as _crc32c

from qjournal.errors import (CorruptRecordError, CorruptSegmentError, InvariantViolation,
                             JournalError, QJournalError, TransportError)
from qjournal.journalmanager.streams import EditLogInputStream, SegmentInfo
from qjournal.protocol.messages import Manifest
from qjournal.protocol.segment import (HEADER_SIZE, INVALID_TXID, EditRecord, decode_header,
                                       iter_records, scan_segment)

log = logging.getLogger(__name__)

__all__ = ["MergedManifest", "merge_manifests", "QuorumSegmentInputStream"]


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
    committed = INVALID_TXID
    for name in sorted(manifests):
        c = manifests[name].committed_txid
        if c != INVALID_TXID and c > committed:
            committed = c
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
            if writer_epochs:
                newest = max(writer_epochs.get(n, -1) for n, _ in group)
                group = [(n, s) for n, s in group if writer_epochs.get(n, -1) == newest]
            end = max(s.end_txid for _, s in group)
            if committed == INVALID_TXID:
                continue
            end = min(end, committed)
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


#: fetch(node name, segment start txid, in_progress_ok) -> (body bytes, crc32c header or None)
Fetcher = Callable[[str, int, bool], Awaitable[tuple[bytes, int | None]]]


class QuorumSegmentInputStream(EditLogInputStream):
    """Records of one segment, read from any of its replicas.

    Args:
        jid: journal id (messages).
        seg: the chosen copy (its end is the last txid returned).
        replicas: node names to read from, in order (invariant 3).
        fetch: downloads a node's copy of the segment.
        from_txid: first txid to return (default: the segment start).
    """

    def __init__(self, jid: str, seg: SegmentInfo, replicas: tuple[str, ...], fetch: Fetcher,
                 from_txid: int | None = None) -> None:
        self.jid = jid
        self.seg = seg
        self.replicas = list(replicas)
        self._fetch = fetch
        self._next_txid = seg.start_txid if from_txid is None else from_txid
        if not seg.start_txid <= self._next_txid <= seg.end_txid + 1:
            raise JournalError(f"journal {jid!r}: txid {self._next_txid} is outside segment "
                               f"{seg.start_txid}-{seg.end_txid}", jid=jid)
        self._from_txid = self._next_txid
        self._iter: Any = None
        self._replica_idx = -1
        self._errors: list[str] = []
        self.current_replica: str | None = None

    @property
    def first_txid(self) -> int:
        return self._from_txid

    @property
    def last_txid(self) -> int:
        return self.seg.end_txid

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
                body, crc = await self._fetch(name, self.seg.start_txid, self.seg.in_progress)
                self._iter = self._validate(name, body, crc)
                self.current_replica = name
                return
            except QJournalError as e:
                self._errors.append(f"{name}: {type(e).__name__}: {e}")
                log.warning("journal %r: segment %d from %s failed: %s", self.jid,
                            self.seg.start_txid, name, e)
            except OSError as e:  # aiohttp client errors derive from OSError or ClientError
                self._errors.append(f"{name}: {type(e).__name__}: {e}")

    def _validate(self, name: str, body: bytes, crc: int | None):
        where = f"segment {self.seg.start_txid} from {name}"
        if crc is not None and _crc32c.crc32c(body) != crc:
            raise CorruptSegmentError(f"journal {self.jid!r}: {where}: body checksum mismatch",
                                      where=where)
        decode_header(body, where)
        scan = scan_segment(body, expected_first_txid=self.seg.start_txid,
                            stop_after_txid=self.seg.end_txid)
        if scan.num_records == 0 or scan.last_txid < self.seg.end_txid:
            raise CorruptSegmentError(
                f"journal {self.jid!r}: {where} ends at txid {scan.last_txid}, shorter than the "
                f"expected end {self.seg.end_txid}", where=where)
        return iter_records(memoryview(body)[:scan.valid_length], HEADER_SIZE, where=where)

    async def read_next(self) -> EditRecord | None:
        """Next record, or None past the segment's chosen end (invariant 2)."""
        while True:
            if self._next_txid > self.seg.end_txid:
                return None
            if self._iter is None:
                await self._open_next()
            try:
                rec = next(self._iter, None)
            except CorruptRecordError as e:
                self._errors.append(f"{self.current_replica}: {e}")
                self._iter = None
                continue
            if rec is None:
                self._errors.append(f"{self.current_replica}: premature end of segment at txid "
                                    f"{self._next_txid}")
                self._iter = None
                continue
            if rec.txid < self._next_txid:
                continue
            if rec.txid != self._next_txid:
                self._errors.append(f"{self.current_replica}: txid {rec.txid} where "
                                    f"{self._next_txid} was expected")
                self._iter = None
                continue
            self._next_txid += 1
            return rec

    async def close(self) -> None:
        """Drop the downloaded copy."""
        self._iter = None


async def http_fetch(session: Any, url: str, timeout_s: tuple[float, float]) -> tuple[bytes, int | None]:
    """GET a segment; returns the body and its ``X-Qjournal-Crc32c`` (None if absent).

    Raises:
        TransportError: a connection failure, a status other than 200, or a short body.
    """
    import aiohttp  # noqa: PLC0415 - imported where used to keep the module light

    timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s[0], sock_read=timeout_s[1])
    try:
        async with session.get(url, timeout=timeout) as resp:
            if resp.status != 200:
                text = (await resp.text())[:200]
                raise TransportError(f"fetch of {url} failed with status {resp.status}: {text}",
                                     url=url, status=resp.status)
            body = await resp.read()
            length = resp.headers.get("Content-Length")
            if length is not None and int(length) != len(body):
                raise TransportError(f"fetch of {url}: got {len(body)} of {length} bytes", url=url)
            crc = resp.headers.get("X-Qjournal-Crc32c")
            return body, (int(crc, 16) if crc else None)
    except aiohttp.ClientError as e:
        raise TransportError(f"fetch of {url} failed: {e}", url=url) from e
    except TimeoutError as e:
        raise TransportError(f"fetch of {url} timed out", url=url) from e
