"""The JournalNode daemon: configuration, the RPC and HTTP servers, threads and aiohttp around one service.

Why a thin shell: every rule lives in :class:`~qjournal.journalnode.journal.Journal` (pure,
storage-injected), and the whole request handling (argument checks, epoch-checked dispatch,
ordering, the inline-write decision, accept-recovery's download, digests, the syncer's journal
side) in :class:`~qjournal.journalnode.service.JournalNodeService`, which the simulator runs too.
This module is what only a real process has: it reads the configuration, binds the RPC server
(TCP, TLS, or a memory network) and the HTTP server (``http.py``), starts the syncers of the
journals its configuration names, and is the service's host (:class:`_DaemonHost`): one worker
thread per journal, HTTP(S) downloads with aiohttp, the disk, the wall clock.

Theory of operation:

* The service is the RPC handler (with the refresh calls of :mod:`qjournal.security.service_auth`),
  so the QJournalProtocol table (:data:`qjournal.protocol.protocols.QJOURNAL`) decides arguments and
  ordering; the RPC server checks every call against the service-level ACLs first
  (``security.qjournal.service.protocol.acl``: who may be the writer), the HTTP server's middleware
  every request (``/getJournal``). docs/security.md.
* Each journal's calls run on its own worker thread (``threaded=True``), or inline on the loop
  (``threaded=False``, a test's in-memory disk); the service decides which calls go where.
* On a :class:`~qjournal.transport.MemoryNetwork` without HTTP (tests), the node serves
  ``/getJournal`` through the network (``mem://<name>`` URLs) and downloads ``mem://`` URLs through
  it, so no test-only path reaches into the client or a global registry.
* Nothing a client sends can stop the daemon (the service's errors are typed; the RPC server keeps
  serving every other connection).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import aiohttp

from qjournal.config import Configuration
from qjournal.errors import ConfigError, InvalidRequestError, JournalError
from qjournal.journalnode.disk_storage import DiskJournalStorage
from qjournal.journalnode.http import JournalNodeHttpServer
from qjournal.journalnode.service import JournalEvent, JournalNodeService, JournalNodeSettings
from qjournal.journalnode.storage import JournalStorage
from qjournal.journalnode.syncer import JournalSyncer, SyncerSettings, syncer_targets
from qjournal.protocol.journal_layout import journal_dir as journal_layout_dir
from qjournal.security.service_auth import HTTP_JOURNALNODE, ServiceAuthorization
from qjournal.protocol.protocols import JOURNALNODE_ACLS
from qjournal.transport import RpcHandlers, RpcServer, memory_connector, tcp_connector
from qjournal.transport.download import SegmentDownload, http_download
from qjournal.transport.http import http_client_context, http_server_context, https_enabled
from qjournal.transport.memory import UrlFetcher
from qjournal.transport.tls import client_context_from_conf, server_context_from_conf
from qjournal.util.tasks import cancel_and_wait, spawn

__all__ = ["JournalNode"]

log = logging.getLogger(__name__)


class _WorkerThread:
    """A journal's own thread (one worker: its calls run one at a time, in submission order)."""

    def __init__(self, jid: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"jn-{jid}")

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=False)


class _DaemonHost:
    """The service's host in a real process (:class:`~qjournal.journalnode.service.JournalNodeHost`)."""

    def __init__(self, node: "JournalNode", storage_factory: Callable[[str, str], JournalStorage] | None,
                 threaded: bool, segment_fetcher: UrlFetcher | None, fault_hook: Callable[[str], None] | None,
                 wall_clock: Callable[[], float] | None) -> None:
        c = node.conf
        self._node = node
        self._threaded = threaded
        self._segment_fetcher = segment_fetcher
        self._session: Any = None
        self.fault_hook = fault_hook
        self.wall_clock = wall_clock
        self._transfer_timeout_s = c.get_duration_ms("dfs.edit.log.transfer.timeout") / 1000.0
        self._download_max_bytes = c.get_bytes("qjournal.journalnode.recovery-download.max.bytes")
        fsync = c.get_bool("qjournal.journalnode.fsync")
        preallocate = c.get_bytes("qjournal.journalnode.preallocate.bytes")
        if preallocate < 0:
            raise ConfigError(f"qjournal.journalnode.preallocate.bytes must be >= 0, got {preallocate}",
                              key="qjournal.journalnode.preallocate.bytes")
        self._on_disk = storage_factory is None
        self._storage_factory = storage_factory or (
            lambda d, jid: DiskJournalStorage(journal_layout_dir(d, jid), fsync=fsync, preallocate_bytes=preallocate))

    @property
    def name(self) -> str:
        return self._node.name

    @property
    def http_port(self) -> int:
        bound = self._node.http_bound
        return int(bound.rsplit(":", 1)[1]) if bound else 0

    @property
    def http_url(self) -> str:
        return self._node.http_url

    def open_storage(self, jid: str) -> JournalStorage:
        return self._storage_factory(self._node.journal_dir(jid), jid)

    def has_journal(self, jid: str) -> bool:
        return not self._on_disk or os.path.isdir(journal_layout_dir(self._node.journal_dir(jid), jid))

    def journal_thread(self, jid: str) -> _WorkerThread | None:
        return _WorkerThread(jid) if self._threaded else None

    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        if not self._threaded:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def guard(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    async def open_download(self, url: str, chunk_bytes: int) -> SegmentDownload:
        if self._segment_fetcher is not None:
            return await self._segment_fetcher(url)
        network = self._node.network
        if url.startswith("mem://") and network is not None:
            return await network.fetch(url)
        if url.startswith(("http://", "https://")):
            if self._session is None:
                client_ctx = http_client_context(self._node.conf)  # HTTPS_ONLY: present our certificate
                connector = aiohttp.TCPConnector(ssl=client_ctx) if client_ctx is not None else None
                self._session = aiohttp.ClientSession(connector=connector)
            return await http_download(self._session, url, chunk_bytes=chunk_bytes,
                                       connect_timeout_s=self._transfer_timeout_s,
                                       read_timeout_s=self._transfer_timeout_s, max_bytes=self._download_max_bytes,
                                       what="qjournal.journalnode.recovery-download.max.bytes")
        raise InvalidRequestError(f"unsupported segment URL {url[:200]!r}", url=url[:200])

    def monotonic(self) -> float:
        return time.monotonic()

    def observe(self, event: JournalEvent) -> None:
        return None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


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
            inline on the loop, for a test's in-memory disk).
        storage_factory: ``(edits_dir, jid) -> JournalStorage`` (default: a disk).
        fault_hook: passed to every Journal (a test's crash points).
        segment_fetcher: replaces the download of accept-recovery (default: HTTP(S) for
            ``http(s)://`` URLs, the memory network for ``mem://`` URLs).
        clock: seconds for metrics (default ``time.time``).
        ssl: server TLS context for RPC (default: from the ``qjournal.rpc.tls.*`` keys).
        http_ssl: server TLS context for HTTP (default: from ``dfs.http.policy`` and the
            ``qjournal.rpc.tls.*`` files; HTTPS_ONLY serves ``https://`` with mutual TLS and
            downloads recovery segments with this node's client certificate).

    Attributes:
        service: the :class:`~qjournal.journalnode.service.JournalNodeService` (the RPC handler).

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
        self.service_auth = ServiceAuthorization(c, JOURNALNODE_ACLS, service=f"JournalNode {self.name}",
                                                 http=HTTP_JOURNALNODE if http and network is None else None)
        self.ssl = ssl
        self.http_ssl = http_ssl
        self.max_frame_bytes = c.get_bytes("ipc.maximum.data.length")
        self.rpc_server: Any = None
        self.http_server: Any = None
        self.rpc_bound: str | None = None
        self.http_bound: str | None = None
        self.http_url: str = ""
        self.started_at = 0.0
        self._host = _DaemonHost(self, storage_factory, threaded, segment_fetcher, fault_hook, clock)
        self.service = JournalNodeService(self._host, JournalNodeSettings.from_conf(c))
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
            self.rpc_server = RpcServer(RpcHandlers(self.service, sa), max_frame_bytes=self.max_frame_bytes,
                                        name=f"journalnode {self.name}",
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
        await self._host.close()
        if self.network is not None:
            self.network.stop_http(self.name, self._serve_memory_http)
        await self.service.close()

    # --- the JournalNodeSyncer ---------------------------------------------------------------

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
            syncer = self.service.new_syncer(jid, peers, connect, self.sync_settings)
            task = spawn(syncer.run(), name=f"journal-syncer-{jid}")
            self.syncers[jid] = (syncer, task)
            log.info("journal %s: syncer started, peers %s, every %.0f s%s", jid,
                     ", ".join(f"{h}:{p}" for h, p in peers), self.sync_settings.interval_s,
                     " (formats an empty journal from its peers)" if self.sync_settings.format_enabled else "")

    # --- /getJournal on a memory network -----------------------------------------------------

    async def _serve_memory_http(self, url: str) -> SegmentDownload:
        """``GET mem://<name>/getJournal?jid=&segmentTxId=&storageInfo=&inProgressOk=`` on a memory
        network: the in-process ``/getJournal`` of a node without an HTTP server.

        Raises:
            InvalidRequestError: bad jid or segmentTxId; NamespaceMismatchError: wrong storageInfo;
            SegmentNotFoundError: no such journal or segment.
        """
        q = {k: v[0] for k, v in sorted(parse_qs(urlsplit(url).query).items())}
        try:
            seg = int(q.get("segmentTxId", ""))
        except ValueError as e:
            raise InvalidRequestError(f"bad segmentTxId in {url}", url=url) from e
        _name, download = await self.service.serve_segment(q.get("jid"), seg, q.get("inProgressOk", "true") != "false",
                                                           q.get("storageInfo"))
        return download

    # --- status -----------------------------------------------------------------------------

    async def snapshot(self) -> dict[str, dict]:
        """Per journal: status and metrics (the syncer's too), sorted by jid (for /jmx, /metrics, /)."""
        out = await self.service.snapshot()
        for jid, v in out.items():
            syncer = self.syncers.get(jid)
            if syncer is not None:
                v["status"]["sync"] = syncer[0].stats.to_status()
                v["metrics"].update(syncer[0].stats.to_metrics())
        return out
