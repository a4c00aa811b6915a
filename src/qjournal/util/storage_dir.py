"""A storage directory on disk: its single-writer lock (``in_use.lock``) and its VERSION file.

Why one module: a FileJournal, a JournalNode's journal and a NameNode's name directory are
each written by one process at a time and each name the namespace they hold. The lock
and the VERSION file used to be written twice and three times; they live here, once.

* :class:`StorageLock` takes ``<dir>/in_use.lock`` with an exclusive ``flock`` and writes
  the holder's host and pid into it, so a second writer's :class:`JournalLockedError`
  names who holds it. A per-process table is the belt for NFS, where ``flock`` is emulated
  with POSIX locks that do not exclude a second open in the same process.
* :func:`read_version` / :func:`write_version` read and write the VERSION file (the codec
  is :mod:`qjournal.protocol.version_file`), durably (``util.fs.atomic_write``).

Invariants:

1. At most one :class:`StorageLock` of a directory is held, in all processes on all hosts
   whose ``flock`` works, and in this process also where it does not.
2. A VERSION file is never read half-written: it is replaced atomically.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading

from qjournal.errors import JournalError, JournalLockedError
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.version_file import decode_version, encode_version
from qjournal.util import fs

__all__ = ["LOCK_FILE", "VERSION_FILE", "StorageLock", "read_version", "write_version"]

LOCK_FILE = "in_use.lock"
VERSION_FILE = "VERSION"

# the per-process table (invariant 1 where flock is emulated): real directory -> holder
_HELD_LOCK = threading.Lock()
_HELD: dict[str, str] = {}


class StorageLock:
    """The exclusive lock of one storage directory.

    Args:
        directory: the storage directory (created if missing).
        what: how to name the storage in messages (a journal URI, a path).
    """

    def __init__(self, directory: str, what: str | None = None) -> None:
        self.directory = os.path.abspath(directory)
        self.what = what or self.directory
        self.path = os.path.join(self.directory, LOCK_FILE)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (no-op when this object holds it).

        Raises:
            JournalLockedError: another process or object holds it; the message names the
                holder's host and pid.
            JournalError: the directory or lock file cannot be created.
        """
        if self._fd is not None:
            return
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:
            raise JournalError(f"{self.what}: cannot create storage directory {self.directory}: {e}",
                               path=self.directory) from None
        key = os.path.realpath(self.directory)
        with _HELD_LOCK:
            holder = _HELD.get(key)
            if holder is not None:
                raise JournalLockedError(f"{self.what}: Cannot lock storage {self.directory}: the directory is "
                                         f"already locked by another writer in this process ({holder})",
                                         path=self.path, holder=holder)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise JournalError(f"{self.what}: cannot open lock file {self.path}: {e}",
                                   path=self.path) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    holder = (fs.read_file(self.path) or b"").decode("utf-8", "replace").strip() or "unknown"
                    raise JournalLockedError(f"{self.what}: Cannot lock storage {self.directory}: the directory "
                                             f"is already locked by {holder} ({self.path})",
                                             path=self.path, holder=holder) from None
                raise JournalError(f"{self.what}: cannot lock {self.path}: {e}", path=self.path) from None
            owner = json.dumps({"host": socket.gethostname(), "pid": os.getpid()})
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, owner.encode() + b"\n", 0)
            except OSError:
                pass  # the holder text is informative only
            self._fd = fd
            _HELD[key] = f"{owner} object {id(self):#x}"

    def release(self) -> None:
        """Release the lock (no-op when not held)."""
        if self._fd is None:
            return
        with _HELD_LOCK:
            _HELD.pop(os.path.realpath(self.directory), None)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


def read_version(path: str) -> NamespaceInfo | None:
    """The namespace in the VERSION file at ``path``, or None when there is none.

    Raises:
        JournalError: unreadable or malformed (the path named).
    """
    try:
        raw = fs.read_file(path)
    except OSError as e:
        raise JournalError(f"cannot read {path}: {e}", path=path) from None
    return None if raw is None else decode_version(raw, path)


def write_version(path: str, ns: NamespaceInfo, storage_type: str) -> None:
    """Write the VERSION file at ``path`` durably (invariant 2).

    Raises:
        OSError: the write failed (the caller names its storage).
    """
    fs.atomic_write(path, encode_version(ns, storage_type))
