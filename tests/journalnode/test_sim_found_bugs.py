"""Regression tests for the three JournalNode bugs the deterministic simulator found
(src/qjournal/sim/known_bugs.py, KB1-KB3), each as a small fixed scenario."""

import pytest

from qjournal.errors import JournalOutOfSyncError
from qjournal.journalnode.journal import Journal
from qjournal.protocol.messages import SegmentState
from qjournal.protocol.segment import OP_DATA, encode_header, encode_records

from .crash_storage import CrashStorage
from .jn_helpers import NS, Writer, batch, commit_download

JID = "kbj"


def fresh():
    st = CrashStorage()
    j = Journal(JID, st)
    j.format(NS)
    return st, j


def test_kb1_finalize_makes_lagging_batches_durable():
    """Batches known committed are appended without fsync; finalize must sync before the rename."""
    st, j = fresh()
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    j.start_log_segment(w.req(), 1, 1)
    j.journal(w.req(committed=10), 1, 1, 10, batch(1, 10))  # lagging: no fsync
    j.finalize_log_segment(w.req(), 1, 10)
    disk = st.reboot("none")  # power cut: unsynced bytes are gone
    j2 = Journal(JID, disk)
    assert disk.read("edits_0000000000000000001-0000000000000000010") == encode_header(1) + batch(1, 10)
    j2.close()


def test_kb1_accept_without_download_makes_the_kept_copy_durable():
    st, j = fresh()
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    j.start_log_segment(w1.req(), 1, 1)
    j.journal(w1.req(committed=5), 1, 1, 5, batch(1, 5))  # lagging: no fsync
    j.new_epoch(NS, 2)
    w2 = Writer(JID, 2)
    state = j.prepare_recovery(w2.req(), 1).segment_state
    plan = j.accept_recovery_plan(w2.req(), state)
    assert not plan.download
    commit_download(j, plan, None)
    j2 = Journal(JID, st.reboot("none"))
    j2.new_epoch(NS, 3)
    r = j2.prepare_recovery(Writer(JID, 3).req(), 1)  # no "paxos data says ... on-disk is None"
    assert r.segment_state.end_txid == 5 and r.accepted_in_epoch == 2


def test_kb2_late_accept_after_the_writer_committed_in_a_newer_segment():
    """The accept of epoch 2 arrives after writer 2 committed txid 8 in segment 6; this node's
    copy of segment 1 (1-8, the old writer's unacked tail) must still be shortened to 1-5."""
    st, j = fresh()
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    j.start_log_segment(w1.req(), 1, 1)
    j.journal(w1.req(committed=3), 1, 1, 8, batch(1, 8))
    j.new_epoch(NS, 2)
    w2 = Writer(JID, 2)
    j.heartbeat(w2.req(committed=8))  # writer 2 already committed 6-8 elsewhere
    plan = j.accept_recovery_plan(w2.req(), SegmentState(1, 5, True))  # no InvariantViolation
    assert plan.download
    commit_download(j, plan, encode_header(1) + batch(1, 5))
    assert j.prepare_recovery(w2.req(), 1).segment_state.end_txid == 5


def test_kb2_committed_txid_of_an_older_writer_still_guards_recovery():
    from qjournal.errors import InvariantViolation
    st, j = fresh()
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    j.start_log_segment(w1.req(), 1, 1)
    j.journal(w1.req(committed=7), 1, 1, 8, batch(1, 8))
    j.new_epoch(NS, 2)
    with pytest.raises(InvariantViolation, match="would discard already-committed txn 7"):
        j.accept_recovery_plan(Writer(JID, 2).req(), SegmentState(1, 5, True))


def other_writer_copy(start, n, epoch):
    return encode_header(1) + encode_records(
        [(t, OP_DATA, b"writer %d txid %d" % (epoch, t)) for t in range(start, start + n)])


def test_kb3_same_length_other_contents_is_replaced():
    """This node's copy of segment 1 (1-4) was written by writer 1 and never acked; the
    chosen value 1-4 was written by writer 3. Same end txid, other records: download."""
    st, j = fresh()
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    j.start_log_segment(w1.req(), 1, 1)
    j.journal(w1.req(), 1, 1, 4, batch(1, 4))
    src = other_writer_copy(1, 4, 3)
    from qjournal.protocol.segment import HEADER_SIZE, crc32c
    chosen = SegmentState(1, 4, True, crc32c(src[HEADER_SIZE:]))
    j.new_epoch(NS, 4)
    w4 = Writer(JID, 4)
    plan = j.accept_recovery_plan(w4.req(), chosen)
    assert plan.download
    commit_download(j, plan, src)
    j.finalize_log_segment(w4.req(), 1, 4)
    assert st.read("edits_0000000000000000001-0000000000000000004") == src


def test_kb3_finalize_refused_for_a_copy_this_epoch_neither_wrote_nor_accepted():
    st, j = fresh()
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    j.start_log_segment(w1.req(), 1, 1)
    j.journal(w1.req(), 1, 1, 4, batch(1, 4))
    j.new_epoch(NS, 2)
    w2 = Writer(JID, 2)
    with pytest.raises(JournalOutOfSyncError, match="neither wrote it"):
        j.finalize_log_segment(w2.req(), 1, 4)  # its accept never reached this node
    # after this epoch accepted it, the same finalize goes through
    state = j.prepare_recovery(w2.req(), 1).segment_state
    commit_download(j, j.accept_recovery_plan(w2.req(), state), None)
    j.finalize_log_segment(w2.req(), 1, 4)


def test_normal_roll_after_a_restart_is_still_finalized():
    """The writer's own segment, open before this node restarted, may be finalized (roll)."""
    st, j = fresh()
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    j.start_log_segment(w.req(), 1, 1)
    j.journal(w.req(), 1, 1, 4, batch(1, 4))
    j.close()
    j2 = Journal(JID, st.reboot("none"))
    j2.finalize_log_segment(w.req(), 1, 4)
    assert j2.get_edit_log_manifest(1, False).segments == (SegmentState(1, 4, False),)
