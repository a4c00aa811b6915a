"""The nemesis on hosts: a seeded schedule of network, clock, disk and process faults on a deployed cluster.

Why: each fault alone is shown by a test; the combinations are where systems break (Jepsen's nemesis,
etcd's robustness tests). This module drives one :class:`~qjournal.hosts.cluster.HostCluster` with a
schedule drawn from a seed: every ``step_s`` (drawn) one fault by weight (:data:`WEIGHTS`), each healed
after a drawn while, with a supervisor that restarts a daemon that exited by itself after 2 s, as the
units' ``Restart=always`` says (a NameNode fenced by a newer writer exits; so does a ZKFC whose health
monitor failed). Clients run on their own hosts (:meth:`HostCluster.start_load`); the caller merges their
histories with the nemesis's ``Fault`` events and judges them with the rules and the linearizability
checker. The schedule replays from its seed; timing does not.

Topology it expects (``tests/hosts/test_faults.py`` deploys it): ZooKeeper on hosts of its own (so that a
host can be cut from ZooKeeper and not from the JournalNodes), JournalNodes, two NameNodes with their
ZKFCs, client hosts. The fault families and kinds (names of docs/testing.md):

* network (:mod:`qjournal.hosts.faults`): ``silent_partition``, ``one_way_partition``,
  ``fast_fail_partition``, ``host_isolated``, ``majority_minority_split``, ``bridge``, ``flapping``;
* the HA cases: ``active_cut_from_zookeeper``, ``active_cut_from_journalnodes``,
  ``active_cut_from_clients``, ``zkfc_cut_from_its_namenode``, ``zk_split_active_zkfc_minority``;
* clock (:mod:`qjournal.hosts.preload`): ``clock_jump_forward``, ``clock_jump_backward``,
  ``clock_fast``, ``clock_slow`` (every role, ZooKeeper included);
* disk: ``fsync_eio``, ``write_enospc``, ``write_eio``, ``read_eio`` (JournalNodes and a NameNode, one
  process at a time: a minority);
* process: ``sigkill``, ``sigstop`` (SIGCONT after the while), ``restart`` (systemctl restart).
"""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from qjournal.deploy.units import ROLE_UNITS
from qjournal.hosts.cluster import HostCluster
from qjournal.hosts.faults import Cut, NetworkFaults
from qjournal.hosts.netns import HostsError
from qjournal.hosts.preload import ProcessFaults
from qjournal.sim.faults import choose
from qjournal.sim.history import Fault

__all__ = ["Nemesis", "WEIGHTS", "HA_CASES", "FAMILIES", "clock_and_disk_modes"]

ZK, JN, NN, ZKFC = (ROLE_UNITS[r] for r in ("zookeeper", "journalnode", "namenode", "zkfc"))

HA_CASES = ("active_cut_from_zookeeper", "active_cut_from_journalnodes", "active_cut_from_clients",
            "zkfc_cut_from_its_namenode", "zk_split_active_zkfc_minority")
#: relative weights of the nemesis's choices
WEIGHTS: dict[str, float] = {
    "silent_partition": 1.0, "one_way_partition": 1.0, "fast_fail_partition": 0.8, "host_isolated": 0.8,
    "majority_minority_split": 0.8, "bridge": 0.6, "flapping": 0.6,
    **{c: 0.8 for c in HA_CASES},
    "clock_jump_forward": 0.8, "clock_jump_backward": 0.8, "clock_fast": 0.5, "clock_slow": 0.5,
    "fsync_eio": 0.7, "write_enospc": 0.6, "write_eio": 0.5, "read_eio": 0.5,
    "sigkill": 1.0, "sigstop": 0.8, "restart": 0.5,
}
FAMILIES = {
    "network": ("silent_partition", "one_way_partition", "fast_fail_partition", "host_isolated",
                "majority_minority_split", "bridge", "flapping"),
    "ha": HA_CASES,
    "clock": ("clock_jump_forward", "clock_jump_backward", "clock_fast", "clock_slow"),
    "disk": ("fsync_eio", "write_enospc", "write_eio", "read_eio"),
    "process": ("sigkill", "sigstop", "restart"),
}
#: the supervisor's RestartSec
RESTART_S = 2.0


def clock_and_disk_modes(cluster: HostCluster) -> dict[str, str]:
    """Which preload each host's units get (:mod:`qjournal.hosts.preload`: one per process): the first
    NameNode and every JournalNode but the last take libfiu (disk faults on a NameNode and on a
    minority of JournalNodes at a time), everything else libfaketime, so every role has clock faults."""
    jns = [h.name for h in cluster.desc.with_role("journalnode")]
    nns = [h.name for h in cluster.desc.with_role("namenode")]
    modes = {}
    for name, spec in cluster.desc.hosts.items():
        if not [r for r in spec.roles if r in ROLE_UNITS]:
            continue
        modes[name] = "disk" if (name in jns[:-1] or name == nns[0]) else "clock"
    return modes


@dataclass
class _Pending:
    due: float
    heal: Callable[[], None]
    what: str


@dataclass
class Nemesis:
    """A seeded fault schedule on ``cluster`` (module docstring).

    Args:
        cluster: the deployed cluster (its units installed with :meth:`install` before their first start).
        seed: the schedule's seed.
        state_dir: a machine directory for the clock files.
        log: progress lines.
    """

    cluster: HostCluster
    seed: int
    state_dir: str
    log: Callable[[str], None] = print
    weights: dict[str, float] = field(default_factory=lambda: dict(WEIGHTS))
    events: list[Fault] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.net = NetworkFaults(self.cluster.net, self._record)
        self.proc = ProcessFaults(self.cluster.net, self.cluster.services, self.state_dir, self._record)
        self.pending: list[_Pending] = []
        self.held: set[tuple[str, str]] = set()      # units the nemesis stopped or paused on purpose
        self.gone_at: dict[tuple[str, str], float] = {}   # when the supervisor first saw a unit down
        self._lock = threading.Lock()
        d = self.cluster.desc
        self.zks = [h.name for h in d.with_role("zookeeper")]
        self.jns = [h.name for h in d.with_role("journalnode")]
        self.nns = [h.name for h in d.with_role("namenode")]
        self.clients = [h.name for h in d.with_role("client")]
        self.modes = clock_and_disk_modes(self.cluster)

    # -- set-up --------------------------------------------------------------------------------------
    def install(self) -> None:
        """The preload drop-ins of every daemon host (call after the units are installed, before they start)."""
        for host, mode in sorted(self.modes.items()):
            self.proc.install(host, self.units(host), mode)

    def units(self, host: str) -> list[str]:
        return [ROLE_UNITS[r] for r in self.cluster.desc.hosts[host].roles if r in ROLE_UNITS]

    def _record(self, kind: str, detail: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.events.append(Fault(kind, detail, time=time.monotonic()))
        self.log(f"fault {kind}: {detail}")

    # -- the cluster's state -------------------------------------------------------------------------
    def active_host(self) -> str | None:
        """The host of the active NameNode, asked from a client host (None: no single active)."""
        for via in self.clients:
            try:
                nn = self.cluster.active_namenode(via)
            except HostsError:
                continue
            if nn is not None:
                return self.cluster.host_of_namenode(nn)
        return None

    def supervise(self) -> None:
        """Restart every daemon that exited by itself (``Restart=always``), after :data:`RESTART_S`."""
        self.proc.clean_fifos()
        for host in sorted(self.modes):
            mgr = self.cluster.services[host]
            for unit in self.units(host):
                if (host, unit) in self.held or mgr.is_active(unit):
                    continue
                now = time.monotonic()
                gone_at = self.gone_at.setdefault((host, unit), now)
                if now - gone_at >= RESTART_S:
                    self.gone_at.pop((host, unit), None)
                    try:
                        mgr.start(unit)
                        self.counts["supervisor_restarts"] = self.counts.get("supervisor_restarts", 0) + 1
                    except HostsError as e:
                        # a start that fails or times out (a NameNode that cannot reach a journal quorum
                        # through a partition sends no READY): systemd counts a failed start and, with
                        # Restart=always, tries again after RestartSec; so does the next tick. A unit that
                        # never comes back is heal_all's error.
                        self.counts["supervisor_failed_starts"] = self.counts.get("supervisor_failed_starts", 0) + 1
                        self.log(f"supervisor: {host} {unit} did not start: {str(e)[:300]}")

    # -- one fault -----------------------------------------------------------------------------------
    def duration(self, lo: float = 2.0, hi: float = 8.0) -> float:
        return self.rng.uniform(lo, hi)

    def later(self, delay_s: float, heal: Callable[[], None], what: str) -> None:
        self.pending.append(_Pending(time.monotonic() + delay_s, heal, what))

    def heal_cut_later(self, cut: Cut, delay_s: float | None = None) -> None:
        self.later(self.duration() if delay_s is None else delay_s, lambda: self.net.heal(cut), cut.kind)

    def apply(self, kind: str) -> bool:
        """Apply one fault of ``kind`` (healing scheduled). Returns False when it does not apply now."""
        rng, n = self.rng, self.net
        servers = self.zks + self.jns + self.nns
        if kind == "silent_partition":
            a, b = rng.sample(servers + self.clients, 2)
            self.heal_cut_later(n.silent(a, b))
        elif kind == "one_way_partition":
            a, b = rng.sample(servers + self.clients, 2)
            self.heal_cut_later(n.silent(a, b, one_way=True))
        elif kind == "fast_fail_partition":
            a, b = rng.sample(servers + self.clients, 2)
            self.heal_cut_later(n.fast_fail(a, b, how=rng.choice(["unreachable", "prohibit"])))
        elif kind == "host_isolated":
            self.heal_cut_later(n.isolate(rng.choice(servers)))
        elif kind == "majority_minority_split":
            hosts = list(servers)
            rng.shuffle(hosts)
            k = len(hosts) // 2 - rng.randrange(2)
            self.heal_cut_later(n.split(sorted(hosts[:k]), sorted(hosts[k:])))
        elif kind == "bridge":
            a, b, c = rng.sample(servers, 3)
            self.heal_cut_later(n.bridge(a, b, c))
        elif kind == "flapping":
            a, b = rng.sample(servers, 2)
            d = self.duration(3, 8)
            cut = n.flap(a, b, period_s=rng.uniform(0.2, 0.6), duration_s=d)
            self.heal_cut_later(cut, d + 0.5)
        elif kind in HA_CASES:
            return self.ha_case(kind)
        elif kind.startswith("clock_"):
            hosts = [h for h, m in sorted(self.modes.items()) if m == "clock"]
            host = rng.choice(hosts)
            unit = rng.choice(self.units(host))
            if kind == "clock_jump_forward":
                self.proc.jump(host, unit, rng.choice([120, 600, 1800]))
            elif kind == "clock_jump_backward":
                self.proc.jump(host, unit, -rng.choice([120, 600, 1800]))
            else:
                self.proc.rate(host, unit, rng.choice([2.0, 5.0]) if kind == "clock_fast" else rng.choice([0.5, 0.1]))
            self.later(self.duration(5, 20), lambda: self.proc.clock_reset(host, unit), kind)
        elif kind in ("fsync_eio", "write_enospc", "write_eio", "read_eio"):
            if any(k in ("fsync_eio", "write_enospc", "write_eio", "read_eio") for k in self._pending_kinds()):
                return False   # one failing disk at a time: a minority of JournalNodes, or the NameNode
            hosts = [h for h, m in sorted(self.modes.items()) if m == "disk"]
            host = rng.choice(hosts)
            unit = JN if host in self.jns else NN
            if not self.cluster.services[host].is_active(unit) or (host, unit) in self.held:
                return False
            self.proc.disk_fault(host, unit, kind, probability=1.0 if rng.random() < 0.6 else 0.3)
            self.later(self.duration(2, 6), lambda: self.proc.disk_heal(host, unit), kind)
        elif kind in ("sigkill", "sigstop", "restart"):
            host = rng.choice(sorted(self.modes))
            unit = rng.choice(self.units(host))
            mgr = self.cluster.services[host]
            d = mgr.daemon(unit)
            if d is None or not d.alive() or (host, unit) in self.held or (host, unit) in self.proc.disk_on:
                return False
            if kind == "sigkill":
                d.signal(signal.SIGKILL)
                self._record("sigkill", f"{host} {unit}")
            elif kind == "sigstop":
                d.signal(signal.SIGSTOP)
                self.held.add((host, unit))
                self._record("sigstop", f"{host} {unit}")

                def cont() -> None:
                    if d.alive():
                        d.signal(signal.SIGCONT)
                    self.held.discard((host, unit))
                self.later(self.duration(1, 6), cont, "sigcont")
            else:
                self._record("restart", f"{host} {unit}")
                self.held.add((host, unit))
                try:
                    mgr.restart(unit)
                finally:
                    self.held.discard((host, unit))
        else:
            raise HostsError(f"nemesis: unknown fault kind {kind!r}")
        return True

    def ha_case(self, kind: str) -> bool:
        """One of the HA cases by name (module docstring); needs one active NameNode."""
        active = self.active_host()
        if active is None:
            return False
        n = self.net
        if kind == "active_cut_from_zookeeper":
            cut = n.split([active], self.zks, kind=kind)
        elif kind == "active_cut_from_journalnodes":
            cut = n.split([active], self.jns, kind=kind)
        elif kind == "active_cut_from_clients":
            cut = n.split([active], self.clients, kind=kind)
        elif kind == "zkfc_cut_from_its_namenode":
            cut = n.local_port(active, self.cluster.desc.ports["namenode-rpc"], kind=kind)
        elif kind == "zk_split_active_zkfc_minority":
            # the lone server and the active's host see each other, not the majority
            lone = self.rng.choice(self.zks)
            cut = n.split([lone, active], [z for z in self.zks if z != lone], kind=kind)
        else:
            raise HostsError(f"nemesis: unknown HA case {kind!r}")
        self.heal_cut_later(cut, self.duration(6, 12))
        return True

    def _pending_kinds(self) -> list[str]:
        return [p.what for p in self.pending]

    # -- the schedule --------------------------------------------------------------------------------
    def tick(self) -> None:
        """Heal what is due, then supervise."""
        now = time.monotonic()
        due = [p for p in self.pending if p.due <= now]
        self.pending = [p for p in self.pending if p.due > now]
        for p in due:
            try:
                p.heal()
            except HostsError as e:
                self.errors.append(f"heal {p.what}: {e}"[:500])
        self.supervise()

    def step(self) -> str | None:
        """Choose a kind by weight and apply it; None when it did not apply now."""
        kind = choose(self.rng, [(k, w) for k, w in sorted(self.weights.items()) if w > 0])
        try:
            return kind if self.apply(kind) else None
        except HostsError as e:
            self.errors.append(f"{kind}: {e}"[:500])
            return None

    def run(self, duration_s: float, step_mean_s: float = 3.0, poll_s: float = 0.2) -> None:
        """Faults for ``duration_s`` seconds, one every ``step_mean_s`` on average, then :meth:`heal_all`."""
        end = time.monotonic() + duration_s
        next_step = time.monotonic() + self.rng.expovariate(1 / step_mean_s)
        try:
            while time.monotonic() < end:
                self.tick()
                if time.monotonic() >= next_step:
                    self.step()
                    next_step = time.monotonic() + self.rng.expovariate(1 / step_mean_s)
                time.sleep(poll_s)   # the schedule's own pace (not synchronisation)
        finally:
            self.heal_all()

    def heal_all(self, settle_s: float = 60.0) -> None:
        """Heal every fault now, resume paused daemons, reset clocks, and wait until every unit runs."""
        for p in self.pending:
            try:
                p.heal()
            except HostsError as e:
                self.errors.append(f"heal {p.what}: {e}"[:500])
        self.pending = []
        self.net.heal_all()
        for host, unit in list(self.proc.disk_on):
            self.proc.disk_heal(host, unit)
        for host, unit in list(self.proc.offsets_s):
            self.proc.clock_reset(host, unit)
        for host, unit in list(self.proc.modes):
            if self.proc.modes[(host, unit)] == "clock":
                self.proc.clock_reset(host, unit)
        self.held.clear()
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            self.supervise()
            if all(self.cluster.services[h].is_active(u) for h in self.modes for u in self.units(h)):
                return
            time.sleep(0.5)   # restarts take their RestartSec
        down = [f"{h} {u}" for h in sorted(self.modes) for u in self.units(h) if not self.cluster.services[h].is_active(u)]
        self.errors.append(f"heal_all: not running again within {settle_s:.0f} s: {', '.join(down)}")
