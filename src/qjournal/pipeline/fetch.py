"""Fetch: plan segment reads on the driver from metadata only; read and decode them on the executors.

Why: on a cluster the driver's disk is seen by nobody, and one process
downloading every segment neither scales nor reaches a TLS cluster with the
workers' own certificates. So the driver only asks each JournalNode for its
manifest (``get_edit_log_manifest``, ``get_journal_state``: RPC, no segment
bytes) and turns it into :class:`CopyTask` s, one per segment read; each Spark
task (an executor) downloads its segment from the JournalNode's
``/getJournal`` over HTTP(S), checks it, and decodes it with
:mod:`qjournal.pipeline.decode`. The Spark side of this is the ``qjournal``
data source (:mod:`qjournal.pipeline.source`).

Theory of operation:

* **Two kinds of plan.** :func:`plan_copies` (the ingest, the audit): one task
  per *node copy* of every finalized segment, each with one source; copies are
  audited separately, so a copy is never replaced by another node's.
  :func:`plan_committed` (a reader of the journal's content, the streaming
  source): one task per *segment*, the quorum's merged manifest
  (:func:`qjournal.client.reader.merge_manifests`: finalized segments, and the
  in-progress one cut at the committed txid), its replicas as sources in
  failover order.
* **Reading a task** (:func:`read_task`, on an executor): a local path is
  memory-mapped; a URL is downloaded in chunks of
  ``qjournal.segment-transfer.chunk.bytes`` into an unlinked temporary file
  (executor scratch space), its CRC32C computed on the way and compared with
  the ``X-Qjournal-Crc32c`` header before a single row is produced, then
  memory-mapped. The copy is framed (no bodies kept) and decoded
  ``batch_rows`` records at a time: memory is one chunk, one batch and five
  integers per record, whatever the segment's size.
* **TLS.** The driver's configuration travels with the tasks
  (:class:`ReadSettings`): under ``dfs.http.policy = HTTPS_ONLY`` an executor
  builds its client context from ``qjournal.rpc.tls.{cert,key,ca}.file``,
  paths that must be readable on every worker.

Invariants:

1. No row of a downloaded copy is produced before its whole body matched the
   CRC32C header and its announced length.
2. A copy task has one source: when it cannot be read, its only row says so
   (``valid = false``, ``problem`` ``fetch failed: ...``, file statistics
   null) and the other tasks go on.
3. A committed task fails over, in order, to the next replica when a copy
   cannot be read or is damaged before its chosen end; rows are produced only
   from a replica that framed cleanly, so no txid is produced twice. When no
   replica can be read the task raises (a committed read never skips a txid).
4. A committed plan never reaches past the committed txid a quorum reported
   (``merge_manifests``), so no row is an edit a quorum has not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import tempfile
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa

from qjournal.client.qjm import QuorumJournalManager
from qjournal.client.reader import MergedManifest
from qjournal.config import Configuration
from qjournal.errors import ConfigError, CorruptSegmentError, QJournalError, TransportError
from qjournal.pipeline import decode as dec
from qjournal.protocol.segment import crc32c, segment_file_name
from qjournal.transport.download import http_download
from qjournal.transport.http import http_client_context

#: the key bounding the bytes of a body held at once
CHUNK_KEY = "qjournal.segment-transfer.chunk.bytes"
OPEN_TIMEOUT_KEY = "dfs.qjournal.http.open.timeout.ms"
READ_TIMEOUT_KEY = "dfs.qjournal.http.read.timeout.ms"
#: the start of the problem of a copy that could not be read (invariant 2)
FETCH_FAILED = "fetch failed"

#: columns appended to the edits rows when file statistics are asked for
FILE_STATS_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("file_length", pa.int64()), ("file_crc32c", pa.int64()))


def _node_name(logger_name: str) -> str:
    """A node's name in the tables and the data source's rows: ``host:port``, as the quorum client, ``qjournal
    log status`` and the logs spell it (Spark escapes the ``:`` where the name is a partition directory)."""
    return logger_name


@dataclass(frozen=True, slots=True)
class Source:
    """Where one copy of a segment is: a local path, or the ``/getJournal`` URL on a node."""

    node: str
    location: str

    @property
    def is_url(self) -> bool:
        return self.location.startswith(("http://", "https://"))


@dataclass(frozen=True, slots=True)
class CopyTask:
    """One Spark task: read one segment (module docstring).

    Attributes:
        jid: journal id.
        segment_start / segment_end: the txids to read (an in-progress segment: up to
            the committed txid at planning).
        sources: one (a copy task) or the replicas in failover order (a committed task).
        failover: a committed task (invariant 3) rather than a copy task (invariant 2).
        in_progress: the segment was in progress at planning.
        file_length / file_crc32c: known at discovery (a local file), else computed on reading.
    """

    jid: str
    segment_start: int
    segment_end: int
    sources: tuple[Source, ...]
    failover: bool = False
    in_progress: bool = False
    file_length: int | None = None
    file_crc32c: int | None = None

    @property
    def node(self) -> str:
        """The node of a copy task (a committed task's rows name the replica read)."""
        return self.sources[0].node

    @property
    def path(self) -> str:
        """Where a copy task reads: a local path or a ``/getJournal`` URL (the manifest's ``path``)."""
        return self.sources[0].location

    def to_json(self) -> dict:
        return {"jid": self.jid, "segment_start": self.segment_start, "segment_end": self.segment_end,
                "sources": [[s.node, s.location] for s in self.sources], "failover": self.failover,
                "in_progress": self.in_progress, "file_length": self.file_length,
                "file_crc32c": self.file_crc32c}

    @classmethod
    def from_json(cls, d: dict) -> "CopyTask":
        """Raises: ConfigError on a malformed task description."""
        try:
            return cls(str(d["jid"]), int(d["segment_start"]), int(d["segment_end"]),
                       tuple(Source(str(n), str(loc)) for n, loc in d["sources"]),
                       bool(d.get("failover", False)), bool(d.get("in_progress", False)),
                       None if d.get("file_length") is None else int(d["file_length"]),
                       None if d.get("file_crc32c") is None else int(d["file_crc32c"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"malformed segment task {str(d)[:200]}: {type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class ReadSettings:
    """What an executor needs besides the task: the driver's configuration (TLS, chunk size, timeouts).

    Attributes:
        conf_items: the keys set in the driver's configuration, ``(key, value)`` sorted.
        batch_rows: rows per decoded batch.
        scratch_dir: where downloads are spooled (None: the executor's temporary directory).
    """

    conf_items: tuple[tuple[str, str], ...] = ()
    batch_rows: int = dec.DEFAULT_BATCH_ROWS
    scratch_dir: str | None = None

    @classmethod
    def from_conf(cls, conf: Configuration | None, **kw) -> "ReadSettings":
        return cls(tuple(sorted((conf or Configuration()).items())), **kw)

    def conf(self) -> Configuration:
        return Configuration(dict(self.conf_items))


@dataclass
class Plan:
    """What the driver planned.

    Attributes:
        jid: journal id.
        nodes: every node's name (``host_port``), in URI order.
        tasks: one per segment read, sorted by (segment_start, node).
        errors: ``node: message`` for every node that could not be asked.
        committed_txid: a committed plan: the last txid it covers without a hole (else None).
    """

    jid: str
    nodes: list[str]
    tasks: list[CopyTask] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    committed_txid: int | None = None


# --- planning (driver: metadata only) -----------------------------------------------------

def _storage_info(states: dict) -> str:
    for st in states.values():
        if getattr(st, "ns_info", None) is not None:
            return st.ns_info.storage_info
    return ""


async def plan_copies_async(uri: str, conf: Configuration | None = None, *, since_txid: int = 0,
                            storage_info: str | None = None) -> Plan:
    """One copy task per node copy of every finalized segment ending at or after ``since_txid``.

    Every node is asked (its manifest and HTTP address); a node that does not answer
    is an entry of ``errors`` and the others proceed.

    Raises:
        ConfigError: a malformed URI or configuration.
    """
    qjm = QuorumJournalManager(uri, conf)
    loggers = qjm.loggers.loggers
    plan = Plan(qjm.jid, [_node_name(lg.name) for lg in loggers])
    try:
        async def ask(lg):
            manifest = await lg.get_edit_log_manifest(0, False)
            state = await lg.get_journal_state()
            return manifest, state

        answers = await asyncio.gather(*(ask(lg) for lg in loggers), return_exceptions=True)
        states = {lg.name: a[1] for lg, a in zip(loggers, answers) if not isinstance(a, BaseException)}
        info = storage_info if storage_info is not None else _storage_info(states)
        for lg, a in zip(loggers, answers):
            name = _node_name(lg.name)
            if isinstance(a, BaseException):
                if not isinstance(a, Exception):
                    raise a
                plan.errors.append(f"{name}: {getattr(a, 'message', None) or a or type(a).__name__}")
                continue
            manifest, _state = a
            for s in sorted(manifest.segments, key=lambda s: s.start_txid):
                if s.in_progress or s.end_txid < since_txid:
                    continue
                url = lg.segment_url(s.start_txid, info, in_progress_ok=False)
                plan.tasks.append(CopyTask(qjm.jid, s.start_txid, s.end_txid, (Source(name, url),)))
    finally:
        await qjm.close()
    plan.tasks.sort(key=lambda t: (t.segment_start, t.node))
    plan.errors.sort()
    return plan


def committed_tasks(jid: str, merged: MergedManifest, urls: dict[str, str], since_txid: int,
                    until_txid: int | None = None) -> tuple[list[CopyTask], int]:
    """The committed tasks of a merged manifest from ``since_txid`` (pure).

    Args:
        merged: from ``QuorumJournalManager.get_merged_manifest(in_progress_ok=True)``.
        urls: replica name -> its ``/getJournal`` URL for the segment (key ``"<name> <start>"``).
        since_txid: the first txid wanted.
        until_txid: the last txid wanted (None: as far as the manifest goes).

    Returns:
        ``(tasks, end)``: tasks for the segments of the hole-free run from ``since_txid``, and
        the run's last txid (``since_txid - 1`` when ``since_txid`` is not readable).
    """
    tasks: list[CopyTask] = []
    end = since_txid - 1
    for s in merged.segments:
        if s.end_txid < since_txid:
            continue
        if s.start_txid > end + 1 or (until_txid is not None and s.start_txid > until_txid):
            break
        replicas = merged.replicas.get(s.start_txid, ())
        sources = tuple(Source(_node_name(n), urls[f"{n} {s.start_txid}"]) for n in replicas
                        if f"{n} {s.start_txid}" in urls)
        if not sources:
            break
        tasks.append(CopyTask(jid, s.start_txid, s.end_txid, sources, failover=True,
                              in_progress=s.in_progress))
        end = s.end_txid
    if until_txid is not None:
        end = min(end, until_txid)
    return tasks, end


async def plan_committed_async(uri: str, conf: Configuration | None = None, *, since_txid: int = 1,
                               until_txid: int | None = None) -> Plan:
    """One committed task per segment holding txids from ``since_txid`` (invariant 4).

    Raises:
        QuorumError / RpcTimeoutError: no quorum answered (never silently fewer).
        ConfigError: a malformed URI or configuration.
    """
    qjm = QuorumJournalManager(uri, conf)
    plan = Plan(qjm.jid, [_node_name(lg.name) for lg in qjm.loggers.loggers])
    try:
        merged = await qjm.get_merged_manifest(max(0, since_txid), in_progress_ok=True)
        holders = sorted({n for r in merged.replicas.values() for n in r})
        states = await qjm.get_journal_states()
        info = _storage_info(states)
        urls: dict[str, str] = {}
        for s in merged.segments:
            for n in holders:
                lg = qjm.loggers.by_name(n)
                if lg.http_url:
                    urls[f"{n} {s.start_txid}"] = lg.segment_url(s.start_txid, info, in_progress_ok=s.in_progress)
        plan.tasks, plan.committed_txid = committed_tasks(qjm.jid, merged, urls, since_txid, until_txid)
    finally:
        await qjm.close()
    return plan


def plan_copies(uri: str, conf: Configuration | None = None, **kw) -> Plan:
    """Synchronous :func:`plan_copies_async`."""
    return asyncio.run(plan_copies_async(uri, conf, **kw))


def plan_committed(uri: str, conf: Configuration | None = None, **kw) -> Plan:
    """Synchronous :func:`plan_committed_async`."""
    return asyncio.run(plan_committed_async(uri, conf, **kw))


# --- reading (executor) -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Copy:
    content: memoryview | bytes
    length: int
    crc: int | None


async def _download(url: str, f, conf: Configuration) -> tuple[int, int]:
    """Stream ``url`` into the open file ``f`` (invariant 1); returns ``(length, crc32c)``.

    Raises:
        TransportError: the download failed, or its body does not match its CRC32C header.
        ConfigError: a bad chunk size or TLS configuration.
    """
    import aiohttp  # noqa: PLC0415 - a heavy optional dependency, imported where used

    chunk_bytes = conf.get_bytes(CHUNK_KEY)
    if chunk_bytes <= 0:
        raise ConfigError(f"{CHUNK_KEY} must be positive, got {chunk_bytes}", key=CHUNK_KEY)
    ctx = http_client_context(conf) if url.startswith("https://") else None
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx) if ctx else None) as http:
        async with await http_download(http, url, chunk_bytes=chunk_bytes,
                                       connect_timeout_s=conf.get_duration_ms(OPEN_TIMEOUT_KEY) / 1000,
                                       read_timeout_s=conf.get_duration_ms(READ_TIMEOUT_KEY) / 1000) as d:
            crc = size = 0
            while (chunk := await d.next_chunk()) is not None:
                crc = crc32c(chunk, crc)
                size += len(chunk)
                f.write(chunk)
            if d.crc is None or d.crc != crc:
                want = "none" if d.crc is None else f"{d.crc:08x}"
                raise TransportError(f"body CRC32C {crc:08x} does not match X-Qjournal-Crc32c {want}",
                                     url=url)
    f.flush()
    return size, crc


@contextlib.contextmanager
def _open_copy(src: Source, task: CopyTask, settings: ReadSettings, want_crc: bool) -> Iterator[_Copy]:
    """The bytes of one copy, memory-mapped (a download is spooled to an unlinked file first)."""
    if src.is_url:
        f = tempfile.TemporaryFile(dir=settings.scratch_dir)
        length, crc = asyncio.run(_download(src.location, f, settings.conf()))
    else:
        f = open(src.location, "rb")
        length, crc = os.fstat(f.fileno()).st_size, task.file_crc32c
    try:
        if length == 0:
            yield _Copy(b"", 0, 0)
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                if crc is None and want_crc:
                    crc = crc32c(view)
                yield _Copy(view, length, crc)
            finally:
                view.release()
    finally:
        f.close()


def _with_stats(batch: pa.RecordBatch, length: int | None, crc: int | None) -> pa.RecordBatch:
    n = batch.num_rows
    cols = list(batch.columns) + [pa.array([length] * n, pa.int64()), pa.array([crc] * n, pa.int64())]
    return pa.RecordBatch.from_arrays(cols, schema=stats_schema())


def stats_schema() -> pa.Schema:
    """The edits schema with the file statistics appended."""
    return pa.schema(list(dec.EDITS_ARROW_SCHEMA) + [pa.field(n, t) for n, t in FILE_STATS_FIELDS])


def read_task(task: CopyTask, settings: ReadSettings, *, txid_range: tuple[int, int] | None = None,
              file_stats: bool = False) -> Iterator[pa.RecordBatch]:
    """Read and decode one task (module docstring); runs on an executor.

    Args:
        task: from a plan.
        settings: the driver's configuration and the batch size.
        txid_range: only valid rows with txids inside it.
        file_stats: append ``file_length`` and ``file_crc32c`` (:data:`FILE_STATS_FIELDS`).

    Yields:
        Batches with :data:`~qjournal.pipeline.decode.EDITS_ARROW_SCHEMA` (plus the statistics).

    Raises:
        TransportError: a committed task none of whose replicas could be read (invariant 3).
    """
    failures: list[str] = []
    name = segment_file_name(task.segment_start, task.segment_end)
    for src in task.sources:
        produced = False
        try:
            with _open_copy(src, task, settings, file_stats) as copy:
                framing = dec.frame_segment(task.jid, src.node, task.segment_start, task.segment_end,
                                            copy.content)
                if task.failover and not framing.clean:
                    raise CorruptSegmentError(framing.extra[0][2])
                for batch in dec.decode_framed(task.jid, src.node, task.segment_start, task.segment_end,
                                               copy.content, framing, batch_rows=settings.batch_rows,
                                               txid_range=txid_range):
                    produced = True
                    yield _with_stats(batch, copy.length, copy.crc) if file_stats else batch
            return
        except (QJournalError, OSError) as e:
            if produced:
                raise
            msg = getattr(e, "message", None) or str(e) or type(e).__name__
            if not task.failover:  # invariant 2
                batch = dec.problem_batch(task.jid, src.node, task.segment_start, task.segment_end,
                                          f"{FETCH_FAILED}: {msg}")
                yield _with_stats(batch, None, None) if file_stats else batch
                return
            failures.append(f"{src.node}: {msg}")
    raise TransportError(f"journal {task.jid!r}: segment {name}: no replica could be read: "
                         f"{'; '.join(failures) or 'no replica'}", jid=task.jid)


__all__ = ["CHUNK_KEY", "FETCH_FAILED", "FILE_STATS_FIELDS", "Source", "CopyTask", "ReadSettings", "Plan",
           "plan_copies_async", "plan_copies", "plan_committed_async", "plan_committed",
           "committed_tasks", "read_task", "stats_schema"]
