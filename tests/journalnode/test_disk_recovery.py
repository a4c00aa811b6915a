"""What a restart finds on a real directory after a crash, and storage failures while running:
torn tails are cut at the last valid record when safe, damage followed by records is left
alone, leftover tmp files are cleaned, every named fault point is survivable, and a failed
append never leaves half a batch in the index."""

import os

import pytest

from qjournal.errors import JournalError, JournalOutOfSyncError
from qjournal.journalnode.journal import FAULT_POINTS, SYNC_FAULT_POINTS, Journal
from qjournal.journalnode.disk_storage import DiskJournalStorage
from qjournal.protocol.messages import PersistedPaxosData, SegmentState
from qjournal.protocol.segment import encode_header

from .crash_storage import CrashStorage
from .jn_helpers import NS, Writer, batch, commit_download, install_download

JID = "diskj"
SEG1 = "edits_inprogress_0000000000000000001"


def open_j(root, **kw):
    return Journal(JID, DiskJournalStorage(os.path.join(str(root), JID), fsync=False), **kw)


def cur(root, name=""):
    return os.path.join(str(root), JID, "current", name)


def written(root, n=5):
    j = open_j(root)
    j.format(NS)
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    j.start_log_segment(w.req(), 1, 1)
    j.journal(w.req(), 1, 1, n, batch(1, n))
    j.close()
    return encode_header(1) + batch(1, n)


@pytest.mark.parametrize("tail", [batch(6, 1)[:7], batch(6, 1)[:-1], b"\x01\x00", b"\x00" * 50 + b"\x07"])
def test_torn_tail_truncated_on_open(tmp_path, tail):
    good = written(tmp_path)
    with open(cur(tmp_path, SEG1), "ab") as f:
        f.write(tail)
    j = open_j(tmp_path)
    try:
        assert j.highest_written_txid == 5
        with open(cur(tmp_path, SEG1), "rb") as f:
            assert f.read() == good
        rs = j.open_segment_for_read(1, True)
        rs.stream.close()
        assert rs.length == len(good)
    finally:
        j.close()


def test_damage_followed_by_records_is_left_alone(tmp_path):
    good = written(tmp_path)
    damaged = bytearray(good + batch(6, 3))
    damaged[len(good) + 20] ^= 0xFF  # body of txid 6; 7 and 8 stay decodable
    with open(cur(tmp_path, SEG1), "wb") as f:
        f.write(damaged)
    j = open_j(tmp_path)
    try:
        assert j.highest_written_txid == 5
        with open(cur(tmp_path, SEG1), "rb") as f:
            assert f.read() == bytes(damaged)  # kept for the operator
        rs = j.open_segment_for_read(1, True)
        with rs.stream as f:
            assert f.read(rs.length) == good  # readers only ever see the valid prefix
        # recovering and finalizing at the valid end cuts the damage off
        w = Writer(JID, 2)
        j.new_epoch(NS, 2)
        state = j.prepare_recovery(w.req(), 1).segment_state
        assert state.end_txid == 5
        commit_download(j, j.accept_recovery_plan(w.req(), state), None)
        j.finalize_log_segment(w.req(), 1, 5)
        with open(cur(tmp_path, "edits_0000000000000000001-0000000000000000005"), "rb") as f:
            assert f.read() == good
    finally:
        j.close()


def test_leftover_tmp_files_and_garbage_header(tmp_path):
    written(tmp_path)
    for name, data in [("last-promised-epoch.tmp", b"9\n"), ("paxos/1.tmp", b"{"),
                       ("edits_inprogress_0000000000000000009", b"\x00" * 10)]:
        with open(cur(tmp_path, name), "wb") as f:
            f.write(data)
    j = open_j(tmp_path)
    try:
        assert j.last_promised_epoch == 1
        names = sorted(os.listdir(cur(tmp_path)))
        assert "last-promised-epoch.tmp" not in names and os.listdir(cur(tmp_path, "paxos")) == []
        assert "edits_inprogress_0000000000000000009.empty" in names  # unreadable header = no txns
        assert j.new_epoch(NS, 2).last_segment_txid == 1
    finally:
        j.close()


def test_half_done_accept_rolled_forward_or_discarded(tmp_path):
    written(tmp_path, 2)
    longer = encode_header(1) + batch(1, 4)
    with open(cur(tmp_path, SEG1 + ".epoch=3"), "wb") as f:
        f.write(longer)
    with open(cur(tmp_path, SEG1 + ".epoch=4"), "wb") as f:
        f.write(b"partial download")
    with open(cur(tmp_path, "paxos/1"), "wb") as f:
        f.write(PersistedPaxosData(SegmentState(1, 4, True), 3).to_bytes())
    j = open_j(tmp_path)
    try:
        names = os.listdir(cur(tmp_path))
        assert not [n for n in names if ".epoch=" in n]
        with open(cur(tmp_path, SEG1), "rb") as f:
            assert f.read() == longer
        j.new_epoch(NS, 5)
        r = j.prepare_recovery(Writer(JID, 5).req(), 1)
        assert r.segment_state == SegmentState(1, 4, True) and r.accepted_in_epoch == 3
    finally:
        j.close()


class Boom(Exception):
    pass


@pytest.mark.parametrize("point", FAULT_POINTS + SYNC_FAULT_POINTS)
def test_every_fault_point_survivable_on_disk(tmp_path, point):
    def hook(p):
        if p == point:
            raise Boom(p)
    j = open_j(tmp_path, fault_hook=hook)
    w1, w2 = Writer(JID, 1), Writer(JID, 2)
    steps = [lambda: j.format(NS), lambda: j.new_epoch(NS, 1),
             lambda: j.start_log_segment(w1.req(), 1, 1),
             lambda: j.journal(w1.req(), 1, 1, 3, batch(1, 3)),
             lambda: j.finalize_log_segment(w1.req(), 1, 3),
             lambda: j.start_log_segment(w1.req(), 4, 1),
             lambda: j.journal(w1.req(), 4, 4, 2, batch(4, 2)),
             lambda: j.new_epoch(NS, 2),
             lambda: commit_download(j, j.accept_recovery_plan(w2.req(), SegmentState(4, 7, True)),
                                              encode_header(1) + batch(4, 4)),
             lambda: install_download(j, SegmentState(10, 12, False), 12, encode_header(1) + batch(10, 3))]
    fired = False
    for step in steps:
        try:
            step()
        except Boom:
            fired = True
            break
    j.close()
    assert fired, f"fault point {point} never reached"
    j = open_j(tmp_path)
    try:
        epoch = j.last_promised_epoch + 1
        last = j.new_epoch(NS, epoch).last_segment_txid
        w = Writer(JID, epoch)
        if last is not None:
            st = j.prepare_recovery(w.req(), last).segment_state
            if st.in_progress:
                commit_download(j, j.accept_recovery_plan(w.req(), st), None)
            j.finalize_log_segment(w.req(), st.start_txid, st.end_txid)
    finally:
        j.close()


class FullDisk(CrashStorage):
    """Appends fail half-way once armed, like ENOSPC after a partial write."""

    armed = False

    def append(self, name, data):
        if self.armed:
            self.files[name].data += data[: len(data) // 2]
            raise OSError(28, "No space left on device")
        super().append(name, data)


def test_failed_append_is_cut_back_and_closes_segment():
    st = FullDisk()
    j = Journal(JID, st)
    j.format(NS)
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    j.start_log_segment(w.req(), 1, 1)
    j.journal(w.req(), 1, 1, 2, batch(1, 2))
    st.armed = True
    with pytest.raises(JournalError, match="No space left"):
        j.journal(w.req(), 1, 3, 2, batch(3, 2))
    assert st.read(SEG1) == encode_header(1) + batch(1, 2)
    st.armed = False
    with pytest.raises(JournalOutOfSyncError, match="no segment open"):
        j.journal(w.req(), 1, 3, 2, batch(3, 2))
    assert j.get_edit_log_manifest(1, True).segments == (SegmentState(1, 2, True),)
    j.finalize_log_segment(w.req(), 1, 2)
    j.start_log_segment(w.req(), 3, 1)
    j.journal(w.req(), 3, 3, 2, batch(3, 2))


def test_a_corrupt_epoch_file_is_refused_with_a_journal_error_naming_it(tmp_path):
    """Bug J1 (docs/testing.md): a durable scalar that is not an integer (what a disk that dropped the
    bytes of a failed fsync leaves: zeros) made the Journal's open raise NameError, not the JournalError
    its docstring names (the simulator's fsync-EIO model found it, against a storage retrying the fsync)."""
    written(tmp_path)
    with open(cur(tmp_path, "last-promised-epoch"), "wb") as f:
        f.write(b"\0\0")
    with pytest.raises(JournalError, match=r"last-promised-epoch: not an integer: b'\\x00\\x00'"):
        open_j(tmp_path)
