"""Property test: a FileJournal driven by random operations agrees with a trivial in-memory model.

Operations: write, mark, sync, roll, purge, read, reopen (clean close) and
crash. A crash abandons the writer without closing and tears the in-progress
file at an arbitrary byte after the last sync: either a prefix of the bytes
that were buffered but not synced (as if part of a write reached the disk) or
garbage. After reopening and recovery, every synced record must be there and
nothing that was not written may be read back; unsynced *complete* records
may survive (they were written, just not acknowledged).

Hypothesis prints the failing operation list (and a reproduction blob); the
operations are plain data, so a failure replays exactly.
"""

from __future__ import annotations

import asyncio
import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from qjournal.errors import GapInTransactionsError
from qjournal.journalmanager.streams import SegmentInfo
from qjournal.journalmanager.file import DiskIO, FileJournal
from qjournal.protocol import segment as seg

from .helpers import NS


class NoSyncDisk(DiskIO):
    """The crash model tears files explicitly, so real fsyncs would only slow the test down."""

    def fdatasync(self, fd):
        pass

    def fsync(self, fd):
        pass


def body_of(txid: int, size: int) -> bytes:
    return (b"%d:" % txid + bytes([txid % 251]) * size)[: max(size, 1) + 4]


_write = st.tuples(st.just("write"), st.integers(1, 4), st.integers(0, 40))
# writes, marks and syncs are listed more than once so that programs spend most of
# their steps inside a segment (a uniform mix rolls or crashes too soon to matter)
ops = st.lists(st.one_of(
    _write, _write, _write,
    st.tuples(st.just("mark")), st.tuples(st.just("mark")),
    st.tuples(st.just("sync")), st.tuples(st.just("sync")),
    st.tuples(st.just("roll")),
    st.tuples(st.just("purge"), st.integers(0, 100)),
    st.tuples(st.just("read"), st.integers(0, 100)),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("crash"), st.booleans(), st.integers(0, 400)),
), min_size=6, max_size=40)


class Model:
    """What the journal must hold: durable records, segments, the open segment's progress."""

    def __init__(self) -> None:
        self.bodies: dict[int, bytes] = {}   # every txid written (durable or not) -> body
        self.segments: list[tuple[int, int]] = []  # finalized (start, end)
        self.open_start: int | None = None
        self.written = 0   # last txid written
        self.marked = 0
        self.synced = 0
        self.first_kept = 1  # txids below were purged

    def durable_end(self) -> int:
        return self.synced

    def manifest(self) -> list[SegmentInfo]:
        out = [SegmentInfo(s, e) for s, e in self.segments]
        if self.open_start is not None and self.synced >= self.open_start:
            out.append(SegmentInfo(self.open_start, self.synced, True))
        return out


async def drive(root: str, program, prealloc: int = 0) -> None:
    m = Model()
    disk = NoSyncDisk()
    j = FileJournal(root, disk=disk, preallocate_bytes=prealloc)
    await j.format(NS)
    await j.recover_unfinalized_segments()
    stream = None

    async def check_manifest():
        assert await j.get_manifest(0, in_progress_ok=True) == m.manifest(), program

    for op in program:
        kind = op[0]
        if kind == "write":
            if stream is None:
                stream = await j.start_log_segment(m.written + 1)
                m.open_start = m.written + 1
            for _ in range(op[1]):
                t = m.written + 1
                b = body_of(t, op[2])
                stream.write(t, b)
                m.bodies[t] = b
                m.written = t
        elif kind == "mark":
            if stream is not None:
                stream.mark()
                m.marked = m.written
        elif kind == "sync":
            if stream is not None:
                await stream.sync()
                m.synced = max(m.synced, m.marked)
                assert stream.last_synced_txid == m.synced
        elif kind == "roll":
            if stream is not None:
                await j.finalize_log_segment(m.open_start, m.written)
                if m.written >= m.open_start:
                    m.segments.append((m.open_start, m.written))
                m.synced = m.marked = m.written
                m.open_start, stream = None, None
        elif kind == "purge":
            ends = [e for _, e in m.segments]
            if ends:
                min_keep = ends[op[1] % len(ends)] + 1
                await j.purge_logs_older_than(min_keep)
                m.segments = [(s, e) for s, e in m.segments if e >= min_keep]
                m.first_kept = m.segments[0][0] if m.segments else (m.open_start or m.written + 1)
        elif kind == "read":
            await check_manifest()
            avail = m.manifest()
            if avail:
                lo, hi = avail[0].start_txid, avail[-1].end_txid
                frm = lo + op[1] % (hi - lo + 1)
                got = [(r.txid, r.body) async for r in await j.open_input(frm, in_progress_ok=True)]
                assert got == [(t, m.bodies[t]) for t in range(frm, hi + 1)], program
                if lo > 1:
                    try:
                        await j.open_input(lo - 1, in_progress_ok=True)
                        raise AssertionError("reading a purged txid must raise")
                    except GapInTransactionsError:
                        pass
        elif kind == "reopen":
            await j.close()  # clean shutdown: everything written is synced
            if stream is not None:
                m.synced = m.marked = m.written
            j = FileJournal(root, disk=disk, preallocate_bytes=prealloc)
            await j.recover_unfinalized_segments()
            if m.open_start is not None and m.written >= m.open_start:
                m.segments.append((m.open_start, m.written))
            m.open_start, stream = None, None
        elif kind == "crash":
            garbage, cut = op[1], op[2]
            if stream is not None:
                pending = bytes(stream._ready) + bytes(stream._current)
                path, data_end = stream.path, stream.bytes_flushed
                await stream.abort()
                tail = (b"\x07garbage" * 60)[:cut] if garbage else pending[:cut]
                with open(path, "r+b") as f:  # where the next write went: the data's end, inside
                    f.seek(data_end)         # a preallocated zero tail when there is one
                    f.write(tail)
            j.unlock()  # the process died: its lock is gone
            j = FileJournal(root, disk=disk, preallocate_bytes=prealloc)
            await j.recover_unfinalized_segments()
            if m.open_start is not None:
                segs = [s for s in await j.get_manifest(m.open_start) if s.start_txid == m.open_start]
                end = segs[0].end_txid if segs else m.open_start - 1
                # every synced record survived; nothing beyond what was written appeared
                assert m.synced <= end <= m.written, (program, m.synced, end, m.written)
                if end >= m.open_start:
                    m.segments.append((m.open_start, end))
                for t in range(end + 1, m.written + 1):
                    del m.bodies[t]
                m.written = m.marked = m.synced = end
            m.open_start, stream = None, None
        await check_manifest()
    # final full read of everything kept, through a fresh reader object
    await j.close()
    if stream is not None and m.open_start is not None:
        m.synced = m.written
    reader = FileJournal(root, use_lock=False)
    segs = await reader.get_manifest(0, in_progress_ok=True)
    if segs:
        lo, hi = segs[0].start_txid, segs[-1].end_txid
        got = [(r.txid, r.body) async for r in await reader.open_input(lo, in_progress_ok=True)]
        assert got == [(t, m.bodies[t]) for t in range(lo, hi + 1)], program
        assert hi == m.written


@settings(max_examples=120, deadline=None, print_blob=True)
@given(program=ops, prealloc=st.sampled_from([0, 64, 1 << 20]))
def test_file_journal_agrees_with_model(program, prealloc):
    """Without preallocation, growing 64 bytes at a time (often, across records) and 1 MiB at a time."""
    with tempfile.TemporaryDirectory(prefix="qj-model-") as tmp:
        asyncio.run(drive(os.path.join(tmp, "j"), program, prealloc))


def test_crash_right_after_header_and_mid_record_examples():
    """Two fixed programs that exercise the edges the property relies on."""
    for program in ([("write", 1, 0), ("crash", False, 5)],
                    [("write", 3, 10), ("mark",), ("sync",), ("write", 2, 10), ("mark",),
                     ("crash", False, len(seg.encode_record(4, 1, body_of(4, 10))) + 3), ("read", 0)]):
        for prealloc in (0, 64):
            with tempfile.TemporaryDirectory(prefix="qj-model-") as tmp:
                asyncio.run(drive(os.path.join(tmp, "j"), program, prealloc))
