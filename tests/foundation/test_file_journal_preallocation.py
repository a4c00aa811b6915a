"""A FileJournal's open segment grows in preallocated steps (``qjournal.file-journal.preallocate.bytes``):
the zero tail reads as padding to every reader, recovery and finalizing cut it off, a file system without
fallocate is written without it, and a full disk fails the sync with the file cut back to its data."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from qjournal.config import Configuration
from qjournal.errors import JournalError
from qjournal.journalmanager.file import DiskIO, FileJournal
from qjournal.journalmanager.streams import SegmentInfo

from .helpers import NS, body, run, seg_path

STEP = 4096


class PreallocDisk(DiskIO):
    """A DiskIO whose preallocate raises ``errno`` while it is set, and counts the calls."""

    def __init__(self) -> None:
        self.errno: int | None = None
        self.preallocations = 0

    def preallocate(self, fd, offset, length):
        self.preallocations += 1
        if self.errno is not None:
            raise OSError(self.errno, os.strerror(self.errno))
        super().preallocate(fd, offset, length)


async def journal(path, **kw) -> FileJournal:
    j = FileJournal(str(path), **kw)
    await j.format(NS)
    await j.recover_unfinalized_segments()
    return j


async def write(s, first: int, last: int) -> None:
    for t in range(first, last + 1):
        s.write(t, body(t) * 40)
    s.mark()
    await s.sync()


async def read_all(stream) -> list[int]:
    out = []
    async for r in stream:
        assert r.body == body(r.txid) * 40, f"txid {r.txid} has wrong bytes"
        out.append(r.txid)
    return out


def tail_is_zero(path: str, data_end: int) -> bool:
    with open(path, "rb") as f:
        f.seek(data_end)
        rest = f.read()
    return rest == bytes(len(rest))


def test_the_segment_grows_in_steps_reads_end_at_the_data_and_finalize_cuts_the_tail(tmp_path, caplog):
    async def go():
        disk = PreallocDisk()
        j = await journal(tmp_path / "j", preallocate_bytes=STEP, disk=disk)
        s = await j.start_log_segment(1)
        await write(s, 1, 3)
        p = seg_path(j, 1)
        assert os.path.getsize(p) >= s.bytes_flushed + STEP and tail_is_zero(p, s.bytes_flushed)
        calls = disk.preallocations
        await write(s, 4, 5)  # fits in the space already there
        assert disk.preallocations == calls
        for first in range(6, 200, 10):  # past it: grows again
            await write(s, first, first + 9)
        assert disk.preallocations > calls
        assert os.path.getsize(p) > s.bytes_flushed and tail_is_zero(p, s.bytes_flushed)
        reader = FileJournal(str(tmp_path / "j"), use_lock=False)  # another process reading along
        assert await reader.get_manifest(0, True) == [SegmentInfo(1, 205, True)]
        assert await read_all(await reader.open_input(1, in_progress_ok=True)) == list(range(1, 206))
        end = s.bytes_flushed
        with caplog.at_level(logging.DEBUG, logger="qjournal.journalmanager.file"):
            await j.finalize_log_segment(1, 205)
        cut = [r for r in caplog.records if "tail" in r.message]
        assert [(r.levelno, r.message) for r in cut] == [(logging.DEBUG, "cut the preallocated tail")]
        assert os.path.getsize(seg_path(j, 1, 205)) == end
        assert await read_all(await reader.open_input(1)) == list(range(1, 206))
        await j.close()
    run(go())


@pytest.mark.parametrize("torn", [False, True], ids=["clean", "torn-write-in-the-tail"])
def test_recovery_after_a_crash_finalizes_at_the_data_and_cuts_the_zero_tail(tmp_path, caplog, torn):
    async def go():
        j = await journal(tmp_path / "j", preallocate_bytes=STEP)
        s = await j.start_log_segment(1)
        await write(s, 1, 7)
        end = s.bytes_flushed
        await s.abort()  # the process died after its last sync
        if torn:  # ... in the middle of its next write, which went into the zero tail
            with open(seg_path(j, 1), "r+b") as f:
                f.seek(end)
                f.write(b"\x01\x00\x00\x00\x30")
        j.unlock()
        j = FileJournal(str(tmp_path / "j"), preallocate_bytes=STEP)
        with caplog.at_level(logging.DEBUG, logger="qjournal.journalmanager.file"):
            await j.recover_unfinalized_segments()
        cut = [(r.levelno, r.message) for r in caplog.records if "tail" in r.message]
        assert cut == ([(logging.WARNING, "truncated torn tail")] if torn
                       else [(logging.DEBUG, "cut the preallocated tail")])
        assert await j.get_manifest(0, True) == [SegmentInfo(1, 7)]
        assert os.path.getsize(seg_path(j, 1, 7)) == end
        s = await j.start_log_segment(8)  # and writes go on in the next segment
        await write(s, 8, 9)
        await j.finalize_log_segment(8, 9)
        assert await read_all(await j.open_input(1)) == list(range(1, 10))
        await j.close()
    run(go())


def test_a_file_system_without_fallocate_is_written_without_it(tmp_path, caplog):
    async def go():
        disk = PreallocDisk()
        disk.errno = errno.EOPNOTSUPP
        j = await journal(tmp_path / "j", preallocate_bytes=STEP, disk=disk)
        s = await j.start_log_segment(1)
        with caplog.at_level(logging.WARNING, logger="qjournal.journalmanager.file"):
            await write(s, 1, 3)
            await write(s, 4, 300)
        assert [r.message for r in caplog.records].count("preallocation not supported; writing without it") == 1
        assert disk.preallocations == 1 and j.preallocate_bytes == 0
        assert os.path.getsize(seg_path(j, 1)) == s.bytes_flushed
        await j.finalize_log_segment(1, 300)
        assert await read_all(await j.open_input(1)) == list(range(1, 301))
        await j.close()
    run(go())


def test_a_full_disk_fails_the_sync_naming_the_txids_and_cuts_the_file_back(tmp_path):
    async def go():
        disk = PreallocDisk()
        j = await journal(tmp_path / "j", preallocate_bytes=STEP, disk=disk)
        s = await j.start_log_segment(1)
        await write(s, 1, 3)
        good = s.bytes_flushed
        disk.errno = errno.ENOSPC
        with pytest.raises(JournalError, match=r"sync of txids 4-200 .* failed") as ei:
            for first in range(4, 400, 197):
                await write(s, first, first + 196)
        assert ei.value.fields["errno"] == errno.ENOSPC
        assert os.path.getsize(seg_path(j, 1)) == good  # nothing of the failed batch, no zero tail
        await s.abort()
        j.unlock()
        j = FileJournal(str(tmp_path / "j"))
        await j.recover_unfinalized_segments()
        assert await j.get_manifest(0, True) == [SegmentInfo(1, 3)]
        await j.close()
    run(go())


def test_the_key_sets_the_step_and_zero_turns_it_off(tmp_path):
    conf = Configuration()
    assert FileJournal.from_uri(f"file://{tmp_path}/a", conf).preallocate_bytes == 1024 * 1024
    conf.set("qjournal.file-journal.preallocate.bytes", "64k")
    assert FileJournal.from_uri(f"file://{tmp_path}/b", conf).preallocate_bytes == 64 * 1024
    conf.set("qjournal.file-journal.preallocate.bytes", "0")
    assert FileJournal.from_uri(f"file://{tmp_path}/c", conf).preallocate_bytes == 0
