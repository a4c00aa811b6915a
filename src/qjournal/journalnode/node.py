"""The JournalNode daemon: an asyncio shell around one synchronous ``Journal`` per journal id.

Why a thin shell: every rule lives in :class:`~qjournal.journalnode.journal.Journal`
(pure, storage-injected). This module only turns RPC calls into Journal calls
(validating argument types first), keeps the event loop free of blocking
fsyncs, downloads segments for accept-recovery, and serves HTTP
(``http.py``).

Theory of operation:

* One :class:`_JournalSlot` per journal id, created lazily on the first call
  that names it (up to ``qjournal.journalnode.max-journals``). Each slot owns a
  single worker thread; every call of that journal runs there, so the calls of
  one journal stay serialized in arrival order while other journals, and HTTP
  reads, proceed. With ``threaded=False`` (the simulator, with a simulated
  disk) calls run inline on the event loop instead.
* The write calls of the commit path (``journal``, ``heartbeat``) run inline on
  the event loop, fsync included, when nothing of their journal is on its
  thread, no other journal was written in the last second, and the journal's
  last write call took at most ``qjournal.journalnode.inline-write.max.ms``.
  A thread hop costs each call two wake-ups and about 100 µs of CPU, 40% of a
  one-record commit on a JournalNode (docs/performance.md, "Commit path"); the
  price is that the loop (other journals, HTTP, tailers) waits for that fsync.
  A slower call sends the journal's write calls to its thread for
  :data:`_THREAD_AFTER_SLOW_S` and until one is fast again there, so a slow
  disk stalls the loop at most once per that period; with several journals
  written at once their fsyncs overlap on their threads instead.
* The RPC handler is :class:`JournalNodeRpcHandler`: ``rpc_<method>`` per row
  of the QJournalProtocol table in docs/architecture.md. The transport runs
  the calls of one connection in FIFO order (write ordering of one writer);
  read-only calls are listed in ``rpc_concurrent``.
* ``accept_recovery`` is split: ``accept_recovery_plan`` on the journal's
  thread, the download on the event loop, then ``accept_recovery_commit`` on
  the journal's thread. A download (accept-recovery's, the syncer's) streams:
  each chunk of at most ``qjournal.segment-transfer.chunk.bytes`` is appended
  to the journal's tmp file on its thread (``Journal.append_download``) before
  the next is read, the ``X-Qjournal-Crc32c`` header is checked over the
  chunks at the end, and a failed download's tmp file is deleted; one download
  per tmp file at a time.
* On a :class:`~qjournal.transport.MemoryNetwork` without HTTP (tests), the
  node serves ``/getJournal`` through the network (``mem://<name>`` URLs) and
  downloads ``mem://`` URLs through it, so no test-only path reaches into the
  client or a global registry.
* Security (docs/security.md): :attr:`JournalNode.service_auth` holds the
  service-level ACLs; the RPC server checks every call against them before its
  handler runs (``security.qjournal.service.protocol.acl``: who may be the
  writer), the HTTP server's middleware every request (``/getJournal``).
* Errors: a ``QJournalError`` or ``InvariantViolation`` from the Journal goes
  back typed. A storage ``OSError`` becomes ``JournalError`` naming the
  journal. Nothing a client sends can stop the daemon.

Invariants:

1. All calls of one journal id execute one at a time, in the order the
   node's event loop dispatched them.
2. A reply is sent only after the Journal call returned (so after every
   fsync the call made).
3. Bad arguments (types, journal ids) are refused with ``InvalidRequestError``
   before any Journal is touched.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import aiohttp

from qjournal.config import Configuration
from qjournal.errors import (ConfigError, InvalidRequestError, JournalError, QJournalError,
                             SegmentNotFoundError, TransportError)
from qjournal.journalnode.http import JournalNodeHttpServer, crc_of_prefix
from qjournal.journalnode.journal import Journal
from qjournal.transport.download import SegmentDownload, http_download
from qjournal.protocol.segment import validate_batch
from qjournal.journalnode.disk_storage import DiskJournalStorage
from qjournal.journalnode.storage import JournalStorage
from qjournal.journalnode.syncer import JournalSyncer, SyncerSettings, syncer_targets
from qjournal.protocol import jn_rules
from qjournal.protocol.messages import (NamespaceInfo, RequestInfo, SegmentState, parse_storage_info,
                                        wire_bool, wire_int, wire_str)
from qjournal.protocol.segment import DEFAULT_MAX_RECORD_BYTES, LAYOUT_VERSION, crc32c
from qjournal.security.service_auth import HTTP_JOURNALNODE, PROTOCOLS_JOURNALNODE, ServiceAuthorization
from qjournal.transport import RpcServer
from qjournal.transport import RpcHandlers, memory_connector, tcp_connector
from qjournal.util.tasks import cancel_and_wait, spawn
from qjournal.transport.memory import UrlFetcher
from qjournal.transport.tls import client_context_from_conf, server_context_from_conf
from qjournal.transport.http import Throttle, http_client_context, http_server_context, https_enabled

__all__ = ["JournalNode", "JournalNodeRpcHandler"]

log = logging.getLogger(__name__)

#: batches up to this size are validated on the event loop thread (about 1 ms per 128 KiB)
_LOOP_VALIDATE_MAX_BYTES = 4 << 20
#: larger batches are written on the journal's thread, never inline (module docstring)
_INLINE_WRITE_MAX_BYTES = 1 << 20
#: after a write call slower than qjournal.journalnode.inline-write.max.ms, its journal's write
#: calls run on the journal's thread for at least this long
_THREAD_AFTER_SLOW_S = 30.0
#: a write call of another journal within this window keeps write calls on their threads
_OTHER_WRITER_WINDOW_S = 1.0


def _ns_from_wire(v: Any, jid: str) -> NamespaceInfo:
    if not isinstance(v, dict):
        raise InvalidRequestError(f"journal {jid}: ns_info must be a map", jid=jid)
    try:
        ns = NamespaceInfo.from_wire(v)
    except InvalidRequestError as e:
        raise InvalidRequestError(f"journal {jid}: malformed ns_info ({e})", jid=jid) from e
    return ns


class _JournalSlot:
    """A Journal and the single thread its calls run on (invariant 1).

    Attributes:
        on_thread: calls handed to the thread whose caller has not resumed yet; a call runs
            inline only when this is 0, so calls never overlap and keep their order.
        thread_until: ``time.monotonic()`` before which write calls use the thread (after a
            slow one, module docstring).
    """

    def __init__(self, journal: Journal, executor: ThreadPoolExecutor | None) -> None:
        self.journal = journal
        self.executor = executor
        self.on_thread = 0
        self.thread_until = 0.0

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.executor is None:
            return _call(self.journal.jid, fn, *args)
        self.on_thread += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.executor, _call, self.journal.jid, fn, *args)
        finally:
            self.on_thread -= 1


def _call(jid: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except OSError as e:
        raise JournalError(f"journal {jid}: storage error: {e}", jid=jid) from e


def _timed_call(jid: str, fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``(result, seconds it took)``, timed on the thread that runs it."""
    t0 = time.monotonic()
    return _call(jid, fn, *args), time.monotonic() - t0


class JournalNode:
    """A JournalNode: many journals, one RPC server, one HTTP server.

    Args:
        conf: a :class:`qjournal.config.Configuration` (defaults when None).
        edits_dir: overrides ``dfs.journalnode.edits.dir``.
        rpc_address: ``(host, port)``, overrides ``dfs.journalnode.rpc-address`` (port 0 = any;
            ``dfs.journalnode.rpc-bind-host`` replaces the configured host).
        http_address: ``(host, port)``, overrides ``dfs.journalnode.http-address`` (and
            ``dfs.journalnode.http-bind-host``); ignored when ``http`` is False.
        http: run the aiohttp server (False: on a memory ``network``, segments are
            served to in-process peers and readers through ``mem://<name>`` URLs,
            see :meth:`MemoryNetwork.serve_http`; without a network, not at all).
        network: a :class:`~qjournal.transport.MemoryNetwork`; when given, RPC
            listens there as ``name`` instead of TCP.
        name: this node's name on the memory network (and in logs).
        threaded: run each journal's calls on its own worker thread (False:
            inline on the loop, for a simulated disk).
        storage_factory: ``(edits_dir, jid) -> JournalStorage`` (default: a disk).
        fault_hook: passed to every Journal (simulator crash points).
        segment_fetcher: replaces the download of accept-recovery (default: HTTP(S) for
            ``http(s)://`` URLs, the memory network for ``mem://`` URLs).
        clock: seconds for metrics (default ``time.time``).
        ssl: server TLS context for RPC (default: from the ``qjournal.rpc.tls.*`` keys).
        http_ssl: server TLS context for HTTP (default: from ``dfs.http.policy`` and the
            ``qjournal.rpc.tls.*`` files; HTTPS_ONLY serves ``https://`` with mutual TLS and
            downloads recovery segments with this node's client certificate).

    Raises:
        ConfigError: a malformed key.
    """

    def __init__(self, conf: Any = None, *, edits_dir: str | None = None,
                 rpc_address: tuple[str, int] | None = None,
                 http_address: tuple[str, int] | None = None, http: bool = True,
                 network: Any = None, name: str | None = None, threaded: bool = True,
                 storage_factory: Callable[[str, str], JournalStorage] | None = None,
                 fault_hook: Callable[[str], None] | None = None,
                 segment_fetcher: UrlFetcher | None = None,
                 clock: Callable[[], float] | None = time.time, ssl: Any = None,
                 http_ssl: Any = None) -> None:
        self.conf = c = conf if conf is not None else Configuration()
        # An explicit directory (the --edits-dir flag) may be relative to the working
        # directory; the configured one must be absolute, as Hadoop requires.
        self.edits_dir = os.path.abspath(edits_dir) if edits_dir else c.get("dfs.journalnode.edits.dir")
        self.rpc_address = rpc_address or c.get_address("dfs.journalnode.rpc-address")
        self.https = https_enabled(c)  # dfs.http.policy = HTTPS_ONLY: mutual TLS on HTTP too
        self.http_address = http_address or c.get_address(
            "dfs.journalnode.https-address" if self.https else "dfs.journalnode.http-address")
        if rpc_address is None and c.get("dfs.journalnode.rpc-bind-host"):
            self.rpc_address = (c.get("dfs.journalnode.rpc-bind-host"), self.rpc_address[1])
        if http_address is None and c.get("dfs.journalnode.http-bind-host"):
            self.http_address = (c.get("dfs.journalnode.http-bind-host"), self.http_address[1])
        self.http_enabled = http
        self.network = network
        self.name = name or "journalnode"
        #: service-level ACLs (checked by the RPC server and the HTTP middleware)
        self.service_auth = ServiceAuthorization(c, PROTOCOLS_JOURNALNODE, service=f"JournalNode {self.name}",
                                                 http=HTTP_JOURNALNODE if http and network is None else None)
        self.threaded = threaded
        self.fault_hook = fault_hook
        self.segment_fetcher = segment_fetcher
        self.clock = clock
        self.ssl = ssl
        self.http_ssl = http_ssl
        self.max_journals = c.get_int("qjournal.journalnode.max-journals")
        self.max_record_bytes = c.get_bytes("dfs.namenode.max.op.size") or DEFAULT_MAX_RECORD_BYTES
        self.max_frame_bytes = c.get_bytes("ipc.maximum.data.length")
        self.slow_sync_warn_s = c.get_duration_ms("qjournal.journalnode.slow-sync.warn.ms") / 1000.0
        self.inline_write_max_s = c.get_duration_ms("qjournal.journalnode.inline-write.max.ms") / 1000.0
        self._last_write: tuple[str, float] = ("", -_OTHER_WRITER_WINDOW_S)  # (jid, monotonic time)
        # HDFS-13150: the edit cache exists where in-progress tailing is on (as in Hadoop)
        cache_bytes = c.get_bytes("dfs.journalnode.edit-cache-size.bytes") or 0
        if cache_bytes < 0:
            raise ConfigError(f"dfs.journalnode.edit-cache-size.bytes must not be negative, got {cache_bytes}",
                              key="dfs.journalnode.edit-cache-size.bytes")
        self.edit_cache_bytes = cache_bytes if c.get_bool("dfs.ha.tail-edits.in-progress") else 0
        self.download_max_bytes = c.get_bytes("qjournal.journalnode.recovery-download.max.bytes")
        self.transfer_timeout_s = c.get_duration_ms("dfs.edit.log.transfer.timeout") / 1000.0
        self.transfer_bytes_per_s = c.get_bytes("dfs.edit.log.transfer.bandwidthPerSec")
        self.transfer_chunk_bytes = c.get_bytes("qjournal.segment-transfer.chunk.bytes")
        if self.transfer_chunk_bytes <= 0:
            raise ConfigError(f"qjournal.segment-transfer.chunk.bytes must be positive, got "
                              f"{self.transfer_chunk_bytes}", key="qjournal.segment-transfer.chunk.bytes")
        self._downloads: dict[tuple[str, str], list] = {}  # (jid, tmp file) -> [lock, users]
        fsync = c.get_bool("qjournal.journalnode.fsync")
        preallocate = c.get_bytes("qjournal.journalnode.preallocate.bytes")
        if preallocate < 0:
            raise ConfigError(f"qjournal.journalnode.preallocate.bytes must be >= 0, got {preallocate}",
                              key="qjournal.journalnode.preallocate.bytes")
        self._disk_storage = storage_factory is None
        self.storage_factory = storage_factory or (
            lambda d, jid: DiskJournalStorage(os.path.join(d, jid), fsync=fsync, preallocate_bytes=preallocate))
        self.journals: dict[str, _JournalSlot] = {}
        self._opening: dict[str, list] = {}
        self.rpc_server: Any = None
        self.http_server: Any = None
        self.rpc_bound: str | None = None
        self.http_bound: str | None = None
        self.http_url: str = ""
        self._session: Any = None
        self.started_at = 0.0
        self.sync_enabled = c.get_bool("dfs.journalnode.enable.sync")
        self.sync_settings = SyncerSettings(
            interval_s=c.get_duration_ms("dfs.journalnode.sync.interval") / 1000.0,
            format_enabled=c.get_bool("dfs.journalnode.enable.sync.format"),
            rpc_timeout_ms=c.get_duration_ms("dfs.qjournal.select-input-streams.timeout.ms"))
        self.syncers: dict[str, tuple[JournalSyncer, asyncio.Task]] = {}

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> dict:
        """Create the edits dir, start HTTP then RPC.

        Returns:
            ``{"role": "journalnode", "rpc": "h:p" or memory name, "http": "h:p" or None,
            "http_url": ..., "pid": N}`` (the READY payload).

        Raises:
            JournalError: the edits dir is unusable.
            TransportError: an address cannot be bound.
        """
        self._check_edits_dir()
        if self.ssl is None and self.network is None:
            self.ssl = server_context_from_conf(self.conf)  # None unless qjournal.rpc.tls.enabled
        self.started_at = time.time()
        try:
            if self.http_enabled:
                self.http_server = JournalNodeHttpServer(self)
                if self.http_ssl is None and self.https:
                    self.http_ssl = http_server_context(self.conf)
                host, port = await self.http_server.start(*self.http_address, ssl_context=self.http_ssl)
                self.http_bound = f"{host}:{port}"
                self.http_url = f"{'https' if self.http_ssl is not None else 'http'}://{host}:{port}"
            sa = self.service_auth
            self.rpc_server = RpcServer(RpcHandlers(JournalNodeRpcHandler(self), sa),
                                        max_frame_bytes=self.max_frame_bytes, name=f"journalnode {self.name}",
                                        authorize=sa.authorize_rpc if sa.enabled else None)
            if self.network is not None:
                self.rpc_bound = await self.rpc_server.start_memory(self.network, self.name)
            else:
                host, port = await self.rpc_server.start_tcp(*self.rpc_address, ssl=self.ssl)
                self.rpc_bound = f"{host}:{port}"
                if self.name == "journalnode":
                    self.name = f"journalnode@{self.rpc_bound}"
                    self.service_auth.service = f"JournalNode {self.name}"
            if not self.http_enabled and self.network is not None:
                self.http_url = self.network.serve_http(self.name, self._serve_memory_http)
            await self._start_syncers()
        except BaseException:
            await self.stop()
            raise
        log.info("JournalNode %s serving RPC on %s, HTTP on %s, edits in %s", self.name, self.rpc_bound,
                 self.http_bound, self.edits_dir)
        return self.ready_info()

    def ready_info(self) -> dict:
        """The READY payload."""
        return {"role": "journalnode", "rpc": self.rpc_bound, "http": self.http_bound,
                "http_url": self.http_url, "pid": os.getpid()}

    def journal_dir(self, jid: str) -> str:
        """The directory holding journal ``jid``: ``dfs.journalnode.edits.dir.<jid>`` when set (Hadoop's
        per-nameservice form; a journal id is its nameservice's name), else the edits dir."""
        per = self.conf.get(f"dfs.journalnode.edits.dir.{jid}") if "." not in jid else None
        if not per:
            return self.edits_dir
        if not os.path.isabs(per):
            raise JournalError(f"dfs.journalnode.edits.dir.{jid} {per!r} is not an absolute path", path=per,
                               jid=jid)
        return per

    def _check_edits_dir(self) -> None:
        d = self.edits_dir
        if not os.path.isabs(d):
            raise JournalError(f"dfs.journalnode.edits.dir {d!r} is not an absolute path", path=d)
        if os.path.exists(d) and not os.path.isdir(d):
            raise JournalError(f"dfs.journalnode.edits.dir {d!r} is not a directory", path=d)
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            raise JournalError(f"dfs.journalnode.edits.dir {d!r} cannot be created: {e}", path=d) from e
        if not os.access(d, os.W_OK | os.X_OK):
            raise JournalError(f"dfs.journalnode.edits.dir {d!r} is not writable", path=d)

    async def stop(self) -> None:
        """Stop serving, close every journal. Idempotent."""
        syncers, self.syncers = self.syncers, {}
        for jid in sorted(syncers):
            syncer, task = syncers[jid]
            await cancel_and_wait(task)
            await syncer.close()
        if self.rpc_server is not None:
            await self.rpc_server.stop()
            self.rpc_server = None
        if self.http_server is not None:
            await self.http_server.stop()
            self.http_server = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.network is not None:
            self.network.stop_http(self.name, self._serve_memory_http)
        slots, self.journals = self.journals, {}
        for jid in sorted(slots):
            slot = slots[jid]
            try:
                await slot.run(slot.journal.close)
            except Exception as e:  # noqa: BLE001 - closing must go on for the others
                log.warning("journal %s: close failed: %s", jid, e)
            if slot.executor is not None:
                slot.executor.shutdown(wait=False)

    # --- the JournalNodeSyncer ---------------------------------------------------------------

    async def finalized_digest(self, slot: _JournalSlot, seg: SegmentState) -> int | None:
        """A finalized segment's digest, read off the journal's thread (a first read of a large
        retention window must not stall the writer's calls queued on that thread)."""
        fn = functools.partial(_call, slot.journal.jid, slot.journal.finalized_digest, seg.start_txid,
                               seg.end_txid)
        if not self.threaded:
            return fn()
        return await asyncio.get_running_loop().run_in_executor(None, fn)

    def _shared_edits_uris(self) -> list[str]:
        """Every configured journal URI: ``dfs.namenode.shared.edits.dir`` and its ``.<ns>`` forms."""
        c = self.conf
        uris = [c.get("dfs.namenode.shared.edits.dir")]
        uris += [c.get(f"dfs.namenode.shared.edits.dir.{ns}") for ns in c.get_list("dfs.nameservices")]
        return sorted({u for u in uris if u})

    def _is_self(self, host: str, port: int) -> bool:
        """Whether ``host:port`` in a journal URI is this node's RPC address."""
        if self.network is not None:
            return f"{host}:{port}" == self.rpc_bound
        bound_host, _, bound_port = (self.rpc_bound or "").rpartition(":")
        if not bound_port.isdigit() or int(bound_port) != port:
            return False
        if host == bound_host:
            return True
        try:
            addrs = {ai[4][0] for ai in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
        except OSError:
            return False
        if bound_host in ("0.0.0.0", "::", ""):
            local = {"127.0.0.1", "::1"}
            try:
                local |= {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None)}
            except OSError:
                pass
            return bool(addrs & local)
        return bound_host in addrs

    async def _start_syncers(self) -> None:
        """One syncer per journal whose URI lists this node (``dfs.journalnode.enable.sync``)."""
        if not self.sync_enabled:
            log.info("JournalNode %s: the syncer is off (dfs.journalnode.enable.sync=false)", self.name)
            return
        uris = self._shared_edits_uris()
        targets = syncer_targets(uris, self._is_self)
        if not targets:
            log.warning("JournalNode %s: no syncer: this node's RPC address %s is in no journal URI of "
                        "dfs.namenode.shared.edits.dir (%s)", self.name, self.rpc_bound, ", ".join(uris) or "unset")
            return
        if self.network is not None:
            connect = memory_connector(self.network, self.name, max_frame_bytes=self.max_frame_bytes)
        else:
            connect = tcp_connector(ssl=client_context_from_conf(self.conf),
                                    connect_timeout_ms=self.conf.get_duration_ms("ipc.client.connect.timeout"),
                                    max_frame_bytes=self.max_frame_bytes)
        for jid, peers in sorted(targets.items()):
            jn_rules.validate_jid(jid)

            async def journal_call(method: str, *args: Any, _jid: str = jid) -> Any:
                return await self.run(_jid, method, *args)

            async def download(url: str, tmp_name: str, _jid: str = jid) -> int:
                return await self.download_segment(url, await self.journal_slot(_jid), tmp_name,
                                                   why="the syncer", bytes_per_s=self.transfer_bytes_per_s)
            async def digest(seg: SegmentState, _jid: str = jid) -> None:
                await self.finalized_digest(await self.journal_slot(_jid), seg)
            syncer = JournalSyncer(jid, peers, journal_call, connect, download, self.sync_settings,
                                   warm_digest=digest)
            task = spawn(syncer.run(), name=f"journal-syncer-{jid}")
            self.syncers[jid] = (syncer, task)
            log.info("journal %s: syncer started, peers %s, every %.0f s%s", jid,
                     ", ".join(f"{h}:{p}" for h, p in peers), self.sync_settings.interval_s,
                     " (formats an empty journal from its peers)" if self.sync_settings.format_enabled else "")

    # --- journals ---------------------------------------------------------------------------

    async def journal_slot(self, jid: Any, *, create: bool = True) -> _JournalSlot:
        """The slot of ``jid``, opening the journal on first use.

        Args:
            jid: the journal id (validated).
            create: False: only journals that exist on disk (HTTP reads).

        Raises:
            InvalidRequestError: bad jid or too many journals.
            SegmentNotFoundError: ``create`` is False and the journal does not exist.
            JournalLockedError, JournalError: the journal cannot be opened.
        """
        jid = jn_rules.validate_jid(jid)
        slot = self.journals.get(jid)
        if slot is not None:
            return slot
        entry = self._opening.setdefault(jid, [asyncio.Lock(), 0])  # [lock, callers using it]
        entry[1] += 1
        try:
            async with entry[0]:
                return await self._open_slot(jid, create)
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._opening.pop(jid, None)  # bounded: no lock is left behind for refused jids

    async def _open_slot(self, jid: str, create: bool) -> _JournalSlot:
        """Open the journal ``jid`` (called with its opening lock held)."""
        slot = self.journals.get(jid)
        if slot is not None:
            return slot
        if not create and self._disk_storage and not os.path.isdir(os.path.join(self.journal_dir(jid), jid)):
            raise SegmentNotFoundError(f"journal {jid}: no such journal on this node", jid=jid)
        if len(self.journals) >= self.max_journals:
            raise InvalidRequestError(
                f"journal {jid}: this node already serves {len(self.journals)} journals, the limit "
                f"of qjournal.journalnode.max-journals", jid=jid)
        executor = ThreadPoolExecutor(1, thread_name_prefix=f"jn-{jid}") if self.threaded else None

        def _open() -> Journal:
            return Journal(jid, self.storage_factory(self.journal_dir(jid), jid), clock=self.clock,
                           fault_hook=self.fault_hook, max_record_bytes=self.max_record_bytes,
                           slow_sync_warn_s=self.slow_sync_warn_s, read_chunk_bytes=self.transfer_chunk_bytes,
                           edit_cache_bytes=self.edit_cache_bytes)
        try:
            if executor is None:
                journal = _call(jid, _open)
            else:
                journal = await asyncio.get_running_loop().run_in_executor(executor, _call, jid, _open)
        except BaseException:
            if executor is not None:
                executor.shutdown(wait=False)
            raise
        slot = _JournalSlot(journal, executor)
        self.journals[jid] = slot
        log.info("journal %s: opened (formatted=%s, promised epoch %d, writer epoch %d, highest txid "
                 "%d)", jid, journal.is_formatted(), journal.last_promised_epoch,
                 journal.last_writer_epoch, journal.highest_written_txid)
        return slot

    async def run(self, jid: Any, method: str, *args: Any) -> Any:
        """Call ``Journal.<method>(*args)`` of ``jid`` on its thread."""
        slot = await self.journal_slot(jid)
        return await slot.run(getattr(slot.journal, method), *args)

    async def run_write(self, slot: _JournalSlot, fn: Callable[..., Any], *args: Any,
                        nbytes: int = 0) -> Any:
        """A write call of the commit path (``journal``, ``heartbeat``): inline on the event loop
        or on the journal's thread, as the module docstring says."""
        if slot.executor is None:
            return _call(slot.journal.jid, fn, *args)
        jid = slot.journal.jid
        now = time.monotonic()
        other_writer = self._last_write[0] != jid and now - self._last_write[1] < _OTHER_WRITER_WINDOW_S
        self._last_write = (jid, now)
        if (slot.on_thread == 0 and now >= slot.thread_until and not other_writer
                and nbytes <= _INLINE_WRITE_MAX_BYTES and self.inline_write_max_s > 0):
            try:
                return _call(jid, fn, *args)
            finally:
                took = time.monotonic() - now
                if took > self.inline_write_max_s:
                    slot.thread_until = time.monotonic() + _THREAD_AFTER_SLOW_S
                    log.warning("journal %s: a write call took %.0f ms on the event loop (more than "
                                "qjournal.journalnode.inline-write.max.ms); write calls run on the "
                                "journal's thread for %.0f s", jid, took * 1000, _THREAD_AFTER_SLOW_S)
        result, took = await slot.run(_timed_call, jid, fn, *args)
        if took > self.inline_write_max_s:
            slot.thread_until = max(slot.thread_until, time.monotonic() + _THREAD_AFTER_SLOW_S)
        return result

    # --- segment downloads (accept-recovery, the syncer) ------------------------------------

    async def download_segment(self, url: str, slot: _JournalSlot, tmp_name: str, *,
                               why: str = "accept-recovery", bytes_per_s: int = 0) -> int:
        """Stream a peer's segment into the journal's tmp file ``tmp_name`` (accept-recovery's
        ``.epoch=`` file, the syncer's ``.sync.tmp``): chunks of at most
        ``qjournal.segment-transfer.chunk.bytes``, each appended on the journal's thread before the
        next is read, throttled to ``bytes_per_s``, the ``X-Qjournal-Crc32c`` header checked over
        the chunks at the end. One download per tmp file at a time (a retried accept waits for
        the one still running). A failed download's tmp file is deleted.

        Args:
            url: the peer's ``/getJournal`` URL.
            slot: the journal's slot.
            tmp_name: the download's tmp file (``Journal.begin_download``).
            why: what the download is for (in errors).
            bytes_per_s: throttle (0: none).

        Returns:
            The bytes written.

        Raises:
            InvalidRequestError: an unsupported URL.
            JournalError: the fetch failed, was too large, or the checksum does not match.
        """
        jid = slot.journal.jid
        key = (jid, tmp_name)
        entry = self._downloads.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                try:
                    return await self._download_to(url, slot, tmp_name, bytes_per_s)
                except (QJournalError, OSError) as e:
                    try:
                        await slot.run(slot.journal.discard_download, tmp_name)
                    except QJournalError as d:
                        log.warning("journal %s: deleting %s after a failed download failed: %s", jid,
                                    tmp_name, d)
                    if isinstance(e, InvalidRequestError):
                        raise
                    raise JournalError(f"journal {jid}: download of {url} for {why} failed: {e}",
                                       jid=jid, url=url) from e
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._downloads.pop(key, None)  # bounded: no lock is left behind

    async def _open_download(self, url: str, jid: str, chunk_bytes: int) -> SegmentDownload:
        if self.segment_fetcher is not None:
            return await self.segment_fetcher(url)
        if url.startswith("mem://") and self.network is not None:
            return await self.network.fetch(url)
        if url.startswith(("http://", "https://")):
            if self._session is None:
                client_ctx = http_client_context(self.conf)  # HTTPS_ONLY: present our certificate
                connector = aiohttp.TCPConnector(ssl=client_ctx) if client_ctx is not None else None
                self._session = aiohttp.ClientSession(connector=connector)
            return await http_download(self._session, url, chunk_bytes=chunk_bytes,
                                       connect_timeout_s=self.transfer_timeout_s,
                                       read_timeout_s=self.transfer_timeout_s,
                                       max_bytes=self.download_max_bytes,
                                       what="qjournal.journalnode.recovery-download.max.bytes")
        raise InvalidRequestError(f"journal {jid}: unsupported recovery URL {url[:200]!r}", jid=jid,
                                  url=url[:200])

    async def _download_to(self, url: str, slot: _JournalSlot, tmp_name: str, bytes_per_s: int) -> int:
        jid = slot.journal.jid
        throttle = Throttle(bytes_per_s, self.transfer_chunk_bytes)
        async with await self._open_download(url, jid, throttle.chunk_bytes) as download:
            if download.crc is None:
                raise TransportError(f"{url} sent no X-Qjournal-Crc32c header", url=url)
            await slot.run(slot.journal.begin_download, tmp_name)
            got = crc = 0
            while (chunk := await download.next_chunk()) is not None:
                got += len(chunk)
                if got > self.download_max_bytes:
                    raise TransportError(f"the body is over the limit of {self.download_max_bytes} bytes "
                                         f"(qjournal.journalnode.recovery-download.max.bytes)", url=url)
                crc = crc32c(chunk, crc)
                await slot.run(slot.journal.append_download, tmp_name, chunk)
                await throttle.account(len(chunk))
            if crc != download.crc:
                raise TransportError(f"checksum mismatch: header {download.crc:08x}, body {crc:08x} "
                                     f"({got} bytes)", url=url)
            return got

    async def _serve_memory_http(self, url: str) -> SegmentDownload:
        """``GET mem://<name>/getJournal?jid=&segmentTxId=&storageInfo=&inProgressOk=`` on a
        memory network: the in-process ``/getJournal`` of a node without an HTTP server. The
        file is read twice in chunks, as the HTTP server does: once for the CRC32C header, once
        while the body streams.

        Raises:
            InvalidRequestError: bad jid or segmentTxId; NamespaceMismatchError: wrong storageInfo;
            SegmentNotFoundError: no such journal or segment.
        """
        q = {k: v[0] for k, v in sorted(parse_qs(urlsplit(url).query).items())}
        try:
            seg = int(q.get("segmentTxId", ""))
        except ValueError as e:
            raise InvalidRequestError(f"bad segmentTxId in {url}", url=url) from e
        slot = await self.journal_slot(q.get("jid"), create=False)
        if q.get("storageInfo"):
            ns_id, cluster = parse_storage_info(q["storageInfo"])
            await slot.run(slot.journal.check_namespace, ns_id, cluster)
        in_progress_ok = q.get("inProgressOk", "true") != "false"
        rs = await slot.run(slot.journal.open_segment_for_read, seg, in_progress_ok)
        chunk_bytes = self.transfer_chunk_bytes

        async def read(n: int) -> bytes:
            if not self.threaded:
                return rs.stream.read(n)
            return await asyncio.get_running_loop().run_in_executor(None, rs.stream.read, n)
        try:
            if self.threaded:
                crc = await asyncio.get_running_loop().run_in_executor(
                    None, crc_of_prefix, rs.stream, rs.length, chunk_bytes)
            else:
                crc = crc_of_prefix(rs.stream, rs.length, chunk_bytes)
            rs.stream.seek(0)
        except BaseException:
            rs.stream.close()
            raise

        async def chunks():
            try:
                left = rs.length
                while left > 0:
                    part = await read(min(chunk_bytes, left))
                    if not part:
                        raise TransportError(f"{url}: {rs.file_name} shrank while being served "
                                             f"({left} bytes missing)", url=url)
                    left -= len(part)
                    yield part
            finally:
                rs.stream.close()
        return SegmentDownload(chunks(), crc, length=rs.length, on_close=rs.stream.close)

    # --- status -----------------------------------------------------------------------------

    async def snapshot(self) -> dict[str, dict]:
        """Per journal: status and metrics, sorted by jid (for /jmx, /metrics, /)."""
        out: dict[str, dict] = {}
        for jid in sorted(self.journals):
            slot = self.journals.get(jid)
            if slot is None:
                continue
            try:
                status, metrics = await slot.run(lambda j=slot.journal: (j.status(), j.metrics_snapshot()))
            except Exception as e:  # noqa: BLE001 - a page must render even if one journal fails
                status, metrics = {"jid": jid, "error": str(e)}, {}
            syncer = self.syncers.get(jid)
            if syncer is not None:
                status["sync"] = syncer[0].stats.to_status()
                metrics.update(syncer[0].stats.to_metrics())
            out[jid] = {"status": status, "metrics": metrics}
        return out


class JournalNodeRpcHandler:
    """QJournalProtocol over :class:`~qjournal.transport.RpcServer` (one method per table row)."""

    #: read-only calls that need not queue behind a connection's writes
    rpc_concurrent = ("get_edit_log_manifest", "get_journal_state", "is_formatted", "get_journaled_edits")

    def __init__(self, node: JournalNode) -> None:
        self.node = node

    @staticmethod
    def _req(req: Any) -> RequestInfo:
        return RequestInfo.from_wire(req)

    async def rpc_is_formatted(self, jid: Any) -> bool:
        """Whether journal ``jid`` is formatted. Raises: InvalidRequestError (bad jid)."""
        return await self.node.run(jid, "is_formatted")

    async def rpc_format(self, jid: Any, ns_info: Any, force: Any = False) -> None:
        """Format ``jid`` for ``ns_info``.

        Raises:
            JournalAlreadyFormattedError without ``force``; InvalidRequestError.
        """
        jid = jn_rules.validate_jid(jid)
        await self.node.run(jid, "format", _ns_from_wire(ns_info, jid), wire_bool(force, "format", "force"))

    async def rpc_get_journal_state(self, jid: Any) -> dict:
        """Returns ``{last_promised_epoch, http_port, http_url, ns_info}``.

        Raises:
            JournalNotFormattedError.
        """
        slot = await self.node.journal_slot(jid)
        st = await slot.run(slot.journal.get_journal_state)
        port = int(self.node.http_bound.rsplit(":", 1)[1]) if self.node.http_bound else 0
        return replace(st, http_port=port, http_url=self.node.http_url,
                       ns_info=slot.journal.ns_info).to_wire()

    async def rpc_new_epoch(self, jid: Any, ns_info: Any, epoch: Any) -> dict:
        """Promise ``epoch``; returns ``{last_segment_txid}``.

        Raises:
            EpochError, NamespaceMismatchError, JournalNotFormattedError.
        """
        jid = jn_rules.validate_jid(jid)
        resp = await self.node.run(jid, "new_epoch", _ns_from_wire(ns_info, jid),
                                   wire_int(epoch, "new_epoch", "epoch"))
        return resp.to_wire()

    async def rpc_start_log_segment(self, req: Any, txid: Any, layout_version: Any = LAYOUT_VERSION) -> None:
        """Open segment ``txid``.

        Raises:
            EpochError, JournalOutOfSyncError, JournalNotFormattedError.
        """
        r = self._req(req)
        await self.node.run(r.jid, "start_log_segment", r, wire_int(txid, "start_log_segment", "txid"),
                            wire_int(layout_version, "start_log_segment", "layout_version"))

    async def rpc_journal(self, req: Any, segment_txid: Any, first_txid: Any, num_txns: Any,
                          records: Any) -> None:
        """Append a validated batch, fsynced before the reply.

        Raises:
            EpochError, JournalOutOfSyncError, CorruptRecordError, JournalError.
        """
        r = self._req(req)
        if not isinstance(records, (bytes, bytearray, memoryview)):
            raise InvalidRequestError(f"journal {r.jid}: records must be bytes, got {type(records).__name__}",
                                      jid=r.jid)
        w = "journal"
        seg, first, n = (wire_int(segment_txid, w, "segment_txid"), wire_int(first_txid, w, "first_txid"),
                         wire_int(num_txns, w, "num_txns"))
        data = bytes(records) if not isinstance(records, bytes) else records
        slot = await self.node.journal_slot(r.jid)
        # Validate here, on the loop thread, so it overlaps the fsync of the previous batch on
        # the journal's thread; a refused batch is re-validated there for the precise error.
        last = None
        if 0 < len(data) <= _LOOP_VALIDATE_MAX_BYTES:  # a huge batch is validated off the loop
            last = validate_batch(data, first, n, self.node.max_record_bytes)
        await self.node.run_write(slot, functools.partial(slot.journal.journal, r, seg, first, n, data,
                                                          validated_last_txid=last), nbytes=len(data))

    async def rpc_heartbeat(self, req: Any) -> None:
        """Request gate only (fencing, committed txid).

        Raises:
            EpochError, JournalOutOfSyncError.
        """
        r = self._req(req)
        slot = await self.node.journal_slot(r.jid)
        await self.node.run_write(slot, slot.journal.heartbeat, r)

    async def rpc_finalize_log_segment(self, req: Any, start_txid: Any, end_txid: Any) -> None:
        """Finalize a segment (idempotent).

        Raises:
            EpochError, JournalOutOfSyncError, InvariantViolation.
        """
        r = self._req(req)
        w = "finalize_log_segment"
        await self.node.run(r.jid, "finalize_log_segment", r, wire_int(start_txid, w, "start_txid"),
                            wire_int(end_txid, w, "end_txid"))

    async def rpc_purge_logs(self, req: Any, min_txid_to_keep: Any) -> None:
        """Delete segments and paxos files below ``min_txid_to_keep``.

        Raises:
            EpochError, JournalOutOfSyncError.
        """
        r = self._req(req)
        await self.node.run(r.jid, "purge_logs_older_than", r,
                            wire_int(min_txid_to_keep, "purge_logs", "min_txid_to_keep"))

    async def rpc_get_edit_log_manifest(self, jid: Any, since_txid: Any, in_progress_ok: Any = False,
                                        with_digests: Any = False) -> dict:
        """Returns ``{segments, committed_txid, last_writer_epoch}``; with ``with_digests`` (a peer's
        syncer) every finalized segment carries its digest.

        Raises:
            JournalNotFormattedError.
        """
        w = "get_edit_log_manifest"
        slot = await self.node.journal_slot(jid)
        m = await slot.run(slot.journal.get_edit_log_manifest, wire_int(since_txid, w, "since_txid"),
                           wire_bool(in_progress_ok, w, "in_progress_ok"))
        if wire_bool(with_digests, w, "with_digests"):
            m = replace(m, segments=tuple([
                s if s.in_progress else replace(s, digest=await self.node.finalized_digest(slot, s))
                for s in m.segments]))
        return m.to_wire()

    async def rpc_get_journaled_edits(self, jid: Any, since_txid: Any, max_txns: Any) -> dict:
        """Committed edits from ``since_txid`` out of the edit cache (HDFS-13150); a JournaledEdits
        wire map, at most ``max_txns`` txns and about half an RPC frame of bytes.

        Raises:
            CacheMissError (the reader streams segments instead), JournalNotFormattedError.
        """
        w = "get_journaled_edits"
        slot = await self.node.journal_slot(jid)
        # On the loop, not the journal's thread: a tailer never waits behind the fsyncs of later
        # batches (the one Journal call made for that; it touches no storage).
        got = slot.journal.get_journaled_edits(wire_int(since_txid, w, "since_txid"),
                                               wire_int(max_txns, w, "max_txns"), self.node.max_frame_bytes // 2)
        return got.to_wire()

    async def rpc_prepare_recovery(self, req: Any, segment_txid: Any) -> dict:
        """Paxos phase 1b; returns a PrepareRecoveryResponse wire map.

        Raises:
            EpochError, InvariantViolation.
        """
        r = self._req(req)
        resp = await self.node.run(r.jid, "prepare_recovery", r,
                                   wire_int(segment_txid, "prepare_recovery", "segment_txid"))
        return resp.to_wire()

    async def rpc_accept_recovery(self, req: Any, segment_state: Any, from_url: Any) -> None:
        """Paxos phase 2b: plan, download from ``from_url`` if needed (CRC verified), commit.

        Raises:
            EpochError, JournalError (download), InvariantViolation.
        """
        r = self._req(req)
        state = SegmentState.from_wire(segment_state)
        url = wire_str(from_url, "accept_recovery", "from_url")
        slot = await self.node.journal_slot(r.jid)
        plan = await slot.run(slot.journal.accept_recovery_plan, r, state)
        if plan.download:
            await self.node.download_segment(url, slot, plan.tmp_name)
        await slot.run(slot.journal.accept_recovery_commit, plan)
