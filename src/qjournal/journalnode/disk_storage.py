"""The JournalNode's storage on a real disk: :class:`~qjournal.journalnode.storage.JournalStorage`
with files, fsyncs and an exclusive directory lock.

Why apart from the interface: the per-journal rules (``journal.Journal``) are pure and
run on the simulator's disk too; only this module touches ``os``.

Layout (reference §2.1)::

    <edits dir>/<jid>/in_use.lock
    <edits dir>/<jid>/current/{VERSION, last-promised-epoch, last-writer-epoch,
                               committed-txid, edits_*, paxos/<start>}

Invariants: those of the interface; the lock is :class:`qjournal.util.storage_dir.StorageLock`.
"""

from __future__ import annotations

import os
import shutil
from typing import BinaryIO

from qjournal.errors import JournalError
from qjournal.journalnode.storage import PAXOS_DIR, JournalStorage
from qjournal.util.fs import atomic_write, fsync_dir
from qjournal.util.storage_dir import StorageLock

__all__ = ["DiskJournalStorage"]


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
        self._lock = StorageLock(self.journal_dir, f"journal {self.journal_dir}")
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
        self._lock.acquire()

    def close(self) -> None:
        for fds in (self._append_fds, self._best_effort_fds):
            for fd in fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
            fds.clear()
        self._lock.release()

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

    def file_stamp(self, name: str) -> tuple:
        st = os.stat(self._path(name))
        return (st.st_size, st.st_mtime_ns, st.st_ino)

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
