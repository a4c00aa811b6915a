"""FileJournal: the HDFS-1580 JournalManager on a local or shared (NFS-style) directory.

Why: a NameNode always keeps a local copy of its edit log, and classic HA used
a shared NFS directory. Both are a directory of segment files; this module is
that journal (HDFS ``FileJournalManager`` + ``EditLogFileOutputStream`` +
``EditLogFileInputStream``).

Layout of a journal directory::

    <dir>/in_use.lock                      fcntl lock + "host pid" of the writer
    <dir>/current/VERSION                  namespace id, cluster id, layout version
    <dir>/current/edits_inprogress_<start> the open segment (at most one)
    <dir>/current/edits_<start>-<end>      finalized segments
    <dir>/current/edits_inprogress_<s>.empty / .corrupt   moved aside by recovery

Theory of operation:

* Writing. ``start_log_segment(txid)`` creates ``edits_inprogress_<txid>``
  (exclusive create), writes the 16-byte header, fsyncs the file and the
  directory. The output stream keeps a double buffer: ``write`` frames a
  record into the *current* buffer (no I/O), ``mark`` moves what was written
  to the *ready* buffer, and ``sync`` swaps the ready buffer out and, in a
  worker thread (``asyncio.to_thread``), issues one ``write`` of all its bytes
  and one ``fdatasync``; meanwhile the event loop keeps taking writes into the
  other buffer (group commit). Concurrent ``sync`` calls are serialised; the
  second one flushes whatever was marked while the first was on disk.
* Preallocation (``qjournal.file-journal.preallocate.bytes``, 1 MiB as Hadoop's
  ``EditLogFileOutputStream``): the open segment grows that much at a time with
  ``posix_fallocate`` and the writes land inside space the file already has, so
  each ``fdatasync`` need not make a new file size durable (the JournalNode's
  segments do the same, docs/performance.md "Preallocated segments"). The space
  after the data reads as zero bytes, the segment format's padding: every reader
  and recovery sees the log end where the data ends, and finalizing cuts the
  file to its valid length before the rename. A file system without fallocate
  is written without it (one warning); a full disk fails the sync.
* Commit points. A record is durable when the ``fdatasync`` covering it
  returns; only then does ``last_synced_txid`` advance. Finalizing is a
  rename ``edits_inprogress_<s>`` -> ``edits_<s>-<e>`` followed by a directory
  fsync; the rename is the commit point. Bytes after the last valid record
  are truncated (and fsynced) *before* the rename, so a crash between the two
  leaves a valid in-progress segment that recovery finalizes again.
* Recovery (``recover_unfinalized_segments``) takes the lock, then scans each
  in-progress segment: a valid non-empty prefix is truncated to its end and
  finalized at its last valid txid; a segment with no valid record is moved
  aside to ``.empty``; a segment whose header or first txid is wrong is moved
  aside to ``.corrupt``. The scan is :func:`protocol.segment.scan_segment`.
* Reading. An input stream reads the file lazily in chunks (in a thread),
  decodes records with checksums, skips records before ``from_txid`` and
  stops after the segment's end txid, ignoring any bytes after it (the tail of
  an in-progress segment being written, or garbage after a recovered end).
  Reaching the end of the file before the expected end txid is an error
  (premature end of file); a bad checksum raises ``CorruptRecordError`` naming
  the file and byte offset.
* Single writer: the directory's ``in_use.lock`` (:class:`qjournal.util.storage_dir.StorageLock`,
  an exclusive ``flock`` plus a per-process table for NFS; the holder's host and
  pid are written into it so a refused writer can name it).

Invariants:

1. At most one in-progress segment is being written per directory, by the lock
   holder only.
2. ``last_synced_txid`` never exceeds the last txid covered by a completed
   ``fdatasync`` (durability before acknowledgement).
3. A finalized segment ``edits_<s>-<e>`` holds exactly txids ``s..e`` as its
   valid prefix; nothing after ``e`` is ever returned by a reader.
4. A reader never returns a record whose checksum fails or whose txid breaks
   the consecutive sequence (base.py invariant 4).
5. Every create, rename and delete in ``current/`` is followed by an fsync of
   ``current/`` before the operation reports success.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import weakref
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote, urlparse

from qjournal.errors import (
    CorruptRecordError,
    InvariantViolation,
    InvalidRequestError,
    JournalAlreadyFormattedError,
    JournalError,
    JournalLockedError,
    JournalNotFormattedError,
    JournalOutOfSyncError,
    SegmentNotFoundError,
)
from qjournal.journalmanager.streams import EditLogInputStream, EditLogOutputStream, SegmentInfo
from qjournal.journalmanager.base import JournalManager
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol import segment as seg
from qjournal.protocol.segment import EditRecord
from qjournal.util import fs
from qjournal.util.storage_dir import VERSION_FILE, StorageLock, read_version, write_version

log = logging.getLogger("qjournal.journalmanager.file")

CURRENT_DIR = "current"
EMPTY_SUFFIX = ".empty"
CORRUPT_SUFFIX = ".corrupt"

#: Hadoop's preallocation step for edit log files (``qjournal.file-journal.preallocate.bytes``)
DEFAULT_PREALLOCATE_BYTES = 1024 * 1024
#: bytes read from a segment file per refill of an input stream
READ_CHUNK_BYTES = 4 * 1024 * 1024
#: records decoded per step while skipping to a stream's first txid
_SKIP_BATCH = 4096


def local_path_of_uri(uri: str) -> str:
    """The absolute local path that ``file:///path`` (host empty or ``localhost``) or a bare path names.

    Args:
        uri: the URI or path (percent escapes are decoded).

    Returns:
        The absolute path.

    Raises:
        ValueError: why it is not one (its text names the problem, not the URI).
    """
    p = urlparse(uri)
    if p.scheme not in ("file", ""):
        raise ValueError("not a file:// URI")
    if p.netloc not in ("", "localhost"):
        raise ValueError(f"file URIs must be local (host {p.netloc!r})")
    path = unquote(p.path)
    if not path or not os.path.isabs(path):
        raise ValueError("needs an absolute path, e.g. file:///var/qjournal/edits")
    return path


class DiskIO:
    """The disk calls of the write path, as an object so tests and the simulator can inject faults.

    Methods raise ``OSError`` like the ``os`` calls they wrap.
    """

    def write_all(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        """Write every byte of ``data`` at the file position (loops over short writes)."""
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def fdatasync(self, fd: int) -> None:
        """Make the file's data durable (``os.fdatasync``)."""
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        """Make the file's data and metadata durable (``os.fsync``)."""
        os.fsync(fd)

    def preallocate(self, fd: int, offset: int, length: int) -> None:
        """Give the file space for ``length`` bytes from ``offset`` (``os.posix_fallocate``: the
        size grows, the new bytes read as zeros)."""
        os.posix_fallocate(fd, offset, length)


class FileJournal(JournalManager):
    """A JournalManager stored in a directory (local disk or a shared mount).

    Args:
        directory: the journal directory (created on format).
        required: a failure of this journal fails a JournalSet holding it.
        max_record_bytes: largest record body accepted on write and on read
            (``dfs.namenode.max.op.size``).
        use_lock: take ``in_use.lock`` before writing (disable only for read-only use).
        preallocate_bytes: grow the open segment this much at a time (module docstring;
            ``qjournal.file-journal.preallocate.bytes``); 0: never.
        disk: injectable disk calls (:class:`DiskIO`).
        uri: the URI to report in messages (default ``file://<abs dir>``).
    """

    def __init__(self, directory: str, *, required: bool = False,
                 max_record_bytes: int = seg.DEFAULT_MAX_RECORD_BYTES,
                 use_lock: bool = True, disk: DiskIO | None = None,
                 uri: str | None = None, preallocate_bytes: int = DEFAULT_PREALLOCATE_BYTES) -> None:
        if preallocate_bytes < 0:
            raise InvalidRequestError(f"preallocate_bytes must be >= 0, got {preallocate_bytes}")
        self.directory = os.path.abspath(directory)
        self.current_dir = os.path.join(self.directory, CURRENT_DIR)
        self.required = required
        self.max_record_bytes = int(max_record_bytes)
        self.use_lock = use_lock
        self.preallocate_bytes = int(preallocate_bytes)
        self.disk = disk or DiskIO()
        self.uri = uri or f"file://{self.directory}"
        self._lock = StorageLock(self.directory, self.uri)
        self._stream: FileEditLogOutputStream | None = None
        # in-progress scan cache: file name -> (inode, valid_length, first_txid, last_txid)
        self._scan_cache: dict[str, tuple[int, int, int, int]] = {}

    # -- construction from a URI ---------------------------------------------------
    @classmethod
    def from_uri(cls, uri: str, conf=None) -> "FileJournal":
        """A FileJournal for ``file:///path`` (or a bare absolute path).

        Args:
            uri: ``file:///abs/path`` (host empty or ``localhost``).
            conf: a :class:`~qjournal.config.Configuration` (``dfs.namenode.max.op.size``,
                ``qjournal.file-journal.lock.enabled``, ``qjournal.file-journal.preallocate.bytes``,
                ``dfs.namenode.edits.dir.required``).

        Raises:
            InvalidRequestError: not a file URI, a remote host, or no path.
        """
        try:
            path = local_path_of_uri(uri)
        except ValueError as e:
            raise InvalidRequestError(f"{uri}: {e}", uri=uri) from None
        kwargs: dict = {}
        required = False
        if conf is not None:
            kwargs["max_record_bytes"] = conf.get_bytes("dfs.namenode.max.op.size")
            kwargs["use_lock"] = bool(conf.get_bool("qjournal.file-journal.lock.enabled"))
            kwargs["preallocate_bytes"] = conf.get_bytes("qjournal.file-journal.preallocate.bytes")
            required = uri in conf.get_list("dfs.namenode.edits.dir.required")
        return cls(path, required=required, uri=uri, **kwargs)

    # -- helpers -----------------------------------------------------------------------
    def _path(self, name: str) -> str:
        return os.path.join(self.current_dir, name)

    def _io_error(self, what: str, e: OSError, **fields) -> JournalError:
        return JournalError(f"{self.uri}: {what}: {e.strerror or e} ({errno.errorcode.get(e.errno, e.errno)})",
                            journal=self.uri, errno=e.errno, **fields)

    def _require_formatted(self) -> None:
        if not os.path.exists(self._path(VERSION_FILE)):
            raise JournalNotFormattedError(
                f"{self.uri}: journal is not formatted (no {CURRENT_DIR}/{VERSION_FILE} in {self.directory})",
                journal=self.uri)

    def _list(self) -> list[tuple[str, seg.SegmentName]]:
        """Segment files in ``current/`` sorted by start txid (finalized before in-progress)."""
        try:
            names = os.listdir(self.current_dir)
        except FileNotFoundError:
            raise JournalNotFormattedError(f"{self.uri}: no directory {self.current_dir}",
                                           journal=self.uri) from None
        except OSError as e:
            raise self._io_error(f"cannot list {self.current_dir}", e) from None
        out = []
        for name in sorted(names):
            parsed = seg.parse_segment_file_name(name)
            if parsed is not None:
                out.append((name, parsed))
        out.sort(key=lambda item: (item[1].start_txid, item[1].in_progress))
        return out

    # -- locking -------------------------------------------------------------------------
    @property
    def locked(self) -> bool:
        """True while this object holds the journal's writer lock."""
        return self._lock.held

    def lock(self) -> None:
        """Take the single-writer lock (idempotent for the holder).

        Raises:
            JournalLockedError: another process or object holds it (named).
            JournalError: the lock file cannot be created.
        """
        if self.use_lock:
            self._lock.acquire()

    def unlock(self) -> None:
        """Release the writer lock (no-op when not held)."""
        self._lock.release()

    # -- lifecycle -------------------------------------------------------------------------
    async def format(self, ns_info: NamespaceInfo, force: bool = False) -> None:
        """Create an empty journal holding ``ns_info``.

        Raises:
            JournalAlreadyFormattedError: ``current/`` holds files and not ``force``.
            JournalLockedError: another writer holds the journal.
            JournalError: an I/O failure (path named).
        """
        await asyncio.to_thread(self._format_sync, ns_info, force)

    def _format_sync(self, ns_info: NamespaceInfo, force: bool) -> None:
        if self._stream is not None and not self._stream.closed:
            raise JournalError(f"{self.uri}: cannot format while a segment is open for writing",
                               journal=self.uri)
        self.lock()
        try:
            os.makedirs(self.current_dir, exist_ok=True)
            existing = sorted(os.listdir(self.current_dir))
            if existing and not force:
                raise JournalAlreadyFormattedError(
                    f"{self.uri}: refusing to format: {self.current_dir} holds {len(existing)} files "
                    f"({', '.join(existing[:3])}{', ...' if len(existing) > 3 else ''}); use force",
                    journal=self.uri, files=len(existing))
            for name in existing:
                p = self._path(name)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
            write_version(self._path(VERSION_FILE), ns_info, "EDITS")
            fs.fsync_dir(self.directory)
        except OSError as e:
            raise self._io_error(f"cannot format {self.current_dir}", e) from None
        self._scan_cache.clear()
        log.info("formatted journal", extra={"journal": self.uri, "namespace_id": ns_info.namespace_id,
                                             "cluster_id": ns_info.cluster_id, "forced": force})

    async def is_formatted(self) -> bool:
        """True when ``current/VERSION`` exists."""
        return os.path.exists(self._path(VERSION_FILE))

    async def has_some_data(self) -> bool:
        """True when ``current/`` exists and holds any file."""
        try:
            return bool(os.listdir(self.current_dir))
        except FileNotFoundError:
            return False
        except OSError as e:
            raise self._io_error(f"cannot list {self.current_dir}", e) from None

    def namespace_info(self) -> NamespaceInfo:
        """The namespace recorded in VERSION.

        Raises:
            JournalNotFormattedError: no VERSION file.
            JournalError: VERSION is malformed (path named).
        """
        ns = read_version(self._path(VERSION_FILE))
        if ns is None:
            self._require_formatted()
        return ns

    async def recover_unfinalized_segments(self) -> None:
        """Take the lock and finalize every in-progress segment at its last valid txid.

        Empty ones move aside to ``.empty``; ones with a bad header or a
        first txid that does not match the name move aside to ``.corrupt``.

        Raises:
            JournalLockedError: another writer holds the journal.
            JournalNotFormattedError: not formatted.
            JournalError: an I/O failure.
        """
        await asyncio.to_thread(self._recover_sync)

    def _recover_sync(self) -> None:
        self.lock()
        self._require_formatted()
        if self._stream is not None and not self._stream.closed:
            raise JournalError(f"{self.uri}: cannot recover while segment {self._stream.segment_txid} "
                               f"is open for writing", journal=self.uri)
        for name, parsed in self._list():
            if not parsed.in_progress:
                continue
            path = self._path(name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
                result = seg.scan_segment(data, expected_first_txid=parsed.start_txid,
                                          max_record_bytes=self.max_record_bytes)
                for p in result.problems:
                    log.warning("in-progress segment damaged", extra={
                        "journal": self.uri, "path": path, "offset": p.offset, "kind": p.kind,
                        "detail": p.detail})
                if len(data) < seg.HEADER_SIZE and data == seg.encode_header()[:len(data)]:
                    self._move_aside(name, EMPTY_SUFFIX)  # torn header: the crash came before any record
                    continue
                if not result.header_ok or (result.problems and result.problems[0].kind == "txid-gap"
                                            and result.empty):
                    self._move_aside(name, CORRUPT_SUFFIX)
                    continue
                if result.empty:
                    self._move_aside(name, EMPTY_SUFFIX)
                    continue
                self._truncate_and_finalize(name, parsed.start_txid, result.last_txid,
                                            result.valid_length, len(data), torn=bool(result.problems))
            except OSError as e:
                raise self._io_error(f"cannot recover {path}", e) from None

    def _move_aside(self, name: str, suffix: str) -> None:
        src = self._path(name)
        dst = src + suffix
        if os.path.exists(dst):
            n = 1
            while os.path.exists(f"{dst}.{n}"):
                n += 1
            dst = f"{dst}.{n}"
        fs.rename_durable(src, dst)
        self._scan_cache.pop(name, None)
        log.warning("moved segment aside", extra={"journal": self.uri, "path": src, "to": dst})

    def _truncate_and_finalize(self, name: str, start: int, end: int, valid_length: int,
                               size: int, *, torn: bool) -> None:
        """Cut the file to ``valid_length`` and rename it finalized; ``torn``: what is cut off is not
        only padding (the preallocated zero tail is cut quietly, a torn or damaged tail is warned of)."""
        path = self._path(name)
        if size > valid_length:
            # Drop the tail before the rename (commit point) so a crash in between
            # leaves a valid in-progress segment that recovery finalizes again.
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, valid_length)
                self.disk.fsync(fd)
            finally:
                os.close(fd)
            log.log(logging.WARNING if torn else logging.DEBUG,
                    "truncated torn tail" if torn else "cut the preallocated tail",
                    extra={"journal": self.uri, "path": path, "valid_length": valid_length, "size": size})
        fs.rename_durable(path, self._path(seg.segment_file_name(start, end)))
        self._scan_cache.pop(name, None)
        log.info("finalized segment", extra={"journal": self.uri, "start_txid": start, "end_txid": end})

    # -- writing ---------------------------------------------------------------------------
    async def start_log_segment(self, txid: int,
                                layout_version: int = seg.LAYOUT_VERSION) -> "FileEditLogOutputStream":
        """Create ``edits_inprogress_<txid>`` and return its output stream.

        Raises:
            JournalNotFormattedError: not formatted.
            JournalLockedError: another writer holds the journal.
            JournalOutOfSyncError: a segment is already open, an unfinalized one
                exists (run recovery), or an existing segment already reaches ``txid``.
            JournalError: the file cannot be created (permissions, space; path named).
        """
        if txid < 0:
            raise InvalidRequestError(f"{self.uri}: cannot start a segment at txid {txid}", txid=txid)
        if self._stream is not None and not self._stream.closed:
            raise JournalOutOfSyncError(
                f"{self.uri}: cannot start segment at txid {txid}: segment {self._stream.segment_txid} "
                f"is still open", journal=self.uri, txid=txid)
        fd = await asyncio.to_thread(self._create_segment_sync, txid, layout_version)
        self._stream = FileEditLogOutputStream(self, fd, txid, layout_version)
        return self._stream

    def _create_segment_sync(self, txid: int, layout_version: int) -> int:
        self.lock()
        self._require_formatted()
        for name, parsed in self._list():
            if parsed.in_progress:
                raise JournalOutOfSyncError(
                    f"{self.uri}: cannot start segment at txid {txid}: unfinalized segment {name} exists "
                    f"(call recover_unfinalized_segments first)", journal=self.uri, txid=txid)
            if parsed.end_txid is not None and parsed.end_txid >= txid:
                raise JournalOutOfSyncError(
                    f"{self.uri}: cannot start segment at txid {txid}: segment {name} already holds "
                    f"txids up to {parsed.end_txid}", journal=self.uri, txid=txid)
        path = self._path(seg.segment_file_name(txid))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as e:
            raise self._io_error(f"cannot create segment {path}", e, txid=txid) from None
        try:
            self.disk.write_all(fd, seg.encode_header(layout_version))
            self.disk.fsync(fd)
            fs.fsync_dir(self.current_dir)
        except OSError as e:
            os.close(fd)
            raise self._io_error(f"cannot write header of {path}", e, txid=txid) from None
        log.info("started segment", extra={"journal": self.uri, "txid": txid})
        return fd

    async def finalize_log_segment(self, first_txid: int, last_txid: int) -> None:
        """Rename ``edits_inprogress_<first>`` to ``edits_<first>-<last>``.

        An open stream on that segment is closed first (syncing what was
        written). Finalizing an already-finalized identical segment succeeds.
        A segment with no record (``last_txid == first_txid - 1``) is moved
        aside to ``.empty``.

        Raises:
            SegmentNotFoundError: no such segment.
            JournalOutOfSyncError: the segment's valid records do not end at ``last_txid``.
            JournalError: an I/O failure.
        """
        if last_txid < first_txid - 1:
            raise InvalidRequestError(f"{self.uri}: cannot finalize segment {first_txid} at txid {last_txid}",
                                      first_txid=first_txid, last_txid=last_txid)
        st = self._stream
        if st is not None and st.segment_txid == first_txid and not st.closed:
            st.mark()
            await st.close()
        await asyncio.to_thread(self._finalize_sync, first_txid, last_txid)

    def _finalize_sync(self, first: int, last: int) -> None:
        self.lock()
        ip_name = seg.segment_file_name(first)
        fin_name = seg.segment_file_name(first, last)
        ip_path = self._path(ip_name)
        if not os.path.exists(ip_path):
            if last >= first and os.path.exists(self._path(fin_name)):
                return  # already finalized: idempotent
            raise SegmentNotFoundError(f"{self.uri}: no in-progress segment starts at txid {first}",
                                       journal=self.uri, txid=first)
        try:
            with open(ip_path, "rb") as f:
                data = f.read()
            result = seg.scan_segment(data, expected_first_txid=first,
                                      max_record_bytes=self.max_record_bytes,
                                      stop_after_txid=last if last >= first else None)
            if last < first:
                if not result.empty:
                    raise JournalOutOfSyncError(
                        f"{self.uri}: cannot finalize segment {first} as empty: it holds txids "
                        f"{result.first_txid}-{result.last_txid}", journal=self.uri)
                self._move_aside(ip_name, EMPTY_SUFFIX)
                return
            if result.empty or result.last_txid != last:
                have = "no valid record" if result.empty else f"valid txids up to {result.last_txid}"
                raise JournalOutOfSyncError(
                    f"{self.uri}: cannot finalize segment {first}-{last}: {ip_name} has {have}",
                    journal=self.uri, first_txid=first, last_txid=last)
            self._truncate_and_finalize(ip_name, first, last, result.valid_length, len(data),
                                        torn=bool(result.problems))
        except OSError as e:
            raise self._io_error(f"cannot finalize {ip_path}", e, first_txid=first, last_txid=last) from None

    async def purge_logs_older_than(self, min_txid_to_keep: int) -> None:
        """Delete finalized segments ending before ``min_txid_to_keep`` (and moved-aside leftovers).

        Raises:
            JournalError: an I/O failure.
        """
        await asyncio.to_thread(self._purge_sync, min_txid_to_keep)

    def _purge_sync(self, min_txid: int) -> None:
        try:
            names = sorted(os.listdir(self.current_dir))
        except FileNotFoundError:
            return
        except OSError as e:
            raise self._io_error(f"cannot list {self.current_dir}", e) from None
        removed = []
        for name in names:
            parsed = seg.parse_segment_file_name(name)
            if parsed is not None:
                if parsed.end_txid is not None and parsed.end_txid < min_txid:
                    removed.append(name)
                continue
            for suffix in (EMPTY_SUFFIX, CORRUPT_SUFFIX):
                base = name.split(suffix)[0] if suffix in name else None
                p2 = seg.parse_segment_file_name(base) if base else None
                if p2 is not None and p2.start_txid < min_txid:
                    removed.append(name)
                    break
        for name in removed:
            try:
                os.unlink(self._path(name))
            except FileNotFoundError:
                pass
            except OSError as e:
                raise self._io_error(f"cannot purge {self._path(name)}", e) from None
        if removed:
            try:
                fs.fsync_dir(self.current_dir)
            except OSError as e:
                raise self._io_error(f"cannot fsync {self.current_dir} after purging", e) from None
            log.info("purged segments", extra={"journal": self.uri, "min_txid_to_keep": min_txid,
                                               "files": removed})

    # -- reading ---------------------------------------------------------------------------
    async def get_manifest(self, since_txid: int = 0,
                           in_progress_ok: bool = False) -> list[SegmentInfo]:
        """Segments holding txids >= ``since_txid``, sorted by start txid.

        An in-progress segment is listed (when ``in_progress_ok``) with its last
        *durable* txid: the stream's ``last_synced_txid`` when this object
        writes it, otherwise the end of its valid prefix on disk. An empty one
        is not listed.

        Raises:
            JournalNotFormattedError: no ``current/`` directory.
        """
        return await asyncio.to_thread(self._manifest_sync, since_txid, in_progress_ok)

    def _manifest_sync(self, since_txid: int, in_progress_ok: bool) -> list[SegmentInfo]:
        out: list[SegmentInfo] = []
        for name, parsed in self._list():
            if not parsed.in_progress:
                assert parsed.end_txid is not None
                if parsed.end_txid >= since_txid:
                    out.append(SegmentInfo(parsed.start_txid, parsed.end_txid, False))
                continue
            if not in_progress_ok:
                continue
            end = self._in_progress_end(name, parsed.start_txid)
            if end is not None and end >= since_txid and end >= parsed.start_txid:
                out.append(SegmentInfo(parsed.start_txid, end, True))
        return out

    def _in_progress_end(self, name: str, start: int) -> int | None:
        st = self._stream
        if st is not None and not st.closed and st.segment_txid == start:
            return st.last_synced_txid if st.last_synced_txid >= start else None
        return self._scan_in_progress(name, start)

    def _scan_in_progress(self, name: str, start: int) -> int | None:
        """Last valid txid of an in-progress file, resuming from a cached scan when it grew."""
        path = self._path(name)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                cached = self._scan_cache.get(name)
                if cached and cached[0] == st.st_ino and st.st_size >= cached[1]:
                    _ino, offset, first, last = cached
                else:
                    head = f.read(seg.HEADER_SIZE)
                    try:
                        seg.decode_header(head, where=path)
                    except Exception:
                        return None
                    offset, first, last = seg.HEADER_SIZE, seg.INVALID_TXID, start - 1
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return None  # finalized meanwhile; the next listing shows it
        except OSError as e:
            raise self._io_error(f"cannot read {path}", e) from None
        pos = 0
        while True:
            d = seg.try_decode(data, pos, self.max_record_bytes)
            if d.status != seg.OK or d.record is None or d.record.txid != last + 1:
                break
            last = d.record.txid
            pos = d.next_offset
        self._scan_cache[name] = (st.st_ino, offset + pos, first, last)
        return last if last >= start else None

    async def open_segment(self, seg_info: SegmentInfo, from_txid: int | None = None) -> "FileEditLogInputStream":
        """A stream over one segment from ``from_txid`` (default its start) to its listed end.

        If an in-progress segment was finalized after it was listed, the
        finalized file is read instead.

        Raises:
            SegmentNotFoundError: no file for that segment.
            InvalidRequestError: ``from_txid`` outside the segment.
        """
        start = seg_info.start_txid
        if from_txid is None:
            from_txid = start
        if from_txid < start or from_txid > seg_info.end_txid + 1:
            raise InvalidRequestError(
                f"{self.uri}: txid {from_txid} is outside segment {start}-{seg_info.end_txid}",
                txid=from_txid)
        path = self._find_segment_file(seg_info)
        return FileEditLogInputStream(path, seg_info, from_txid, self.max_record_bytes)

    def _find_segment_file(self, seg_info: SegmentInfo) -> str:
        start = seg_info.start_txid
        if seg_info.in_progress:
            p = self._path(seg.segment_file_name(start))
            if os.path.exists(p):
                return p
        else:
            p = self._path(seg.segment_file_name(start, seg_info.end_txid))
            if os.path.exists(p):
                return p
        for name, parsed in self._list():
            if parsed.start_txid == start and (parsed.in_progress or
                                               (parsed.end_txid or 0) >= seg_info.end_txid):
                return self._path(name)
        raise SegmentNotFoundError(
            f"{self.uri}: no segment file for txids {start}-{seg_info.end_txid} in {self.current_dir}",
            journal=self.uri, txid=start)

    async def close(self) -> None:
        """Close an open stream (syncing what was marked) and release the lock."""
        try:
            if self._stream is not None and not self._stream.closed:
                await self._stream.close()
        finally:
            self.unlock()


class FileEditLogOutputStream(EditLogOutputStream):
    """The double-buffered output stream of one in-progress segment file.

    Not created directly: use :meth:`FileJournal.start_log_segment`.
    """

    def __init__(self, journal: FileJournal, fd: int, segment_txid: int, layout_version: int) -> None:
        self._journal = journal
        self._fd: int | None = fd
        # A stream dropped without close (its owner died: a NameNode killed in the simulator,
        # a task cancelled) still gives its descriptor back, as the kernel does for a dead
        # process; nothing is synced then.
        self._fd_closer = weakref.finalize(self, _close_fd_quietly, fd)
        self._segment_txid = segment_txid
        self._layout_version = layout_version
        self._pending_header: int | None = None
        self._current = bytearray()   # written, not marked
        self._ready = bytearray()     # marked, not yet handed to the disk
        self._ready_last_txid = segment_txid - 1
        self._last_written = segment_txid - 1
        self._last_synced = segment_txid - 1
        self._sync_lock = asyncio.Lock()
        # One worker thread per stream for write+fdatasync: a sync never queues behind
        # unrelated work in the loop's default executor.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qj-sync")
        self._failed: BaseException | None = None
        self.closed = False
        self.path = journal._path(seg.segment_file_name(segment_txid))
        self.max_record_bytes = journal.max_record_bytes
        #: where the data handed to the disk ends (header included) and the file's space
        self._file = fs.PreallocatedFile(fd, seg.HEADER_SIZE)

    @property
    def segment_txid(self) -> int:
        return self._segment_txid

    @property
    def bytes_flushed(self) -> int:
        """Bytes handed to the disk so far (header included): where the data ends."""
        return self._file.end

    @property
    def last_written_txid(self) -> int:
        return self._last_written

    @property
    def last_synced_txid(self) -> int:
        return self._last_synced

    @property
    def pending_bytes(self) -> int:
        return len(self._current) + len(self._ready)

    def _check_open(self) -> None:
        if self.closed:
            raise JournalError(f"{self.path}: output stream is closed", path=self.path)
        if self._failed is not None:
            raise JournalError(f"{self.path}: output stream failed earlier: {self._failed}",
                               path=self.path)

    def write(self, txid: int, body: bytes, opcode: int = seg.OP_DATA) -> None:
        """Frame one record into the current buffer (no I/O).

        Raises:
            JournalOutOfSyncError: ``txid`` is not ``last_written_txid + 1``.
            RecordTooLargeError: body over ``max_record_bytes``.
            JournalError: the stream is closed or failed.
        """
        if txid != self._last_written + 1 or self.closed or self._failed is not None:
            self._check_open()
            raise JournalOutOfSyncError(
                f"{self.path}: write of txid {txid}, expected {self._last_written + 1}",
                txid=txid, expected_txid=self._last_written + 1)
        seg.append_record(self._current, txid, opcode, body, self.max_record_bytes)
        self._last_written = txid

    def write_raw(self, data: bytes, first_txid: int, num_txns: int) -> None:
        """Append already-framed records after validating them (checksums and txids).

        Raises:
            JournalOutOfSyncError: ``first_txid`` is not ``last_written_txid + 1``.
            CorruptRecordError: the bytes are not exactly ``num_txns`` valid records.
        """
        self._check_open()
        if first_txid != self._last_written + 1:
            raise JournalOutOfSyncError(
                f"{self.path}: write of txids from {first_txid}, expected {self._last_written + 1}",
                txid=first_txid, expected_txid=self._last_written + 1)
        if num_txns <= 0:
            return
        seg.scan_batch(data, first_txid, num_txns, max_record_bytes=self.max_record_bytes,
                       where=f"{self.path} batch {first_txid}")
        self._current += data
        self._last_written = first_txid + num_txns - 1

    def set_version(self, layout_version: int) -> None:
        """Change the layout version; allowed only before the first record of the segment.

        Raises:
            JournalError: records were already written (roll the segment instead).
        """
        self._check_open()
        if layout_version == self._layout_version:
            return
        if self._last_written >= self._segment_txid:
            raise JournalError(
                f"{self.path}: cannot change layout version to {layout_version} after txid "
                f"{self._last_written}; start a new segment", path=self.path)
        self._layout_version = layout_version
        self._pending_header = layout_version

    def mark(self) -> None:
        """Move everything written so far to the ready buffer (the next sync flushes it)."""
        if self._current:
            if self._ready:
                self._ready += self._current
                self._current = bytearray()
            else:  # the common case: swap, no copy
                self._ready, self._current = self._current, bytearray()
        self._ready_last_txid = self._last_written

    async def sync(self) -> None:
        """Write and fdatasync every marked record; return once they are durable.

        Raises:
            JournalError: the write or fdatasync failed (the stream is then failed).
        """
        self._check_open()
        async with self._sync_lock:
            self._check_open()
            if not self._ready and self._pending_header is None:
                if self._ready_last_txid > self._last_synced:
                    self._last_synced = self._ready_last_txid
                return
            data, self._ready = self._ready, bytearray()
            upto = self._ready_last_txid
            header = self._pending_header
            self._pending_header = None
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._flush, data, header)
            except OSError as e:
                err = self._journal._io_error(
                    f"sync of txids {self._last_synced + 1}-{upto} to {self.path} failed", e,
                    first_txid=self._last_synced + 1, last_txid=upto)
                self._failed = err
                raise err from None
            self._file.wrote(len(data))
            self._last_synced = upto

    def _flush(self, data: bytearray, header: int | None) -> None:
        fd = self._fd
        assert fd is not None
        journal = self._journal
        disk = journal.disk
        if header is not None:
            os.pwrite(fd, seg.encode_header(header), 0)
        if data:
            step = journal.preallocate_bytes
            if step and not self._file.reserve(len(data), step, disk.preallocate):  # OSError: the sync fails
                log.warning("preallocation not supported; writing without it",
                            extra={"journal": journal.uri, "path": self.path})
                journal.preallocate_bytes = 0
            disk.write_all(fd, data)  # at the file position: the data's end, inside the space
        disk.fdatasync(fd)

    async def close(self) -> None:
        """Sync everything written (marked or not) and close the file; the segment stays in progress.

        Raises:
            JournalError: the final sync failed (the file is closed anyway).
        """
        if self.closed:
            return
        try:
            if self._failed is None:
                self.mark()
                await self.sync()
        finally:
            self._release()

    async def abort(self) -> None:
        """Close the file without syncing buffered records."""
        self._current = bytearray()
        self._ready = bytearray()
        self._release()

    def _release(self) -> None:
        self._executor.shutdown(wait=False)
        if self._fd is not None:
            self._fd_closer()
            self._fd = None
        self.closed = True


def _close_fd_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class FileEditLogInputStream(EditLogInputStream):
    """Reads one segment file from ``from_txid`` up to the segment's listed end txid.

    The file is opened lazily and read in chunks in a worker thread.
    """

    def __init__(self, path: str, seg_info: SegmentInfo, from_txid: int,
                 max_record_bytes: int = seg.DEFAULT_MAX_RECORD_BYTES,
                 chunk_bytes: int = READ_CHUNK_BYTES) -> None:
        self.path = path
        self.seg_info = seg_info
        self._from = from_txid
        self._end = seg_info.end_txid
        self._max = max_record_bytes
        self._chunk = chunk_bytes
        self._f = None
        self._buf = b""
        self._pos = 0          # offset of the next record within _buf
        self._buf_base = 0     # file offset of _buf[0]
        self._eof = False
        self._expect = seg_info.start_txid
        self._version = seg.LAYOUT_VERSION
        self._done = False

    @property
    def first_txid(self) -> int:
        return self._from

    @property
    def last_txid(self) -> int:
        return self._end

    @property
    def version(self) -> int:
        return self._version

    def _open_sync(self) -> None:
        try:
            self._f = open(self.path, "rb")
        except FileNotFoundError:
            raise SegmentNotFoundError(f"{self.path}: segment file vanished (purged?)",
                                       path=self.path) from None
        except OSError as e:
            raise JournalError(f"{self.path}: cannot open: {e.strerror}", path=self.path) from None
        head = self._f.read(seg.HEADER_SIZE)
        try:
            self._version = seg.decode_header(head, where=self.path)
        except Exception:
            self._f.close()
            self._f = None
            raise
        self._buf_base = seg.HEADER_SIZE

    def _read_sync(self, n: int) -> bytes:
        assert self._f is not None
        try:
            return self._f.read(n)
        except OSError as e:
            raise JournalError(f"{self.path}: read failed at byte {self._f.tell()}: {e.strerror}",
                               path=self.path) from None

    async def _refill(self, need: int) -> None:
        chunk = await asyncio.to_thread(self._read_sync, max(self._chunk, need))
        if not chunk:
            self._eof = True
            return
        rest = self._buf[self._pos:]
        self._buf_base += self._pos
        self._buf = rest + chunk if rest else chunk
        self._pos = 0

    async def read_next(self) -> EditRecord | None:
        """The next record at or after ``from_txid``, or None after the segment's end txid
        (see :meth:`read_batch`)."""
        recs = await self.read_batch(1)
        return recs[0] if recs else None

    async def read_batch(self, max_records: int) -> list[EditRecord]:
        """The next records at or after ``from_txid`` (at most ``max_records``, from the bytes read so
        far), or ``[]`` after the segment's end txid.

        Raises:
            CorruptRecordError: bad checksum/length, a txid out of sequence, or the
                file ends before the listed end txid (naming file and offset).
            CorruptSegmentError: bad header.
        """
        if self._done:
            return []
        if self._f is None:
            await asyncio.to_thread(self._open_sync)
        while True:
            if self._expect > self._end:
                await self.close()
                return []
            skipping = self._expect < self._from  # records before from_txid are read, not returned
            if skipping:
                want = min(self._from - self._expect, _SKIP_BATCH)
            else:
                want = min(max_records, self._end - self._expect + 1)
            recs, off = seg.decode_records(self._buf, self._pos, want, self._max, self._expect)
            if recs:
                self._pos = off
                self._expect += len(recs)
                if not skipping:
                    return recs
                continue
            where = self._buf_base + self._pos
            d = seg.try_decode(self._buf, self._pos, self._max)
            if d.status == seg.OK:  # a valid record with another txid than the next one
                rec = d.record
                assert rec is not None
                if rec.txid == self._expect:
                    raise InvariantViolation(f"{self.path}: at byte {where}: decode_records refused "
                                             f"txid {rec.txid}, which try_decode accepts")
                raise CorruptRecordError(
                    f"{self.path}: at byte {where}: record has txid {rec.txid}, expected {self._expect}",
                    path=self.path, offset=where, txid=rec.txid, expected_txid=self._expect)
            if d.status == seg.CORRUPT:
                raise CorruptRecordError(f"{self.path}: at byte {where}: {d.reason}",
                                         path=self.path, offset=where, reason=d.reason)
            # END at the buffer's end, or TRUNCATED: more bytes may be in the file.
            at_buffer_end = self._pos >= len(self._buf)
            if (d.status == seg.TRUNCATED or at_buffer_end) and not self._eof:
                await self._refill(self._needed_bytes())
                continue
            detail = d.reason or "end of file"
            raise CorruptRecordError(
                f"{self.path}: premature end of log at byte {where} ({detail}): "
                f"got txids up to {self._expect - 1}, expected the segment to reach {self._end}",
                path=self.path, offset=where, txid=self._expect - 1, expected_txid=self._end)

    def _needed_bytes(self) -> int:
        avail = len(self._buf) - self._pos
        if avail >= seg.REC_HEAD_SIZE:
            length = int.from_bytes(self._buf[self._pos + 1:self._pos + 5], "big")
            return seg.RECORD_OVERHEAD + min(length, self._max) - avail
        return seg.REC_HEAD_SIZE

    async def close(self) -> None:
        self._done = True
        if self._f is not None:
            f, self._f = self._f, None
            f.close()
        self._buf = b""
