"""JournalSet: parallel writes, failing and restoring journals, merged reads with failover."""

from __future__ import annotations


import pytest

from qjournal.errors import (
    CorruptRecordError,
    InvariantViolation,
    JournalError,
    JournalOutOfSyncError,
    NoJournalsAvailableError,
)
from qjournal.journalmanager.streams import SegmentInfo
from qjournal.journalmanager.file import FileJournal
from qjournal.journalmanager.journalset import JournalSet
from qjournal.journalmanager.streams import ChainedInputStream, EditLogInputStream, RedundantInputStream
from qjournal.protocol import segment as seg

from .helpers import NS, FaultyDisk, body, read_all, run, seg_path, write_segment


async def make_set(tmp_path, n=2, required=(), disks=None):
    js = []
    for i in range(n):
        disk = disks[i] if disks else None
        js.append(FileJournal(str(tmp_path / f"j{i}"), required=i in required, disk=disk))
    s = JournalSet(js)
    await s.format(NS)
    await s.recover_unfinalized_segments()
    return s, js


def test_writes_go_to_every_journal(tmp_path):
    async def go():
        s, (a, b) = await make_set(tmp_path)
        await write_segment(s, 1, 25)
        await write_segment(s, 26, 40, finalize=False)
        for j in (a, b):
            assert await j.get_manifest(0, True) == [SegmentInfo(1, 25), SegmentInfo(26, 40, True)]
        assert await s.get_manifest(0, True) == [SegmentInfo(1, 25), SegmentInfo(26, 40, True)]
        assert await read_all(await s.open_input(1, in_progress_ok=True)) == list(range(1, 41))
        assert await s.count_transactions_since(10, True) == 31
        assert await s.is_formatted() and await s.has_some_data()
        await s.close()
    run(go())


def test_failed_journal_is_skipped_and_restored_at_next_segment(tmp_path):
    """Seed 003 §6.2: a failed journal leaves the set, comes back at the next roll lacking old txids."""
    async def go():
        disk = FaultyDisk()
        s, (a, b) = await make_set(tmp_path, disks=[None, disk])
        await write_segment(s, 1, 10)
        out = await s.start_log_segment(11)
        for t in range(11, 16):
            out.write(t, body(t))
        out.mark()
        disk.fail_sync = True
        await out.sync()  # the set survives: journal a is healthy
        assert [m.name for m in s.failed()] == [b.uri] and "EIO" in s.failed()[0].failure
        assert out.last_synced_txid == 15
        disk.fail_sync = False
        for t in range(16, 21):
            out.write(t, body(t))
        out.mark()
        await out.sync()
        await s.finalize_log_segment(11, 20)
        # restore at the next segment
        await write_segment(s, 21, 30)
        assert s.failed() == [] and s.members[1].restored_at_txid == 21
        mb = await b.get_manifest()
        assert mb[0] == SegmentInfo(1, 10) and mb[-1] == SegmentInfo(21, 30)
        assert all(x.end_txid < 16 for x in mb if x.start_txid == 11)  # b lacks what it missed
        # readers route around b's hole through a
        assert await read_all(await s.open_input(1)) == list(range(1, 31))
        await s.close()
    run(go())


def test_set_fails_when_no_journal_is_left(tmp_path):
    async def go():
        d1, d2 = FaultyDisk(), FaultyDisk()
        s, _ = await make_set(tmp_path, disks=[d1, d2])
        out = await s.start_log_segment(1)
        out.write(1, body(1))
        out.mark()
        d1.fail_sync = d2.fail_sync = True
        with pytest.raises(NoJournalsAvailableError, match="no journal left"):
            await out.sync()
        assert out.last_synced_txid == 0
        await s.close()
    run(go())


def test_set_fails_when_a_required_journal_fails(tmp_path):
    async def go():
        d = FaultyDisk()
        s, (a, b) = await make_set(tmp_path, required=(1,), disks=[None, d])
        out = await s.start_log_segment(1)
        out.write(1, body(1))
        out.mark()
        d.fail_sync = True
        with pytest.raises(NoJournalsAvailableError, match=f"required journal {b.uri}"):
            await out.sync()
        await s.close()
    run(go())


def test_start_failure_marks_journal_failed(tmp_path):
    async def go():
        d = FaultyDisk()
        s, (a, b) = await make_set(tmp_path, disks=[None, d])
        d.fail_write = True
        out = await s.start_log_segment(1)
        assert [m.name for m in s.failed()] == [b.uri]
        d.fail_write = False
        out.write(1, body(1))
        await out.close()
        await s.finalize_log_segment(1, 1)
        await write_segment(s, 2, 3)  # restore: b's half-created segment is moved aside first
        assert s.failed() == [] and await b.get_manifest() == [SegmentInfo(2, 3)]
        await s.close()
    run(go())


def test_txid_out_of_order_does_not_mark_journals_failed(tmp_path):
    async def go():
        s, _ = await make_set(tmp_path)
        out = await s.start_log_segment(1)
        with pytest.raises(JournalOutOfSyncError):
            out.write(5, b"x")
        assert s.failed() == []
        with pytest.raises(JournalOutOfSyncError, match="still open"):
            await s.start_log_segment(2)
        with pytest.raises(JournalOutOfSyncError, match="cannot recover"):
            await s.recover_unfinalized_segments()
        assert s.failed() == []
        await s.close()
    run(go())


def test_invariant_violation_propagates_and_marks_nobody(tmp_path):
    async def go():
        s, (a, b) = await make_set(tmp_path)
        out = await s.start_log_segment(1)
        out.write(1, body(1))
        out.mark()

        async def broken_sync():
            raise InvariantViolation("broken")
        real_sync = s.members[0].stream.sync
        s.members[0].stream.sync = broken_sync
        with pytest.raises(InvariantViolation):
            await out.sync()
        assert s.failed() == []
        s.members[0].stream.sync = real_sync
        await s.close()
    run(go())


def test_corrupt_copy_fails_over_mid_read(tmp_path):
    async def go():
        s, (a, b) = await make_set(tmp_path)
        await write_segment(s, 1, 30)
        p = seg_path(a, 1, 30)
        rec_len = len(seg.encode_record(1, 1, body(1)))
        off = seg.HEADER_SIZE + 5 * rec_len + seg.REC_HEAD_SIZE  # body of txid 6
        with open(p, "r+b") as f:
            f.seek(off)
            f.write(b"\xee")
        assert await read_all(await s.open_input(1)) == list(range(1, 31))
        await s.close()
    run(go())


def test_longest_copy_wins_and_shorter_failover_is_refused(tmp_path):
    async def go():
        s, (a, b) = await make_set(tmp_path)
        await write_segment(a, 1, 30)
        await write_segment(b, 1, 20)
        assert await s.get_manifest() == [SegmentInfo(1, 30)]
        assert await read_all(await s.open_input(1)) == list(range(1, 31))
        # damage the long copy at txid 25: the remaining copy ends at 20, so the read must fail
        p = seg_path(a, 1, 30)
        rec_len = len(seg.encode_record(1, 1, body(1)))
        with open(p, "r+b") as f:
            f.seek(seg.HEADER_SIZE + 9 * rec_len + 3 * len(seg.encode_record(10, 1, body(10))) + 14)
            f.write(b"\xee")
        got = []
        with pytest.raises(JournalError, match="remaining copies end before txid 30"):
            async for r in await s.open_input(1):
                got.append(r.txid)
        assert got == list(range(1, 13))
        await s.close()
    run(go())


def test_finalized_copy_preferred_over_in_progress(tmp_path):
    async def go():
        s, (a, b) = await make_set(tmp_path)
        await write_segment(a, 1, 10)
        await write_segment(b, 1, 10, finalize=False)
        assert await s.get_manifest(0, True) == [SegmentInfo(1, 10)]
        await s.close()
    run(go())


def test_purge_goes_to_all(tmp_path):
    async def go():
        s, (a, b) = await make_set(tmp_path)
        await write_segment(s, 1, 10)
        await write_segment(s, 11, 20)
        await s.purge_logs_older_than(11)
        for j in (a, b):
            assert await j.get_manifest() == [SegmentInfo(11, 20)]
        await s.close()
    run(go())


class _ListStream(EditLogInputStream):
    """A stream with only ``read_next`` (the base class's ``read_batch``, as a third-party stream)."""

    def __init__(self, recs, fail_at=None):
        self.recs = list(recs)
        self.fail_at = fail_at

    first_txid = property(lambda self: self.recs[0].txid if self.recs else 0)
    last_txid = property(lambda self: self.recs[-1].txid if self.recs else 0)

    async def read_next(self):
        if not self.recs:
            return None
        r = self.recs.pop(0)
        if r.txid == self.fail_at:
            raise CorruptRecordError(f"injected at txid {r.txid}")
        return r

    async def close(self):
        pass


class _Source:
    def __init__(self, name, n, fail_at=None, skip=None):
        self.uri = name
        self.n, self.fail_at, self.skip = n, fail_at, skip
        self.opened_from = []

    async def open_segment(self, s, from_txid=None):
        self.opened_from.append(from_txid)
        recs = [seg.EditRecord(t, 1, body(t)) for t in range(from_txid, self.n + 1) if t != self.skip]
        return _ListStream(recs, self.fail_at)


def test_redundant_stream_positions_failover_after_last_returned_txid():
    async def go():
        x, y = _Source("x", 10, fail_at=4), _Source("y", 10)
        st = RedundantInputStream([(x, SegmentInfo(1, 10)), (y, SegmentInfo(1, 10))])
        assert [r.txid async for r in st] == list(range(1, 11))
        assert y.opened_from == [4]
    run(go())


def test_redundant_stream_treats_early_end_as_failure():
    async def go():
        x, y = _Source("x", 6), _Source("y", 10)
        st = RedundantInputStream([(x, SegmentInfo(1, 10)), (y, SegmentInfo(1, 10))])
        assert [r.txid async for r in st] == list(range(1, 11))
        assert y.opened_from == [7]
    run(go())


def test_chained_stream_refuses_txid_jump_and_reports_gap():
    async def go():
        x = _Source("x", 10, skip=5)
        st = ChainedInputStream([(x, SegmentInfo(1, 10))], 1)
        with pytest.raises(CorruptRecordError, match="returned txid 6, expected 5"):
            [r async for r in st]
        st = ChainedInputStream([(_Source("x", 10), SegmentInfo(1, 10))], 1, 12)
        from qjournal.errors import GapInTransactionsError
        with pytest.raises(GapInTransactionsError, match="11-12"):
            [r async for r in st]
    run(go())


def test_caller_errors_do_not_mark_journals_failed(tmp_path):
    async def go():
        from qjournal.errors import CorruptRecordError as CRE, RecordTooLargeError
        js = [FileJournal(str(tmp_path / "a"), max_record_bytes=64), FileJournal(str(tmp_path / "b"))]
        s = JournalSet(js)
        await s.format(NS)
        await s.recover_unfinalized_segments()
        out = await s.start_log_segment(1)
        with pytest.raises(RecordTooLargeError):
            out.write(1, b"x" * 65)  # over the smallest member's limit
        with pytest.raises(ValueError):
            out.write(1, b"x", opcode=0xFF)
        with pytest.raises(CRE):
            out.write_raw(b"junk", 1, 1)
        assert s.failed() == [] and out.last_written_txid == 0
        out.write(1, b"x" * 64)
        await out.close()
        await s.finalize_log_segment(1, 1)
        for j in js:
            assert await j.get_manifest() == [SegmentInfo(1, 1)]
        await s.close()
    run(go())


def test_unreadable_journal_is_skipped_for_reads(tmp_path):
    async def go():
        import shutil
        s, (a, b) = await make_set(tmp_path)
        await write_segment(s, 1, 10)
        shutil.rmtree(a.current_dir)  # journal a lost its directory
        assert await s.get_manifest() == [SegmentInfo(1, 10)]
        assert await read_all(await s.open_input(1)) == list(range(1, 11))
        assert await s.count_transactions_since(1) == 10
        await s.close()
    run(go())
