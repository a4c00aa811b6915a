"""The NameNode daemon: namespace + edit log + HA states behind an RPC server.

Why: this is the shell around the pure parts (``namespace.py``,
``ha_state.py``, ``retry_cache.py``): it owns the asyncio tasks, the
journals, the clock and the RPC server, and it is the only place where a
state transition touches journals.

Theory of operation:

* Storage. ``<name dir>/current/NNVERSION`` (JSON: namespace id, cluster id,
  layout version; written once at format, atomically) and the Parquet images
  (``image.py``). The local edits dirs (``dfs.namenode.edits.dir``, default the
  name dir) are FileJournals; the shared edits dir
  (``dfs.namenode.shared.edits.dir``, ``qjournal://`` or ``file://``) is the
  *required* journal of an HA pair. Writes go to a ``JournalSet`` of all of them.
* Start-up: load the newest valid image, then
  - HA (a shared edits dir is configured): enter ``standby``; replay the
    finalized shared segments and keep tailing them (``tailer.py``);
  - non-HA: recover the local journals, replay them, open a new segment and
    enter ``active``.
* transition-to-active (HA): stop the tailer; open fresh journal objects and
  call ``recover_unfinalized_segments`` on the set: for the quorum journal
  this takes a new epoch, which *fences* the previous writer; read every
  remaining edit from the shared journal; open a new segment at the next
  txid; only then serve writes.
* transition-to-standby: refuse writes at once (state first), finalize the
  open segment, close the journals, start tailing.
* A write: the HA gate (``check_operation``), the retry cache, then
  ``FSEditLog.log_edit`` + ``log_sync``; the answer (a function of the ops,
  ``retry_cache.answer_from_ops``) is recorded in the retry cache and returned.
* Fatal journal failure (fenced, quorum lost): the edit log calls
  :meth:`NameNode._on_fatal`: the NameNode enters ``stopping``, answers no
  more calls and the process exits with status 1 (``exit_hook``). It never
  carries on.
* Checkpoints (``checkpointer.py``): the standby saves an image at its
  last applied txid and uploads it to the active over RPC (``upload_image``:
  the bytes and their ``.crc`` line). The receiver verifies the checksum,
  stores it and purges old images and edits (retention keys). Without HA the
  active checkpoints itself.

Invariants:

1. A write is answered only after its txid is durable on the journal set
   (FSEditLog invariant 2); an answer is never sent from a NameNode whose
   journal failed.
2. A NameNode serves writes only in ``active``, and enters ``active`` only
   after fencing (new epoch / lock) and reading every finalized edit.
3. ``last_applied_txid`` is the txid of the namespace state: the image txid
   plus every op applied since, in order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from typing import Any, Awaitable, Callable

from qjournal.config import Configuration
from qjournal.errors import (HealthCheckFailedError, InvalidRequestError, JournalError,
                             QJournalError, ServiceFailedError, StandbyError)
from qjournal.journalmanager.base import JournalManager
from qjournal.protocol.messages import NamespaceInfo
from qjournal.journalmanager.file import local_path_of_uri
from qjournal.namenode import image as img
from qjournal.namenode.addresses import namenode_ids, nameservice_of, rpc_address_of
from qjournal.namenode.editlog import EditLogFatalError, FSEditLog
from qjournal.namenode.ha_state import (HAState, OpCategory, Transition, check_operation,
                                        check_transition)
from qjournal.namenode.namespace import CallContext, Namespace, check_int, check_name
from qjournal.namenode.retry_cache import RetryCache, answer_from_ops
from qjournal.namenode.tailer import EditLogTailer
from qjournal.protocol.segment import LAYOUT_VERSION
from qjournal.util.fs import atomic_write, read_file
from qjournal.util.tasks import cancel_and_wait

log = logging.getLogger(__name__)

NN_VERSION_FILE = "NNVERSION"
#: most groups a caller may claim (each call carries them)
MAX_GROUPS = 1024


# ----------------------------------------------------------------- config helpers
def _uri_to_path(uri: str, key: str) -> str:
    try:
        return local_path_of_uri(uri)
    except ValueError:
        raise InvalidRequestError(f"configuration key {key}: {uri!r} is not an absolute path or file:// URI",
                                  key=key) from None


def name_dir_of(conf: Configuration) -> str:
    """The first ``dfs.namenode.name.dir`` as a path."""
    dirs = conf.get_list("dfs.namenode.name.dir")
    if not dirs:
        raise InvalidRequestError("configuration key dfs.namenode.name.dir is empty",
                                  key="dfs.namenode.name.dir")
    return _uri_to_path(dirs[0], "dfs.namenode.name.dir")


def local_edits_uris(conf: Configuration) -> list[str]:
    """``dfs.namenode.edits.dir`` as file:// URIs (bare paths accepted)."""
    out = []
    for u in conf.get_list("dfs.namenode.edits.dir"):
        out.append(u if "://" in u else f"file://{_uri_to_path(u, 'dfs.namenode.edits.dir')}")
    return out


def read_nn_version(name_dir: str) -> NamespaceInfo | None:
    raw = read_file(os.path.join(img.current_dir(name_dir), NN_VERSION_FILE))
    if raw is None:
        return None
    try:
        return NamespaceInfo.from_wire(json.loads(raw))
    except (ValueError, InvalidRequestError) as e:
        raise JournalError(f"{name_dir}/current/{NN_VERSION_FILE}: malformed ({e})", path=name_dir) from None


def write_nn_version(name_dir: str, ns_info: NamespaceInfo) -> None:
    os.makedirs(img.current_dir(name_dir), exist_ok=True)
    atomic_write(os.path.join(img.current_dir(name_dir), NN_VERSION_FILE),
                 json.dumps(ns_info.to_wire(), sort_keys=True).encode())


def open_journals(conf: Configuration, ns_info: NamespaceInfo | None) -> tuple[list[JournalManager], JournalManager | None]:
    """Fresh journal objects: the local FileJournals and the shared (required) journal."""
    from qjournal.journalmanager.registry import open_journal

    local = [open_journal(u, conf) for u in local_edits_uris(conf)]
    shared_uri = conf.get("dfs.namenode.shared.edits.dir")
    shared = None
    if shared_uri:
        shared = open_journal(shared_uri, conf)
        shared.required = True
        if ns_info is not None and hasattr(shared, "ns_info"):
            shared.ns_info = ns_info  # type: ignore[attr-defined]
    return local, shared


def make_journal_set(local: list[JournalManager], shared: JournalManager | None) -> JournalManager:
    from qjournal.journalmanager.journalset import JournalSet

    members = list(local) + ([shared] if shared is not None else [])
    if len(members) == 1:
        members[0].required = True
    return JournalSet(members)


async def format_namenode(conf: Configuration, *, cluster_id: str | None = None, force: bool = False,
                          namespace_id: int | None = None, format_shared: bool = True) -> NamespaceInfo:
    """``namenode -format``: a new namespace with an empty image at txid 0.

    Raises:
        JournalAlreadyFormattedError: a directory holds data and not ``force``.
    """
    import random

    name_dir = name_dir_of(conf)
    if read_nn_version(name_dir) is not None and not force:
        from qjournal.errors import JournalAlreadyFormattedError
        raise JournalAlreadyFormattedError(f"{name_dir}: already formatted; use -force to re-format",
                                           path=name_dir)
    ns_info = NamespaceInfo(namespace_id if namespace_id is not None else random.randrange(1, 2 ** 31),
                            cluster_id or f"CID-{random.randrange(16 ** 12):012x}", LAYOUT_VERSION)
    local, shared = open_journals(conf, ns_info)
    targets = local + ([shared] if (shared is not None and format_shared) else [])
    try:
        for j in targets:
            await j.format(ns_info, force=force)
    finally:
        for j in local + ([shared] if shared is not None else []):
            await j.close()
    if os.path.isdir(img.current_dir(name_dir)) and force:
        for t, p in img.list_images(name_dir):
            os.unlink(p)
            if os.path.exists(p + ".crc"):
                os.unlink(p + ".crc")
    write_nn_version(name_dir, ns_info)
    superuser = conf.get("qjournal.namenode.superuser") or "root"
    ns = Namespace(superuser, conf.get("dfs.permissions.superusergroup") or "supergroup",
                   root_mtime=int(time.time() * 1000))
    img.save_image(name_dir, ns.to_image_columns(),
                   img.ImageInfo(0, LAYOUT_VERSION, ns_info.namespace_id, ns_info.cluster_id,
                                 ns.last_inode_id))
    return ns_info


class NameNode:
    """One NameNode process (module docstring).

    Args:
        conf: the configuration.
        nn_id: this NameNode's id in the nameservice (``dfs.ha.namenode.id`` by default).
        clock_ms: wall clock in ms (injectable for tests).
        exit_hook: called with an exit status when the NameNode must terminate
            (fenced / journal failure). Default: nothing (the daemon passes one).
    """

    rpc_concurrent = ("mkdirs", "create", "delete", "rename", "set_permission", "set_owner",
                      "set_times", "set_replication", "get_file_info", "list_status",
                      "get_content_summary", "get_service_status", "monitor_health",
                      "transition_to_active", "transition_to_standby", "upload_image",
                      "get_namespace_info", "get_image", "roll_edit_log", "get_stats")

    def __init__(self, conf: Configuration, nn_id: str | None = None, *,
                 clock_ms: Callable[[], int] | None = None,
                 exit_hook: Callable[[int], None] | None = None) -> None:
        self.conf = conf
        self.nameservice = nameservice_of(conf)
        self.nn_id = nn_id or conf.get("dfs.ha.namenode.id")
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.exit_hook = exit_hook
        self.name_dir = name_dir_of(conf)
        self.superuser = conf.get("qjournal.namenode.superuser") or "root"
        self.supergroup = conf.get("dfs.permissions.superusergroup") or "supergroup"
        self.permissions_enabled = bool(conf.get_bool("dfs.permissions.enabled"))
        self.allow_stale_reads = bool(conf.get_bool("dfs.ha.allow.stale.reads"))
        self.automatic_failover = bool(conf.get_bool("dfs.ha.automatic-failover.enabled"))
        if self.nameservice:
            per_ns = conf.get_bool(f"dfs.ha.automatic-failover.enabled.{self.nameservice}")
            if per_ns is not None:
                self.automatic_failover = per_ns
        self.ha_enabled = bool(conf.get("dfs.namenode.shared.edits.dir"))
        # In-progress tailing only where a reader is bounded by the committed txid (the quorum
        # journal): a file:// shared dir would expose written-but-not-yet-synced edits.
        self.tail_in_progress = bool(conf.get_bool("dfs.ha.tail-edits.in-progress"))
        if self.tail_in_progress and not (conf.get("dfs.namenode.shared.edits.dir") or "").startswith("qjournal://"):
            log.warning("dfs.ha.tail-edits.in-progress needs a qjournal:// shared edits dir; "
                        "tailing finalized segments only")
            self.tail_in_progress = False
        self.du_reserved_bytes = int(conf.get_bytes("dfs.namenode.resource.du.reserved") or 0)
        self.roll_period_ms = int(conf.get_duration_ms("dfs.ha.log-roll.period") or 0)
        self.tail_period_ms = int(conf.get_duration_ms("dfs.ha.tail-edits.period") or 0)
        ckpt_txns = int(conf.get_int("dfs.namenode.checkpoint.txns") or 0)
        mult = float(conf.get_float("dfs.namenode.edit.log.autoroll.multiplier.threshold") or 0)
        self.roll_txns = int(ckpt_txns * mult) if mult > 0 else 0
        self.retry_cache = RetryCache(
            int(conf.get_duration_ms("dfs.namenode.retrycache.expirytime.millis") or 0),
            int(conf.get_int("qjournal.namenode.retrycache.max-entries") or 1))
        self.state = HAState.INITIALIZING
        self.ns_lock = asyncio.Lock()
        self.namespace: Namespace | None = None
        self.ns_info: NamespaceInfo | None = None
        self.editlog: FSEditLog | None = None
        self.journal_set: JournalManager | None = None
        self.shared_reader: JournalManager | None = None
        self.local_reader: list[JournalManager] = []
        self.tailer: EditLogTailer | None = None
        self.checkpointer = None
        self.last_checkpoint_txid = 0
        self.rpc_server = None
        self.address: tuple[str, int] | None = None
        self._inflight: dict[tuple[bytes, int], asyncio.Future] = {}
        self._transition_lock = asyncio.Lock()
        self._roll_task: asyncio.Task | None = None
        self._stopped = asyncio.Event()
        self.fatal_error: BaseException | None = None
        #: test hook: extra space check in bytes (monitor_health compares free space with it)
        self.health_free_bytes_override: int | None = None
        self.became_active_at_ms: int | None = None
        self.last_transition: dict = {}

    # ------------------------------------------------------------ properties
    @property
    def last_applied_txid(self) -> int:
        """Invariant 3."""
        if self.editlog is not None:  # active, or stopped after being active
            return self.editlog.last_written_txid
        return self.tailer.last_applied_txid if self.tailer is not None else 0

    def _where(self) -> str:
        return f"NameNode {self.nn_id or ''}".strip()

    # -------------------------------------------------------------- start-up
    async def start(self, host: str | None = None, port: int | None = None,
                    serve: bool = True) -> tuple[str, int] | None:
        """Load the image and edits, enter standby (HA) or active, and serve RPC.

        Args:
            host / port: where to listen (default: the configured rpc address).
            serve: start the RPC server (False for in-process unit tests).

        Returns:
            The RPC address, when serving.

        Raises:
            JournalNotFormattedError: the name dir was never formatted.
            CorruptSegmentError: no valid image.
        """
        from qjournal.errors import JournalNotFormattedError

        self.ns_info = read_nn_version(self.name_dir)
        if self.ns_info is None:
            raise JournalNotFormattedError(
                f"{self.name_dir}: NameNode storage is not formatted (run qjournal namenode -format)",
                path=self.name_dir)
        loaded = await asyncio.to_thread(img.newest_valid_image, self.name_dir)
        if loaded is None:
            from qjournal.errors import CorruptSegmentError
            raise CorruptSegmentError(f"{self.name_dir}: no valid fsimage found", path=self.name_dir)
        info, table, path = loaded
        if info.namespace_id != self.ns_info.namespace_id:
            from qjournal.errors import NamespaceMismatchError
            raise NamespaceMismatchError(f"{path}: image namespace {info.namespace_id} does not match "
                                         f"{self.ns_info.namespace_id}")
        cols = table.to_pydict()
        self.namespace = Namespace.from_image_columns(
            cols, info.last_inode_id, superuser=self.superuser, supergroup=self.supergroup,
            permissions_enabled=self.permissions_enabled, where=path)
        self.namespace.last_applied_txid = info.txid
        self.last_checkpoint_txid = info.txid
        self.tailer = EditLogTailer(self.namespace, self.retry_cache, self.ns_lock, info.txid,
                                    self.clock_ms, self.tail_period_ms,
                                    in_progress_ok=self.tail_in_progress)
        log.info("loaded image", extra={"path": path, "txid": info.txid, "inodes": len(self.namespace)})
        if self.ha_enabled:
            _local, self.shared_reader = open_journals(self.conf, self.ns_info)
            for j in _local:
                await j.close()
            try:
                await self.tailer.catch_up(self.shared_reader)
            except QJournalError as e:
                log.warning("initial catch-up from the shared journal failed; the tailer retries: %s", e)
            self.state = HAState.STANDBY
            self.tailer.start(self.shared_reader)
        else:
            await self._become_active_non_ha()
        from qjournal.namenode.checkpointer import Checkpointer
        self.checkpointer = Checkpointer(self)
        self.checkpointer.start()
        if serve:
            from qjournal.transport.rpc import RpcServer

            self.rpc_server = RpcServer(self, max_frame_bytes=int(self.conf.get_bytes("ipc.maximum.data.length")),
                                        name=f"namenode-{self.nn_id or 'nn'}")
            if host is None or port is None:
                try:
                    h, p = rpc_address_of(self.conf, self.nn_id)
                except InvalidRequestError:
                    h, p = "127.0.0.1", 0
                bind = self.conf.get("qjournal.namenode.rpc-bind-host")
                host = host if host is not None else (bind or h)
                port = port if port is not None else p
            from qjournal.transport.tls import server_context_from_conf
            # mutual TLS when qjournal.rpc.tls.enabled (None otherwise)
            self.address = await self.rpc_server.start_tcp(host, port, ssl=server_context_from_conf(self.conf))
            return self.address
        return None

    async def _become_active_non_ha(self) -> None:
        local, _ = open_journals(self.conf, self.ns_info)
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
        self.namespace.last_applied_txid = self.editlog.last_written_txid  # type: ignore[union-attr]
        if self.roll_period_ms > 0:
            self._roll_task = asyncio.ensure_future(self._roll_loop())

    async def _roll_loop(self) -> None:
        while self.state == HAState.ACTIVE and self.editlog is not None:
            await asyncio.sleep(self.roll_period_ms / 1000.0)
            el = self.editlog
            if el is None or self.state != HAState.ACTIVE:
                return
            try:
                await el.roll()
            except QJournalError as e:
                log.warning("periodic log roll failed: %s", e)

    async def _stop_roll_loop(self) -> None:
        t, self._roll_task = self._roll_task, None
        await cancel_and_wait(t)

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
        await self._stop_roll_loop()
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
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def _on_fatal(self, e: BaseException) -> None:
        """The required journal failed (fenced, quorum lost): stop serving and exit (never carry on)."""
        if self.fatal_error is not None:
            return
        self.fatal_error = e
        self.state = HAState.STOPPING
        log.critical("journal failure: the NameNode stops serving and exits: %s", e)
        if self.exit_hook is not None:
            self.exit_hook(1)

    # ------------------------------------------------------------- transitions
    def _transition_is_noop(self, target: HAState, request_source: str) -> bool:
        """The checks every HAServiceProtocol transition starts with (under ``_transition_lock``).

        Returns:
            True when the NameNode already is in ``target`` (nothing to do).

        Raises:
            ServiceFailedError: not allowed from this state, manual control refused
                under automatic failover, or HA not enabled.
        """
        if check_transition(self.state, target, request_source,
                            self.automatic_failover) == Transition.NOOP:
            return True
        if not self.ha_enabled:
            raise ServiceFailedError("HA is not enabled (no dfs.namenode.shared.edits.dir)")
        return False

    async def transition_to_active(self, request_source: str = "user") -> None:
        """HAServiceProtocol transitionToActive (module docstring).

        Raises:
            ServiceFailedError: not allowed from this state, manual control
                refused under automatic failover, or fencing / catch-up failed
                (the NameNode then stays standby).
        """
        async with self._transition_lock:
            if self._transition_is_noop(HAState.ACTIVE, request_source):
                return
            assert self.tailer is not None
            await self.tailer.stop()
            t0 = self.clock_ms()
            local, shared = open_journals(self.conf, self.ns_info)
            jset = make_journal_set(local, shared)
            phases: dict[str, int] = {}
            try:
                # fencing: a new epoch on the quorum (or the lock of a shared dir)
                await jset.recover_unfinalized_segments()
                phases["fence_ms"] = self.clock_ms() - t0
                # every remaining edit (all finalized now), from the shared journal
                n = await self.tailer.catch_up(shared)  # type: ignore[arg-type]
                phases["catch_up_ms"] = self.clock_ms() - t0 - phases["fence_ms"]
                phases["catch_up_txns"] = n
                await self._open_editlog(jset)
            except Exception as e:
                log.error("transition to active failed; staying standby: %s", e)
                if self.editlog is not None:
                    await self.editlog.abort()
                    self.editlog = None
                try:
                    await jset.close()
                except QJournalError:
                    pass
                self.journal_set = None
                self.tailer.start(self.shared_reader)  # type: ignore[arg-type]
                if isinstance(e, QJournalError):
                    raise ServiceFailedError(f"{self._where()}: transition to active failed: {e}",
                                             cause=type(e).__name__) from None
                raise
            self.state = HAState.ACTIVE
            self.became_active_at_ms = self.clock_ms()
            #: phase durations of the last transition (fence, catch-up), for operators and the bench
            self.last_transition = dict(phases, took_ms=self.became_active_at_ms - t0)
            log.info("transitioned to active", extra={"txid": self.last_applied_txid, **self.last_transition})

    async def transition_to_standby(self, request_source: str = "user") -> None:
        """HAServiceProtocol transitionToStandby: refuse writes at once, finalize, tail.

        Raises:
            ServiceFailedError: not allowed from this state.
        """
        async with self._transition_lock:
            if self._transition_is_noop(HAState.STANDBY, request_source):
                return
            prev = self.state
            self.state = HAState.STANDBY
            assert self.tailer is not None
            if prev == HAState.ACTIVE:
                await self._stop_roll_loop()
                el, self.editlog = self.editlog, None
                if el is not None:
                    try:
                        await el.close()
                    except QJournalError as e:
                        log.warning("finalizing the segment on transition to standby failed: %s", e)
                    self.tailer.last_applied_txid = el.last_written_txid
                if self.journal_set is not None:
                    try:
                        await self.journal_set.close()
                    except QJournalError as e:
                        log.warning("closing the journals failed: %s", e)
                    self.journal_set = None
            if self.shared_reader is None:
                _l, self.shared_reader = open_journals(self.conf, self.ns_info)
            self.tailer.start(self.shared_reader)  # type: ignore[arg-type]

    # ------------------------------------------------------------ the gate
    def _gate(self, category: OpCategory, method: str) -> None:
        if self.fatal_error is not None:
            raise StandbyError(f"{self._where()} is stopping after a journal failure",
                               state="stopping")
        check_operation(self.state, category, self.allow_stale_reads, method)

    def _ctx(self, user: Any, groups: Any, client_id: Any = b"", call_id: Any = -1) -> CallContext:
        check_name(user, "user")
        if not isinstance(groups, (list, tuple)) or len(groups) > MAX_GROUPS:
            raise InvalidRequestError(f"invalid groups: a list of at most {MAX_GROUPS} names expected")
        for g in groups:
            check_name(g, "group")
        if not isinstance(client_id, bytes) or len(client_id) not in (0, 16):
            raise InvalidRequestError("client_id must be 16 bytes")
        check_int(call_id, "call_id", "call", -(2 ** 63))
        return CallContext(user, tuple(sorted(groups)), client_id or b"\x00" * 16, call_id,
                           self.clock_ms())

    async def _write(self, method: str, user: Any, groups: Any, client_id: Any, call_id: Any,
                     mutation: Callable[[CallContext], list]) -> Any:
        self._gate(OpCategory.WRITE, method)
        ctx = self._ctx(user, groups, client_id, call_id)
        hit, answer = self.retry_cache.lookup(ctx.client_id, ctx.call_id, method, ctx.ts)
        if hit:
            return answer
        key = (ctx.client_id, ctx.call_id)
        cacheable = self.retry_cache.cacheable(*key)
        if cacheable and key in self._inflight:
            return await asyncio.shield(self._inflight[key])
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if cacheable:
            self._inflight[key] = fut
        try:
            el = self.editlog
            if el is None:
                raise StandbyError(f"{self._where()}: not active", state=self.state.value)
            txid, ops = await el.log_edit(lambda: mutation(ctx))
            await el.log_sync(txid)
            if self.fatal_error is not None:  # invariant 1
                raise EditLogFatalError(f"{self._where()}: journal failed: {self.fatal_error}")
            answer = answer_from_ops(method, ops)
            self.retry_cache.record(ctx.client_id, ctx.call_id, method, answer, ctx.ts)
            fut.set_result(answer)
            return answer
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
                fut.exception()  # retrieved: other waiters get it through shield
            raise
        finally:
            if cacheable:
                self._inflight.pop(key, None)

    # ------------------------------------------------------- ClientProtocol
    async def rpc_mkdirs(self, path: str, perm: int = 0o755, create_parent: bool = True,
                         user: str = "", groups: list = (), client_id: bytes = b"", call_id: int = -1) -> bool:
        """mkdir (``create_parent``: -p).

        Returns:
            True.

        Raises:
            FileAlreadyExistsError, FileNotFoundError_, NotADirectoryError_,
            PermissionDeniedError, InvalidRequestError, StandbyError (not active),
            EditLogFatalError (the journal failed: not durable).
        """
        return await self._write("mkdirs", user, groups, client_id, call_id,
                                 lambda ctx: self.namespace.mkdirs(ctx, path, perm, create_parent))

    async def rpc_create(self, path: str, perm: int = 0o644, overwrite: bool = False,
                         replication: int = 3, block_size: int = 134217728, user: str = "",
                         groups: list = (), client_id: bytes = b"", call_id: int = -1) -> dict:
        """Create an empty file.

        Returns:
            Its FileStatus dict.

        Raises:
            as :meth:`rpc_mkdirs`.
        """
        return await self._write("create", user, groups, client_id, call_id,
                                 lambda ctx: self.namespace.create(ctx, path, perm, bool(overwrite),
                                                                   replication, block_size))

    async def rpc_delete(self, path: str, recursive: bool = False, user: str = "", groups: list = (),
                         client_id: bytes = b"", call_id: int = -1) -> bool:
        """Delete a file or (``recursive``) a directory tree.

        Returns:
            True.

        Raises:
            FileNotFoundError_, DirectoryNotEmptyError, PermissionDeniedError,
            StandbyError, EditLogFatalError.
        """
        return await self._write("delete", user, groups, client_id, call_id,
                                 lambda ctx: self.namespace.delete(ctx, path, bool(recursive)))

    async def rpc_rename(self, src: str, dst: str, overwrite: bool = False, user: str = "",
                         groups: list = (), client_id: bytes = b"", call_id: int = -1) -> bool:
        """Rename ``src`` to ``dst`` (into ``dst`` when it is a directory).

        Returns:
            True.

        Raises:
            FileNotFoundError_, FileAlreadyExistsError, InvalidRequestError,
            PermissionDeniedError, StandbyError, EditLogFatalError.
        """
        return await self._write("rename", user, groups, client_id, call_id,
                                 lambda ctx: self.namespace.rename(ctx, src, dst, bool(overwrite)))

    async def rpc_set_permission(self, path: str, perm: int, user: str = "", groups: list = (),
                                 client_id: bytes = b"", call_id: int = -1) -> None:
        """chmod. Returns None. Raises FileNotFoundError_, PermissionDeniedError, StandbyError."""
        return await self._write("set_permission", user, groups, client_id, call_id,
                                 lambda ctx: self.namespace.set_permission(ctx, path, perm))

    async def rpc_set_owner(self, path: str, owner: str | None = None, group: str | None = None,
                            user: str = "", groups: list = (), client_id: bytes = b"",
                            call_id: int = -1) -> None:
        """chown. Returns None. Raises FileNotFoundError_, PermissionDeniedError, StandbyError."""
        return await self._write("set_owner", user, groups, client_id, call_id,
                                 lambda ctx: self.namespace.set_owner(ctx, path, owner, group))

    async def rpc_set_times(self, path: str, mtime: int = -1, atime: int = -1, user: str = "",
                            groups: list = (), client_id: bytes = b"", call_id: int = -1) -> None:
        """Set mtime/atime (-1 = unchanged). Returns None. Raises FileNotFoundError_, PermissionDeniedError."""
        return await self._write("set_times", user, groups, client_id, call_id,
                                 lambda ctx: self.namespace.set_times(ctx, path, mtime, atime))

    async def rpc_set_replication(self, path: str, replication: int, user: str = "",
                                  groups: list = (), client_id: bytes = b"", call_id: int = -1) -> None:
        """setrep on a file. Returns None. Raises FileNotFoundError_, InvalidRequestError, PermissionDeniedError."""
        return await self._write("set_replication", user, groups, client_id, call_id,
                                 lambda ctx: self.namespace.set_replication(ctx, path, replication))

    async def rpc_get_file_info(self, path: str, user: str = "", groups: list = (), **_kw: Any) -> dict | None:
        """stat.

        Returns:
            The FileStatus dict, or None when the path does not exist.

        Raises:
            PermissionDeniedError, StandbyError (standby without stale reads).
        """
        self._gate(OpCategory.READ, "get_file_info")
        return self.namespace.get_file_info(self._ctx(user, groups), path)  # type: ignore[union-attr]

    async def rpc_list_status(self, path: str, user: str = "", groups: list = (), **_kw: Any) -> list:
        """ls. Returns FileStatus dicts sorted by name. Raises FileNotFoundError_, PermissionDeniedError, StandbyError."""
        self._gate(OpCategory.READ, "list_status")
        return self.namespace.list_status(self._ctx(user, groups), path)  # type: ignore[union-attr]

    async def rpc_get_content_summary(self, path: str, user: str = "", groups: list = (),
                                      **_kw: Any) -> dict:
        """du/count. Returns the summary dict. Raises FileNotFoundError_, PermissionDeniedError, StandbyError."""
        self._gate(OpCategory.READ, "get_content_summary")
        return self.namespace.get_content_summary(self._ctx(user, groups), path)  # type: ignore[union-attr]

    # ------------------------------------------------------- HAServiceProtocol
    async def rpc_get_service_status(self) -> dict:
        """HAServiceProtocol getServiceStatus.

        Returns:
            ``{"state", "ready_to_become_active", "not_ready_reason"}``.
        """
        ready, reason = True, ""
        if self.state == HAState.STOPPING:
            ready, reason = False, "the NameNode is stopping"
        elif self.state == HAState.INITIALIZING:
            ready, reason = False, "the NameNode is still loading its namespace"
        elif not self.ha_enabled and self.state != HAState.ACTIVE:
            ready, reason = False, "HA is not enabled"
        elif self.state == HAState.STANDBY and self.tailer is not None and self.tailer.gap:
            ready, reason = False, (f"the shared journal has a gap after txid {self.tailer.last_applied_txid} "
                                    f"(re-run namenode -bootstrapStandby): {self.tailer.last_error}")
        return {"state": self.state.value, "ready_to_become_active": ready, "not_ready_reason": reason}

    async def rpc_monitor_health(self) -> None:
        """Raises HealthCheckFailedError when stopping, failed, or short of space."""
        if self.fatal_error is not None or self.state == HAState.STOPPING:
            raise HealthCheckFailedError(f"{self._where()} is stopping"
                                         + (f" after a journal failure: {self.fatal_error}"
                                            if self.fatal_error else ""))
        dirs = [self.name_dir] + [_uri_to_path(u, "dfs.namenode.edits.dir")
                                  for u in local_edits_uris(self.conf)]
        for d in sorted(set(dirs)):
            try:
                free = shutil.disk_usage(d).free
            except OSError as e:
                raise HealthCheckFailedError(f"NameNode resource check failed: {d}: {e}", path=d) from None
            if self.health_free_bytes_override is not None:
                free = self.health_free_bytes_override
            if free < self.du_reserved_bytes:
                raise HealthCheckFailedError(
                    f"NameNode resource check failed: {d} has {free} bytes available, less than "
                    f"dfs.namenode.resource.du.reserved = {self.du_reserved_bytes}",
                    path=d, free=free, reserved=self.du_reserved_bytes)
        if (self.tailer is not None and self.state == HAState.STANDBY and not self.tailer.running
                and not self._transition_lock.locked()):  # the tailer is stopped during a transition
            raise HealthCheckFailedError(f"{self._where()}: the edit log tailer is not running")
        return None

    async def rpc_transition_to_active(self, request_source: str = "user") -> None:
        """HAServiceProtocol transitionToActive (see :meth:`transition_to_active`).

        Raises:
            ServiceFailedError.
        """
        await self.transition_to_active(request_source)

    async def rpc_transition_to_standby(self, request_source: str = "user") -> None:
        """HAServiceProtocol transitionToStandby (see :meth:`transition_to_standby`).

        Raises:
            ServiceFailedError.
        """
        await self.transition_to_standby(request_source)

    # ---------------------------------------------------------- checkpoints
    async def rpc_upload_image(self, txid: int, data: bytes, crc: bytes) -> None:
        """Checkpoint upload from the standby: verify, store, purge (module docstring)."""
        self._gate(OpCategory.CHECKPOINT, "upload_image")
        if not isinstance(txid, int) or not isinstance(data, bytes) or not isinstance(crc, bytes):
            raise InvalidRequestError("upload_image needs txid (int), data and crc (bytes)")
        await asyncio.to_thread(img.save_image_bytes, self.name_dir, txid, data, crc)
        self.last_checkpoint_txid = max(self.last_checkpoint_txid, txid)
        await self.purge_old_storage()

    async def purge_old_storage(self) -> None:
        """Retention: keep ``num.checkpoints.retained`` images and the edits they and
        ``num.extra.edits.retained`` more txns need."""
        keep = max(1, int(self.conf.get_int("dfs.namenode.num.checkpoints.retained") or 1))
        extra = max(0, int(self.conf.get_int("dfs.namenode.num.extra.edits.retained") or 0))
        await asyncio.to_thread(img.purge_images, self.name_dir, keep)
        images = img.list_images(self.name_dir)
        if not images:
            return
        min_txid = images[0][0] + 1 - extra
        if min_txid > 1 and self.journal_set is not None and self.state == HAState.ACTIVE:
            try:
                await self.journal_set.purge_logs_older_than(min_txid)
            except QJournalError as e:
                log.warning("purging edits older than %d failed: %s", min_txid, e)

    async def rpc_get_namespace_info(self, **_kw: Any) -> dict:
        """Returns this namespace's NamespaceInfo wire dict."""
        return self.ns_info.to_wire()  # type: ignore[union-attr]

    async def rpc_get_image(self) -> dict:
        """The newest image's bytes and ``.crc`` (for ``-bootstrapStandby``)."""
        images = img.list_images(self.name_dir)
        for txid, path in reversed(images):
            try:
                data, crc = await asyncio.to_thread(img.read_image_bytes, path)
            except QJournalError:
                continue
            return {"txid": txid, "data": data, "crc": crc, "ns_info": self.ns_info.to_wire()}  # type: ignore[union-attr]
        raise JournalError(f"{self.name_dir}: no valid image to send")

    async def rpc_roll_edit_log(self, **_kw: Any) -> int | None:
        """Roll the edit log now. Returns the new segment's first txid (None: nothing to roll). Raises StandbyError."""
        self._gate(OpCategory.WRITE, "roll_edit_log")
        return await self.editlog.roll() if self.editlog is not None else None

    async def rpc_get_stats(self, **_kw: Any) -> dict:
        """Returns counters: state, last applied txid, inodes, edit log and retry cache statistics."""
        return {"state": self.state.value, "last_applied_txid": self.last_applied_txid,
                "inodes": len(self.namespace) if self.namespace else 0,
                "editlog": self.editlog.stats() if self.editlog is not None else None,
                "retry_cache_entries": len(self.retry_cache), "retry_cache_hits": self.retry_cache.hits,
                "last_checkpoint_txid": self.last_checkpoint_txid,
                "tailer_last_error": self.tailer.last_error if self.tailer else ""}


async def bootstrap_standby(conf: Configuration, nn_id: str | None, *, force: bool = False) -> int:
    """``namenode -bootstrapStandby``: copy the namespace id and newest image from the other NameNode.

    Returns:
        The txid of the image copied.

    Raises:
        JournalAlreadyFormattedError: this name dir is formatted and not ``force``.
        ServiceFailedError: no other NameNode answered.
    """
    from qjournal.transport.rpc import RpcClient

    name_dir = name_dir_of(conf)
    if read_nn_version(name_dir) is not None and not force:
        from qjournal.errors import JournalAlreadyFormattedError
        raise JournalAlreadyFormattedError(f"{name_dir}: already formatted; use -force", path=name_dir)
    me = nn_id or conf.get("dfs.ha.namenode.id")
    errors = []
    for other in namenode_ids(conf):
        if other == me:
            continue
        try:
            host, port = rpc_address_of(conf, other)
            from qjournal.transport.tls import client_context_from_conf
            c = await RpcClient.connect_tcp(host, port, connect_timeout_ms=5000,
                                            ssl=client_context_from_conf(conf))
            try:
                got = await c.call("get_image", timeout_ms=60000)
            finally:
                await c.close()
        except QJournalError as e:
            errors.append(f"{other}: {e}")
            continue
        ns_info = NamespaceInfo.from_wire(got["ns_info"])
        local, _shared = open_journals(conf, ns_info)
        try:
            for j in local:
                await j.format(ns_info, force=force)
        finally:
            for j in local:
                await j.close()
        write_nn_version(name_dir, ns_info)
        img.save_image_bytes(name_dir, int(got["txid"]), got["data"], got["crc"])
        return int(got["txid"])
    raise ServiceFailedError("bootstrapStandby: no other NameNode answered: " + "; ".join(errors))


async def initialize_shared_edits(conf: Configuration) -> int:
    """``namenode -initializeSharedEdits``: format the shared journal and copy the local edits.

    Returns:
        The number of txns copied.
    """
    name_dir = name_dir_of(conf)
    ns_info = read_nn_version(name_dir)
    if ns_info is None:
        from qjournal.errors import JournalNotFormattedError
        raise JournalNotFormattedError(f"{name_dir}: not formatted", path=name_dir)
    local, shared = open_journals(conf, ns_info)
    if shared is None:
        raise InvalidRequestError("dfs.namenode.shared.edits.dir is not set", key="dfs.namenode.shared.edits.dir")
    images = img.list_images(name_dir)
    since = (images[-1][0] + 1) if images else 1
    copied = 0
    try:
        await shared.format(ns_info, force=True)
        src = make_journal_set(local, None)
        await src.recover_unfinalized_segments()
        for seg in await src.get_manifest(since, False):
            out = await shared.start_log_segment(seg.start_txid)
            stream = await src.open_segment(seg)
            try:
                async for rec in stream:
                    out.write(rec.txid, rec.body, rec.opcode)
                    copied += 1
            finally:
                await stream.close()
            out.mark()
            await out.sync()
            await out.close()
            await shared.finalize_log_segment(seg.start_txid, seg.end_txid)
        await src.close()
    finally:
        await shared.close()
    return copied


__all__ = ["NameNode", "format_namenode", "bootstrap_standby", "initialize_shared_edits",
           "rpc_address_of", "namenode_ids", "nameservice_of", "name_dir_of"]
