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


# -- failures (the faults libfiu injects on real hosts) ------------------------------------------

def _failed_fsync(seed: int) -> tuple[SimFS, str]:
    """A file with 4 synced bytes and 4 more whose fsync failed with EIO; the outcome the seed drew."""
    f = fs(seed)
    f.create("/jn/current/a", b"good")
    f.fsync("/jn/current/a")
    f.fsync_dir("/jn/current")
    f.append("/jn/current/a", b"lost")
    f.fail("fsync_eio")
    with pytest.raises(OSError) as e:
        f.fsync("/jn/current/a")
    assert e.value.errno == errno.EIO and "fsync_eio" in str(e.value)
    assert f.read("/jn/current/a") == b"goodlost"   # the page cache still serves the bytes
    return f, "dropped" if f.stats.get("fsync_eio_dropped") else "written"


def test_a_failed_fsync_either_reached_the_disk_or_dropped_the_bytes_across_seeds():
    outcomes = {_failed_fsync(seed)[1] for seed in range(20)}
    assert outcomes == {"dropped", "written"}


def test_bytes_a_failed_fsync_dropped_stay_lost_through_a_later_successful_fsync():
    """The fsyncgate rule: retrying the fsync after EIO succeeds, and a crash still loses the bytes."""
    seed = next(s for s in range(50) if _failed_fsync(s)[1] == "dropped")
    f, _ = _failed_fsync(seed)
    f.append("/jn/current/a", b"+new")
    f.fsync("/jn/current/a")              # succeeds: writes "+new", not the dropped "lost"
    f.crash()
    assert f.read("/jn/current/a") == b"good\0\0\0\0+new"


def test_dropped_bytes_written_again_are_dirty_again():
    seed = next(s for s in range(50) if _failed_fsync(s)[1] == "dropped")
    f, _ = _failed_fsync(seed)
    f.truncate("/jn/current/a", 4)
    f.append("/jn/current/a", b"again")
    f.fsync("/jn/current/a")
    f.crash()
    assert f.read("/jn/current/a") == b"goodagain"


def test_a_failed_directory_fsync_raises_eio_and_a_later_one_makes_the_entry_durable():
    f = fs()
    f.create("/jn/current/a", b"x")
    f.fsync("/jn/current/a")
    f.fail("fsync_dir_eio")
    with pytest.raises(OSError) as e:
        f.fsync_dir("/jn/current")
    assert e.value.errno == errno.EIO
    f.fsync_dir("/jn/current")
    f.crash()
    assert f.read("/jn/current/a") == b"x"


def test_a_write_failure_fires_at_its_pass_and_writes_a_prefix_at_most():
    for kind, code in [("write_enospc", errno.ENOSPC), ("write_eio", errno.EIO)]:
        f = fs(3)
        f.create("/jn/current/a")
        f.fail(kind, after=1)
        f.append("/jn/current/a", b"first")           # pass 0: not yet
        with pytest.raises(OSError) as e:
            f.append("/jn/current/a", b"second")      # pass 1: fails
        assert e.value.errno == code
        assert b"first second".replace(b" ", b"").startswith(f.read("/jn/current/a"))
        assert f.stats[f"failed:{kind}"] == 1
        f.append("/jn/current/a", b"!")               # once only


def test_a_read_failure_and_an_unknown_kind():
    f = fs()
    f.create("/jn/current/a", b"x")
    f.fail("read_eio")
    with pytest.raises(OSError) as e:
        f.read("/jn/current/a")
    assert e.value.errno == errno.EIO
    assert f.read("/jn/current/a") == b"x"
    with pytest.raises(ValueError, match="unknown disk failure 'fsync_enospc'"):
        f.fail("fsync_enospc")


def test_a_crash_disarms_the_failures():
    f = fs()
    f.create("/jn/current/a", b"x")
    f.fail("fsync_eio")
    f.crash()
    f.create("/jn/current/b", b"y")
    f.fsync("/jn/current/b")
