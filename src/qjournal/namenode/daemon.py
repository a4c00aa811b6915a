"""The NameNode daemon: namespace + edit log + HA states behind an RPC server.

Why: this is the shell around the pure parts (``namespace.py``,
``ha_state.py``, ``retry_cache.py``): it owns the asyncio tasks, the
journals, the clock and the RPC server, and it is the only place where a
state transition touches journals. HDFS's ``NameNode`` with the services its
``HAContext`` starts and stops.

Theory of operation:

* Parts. The RPC calls are served by one handler per protocol, each in its
  own module and each seeing the NameNode through a narrow ``Protocol`` that
  this class implements: ``client_protocol.py`` (ClientProtocol),
  ``ha_service.py`` (HAServiceProtocol and the order of the transitions),
  ``namenode_protocol.py`` (image transfer, roll, stats), ``admin_protocol.py``
  (``dfsadmin``: safe mode, saveNamespace, rollEdits, report), plus the refresh
  calls of the service-level authorization. :class:`RpcHandlers` joins them into
  the one object the ``RpcServer`` dispatches to.
* Security (docs/security.md): :attr:`NameNode.service_auth` holds the
  service-level ACLs (checked by the RPC server before any handler, and by the
  HTTP server's middleware); :meth:`NameNode.identify` gives the protocol
  handlers the caller of a call (its certificate's user when TLS is on). Storage
  layout and journals: ``storage.py``; tasks: ``tailer.py``, ``checkpointer.py``.
* Start-up: read ``NNVERSION``, load the newest valid image, then
  - HA (a shared edits dir is configured): enter ``standby``; replay the
    finalized shared segments and keep tailing them (the standby services);
  - non-HA: recover the local journals, replay them, open a new segment and
    enter ``active``.
* Active services (:meth:`start_active_services`, driven by ``ha_service.py``):
  open fresh journal objects and call ``recover_unfinalized_segments`` on the
  set: for the quorum journal this takes a new epoch, which *fences* the
  previous writer; read every remaining edit from the shared journal; open a
  new segment at the next txid (and the periodic roll). Stopping them
  finalizes the open segment and closes the journals. Standby services: the
  tailer.
* The HA gate (:meth:`check_operation`) refuses every call the state does not
  serve (``ha_state`` invariant 2), and everything once the journal failed.
* Observer (``ha_state``, HDFS-12943): the standby services keep running (the
  tailer) and reads are served under the observer read rule; the tailer wakes
  the reads waiting for a txid through :attr:`applied_waiters` after every
  applied batch. Observers do not checkpoint (as in HDFS).
* Safe mode (``ha_state`` invariant 4): :attr:`NameNode.safe_mode`, set and
  cleared by ``admin_protocol.py``; the client protocol refuses writes while it
  is on, and the periodic log roll pauses (HDFS refuses a roll in safe mode).
* Fatal journal failure (fenced, quorum lost): the edit log calls
  :meth:`NameNode._on_fatal`: the NameNode enters ``stopping``, answers no
  more calls and the process exits with status 1 (``exit_hook``). It never
  carries on.
* Checkpoints (``checkpointer.py``): the standby saves an image at its
  last applied txid and uploads it to the active (``upload_image``); the
  receiver verifies, stores it and purges old images and edits (retention,
  ``storage.py``). Without HA the active checkpoints itself.

Invariants:

1. A write is answered only after its txid is durable on the journal set
   (FSEditLog invariant 2); an answer is never sent from a NameNode whose
   journal failed.
2. A NameNode serves writes only in ``active``, and enters ``active`` only
   after fencing (new epoch / lock) and reading every finalized edit.
3. ``last_applied_txid`` is the txid of the namespace state: the image txid
   plus every op applied since, in order (by the tailer, or by the edit log
   on the active).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from qjournal.config import Configuration
from qjournal.errors import (CorruptSegmentError, InvalidRequestError,
                             JournalNotFormattedError, NamespaceMismatchError, QJournalError, StandbyError)
from qjournal.journalmanager.base import JournalManager
from qjournal.namenode import image as img
from qjournal.namenode.addresses import nameservice_of, rpc_address_of
from qjournal.namenode.admin_protocol import AdminProtocolHandler
from qjournal.namenode.checkpointer import Checkpointer
from qjournal.namenode.client_protocol import ClientProtocolHandler
from qjournal.namenode.editlog import FSEditLog
from qjournal.namenode.ha_service import HAService
from qjournal.namenode.ha_state import HAState, OpCategory, check_operation
from qjournal.namenode.log_roller import ActiveLogRoller
from qjournal.namenode.namenode_protocol import NamenodeProtocolHandler
from qjournal.namenode.inode_table import TableSnapshot
from qjournal.namenode.namespace import Namespace
from qjournal.namenode.retry_cache import RetryCache
from qjournal.namenode.state_id import AppliedTxidWaiters
from qjournal.namenode.storage import (make_journal_set, name_dir_of, open_journals, purge_old_storage,
                                       read_nn_version)
from qjournal.namenode.tailer import EditLogTailer
from qjournal.protocol.messages import NamespaceInfo
from qjournal.security.identity import Caller
from qjournal.protocol.protocols import NAMENODE_ACLS
from qjournal.security.service_auth import HTTP_NAMENODE, ServiceAuthorization
from qjournal.namenode.journal_registry import JournalOpener, open_journal
from qjournal.transport.memory import MemoryNetwork
from qjournal.transport import RpcConnector, RpcHandlers, RpcServer, current_peer, tcp_connector
from qjournal.transport.tls import client_context_from_conf, server_context_from_conf
from qjournal.util.pause_monitor import PauseMonitor
from qjournal.util.tasks import cancel_and_wait, spawn

log = logging.getLogger(__name__)


class NameNode:
    """One NameNode process (module docstring).

    Args:
        conf: the configuration.
        nn_id: this NameNode's id in the nameservice (``dfs.ha.namenode.id`` by default).
        clock_ms: wall clock in ms (injectable for tests): only for what a person reads as a date
            (modification times, edit timestamps, the report's time of day).
        monotonic_ms: the clock of every duration and deadline (retry-cache expiry, the observer's read
            wait, the checkpoint period, phase timings), default ``time.monotonic``: a wall clock
            that jumps or drifts (issue 28, H1) must not expire, shorten or stretch any of them.
        exit_hook: called with an exit status when the NameNode must terminate
            (fenced / journal failure). Default: nothing (the daemon passes one).
        journal_opener: opens its journals by URI (default: the registry's ``open_journal``;
            the simulator puts the quorum client on its memory network).
        connect: how it reaches the other NameNode (checkpoint upload); default TCP with the
            ``qjournal.rpc.tls.*`` client context.
    """

    def __init__(self, conf: Configuration, nn_id: str | None = None, *,
                 clock_ms: Callable[[], int] | None = None,
                 monotonic_ms: Callable[[], int] | None = None,
                 exit_hook: Callable[[int], None] | None = None,
                 journal_opener: JournalOpener = open_journal,
                 connect: RpcConnector | None = None) -> None:
        self.conf = conf
        self.journal_opener = journal_opener
        self.connect = connect or tcp_connector(ssl=client_context_from_conf(conf), connect_timeout_ms=5000)
        self.nameservice = nameservice_of(conf)
        self.nn_id = nn_id or conf.get("dfs.ha.namenode.id")
        #: "NameNode <id>", for messages
        self.label = f"NameNode {self.nn_id or ''}".strip()
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.monotonic_ms = monotonic_ms or (lambda: int(time.monotonic() * 1000))
        self.exit_hook = exit_hook
        self.name_dir = name_dir_of(conf)
        self.superuser = conf.get("qjournal.namenode.superuser") or "root"
        self.supergroup = conf.get("dfs.permissions.superusergroup") or "supergroup"
        self.permissions_enabled = bool(conf.get_bool("dfs.permissions.enabled"))
        self.allow_stale_reads = bool(conf.get_bool("dfs.ha.allow.stale.reads"))
        #: how long an observer holds a read that is ahead of it (observer_rules rule 3)
        self.observer_read_wait_ms = int(conf.get_duration_ms("dfs.namenode.observer.read.wait.ms") or 0)
        #: observer reads parked until the tailer applies their client's state id
        self.applied_waiters = AppliedTxidWaiters()
        self.ha_enabled = bool(conf.get("dfs.namenode.shared.edits.dir"))
        # In-progress tailing only where a reader is bounded by the committed txid (the quorum
        # journal): a file:// shared dir would expose written-but-not-yet-synced edits.
        self.tail_in_progress = bool(conf.get_bool("dfs.ha.tail-edits.in-progress"))
        shared_dir = conf.get("dfs.namenode.shared.edits.dir") or ""
        if self.tail_in_progress and not shared_dir.startswith("qjournal://"):
            if shared_dir:
                log.warning("dfs.ha.tail-edits.in-progress needs a qjournal:// shared edits dir; "
                            "tailing finalized segments only")
            self.tail_in_progress = False
        self.tail_period_ms = int(conf.get_duration_ms("dfs.ha.tail-edits.period") or 0)
        self.tail_backoff_max_ms = int(conf.get_duration_ms("dfs.ha.tail-edits.period.backoff-max") or 0)
        ckpt_txns = int(conf.get_int("dfs.namenode.checkpoint.txns") or 0)
        mult = float(conf.get_float("dfs.namenode.edit.log.autoroll.multiplier.threshold") or 0)
        self.roll_txns = int(ckpt_txns * mult) if mult > 0 else 0
        self.retry_cache = RetryCache(
            int(conf.get_duration_ms("dfs.namenode.retrycache.expirytime.millis") or 0),
            int(conf.get_int("qjournal.namenode.retrycache.max-entries") or 1))
        self.state = HAState.INITIALIZING
        #: manual safe mode (``ha_state`` invariant 4): per NameNode, in memory, off after a restart
        self.safe_mode = False
        self.ns_lock = asyncio.Lock()
        self.namespace: Namespace | None = None
        self.ns_info: NamespaceInfo | None = None
        self.editlog: FSEditLog | None = None
        self.journal_set: JournalManager | None = None
        self.shared_reader: JournalManager | None = None
        self.tailer: EditLogTailer | None = None
        self.checkpointer: Checkpointer | None = None
        self.last_checkpoint_txid = 0
        self.client_protocol = ClientProtocolHandler(self)
        self.ha_service = HAService(self, conf, name_dir=self.name_dir, ha_enabled=self.ha_enabled)
        self.namenode_protocol = NamenodeProtocolHandler(self)
        self.admin_protocol = AdminProtocolHandler(self)
        #: service-level ACLs and the identity of callers (docs/security.md)
        self.service_auth = ServiceAuthorization(conf, NAMENODE_ACLS, service=self.label, http=HTTP_NAMENODE)
        self.rpc_server: RpcServer | None = None
        self.address: tuple[str, int] | None = None
        #: HA: the standby's requests that the active roll its log (log_roller.py); None without HA
        self.log_roller: ActiveLogRoller | None = None
        self.fatal_error: BaseException | None = None
        #: the process's pause monitor, when its command started one (``util/pause_monitor.py``; /jmx JvmMetrics)
        self.pause_monitor: PauseMonitor | None = None
        #: the phases of the last start-up (Hadoop's StartupProgress): image load and edits replay, ms and counts
        self.startup_progress: dict[str, int] = {}

    # ------------------------------------------------------------ properties
    @property
    def last_applied_txid(self) -> int:
        """Invariant 3."""
        if self.editlog is not None:  # active, or stopped after being active
            return self.editlog.last_written_txid
        return self.tailer.last_applied_txid if self.tailer is not None else 0

    # -------------------------------------------------------------- start-up
    async def start(self, host: str | None = None, port: int | None = None,
                    serve: bool = True, network: MemoryNetwork | None = None) -> tuple[str, int] | None:
        """Load the image and edits, enter standby (HA) or active, and serve RPC.

        Args:
            host / port: where to listen (default: the configured rpc address).
            serve: start the RPC server (False for in-process unit tests).
            network: serve on this memory network at ``host:port`` instead of TCP (the simulator).

        Returns:
            The RPC address, when serving.

        Raises:
            JournalNotFormattedError: the name dir was never formatted.
            CorruptSegmentError: no valid image.
            NamespaceMismatchError: the image belongs to another namespace.
        """
        self.ns_info = read_nn_version(self.name_dir)
        if self.ns_info is None:
            raise JournalNotFormattedError(
                f"{self.name_dir}: NameNode storage is not formatted (run qjournal namenode -format)",
                path=self.name_dir)
        t0 = self.monotonic_ms()
        info, self.namespace, path = await asyncio.to_thread(self._load_newest_image)
        self.last_checkpoint_txid = info.txid
        t1 = self.monotonic_ms()
        self.startup_progress = {"LoadingFsImageElapsedTime": t1 - t0, "LoadingFsImageCount": len(self.namespace),
                                 "LoadingEditsElapsedTime": 0, "LoadingEditsCount": 0}
        self.tailer = EditLogTailer(self.namespace, self.retry_cache, self.ns_lock, info.txid,
                                    self.monotonic_ms, self.tail_period_ms,
                                    in_progress_ok=self.tail_in_progress, on_crash=self._on_fatal,
                                    backoff_max_ms=self.tail_backoff_max_ms,
                                    on_applied=self.applied_waiters.notify)
        self.applied_waiters.notify(info.txid)
        log.info("loaded image", extra={"path": path, "txid": info.txid, "inodes": len(self.namespace),
                                        "load_ms": t1 - t0})
        if self.ha_enabled:
            _local, self.shared_reader = open_journals(self.conf, self.ns_info, self.journal_opener)
            for j in _local:
                await j.close()
            try:
                await self.tailer.catch_up(self.shared_reader)  # type: ignore[arg-type]
            except QJournalError as e:
                log.warning("initial catch-up from the shared journal failed; the tailer retries: %s", e)
            self.state = HAState.STANDBY
            self.start_standby_services()
        else:
            await self._become_active_non_ha()
        t2 = self.monotonic_ms()
        replayed = self.last_applied_txid - info.txid
        self.startup_progress.update(LoadingEditsElapsedTime=t2 - t1, LoadingEditsCount=replayed,
                                     ElapsedTime=t2 - t0)
        log.info("replayed edits", extra={"txns": replayed, "replay_ms": t2 - t1, "startup_ms": t2 - t0})
        if self.ha_enabled:
            self.log_roller = ActiveLogRoller(self.conf, self.nn_id, self.connect,
                                              is_standby=lambda: self.state == HAState.STANDBY,
                                              last_applied_txid=lambda: self.last_applied_txid,
                                              on_crash=self._on_fatal)
            self.log_roller.start()
        self.checkpointer = Checkpointer(self, self.conf, nn_id=self.nn_id, name_dir=self.name_dir,
                                         clock_ms=self.monotonic_ms, ha_enabled=self.ha_enabled,
                                         connect=self.connect, on_crash=self._on_fatal,
                                         after_upload=self.log_roller.trigger if self.log_roller else None)
        self.checkpointer.start()
        if serve:
            return await self._serve(host, port, network)
        return None

    def _load_newest_image(self) -> tuple[img.ImageInfo, Namespace, str]:
        """The namespace of the newest image that loads, streamed from the file into the inode table
        (``image.iter_image_batches``); an image that fails its checks is skipped for the one before it,
        logged, as Hadoop's ``FSImage`` does (the edits since the older image replay after it).

        Raises:
            CorruptSegmentError: no image loads. NamespaceMismatchError: the newest loadable image belongs to
                another namespace.
        """
        assert self.ns_info is not None
        for _txid, path in reversed(img.list_images(self.name_dir)):
            try:
                info, batches = img.iter_image_batches(path)
                if info.namespace_id != self.ns_info.namespace_id:
                    raise NamespaceMismatchError(f"{path}: image namespace {info.namespace_id} does not match "
                                                 f"{self.ns_info.namespace_id}")
                ns = Namespace.from_image_batches(batches, info.last_inode_id, superuser=self.superuser,
                                                  supergroup=self.supergroup,
                                                  permissions_enabled=self.permissions_enabled, where=path)
            except CorruptSegmentError as e:
                log.warning("skipping invalid image %s: %s", path, e.message)
                continue
            img.release_unused_memory()  # the load's Arrow buffers, back to the system
            return info, ns, path
        raise CorruptSegmentError(f"{self.name_dir}: no valid fsimage found", path=self.name_dir)

    async def _serve(self, host: str | None, port: int | None,
                     network: MemoryNetwork | None = None) -> tuple[str, int]:
        """Listen for RPC on ``host:port`` (default: the configured address), mutual TLS when configured."""
        handlers = RpcHandlers(self.client_protocol, self.ha_service, self.namenode_protocol, self.admin_protocol,
                               self.service_auth)
        sa = self.service_auth
        self.rpc_server = RpcServer(handlers, max_frame_bytes=int(self.conf.get_bytes("ipc.maximum.data.length")),
                                    name=f"namenode-{self.nn_id or 'nn'}",
                                    authorize=sa.authorize_rpc if sa.enabled else None)
        if host is None or port is None:
            try:
                h, p = rpc_address_of(self.conf, self.nn_id)
            except InvalidRequestError:
                h, p = "127.0.0.1", 0
            bind = self.conf.get("qjournal.namenode.rpc-bind-host")
            host = host if host is not None else (bind or h)
            port = port if port is not None else p
        if network is not None:
            await self.rpc_server.start_memory(network, f"{host}:{port}")
            self.address = (host, port)
            return self.address
        # mutual TLS when qjournal.rpc.tls.enabled (None otherwise)
        self.address = await self.rpc_server.start_tcp(host, port, ssl=server_context_from_conf(self.conf))
        return self.address

    async def _become_active_non_ha(self) -> None:
        local, _ = open_journals(self.conf, self.ns_info, self.journal_opener)
        jset = make_journal_set(local, None)
        await jset.recover_unfinalized_segments()
        await self.tailer.catch_up(jset)  # type: ignore[union-attr]
        await self._open_editlog(jset)
        self.state = HAState.ACTIVE

    async def _open_editlog(self, jset: JournalManager) -> None:
        assert self.tailer is not None
        self.journal_set = jset
        self.editlog = FSEditLog(jset, clock_ms=self.clock_ms, user=self.superuser,
                                 roll_txns=self.roll_txns, on_fatal=self._on_fatal, lock=self.ns_lock)
        await self.editlog.open_for_write(self.tailer.last_applied_txid + 1)

    # ------------------------------------------- services (ha_service.HAContext)
    async def start_active_services(self) -> dict[str, int]:
        """Fence the previous writer, read every remaining edit, open a new segment (invariant 2).

        The caller (``ha_service.py``) enters ``active`` right after this returns.

        Returns:
            Phase durations ``{"fence_ms", "catch_up_ms", "catch_up_txns"}``.

        Raises:
            QJournalError: fencing, catch-up or the new segment failed; nothing is left open.
        """
        assert self.tailer is not None
        t0 = self.monotonic_ms()
        local, shared = open_journals(self.conf, self.ns_info, self.journal_opener)
        jset = make_journal_set(local, shared)
        phases: dict[str, int] = {}
        try:
            # fencing: a new epoch on the quorum (or the lock of a shared dir)
            await jset.recover_unfinalized_segments()
            phases["fence_ms"] = self.monotonic_ms() - t0
            # every remaining edit (all finalized now), from the shared journal
            n = await self.tailer.catch_up(shared)  # type: ignore[arg-type]
            phases["catch_up_ms"] = self.monotonic_ms() - t0 - phases["fence_ms"]
            phases["catch_up_txns"] = n
            await self._open_editlog(jset)
        except Exception:
            if self.editlog is not None:
                await self.editlog.abort()
                self.editlog = None
            try:
                await jset.close()
            except QJournalError:
                pass
            self.journal_set = None
            raise
        return phases

    async def stop_active_services(self) -> None:
        """Finalize the open segment and close the writer's journals (leaving active).

        The edit log stays in place until it is closed, so ``last_applied_txid`` keeps
        naming the namespace's state meanwhile (invariant 3). A NameNode whose last
        edits may not be durable exits instead of becoming a standby: its namespace
        would hold edits that the next writer may overwrite.
        """
        assert self.tailer is not None
        el = self.editlog
        if el is not None:
            try:
                await el.close()
            except QJournalError as e:
                if el.fatal is not None or el.synced_txid < el.last_written_txid:
                    self._on_fatal(e)
                else:
                    log.warning("finalizing the segment on transition to standby failed "
                                "(every edit up to txid %d is durable): %s", el.last_written_txid, e)
            self.tailer.last_applied_txid = el.last_written_txid
            self.editlog = None
        if self.journal_set is not None:
            try:
                await self.journal_set.close()
            except QJournalError as e:
                log.warning("closing the journals failed: %s", e)
            self.journal_set = None

    def start_standby_services(self) -> None:
        """Tail the shared journal (opened once, kept across transitions)."""
        assert self.tailer is not None
        if self.shared_reader is None:
            _l, self.shared_reader = open_journals(self.conf, self.ns_info, self.journal_opener)
        self.tailer.start(self.shared_reader)  # type: ignore[arg-type]

    async def stop_standby_services(self) -> None:
        """Stop tailing (before fencing: the catch-up then reads the rest itself)."""
        assert self.tailer is not None
        await self.tailer.stop()

    # ------------------------------------------------------------ shutdown
    async def stop(self) -> None:
        """Clean shutdown: finalize the open segment, stop every task, close journals."""
        if self.state != HAState.STOPPING:
            self.state = HAState.STOPPING
        if self.checkpointer is not None:
            await self.checkpointer.stop()
        if self.tailer is not None:
            try:
                await self.tailer.stop()
            except Exception as e:
                log.warning("tailer ended with %s", e)
        if self.log_roller is not None:
            await self.log_roller.stop()
        if self.editlog is not None:
            try:
                await self.editlog.close()
            except QJournalError as e:
                log.warning("closing the edit log failed: %s", e)
        for j in [self.journal_set, self.shared_reader]:
            if j is not None:
                try:
                    await j.close()
                except QJournalError as e:
                    log.warning("closing a journal failed: %s", e)
        if self.rpc_server is not None:
            await self.rpc_server.stop()

    def _on_fatal(self, e: BaseException) -> None:
        """The required journal failed (fenced, quorum lost), or a background task died: stop serving
        and exit (never carry on)."""
        if self.fatal_error is not None:
            return
        self.fatal_error = e
        self.state = HAState.STOPPING
        log.critical("journal failure: the NameNode stops serving and exits: %s", e)
        if self.exit_hook is not None:
            self.exit_hook(1)

    # ---------------------------------------- for the protocol handlers and tasks
    def check_operation(self, category: OpCategory, method: str) -> None:
        """The HA gate (HDFS's ``FSNamesystem.checkOperation``).

        Raises:
            StandbyError: the journal failed, or the state does not serve ``category`` (invariant 2).
        """
        if self.fatal_error is not None:
            raise StandbyError(f"{self.label} is stopping after a journal failure",
                               state="stopping")
        check_operation(self.state, category, self.allow_stale_reads, method)

    async def identify(self, user: Any, groups: Any) -> Caller:
        """The caller of the RPC being served: its certificate's user with TLS on (a different
        claimed ``user`` is refused), else the claimed ``user`` and ``groups`` (simple
        authentication; also in-process calls such as WebHDFS's, which identified its caller).

        Raises:
            AuthenticationError: the certificate names no usable principal.
            AuthorizationError: the call claims another user than its certificate's.
        """
        peer = current_peer()
        return await self.service_auth.authenticator.caller(peer.cert if peer is not None else None, user, groups)

    def namespace_is_log_prefix(self) -> bool:
        """The namespace is exactly the log up to ``last_applied_txid`` (once that txid is durable):
        an active writing, or a standby or observer whose tailer runs (not one still leaving active)."""
        if self.fatal_error is not None or self.namespace is None or self.tailer is None:
            return False
        if self.state == HAState.ACTIVE:
            return self.editlog is not None
        if self.state in (HAState.STANDBY, HAState.OBSERVER):
            return self.editlog is None and self.tailer.running
        return False

    def may_checkpoint(self) -> bool:
        """Periodic checkpoints: the standby (HA) or the non-HA active, when the namespace is a
        prefix of the log (:meth:`namespace_is_log_prefix`)."""
        want = HAState.STANDBY if self.ha_enabled else HAState.ACTIVE
        return self.state == want and self.namespace_is_log_prefix()

    async def make_durable(self, txid: int) -> None:
        """Return once the ops up to ``txid`` are durable (the active syncs; a standby's are).

        Raises:
            EditLogFatalError: the journal failed.
        """
        if self.editlog is not None:
            await self.editlog.log_sync(txid)

    def snapshot_image(self) -> tuple[TableSnapshot, img.ImageInfo]:
        """The image rows and their info at ``last_applied_txid``, in one synchronous step (no op can be
        applied in between: checkpointer invariant 1): the inode table's copy-on-write snapshot, O(chunks) on
        the event loop, which the checkpointer's thread writes while ops go on being applied."""
        assert self.namespace is not None and self.ns_info is not None
        txid = self.last_applied_txid
        cols = self.namespace.image_snapshot()
        info = img.ImageInfo(txid, self.ns_info.layout_version, self.ns_info.namespace_id,
                             self.ns_info.cluster_id, self.namespace.last_inode_id)
        return cols, info

    async def purge_old_storage(self) -> None:
        """Retention (``storage.purge_old_storage``): images here; edits too when active (the writer)."""
        await purge_old_storage(self.conf, self.name_dir,
                                self.journal_set if self.state == HAState.ACTIVE else None)

    def stats(self) -> dict:
        """Counters: state, last applied txid, inodes, edit log and retry cache statistics."""
        return {"state": self.state.value, "safe_mode": self.safe_mode, "last_applied_txid": self.last_applied_txid,
                "time_ms": self.clock_ms(),  # when these counters were read (lag measurements)
                "inodes": len(self.namespace) if self.namespace else 0,
                "editlog": self.editlog.stats() if self.editlog is not None else None,
                "retry_cache_entries": len(self.retry_cache), "retry_cache_hits": self.retry_cache.hits,
                "last_checkpoint_txid": self.last_checkpoint_txid,
                "tailer_last_error": self.tailer.last_error if self.tailer else "",
                "tailer": self._tailer_stats()}

    def _tailer_stats(self) -> dict:
        """The tailer's rounds and where its edits came from (edit caches over RPC, or streamed)."""
        t, r = self.tailer, self.shared_reader
        if t is None:
            return {}
        return {"rounds": t.rounds, "applied_total": t.applied_total, "sleep_ms": t.sleep_ms,
                "in_progress": t.in_progress_ok, "rpc_reads": getattr(r, "rpc_reads", 0),
                "rpc_fallbacks": getattr(r, "rpc_fallbacks", 0),
                "last_rpc_miss": getattr(r, "last_rpc_miss", ""),
                "bytes_rpc": getattr(r, "bytes_rpc", 0), "bytes_streamed": getattr(r, "bytes_streamed", 0)}


__all__ = ["NameNode"]
