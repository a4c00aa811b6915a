"""The per-journal acceptor on a real directory: the TestJournal scenarios (reference §6.5)
in our own words, plus the recovery path and the read path."""

import os

import pytest

from qjournal.errors import (CorruptRecordError, EpochError, InvalidRequestError, InvariantViolation,
                             JournalAlreadyFormattedError, JournalLockedError, JournalNotFormattedError,
                             JournalOutOfSyncError, NamespaceMismatchError, SegmentNotFoundError)
from qjournal.protocol.messages import NamespaceInfo
from qjournal.journalnode.journal import Journal
from qjournal.journalnode.disk_storage import DiskJournalStorage
from qjournal.protocol.messages import SegmentState
from qjournal.protocol.segment import HEADER_SIZE, INVALID_TXID, encode_header, scan_segment

from .jn_helpers import NS, OTHER_NS, Writer, batch, commit_download

JID = "test-journal"


def open_journal(root, **kw):
    return Journal(JID, DiskJournalStorage(os.path.join(str(root), JID), fsync=False), **kw)


@pytest.fixture
def jdir(tmp_path):
    return tmp_path


@pytest.fixture
def j(jdir):
    jn = open_journal(jdir)
    jn.format(NS)
    yield jn
    jn.close()


def current(jdir):
    return os.path.join(str(jdir), JID, "current")


def write_segment(j, w, start, n, finalize=True):
    j.start_log_segment(w.req(), start, 1)
    if n:
        j.journal(w.req(), start, start, n, batch(start, n))
    if finalize:
        j.finalize_log_segment(w.req(), start, start + n - 1)


def test_unformatted_journal_refuses_calls(jdir):
    jn = open_journal(jdir)
    try:
        assert not jn.is_formatted()
        with pytest.raises(JournalNotFormattedError, match="not formatted"):
            jn.get_journal_state()
        with pytest.raises(JournalNotFormattedError):
            jn.new_epoch(NS, 1)
        with pytest.raises(JournalNotFormattedError):
            jn.heartbeat(Writer(JID, 1).req())
    finally:
        jn.close()


def test_epoch_handling(j):
    assert j.get_journal_state().last_promised_epoch == 0
    assert j.new_epoch(NS, 1).last_segment_txid is None
    assert j.new_epoch(NS, 3).last_segment_txid is None
    with pytest.raises(EpochError, match="Proposed epoch 3 <= last promise 3"):
        j.new_epoch(NS, 3)
    w1 = Writer(JID, 1)
    with pytest.raises(EpochError, match="epoch 1 is less than the last promised epoch 3"):
        j.start_log_segment(w1.req(), 1, 1)
    with pytest.raises(EpochError, match="epoch 1 is less than the last promised epoch 3"):
        j.journal(w1.req(), 1, 1, 1, batch(1, 1))


def test_newer_epoch_in_a_request_raises_the_promise(jdir, j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 5)
    j.heartbeat(w.req())
    assert j.last_promised_epoch == 5
    with open(os.path.join(current(jdir), "last-promised-epoch")) as f:
        assert f.read().strip() == "5"
    with pytest.raises(JournalOutOfSyncError, match="IPC serial 0"):
        j.heartbeat(Writer(JID, 5).req())  # serial 0 again in the same epoch


def test_maintain_committed_txid(jdir, j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    j.start_log_segment(w.req(), 1, 1)
    assert j.committed_txid == INVALID_TXID
    j.journal(w.req(committed=0), 1, 1, 3, batch(1, 3))
    assert j.committed_txid == 0
    j.heartbeat(w.req(committed=3))
    assert j.committed_txid == 3
    with pytest.raises(InvariantViolation, match="backward from 3 to 2"):
        j.heartbeat(w.req(committed=2))
    j.close()
    j2 = open_journal(jdir)
    assert j2.committed_txid == 3
    j2.close()


def test_restart_journal(jdir, j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 2, finalize=False)
    j.close()
    j2 = open_journal(jdir)
    try:
        assert j2.ns_info == NS
        assert j2.last_promised_epoch == 1 and j2.last_writer_epoch == 1
        assert j2.highest_written_txid == 2
        assert j2.new_epoch(NS, 2).last_segment_txid == 1
    finally:
        j2.close()


def test_format_resets_cached_values(j):
    j.new_epoch(NS, 4)
    w = Writer(JID, 4)
    write_segment(j, w, 1, 2)
    with pytest.raises(JournalAlreadyFormattedError):
        j.format(OTHER_NS)
    j.format(OTHER_NS, force=True)
    assert (j.last_promised_epoch, j.last_writer_epoch, j.committed_txid) == (0, 0, INVALID_TXID)
    assert j.get_edit_log_manifest(0, True).segments == ()
    assert j.ns_info == OTHER_NS


def test_new_epoch_at_beginning_of_segment(j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 2)
    j.start_log_segment(w.req(), 3, 1)  # empty segment 3
    assert j.new_epoch(NS, 2).last_segment_txid == 1


def test_journal_locking(jdir, j):
    with pytest.raises(JournalLockedError, match="Cannot lock storage"):
        open_journal(jdir)
    j.close()
    j2 = open_journal(jdir)
    j2.close()


def test_finalize_when_edits_are_missed(jdir, j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 3, finalize=False)
    with pytest.raises(JournalOutOfSyncError, match="only written up to txid 3"):
        j.finalize_log_segment(w.req(), 1, 6)
    j.close()
    j2 = open_journal(jdir)
    try:
        w2 = Writer(JID, 2)
        j2.new_epoch(NS, 2)
        with pytest.raises(JournalOutOfSyncError, match="disk only contains up to txid 3"):
            j2.finalize_log_segment(w2.req(), 1, 6)
    finally:
        j2.close()


def test_finalize_missing_segment(j):
    j.new_epoch(NS, 1)
    with pytest.raises(JournalOutOfSyncError, match="No log file to finalize at transaction ID 1000"):
        j.finalize_log_segment(Writer(JID, 1).req(), 1000, 1001)


def test_finalize_is_idempotent_and_checked(j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 3)
    j.finalize_log_segment(w.req(), 1, 3)
    with pytest.raises(InvariantViolation, match="re-finalize"):
        j.finalize_log_segment(w.req(), 1, 4)


def test_abort_old_segment_if_finalize_is_missed(jdir, j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 3, finalize=False)
    write_segment(j, w, 6, 3, finalize=False)  # finalize of 1-5 never reached us
    names = sorted(os.listdir(current(jdir)))
    assert "edits_inprogress_0000000000000000001" in names
    assert "edits_inprogress_0000000000000000006" in names
    m = j.get_edit_log_manifest(1, True)
    assert m.segments == (SegmentState(6, 8, True),)  # the stale in-progress file is not advertised


def test_start_log_segment_when_already_exists(j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 1, finalize=False)
    j.start_log_segment(w.req(), 1, 1)  # one txn: allowed
    j.journal(w.req(), 1, 1, 4, batch(1, 4))
    with pytest.raises(JournalOutOfSyncError, match="seems to contain valid transactions"):
        j.start_log_segment(w.req(), 1, 1)
    j.finalize_log_segment(w.req(), 1, 4)
    with pytest.raises(JournalOutOfSyncError, match="finalized segment"):
        j.start_log_segment(w.req(), 1, 1)


def test_namespace_verification(j):
    with pytest.raises(NamespaceMismatchError, match="Incompatible namespaceID"):
        j.new_epoch(OTHER_NS, 1)
    with pytest.raises(NamespaceMismatchError, match="Incompatible clusterID"):
        j.new_epoch(NamespaceInfo(NS.namespace_id, "other"), 1)


def test_journal_contiguity_and_validation(j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    with pytest.raises(JournalOutOfSyncError, match="not the current writer epoch 0"):
        j.journal(w.req(), 1, 1, 1, batch(1, 1))
    j.start_log_segment(w.req(), 1, 1)
    with pytest.raises(JournalOutOfSyncError, match="expecting nextTxId=1"):
        j.journal(w.req(), 1, 2, 1, batch(2, 1))
    with pytest.raises(CorruptRecordError, match="holds 2 records, the call said 3"):
        j.journal(w.req(), 1, 1, 3, batch(1, 2))
    bad = bytearray(batch(1, 2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="checksum"):
        j.journal(w.req(), 1, 1, 2, bytes(bad))
    j.journal(w.req(), 1, 1, 2, batch(1, 2))
    assert j.highest_written_txid == 2
    with pytest.raises(JournalOutOfSyncError, match="thinks it is writing segment 7"):
        j.journal(w.req(), 7, 3, 1, batch(3, 1))
    # the mismatch closed the segment: the writer stays out of sync until it starts a new one
    with pytest.raises(JournalOutOfSyncError, match="no segment open"):
        j.journal(w.req(), 1, 3, 1, batch(3, 1))


def test_journal_from_non_writer_epoch_rejected(j):
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    j.start_log_segment(w1.req(), 1, 1)
    j.new_epoch(NS, 2)
    w2 = Writer(JID, 2)
    with pytest.raises(JournalOutOfSyncError, match="not the current writer epoch 1"):
        j.journal(w2.req(), 1, 1, 1, batch(1, 1))
    with pytest.raises(EpochError):
        j.journal(w1.req(), 1, 1, 1, batch(1, 1))


def test_lagging_batches_skip_fsync_and_are_counted(j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    j.start_log_segment(w.req(), 1, 1)
    j.journal(w.req(committed=10), 1, 1, 5, batch(1, 5))
    j.journal(w.req(), 1, 6, 5, batch(6, 5))
    snap = j.metrics_snapshot()
    assert snap["BatchesWritten"] == 2 and snap["BatchesWrittenWhileLagging"] == 2
    assert snap["CurrentLagTxns"] == 0 and snap["TxnsWritten"] == 10
    j.journal(w.req(), 1, 11, 1, batch(11, 1))
    snap = j.metrics_snapshot()
    assert snap["BatchesWritten"] == 3 and snap["BatchesWrittenWhileLagging"] == 2
    assert snap["NumEditLogsSynced"] == 0  # Hadoop's name for segments the syncer copied, not fsyncs


def test_manifest_and_read(j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 3)
    write_segment(j, w, 4, 3)
    write_segment(j, w, 7, 2, finalize=False)
    m = j.get_edit_log_manifest(1, False)
    assert m.segments == (SegmentState(1, 3, False), SegmentState(4, 6, False))
    assert j.get_edit_log_manifest(5, True).segments == (SegmentState(4, 6, False), SegmentState(7, 8, True))
    assert j.get_edit_log_manifest(7, True).segments == (SegmentState(7, 8, True),)
    rs = j.open_segment_for_read(7, True)
    with rs.stream as f:
        data = f.read(rs.length)
    assert data == encode_header(1) + batch(7, 2)
    with pytest.raises(SegmentNotFoundError, match="No edit log found starting at txid 7"):
        j.open_segment_for_read(7, False)
    with pytest.raises(SegmentNotFoundError):
        j.open_segment_for_read(2, True)


def test_purge(jdir, j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 3)
    write_segment(j, w, 4, 3)
    write_segment(j, w, 7, 2, finalize=False)
    deleted = j.purge_logs_older_than(w.req(), 5)
    assert deleted == ["edits_0000000000000000001-0000000000000000003"]
    assert j.purge_logs_older_than(w.req(), 100) == ["edits_0000000000000000004-0000000000000000006"]
    assert j.get_edit_log_manifest(0, True).segments == (SegmentState(7, 8, True),)


def test_bad_jid_and_wrong_jid():
    with pytest.raises(InvalidRequestError):
        Journal("../x", DiskJournalStorage("/nonexistent/x", fsync=False))


# --- recovery ---------------------------------------------------------------------


def test_prepare_and_accept_recovery(jdir, j):
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    resp = j.prepare_recovery(w1.req(), 1)
    assert resp.segment_state is None and resp.accepted_in_epoch is None and resp.last_writer_epoch == 0
    write_segment(j, w1, 1, 1, finalize=False)
    resp = j.prepare_recovery(w1.req(), 1)
    assert resp.segment_state == SegmentState(1, 1, True) and resp.accepted_in_epoch is None
    assert resp.last_writer_epoch == 1
    # accept the same length: no download
    plan = j.accept_recovery_plan(w1.req(), SegmentState(1, 1, True))
    assert not plan.download
    commit_download(j, plan, None)
    j.new_epoch(NS, 2)
    w2 = Writer(JID, 2)
    resp = j.prepare_recovery(w2.req(), 1)
    assert resp.segment_state == SegmentState(1, 1, True) and resp.accepted_in_epoch == 1
    # the old epoch is fenced
    with pytest.raises(EpochError):
        j.prepare_recovery(w1.req(), 1)
    with pytest.raises(EpochError):
        j.accept_recovery_plan(w1.req(), SegmentState(1, 1, True))


def source_segment(start, n):
    return encode_header(1) + batch(start, n)


def test_accept_recovery_downloads_a_longer_segment(jdir, j):
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    write_segment(j, w1, 1, 2, finalize=False)
    j.new_epoch(NS, 2)
    w2 = Writer(JID, 2)
    j.prepare_recovery(w2.req(), 1)
    plan = j.accept_recovery_plan(w2.req(), SegmentState(1, 5, True))
    assert plan.download and plan.tmp_name.endswith(".epoch=2")
    with pytest.raises(Exception, match="holds txids 1-4"):
        commit_download(j, plan, source_segment(1, 4))
    commit_download(j, plan, source_segment(1, 7))  # bytes after the agreed end are dropped
    assert j.highest_written_txid == 5
    resp = j.prepare_recovery(w2.req(), 1)
    assert resp.segment_state == SegmentState(1, 5, True) and resp.accepted_in_epoch == 2
    j.finalize_log_segment(w2.req(), 1, 5)
    assert not os.listdir(os.path.join(current(jdir), "paxos"))
    assert j.get_edit_log_manifest(1, False).segments == (SegmentState(1, 5, False),)
    with open(os.path.join(current(jdir), "edits_0000000000000000001-0000000000000000005"), "rb") as f:
        assert f.read() == source_segment(1, 5)


def test_accept_recovery_never_discards_committed_txns(j):
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    j.start_log_segment(w1.req(), 1, 1)
    j.journal(w1.req(committed=4), 1, 1, 5, batch(1, 5))
    j.new_epoch(NS, 2)
    w2 = Writer(JID, 2)
    with pytest.raises(InvariantViolation, match="would discard already-committed txn 4"):
        j.accept_recovery_plan(w2.req(), SegmentState(1, 3, True))


def test_accept_recovery_bad_paxos_transition(j):
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    write_segment(j, w1, 1, 2, finalize=False)
    j.new_epoch(NS, 3)
    w3 = Writer(JID, 3)
    commit_download(j, j.accept_recovery_plan(w3.req(), SegmentState(1, 2, True)), None)
    # A request of epoch 2 cannot pass the gate any more; forge the state to reach the assertion.
    j.last_promised_epoch, j.current_ipc_serial = 2, -1
    with pytest.raises(InvariantViolation, match="Bad paxos transition"):
        j.accept_recovery_plan(Writer(JID, 2).req(), SegmentState(1, 2, True))


def test_accept_over_finalized_segment_refused(j):
    j.new_epoch(NS, 1)
    w1 = Writer(JID, 1)
    write_segment(j, w1, 1, 3)
    j.new_epoch(NS, 2)
    w2 = Writer(JID, 2)
    with pytest.raises(InvariantViolation, match="already-finalized"):
        j.accept_recovery_plan(w2.req(), SegmentState(1, 5, True))
    resp = j.prepare_recovery(w2.req(), 1)
    assert resp.segment_state == SegmentState(1, 3, False)


def test_accept_recovery_fenced_during_download(j):
    j.new_epoch(NS, 1)
    plan = j.accept_recovery_plan(Writer(JID, 1).req(), SegmentState(1, 3, True))
    j.new_epoch(NS, 2)
    with pytest.raises(EpochError, match="downloading"):
        commit_download(j, plan, source_segment(1, 3))


def test_empty_in_progress_counts_as_absent(jdir, j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    write_segment(j, w, 1, 3)
    j.start_log_segment(w.req(), 4, 1)
    j.new_epoch(NS, 2)
    resp = j.prepare_recovery(Writer(JID, 2).req(), 4)
    assert resp.segment_state is None
    assert "edits_inprogress_0000000000000000004.empty" in os.listdir(current(jdir))


def test_committed_txid_file_damage_reads_as_unknown(jdir, j):
    j.new_epoch(NS, 1)
    w = Writer(JID, 1)
    j.heartbeat(w.req(committed=1234))
    j.close()
    path = os.path.join(current(jdir), "committed-txid")
    with open(path, "rb") as f:
        good = f.read()
    for bad in (good[:5], good[:7] + bytes([good[7] ^ 0x40]) + good[8:], b""):
        with open(path, "wb") as f:
            f.write(bad)
        j2 = open_journal(jdir)
        assert j2.committed_txid == INVALID_TXID
        j2.close()
    with open(path, "wb") as f:
        f.write(good)
    j3 = open_journal(jdir)
    assert j3.committed_txid == 1234
    j3.close()


def test_sync_durations_use_the_monotonic_clock_when_the_wall_clock_jumps(jdir, caplog):
    """A wall clock moved back an hour just before an fsync (NTP, an operator) neither makes the sync
    look slow or negative nor drops it from the durations' windows: those run on the monotonic clock;
    the last journal time (a wall-clock metric, Hadoop's LastJournalTimestamp) follows the wall clock."""
    wall = [1_000_000.0]
    ticks = iter(range(10**6))

    def monotonic() -> float:
        return 50.0 + next(ticks) * 0.002          # 2 ms between two readings

    def hook(point: str) -> None:
        if point == "after_append":
            wall[0] -= 3600.0                       # between the append and its fsync

    jn = open_journal(jdir, clock=lambda: wall[0], monotonic=monotonic, fault_hook=hook, slow_sync_warn_s=1.0)
    try:
        jn.format(NS)
        jn.new_epoch(NS, 1)
        w = Writer(JID, 1)
        jn.start_log_segment(w.req(), 1, 1)
        with caplog.at_level("WARNING", logger="qjournal.journalnode.journal"):
            jn.journal(w.req(), 1, 1, 3, batch(1, 3))
        assert not [r for r in caplog.records if "took" in r.getMessage()], caplog.text
        snap = jn.metrics_snapshot()
        assert snap["Syncs60sNumOps"] == 1.0
        assert snap["Syncs60s50thPercentileLatencyMicros"] == pytest.approx(2_000), snap
        assert snap["LastJournalTimestamp"] == 996_400_000
    finally:
        jn.close()
