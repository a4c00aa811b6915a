"""FileJournal: seed 003 use cases (§3) and every error scenario of §6, one test each.

The scenario tests are named ``test_scenario_6_<n>_...`` after seed 003 §6.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time

import pytest

from qjournal.errors import (
    CorruptRecordError,
    CorruptSegmentError,
    GapInTransactionsError,
    InvalidRequestError,
    JournalAlreadyFormattedError,
    JournalError,
    JournalLockedError,
    JournalNotFormattedError,
    JournalOutOfSyncError,
    RecordTooLargeError,
    SegmentNotFoundError,
)
from qjournal.journalmanager.streams import SegmentInfo
from qjournal.journalmanager.file import FileJournal
from qjournal.protocol import segment as seg

from .helpers import NS, FaultyDisk, body, new_journal, read_all, run, seg_path, write_segment


# --- seed 003 §3 use cases ------------------------------------------------------------

def test_format_refuses_existing_journal_unless_forced(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 5)
        await j.close()
        j2 = FileJournal(str(tmp_path / "j"))
        with pytest.raises(JournalAlreadyFormattedError, match="refusing to format"):
            await j2.format(NS)
        assert await j2.get_manifest() == [SegmentInfo(1, 5)]
        await j2.format(NS, force=True)
        assert await j2.get_manifest() == []
        assert j2.namespace_info() == NS
        await j2.close()
    run(go())


def test_unformatted_journal_refuses_reads_and_writes(tmp_path):
    async def go():
        j = FileJournal(str(tmp_path / "nothing"))
        assert not await j.is_formatted() and not await j.has_some_data()
        with pytest.raises(JournalNotFormattedError, match="not formatted|no directory"):
            await j.get_manifest()
        with pytest.raises(JournalNotFormattedError):
            await j.start_log_segment(1)
        await j.close()
    run(go())


def test_second_writer_object_in_process_is_refused_with_holder_named(tmp_path):
    async def go():
        j1 = await new_journal(tmp_path / "j")
        await j1.recover_unfinalized_segments()
        j2 = FileJournal(str(tmp_path / "j"))
        with pytest.raises(JournalLockedError, match=f"pid.*{os.getpid()}"):
            await j2.start_log_segment(1)
        with pytest.raises(JournalLockedError):
            await j2.recover_unfinalized_segments()
        # readers need no lock
        assert await j2.get_manifest() == []
        await j1.close()
        await j2.recover_unfinalized_segments()  # free again
        await j2.close()
    run(go())


def _wait_line(proc, deadline_s: float) -> str:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if sel.select(timeout=max(0.0, end - time.monotonic())):
            return proc.stdout.readline()
    raise AssertionError("child did not print READY before the deadline")


def test_second_writer_process_is_refused_with_holder_named(tmp_path):
    async def prep():
        j = await new_journal(tmp_path / "j")
        await j.close()
    run(prep())
    code = ("import sys; from qjournal.journalmanager.file import FileJournal;"
            f"j = FileJournal({str(tmp_path / 'j')!r}); j.lock(); print('READY', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert _wait_line(proc, 30).strip() == "READY"
        j = FileJournal(str(tmp_path / "j"))
        with pytest.raises(JournalLockedError) as ei:
            j.lock()
        assert f'"pid": {proc.pid}' in str(ei.value)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    j.lock()  # the child exited: its lock is gone
    j.unlock()


def test_roll_read_while_writing_and_purge(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 30)
        await write_segment(j, 31, 60)
        s = await write_segment(j, 61, 75, finalize=False)
        # a reader (standby / checkpointer) sees the in-progress segment up to the last sync
        m = await j.get_manifest(0, in_progress_ok=True)
        assert m == [SegmentInfo(1, 30), SegmentInfo(31, 60), SegmentInfo(61, 75, True)]
        assert await j.get_manifest(0) == m[:2]
        assert await read_all(await j.open_input(25, in_progress_ok=True)) == list(range(25, 76))
        # unsynced writes are invisible to readers
        s.write(76, body(76))
        s.mark()
        assert (await j.get_manifest(70, True))[-1] == SegmentInfo(61, 75, True)
        await s.sync()
        assert await j.count_transactions_since(1, in_progress_ok=True) == 76
        assert await j.count_transactions_since(1) == 60
        await j.finalize_log_segment(61, 76)
        await j.purge_logs_older_than(31)
        assert await j.get_manifest() == [SegmentInfo(31, 60), SegmentInfo(61, 76)]
        await j.purge_logs_older_than(61)  # segment 31-60 ends before 61
        assert await j.get_manifest() == [SegmentInfo(61, 76)]
        await j.close()
    run(go())


def test_read_from_the_middle_of_a_segment_and_bounded_range(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 100)
        assert await read_all(await j.open_input(37, 41)) == [37, 38, 39, 40, 41]
        st = await j.open_segment(SegmentInfo(1, 100), from_txid=99)
        assert await read_all(st) == [99, 100]
        with pytest.raises(InvalidRequestError):
            await j.open_segment(SegmentInfo(1, 100), from_txid=0)
        await j.close()
    run(go())


def test_reader_of_in_progress_segment_ignores_bytes_after_listed_end(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 20, finalize=False)
        listed = (await j.get_manifest(0, True))[0]
        reader = await j.open_segment(listed)
        s = j._stream
        for t in range(21, 31):  # the writer goes on while the reader is open
            s.write(t, body(t))
        s.mark()
        await s.sync()
        assert await read_all(reader) == list(range(1, 21))
        # garbage after the end of a finalized segment is never read
        await j.finalize_log_segment(1, 30)
        with open(seg_path(j, 1, 30), "ab") as f:
            f.write(b"\x01garbage-after-the-end")
        assert await read_all(await j.open_input(1)) == list(range(1, 31))
        await j.close()
    run(go())


def test_open_segment_listed_in_progress_but_finalized_meanwhile(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 10, finalize=False)
        listed = (await j.get_manifest(0, True))[0]
        await j.finalize_log_segment(1, 10)
        assert await read_all(await j.open_segment(listed)) == list(range(1, 11))
        with pytest.raises(SegmentNotFoundError):
            await j.open_segment(SegmentInfo(50, 60))
        await j.close()
    run(go())


def test_start_segment_refuses_overlap_and_open_segment(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 10)
        with pytest.raises(JournalOutOfSyncError, match="already holds txids up to 10"):
            await j.start_log_segment(5)
        await j.start_log_segment(11)
        with pytest.raises(JournalOutOfSyncError, match="still open"):
            await j.start_log_segment(12)
        await j.close()
        j2 = FileJournal(str(tmp_path / "j"))
        with pytest.raises(JournalOutOfSyncError, match="recover_unfinalized_segments"):
            await j2.start_log_segment(11)
        await j2.close()
    run(go())


def test_output_stream_rules(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j", max_record_bytes=100)
        s = await j.start_log_segment(1)
        with pytest.raises(JournalOutOfSyncError, match="write of txid 2, expected 1"):
            s.write(2, b"x")
        with pytest.raises(RecordTooLargeError):
            s.write(1, b"x" * 101)
        s.write(1, b"a")
        raw = seg.encode_records([seg.EditRecord(2, 1, b"b"), seg.EditRecord(3, 1, b"c")])
        with pytest.raises(CorruptRecordError):
            s.write_raw(raw[:-1], 2, 2)
        with pytest.raises(CorruptRecordError, match="said 3"):
            s.write_raw(raw, 2, 3)
        s.write_raw(raw, 2, 2)
        assert s.last_written_txid == 3 and s.last_synced_txid == 0 and s.pending_bytes > 0
        await s.sync()  # nothing marked yet
        assert s.last_synced_txid == 0
        s.mark()
        await s.sync()
        assert s.last_synced_txid == 3 and s.pending_bytes == 0
        with pytest.raises(JournalError, match="after txid 3"):
            s.set_version(2)
        await j.finalize_log_segment(1, 3)
        with pytest.raises(JournalError, match="closed"):
            s.write(4, b"d")
        await j.close()
    run(go())


def test_set_version_before_first_record_rewrites_header(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        s = await j.start_log_segment(1)
        s.set_version(5)
        s.write(1, b"a")
        s.mark()
        await s.sync()
        st = await j.open_segment(SegmentInfo(1, 1, True))
        assert await st.read_next() is not None and st.version == 5
        await j.close()
    run(go())


def test_concurrent_syncs_group_commit(tmp_path):
    async def go():
        import asyncio
        disk = FaultyDisk()
        j = await new_journal(tmp_path / "j", disk=disk)
        s = await j.start_log_segment(1)

        async def writer(t):
            s.write(t, body(t))
            s.mark()
            await s.sync()
            assert s.last_synced_txid >= t  # durable before this sync returns

        base = disk.syncs
        await asyncio.gather(*(writer(t) for t in range(1, 51)))
        assert s.last_synced_txid == 50
        assert disk.syncs - base <= 50
        await j.finalize_log_segment(1, 50)
        assert await read_all(await j.open_input(1)) == list(range(1, 51))
        await j.close()
    run(go())


def test_recovery_truncates_torn_tail_and_moves_empty_and_corrupt_aside(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        s = await write_segment(j, 1, 10, finalize=False)
        await j.close()
        p = seg_path(j, 1)
        good = s.bytes_flushed  # where the data ends (a preallocated zero tail may follow)
        with open(p, "r+b") as f:  # a torn record after the last sync, where the next write went
            f.seek(good)
            f.write(seg.encode_record(11, 1, b"torn")[:9])
        j = FileJournal(str(tmp_path / "j"))
        await j.recover_unfinalized_segments()
        assert await j.get_manifest() == [SegmentInfo(1, 10)]
        assert os.path.getsize(seg_path(j, 1, 10)) == good
        # empty in-progress segment (crash right after the header)
        with open(seg_path(j, 11), "wb") as f:
            f.write(seg.encode_header())
        # a segment whose header is damaged
        with open(seg_path(j, 20), "wb") as f:
            f.write(b"NOTAHEADER" + seg.encode_record(20, 1, b"x"))
        # a header torn by the crash (the header is fsynced before any record)
        with open(seg_path(j, 30), "wb") as f:
            f.write(seg.encode_header()[:7])
        await j.recover_unfinalized_segments()
        names = sorted(os.listdir(j.current_dir))
        assert seg.segment_file_name(30) + ".empty" in names
        assert seg.segment_file_name(11) + ".empty" in names
        assert seg.segment_file_name(20) + ".corrupt" in names
        assert await j.get_manifest(0, True) == [SegmentInfo(1, 10)]
        await j.start_log_segment(11)  # nothing unfinalized is left
        await j.close()
    run(go())


def test_finalize_checks_the_end_and_is_idempotent(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 10, finalize=False)
        await j._stream.close()
        with pytest.raises(JournalOutOfSyncError, match="valid txids up to 10"):
            await j.finalize_log_segment(1, 12)
        await j.finalize_log_segment(1, 10)
        await j.finalize_log_segment(1, 10)  # already done
        with pytest.raises(SegmentNotFoundError):
            await j.finalize_log_segment(11, 20)
        await j.start_log_segment(11)
        await j.finalize_log_segment(11, 10)  # empty segment: moved aside
        assert await j.get_manifest(0, True) == [SegmentInfo(1, 10)]
        await j.close()
    run(go())


def test_from_uri(tmp_path):
    from qjournal.config import Configuration
    conf = Configuration.load(overrides=[f"dfs.namenode.edits.dir.required=file://{tmp_path}/a",
                                         "dfs.namenode.max.op.size=1k"])
    j = FileJournal.from_uri(f"file://{tmp_path}/a", conf)
    assert j.directory == str(tmp_path / "a") and j.required and j.max_record_bytes == 1024
    for bad in ["file://remotehost/x", "file:relative", "http://x/y"]:
        with pytest.raises(InvalidRequestError):
            FileJournal.from_uri(bad)


# --- seed 003 §6 error scenarios ----------------------------------------------------------

def test_scenario_6_1_output_stream_cannot_be_created_raises_and_can_be_retried(tmp_path):
    """§6.1: getOutputStream fails (permissions, no space): an exception; the caller retries or aborts."""
    async def go():
        disk = FaultyDisk()
        j = await new_journal(tmp_path / "j", disk=disk)
        disk.fail_write = True
        with pytest.raises(JournalError) as ei:
            await j.start_log_segment(1)
        assert "edits_inprogress_0000000000000000001" in str(ei.value) and "ENOSPC" in str(ei.value)
        # the half-created file is an empty in-progress segment: recovery moves it aside, retry works
        disk.fail_write = False
        await j.recover_unfinalized_segments()
        await write_segment(j, 1, 3)
        # a journal directory that cannot be created at all (a file is in the way)
        (tmp_path / "blocker").write_text("x")
        bad = FileJournal(str(tmp_path / "blocker" / "j"))
        with pytest.raises(JournalError, match="blocker"):
            await bad.format(NS)
        await j.close()
    run(go())


def test_scenario_6_2_write_failure_raises_and_the_stream_refuses_further_use(tmp_path):
    """§6.2: a write that cannot complete raises; the client may not skip that txid on this stream."""
    async def go():
        disk = FaultyDisk()
        j = await new_journal(tmp_path / "j", disk=disk)
        s = await j.start_log_segment(1)
        s.write(1, body(1))
        s.mark()
        await s.sync()
        s.write(2, body(2))
        s.mark()
        disk.fail_sync = True
        with pytest.raises(JournalError, match="sync of txids 2-2") as ei:
            await s.sync()
        assert "EIO" in str(ei.value)
        assert s.last_synced_txid == 1  # not acknowledged
        with pytest.raises(JournalError, match="failed earlier"):
            s.write(3, body(3))
        await s.abort()
        disk.fail_sync = False
        # restore: recovery finalizes what is valid on disk; the journal lacks the failed txids
        await j.recover_unfinalized_segments()
        m = await j.get_manifest()
        assert m[0].start_txid == 1 and m[0].end_txid in (1, 2)
        await j.close()
    run(go())


def test_scenario_6_3_new_stream_may_start_after_a_hole_and_the_journal_records_it(tmp_path):
    """§6.3: a new stream need not continue the last txid, but the journal must know what it lacks."""
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 10)
        await write_segment(j, 21, 30)
        assert await j.get_manifest() == [SegmentInfo(1, 10), SegmentInfo(21, 30)]
        assert await read_all(await j.open_input(21)) == list(range(21, 31))
        await j.close()
    run(go())


def test_scenario_6_4_reading_from_a_txid_in_a_hole_raises(tmp_path):
    """§6.4: getInputStream(since) with since inside a hole raises."""
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 10)
        await write_segment(j, 21, 30)
        with pytest.raises(GapInTransactionsError, match="expected txid 15, next segment starts at 21"):
            await j.open_input(15)
        with pytest.raises(GapInTransactionsError, match="expected txid 11"):
            await j.open_input(5, 25)
        with pytest.raises(GapInTransactionsError, match="not available"):
            await j.open_input(31, 40)
        await j.close()
    run(go())


def test_scenario_6_5_count_transactions_raises_on_a_hole_after_since(tmp_path):
    """§6.5: getNumberOfTransactions(since) finding a hole after since raises."""
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 10)
        await write_segment(j, 21, 30)
        assert await j.count_transactions_since(21) == 10
        assert await j.count_transactions_since(31) == 0
        with pytest.raises(GapInTransactionsError):
            await j.count_transactions_since(5)
        await j.close()
    run(go())


def test_scenario_6_6_incomplete_transaction_raises_and_reader_reopens_at_next_txid(tmp_path):
    """§6.6: readNext cannot read a whole transaction -> exception; the client can reopen elsewhere."""
    async def go():
        a = await new_journal(tmp_path / "a")
        b = await new_journal(tmp_path / "b")
        for j in (a, b):
            await write_segment(j, 1, 20)
        p = seg_path(a, 1, 20)
        with open(p, "r+b") as f:  # cut copy a in the middle of txid 15
            f.truncate(os.path.getsize(p) - 6 * len(seg.encode_record(1, 1, body(15))) + 3)
        st = await a.open_input(1)
        got = []
        with pytest.raises(CorruptRecordError, match="premature end of log") as ei:
            async for r in st:
                got.append(r.txid)
        assert got == list(range(1, 15)) and p in str(ei.value)
        # (b) reopen from the next txid on another journal
        assert await read_all(await b.open_input(got[-1] + 1)) == list(range(15, 21))
        await a.close()
        await b.close()
    run(go())


def test_scenario_6_7_corrupt_transaction_is_detected_with_file_and_offset(tmp_path):
    """§6.7: a corrupt transaction is detected; the client drops the journal or reopens elsewhere."""
    async def go():
        a = await new_journal(tmp_path / "a")
        b = await new_journal(tmp_path / "b")
        for j in (a, b):
            await write_segment(j, 1, 20)
        p = seg_path(a, 1, 20)
        rec_len = len(seg.encode_record(1, 1, body(1)))
        off = seg.HEADER_SIZE + 9 * rec_len  # record of txid 10 (bodies 1..9 have the same length)
        with open(p, "r+b") as f:
            f.seek(off + seg.REC_HEAD_SIZE + 2)
            byte = f.read(1)
            f.seek(off + seg.REC_HEAD_SIZE + 2)
            f.write(bytes([byte[0] ^ 0x10]))
        got = []
        with pytest.raises(CorruptRecordError) as ei:
            async for r in await a.open_input(1):
                got.append(r.txid)
        assert got == list(range(1, 10))
        assert p in str(ei.value) and f"at byte {off}" in str(ei.value) and "checksum" in str(ei.value)
        assert ei.value.fields["offset"] == off
        assert await read_all(await b.open_input(10)) == list(range(10, 21))
        # recovery tools see it too
        with pytest.raises(CorruptSegmentError):
            seg.decode_header(b"garbage-garbage!")
        await a.close()
        await b.close()
    run(go())


def test_separate_reader_tails_in_progress_segment_of_another_writer(tmp_path):
    """A standby / checkpointer with its own FileJournal object on the shared directory (no lock)."""
    async def go():
        w = await new_journal(tmp_path / "shared")
        r = FileJournal(str(tmp_path / "shared"), use_lock=False)
        s = await write_segment(w, 1, 20, finalize=False)
        assert await r.get_manifest(0, True) == [SegmentInfo(1, 20, True)]
        for t in range(21, 41):
            s.write(t, body(t))
        s.mark()
        await s.sync()
        assert await r.get_manifest(0, True) == [SegmentInfo(1, 40, True)]  # incremental rescan
        # a record being written right now (a torn tail as seen by the reader) is not listed
        with open(seg_path(w, 1), "r+b") as f:
            f.seek(s.bytes_flushed)
            f.write(seg.encode_record(41, 1, body(41))[:10])
        assert await r.get_manifest(35, True) == [SegmentInfo(1, 40, True)]
        assert await read_all(await r.open_input(30, in_progress_ok=True)) == list(range(30, 41))
        assert await r.count_transactions_since(1, in_progress_ok=True) == 40
        await w.close()
        await r.close()
    run(go())


def test_use_case_7_new_writer_cannot_fence_a_live_file_writer(tmp_path):
    """Seed 003 §3.7: a storage that cannot fence the old writer makes the new one fail loudly."""
    async def go():
        old = await new_journal(tmp_path / "j")
        await old.recover_unfinalized_segments()
        s = await write_segment(old, 1, 5, finalize=False)
        new = FileJournal(str(tmp_path / "j"))
        with pytest.raises(JournalLockedError):
            await new.recover_unfinalized_segments()  # the standby becoming active
        s.write(6, body(6))  # the old writer is untouched
        s.mark()
        await s.sync()
        await old.close()  # once the old writer is gone, the new one recovers its segment
        await new.recover_unfinalized_segments()
        assert await new.get_manifest() == [SegmentInfo(1, 6)]
        await new.close()
    run(go())


def test_write_framing_is_byte_identical_to_encode_record(tmp_path):
    async def go():
        j = await new_journal(tmp_path / "j")
        sizes = [0, 1, 255, 256, 257, 1024, 70000]
        s = await j.start_log_segment(1)
        for i, n in enumerate(sizes):
            s.write(i + 1, bytes([i + 1]) * n, opcode=0x10 + i)
        s.mark()
        await s.sync()
        with open(seg_path(j, 1), "rb") as f:
            data = f.read()
        want = seg.encode_header() + b"".join(
            seg.encode_record(i + 1, 0x10 + i, bytes([i + 1]) * n) for i, n in enumerate(sizes))
        assert data[:len(want)] == want
        assert data[len(want):] == bytes(len(data) - len(want))  # the preallocated tail: zeros (padding)
        await j.close()
    run(go())


def test_recovery_of_in_progress_segment_with_a_bit_flip_stops_before_it(tmp_path, caplog):
    async def go():
        j = await new_journal(tmp_path / "j")
        await write_segment(j, 1, 10, finalize=False)
        await j.close()
        p = seg_path(j, 1)
        rec_len = len(seg.encode_record(1, 1, body(1)))
        with open(p, "r+b") as f:  # flip a body bit of txid 7
            f.seek(seg.HEADER_SIZE + 6 * rec_len + seg.REC_HEAD_SIZE + 1)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x01]))
        j = FileJournal(str(tmp_path / "j"))
        await j.recover_unfinalized_segments()
        assert await j.get_manifest() == [SegmentInfo(1, 6)]
        assert os.path.getsize(seg_path(j, 1, 6)) == seg.HEADER_SIZE + 6 * rec_len
        assert any("in-progress segment damaged" in r.getMessage() for r in caplog.records)
        await j.close()
    run(go())
