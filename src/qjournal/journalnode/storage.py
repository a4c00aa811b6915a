"""The storage of one journal, behind a narrow interface that says exactly what is durable.

Why an interface: the per-journal rules (:class:`~qjournal.journalnode.journal.Journal`)
must run unchanged on a real disk and on the deterministic simulator's
simulated disk, which crashes the node between any two storage steps (after
writing data but before its fsync, between a tmp file and its rename, around
persisting paxos data), tears writes and fills up. So every durable step is a
separate call, and each call states what survives a crash:

* ``create`` / ``append`` / ``truncate`` change file *contents*; nothing is
  durable until ``sync(name)`` returns.
* ``rename`` / ``delete`` / ``create`` change the *directory*; they are durable
  only after ``sync_dir(subdir)`` returns.
* ``write_atomic(name, data)`` is the tmp -> fsync -> rename -> fsync(dir)
  sequence in one call: after a crash the file holds the old or the new
  content, never a mix, and the new content is durable once it returns. Its
  commit point is the rename (a simulated disk may crash before or after it).
* ``write_best_effort(name, data)`` overwrites in place without fsync (the
  committed txid, as Hadoop's BestEffortLongFile); after a crash it may hold
  the old value, the new one, or (simulated) garbage, and the Journal copes.

Names are relative to the journal's ``current/`` directory and may have one
subdirectory component (``paxos/<segment start>``).

Layout of :class:`DiskJournalStorage` (reference §2.1)::

    <edits dir>/<jid>/in_use.lock
    <edits dir>/<jid>/current/{VERSION, last-promised-epoch, last-writer-epoch,
                               committed-txid, edits_*, paxos/<start>}

Invariants:

1. A successful ``sync(name)`` makes every byte written to ``name`` before it durable.
2. After ``write_atomic`` returns, the new content is durable; a crash inside
   it leaves the old content or the new one.
3. ``list_files`` returns names in sorted order (STYLE principle 10).
4. At most one live ``DiskJournalStorage`` holds a journal directory
   (``in_use.lock``, an exclusive ``flock``); a second gets ``JournalLockedError``.
"""

from __future__ import annotations

import abc
import errno
import fcntl
import os
import shutil
from typing import BinaryIO

from qjournal.errors import JournalError, JournalLockedError
from qjournal.util.fs import atomic_write, fsync_dir

__all__ = ["JournalStorage", "DiskJournalStorage", "PAXOS_DIR"]

#: subdirectory of ``current/`` holding one paxos file per segment under recovery
PAXOS_DIR = "paxos"


class JournalStorage(abc.ABC):
    """The files of one journal (see the module docstring for durability)."""

    #: a human-readable location for error messages (a path for a disk)
    where: str = "<storage>"

    # --- lifecycle -----------------------------------------------------------------

    @abc.abstractmethod
    def lock(self) -> None:
        """Take exclusive use of the journal's storage, creating ``current/`` and ``paxos/``.

        Raises:
            JournalLockedError: another owner holds it.
            JournalError: the directory cannot be created.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Close open files and release the lock. Idempotent."""

    @abc.abstractmethod
    def wipe(self) -> None:
        """Delete every file of ``current/`` (format), leaving empty ``current/`` and ``paxos/``.

        Durable on return (directories synced).
        """

    # --- reading ---------------------------------------------------------------------

    @abc.abstractmethod
    def list_files(self, subdir: str = "") -> list[str]:
        """Sorted names of the regular files in ``current/`` or ``current/<subdir>``."""

    @abc.abstractmethod
    def exists(self, name: str) -> bool:
        """Whether the file exists."""

    @abc.abstractmethod
    def size(self, name: str) -> int:
        """Size in bytes. Raises FileNotFoundError when absent."""

    @abc.abstractmethod
    def read(self, name: str, offset: int = 0, length: int = -1) -> bytes:
        """Bytes ``[offset, offset+length)`` (to the end when length < 0).

        Raises FileNotFoundError when absent.
        """

    @abc.abstractmethod
    def open_read(self, name: str) -> BinaryIO:
        """A new read-only binary file object (survives a later rename/delete of ``name``).

        Raises FileNotFoundError when absent.
        """

    def read_small(self, name: str) -> bytes | None:
        """The whole of a small file, or None when it does not exist."""
        try:
            return self.read(name)
        except FileNotFoundError:
            return None

    # --- content changes (durable after sync) -----------------------------------------------

    @abc.abstractmethod
    def create(self, name: str, data: bytes) -> None:
        """Create or truncate ``name`` and write ``data`` (not durable until sync + sync_dir)."""

    @abc.abstractmethod
    def append(self, name: str, data: bytes) -> None:
        """Append ``data`` at the end of ``name`` (not durable until sync)."""

    @abc.abstractmethod
    def sync(self, name: str) -> None:
        """Make the contents of ``name`` durable (fdatasync)."""

    @abc.abstractmethod
    def truncate(self, name: str, length: int) -> None:
        """Cut ``name`` to ``length`` bytes (not durable until sync)."""

    # --- directory changes (durable after sync_dir) ---------------------------------------

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Rename, replacing ``dst`` if it exists (not durable until sync_dir)."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove ``name``; absent is fine (not durable until sync_dir)."""

    @abc.abstractmethod
    def sync_dir(self, subdir: str = "") -> None:
        """Make renames, creations and deletions in ``current/`` (or its subdir) durable."""

    # --- small durable values ------------------------------------------------------------

    @abc.abstractmethod
    def write_atomic(self, name: str, data: bytes) -> None:
        """Replace ``name`` by ``data`` atomically and durably (tmp, fsync, rename, fsync dir)."""

    @abc.abstractmethod
    def write_best_effort(self, name: str, data: bytes) -> None:
        """Overwrite ``name`` in place with ``data`` (same length each time), no fsync."""

    # --- named conveniences (implemented on the primitives above) -----------------------

    def write_durable_long(self, name: str, value: int) -> None:
        """Store one integer durably as decimal text (HDFS PersistentLongFile)."""
        self.write_atomic(name, f"{int(value)}\n".encode("ascii"))

    def read_long(self, name: str, default: int) -> int:
        """Read an integer stored by :meth:`write_durable_long`.

        Raises:
            JournalError: the file exists but does not hold an integer.
        """
        raw = self.read_small(name)
        if raw is None:
            return default
        try:
            return int(raw.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError) as e:
            raise JournalError(f"{self.where}/{name}: not an integer: {raw[:40]!r}",
                               path=f"{self.where}/{name}") from e

    def write_paxos(self, segment_txid: int, data: bytes) -> None:
        """Atomically replace ``paxos/<segment_txid>`` (the accept-recovery commit point)."""
        self.write_atomic(paxos_name(segment_txid), data)

    def read_paxos(self, segment_txid: int) -> bytes | None:
        """The paxos data of a segment, or None."""
        return self.read_small(paxos_name(segment_txid))

    def delete_paxos(self, segment_txid: int) -> None:
        """Remove ``paxos/<segment_txid>`` and make that durable (no-op when absent)."""
        name = paxos_name(segment_txid)
        if self.exists(name):
            self.delete(name)
            self.sync_dir(PAXOS_DIR)

    def rename_durable(self, src: str, dst: str) -> None:
        """``rename`` then ``sync_dir`` (two steps; a crash may fall between them)."""
        self.rename(src, dst)
        self.sync_dir()


def paxos_name(segment_txid: int) -> str:
    """Name of the paxos file of a segment (decimal start txid, no padding, as Hadoop)."""
    return f"{PAXOS_DIR}/{int(segment_txid)}"


class DiskJournalStorage(JournalStorage):
    """A journal's files on a local disk.

    Keeps one append descriptor per file being written (the open segment), so
    ``append`` + ``sync`` on the write path is one ``write`` and one
    ``fdatasync`` system call.

    Args:
        journal_dir: ``<edits dir>/<jid>``; ``current/`` lives inside it.
        fsync: False turns every fsync off (tests only, like Hadoop's
            ``setShouldSkipFsyncForTesting``); never in production.
    """

    def __init__(self, journal_dir: str, *, fsync: bool = True) -> None:
        self.journal_dir = os.path.abspath(journal_dir)
        self.current = os.path.join(self.journal_dir, "current")
        self.where = self.current
        self._fsync = fsync
        self._lock_fd: int | None = None
        self._append_fds: dict[str, int] = {}
        self._best_effort_fds: dict[str, int] = {}

    def _path(self, name: str) -> str:
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise JournalError(f"{self.where}: bad file name {name!r}", path=name)
        return os.path.join(self.current, name)

    # --- lifecycle -----------------------------------------------------------------

    def lock(self) -> None:
        try:
            os.makedirs(os.path.join(self.current, PAXOS_DIR), exist_ok=True)
        except OSError as e:
            raise JournalError(f"cannot create journal directory {self.current}: {e}",
                               path=self.current) from e
        path = os.path.join(self.journal_dir, "in_use.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise JournalLockedError(f"Cannot lock storage {self.journal_dir}: the directory is "
                                         f"already locked", path=self.journal_dir) from e
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def close(self) -> None:
        for fds in (self._append_fds, self._best_effort_fds):
            for fd in fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
            fds.clear()
        if self._lock_fd is not None:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _close_fd(self, name: str) -> None:
        for fds in (self._append_fds, self._best_effort_fds):
            fd = fds.pop(name, None)
            if fd is not None:
                os.close(fd)

    def wipe(self) -> None:
        for name in list(self._append_fds) + list(self._best_effort_fds):
            self._close_fd(name)
        if os.path.isdir(self.current):
            for entry in sorted(os.listdir(self.current)):
                p = os.path.join(self.current, entry)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
        os.makedirs(os.path.join(self.current, PAXOS_DIR), exist_ok=True)
        if self._fsync:
            fsync_dir(os.path.join(self.current, PAXOS_DIR))
            fsync_dir(self.current)

    # --- reading ---------------------------------------------------------------------

    def list_files(self, subdir: str = "") -> list[str]:
        d = os.path.join(self.current, subdir) if subdir else self.current
        try:
            with os.scandir(d) as it:
                return sorted(e.name for e in it if e.is_file(follow_symlinks=False))
        except FileNotFoundError:
            return []

    def exists(self, name: str) -> bool:
        return os.path.isfile(self._path(name))

    def size(self, name: str) -> int:
        return os.stat(self._path(name)).st_size

    def read(self, name: str, offset: int = 0, length: int = -1) -> bytes:
        with open(self._path(name), "rb") as f:
            if offset:
                f.seek(offset)
            return f.read() if length < 0 else f.read(length)

    def open_read(self, name: str) -> BinaryIO:
        return open(self._path(name), "rb")

    # --- content changes -----------------------------------------------------------------

    def create(self, name: str, data: bytes) -> None:
        self._close_fd(name)
        fd = os.open(self._path(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._append_fds[name] = fd
        _write_all(fd, data)

    def _append_fd(self, name: str) -> int:
        fd = self._append_fds.get(name)
        if fd is None:
            fd = os.open(self._path(name), os.O_WRONLY | os.O_APPEND)
            self._append_fds[name] = fd
        return fd

    def append(self, name: str, data: bytes) -> None:
        _write_all(self._append_fd(name), data)

    def sync(self, name: str) -> None:
        if not self._fsync:
            return
        fd = self._append_fds.get(name)
        if fd is not None:
            os.fdatasync(fd)
            return
        fd = os.open(self._path(name), os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def truncate(self, name: str, length: int) -> None:
        os.truncate(self._path(name), length)

    # --- directory changes -----------------------------------------------------------------

    def rename(self, src: str, dst: str) -> None:
        self._close_fd(src)
        self._close_fd(dst)
        os.replace(self._path(src), self._path(dst))

    def delete(self, name: str) -> None:
        self._close_fd(name)
        try:
            os.unlink(self._path(name))
        except FileNotFoundError:
            pass

    def sync_dir(self, subdir: str = "") -> None:
        if self._fsync:
            fsync_dir(os.path.join(self.current, subdir) if subdir else self.current)

    # --- small durable values ------------------------------------------------------------

    def write_atomic(self, name: str, data: bytes) -> None:
        path = self._path(name)
        self._close_fd(name)
        atomic_write(path, data, sync=self._fsync)

    def write_best_effort(self, name: str, data: bytes) -> None:
        fd = self._best_effort_fds.get(name)
        if fd is None:
            fd = os.open(self._path(name), os.O_RDWR | os.O_CREAT, 0o644)
            self._best_effort_fds[name] = fd
        os.pwrite(fd, data, 0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
