"""The in-memory index of a journal's segment files: what each holds, scanned once.

Why a class of its own: the acceptor (:class:`~qjournal.journalnode.journal.Journal`) decides; this
knows. Which segment files exist and which of them counts (a finalized one hides an in-progress one
of the same start), where each in-progress file's acknowledged records end, and what each finalized
file holds (its digest, and what is wrong with it), so that no request rescans a segment
(HDFS-16793). The acceptor and the sync installer (``sync_installer.py``) read it; only the acceptor
changes what it describes. It runs under the journal's one-call-at-a-time rule, except
:meth:`SegmentIndex.check_finalized`, which ``SyncInstaller.finalized_digest`` may run on any thread
(``journal.py`` says why that is safe).

Invariants (the journal's, cited as [In] there and here):

4. An extent always describes bytes that are on the file and acknowledged: ``valid_length`` ends at a
   record boundary, ``last_txid`` is the txid of the record before it. The acceptor updates it only
   after an append (and sync) succeeded.
5. An in-progress segment with no valid txn counts as absent: it is moved aside to ``.empty``
   whenever it is scanned (seed 000 §2.10.5), unless it is the writer's own open segment.
11. Torn tails: a file left by a crash whose only damage is a partial final record (nothing decodable
    after it) is truncated at its last valid record on its first scan; any other damage is left for
    the operator and the extent ends at it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator

from qjournal.errors import JournalError
from qjournal.journalnode.storage import JournalStorage
from qjournal.protocol.messages import SegmentState
from qjournal.protocol.segment import (HEADER_SIZE, INVALID_TXID, crc32c, parse_segment_file_name, scan_segment,
                                       scan_segment_chunks)

__all__ = ["SegmentIndex", "Extent"]

log = logging.getLogger("qjournal.journalnode.journal")


@dataclass
class Extent:
    """What is known about one segment file [I4]."""

    first_txid: int        # INVALID_TXID when no valid txn
    last_txid: int         # INVALID_TXID when no valid txn
    valid_length: int      # end of the last valid record (HEADER_SIZE when none)

    @property
    def num_txns(self) -> int:
        return 0 if self.last_txid == INVALID_TXID else self.last_txid - self.first_txid + 1


class SegmentIndex:
    """The segment files of one journal and what they hold (module docstring).

    Args:
        jid: the journal id (in messages).
        storage: the journal's storage.
        max_record_bytes: ceiling on one record's body when scanning.
        read_chunk_bytes: bytes read at a time when scanning a file in chunks.
        is_open: whether a file is the writer's open segment (never moved aside when empty).
    """

    def __init__(self, jid: str, storage: JournalStorage, max_record_bytes: int, read_chunk_bytes: int,
                 is_open: Callable[[str], bool]) -> None:
        self.jid = jid
        self.storage = storage
        self.max_record_bytes = max_record_bytes
        self.read_chunk_bytes = read_chunk_bytes
        self._is_open = is_open
        self._extents: dict[str, Extent] = {}
        # finalized file name -> (file stamp, digest of its record bytes, problem found scanning it or None)
        self._fin_checks: dict[str, tuple[tuple, int, str | None]] = {}

    # --- what the acceptor changes ----------------------------------------------------------

    def set_extent(self, name: str, extent: Extent) -> None:
        """``name`` now holds exactly ``extent`` (after a create, an append, an install) [I4]."""
        self._extents[name] = extent

    def entry(self, name: str) -> Extent:
        """The extent of an indexed file (the writer's open segment: always indexed)."""
        return self._extents[name]

    def forget(self, name: str) -> None:
        """``name`` is gone or about to be replaced: scan it again if it comes back."""
        self._extents.pop(name, None)
        self._fin_checks.pop(name, None)

    def forget_extent(self, name: str) -> None:
        """Drop what is known of ``name``'s records (not of its finalized checks)."""
        self._extents.pop(name, None)

    def remember_check(self, name: str, digest: int, problem: str | None) -> None:
        """The checks of finalized file ``name`` as just verified (an install)."""
        self._fin_checks[name] = (self.storage.file_stamp(name), digest, problem)

    def clear(self) -> None:
        """Forget everything (a format wipes the files)."""
        self._extents.clear()
        self._fin_checks.clear()

    # --- what it knows ----------------------------------------------------------------------

    def segments(self) -> list[tuple[int, int | None, str]]:
        """Segment files as (start, end or None, name), sorted by start; a finalized
        segment hides an in-progress file with the same start."""
        by_start: dict[int, tuple[int, int | None, str]] = {}
        for name in self.storage.list_files():
            seg = parse_segment_file_name(name)
            if seg is None:
                continue
            prev = by_start.get(seg.start_txid)
            if prev is None or (prev[1] is None and seg.end_txid is not None):
                by_start[seg.start_txid] = (seg.start_txid, seg.end_txid, name)
        return [by_start[k] for k in sorted(by_start)]

    def extent(self, name: str) -> Extent | None:
        """The extent of an in-progress segment file from the index (scanning once).

        An empty one is moved aside and None returned [I5]. On open, a torn
        tail is truncated when safe [I11] (files this process wrote are always indexed,
        so only files left by a crash are ever scanned).
        """
        ext = self._extents.get(name)
        if ext is None:
            seg = parse_segment_file_name(name)
            assert seg is not None
            buf = self.storage.read(name)
            res = scan_segment(buf, expected_first_txid=seg.start_txid,
                               max_record_bytes=self.max_record_bytes)
            if not res.header_ok:
                ext = Extent(INVALID_TXID, INVALID_TXID, 0)
            else:
                ext = Extent(res.first_txid, res.last_txid, res.valid_length)
                kinds = [p.kind for p in res.problems]
                if ext.num_txns and kinds and res.valid_length < len(buf):
                    # [I11]: one problem and nothing decodable after it = a torn final write.
                    if len(kinds) == 1 and kinds[0] in ("torn-tail", "trailing-garbage", "corrupt"):
                        log.warning("journal %s: truncating torn tail of %s at byte %d (file had %d "
                                    "bytes; %s)", self.jid, name, res.valid_length, len(buf),
                                    res.problems[0].detail)
                        self.storage.truncate(name, res.valid_length)
                        self.storage.sync(name)
                    else:
                        log.error("journal %s: %s is damaged after txid %d at byte %d; left as is: %s",
                                  self.jid, name, res.last_txid, res.valid_length,
                                  "; ".join(p.detail for p in res.problems[:3]))
            self._extents[name] = ext
        if ext.num_txns == 0:
            if self._is_open(name):
                return None  # the writer's own fresh segment: not moved aside
            self.move_aside(name, ".empty")
            return None
        return ext

    def move_aside(self, name: str, suffix: str) -> None:
        log.info("journal %s: moving %s aside to %s%s", self.jid, name, name, suffix)
        self._extents.pop(name, None)
        self.storage.rename(name, name + suffix)
        self.storage.sync_dir()

    def state_of(self, segment_txid: int) -> SegmentState | None:
        """On-disk state of the segment starting at ``segment_txid`` (empty -> None) [I5]."""
        fin = None
        inprog = None
        for start, end, name in self.segments():
            if start == segment_txid:
                if end is not None:
                    fin = end
                else:
                    inprog = name
        if fin is not None:
            return SegmentState(segment_txid, fin, False)
        if inprog is None:
            return None
        ext = self.extent(inprog)
        if ext is None:
            return None
        return SegmentState(segment_txid, ext.last_txid, True)

    def digest(self, state: SegmentState) -> int:
        """CRC32C of the records ``state.start_txid .. state.end_txid`` of this node's copy.

        Raises:
            JournalError: the copy does not hold exactly those txids.
        """
        for start, end, name in self.segments():
            if start != state.start_txid:
                continue
            if end is None:
                ext = self.extent(name)
                if ext is not None and ext.last_txid == state.end_txid:
                    return crc32c(self.storage.read(name, HEADER_SIZE, ext.valid_length - HEADER_SIZE))
            else:
                data = self.storage.read(name)
                res = scan_segment(data, expected_first_txid=start, stop_after_txid=state.end_txid,
                                   max_record_bytes=self.max_record_bytes)
                if res.last_txid == state.end_txid:
                    return crc32c(memoryview(data)[HEADER_SIZE:res.valid_length])
        raise JournalError(f"journal {self.jid}: no copy of segment {state} to digest", jid=self.jid)

    def read_chunks(self, name: str, off: int = 0) -> Iterator[bytes]:
        """The bytes of ``name`` from ``off`` in chunks of ``read_chunk_bytes`` (bounded memory)."""
        while True:
            chunk = self.storage.read(name, off, self.read_chunk_bytes)
            if not chunk:
                return
            yield chunk
            off += len(chunk)

    def check_finalized(self, name: str) -> tuple[int, str | None]:
        """``(digest, problem)`` of a finalized segment file: the CRC32C of its record bytes (as
        ``_digest``) and what is wrong with it (None when its records hold exactly the txids of
        its name and nothing follows them). Cached against the file's stamp."""
        stamp = self.storage.file_stamp(name)
        cached = self._fin_checks.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1], cached[2]
        seg = parse_segment_file_name(name)
        assert seg is not None and seg.end_txid is not None
        digest, problem = self.judge_finalized(name, seg.start_txid, seg.end_txid)
        self._fin_checks[name] = (stamp, digest, problem)
        return digest, problem

    def judge_finalized(self, name: str, start_txid: int, end_txid: int) -> tuple[int, str | None]:
        """``(digest, problem)`` of the file ``name`` holding finalized segment ``start_txid-end_txid``,
        read in chunks: the CRC32C of every byte after its header, and what is wrong (None when the
        records hold exactly those txids and nothing follows them)."""
        res, digest = scan_segment_chunks(self.read_chunks(name), expected_first_txid=start_txid,
                                          max_record_bytes=self.max_record_bytes,
                                          where=f"{self.storage.where}/{name}")
        # the scan's digest covers the valid records; continue it over whatever follows them
        # (a damaged file keeps a digest of all its bytes after the header)
        for chunk in self.read_chunks(name, max(res.valid_length, HEADER_SIZE)):
            digest = crc32c(chunk, digest)
        size = self.storage.size(name)
        problem = None
        if not res.header_ok:
            problem = "bad segment header"
        elif res.first_txid != start_txid or res.last_txid != end_txid or res.valid_length != size:
            problem = (f"the file holds txids {res.first_txid}-{res.last_txid} in {res.valid_length} of "
                       f"{size} bytes"
                       + (f" ({res.problems[0].detail})" if res.problems else ""))
        return digest, problem
