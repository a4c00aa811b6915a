"""The whole-cluster workload: clients writing through the failover proxy while every role fails.

Why: PRODUCT.md's correctness requirements of the whole cluster (5-8) must hold
under the fault model of issue 11: crash and restart of a NameNode, of a ZKFC, of
ZooKeeper; long pauses of any of them (SIGSTOP); session expiry; partitions
between any two roles; a full disk on a NameNode (unhealthy); with the standby
tailing in-progress segments all along, and in half the runs an observer NameNode
serving the clients' reads (issue 13). This module drives exactly that on the
virtual-time loop (:mod:`qjournal.sim.ha_cluster`) from one seed, and hands the
observed history to both checkers (the journal's and the whole cluster's). It
judges nothing itself.

One run (:func:`run_ha_seed`):

1. Start the cluster (three JournalNodes, two NameNodes with their ZKFCs,
   ZooKeeper, maybe the observer ``nn3``) and wait for an active NameNode.
2. Clients (``c1``, ``c2``), each in its own directory, call ``create``,
   ``mkdirs``, ``delete``, ``rename`` and ``get_file_info`` through
   ``DFSClient`` (failover and retries with the same call id; with an observer,
   the ``ObserverReadProxyProvider``: reads to the observer, then the active);
   every call and answer goes into the history, each read with the NameNode
   that answered it and whether only the client's session binds it (an
   observer's answer without an msync for that read).
3. For ``steps`` steps a director waits a random virtual time and injects one
   fault by weight (:class:`HAFaults`); most faults heal themselves after a random
   while (a pause ends, a supervisor restarts a killed process, a partition heals).
   In a run with an observer, a NameNode crash or pause, a partition from the
   JournalNodes and one from a client hit the observer in a third of the cases
   (the others keep their meaning for nn1 and nn2).
4. The end: every fault heals, ``Healed`` is recorded with the liveness bound of
   the timeouts; a probe client writes until a NameNode acknowledges
   (``Progress``); the active rolls its log, the standby (and the observer)
   catch up, and the final namespaces, the controllers' states and every
   JournalNode's segments are recorded.

Whether a run has an observer, and its read wait and msync mode, are drawn from
a generator of their own seeded by the run's seed (:func:`observer_setup`), not
from the run's ``rng``: a run without an observer draws exactly what it drew
before observers existed, so earlier seeds (the soak's regression seeds) replay
the same story.
"""

from __future__ import annotations

import asyncio
import logging
import random
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

from qjournal.errors import QJournalError
from qjournal.namenode.ha_state import HAState
from qjournal.sim.faults import FaultConfig, HAFaults, choose
from qjournal.sim.ha_cluster import NN_IDS, OBSERVER_ID, ClusterTimeouts, SimHACluster
from qjournal.sim.history import (ControllerState, Healed, History, NamespaceState, NsRead, OpAcked, OpCalled,
                                  OpFailed, Progress, Setup)
from qjournal.sim.loop import SimProcess, run_in_process
from qjournal.sim.seeded_run import RunResult, SeededRun, disk_faults_of, execute, replay_command
from qjournal.protocol.protocols import CLIENT

__all__ = ["HAOptions", "HARunResult", "ObserverSetup", "observer_setup", "clock_jumps_of", "run_ha_seed",
           "ha_replay_command", "NamespaceClient", "namespace_paths"]

log = logging.getLogger(__name__)

#: mean virtual seconds between director steps, and between a client's calls
STEP_MEAN_S = 1.5
CALL_MEAN_S = 0.3
#: how long a self-healing fault lasts, in virtual seconds
FAULT_MIN_S, FAULT_MAX_S = 0.5, 8.0
#: the settle phase after the probe: standby catch-up deadline
SETTLE_S = 60.0
#: the share of runs with an observer, and the observer's read waits drawn (ms): short against the
#: clients' 5 s RPC timeout and about the tailing period (500 ms), so reads both wait and are refused
OBSERVER_RUN_SHARE = 0.5
OBSERVER_READ_WAITS_MS = (100, 300, 1000)
#: the fault kinds that may hit the observer, and how often they do in a run with one
OBSERVER_FAULT_KINDS = ("nn_crash", "nn_pause", "nn_jn_partition", "client_nn_partition")
OBSERVER_FAULT_SHARE = 1 / 3
#: the share of runs whose NameNode machines' wall clocks jump (issue 28), the mean virtual seconds
#: between jumps, and the jumps (seconds; the retry cache's expiry is 600 s)
CLOCK_JUMP_RUN_SHARE = 0.5
CLOCK_JUMP_MEAN_S = 6.0
CLOCK_JUMPS_S = (-1800, -600, 600, 1800)


@dataclass(frozen=True)
class HAOptions:
    """What defines a whole-cluster run (the replay key)."""

    seed: int
    steps: int = 40
    faults: HAFaults = field(default_factory=HAFaults)
    fencing: str = ""                # pidfence | shell | "" (chosen by the seed)
    observer: bool | None = None     # run the observer nn3; None: drawn by the seed (observer_setup)
    clock_jumps: bool | None = None  # NameNode wall clocks jump; None: drawn by the seed (clock_jumps_of)
    disk_faults: bool | None = None  # the JournalNodes' disks fail; None: drawn by the seed (seeded_run.disk_faults_of)

    def replay_command(self) -> str:
        """The one-line command that replays this run."""
        return ha_replay_command(self)


@dataclass(frozen=True)
class ObserverSetup:
    """The observer of one run: whether there is one, its read wait, and the clients' msync mode."""

    observer: bool
    read_wait_ms: int
    msync_each_read: bool


def clock_jumps_of(opts: HAOptions) -> bool:
    """Whether the run's NameNode machines have wall clocks that jump (issue 28), drawn from the seed by
    a generator of its own (as :func:`observer_setup`): the run's ``rng`` draws what it drew before."""
    if opts.clock_jumps is not None:
        return opts.clock_jumps
    return random.Random(f"qjournal-sim-clock:{opts.seed}").random() < CLOCK_JUMP_RUN_SHARE


def observer_setup(opts: HAOptions) -> ObserverSetup:
    """Draw the run's observer set-up from its seed (module docstring: not from the run's rng).

    ``random.Random`` seeded with a string is the same in every process (no hash randomisation).
    """
    r = random.Random(f"qjournal-sim-observer:{opts.seed}")
    drawn = r.random() < OBSERVER_RUN_SHARE
    wait_ms = r.choice(OBSERVER_READ_WAITS_MS)
    msync_each_read = r.random() < 0.5
    return ObserverSetup(drawn if opts.observer is None else opts.observer, wait_ms, msync_each_read)


class HARunResult(RunResult):
    """The outcome of one whole-cluster run."""

    options: HAOptions

    def summary(self) -> str:
        h = self.history
        faults = sum(v for k, v in self.stats.items() if k.startswith("fault:"))
        waits = [k[len("runs_observer_read_wait_"):] for k in self.stats if k.startswith("runs_observer_read_wait_")]
        obs = (f" observer(wait={''.join(waits)},"
               f"msync={'each read' if self.stats.get('runs_observer_msync_each_read') else 'first read'}) "
               f"reads_by_observer={self.stats.get('reads_by_observer', 0)} "
               f"observer_retries={self.stats.get('observer_retries', 0)}"
               if self.stats.get("runs_with_observer") else "")
        return (f"seed={self.options.seed} steps={self.options.steps} fencing={self.stats.get('fencing', '')}{obs} "
                f"acked_ops={len(h.of(OpAcked))} failed_ops={len(h.of(OpFailed))} reads={len(h.of(NsRead))} "
                f"faults={faults} failovers={self.stats.get('became_active', 0)} "
                f"virtual={self.virtual_s:.1f}s violations={len(self.violations)}")

    def explain(self, context: int = 60) -> str:
        return super().explain(context)


def _on_off(flag: bool | None) -> str | None:
    return None if flag is None else ("on" if flag else "off")


def ha_replay_command(opts: HAOptions) -> str:
    """The one-line command that replays ``opts``."""
    return replay_command("cluster", [("seed", opts.seed), ("steps", opts.steps), ("fencing", opts.fencing or None),
                                      ("observer", _on_off(opts.observer)),
                                      ("clock-jumps", _on_off(opts.clock_jumps)),
                                      ("disk-faults", _on_off(opts.disk_faults))], opts.faults)


async def namespace_paths(dfs: Any) -> tuple[str, ...]:
    """Every path of the namespace one client sees (``list_status`` from ``/`` down), sorted: what a
    run's ``NamespaceState`` holds.

    Raises:
        QJournalError: a listing failed (after the client's own retries).
    """
    paths: list[str] = []
    stack = ["/"]
    while stack:
        d = stack.pop()
        for st in await dfs.call(CLIENT.list_status, path=d):
            paths.append(st["path"])
            if st["type"] == "d":
                stack.append(st["path"])
    return tuple(sorted(paths))


class NamespaceClient:
    """One client of the workload: its own directory, a model of what it was told, its history events.

    Used by the simulator and by the real-process chaos harness (:mod:`qjournal.chaos.cluster`).

    Args:
        name: the client's name (its directory is ``/<name>``).
        dfs: its ``DFSClient`` (failover and retries with the same call id).
        history: where its calls, answers and reads go.
        rng: its random choices.
        recent_paths: the latest paths of every client's calls (shared: clients read each other's).
        stat: counts an outcome.
        observers: the names of observer NameNodes: a read one of them answers is an observer
            read even when it came through the client's failover path (an observer serves any
            read carrying a state id, and the client may not know it is one yet).
    """

    def __init__(self, name: str, dfs: Any, history: History, rng: Any, recent_paths: list[str],
                 stat: Callable[[str], None], observers: frozenset[str] = frozenset()) -> None:
        self.name = name
        self.dfs = dfs
        self.history = history
        self.rng = rng
        self.recent_paths = recent_paths
        self.stat = stat
        self.observers = observers
        self.dir = f"/{name}"
        self.write_ids = 0          # the DFSClient's call ids: one per write call, from 0
        self.fresh = 0
        self.existing: list[str] = []   # paths this client was told exist (acked), not touched since
        self.stop = False
        self.task: asyncio.Task | None = None

    def _next(self, prefix: str) -> str:
        self.fresh += 1
        return f"{self.dir}/{prefix}{self.fresh}"

    def _answered_by(self) -> str:
        return getattr(self.dfs, "last_answered_by", None) or self.dfs.addresses[self.dfs.current][0]

    async def write(self, method: str, path: str, dst: str = "", **kwargs: Any) -> tuple[bool, Any]:
        h = self.history
        op_id = self.write_ids
        self.write_ids += 1
        h.add(OpCalled(self.name, op_id, method, path, dst))
        self.recent_paths.append(dst or path)
        del self.recent_paths[:-8]
        try:
            if method == CLIENT.rename:
                result = await self.dfs.call(CLIENT.rename, src=path, dst=dst)
            else:
                result = await self.dfs.call(method, path=path, **kwargs)
        except QJournalError as e:
            h.add(OpFailed(self.name, op_id, type(e).__name__, str(e)[:200]))
            self.stat(f"op_failed:{type(e).__name__}")
            return False, None
        h.add(OpAcked(self.name, op_id, self._answered_by(),
                      result if isinstance(result, (bool, int, str, type(None))) else None))
        self.stat("op_acked")
        return True, result

    async def read(self, path: str) -> None:
        call_seq = len(self.history)   # what was acknowledged before this read began
        call_time = self.history.now()
        observer_reads = getattr(self.dfs, "observer_read_count", 0)
        try:
            st = await self.dfs.call(CLIENT.get_file_info, path=path)
        except QJournalError as e:
            self.stat(f"read_failed:{type(e).__name__}")
            return
        # an observer's answer is bound by every earlier acknowledged write only when the client
        # msynced for this very read (auto-msync-period 0); otherwise by the client's own session
        by_observer = (getattr(self.dfs, "observer_read_count", 0) > observer_reads
                       or self._answered_by() in self.observers)
        if by_observer:
            self.stat("reads_by_observer")
        session_only = by_observer and getattr(self.dfs, "auto_msync_period_ms", None) != 0
        self.history.add(NsRead(self.name, self._answered_by(), path, st is not None, call_seq=call_seq,
                                session_only=session_only, call_time=call_time))

    async def loop(self, call_mean_s: float = CALL_MEAN_S) -> None:
        rng = self.rng
        ok, _ = await self.write(CLIENT.mkdirs, self.dir)
        while not ok and not self.stop:
            await asyncio.sleep(call_mean_s)
            ok, _ = await self.write(CLIENT.mkdirs, self.dir)
        while not self.stop:
            await asyncio.sleep(rng.expovariate(1 / call_mean_s))
            r = rng.random()
            if r < 0.55 or not self.existing:
                path = self._next("f")
                ok, _ = await self.write(CLIENT.create, path)
                if ok:
                    self.existing.append(path)
            elif r < 0.62:
                path = self._next("d")
                ok, _ = await self.write(CLIENT.mkdirs, path)
                if ok:
                    self.existing.append(path)
            elif r < 0.72:
                path = self.existing.pop(rng.randrange(len(self.existing)))
                await self.write(CLIENT.delete, path, recursive=True)
            elif r < 0.82:
                path = self.existing.pop(rng.randrange(len(self.existing)))
                dst = self._next("r")
                ok, _ = await self.write(CLIENT.rename, path, dst)
                if ok:
                    self.existing.append(dst)
            elif r < 0.91:
                await self.read(self.existing[rng.randrange(len(self.existing))])
            elif self.recent_paths:  # another client's newest paths: maybe not yet acknowledged or durable
                await self.read(rng.choice(self.recent_paths))


class _HARun(SeededRun):
    def __init__(self, opts: HAOptions, workdir: str) -> None:
        super().__init__(opts.seed, opts.faults if disk_faults_of(opts.seed, opts.disk_faults) else None)
        self.opts = opts
        fencing = opts.fencing or ("pidfence" if self.rng.random() < 0.6 else "shell")
        self.stats["fencing"] = fencing
        self.observer = observer_setup(opts)
        if self.observer.observer:
            self.stats.update({"runs_with_observer": 1,
                               f"runs_observer_read_wait_{self.observer.read_wait_ms}ms": 1,
                               "runs_observer_msync_each_read": int(self.observer.msync_each_read)})
        self.timeouts = ClusterTimeouts()
        self.cluster = SimHACluster(self.rng, self.history, workdir, FaultConfig.parse("none"),
                                    self.timeouts, fencing=fencing, observer=self.observer.observer,
                                    observer_read_wait_ms=self.observer.read_wait_ms,
                                    msync_each_read=self.observer.msync_each_read)
        self.clients: list[NamespaceClient] = []
        #: the paths of the latest calls of every client (other clients read them)
        self.recent_paths: list[str] = []

    def fault(self, kind: str, detail: str = "") -> None:
        if self.observer.observer and OBSERVER_ID in detail.split(" "):
            self.stat(f"fault_on_observer:{kind}")
        super().fault(kind, detail)

    def duration(self) -> float:
        return self.rng.uniform(FAULT_MIN_S, FAULT_MAX_S)

    # -- the director ----------------------------------------------------------------------------
    async def step(self) -> None:
        cl, rng = self.cluster, self.rng
        kind = choose(rng, self.opts.faults.director_weights())
        self.inject_disk_faults({n: cl.jns.nodes[n].fs for n in cl.jns.names})
        if self.disk_faults and self.disk_rng.random() < self.opts.faults.nn_fsync_eio:
            victim, after = self.disk_rng.choice(cl.nn_ids), self.disk_rng.randrange(3)
            cl.hosts[victim].disk.fail(after)
            self.fault("nn_fsync_eio", f"{victim} after {after}")
        nn = rng.choice(NN_IDS)
        if self.observer.observer and kind in OBSERVER_FAULT_KINDS and rng.random() < OBSERVER_FAULT_SHARE:
            nn = OBSERVER_ID
        h = cl.hosts[nn]
        if kind == "nn_crash" and h.nn_running:
            h.kill_nn("fault")
            self.fault("nn_crash", nn)
            self.later(rng.uniform(1.0, 6.0), h.restart_nn)
        elif kind == "nn_pause" and h.nn_running and not h.nn_proc.paused:
            h.pause_nn()
            self.fault("nn_pause", nn)
            self.later(self.duration(), h.resume_nn)
        elif kind == "zkfc_crash" and h.zkfc_running:
            h.kill_zkfc()
            self.fault("zkfc_crash", nn)
            self.later(rng.uniform(1.0, 5.0), h.restart_zkfc)
        elif kind == "zkfc_pause" and h.zkfc_running and not h.zkfc_proc.paused:
            h.pause_zkfc()
            self.fault("zkfc_pause", nn)
            self.later(self.duration(), h.resume_zkfc)
        elif kind == "pair_pause" and h.nn_running and h.zkfc_running:
            h.pause_nn()
            h.pause_zkfc()
            self.fault("pair_pause", nn)
            d = self.duration()
            self.later(d, h.resume_nn)
            self.later(d + rng.uniform(0, 0.2), h.resume_zkfc)
        elif kind == "zk_crash" and cl.zk.up:
            cl.zk.crash()
            self.fault("zk_crash")
            self.later(rng.uniform(0.5, 5.0), cl.zk.restart)
        elif kind == "zk_partition":
            who = f"zkfc-{nn}"
            cl.zk_cut.add(who)
            self.fault("zk_partition", who)
            self.later(self.duration(), lambda: cl.zk_cut.discard(who))
        elif kind == "session_expire" and h.zkfc_running and h.zkfc.elector and h.zkfc.elector.session_id:
            cl.zk.expire(h.zkfc.elector.session_id)
            self.fault("session_expire", nn)
        elif kind == "nn_jn_partition":
            targets = cl.jns.names if rng.random() < 0.5 else [rng.choice(cl.jns.names)]
            for jn in targets:
                cl.partition(nn, jn)
            self.fault("nn_jn_partition", f"{nn} x {','.join(targets)}")
            self.later(self.duration(), lambda: self.unpartition([(nn, jn) for jn in targets]))
        elif kind == "client_nn_partition" and self.clients:
            c = rng.choice(self.clients).name
            cl.partition(c, h.address)
            self.fault("client_nn_partition", f"{c} x {nn}")
            self.later(self.duration(), lambda: self.unpartition([(c, h.address)]))
        elif kind == "nn_nn_partition":
            pairs = [("nn1", "nn2:8020"), ("nn2", "nn1:8020")]
            for a, b in pairs:
                cl.partition(a, b)
            self.fault("nn_nn_partition")
            self.later(self.duration(), lambda: self.unpartition(pairs))
        elif kind == "disk_full" and not h.disk_full:
            h.set_disk_full(True)
            self.fault("disk_full", nn)
            self.later(self.duration(), lambda: h.set_disk_full(False))
        elif kind == "jn_crash":
            jn = rng.choice(cl.jns.names)
            node = cl.jns.nodes[jn]
            if node.alive:
                node.crash_now("fault")
                self.fault("jn_crash", jn)
                self.later(rng.uniform(0.5, 5.0), lambda: self.restart_jn(jn))
        else:
            self.stat("steps_idle")

    def unpartition(self, pairs: list[tuple[str, str]]) -> None:
        cl = self.cluster
        remaining = [p for p in cl._partitions if p not in pairs]
        cl.heal_partitions()
        for a, b in remaining:
            cl.partition(a, b)

    async def clock_jumper(self) -> None:
        """The wall clocks of the NameNode machines jump (issue 28, H1: no duration may be measured on
        them), drawn by a generator of its own so the run's other draws stay as they were."""
        r = random.Random(f"qjournal-sim-clock-jumps:{self.opts.seed}")
        cl = self.cluster
        while True:
            await asyncio.sleep(r.expovariate(1 / CLOCK_JUMP_MEAN_S))
            nn = r.choice(cl.nn_ids)
            jump_s = r.choice(CLOCK_JUMPS_S)
            cl.hosts[nn].wall_offset_ms += jump_s * 1000
            self.fault("clock_jump", f"{nn} {jump_s:+d}s")

    async def restart_jn(self, jn: str) -> None:
        node = self.cluster.jns.nodes[jn]
        if not node.alive:
            await node.start()

    # -- the end -------------------------------------------------------------------------------
    async def heal_all(self) -> None:
        cl = self.cluster
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []
        cl.heal_partitions()
        cl.zk_cut.clear()
        if not cl.zk.up:
            cl.zk.restart()
        for jn in cl.jns.names:
            cl.jns.nodes[jn].fs.failures.clear()
            await self.restart_jn(jn)
        for nn in cl.nn_ids:
            h = cl.hosts[nn]
            h.set_disk_full(False)
            h.disk.armed.clear()
            h.resume_nn()
            h.resume_zkfc()
        for nn in cl.nn_ids:
            host = cl.hosts[nn]
            for _ in range(10):   # the supervisor: the daemons run again (the observer has no ZKFC)
                if await host.restart_nn() and (nn not in NN_IDS or await host.restart_zkfc()):
                    break
                await asyncio.sleep(2.0)

    async def probe(self, bound_s: float) -> None:
        """Write until a NameNode acknowledges, or give up after twice the bound."""
        client = self.cluster.new_client("probe")
        deadline = self.loop.time() + 2 * bound_s + 10
        k = 0
        while self.loop.time() < deadline:
            k += 1
            try:
                await client.call(CLIENT.mkdirs, path=f"/probe/p{k}")
            except QJournalError:
                await asyncio.sleep(0.2)
                continue
            self.history.add(Progress(client.addresses[client.current][0]))
            return

    async def settle_and_record(self) -> None:
        cl, h = self.cluster, self.history
        active = cl.active()
        #: the txid of the active's namespace: an operator's -rollEdits finalizes every edit (the
        #: standby can tail all of them) and starts a segment whose marker changes no namespace
        namespace_txid: int | None = None
        if active is not None:
            nn = cl.hosts[active].nn
            try:
                if nn.editlog is not None:
                    start = await nn.editlog.roll()
                    namespace_txid = start - 1 if start is not None else None
            except QJournalError as e:
                self.stat(f"final_roll_failed:{type(e).__name__}")
            deadline = self.loop.time() + SETTLE_S
            followers = [x for x in cl.nn_ids if x != active]   # the standby, and the observer
            while self.loop.time() < deadline:
                target = namespace_txid or nn.last_applied_txid
                if all(cl.hosts[x].nn is not None and cl.hosts[x].nn.last_applied_txid >= target
                       for x in followers):
                    break
                await asyncio.sleep(0.5)
        for name in cl.nn_ids:
            host = cl.hosts[name]
            nn = host.nn
            if nn is None or nn.namespace is None or not host.nn_running:
                continue
            role = {HAState.ACTIVE: "active", HAState.OBSERVER: "observer"}.get(nn.state, "standby")
            ns = nn.namespace
            paths = tuple(sorted(ns.path_of(i) for i in ns.inodes if i != min(ns.inodes)))
            txid = namespace_txid if role == "active" and namespace_txid is not None else nn.last_applied_txid
            h.add(NamespaceState(name, role, txid, paths))
        # liveness (requirement 8): by the bound after the heal, every controller of a healthy
        # NameNode is in the election; wait for that (a restarted daemon needs its time), no longer
        deadline = self.healed_at + self.timeouts.liveness_bound_s()
        hosts = [cl.hosts[name] for name in NN_IDS]
        while self.loop.time() < deadline and not all(x.in_election for x in hosts if x.nn_healthy):
            await asyncio.sleep(0.5)
        for host in hosts:
            z = host.zkfc
            if z is not None and host.zkfc_running:
                h.add(ControllerState(host.nn_id, z.health.state.value,
                                      z.elector.state.value if z.elector else "NONE", host.nn_healthy))
        for seg in cl.jns.disk_states():
            h.add(seg)

    # -- the run -------------------------------------------------------------------------------
    async def main(self) -> None:
        cl, h = self.cluster, self.history
        h.add(Setup(tuple(cl.jns.names)))
        await cl.start()
        start_deadline = self.loop.time() + 60
        while cl.active() is None and self.loop.time() < start_deadline:
            await asyncio.sleep(0.1)
        if clock_jumps_of(self.opts):
            self.stat("runs_with_clock_jumps")
            self.tasks.append(self.loop.create_task(self.clock_jumper()))
        for i in range(2):
            name = f"c{i + 1}"
            c = NamespaceClient(name, cl.new_client(name), h, self.rng, self.recent_paths, self.stat,
                                observers=frozenset(n for n in cl.nn_ids if n == OBSERVER_ID))
            self.clients.append(c)
            c.task = run_in_process(SimProcess(c.name), c.loop(), name=c.name)
        for _ in range(self.opts.steps):
            await asyncio.sleep(self.rng.expovariate(1 / STEP_MEAN_S))
            await self.step()
        await self.heal_all()
        bound = self.timeouts.liveness_bound_s()
        h.add(Healed(bound))
        self.healed_at = self.loop.time()
        await self.probe(bound)
        for c in self.clients:
            c.stop = True
        await asyncio.wait([c.task for c in self.clients if c.task is not None], timeout=30)
        for c in self.clients:
            if c.task is not None:
                c.task.cancel()
        await self.settle_and_record()
        for name in NN_IDS:
            z = cl.hosts[name].zkfc
            if z is not None:
                self.stat("became_active", sum(1 for e in z.events if e[1] == "transition_to_active_done"))
        for name in cl.nn_ids:
            nn = cl.hosts[name].nn
            reader = nn.shared_reader if nn is not None else None
            if reader is not None:  # how the standby (and the observer) tailed: edit caches over RPC, or streamed
                self.stat("tail_rpc_reads", getattr(reader, "rpc_reads", 0))
                self.stat("tail_rpc_fallbacks", getattr(reader, "rpc_fallbacks", 0))
        if self.observer.observer:
            self.stat("observer_retries", sum(c.dfs.observer_retry_count for c in self.clients))
            self.stat("reads_by_observer", 0)
        for k, v in cl.counts.items():
            self.stat(k, v)
        for jn in cl.jns.names:
            for k, v in sorted(cl.jns.nodes[jn].fs.stats.items()):
                if k.startswith(("failed:", "fsync_eio_")):
                    self.stat(f"disk:{k}", v)
        self.stat("disk:failed:nn_fsync_eio", sum(cl.hosts[nn].disk.failed for nn in cl.nn_ids))
        await cl.stop()


def run_ha_seed(opts: HAOptions) -> HARunResult:
    """Run one whole-cluster seed and check it (module docstring)."""
    with tempfile.TemporaryDirectory(prefix=f"qjournal-ha-sim-{opts.seed}-", ignore_cleanup_errors=True) as workdir:
        history, stats, violations, unexplained, known, virtual = execute(
            opts.seed, lambda: _HARun(opts, workdir), max_virtual_time_s=3600, max_callbacks=20_000_000)
    return HARunResult(opts, history, violations, stats, virtual, unexplained, known)
