"""The Journal's side of the JournalNodeSyncer, on a real directory: a copied segment is verified and
installed atomically (a crash before the rename leaves nothing), the rules are checked again at install
time, a purge bound survives a restart, a corrupt copy is named as such, and a node formatted from its
peers refuses to vote until its finalized segments cover what it may have lost."""

import os

import pytest

from qjournal.errors import JournalAlreadyFormattedError, JournalError, JournalRejoiningError
from qjournal.journalnode.disk_storage import DiskJournalStorage
from qjournal.journalnode.journal import Journal
from qjournal.protocol.messages import Manifest, SegmentState
from qjournal.protocol.segment import encode_header

from .jn_helpers import NS, Writer, batch, install_download

JID = "sync-journal"


class Crash(Exception):
    pass


def open_journal(root, **kw):
    return Journal(JID, DiskJournalStorage(os.path.join(str(root), JID), fsync=False), **kw)


def current(root):
    return os.path.join(str(root), JID, "current")


def write(j, w, start, n, finalize=True):
    j.start_log_segment(w.req(), start, 1)
    j.journal(w.req(), start, start, n, batch(start, n))
    if finalize:
        j.finalize_log_segment(w.req(), start, start + n - 1)


def seg_bytes(start, n):
    return encode_header(1) + batch(start, n)


@pytest.fixture
def j(tmp_path):
    jn = open_journal(tmp_path)
    jn.format(NS)
    jn.new_epoch(NS, 1)
    yield jn
    jn.close()


def test_install_verifies_then_installs_and_a_second_install_is_skipped(j, tmp_path):
    w = Writer(JID, 1)
    write(j, w, 1, 10)
    write(j, w, 21, 10)
    seg = SegmentState(11, 20, False)
    with pytest.raises(JournalError, match="holds txids 11-19"):
        install_download(j, seg, 30, seg_bytes(11, 9))          # a short copy
    with pytest.raises(JournalError, match="digest"):
        install_download(j, SegmentState(11, 20, False, 0x1234), 30, seg_bytes(11, 10))
    assert j.metrics_snapshot()["NumEditLogsSynced"] == 0
    assert install_download(j, seg, 30, seg_bytes(11, 10)) is True
    name = "edits_0000000000000000011-0000000000000000020"
    assert open(os.path.join(current(tmp_path), name), "rb").read() == seg_bytes(11, 10)
    assert install_download(j, seg, 30, seg_bytes(11, 10)) is False  # already held
    assert j.metrics_snapshot()["NumEditLogsSynced"] == 1             # Hadoop's count of synced segments
    assert [s.start_txid for s in j.get_edit_log_manifest(0, False).segments] == [1, 11, 21]


def test_install_rechecks_the_rules(j):
    w = Writer(JID, 1)
    write(j, w, 1, 10)
    # not known committed by anyone: skipped
    assert install_download(j, SegmentState(11, 20, False), -12345, seg_bytes(11, 10)) is False
    # a writer has it open here: skipped
    write(j, w, 11, 5, finalize=False)
    assert install_download(j, SegmentState(11, 20, False), 20, seg_bytes(11, 10)) is False


def test_a_crash_before_the_rename_leaves_nothing(tmp_path):
    def hook(name):
        if name == "before_sync_rename":
            raise Crash(name)
    j = open_journal(tmp_path, fault_hook=hook)
    j.format(NS)
    with pytest.raises(Crash):
        install_download(j, SegmentState(1, 10, False), 10, seg_bytes(1, 10))
    j.close()
    assert any(n.endswith(".sync.tmp") for n in os.listdir(current(tmp_path)))
    j = open_journal(tmp_path)
    try:
        assert not any(n.endswith(".tmp") for n in os.listdir(current(tmp_path)))
        assert j.get_edit_log_manifest(0, False).segments == ()
    finally:
        j.close()


def test_a_stale_in_progress_copy_is_superseded_and_moved_aside(j, tmp_path):
    w = Writer(JID, 1)
    write(j, w, 1, 5, finalize=False)      # a finalize this node missed
    write(j, w, 11, 10)                     # (a later segment started here: 1 is stale)
    assert install_download(j, SegmentState(1, 10, False), 20, seg_bytes(1, 10)) is True
    names = sorted(os.listdir(current(tmp_path)))
    assert "edits_inprogress_0000000000000000001.stale" in names
    assert [(s.start_txid, s.end_txid) for s in j.get_edit_log_manifest(0, True).segments] == [(1, 10), (11, 20)]


def test_the_purge_bound_is_durable_and_respected(j, tmp_path):
    w = Writer(JID, 1)
    write(j, w, 21, 10)
    j.purge_logs_older_than(w.req(), 21)
    j.close()
    j2 = open_journal(tmp_path)
    try:
        assert j2.purged_below == 21
        plan = j2.sync.sync_plan(Manifest((SegmentState(1, 10, False), SegmentState(11, 20, False)), 30))
        assert plan.fetch == () and [why for _, why in plan.skipped] == ["purged", "purged"]
    finally:
        j2.close()


def test_a_conflict_names_a_damaged_copy(j, tmp_path):
    w = Writer(JID, 1)
    write(j, w, 1, 10)
    name = os.path.join(current(tmp_path), "edits_0000000000000000001-0000000000000000010")
    good = j.get_edit_log_manifest(0, False, with_digests=True).segments[0]
    with open(name, "r+b") as f:
        f.seek(30)
        f.write(b"\xff")
    plan = j.sync.sync_plan(Manifest((good,), 10))
    assert len(plan.conflicts) == 1 and "is damaged" in plan.conflicts[0].why
    assert plan.fetch == ()
    # the peer's view of our damaged copy: other contents, theirs valid
    ours = j.get_edit_log_manifest(0, False, with_digests=True).segments[0]
    assert ours.digest != good.digest


def test_format_from_peers_refuses_votes_until_caught_up(tmp_path):
    j = open_journal(tmp_path)
    try:
        j.sync.format_from_peers(NS, 7, 20)
        assert j.last_promised_epoch == 7
        with pytest.raises(JournalRejoiningError, match="through 20"):
            j.new_epoch(NS, 8)
        w = Writer(JID, 7)
        # it still takes writes of the current writer (a replica of new segments)
        write(j, w, 21, 5)
        assert install_download(j, SegmentState(1, 10, False), 25, seg_bytes(1, 10))
        assert j.sync.finish_rejoin(1) is False                      # 11-20 still missing
        j.close()
        j = open_journal(tmp_path)                              # the marker is durable
        with pytest.raises(JournalRejoiningError):
            j.new_epoch(NS, 8)
        assert install_download(j, SegmentState(11, 20, False), 25, seg_bytes(11, 10))
        assert j.sync.finish_rejoin(1) is True
        j.new_epoch(NS, 8)
        with pytest.raises(JournalAlreadyFormattedError):
            j.sync.format_from_peers(NS, 9, 30)
    finally:
        j.close()


class _FailingDirSync(DiskJournalStorage):
    """The directory fsync fails (EIO) once armed: what libfiu's ``posix/io/sync/fsync`` does to it."""

    fail = False

    def sync_dir(self, subdir: str = "") -> None:
        if self.fail:
            raise OSError(5, "Input/output error (injected)")
        super().sync_dir(subdir)


def test_install_whose_directory_fsync_fails_keeps_its_records_and_says_so(tmp_path, caplog):
    """Issue 28's fault (b): after the rename (the commit point) a failed directory fsync used to raise while the
    segment stayed installed and served, unknown to the index, the digests and the highest txid. Now the records
    follow the file at once; the error says the install may not survive a crash, and is logged at ERROR."""
    storage = _FailingDirSync(os.path.join(str(tmp_path), JID), fsync=False)
    j = Journal(JID, storage)
    try:
        j.format(NS)
        j.new_epoch(NS, 1)
        w = Writer(JID, 1)
        write(j, w, 1, 10)
        storage.fail = True
        with pytest.raises(JournalError, match="is installed but the directory fsync after its rename failed") as e:
            install_download(j, SegmentState(11, 20, False), 20, seg_bytes(11, 10))
        assert e.value.fields["errno"] == 5
        storage.fail = False
        name = "edits_0000000000000000011-0000000000000000020"
        assert os.path.exists(os.path.join(current(tmp_path), name))
        assert [s.start_txid for s in j.get_edit_log_manifest(0, False).segments] == [1, 11]
        assert j.highest_written_txid == 20 and j.metrics_snapshot()["NumEditLogsSynced"] == 1
        assert j.sync.finalized_digest(11, 20) is not None
        assert install_download(j, SegmentState(11, 20, False), 20, seg_bytes(11, 10)) is False   # held
        assert any(r.levelname == "ERROR" and "may not survive a crash" in r.getMessage() for r in caplog.records)
    finally:
        j.close()
