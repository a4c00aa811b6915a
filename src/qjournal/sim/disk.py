"""A simulated disk for JournalNodes: durable vs. volatile bytes, crashes, torn writes, ENOSPC.

Why: the correctness of a JournalNode rests on *when* bytes become durable
(reference §2.2): the promise is fsynced before ``new_epoch`` answers, a batch
before ``journal`` answers, the paxos decision (tmp → fsync → rename → fsync of
the directory) before ``accept_recovery`` answers, and the finalize rename is
followed by a directory fsync. A real disk never shows what happens when the
machine dies between two of those steps. :class:`SimFS` does, deterministically,
from the run's seeded random generator.

Model (the POSIX guarantees that matter, and no more):

* A file has *visible* bytes (what reads return now) and *durable* bytes (what
  survives a crash). ``fsync(path)`` makes the file's visible bytes durable.
* A directory entry (create, rename, delete) becomes durable only when its
  directory is fsynced (``fsync_dir``). A crash reverts every directory to its
  last durable entries; a file created and never made durable disappears.
* :meth:`SimFS.crash` applies, per file with unsynced appended bytes, one of:
  lose them all, keep them all, keep a prefix (a torn write), or keep a prefix
  followed by garbage (a torn sector), torn tails weighing double; a tiny
  file (at most 64 bytes: the durable scalars) instead loses them, keeps them,
  or reads zeros in their place (size updated before the data), since a write
  inside one sector does not tear. Larger files tear at any byte, harsher than
  real sector-granular tearing on purpose; a file truncated or overwritten in
  place without fsync keeps the old bytes or the new bytes (or, for a rewrite
  larger than one 512-byte sector, garbage of the same length). Bytes written
  into a preallocated zero tail (``preallocate`` + ``write_at``, what the
  JournalNode's open segment does) fare like appended bytes: lost, kept, a
  prefix, or a prefix and garbage, with the zeros after them; an unsynced
  preallocation keeps or loses its new size.
  Which one is drawn from the seeded generator.
* ``capacity_bytes`` caps the sum of visible file sizes; a write beyond it
  writes what fits and raises ``OSError(ENOSPC)``, as a real write(2) can leave
  a partial record at the tail (the HDFS-14557 case).
* Failures (:meth:`SimFS.fail`, the faults libfiu injects on real hosts; kinds in
  :data:`qjournal.sim.faults.DISK_KINDS`): the next (or the ``after``-th next) pass through
  an operation raises ``OSError`` with its errno. A write (append, write at) fails after writing a drawn prefix of its
  bytes, a preallocation without changing the file. A read fails. An fsync
  that fails with EIO drew what happened to the bytes it covered: they reached the disk
  (only the report failed), or the kernel dropped them from its dirty set (Linux since
  4.13: the pages stay readable and are marked clean), so a later fsync that succeeds
  does not write them and a crash loses them (the PostgreSQL "fsyncgate" lesson); writing
  those bytes again dirties them again. A directory's fsync that fails made its entries
  durable or not, drawn.
* ``crash_points``: a test or the fault injector arms a named point (e.g.
  ``"before_fsync"``) and the next operation that passes it raises
  :class:`SimulatedCrash`; the owner of the disk then calls :meth:`crash`.

:class:`SimJournalStorage` (at the bottom) adapts this file system to the
JournalNode's injected ``JournalStorage`` interface once that interface exists;
until then the simulator exercises the journal through whatever storage the
JournalNode accepts with a file-system root (see ``cluster.py``).

Invariants:

1. After ``fsync(p)`` returns, a crash never changes the first
   ``len(visible)`` bytes of ``p`` as long as its directory entry is durable.
2. After ``fsync_dir(d)`` returns, a crash never reverts an entry of ``d``
   made before the call.
3. Bytes never become durable by themselves: only ``fsync`` moves them.
4. Every random choice comes from the ``rng`` given at construction.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import random
from dataclasses import dataclass, field

from qjournal.sim.faults import DISK_KINDS

__all__ = ["SimFS", "SimulatedCrash", "CRASH_MODES"]

#: a write within one sector is atomic on the devices we model
SECTOR_BYTES = 512
#: files up to this size (epochs, committed txid: the durable scalars) never tear; larger
#: files tear at any byte, which is deliberately harsher than sector-granular tearing
SCALAR_FILE_BYTES = 64

#: how unsynced bytes of one file fare in a crash
CRASH_MODES = ["lose_unsynced", "keep_unsynced", "torn_prefix", "torn_garbage"]
CRASH_MODE_WEIGHTS = [1, 1, 2, 2]


class SimulatedCrash(Exception):
    """Raised at an armed crash point: the node dies here (not a QJournalError: never handled)."""

    def __init__(self, point: str, path: str = "") -> None:
        super().__init__(f"simulated crash at {point} {path}".strip())
        self.point = point
        self.path = path


@dataclass
class _Inode:
    visible: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    #: byte ranges ``[a, b)`` a failed fsync dropped: no later fsync makes them durable until written again
    dropped: list[tuple[int, int]] = field(default_factory=list)

    def rewritten(self, start: int, end: int) -> None:
        """Bytes ``[start, end)`` were written (or cut): they are dirty again, no longer dropped."""
        if not self.dropped:
            return
        out = []
        for a, b in self.dropped:
            if b <= start or a >= end:
                out.append((a, b))
                continue
            if a < start:
                out.append((a, start))
            if b > end:
                out.append((end, b))
        self.dropped = out

    def durable_after_fsync(self) -> bytes:
        """What a successful fsync leaves durable: the visible bytes, except the dropped ranges, which keep
        what the disk held there (zeros past its old end)."""
        if not self.dropped:
            return bytes(self.visible)
        new = bytearray(self.visible)
        old = self.durable
        for a, b in self.dropped:
            b = min(b, len(new))
            if a < b:
                new[a:b] = old[a:b] + bytes(max(0, b - max(a, len(old))))
        return bytes(new)


def _first_difference(a: bytes, b: bytes) -> int:
    """The first offset where ``a`` and ``b`` differ (the shorter length when one is a prefix)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class SimFS:
    """An in-memory file system with crash semantics (see the module docstring).

    Args:
        rng: the run's random generator (invariant 4).
        capacity_bytes: total visible bytes allowed (None = unlimited).
        name: for messages.
    """

    def __init__(self, rng: random.Random, capacity_bytes: int | None = None, name: str = "disk") -> None:
        self.rng = rng
        self.capacity_bytes = capacity_bytes
        self.name = name
        self._inodes: dict[int, _Inode] = {}
        self._next_ino = 1
        # directory -> {entry name -> inode}; visible and durable views
        self._dirs: dict[str, dict[str, int]] = {"/": {}}
        self._durable_dirs: dict[str, dict[str, int]] = {"/": {}}
        self.armed: dict[str, int] = {}  # crash point -> countdown (fires when it reaches 0)
        #: operation -> [(countdown, errno, kind)]: the armed failures (:meth:`fail`)
        self.failures: dict[str, list[list]] = {}
        self.locks: dict[str, bool] = {}  # journal dir -> held (a process lock: gone in a crash)
        self.stats: dict[str, int] = {}

    # -- crash points ------------------------------------------------------------------
    def arm(self, point: str, after: int = 0) -> None:
        """Crash at the ``after``-th next pass through ``point`` (0 = the next one)."""
        self.armed[point] = after

    def _passing(self, point: str, path: str = "") -> None:
        n = self.armed.get(point)
        if n is None:
            return
        if n > 0:
            self.armed[point] = n - 1
            return
        del self.armed[point]
        self._count(f"crash_at_{point}")
        raise SimulatedCrash(point, path)

    # -- failures (the module docstring's "Failures") ----------------------------------------
    def fail(self, kind: str, after: int = 0) -> None:
        """Fail the ``after``-th next pass through the operation of ``kind`` (0 = the next one).

        Raises:
            ValueError: an unknown kind (the known ones are :data:`qjournal.sim.faults.DISK_KINDS`).
        """
        try:
            op, err = DISK_KINDS[kind]
        except KeyError:
            raise ValueError(f"{self.name}: unknown disk failure {kind!r} (known: {sorted(DISK_KINDS)})") from None
        self.failures.setdefault(op, []).append([after, err, kind])

    def _failing(self, op: str, path: str) -> OSError | None:
        """The failure armed for this pass through ``op``, if one fires now (counted ``failed:<kind>``)."""
        armed = self.failures.get(op)
        if not armed:
            return None
        fired = None
        for f in armed:
            if f[0] == 0 and fired is None:
                fired = f
            elif f[0] > 0:
                f[0] -= 1
        if fired is None:
            return None
        armed.remove(fired)
        if not armed:
            del self.failures[op]
        _, err, kind = fired
        self._count(f"failed:{kind}")
        return OSError(err, f"{self.name}: {os.strerror(err)} ({kind})", path)

    def _write_fails(self, path: str, node: "_Inode", data: bytes, offset: int | None = None) -> None:
        """An armed write failure: write a drawn prefix of ``data`` (at ``offset``, else appended), then raise."""
        e = self._failing("write", path)
        if e is None:
            return
        part = data[:self.rng.randrange(len(data) + 1)] if data else b""
        at = len(node.visible) if offset is None else offset
        node.visible[at:at + len(part)] = part
        node.rewritten(at, at + len(part))
        raise e

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    # -- paths ---------------------------------------------------------------------------
    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        path = posixpath.normpath("/" + path.lstrip("/"))
        d, n = posixpath.split(path)
        return d or "/", n

    def _dir(self, d: str) -> dict[str, int]:
        try:
            return self._dirs[d]
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, f"{self.name}: no such directory", d) from None

    def _ino(self, path: str) -> _Inode:
        d, n = self._split(path)
        ino = self._dir(d).get(n)
        if ino is None:
            raise FileNotFoundError(errno.ENOENT, f"{self.name}: no such file", path)
        return self._inodes[ino]

    def makedirs(self, path: str) -> None:
        """Create a directory and its parents (durable at once: set-up, not a crash window)."""
        path = posixpath.normpath("/" + path.lstrip("/"))
        parts = [p for p in path.split("/") if p]
        cur = "/"
        for p in parts:
            cur = posixpath.join(cur, p)
            self._dirs.setdefault(cur, {})
            self._durable_dirs.setdefault(cur, {})

    def exists(self, path: str) -> bool:
        path = posixpath.normpath("/" + path.lstrip("/"))
        if path in self._dirs:
            return True
        d, n = self._split(path)
        return n in self._dirs.get(d, {})

    def listdir(self, path: str) -> list[str]:
        """Entry names of a directory (files and subdirectories), sorted."""
        path = posixpath.normpath("/" + path.lstrip("/"))
        names = list(self._dir(path))
        prefix = path.rstrip("/") + "/"
        for d in self._dirs:
            if d != path and d.startswith(prefix) and "/" not in d[len(prefix):]:
                names.append(d[len(prefix):])
        return sorted(names)

    # -- data ----------------------------------------------------------------------------
    def used_bytes(self) -> int:
        live = {ino for d in self._dirs.values() for ino in d.values()}
        return sum(len(self._inodes[i].visible) for i in sorted(live))

    def create(self, path: str, data: bytes = b"") -> None:
        """Create or truncate ``path`` (the entry is not durable until ``fsync_dir``)."""
        d, n = self._split(path)
        entries = self._dir(d)
        ino = self._next_ino
        self._next_ino += 1
        self._inodes[ino] = _Inode()
        entries[n] = ino
        if data:
            self.append(path, data)

    def append(self, path: str, data: bytes) -> None:
        """Append bytes (volatile until ``fsync``).

        Raises:
            OSError(ENOSPC): the disk is full; the part that fit was written.
            SimulatedCrash: at the armed point ``"write"``.
        """
        self._passing("write", path)
        node = self._ino(path)
        self._write_fails(path, node, data)
        end = len(node.visible)
        if self.capacity_bytes is not None:
            free = self.capacity_bytes - self.used_bytes()
            if len(data) > free:
                node.visible += data[:max(0, free)]
                node.rewritten(end, len(node.visible))
                self._count("enospc")
                raise OSError(errno.ENOSPC, f"{self.name}: no space left on device", path)
        node.visible += data
        node.rewritten(end, len(node.visible))

    def preallocate(self, path: str, length: int) -> None:
        """Grow a file to ``length`` bytes of zeros (``posix_fallocate``; volatile until ``fsync``).

        Raises:
            OSError(ENOSPC): the disk cannot hold it; nothing changed.
        """
        node = self._ino(path)
        grow = length - len(node.visible)
        if grow <= 0:
            return
        e = self._failing("write", path)
        if e is not None:
            raise e
        if self.capacity_bytes is not None and grow > self.capacity_bytes - self.used_bytes():
            self._count("enospc")
            raise OSError(errno.ENOSPC, f"{self.name}: no space left on device", path)
        node.visible += bytes(grow)

    def write_at(self, path: str, offset: int, data: bytes) -> None:
        """Write bytes at ``offset`` (``pwrite``; volatile until ``fsync``). Space past the end
        is taken as ``append`` takes it (a full disk writes what fits, then ENOSPC).

        Raises:
            OSError(ENOSPC), SimulatedCrash: as :meth:`append`.
        """
        node = self._ino(path)
        inside = max(0, min(len(data), len(node.visible) - offset))
        if inside < len(data):
            self.append(path, bytes(max(0, offset - len(node.visible))) + data[inside:])
            data = data[:inside]
        else:
            self._passing("write", path)
            self._write_fails(path, node, data, offset)
        node.visible[offset:offset + len(data)] = data
        node.rewritten(offset, offset + len(data))

    def truncate(self, path: str, length: int) -> None:
        """Cut a file to ``length`` bytes (volatile until ``fsync``)."""
        node = self._ino(path)
        del node.visible[length:]
        node.rewritten(length, 1 << 62)

    def read(self, path: str) -> bytes:
        """The visible bytes of a file.

        Raises:
            OSError(EIO): an armed read failure.
        """
        node = self._ino(path)
        e = self._failing("read", path)
        if e is not None:
            raise e
        return bytes(node.visible)

    def size(self, path: str) -> int:
        return len(self._ino(path).visible)

    def fsync(self, path: str) -> None:
        """Make a file's visible bytes durable (crash point ``"before_fsync"``, ``"after_fsync"``)."""
        self._passing("before_fsync", path)
        node = self._ino(path)
        e = self._failing("fsync", path)
        if e is not None:
            # what the failed fsync did to the bytes it covered (module docstring)
            i = _first_difference(bytes(node.visible), node.durable)
            if self.rng.random() < 0.5:
                node.durable = node.durable_after_fsync()
                self._count("fsync_eio_written")
            elif i < len(node.visible):
                node.dropped.append((i, len(node.visible)))
                self._count("fsync_eio_dropped")
            raise e
        node.durable = node.durable_after_fsync()
        self._count("fsync")
        self._passing("after_fsync", path)

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` with ``src`` (volatile until ``fsync_dir``; crash point ``"rename"``)."""
        self._passing("rename", src)
        sd, sn = self._split(src)
        dd, dn = self._split(dst)
        entries = self._dir(sd)
        if sn not in entries:
            raise FileNotFoundError(errno.ENOENT, f"{self.name}: no such file", src)
        ino = entries.pop(sn)
        self._dir(dd)[dn] = ino

    def remove(self, path: str) -> None:
        """Delete an entry (volatile until ``fsync_dir``)."""
        d, n = self._split(path)
        entries = self._dir(d)
        if n not in entries:
            raise FileNotFoundError(errno.ENOENT, f"{self.name}: no such file", path)
        del entries[n]

    def fsync_dir(self, path: str) -> None:
        """Make a directory's entries durable (crash point ``"before_fsync_dir"``)."""
        self._passing("before_fsync_dir", path)
        path = posixpath.normpath("/" + path.lstrip("/"))
        entries = self._dir(path)
        e = self._failing("fsync_dir", path)
        if e is not None:
            if self.rng.random() < 0.5:
                self._durable_dirs[path] = dict(entries)
            raise e
        self._durable_dirs[path] = dict(entries)
        self._count("fsync_dir")

    # -- crash -------------------------------------------------------------------------------
    def crash(self) -> dict[str, str]:
        """Lose what was not durable (see the module docstring); disarm every crash point.

        Returns:
            path -> crash mode applied, for files that had unsynced bytes (sorted).
        """
        self.armed.clear()
        self.failures.clear()
        self.locks.clear()
        for node in self._inodes.values():
            if node.dropped:  # the kernel dropped them: the disk holds what it held there
                node.visible = bytearray(node.durable_after_fsync())
                node.dropped = []
        self._dirs = {d: dict(e) for d, e in sorted(self._durable_dirs.items())}
        applied: dict[str, str] = {}
        live = sorted({(d, n, ino) for d, e in self._dirs.items() for n, ino in e.items()})
        for d, n, ino in live:
            node = self._inodes[ino]
            vis, dur = bytes(node.visible), node.durable
            if vis == dur:
                continue
            path = posixpath.join(d, n)
            i = _first_difference(vis, dur)
            if i < len(dur) <= len(vis) and len(vis) > SCALAR_FILE_BYTES and not dur[i:].strip(b"\x00"):
                # written into preallocated zeros (and perhaps a further unsynced preallocation)
                size = len(vis) if len(vis) == len(dur) or self.rng.random() < 0.5 else len(dur)
                data = vis[i:].rstrip(b"\x00")
                mode = self.rng.choices(CRASH_MODES, CRASH_MODE_WEIGHTS)[0]
                if mode == "lose_unsynced" or not data:
                    kept = b""
                elif mode == "keep_unsynced":
                    kept = data
                elif mode == "torn_prefix":
                    kept = data[:self.rng.randrange(len(data))]
                else:
                    kept = data[:self.rng.randrange(len(data))] + bytes(
                        self.rng.randrange(256) for _ in range(self.rng.randrange(1, 9)))
                base = bytearray(dur[:size] + bytes(max(0, size - len(dur))))
                kept = kept[:max(0, size - i)]
                base[i:i + len(kept)] = kept
                new = bytes(base)
                mode = f"prealloc_{mode}"
                node.visible = bytearray(new)
                node.durable = new
                applied[path] = mode
                self._count(f"crash_{mode}")
                continue
            if not vis.startswith(dur):
                # truncated or rewritten in place without fsync: the old or the new bytes;
                # garbage only for a rewrite larger than one sector (a sector write is atomic)
                modes = ["overwrite_old", "overwrite_new"]
                if len(vis) > SECTOR_BYTES and not dur.startswith(vis):
                    modes.append("overwrite_garbage")
                mode = self.rng.choice(modes)
                if mode == "overwrite_old":
                    new = dur
                elif mode == "overwrite_new":
                    new = vis
                else:
                    new = bytes(self.rng.randrange(256) for _ in range(len(vis)))
                node.visible = bytearray(new)
                node.durable = new
                applied[path] = mode
                self._count(f"crash_{mode}")
                continue
            extra = vis[len(dur):]
            if len(vis) <= SCALAR_FILE_BYTES:
                # a tiny file (a durable scalar) lives in one sector: its data is all there, not
                # there, or the size was updated before the data (zeros); it does not tear
                mode = self.rng.choice(["lose_unsynced", "keep_unsynced", "zero_fill"])
            else:
                # torn tails weigh double: they are what the Journal's repair-on-open must handle
                mode = self.rng.choices(CRASH_MODES, CRASH_MODE_WEIGHTS)[0]
            if mode == "zero_fill":
                new = dur + bytes(len(extra))
            elif mode == "lose_unsynced" or not extra:
                new = dur
            elif mode == "keep_unsynced":
                new = vis
            elif mode == "torn_prefix":
                new = dur + extra[:self.rng.randrange(len(extra))]
            else:
                keep = self.rng.randrange(len(extra))
                garbage = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 9)))
                new = dur + extra[:keep] + garbage
            node.visible = bytearray(new)
            node.durable = new
            applied[path] = mode
            self._count(f"crash_{mode}")
        # inodes unreachable from a durable entry are gone
        reachable = {ino for e in self._dirs.values() for ino in e.values()}
        self._inodes = {i: self._inodes[i] for i in sorted(reachable)}
        self._count("crash")
        return applied

    # -- introspection for the checker --------------------------------------------------------
    def walk_files(self, root: str = "/") -> list[tuple[str, bytes]]:
        """Every file under ``root`` with its visible bytes, sorted by path."""
        root = posixpath.normpath("/" + root.lstrip("/"))
        out = []
        for d in sorted(self._dirs):
            if d != root and not d.startswith(root.rstrip("/") + "/"):
                continue
            for n in sorted(self._dirs[d]):
                out.append((posixpath.join(d, n), bytes(self._inodes[self._dirs[d][n]].visible)))
        return out


# -- the JournalNode's storage interface on SimFS ------------------------------------------------

from qjournal.errors import JournalError, JournalLockedError  # noqa: E402
from qjournal.journalnode.storage import JournalStorage  # noqa: E402
from qjournal.protocol.journal_layout import CURRENT_DIR, PAXOS_DIR  # noqa: E402


class SimJournalStorage(JournalStorage):
    """The JournalNode's ``JournalStorage`` on a :class:`SimFS` (one journal id).

    Every durable step of the interface maps to one SimFS step, so a crash can
    fall between any two of them: ``write_atomic`` is create tmp → append →
    fsync → rename → fsync(dir), with crash points between each; the paxos
    file adds ``before_persist_paxos`` / ``after_persist_paxos`` around it
    (reference §6.4, the HDFS-3955 window).

    Args:
        fs: the node's simulated disk.
        journal_dir: ``/<node>/<jid>``; ``current/`` lives inside it.
        on_crash: called (before :class:`SimulatedCrash` propagates) when an
            armed crash point fires, so the cluster can take the node down at once.
        on_note: ``(kind, detail)`` callback for observations that explain a
            later violation (``finalize_unsynced``: a segment renamed to its
            finalized name while some of its bytes were not durable).
        preallocate_bytes: the open segment grows this much at a time, written in
            place (the disk storage's preallocation, ``disk_storage`` module); 0: appends.
    """

    def __init__(self, fs: SimFS, journal_dir: str, on_crash=None, on_note=None,
                 preallocate_bytes: int = 0) -> None:
        self.fs = fs
        self.preallocate_bytes = preallocate_bytes
        #: the open segment (``create(grows=True)``) -> the end of its data (the rest is preallocated)
        self._written: dict[str, int] = {}
        self.journal_dir = posixpath.normpath("/" + journal_dir.lstrip("/"))
        self.current = posixpath.join(self.journal_dir, CURRENT_DIR)
        self.where = f"{fs.name}:{self.current}"
        self.on_crash = on_crash
        self.on_note = on_note
        self._locked = False

    def _path(self, name: str) -> str:
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise JournalError(f"{self.where}: bad file name {name!r}", path=name)
        return posixpath.join(self.current, name)

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except SimulatedCrash:
            if self.on_crash is not None:
                self.on_crash()
            raise

    def _point(self, point: str, name: str) -> None:
        self._guard(self.fs._passing, point, name)

    # --- lifecycle -----------------------------------------------------------------
    def lock(self) -> None:
        holders = self.fs.locks
        if holders.get(self.journal_dir):
            raise JournalLockedError(f"Cannot lock storage {self.where}: the directory is already "
                                     f"locked", path=self.journal_dir)
        self.fs.makedirs(posixpath.join(self.current, PAXOS_DIR))
        holders[self.journal_dir] = True
        self._locked = True

    def close(self) -> None:
        if self._locked:
            self.fs.locks.pop(self.journal_dir, None)
            self._locked = False

    def wipe(self) -> None:
        self._written.clear()
        for name in self.fs.listdir(self.current):
            p = posixpath.join(self.current, name)
            if p in self.fs._dirs:
                for sub in self.fs.listdir(p):
                    self.fs.remove(posixpath.join(p, sub))
                self.fs.fsync_dir(p)
            else:
                self.fs.remove(p)
        self.fs.makedirs(posixpath.join(self.current, PAXOS_DIR))
        self.fs.fsync_dir(self.current)

    # --- reading ---------------------------------------------------------------------
    def list_files(self, subdir: str = "") -> list[str]:
        d = posixpath.join(self.current, subdir) if subdir else self.current
        if d not in self.fs._dirs:
            return []
        return sorted(n for n in self.fs._dirs[d])

    def exists(self, name: str) -> bool:
        p = self._path(name)
        return self.fs.exists(p) and p not in self.fs._dirs

    def size(self, name: str) -> int:
        return self.fs.size(self._path(name))

    def read(self, name: str, offset: int = 0, length: int = -1) -> bytes:
        data = self.fs.read(self._path(name))
        return data[offset:] if length < 0 else data[offset:offset + length]

    def open_read(self, name: str):
        return io.BytesIO(self.fs.read(self._path(name)))

    # --- content changes -----------------------------------------------------------------
    def create(self, name: str, data: bytes, *, grows: bool = False) -> None:
        self._written.pop(name, None)
        self._guard(self.fs.create, self._path(name), b"")
        if grows and self.preallocate_bytes:
            self._written[name] = 0
        if data:
            self.append(name, data)

    def append(self, name: str, data: bytes) -> None:
        end = self._written.get(name)
        if end is None:
            self._guard(self.fs.append, self._path(name), data)
            return
        path = self._path(name)
        want = end + len(data)
        if want > self.fs.size(path):
            self.fs.preallocate(path, want + self.preallocate_bytes)  # ENOSPC: nothing written
        self._guard(self.fs.write_at, path, end, data)
        self._written[name] = want

    def sync(self, name: str) -> None:
        self._guard(self.fs.fsync, self._path(name))

    def truncate(self, name: str, length: int) -> None:
        self.fs.truncate(self._path(name), length)
        if name in self._written:
            self._written[name] = length

    # --- directory changes -----------------------------------------------------------------
    def rename(self, src: str, dst: str) -> None:
        if self.on_note is not None and src.startswith("edits_inprogress_") and \
                dst.startswith("edits_") and not dst.startswith("edits_inprogress_"):
            node = self.fs._ino(self._path(src))
            if bytes(node.visible) != node.durable:
                # a finalized segment whose bytes are not all durable can tear in a crash
                self.on_note("finalize_unsynced", f"{src} -> {dst}")
        self._guard(self.fs.rename, self._path(src), self._path(dst))
        self._written.pop(src, None)
        self._written.pop(dst, None)

    def delete(self, name: str) -> None:
        self._written.pop(name, None)
        try:
            self.fs.remove(self._path(name))
        except FileNotFoundError:
            pass

    def sync_dir(self, subdir: str = "") -> None:
        self._guard(self.fs.fsync_dir, posixpath.join(self.current, subdir) if subdir else self.current)

    # --- small durable values ------------------------------------------------------------
    def write_atomic(self, name: str, data: bytes) -> None:
        paxos = name.startswith(PAXOS_DIR + "/")
        if paxos:
            self._point("before_persist_paxos", name)
        tmp = f"{name}.tmp"
        self.create(tmp, data)
        self.sync(tmp)
        self.rename(tmp, name)  # the commit point
        self.sync_dir(posixpath.dirname(name))
        if paxos:
            self._point("after_persist_paxos", name)

    def write_best_effort(self, name: str, data: bytes) -> None:
        p = self._path(name)
        if not self.fs.exists(p):
            self.fs.create(p)
        node = self.fs._ino(p)
        node.visible[:len(data)] = data
