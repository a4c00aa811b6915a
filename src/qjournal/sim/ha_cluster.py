"""The whole HA cluster on the virtual-time loop: two NameNodes, two ZKFCs, ZooKeeper, JournalNodes, maybe an observer.

Why: the correctness requirements of the whole cluster (PRODUCT.md 5-8) are about
the real NameNode (namespace, ``FSEditLog`` with group commit, tailer,
checkpointer, retry cache, HA state machine), the real failover controller
(health monitor, elector, fencing) and the real quorum client, meeting crashes,
pauses, expiring sessions and partitions. This module runs exactly that code
in one thread on simulated time, so a whole run replays from its seed.

What is real and what is simulated:

* Real: ``NameNode`` (:mod:`qjournal.namenode.daemon`), ``ZKFailoverController``,
  ``QuorumJournalManager``, ``DFSClient`` with its failover and retries, the
  RPC layer over the in-memory network, the JournalNodes' ``Journal`` rules
  (:mod:`qjournal.sim.journalnodes`).
* Simulated: ZooKeeper (:mod:`qjournal.sim.zookeeper`), the JournalNodes' disks,
  the network's faults, time, and the processes (:class:`SimProcess`: a
  NameNode, a ZKFC can be paused like SIGSTOP and killed like SIGKILL). The
  NameNodes' name and edits directories are real directories of the run's
  work dir (image writes are synchronous on this loop); the machines never lose their
  page cache (a process is killed, never a machine), so the local edits' fsyncs
  and fdatasyncs are not made (:class:`PageCacheDisk`: they cost a tenth of a
  seed's wall time and nothing here can observe them). Fencing methods act on
  simulated processes: ``pidfence`` kills the old active's process, ``shell``
  (``/bin/true``) succeeds and stops nothing, so the journal's epochs are the
  last guard. A supervisor (systemd's ``Restart=always``) restarts a daemon that
  exits by itself (a NameNode fenced off its journal, a failed ZKFC) after
  ``RESTART_DELAY_S``; processes the fault model kills are restarted by it.

Observer (HDFS-12943, ``observer=True``): a third NameNode ``nn3``, bootstrapped
as nn2 is (a copy of nn1's image, formatted local edits), started as a standby and
made an observer by a supervisor (an operator's ``haadmin -transitionToObserver``
over RPC, as the local cluster launcher does after every start) once an active
exists, and again after every restart (a restarted NameNode comes back standby).
It has no ZKFC: observers stay out of elections. Clients are then configured with
the ``ObserverReadProxyProvider`` and all three NameNodes, so their reads go to the
observer (which waits at most ``dfs.namenode.observer.read.wait.ms`` for its
tailer, then sends them to the active) and their writes to the active; with
``msync_each_read`` every read first asks the active for its state id
(``auto-msync-period`` 0: reads linearizable), else only the client's own state id
binds the observer (read-your-writes and monotonic reads).

Network names: a NameNode serves at ``nn1:8020`` and connects as ``nn1``; its
controller connects as ``zkfc-nn1`` (to ZooKeeper under the same name); the
JournalNodes are ``jn<i>:8485``; clients are ``c<i>``; the observer's supervisor
is ``haadmin``.

Invariants:

1. A killed process runs no more code (the loop drops its callbacks); a
   restarted NameNode is a new object loaded from its directories.
2. Everything is ordered by the loop and drawn from the loop's ``rng``.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

from qjournal.config import Configuration
from qjournal.errors import QJournalError, TransportError
from qjournal.ha.fencing import FenceMethod, FencingSettings, HATarget
from qjournal.ha.zkfc import ZKFailoverController, ZKFCSettings
from qjournal.journalmanager.base import JournalManager
from qjournal.journalmanager.file import DiskIO, FileJournal
from qjournal.namenode.journal_registry import open_journal
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.dfs_client import OBSERVER_READ_PROXY_PROVIDER, DFSClient
from qjournal.namenode.format import format_namenode
from qjournal.namenode.ha_state import HAState
from qjournal.sim.faults import FaultConfig
from qjournal.sim.history import History, NameNodeAck
from qjournal.sim.journalnodes import NS_INFO, SimCluster
from qjournal.sim.loop import CURRENT_PROCESS, ProcessKilled, SimProcess, join_process_task, run_in_process
from qjournal.sim.zookeeper import SimZooKeeper
from qjournal.transport import RpcClient, memory_connector
from qjournal.protocol.protocols import CLIENT, HA_SERVICE

__all__ = ["SimHACluster", "NameNodeHost", "ClusterTimeouts", "StartFailed", "NAMESERVICE", "NN_IDS",
           "OBSERVER_ID", "WRITE_METHODS"]

log = logging.getLogger(__name__)

NAMESERVICE = "ns1"
#: the NameNodes in the election (each with a ZKFC)
NN_IDS = ("nn1", "nn2")
#: the observer NameNode of a run with one (no ZKFC)
OBSERVER_ID = "nn3"
NN_PORT = 8020
#: the supervisor's delay before restarting a daemon that exited by itself
RESTART_DELAY_S = 2.0
#: how often the observer's supervisor looks whether nn3 must be made an observer again
OBSERVER_SUPERVISOR_S = 0.5
#: after a probe found no observer, clients read from the active this long before probing again
OBSERVER_PROBE_RETRY = "2s"
#: the ClientProtocol writes whose answers are recorded as ``NameNodeAck``
WRITE_METHODS = (CLIENT.mkdirs, CLIENT.create, CLIENT.delete, CLIENT.rename)


@dataclass(frozen=True)
class ClusterTimeouts:
    """The failover-relevant timeouts of a simulated cluster (all in ms), and the liveness bound.

    The bound (docs/failover.md derives it) is the longest a healthy cluster may take,
    after every fault healed, to have an active NameNode that acknowledges a write.
    """

    session_timeout_ms: int = 2000
    health_check_interval_ms: int = 500
    health_rpc_timeout_ms: int = 1000
    connect_retry_ms: int = 500
    sleep_after_failure_ms: int = 500
    graceful_fence_ms: int = 1000
    new_active_timeout_ms: int = 30000
    qjm_recovery_ms: int = 40000          # new_epoch + prepare + accept + finalize timeouts (sim_settings)
    tail_period_ms: int = 500
    client_sleep_max_ms: int = 500
    client_rpc_timeout_ms: int = 5000

    def liveness_bound_s(self) -> float:
        """Seconds from "every fault healed" to a write acknowledged by an active NameNode.

        1. A controller whose session died with a paused or partitioned process learns it
           and opens a new one: at most the session timeout, plus a reconnect round.
        2. The old lock expires with the old session: at most one more session timeout.
        3. The health monitors see their NameNodes: a check interval plus an RPC timeout,
           twice (a NameNode restarting answers the second probe).
        4. A failed attempt backs off ``sleep_after_failure`` and fences gracefully within
           ``graceful_fence`` (a method after it returns at once in the simulation).
        5. The winner's transition: quorum recovery (``qjm_recovery``), bounded by the
           new-active timeout, and the catch-up of the remaining edits.
        6. A client in back-off retries within its longest sleep, then its call's deadline.

        Steps 1-2 and 3 overlap in reality; the bound adds them, and allows one failed
        attempt (steps 4-5 twice) before the winning one.
        """
        t = self
        ms = (2 * t.session_timeout_ms + t.connect_retry_ms
              + 2 * (t.health_check_interval_ms + t.health_rpc_timeout_ms)
              + 2 * (t.sleep_after_failure_ms + t.graceful_fence_ms + min(t.qjm_recovery_ms,
                                                                            t.new_active_timeout_ms))
              + t.tail_period_ms + t.client_sleep_max_ms + t.client_rpc_timeout_ms)
        return ms / 1000.0


class StartFailed(QJournalError):
    """A simulated process did not start (its error, or it was killed while starting)."""


class _Unreachable:
    """A ZKFC-to-ZKFC proxy factory for a simulation without ZKFC RPC (no operator failover)."""

    def __init__(self, target: HATarget) -> None:
        self.target = target

    async def __call__(self) -> Any:
        raise TransportError(f"ZKFC RPC of {self.target.nn_id} is not simulated")


class PageCacheDisk(DiskIO):
    """A NameNode machine's disk for the local edits: writes, preallocation as the real one, no sync (module
    docstring: no machine of the simulation loses its page cache, so a sync makes nothing observable), except
    the fsync or fdatasync a fault armed (:meth:`fail`), which fails with EIO as libfiu's does on hosts."""

    def __init__(self) -> None:
        #: countdowns of the armed failures (one fires at 0)
        self.armed: list[int] = []
        self.failed = 0

    def fail(self, after: int = 0) -> None:
        """Fail the ``after``-th next fsync or fdatasync (0 = the next one) with EIO."""
        self.armed.append(after)

    def _sync(self, call: str) -> None:
        if not self.armed:
            return
        if 0 in self.armed:
            self.armed.remove(0)
            self.failed += 1
            raise OSError(errno.EIO, f"{os.strerror(errno.EIO)} ({call}: nn_fsync_eio)")
        self.armed = [n - 1 for n in self.armed]

    def fdatasync(self, fd: int) -> None:
        self._sync("fdatasync")

    def fsync(self, fd: int) -> None:
        self._sync("fsync")


class NameNodeHost:
    """One NameNode machine: the NameNode process and its failover controller process.

    Args:
        cluster: the whole cluster.
        nn_id: ``nn1`` or ``nn2`` (with a ZKFC), or ``nn3`` (the observer, without).
    """

    def __init__(self, cluster: "SimHACluster", nn_id: str) -> None:
        self.cluster = cluster
        self.nn_id = nn_id
        self.dir = os.path.join(cluster.workdir, nn_id)
        self.conf = cluster.nn_conf(nn_id)
        self.nn: NameNode | None = None
        self.nn_proc: SimProcess | None = None
        self.zkfc: ZKFailoverController | None = None
        self.zkfc_proc: SimProcess | None = None
        self.nn_incarnation = 0
        self.zkfc_incarnation = 0
        #: the disk of the edits directory is full (the NameNode's resource check fails)
        self.disk_full = False
        #: the disk of the local edits (its syncs fail when a fault armed them)
        self.disk = PageCacheDisk()
        #: this machine's wall clock minus the true time (issue 28: wall-clock jumps); the monotonic
        #: clock of its processes is the loop's own
        self.wall_offset_ms = 0

    @property
    def address(self) -> str:
        return f"{self.nn_id}:{NN_PORT}"

    # -- the NameNode process ----------------------------------------------------------------
    @property
    def nn_running(self) -> bool:
        return self.nn_proc is not None and not self.nn_proc.killed

    async def start_nn(self) -> None:
        """Start (or restart) the NameNode from its directories: it comes up as standby."""
        assert not self.nn_running, f"{self.nn_id} is running"
        self.nn_incarnation += 1
        self.nn_proc = proc = SimProcess(f"{self.nn_id}#{self.nn_incarnation}")
        cl = self.cluster
        loop = asyncio.get_running_loop()
        nn = NameNode(self.conf, self.nn_id, clock_ms=lambda: int(loop.time() * 1000) + self.wall_offset_ms,
                      monotonic_ms=lambda: int(loop.time() * 1000),
                      exit_hook=lambda status, p=proc: self._nn_exits(p, status),
                      journal_opener=self._open_journal,
                      connect=memory_connector(cl.network, self.nn_id, connect_timeout_ms=2000))
        self._record_acks(nn)
        nn.ha_service.health_free_bytes_override = 0 if self.disk_full else None
        self.nn = nn

        async def boot() -> None:
            await nn.start(host=self.nn_id, port=NN_PORT, network=cl.network)
        try:
            await join_process_task(proc, run_in_process(proc, boot(), name=f"{proc.name}-boot"))
        except (QJournalError, OSError, ProcessKilled) as e:
            log.info("%s: start failed: %s", self.nn_id, e)
            self.kill_nn("start failed")
            raise StartFailed(f"{proc.name} did not start: {e}") from e

    def _open_journal(self, uri: str, conf: Any) -> JournalManager:
        if uri.startswith("qjournal://"):
            return self.cluster.jns.new_qjm(f"{self.nn_id}")
        journal = open_journal(uri, conf)
        if isinstance(journal, FileJournal):
            journal.disk = self.disk
        return journal

    def _record_acks(self, nn: NameNode) -> None:
        """Record every write answer the NameNode sends, with its writer epoch (``NameNodeAck``)."""
        cp = nn.client_protocol
        history = self.cluster.history
        names = self.cluster.client_names

        for method in WRITE_METHODS:
            inner = getattr(cp, f"rpc_{method}")

            async def wrapped(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
                result = await _inner(*args, **kwargs)
                client = names.get(bytes(kwargs.get("client_id") or b""), "?")
                el = nn.editlog
                history.add(NameNodeAck(self.nn_id, self.writer_epoch(nn), client, int(kwargs.get("call_id", -1)),
                                        el.synced_txid if el is not None else -1))
                return result
            setattr(cp, f"rpc_{method}", wrapped)

    @staticmethod
    def writer_epoch(nn: NameNode) -> int:
        """The epoch of the NameNode's quorum writer (0 when it has none)."""
        jset = nn.journal_set
        for member in getattr(jset, "members", None) or []:
            epoch = getattr(member.journal, "epoch", None)
            if isinstance(epoch, int):
                return epoch
        return 0

    def _nn_exits(self, proc: SimProcess, status: int) -> None:
        """The NameNode's exit hook (fenced, journal failure): the process ends; the supervisor
        restarts it."""
        log.info("%s exits with status %d", proc.name, status)
        self.cluster.count(f"nn_exit:{status}")
        self.kill_nn(f"exit {status}")
        self.cluster.supervise(self.restart_nn)

    async def restart_nn(self) -> bool:
        """Start the NameNode unless it runs. Returns False when the start failed."""
        if self.nn_running:
            return True
        try:
            await self.start_nn()
        except StartFailed:
            return False
        self.cluster.count("nn_restarts")
        return True

    async def restart_zkfc(self) -> bool:
        """Start the ZKFC unless it runs. Returns False when the start failed."""
        if self.zkfc_running:
            return True
        try:
            await self.start_zkfc()
        except StartFailed:
            return False
        self.cluster.count("zkfc_restarts")
        return True

    async def _watch_zkfc(self, z: ZKFailoverController, proc: SimProcess) -> None:
        """The ZKFC daemon exits non-zero when its controller fails; the supervisor restarts it."""
        await z.failed.wait()
        if self.zkfc_proc is proc and not proc.killed:
            self.cluster.count("zkfc_exit:3")
            self.kill_zkfc()
            self.cluster.supervise(self.restart_zkfc)

    def kill_nn(self, why: str) -> None:
        """SIGKILL of the NameNode: its process stops, its connections reset."""
        p = self.nn_proc
        if p is None or p.killed:
            return
        p.kill()
        self.cluster.network.crash(self.address)   # its server side
        self.cluster.network.crash(self.nn_id)     # its client side (to the JournalNodes, the other NameNode)
        self.nn = None

    def pause_nn(self) -> None:
        if self.nn_running:
            self.nn_proc.pause()

    def resume_nn(self) -> None:
        if self.nn_proc is not None and self.nn_proc.paused:
            self.nn_proc.resume()

    @property
    def nn_healthy(self) -> bool:
        """The NameNode's real health: running, serving in an HA state, its disk not full."""
        nn = self.nn
        return (self.nn_running and not self.nn_proc.paused and not self.disk_full and nn is not None
                and nn.fatal_error is None and nn.rpc_server is not None
                and nn.state in (HAState.STANDBY, HAState.ACTIVE))

    @property
    def in_election(self) -> bool:
        z = self.zkfc
        return (self.zkfc_running and z is not None and z.elector is not None
                and z.elector.state.value in ("ACTIVE", "STANDBY"))

    def set_disk_full(self, full: bool) -> None:
        self.disk_full = full
        if self.nn is not None:
            self.nn.ha_service.health_free_bytes_override = 0 if full else None

    # -- the ZKFC process ------------------------------------------------------------------------
    @property
    def zkfc_running(self) -> bool:
        return self.zkfc_proc is not None and not self.zkfc_proc.killed

    async def start_zkfc(self) -> None:
        assert not self.zkfc_running, f"zkfc-{self.nn_id} is running"
        cl = self.cluster
        self.zkfc_incarnation += 1
        self.zkfc_proc = proc = SimProcess(f"zkfc-{self.nn_id}#{self.zkfc_incarnation}")
        settings = ZKFCSettings.from_conf(self.conf, self.nn_id, NAMESERVICE)
        me = f"zkfc-{self.nn_id}"

        def nn_proxy(host: str, port: int):
            async def connect() -> RpcClient:
                return await RpcClient.connect_memory(cl.network, f"{host}:{port}", src=me,
                                                      connect_timeout_ms=settings.connect_timeout_ms)
            return connect

        z = ZKFailoverController(settings, proxy_factory=nn_proxy(self.nn_id, NN_PORT),
                                 target_proxy_factory=lambda t: nn_proxy(t.host, t.port),
                                 zkfc_client_factory=_Unreachable,
                                 zk_factory=lambda s: cl.zk.client(me, s),
                                 wall_clock=lambda: asyncio.get_running_loop().time() + self.wall_offset_ms / 1000,
                                 fence_method_runner=cl.fence)
        self.zkfc = z
        try:
            await join_process_task(proc, run_in_process(proc, z.start(serve_rpc=False), name=f"{proc.name}-start"))
        except (QJournalError, ProcessKilled) as e:
            self.kill_zkfc()
            raise StartFailed(f"{proc.name} did not start: {e}") from e
        self.cluster.background(self._watch_zkfc(z, proc))

    def kill_zkfc(self) -> None:
        p = self.zkfc_proc
        if p is None or p.killed:
            return
        p.kill()
        if self.zkfc is not None and self.zkfc.elector is not None and self.zkfc.elector.zk is not None:
            self.zkfc.elector.zk.kill()   # no more pings: the session expires on the server
        self.cluster.network.crash(f"zkfc-{self.nn_id}")

    def pause_zkfc(self) -> None:
        if self.zkfc_running:
            self.zkfc_proc.pause()

    def resume_zkfc(self) -> None:
        if self.zkfc_proc is not None and self.zkfc_proc.paused:
            self.zkfc_proc.resume()


class SimHACluster:
    """The whole cluster of one simulated run (module docstring).

    Args:
        rng: the loop's random generator.
        history: where observations go.
        workdir: a fresh directory for the NameNodes' name and edits directories.
        faults: the JournalNodes' network and disk fault configuration.
        timeouts: the failover timeouts.
        fencing: ``pidfence`` or ``shell`` (what the controllers' fencing method does).
        observer: run the observer ``nn3`` (module docstring).
        observer_read_wait_ms: the observer's ``dfs.namenode.observer.read.wait.ms``.
        msync_each_read: clients msync before every read (``auto-msync-period`` 0).
    """

    def __init__(self, rng: Any, history: History, workdir: str, faults: FaultConfig,
                 timeouts: ClusterTimeouts = ClusterTimeouts(), fencing: str = "pidfence",
                 observer: bool = False, observer_read_wait_ms: int = 300, msync_each_read: bool = False) -> None:
        self.rng = rng
        self.history = history
        self.workdir = workdir
        self.timeouts = timeouts
        self.fencing = fencing
        self.observer = observer
        self.observer_read_wait_ms = observer_read_wait_ms
        self.msync_each_read = msync_each_read
        #: every NameNode of the run: the election's, then the observer
        self.nn_ids: tuple[str, ...] = NN_IDS + ((OBSERVER_ID,) if observer else ())
        self.jns = SimCluster(rng, history, 3, faults)
        self.network = self.jns.network
        self.zk = SimZooKeeper(rng)
        self.zk_cut: set[str] = set()
        self.zk.reachable = lambda name: name not in self.zk_cut
        self.client_names: dict[bytes, str] = {}
        self.counts: dict[str, int] = {}
        self.hosts = {nn: NameNodeHost(self, nn) for nn in self.nn_ids}
        self._partitions: set[tuple[str, str]] = set()
        self._tasks: list[asyncio.Task] = []

    def background(self, coro: Any) -> None:
        """A task of the simulator itself (never paused or killed, even when a dying process asks
        for it), cancelled at :meth:`stop`."""
        ctx = contextvars.copy_context()
        ctx.run(CURRENT_PROCESS.set, None)
        self._tasks.append(asyncio.get_running_loop().create_task(coro, context=ctx))

    def supervise(self, restart: Any) -> None:
        """Restart a daemon after ``RESTART_DELAY_S``, retrying until it runs (``restart()`` -> bool)."""
        async def again() -> None:
            while True:
                await asyncio.sleep(RESTART_DELAY_S)
                if await restart():
                    return
        self.background(again())

    # -- configuration -------------------------------------------------------------------------
    def base_conf(self) -> dict[str, str]:
        t = self.timeouts
        values = {
            "dfs.nameservices": NAMESERVICE,
            f"dfs.ha.namenodes.{NAMESERVICE}": ",".join(self.nn_ids),
            "dfs.namenode.shared.edits.dir": self.jns.uri,
            "dfs.ha.automatic-failover.enabled": "true",
            "dfs.ha.fencing.methods": "pidfence(/sim)" if self.fencing == "pidfence" else "shell(/bin/true)",
            "dfs.ha.tail-edits.period": f"{t.tail_period_ms}ms",
            "dfs.ha.tail-edits.in-progress": "true",
            "dfs.ha.log-roll.period": "20s",
            "dfs.namenode.checkpoint.check.period": "30s",
            "dfs.namenode.checkpoint.txns": "200",
            "ha.zookeeper.quorum": "zk:2181",
            "ha.zookeeper.session-timeout.ms": str(t.session_timeout_ms),
            "ha.health-monitor.check-interval.ms": str(t.health_check_interval_ms),
            "ha.health-monitor.rpc-timeout.ms": str(t.health_rpc_timeout_ms),
            "ha.health-monitor.connect-retry-interval.ms": str(t.connect_retry_ms),
            "ha.health-monitor.sleep-after-disconnect.ms": str(t.connect_retry_ms),
            "ha.failover-controller.graceful-fence.rpc-timeout.ms": str(t.graceful_fence_ms),
            "ha.failover-controller.sleep-after-failure-to-become-active.ms": str(t.sleep_after_failure_ms),
            "ha.failover-controller.new-active.rpc-timeout.ms": str(t.new_active_timeout_ms),
            "dfs.client.failover.sleep.base.millis": "50",
            "dfs.client.failover.sleep.max.millis": str(t.client_sleep_max_ms),
            "dfs.client.failover.max.attempts": "20",
            "ipc.client.connect.timeout": "1000",
            "qjournal.client.rpc-timeout.ms": str(t.client_rpc_timeout_ms),
            "qjournal.file-journal.lock.enabled": "false",   # one OS process plays both NameNodes
        }
        for nn in self.nn_ids:
            values[f"dfs.namenode.rpc-address.{NAMESERVICE}.{nn}"] = f"{nn}:{NN_PORT}"
        if self.observer:
            values[f"dfs.client.failover.proxy.provider.{NAMESERVICE}"] = OBSERVER_READ_PROXY_PROVIDER
            values["dfs.namenode.observer.read.wait.ms"] = f"{self.observer_read_wait_ms}ms"
            values["dfs.client.failover.observer.probe.retry.period"] = OBSERVER_PROBE_RETRY
            if self.msync_each_read:
                values[f"dfs.client.failover.observer.auto-msync-period.{NAMESERVICE}"] = "0ms"
        return values

    def nn_conf(self, nn_id: str) -> Configuration:
        conf = Configuration()
        d = os.path.join(self.workdir, nn_id)
        values = dict(self.base_conf(), **{"dfs.namenode.name.dir": f"file://{d}/name",
                                           "dfs.namenode.edits.dir": f"file://{d}/edits",
                                           "dfs.ha.namenode.id": nn_id})
        for k, v in sorted(values.items()):
            conf.set(k, v)
        return conf

    def client_conf(self) -> Configuration:
        conf = Configuration()
        for k, v in sorted(self.base_conf().items()):
            conf.set(k, v)
        return conf

    # -- set-up --------------------------------------------------------------------------------
    async def start(self) -> None:
        """JournalNodes, ``namenode -format`` (nn1), a bootstrapped nn2 (and observer), ZooKeeper, both
        pairs, the observer and its supervisor."""
        await self.jns.start()
        h1 = self.hosts["nn1"]
        loop = asyncio.get_running_loop()
        await format_namenode(h1.conf, cluster_id=NS_INFO.cluster_id, namespace_id=NS_INFO.namespace_id,
                              opener=h1._open_journal, now_ms=int(loop.time() * 1000))
        # -bootstrapStandby: nn2 (and the observer) start from nn1's image and namespace id, with
        # formatted local edits
        for nn in self.nn_ids[1:]:
            h = self.hosts[nn]
            shutil.copytree(os.path.join(h1.dir, "name"), os.path.join(h.dir, "name"))
            edits = open_journal(f"file://{h.dir}/edits", h.conf)
            await edits.format(NS_INFO)
            await edits.close()
        self.zk.start()
        self.zk.ensure_path(f"/hadoop-ha/{NAMESERVICE}")
        for nn in self.nn_ids:
            await self.hosts[nn].start_nn()
        for nn in NN_IDS:
            await self.hosts[nn].start_zkfc()
        if self.observer:
            self.background(self._observer_supervisor())

    async def _observer_supervisor(self) -> None:
        """Make ``nn3`` an observer whenever it runs as a standby and an active exists (module docstring):
        ``haadmin -transitionToObserver nn3``, over the network like the operator's."""
        h = self.hosts[OBSERVER_ID]
        while True:
            await asyncio.sleep(OBSERVER_SUPERVISOR_S)
            nn = h.nn
            if (not h.nn_running or h.nn_proc.paused or nn is None or nn.rpc_server is None
                    or nn.state != HAState.STANDBY or self.active() is None):
                continue
            try:
                c = await RpcClient.connect_memory(self.network, h.address, src="haadmin", connect_timeout_ms=1000)
                try:
                    await c.call(HA_SERVICE.transition_to_observer, timeout_ms=self.timeouts.client_rpc_timeout_ms,
                                 request_source="user")
                finally:
                    await c.close()
            except (QJournalError, OSError) as e:
                log.info("%s: transition to observer failed: %s", OBSERVER_ID, e)
                self.count("observer_transition_failed")
                continue
            self.count("observer_transitions")

    def new_client(self, name: str) -> DFSClient:
        client_id = name.encode().ljust(16, b"\0")[:16]
        self.client_names[client_id] = name
        loop = asyncio.get_running_loop()
        return DFSClient(self.client_conf(), nameservice=NAMESERVICE, user="root", groups=["supergroup"],
                         connect=memory_connector(self.network, name, connect_timeout_ms=1000),
                         client_id=client_id, clock_ms=lambda: int(loop.time() * 1000))

    # -- fencing -------------------------------------------------------------------------------
    async def fence(self, method: FenceMethod, target: HATarget, settings: FencingSettings) -> str | None:
        """A configured fencing method on simulated processes (module docstring)."""
        if method.name == "pidfence":
            host = self.hosts.get(target.nn_id)
            if host is not None:
                host.kill_nn("fenced by pidfence")
            self.count("fenced_by_pidfence")
        return None

    # -- faults --------------------------------------------------------------------------------
    def partition(self, a: str, b: str) -> None:
        self._partitions.add((a, b))
        self.network.partition(a, b)

    def heal_partitions(self) -> None:
        self._partitions.clear()
        self.network.heal()

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def active(self) -> str | None:
        """The NameNode in the active state (the first, if a split brain shows two)."""
        for nn in NN_IDS:
            h = self.hosts[nn]
            if h.nn_running and h.nn is not None and h.nn.state == HAState.ACTIVE and not h.nn_proc.paused:
                return nn
        return None

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for nn in self.nn_ids:
            h = self.hosts[nn]
            h.kill_zkfc()
            h.kill_nn("end of run")
        await self.zk.stop()
        await self.jns.stop()
