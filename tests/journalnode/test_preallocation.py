"""The open segment preallocated on a real disk (``disk_storage`` module docstring): the file grows
in steps, appends land right after the data, readers and a restarted node see the log end at the
zero tail, a finalized segment is cut to its valid length, and a preallocation failure is handled
(an unsupported file system writes without it; a full disk fails the batch like a failed write)."""

import errno
import os

import pytest

from qjournal.errors import JournalError
from qjournal.journalnode.disk_storage import DiskJournalStorage
from qjournal.journalnode.journal import Journal
from qjournal.protocol.messages import SegmentState
from qjournal.protocol.segment import encode_header, scan_segment

from .jn_helpers import NS, Writer, batch, commit_download

JID = "prealloc"
STEP = 4096
SEG1 = "edits_inprogress_0000000000000000001"


def open_j(root, step=STEP):
    return Journal(JID, DiskJournalStorage(os.path.join(str(root), JID), fsync=False, preallocate_bytes=step))


def path(root, name):
    return os.path.join(str(root), JID, "current", name)


def started(root, step=STEP):
    j = open_j(root, step)
    j.format(NS)
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    j.start_log_segment(w.req(), 1, 1)
    return j, w


def test_the_open_segment_grows_in_steps_and_appends_follow_the_data(tmp_path):
    j, w = started(tmp_path)
    try:
        assert os.path.getsize(path(tmp_path, SEG1)) == 16 + STEP  # the header, then one step
        data = encode_header(1)
        txid = 1
        for n in (1, 3, 40, 60, 2):  # past the first step and the second
            j.journal(w.req(), 1, txid, n, batch(txid, n))
            data += batch(txid, n)
            txid += n
            size = os.path.getsize(path(tmp_path, SEG1))
            assert size >= len(data)
            with open(path(tmp_path, SEG1), "rb") as f:
                on_disk = f.read()
            assert on_disk[:len(data)] == data and on_disk[len(data):] == bytes(size - len(data))
        assert os.path.getsize(path(tmp_path, SEG1)) > len(data)  # preallocated space ahead
        res = scan_segment(on_disk, expected_first_txid=1)
        assert res.clean and res.last_txid == txid - 1 and res.valid_length == len(data)
        rs = j.open_segment_for_read(1, True)  # in-progress reads stop at the data
        try:
            assert rs.length == len(data)
        finally:
            rs.stream.close()
        j.finalize_log_segment(w.req(), 1, txid - 1)
        with open(path(tmp_path, f"edits_{1:019d}-{txid - 1:019d}"), "rb") as f:
            assert f.read() == data  # finalized: exactly the records
    finally:
        j.close()


def test_a_restarted_node_finds_the_log_ending_at_the_zero_tail(tmp_path):
    j, w = started(tmp_path)
    j.journal(w.req(), 1, 1, 5, batch(1, 5))
    j.close()  # as after a crash: the segment stays in progress with its preallocated tail
    good = encode_header(1) + batch(1, 5)
    assert os.path.getsize(path(tmp_path, SEG1)) > len(good)
    j = open_j(tmp_path)
    try:
        assert j.highest_written_txid == 5
        w2 = Writer(JID, 2)
        j.new_epoch(NS, 2)
        resp = j.prepare_recovery(w2.req(), 1)
        assert resp.segment_state == SegmentState(1, 5, True)
        commit_download(j, j.accept_recovery_plan(w2.req(), SegmentState(1, 5, True)), None)
        j.finalize_log_segment(w2.req(), 1, 5)
        with open(path(tmp_path, f"edits_{1:019d}-{5:019d}"), "rb") as f:
            assert f.read() == good
    finally:
        j.close()


def test_a_torn_write_inside_the_preallocated_space_is_cut_off_on_open(tmp_path):
    j, w = started(tmp_path)
    j.journal(w.req(), 1, 1, 5, batch(1, 5))
    j.close()
    good = encode_header(1) + batch(1, 5)
    with open(path(tmp_path, SEG1), "r+b") as f:  # half of the next record reached the disk
        f.seek(len(good))
        f.write(batch(6, 1)[:9])
    j = open_j(tmp_path)
    try:
        assert j.highest_written_txid == 5
        with open(path(tmp_path, SEG1), "rb") as f:
            assert f.read() == good  # the torn record and the zero tail after it cut off
    finally:
        j.close()


def test_a_file_system_without_preallocation_is_written_without_it(tmp_path, monkeypatch, caplog):
    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    j, w = started(tmp_path)
    try:
        j.journal(w.req(), 1, 1, 3, batch(1, 3))
        assert os.path.getsize(path(tmp_path, SEG1)) == len(encode_header(1) + batch(1, 3))
        assert "preallocation not supported" in caplog.text
    finally:
        j.close()


def test_a_full_disk_fails_the_batch_and_cuts_the_segment_back(tmp_path, monkeypatch):
    j, w = started(tmp_path, step=64)
    try:
        j.journal(w.req(), 1, 1, 1, batch(1, 1))
        good = encode_header(1) + batch(1, 1)

        def full(fd, offset, length):
            os.ftruncate(fd, offset + length // 2)  # a partial allocation moved the size
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "posix_fallocate", full)
        with pytest.raises(JournalError, match=r"writing txns 2-41"):
            j.journal(w.req(), 1, 2, 40, batch(2, 40))
        with open(path(tmp_path, SEG1), "rb") as f:
            assert f.read() == good  # nothing but the acknowledged batch
    finally:
        j.close()


def test_a_negative_step_is_refused(tmp_path):
    with pytest.raises(ValueError, match="preallocate_bytes must be >= 0"):
        DiskJournalStorage(str(tmp_path), preallocate_bytes=-1)
