"""Durable file primitives: atomic replace, directory fsync, small persistent values, preallocation.

Why: every durable field of a JournalNode or NameNode (promised epoch, writer
epoch, paxos data, VERSION, image checksums) is written the same way:
tmp -> fsync -> rename -> fsync(directory). One implementation, used everywhere,
so no caller forgets the directory fsync (reference §10: Hadoop does). Likewise
the growth of an open edit-log segment in preallocated steps (:class:`PreallocatedFile`),
which the JournalNode's segments and the NameNode's FileJournal share.
"""

from __future__ import annotations

import errno
import os
from typing import Callable

#: the errors of a file system that cannot preallocate (the file is written without it)
NO_PREALLOCATION_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})


class PreallocatedFile:
    """A file written at the end of its data, inside space preallocated ahead of it: the open segment
    of a JournalNode's journal and of a NameNode's FileJournal (module docstring). The space after the
    data reads as zeros, the segment format's padding; an ``fdatasync`` after a write into it need not
    make a new size durable.

    Attributes:
        fd: the descriptor (the caller opens, writes at ``end`` and closes it).
        end: where the data ends; allocated: where the file's space ends (>= end).
    """

    __slots__ = ("fd", "end", "allocated")

    def __init__(self, fd: int, end: int) -> None:
        self.fd = fd
        self.end = self.allocated = end

    def reserve(self, nbytes: int, step: int,
                fallocate: Callable[[int, int, int], None] | None = None) -> bool:
        """Space for ``nbytes`` more data and ``step`` beyond them, unless they fit already.

        Args:
            fallocate: ``(fd, offset, length)`` growing the file (default ``os.posix_fallocate``).

        Returns:
            False when the file system cannot preallocate (the size is back at ``end``): write without it.

        Raises:
            OSError: no space (ENOSPC) or an I/O error; the size is cut back to ``end`` first (it may
                have grown part way), so nothing but data is left in the file.
        """
        want = self.end + nbytes
        if want <= self.allocated:
            return True
        grow = want - self.allocated + step
        try:
            (fallocate or os.posix_fallocate)(self.fd, self.allocated, grow)
        except OSError as e:
            os.ftruncate(self.fd, self.end)
            self.allocated = self.end
            if e.errno in NO_PREALLOCATION_ERRNOS:
                return False
            raise
        self.allocated += grow
        return True

    def wrote(self, nbytes: int) -> None:
        """The caller wrote ``nbytes`` at ``end``."""
        self.end += nbytes
        if self.end > self.allocated:
            self.allocated = self.end

    def cut(self, length: int) -> None:
        """The file was truncated to ``length`` (its preallocated space with it)."""
        self.end = self.allocated = length


def fsync_dir(path: str) -> None:
    """fsync a directory so a rename or create inside it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (readers see old or new, never half).

    Commit point: the rename. With ``sync`` the data is fsynced before it and
    the directory after it, so the new content survives a crash once this returns.
    """
    d = os.path.dirname(os.path.abspath(path))
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(d)


def read_file(path: str) -> bytes | None:
    """The whole file, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_long(path: str, default: int | None = None) -> int | None:
    """Read a decimal integer written by :func:`write_long` (HDFS PersistentLongFile)."""
    raw = read_file(path)
    if raw is None:
        return default
    text = raw.decode("ascii", "replace").strip()
    try:
        return int(text)
    except ValueError as e:
        raise ValueError(f"{path}: not an integer: {text[:40]!r}") from e


def write_long(path: str, value: int, *, sync: bool = True) -> None:
    """Durably store one integer as decimal text (atomic, fsynced)."""
    atomic_write(path, f"{int(value)}\n".encode("ascii"), sync=sync)


def rename_durable(src: str, dst: str) -> None:
    """Rename and fsync the destination directory (and the source's, if different)."""
    os.replace(src, dst)
    dd = os.path.dirname(os.path.abspath(dst))
    fsync_dir(dd)
    sd = os.path.dirname(os.path.abspath(src))
    if sd != dd:
        fsync_dir(sd)


def disk_usage(path: str) -> tuple[int, int] | None:
    """``(size, available)`` in bytes of the file system holding ``path`` (``statvfs``: available to an
    unprivileged process, as ``df`` reports it), or None when ``path`` cannot be examined (a metric is then
    left out rather than reported as zero)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
