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
subdirectory component (``paxos/<segment start>``); the layout is
:mod:`qjournal.protocol.journal_layout`.

This module is the interface alone (pure: no file system): the disk implementation
is :mod:`qjournal.journalnode.disk_storage`, the simulated one
:class:`qjournal.sim.disk.SimJournalStorage`.

Invariants:

1. A successful ``sync(name)`` makes every byte written to ``name`` before it durable.
2. After ``write_atomic`` returns, the new content is durable; a crash inside
   it leaves the old content or the new one.
3. ``list_files`` returns names in sorted order (STYLE principle 10).
4. At most one live storage object holds a journal (``lock``); a second gets
   ``JournalLockedError``.
"""

from __future__ import annotations

import abc
from typing import BinaryIO

from qjournal.errors import JournalError
from qjournal.protocol.journal_layout import PAXOS_DIR, paxos_name

__all__ = ["JournalStorage"]


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

    def file_stamp(self, name: str) -> tuple:
        """A value that changes whenever the file's contents may have changed (a disk: size, mtime,
        inode), so a digest of an immutable finalized segment can be cached against it.

        Raises FileNotFoundError when absent.
        """
        return (self.size(name),)

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
    def create(self, name: str, data: bytes, *, grows: bool = False) -> None:
        """Create or truncate ``name`` and write ``data`` (not durable until sync + sync_dir).

        ``grows``: the open segment, appended to and synced batch by batch. A storage may then
        preallocate space after the data (the disk does, :mod:`~qjournal.journalnode.disk_storage`):
        :meth:`size` counts it, it reads as zero bytes (segment padding), after a crash too, and
        the journal cuts the file back to its valid length before it is finalized.
        """

    @abc.abstractmethod
    def append(self, name: str, data: bytes) -> None:
        """Write ``data`` right after the data of ``name`` (before any preallocated space; a file
        this storage object did not create: at its end). Not durable until sync."""

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
