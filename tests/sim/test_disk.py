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
        f.create("/jn/current/seg", b"D" * 10)
        f.fsync("/jn/current/seg")
        f.fsync_dir("/jn/current")
        f.append("/jn/current/seg", b"U" * 10)
        [(path, mode)] = f.crash().items()
        seen.add(mode)
        data = f.read("/jn/current/seg")
        assert data[:10] == b"D" * 10, seed
        if mode == "lose_unsynced":
            assert data == b"D" * 10
        elif mode == "keep_unsynced":
            assert data == b"D" * 10 + b"U" * 10
        elif mode == "torn_prefix":
            assert len(data) < 20 and set(data[10:]) <= {ord("U")}
    assert seen == set(CRASH_MODES)


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
