"""Whole-cluster chaos: the real HA cluster's processes under a seeded fault schedule, judged by the checker.

Why, next to the whole-cluster simulator (:mod:`qjournal.sim.ha_workload`): the simulator runs
the real code on a virtual world; this harness runs the shipped daemons as real processes
(``qjournal zookeeper``' ZooKeeper, ``journalnode``, ``namenode``, ``zkfc``, from the local
cluster launcher) on real sockets, files and signals: what the simulation abstracts away (kazoo's
threads, process start-up, real fsync, a real full disk) is exercised here. The history it records
is judged by :func:`qjournal.sim.checker.check` and searched for a linearization
(:mod:`qjournal.sim.linearizability`); the rules that need the
NameNodes' and JournalNodes' side of the wire (``ack_not_durable``, the journal checker) and the
standby's namespace (``standby_diverged``) are the simulator's alone.

Set-up: a :class:`~qjournal.localcluster.launcher.LocalCluster` (ZooKeeper, three JournalNodes,
two NameNodes, two ZKFCs) with short failover timeouts; ``nn1``'s edits directory on a small
tmpfs when running as root (the "disk full" fault; skipped and reported otherwise). Two clients
(:class:`~qjournal.sim.ha_workload.NamespaceClient`, the simulator's own workload) run in this
process over TCP with Hadoop's failover proxy behaviour (``DFSClient``).

Fault schedule (seeded ``random.Random``; one action every 0.5-2.5 s): SIGKILL of a NameNode, a
ZKFC or a JournalNode (restarted 1-6 s later); SIGSTOP of a NameNode, a ZKFC, both of one host, or
a JournalNode (SIGCONT 0.5-8 s later); a ZooKeeper restart; disk full / free on ``nn1``. A
supervisor restarts any daemon that exited by itself (a fenced NameNode, a failed ZKFC) after 2 s,
as systemd's ``Restart=always`` would.

End: heal everything (SIGCONT, restart, free the disk), record ``Healed`` with the liveness bound
of the configured timeouts, write until an active NameNode acknowledges (``Progress``), stop the
clients, roll the active's log, read the whole namespace from the active, and record each
controller's state with its NameNode's own health.

Invariants:

1. Bounded: every wait has a deadline; the run stops by itself after ``duration_s`` plus a
   bounded end phase.
2. Clean: every process is stopped and the tmpfs unmounted, in ``finally`` (also on Ctrl-C).
3. One start at a time per daemon: a restart in flight is never doubled (two processes of one
   daemon would outlive the cluster's record of one pid), and the teardown waits for every
   start in flight before stopping the cluster.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from qjournal.chaos.disk import SmallDisk
from qjournal.chaos.driver import ChaosProfile, ChaosResult, ChaosSession, run_session
from qjournal.config import Configuration
from qjournal.errors import QJournalError
from qjournal.localcluster.launcher import ClusterError, LocalCluster
from qjournal.namenode.dfs_client import DFSClient
from qjournal.sim.ha_cluster import ClusterTimeouts
from qjournal.sim.ha_workload import NamespaceClient, namespace_paths
from qjournal.sim.history import ControllerState, Healed, NamespaceState, NsRead, OpAcked, OpFailed, Progress
from qjournal.transport import RpcClient
from qjournal.transport.tls import client_context_from_conf
from qjournal.protocol.protocols import CLIENT, DFSADMIN, HA_SERVICE

__all__ = ["run_cluster_chaos", "CHAOS_TIMEOUTS", "PROFILE"]

NN_IDS = ("nn1", "nn2")
JN_IDS = ("jn1", "jn2", "jn3")
#: the failover timeouts of the chaos cluster (short, so a session sees many failovers)
CHAOS_TIMEOUTS = ClusterTimeouts(session_timeout_ms=2000, health_check_interval_ms=500,
                                 health_rpc_timeout_ms=2000, connect_retry_ms=500, sleep_after_failure_ms=500,
                                 graceful_fence_ms=1000, new_active_timeout_ms=30000, qjm_recovery_ms=20000,
                                 tail_period_ms=1000, client_sleep_max_ms=200, client_rpc_timeout_ms=10000)
#: the cluster's configuration beyond the launcher's
CHAOS_CONF = {
    "dfs.qjournal.write-txns.timeout.ms": "3000",
    "dfs.qjournal.start-segment.timeout.ms": "3000",
    "dfs.qjournal.new-epoch.timeout.ms": "5000",
    "dfs.qjournal.prepare-recovery.timeout.ms": "5000",
    "dfs.qjournal.accept-recovery.timeout.ms": "5000",
    "dfs.qjournal.finalize-segment.timeout.ms": "5000",
    "dfs.qjournal.get-journal-state.timeout.ms": "5000",
    "dfs.qjournal.select-input-streams.timeout.ms": "5000",
    "ha.health-monitor.rpc-timeout.ms": str(CHAOS_TIMEOUTS.health_rpc_timeout_ms),
    "ha.failover-controller.new-active.rpc-timeout.ms": str(CHAOS_TIMEOUTS.new_active_timeout_ms),
    "qjournal.client.rpc-timeout.ms": str(CHAOS_TIMEOUTS.client_rpc_timeout_ms),
    "dfs.namenode.resource.du.reserved": str(1 << 20),   # the tmpfs is 8 MiB; a ballast leaves 4 KiB
    "dfs.ha.log-roll.period": "20s",
}
RESTART_DELAY_S = 2.0
TMPFS_BYTES = 8 * 1024 * 1024
#: the whole cluster's fault schedule (module docstring): kinds by weight, a step every 0.5-2.5 s; the
#: linearizability search may take 120 s of wall time over a session's history (past it: undecided)
PROFILE = ChaosProfile(
    label="cluster chaos", workdir_prefix="qjournal-cluster-chaos-", step_s=(0.5, 2.5), check_budget_s=120.0,
    weights=(("nn_kill", 1.0), ("zkfc_kill", 0.6), ("jn_kill", 0.5), ("nn_stop", 1.0), ("zkfc_stop", 0.7),
             ("pair_stop", 0.7), ("jn_stop", 0.5), ("zk_restart", 0.4), ("disk_full", 0.4), ("disk_free", 0.6),
             ("nothing", 0.6)))


class _ClusterChaos(ChaosSession):
    PROFILE = PROFILE

    def __init__(self, seed: int, duration_s: float, workdir: str, secure: bool = False) -> None:
        super().__init__(seed, duration_s, workdir)
        #: ``--secure``: the launcher's secure cluster; clients and probes present the administrator's certificate
        self.secure = secure
        #: who the end phase's dfsadmin calls (roll_edits, get_report) act as: the superuser; on a secure
        #: cluster the administrator's certificate says who it is
        self.admin: dict[str, Any] = {} if secure else {"user": "root", "groups": ["supergroup"]}
        self.cluster: LocalCluster | None = None
        self.disk: SmallDisk | None = None
        self.clients: list[NamespaceClient] = []
        self.recent_paths: list[str] = []
        self.stopped: set[str] = set()      # SIGSTOPped now
        self.down: set[str] = set()         # killed by a fault, a restart is scheduled
        self.conf: Configuration | None = None
        self.ssl: Any = None
        self.starting: dict[str, asyncio.Future] = {}   # daemon -> its start in flight (invariant 3)
        self.supervisor: asyncio.Task | None = None

    def figures(self) -> dict[str, Any]:
        h = self.history
        return {"acked_ops": len(h.of(OpAcked)), "failed_ops": len(h.of(OpFailed)), "reads": len(h.of(NsRead))}

    # -- processes -------------------------------------------------------------------------------
    def alive(self, name: str) -> bool:
        assert self.cluster is not None
        rec = self.cluster.procs[name]
        return rec.alive()

    def signal(self, name: str, sig: int) -> None:
        assert self.cluster is not None
        self.cluster.kill(name, sig)

    async def restart(self, name: str) -> None:
        assert self.cluster is not None
        if name in self.starting:      # invariant 3
            return
        self.stopped.discard(name)
        start = asyncio.ensure_future(asyncio.to_thread(self.cluster.restart, name, 60.0))
        self.starting[name] = start
        try:
            await asyncio.shield(start)
            self.down.discard(name)
            self.stat(f"restart:{name[:-1]}")
        except (ClusterError, QJournalError, OSError) as e:
            self.stat("restart_failed")
            self.notes.append(f"restart of {name} failed ({str(e)[:200]}); retried")
            self.down.add(name)
            self.later(RESTART_DELAY_S, lambda: self.restart(name))
        finally:
            if start.done():
                self.starting.pop(name, None)
            else:
                start.add_done_callback(lambda _f, n=name: self.starting.pop(n, None))

    def cont(self, name: str) -> None:
        if name in self.stopped:
            self.stopped.discard(name)
            try:
                self.signal(name, signal.SIGCONT)
            except ClusterError:
                pass

    async def supervise(self) -> None:
        """Restart daemons that exited by themselves (fenced NameNode, failed ZKFC)."""
        assert self.cluster is not None
        while True:
            await asyncio.sleep(RESTART_DELAY_S)
            for name in NN_IDS + tuple(f"zkfc-{nn}" for nn in NN_IDS) + JN_IDS:
                if name in self.down or name in self.stopped or self.alive(name):
                    continue
                self.stat(f"exited:{name[:-1]}")
                self.down.add(name)
                await self.restart(name)

    # -- the fault schedule ------------------------------------------------------------------------
    async def step(self, kind: str) -> None:
        rng = self.rng
        nn = rng.choice(NN_IDS)
        jn = rng.choice(JN_IDS)
        target = {"nn_kill": nn, "zkfc_kill": f"zkfc-{nn}", "jn_kill": jn, "nn_stop": nn,
                  "zkfc_stop": f"zkfc-{nn}", "jn_stop": jn}.get(kind)
        busy = self.down | self.stopped
        if kind.endswith("_kill") and target not in busy and self.alive(target):
            self.signal(target, signal.SIGKILL)
            self.down.add(target)
            self.fault(kind, target)
            self.later(rng.uniform(1.0, 6.0), lambda t=target: self.restart(t))
        elif kind.endswith("_stop") and kind != "pair_stop" and target not in busy and self.alive(target):
            self.signal(target, signal.SIGSTOP)
            self.stopped.add(target)
            self.fault(kind, target)
            self.later(rng.uniform(0.5, 8.0), lambda t=target: self.cont(t))
        elif kind == "pair_stop" and not ({nn, f"zkfc-{nn}"} & busy) and self.alive(nn) \
                and self.alive(f"zkfc-{nn}"):
            for t in (nn, f"zkfc-{nn}"):
                self.signal(t, signal.SIGSTOP)
                self.stopped.add(t)
            self.fault("pair_stop", nn)
            d = rng.uniform(0.5, 8.0)
            self.later(d, lambda n=nn: self.cont(n))
            self.later(d + rng.uniform(0, 0.2), lambda n=nn: self.cont(f"zkfc-{n}"))
        elif kind == "zk_restart":
            self.fault("zk_restart")
            await self.restart("zk1")
        elif kind == "disk_full" and self.disk is not None and not self.disk.full:
            await asyncio.to_thread(self.disk.fill)
            self.fault("disk_full", "nn1")
            self.later(rng.uniform(0.5, 8.0), self.disk.free)
        elif kind == "disk_free" and self.disk is not None and self.disk.full:
            self.disk.free()
            self.fault("disk_free", "nn1")
        else:
            self.stat("steps_idle")

    # -- the run -----------------------------------------------------------------------------------
    def new_client(self, name: str) -> DFSClient:
        assert self.conf is not None
        cid = name.encode().ljust(16, b"\0")[:16]
        if self.secure:  # the user is the certificate's (the administrator): a claim would be refused
            return DFSClient(self.conf, client_id=cid)
        return DFSClient(self.conf, user="root", groups=["supergroup"], client_id=cid)

    async def start(self) -> None:
        run_dir = os.path.join(self.workdir, "cluster")
        disk = SmallDisk(os.path.join(self.workdir, "nn1-edits"), TMPFS_BYTES)
        why = disk.mount()
        if why is None:
            self.disk = disk
            self.notes.append(f"disk full: nn1's edits dir is a {TMPFS_BYTES >> 20} MiB tmpfs")
        else:
            self.notes.append(f"disk full: skipped ({why})")
        self.cluster = LocalCluster(run_dir, session_timeout_ms=CHAOS_TIMEOUTS.session_timeout_ms,
                                    extra_conf=CHAOS_CONF, out=lambda s: None,
                                    edits_dirs={"nn1": disk.path} if self.disk is not None else None,
                                    secure=self.secure)
        await asyncio.to_thread(self.cluster.up, 120.0)
        self.conf = Configuration.load(self.cluster.conf_dir)
        self.ssl = client_context_from_conf(self.conf)  # the probes' TLS (None on a plain cluster)
        if self.secure:
            self.notes.append("secure: mutual TLS on RPC and HTTPS, service-level authorization, "
                              "ZooKeeper over TLS with digest ACLs (cluster up --secure)")

    async def probe(self, bound_s: float) -> None:
        client = self.new_client("probe")
        deadline = time.monotonic() + 2 * bound_s + 10
        k = 0
        while time.monotonic() < deadline:
            k += 1
            try:
                await client.call(CLIENT.mkdirs, path=f"/probe/p{k}")
            except QJournalError:
                await asyncio.sleep(0.2)
                continue
            self.history.add(Progress(client.addresses[client.current][0]))
            return

    async def _call_nn(self, nn: str, method: str, **kw: Any) -> Any:
        assert self.conf is not None
        host, port = self.conf.get_address(f"dfs.namenode.rpc-address.ns1.{nn}")
        c = await RpcClient.connect_tcp(host, port, connect_timeout_ms=2000, ssl=self.ssl)
        try:
            return await c.call(method, timeout_ms=10000, **kw)
        finally:
            await c.close()

    async def nn_healthy(self, nn: str) -> bool:
        try:
            await self._call_nn(nn, HA_SERVICE.monitor_health)
            st = await self._call_nn(nn, HA_SERVICE.get_service_status)
        except QJournalError:
            return False
        return st.get("state") in ("active", "standby")

    async def record_end(self, healed_at: float) -> None:
        assert self.cluster is not None
        client = self.new_client("reader")
        active = await asyncio.to_thread(self.cluster.active_namenode)
        if active is not None:
            try:
                await self._call_nn(active, DFSADMIN.roll_edits, **self.admin)
            except QJournalError as e:
                self.notes.append(f"final roll failed: {e}")
            try:
                paths = await namespace_paths(client)
                report = await self._call_nn(active, DFSADMIN.get_report, **self.admin)
                self.history.add(NamespaceState(active, "active", int(report["last_txid"]), paths))
            except QJournalError as e:
                self.notes.append(f"final namespace not read: {e}")
        # liveness: by the bound after the heal, every controller of a healthy NameNode is in
        # the election; wait for that, no longer
        deadline = healed_at + CHAOS_TIMEOUTS.liveness_bound_s()
        while True:
            states = await asyncio.to_thread(self.cluster.zkfc_states)
            healthy = {nn: await self.nn_healthy(nn) for nn in NN_IDS}
            ok = all((states.get(f"zkfc-{nn}") or {}).get("elector_state") in ("ACTIVE", "STANDBY")
                     for nn in NN_IDS if healthy[nn])
            if ok or time.monotonic() - self.t0 > deadline:
                break
            await asyncio.sleep(0.5)
        for nn in NN_IDS:
            st = states.get(f"zkfc-{nn}") or {}
            self.history.add(ControllerState(nn, str(st.get("health", "UNKNOWN")),
                                             str(st.get("elector_state", "DOWN")), healthy[nn]))

    async def heal_all(self) -> None:
        await self.cancel_scheduled()
        if self.disk is not None:
            self.disk.free()
        for name in sorted(self.stopped):
            self.cont(name)
        assert self.cluster is not None
        for name in ("zk1",) + JN_IDS + NN_IDS + tuple(f"zkfc-{nn}" for nn in NN_IDS):
            if name != "zk1" and not self.alive(name):
                await self.restart(name)
        self.down.clear()

    async def setup(self) -> None:
        await self.start()
        self.supervisor = asyncio.ensure_future(self.supervise())
        for i in range(2):
            name = f"c{i + 1}"
            c = NamespaceClient(name, self.new_client(name), self.history, self.rng, self.recent_paths, self.stat)
            self.clients.append(c)
            c.task = asyncio.ensure_future(c.loop(call_mean_s=0.05))

    async def end(self) -> None:
        await self.heal_all()
        bound = CHAOS_TIMEOUTS.liveness_bound_s()
        self.history.add(Healed(bound))
        healed_at = time.monotonic() - self.t0
        await self.probe(bound)
        for c in self.clients:
            c.stop = True
        await asyncio.wait([c.task for c in self.clients if c.task is not None], timeout=30)
        for c in self.clients:
            if c.task is not None:
                c.task.cancel()
        self.supervisor.cancel()
        await asyncio.gather(self.supervisor, return_exceptions=True)
        await self.record_end(healed_at)

    async def cleanup(self) -> None:
        if self.supervisor is not None:
            self.supervisor.cancel()
            await asyncio.gather(self.supervisor, return_exceptions=True)
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        # starts in flight run in threads that a cancellation does not stop: let them finish
        # before the cluster goes down, so none brings a daemon back afterwards (invariant 3)
        if self.starting:
            await asyncio.wait(list(self.starting.values()), timeout=90)
        for name in sorted(self.stopped):
            self.cont(name)
        if self.cluster is not None:
            try:
                await asyncio.to_thread(self.cluster.down)
            except ClusterError as e:
                self.notes.append(f"cluster down: {e}")
        if self.disk is not None:
            self.disk.unmount()


async def run_cluster_chaos(duration_s: float, seed: int, workdir: str | None = None,
                            secure: bool = False) -> ChaosResult:
    """One whole-cluster chaos session (module docstring), checked; ``secure``: on ``cluster up --secure``."""
    return await run_session(lambda wd: _ClusterChaos(seed, duration_s, wd, secure), PROFILE, seed, duration_s,
                             workdir)
