"""SimFS: what survives a crash is exactly what was made durable, and faults are reproducible."""

from __future__ import annotations

import errno
import random

import pytest

from qjournal.sim.disk import CRASH_MODES, SimFS, SimulatedCrash


def fs(seed=0, **kw) -> SimFS:
    f = SimFS(random.Random(seed), **kw)
    f.makedirs("/jn/current")
    return f


def test_fsynced_bytes_and_entries_survive_a_crash():
    f = fs()
    f.create("/jn/current/a", b"hello")
    f.fsync("/jn/current/a")
    f.fsync_dir("/jn/current")
    f.crash()
    assert f.read("/jn/current/a") == b"hello"


def test_entry_without_directory_fsync_is_lost():
    f = fs()
    f.create("/jn/current/a", b"hello")
    f.fsync("/jn/current/a")
    f.crash()
    assert not f.exists("/jn/current/a")


def test_rename_without_directory_fsync_reverts():
    f = fs()
    f.create("/jn/current/tmp", b"new")
    f.fsync("/jn/current/tmp")
    f.fsync_dir("/jn/current")
    f.rename("/jn/current/tmp", "/jn/current/final")
    assert f.read("/jn/current/final") == b"new"
    f.crash()
    assert f.exists("/jn/current/tmp") and not f.exists("/jn/current/final")


def test_unsynced_tail_fares_every_way_across_seeds_but_never_touches_synced_prefix():
    seen = set()
    for seed in range(60):
        f = fs(seed)
        f.create("/jn/current/seg", b"D" * 1000)  # larger than a durable scalar: may tear
        f.fsync("/jn/current/seg")
        f.fsync_dir("/jn/current")
        f.append("/jn/current/seg", b"U" * 10)
        [(path, mode)] = f.crash().items()
        seen.add(mode)
        data = f.read("/jn/current/seg")
        assert data[:1000] == b"D" * 1000, seed
        if mode == "lose_unsynced":
            assert data == b"D" * 1000
        elif mode == "keep_unsynced":
            assert data == b"D" * 1000 + b"U" * 10
        elif mode == "torn_prefix":
            assert len(data) < 1010 and set(data[1000:]) <= {ord("U")}
    assert seen == set(CRASH_MODES)


def test_small_file_never_tears_mid_sector():
    seen = set()
    for seed in range(40):
        f = fs(seed)
        f.create("/jn/current/committed-txid", b"")
        f.fsync_dir("/jn/current")
        f.append("/jn/current/committed-txid", b"\x00\x00\x00\x00\x00\x00\x00\x07")
        f.crash()
        v = f.read("/jn/current/committed-txid")
        assert v in (b"", bytes(8), b"\x00\x00\x00\x00\x00\x00\x00\x07"), (seed, v)
        seen.add(v)
    assert len(seen) == 3


def test_crash_is_reproducible_from_the_seed():
    def run(seed):
        f = fs(seed)
        f.create("/jn/current/seg", b"")
        f.fsync_dir("/jn/current")
        f.append("/jn/current/seg", bytes(range(200)))
        f.crash()
        return f.read("/jn/current/seg")
    assert run(5) == run(5)


def test_disk_full_writes_what_fits_then_raises_enospc():
    f = fs(capacity_bytes=8)
    f.create("/jn/current/seg")
    with pytest.raises(OSError) as ei:
        f.append("/jn/current/seg", b"0123456789")
    assert ei.value.errno == errno.ENOSPC
    assert f.read("/jn/current/seg") == b"01234567"
    assert f.stats["enospc"] == 1


def test_armed_crash_point_fires_once_at_the_right_pass():
    f = fs()
    f.create("/jn/current/a", b"x")
    f.arm("before_fsync", after=1)
    f.fsync("/jn/current/a")
    with pytest.raises(SimulatedCrash) as ei:
        f.fsync("/jn/current/a")
    assert ei.value.point == "before_fsync"
    f.fsync("/jn/current/a")  # disarmed


def test_listdir_and_walk_are_sorted():
    f = fs()
    for n in ["b", "a", "c"]:
        f.create(f"/jn/current/{n}", n.encode())
    f.makedirs("/jn/current/paxos")
    assert f.listdir("/jn/current") == ["a", "b", "c", "paxos"]
    assert [p for p, _ in f.walk_files("/jn")] == ["/jn/current/a", "/jn/current/b", "/jn/current/c"]


def test_missing_file_raises_file_not_found():
    f = fs()
    with pytest.raises(FileNotFoundError):
        f.read("/jn/current/nope")


# -- SimJournalStorage: the JournalNode's storage interface on SimFS -----------------------------

from qjournal.errors import JournalLockedError  # noqa: E402
from qjournal.sim.disk import SimJournalStorage  # noqa: E402


def storage(seed=0, **kw):
    f = SimFS(random.Random(seed), **kw)
    s = SimJournalStorage(f, "/jn0/j1")
    s.lock()
    return f, s


def test_storage_lock_is_exclusive_until_close():
    f, s = storage()
    with pytest.raises(JournalLockedError):
        SimJournalStorage(f, "/jn0/j1").lock()
    s.close()
    SimJournalStorage(f, "/jn0/j1").lock()


def test_write_atomic_interrupted_anywhere_leaves_the_old_value():
    outcomes = set()
    for point in ["write", "before_fsync", "rename", "before_fsync_dir"]:
        for seed in range(8):
            f, s = storage(seed)
            s.write_durable_long("last-promised-epoch", 1)
            f.arm(point)
            crashed = []
            s.on_crash = lambda: crashed.append(True)
            try:
                s.write_durable_long("last-promised-epoch", 2)
            except SimulatedCrash:
                assert crashed
            f.crash()
            v = s.read_long("last-promised-epoch", -1)
            assert v in (1, 2), (point, seed)
            outcomes.add(v)
    # the directory fsync is the last step: a crash before it always reverts the rename
    assert outcomes == {1}


def test_write_atomic_returned_means_durable():
    f, s = storage()
    s.write_durable_long("last-writer-epoch", 7)
    f.crash()
    assert s.read_long("last-writer-epoch", -1) == 7


def test_paxos_crash_points():
    f, s = storage()
    f.arm("before_persist_paxos")
    with pytest.raises(SimulatedCrash):
        s.write_paxos(101, b"decision")
    f.crash()
    assert s.read_paxos(101) is None
    f.arm("after_persist_paxos")
    with pytest.raises(SimulatedCrash):
        s.write_paxos(101, b"decision")
    f.crash()
    assert s.read_paxos(101) == b"decision"


def test_segment_append_sync_and_list():
    f, s = storage()
    s.create("edits_inprogress_1", b"head")
    s.sync("edits_inprogress_1")
    s.sync_dir()
    s.append("edits_inprogress_1", b"tail")
    assert s.read("edits_inprogress_1", 4) == b"tail"
    assert s.list_files() == ["edits_inprogress_1"]
    assert s.list_files("paxos") == []
    assert s.open_read("edits_inprogress_1").read() == b"headtail"
    s.wipe()
    assert s.list_files() == []


def test_best_effort_value_after_crash_is_old_or_new_sector_atomic():
    seen = set()
    for seed in range(30):
        f, s = storage(seed)
        s.write_best_effort("committed-txid", b"00000005")
        s.sync("committed-txid")
        s.sync_dir()
        s.write_best_effort("committed-txid", b"00000009")
        f.crash()
        v = s.read("committed-txid")
        assert len(v) == 8
        seen.add(v if v in (b"00000005", b"00000009") else b"garbage")
    assert seen == {b"00000005", b"00000009"}


def test_large_rewrite_may_tear_into_garbage():
    seen = set()
    for seed in range(30):
        f, s = storage(seed)
        s.write_best_effort("big", b"a" * 1024)
        s.sync("big")
        s.sync_dir()
        s.write_best_effort("big", b"b" * 1024)
        f.crash()
        v = s.read("big")
        seen.add(v if v in (b"a" * 1024, b"b" * 1024) else b"garbage")
    assert b"garbage" in seen


def _synced_open_segment(seed: int, step: int):
    """A storage whose open segment holds 100 synced bytes and one preallocated step after them."""
    f, s = storage(seed)
    s.preallocate_bytes = step
    s.create("edits_inprogress_1", b"D" * 100, grows=True)
    s.sync("edits_inprogress_1")
    s.sync_dir()
    assert f.size(s._path("edits_inprogress_1")) == 100 + step  # the data, then one step of zeros
    return f, s


def test_bytes_written_into_a_preallocated_tail_fare_like_appended_ones():
    seen = set()
    for seed in range(80):
        f, s = _synced_open_segment(seed, 512)
        s.append("edits_inprogress_1", b"U" * 10)  # in place, inside the zeros
        assert s.read("edits_inprogress_1")[:110] == b"D" * 100 + b"U" * 10
        [(_path, mode)] = f.crash().items()
        seen.add(mode)
        data = s.read("edits_inprogress_1")
        assert len(data) == 612 and data[:100] == b"D" * 100, seed  # synced: untouched
        tail = data[100:].rstrip(b"\x00")
        if mode == "prealloc_lose_unsynced":
            assert tail == b""
        elif mode == "prealloc_keep_unsynced":
            assert tail == b"U" * 10
        elif mode == "prealloc_torn_prefix":
            assert len(tail) < 10 and set(tail) <= {ord("U")}
    assert seen == {f"prealloc_{m}" for m in CRASH_MODES}


def test_an_unsynced_preallocation_step_keeps_or_loses_its_size_never_the_synced_bytes():
    sizes = set()
    for seed in range(40):
        f, s = _synced_open_segment(seed, 64)
        s.append("edits_inprogress_1", b"U" * 100)  # past the first step: the file grows again
        f.crash()
        data = s.read("edits_inprogress_1")
        sizes.add(len(data))
        assert data[:100] == b"D" * 100, seed  # synced: untouched; after it the U's, zeros or a torn tail
    assert sizes == {164, 264}


def test_the_open_segment_is_written_after_its_data_and_cut_by_truncate():
    f, s = storage()
    s.preallocate_bytes = 32
    s.create("edits_inprogress_1", b"head", grows=True)
    s.append("edits_inprogress_1", b"tail")
    assert s.size("edits_inprogress_1") == 4 + 32  # one step ahead of the data
    assert s.read("edits_inprogress_1") == b"headtail" + bytes(28)
    s.truncate("edits_inprogress_1", 8)
    s.append("edits_inprogress_1", b"more")
    assert s.read("edits_inprogress_1")[:12] == b"headtailmore"
    s.create("other", b"x")  # not the open segment: appends extend the file
    s.append("other", b"y")
    assert s.read("other") == b"xy"
