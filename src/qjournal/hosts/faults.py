"""Network faults between test hosts, applied and healed at run time with routes and rules only.

Why: the faults that broke nearly every system Jepsen tested are network faults between machines (an
active cut off from ZooKeeper but not from its clients; a one-way partition; a flapping link). The
hosts of :mod:`qjournal.hosts.netns` are network namespaces on one bridge; this kernel has neither
netem nor iptables, but routes and policy rules are enough, each inside a host's own namespace (the
machine's network namespace is never touched, netns invariant 1):

* **silent** (``a`` to ``b``): ``ip route replace <b>/32 via <u> dev eth0`` on ``a``, where ``u`` is an
  address of the subnet nobody has, with a permanent neighbour entry for ``u`` with a MAC nobody has.
  Frames leave ``a`` for a MAC no port answers: packets vanish and TCP times out. Without the
  neighbour entry ARP for ``u`` would fail after a few seconds and the kernel would answer "no route
  to host": not silent.
* **fast-failing**: ``ip route replace unreachable|prohibit <b>/32`` on ``a``: ``connect`` fails at once
  (EHOSTUNREACH / EACCES) and sends fail on open connections.
* **one way or both**: a route on one side only cuts one direction (``b``'s packets still reach ``a``;
  TCP still breaks, as its acknowledgements are lost, which is what an asymmetric link does).
* **isolated**: the host's port of the bridge down (its cable pulled).
* **local port**: processes of a host can no longer reach one of its own ports (a ZKFC cut from its
  own NameNode): a policy rule ahead of the ``local`` table drops the port's answers to local peers
  (``iif lo sport <port> blackhole``), so a connection attempt times out silently while other hosts
  still reach the port.

Several faults may cover the same pair at once (a split while the active is cut from its clients):
each host keeps, per peer, the stack of faults that want a route there; the newest one's route is
installed, and healing a fault reinstalls what the others still want (or removes the route). Every
fault is a :class:`Cut` with a kind (the names of docs/testing.md) and counts once per application
in :attr:`NetworkFaults.counts`.

Invariants:

1. Every command runs in a host's namespace (``ip -n <host ns>``) or the bridge's; none in the machine's.
2. After :meth:`NetworkFaults.heal_all` no route, rule or link state of a fault is left: each host's
   routing table is the one it had before the first fault (checked by the tests).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from qjournal.hosts.netns import Host, HostsError, Network

__all__ = ["Cut", "NetworkFaults", "NETWORK_FAULT_KINDS", "UNUSED_MAC"]

#: a locally administered MAC no host has (the silent next hop's neighbour entry)
UNUSED_MAC = "02:00:00:00:00:fe"
#: rule preferences: the local table moves to LOCAL_PREF; fault rules take LOCAL_PREF - 1, - 2, ...
LOCAL_PREF = 200
#: the kinds a run counts (docs/testing.md's table)
NETWORK_FAULT_KINDS = ("silent_partition", "one_way_partition", "fast_fail_partition", "host_isolated",
                       "majority_minority_split", "bridge", "flapping", "local_port_cut")


@dataclass
class Cut:
    """One applied fault: heal it with :meth:`NetworkFaults.heal`."""

    kind: str
    detail: str
    routes: list[tuple[str, str]] = field(default_factory=list)     # (host, peer address)
    rules: list[tuple[str, int]] = field(default_factory=list)      # (host, rule preference)
    links: list[str] = field(default_factory=list)                  # hosts whose link is down
    stop: threading.Event | None = None
    thread: threading.Thread | None = None
    healed: bool = False


class NetworkFaults:
    """Network faults on the hosts of ``net`` (module docstring).

    Args:
        net: the run's hosts.
        record: called with ``(kind, detail)`` for each fault applied (a history's ``Fault`` event).
    """

    def __init__(self, net: Network, record: Callable[[str, str], None] | None = None) -> None:
        self.net = net
        self.record = record
        self.counts: dict[str, int] = {}
        self.active: list[Cut] = []
        self._lock = threading.RLock()
        #: (host, peer address) -> the route specs wanted, newest last
        self._wanted: dict[tuple[str, str], list[tuple[Cut, list[str]]]] = {}
        self._neighbour_set: set[str] = set()
        self._local_moved: set[str] = set()
        self._next_pref: dict[str, int] = {}
        self._links_down: dict[str, int] = {}

    # -- the faults ----------------------------------------------------------------------------------
    def silent(self, a: str, b: str, *, one_way: bool = False, kind: str | None = None) -> Cut:
        """Packets from ``a`` to ``b`` (and, unless ``one_way``, back) vanish."""
        cut = Cut(kind or ("one_way_partition" if one_way else "silent_partition"),
                  f"{a} -> {b}" if one_way else f"{a} x {b}")
        pairs = [(a, b)] if one_way else [(a, b), (b, a)]
        with self._lock:
            for x, y in pairs:
                self._want(cut, x, y, ["via", self.net.unused_address(), "dev", "eth0"])
        return self._applied(cut)

    def fast_fail(self, a: str, b: str, *, how: str = "unreachable", one_way: bool = False) -> Cut:
        """Connections from ``a`` to ``b`` (and back) fail at once (``how``: unreachable | prohibit)."""
        if how not in ("unreachable", "prohibit"):
            raise HostsError(f"fast-failing partition: {how!r} is neither unreachable nor prohibit")
        cut = Cut("fast_fail_partition", f"{a} x {b} ({how})" if not one_way else f"{a} -> {b} ({how})")
        with self._lock:
            for x, y in ([(a, b)] if one_way else [(a, b), (b, a)]):
                self._want(cut, x, y, [how])
        return self._applied(cut)

    def isolate(self, host: str) -> Cut:
        """``host`` loses its link (every connection of it hangs)."""
        cut = Cut("host_isolated", host, links=[host])
        with self._lock:
            self._links_down[host] = self._links_down.get(host, 0) + 1
            if self._links_down[host] == 1:
                self.net.set_link(host, False)
        return self._applied(cut)

    def split(self, side_a: list[str], side_b: list[str], *, kind: str = "majority_minority_split") -> Cut:
        """Every host of ``side_a`` is silently cut from every host of ``side_b``."""
        cut = Cut(kind, f"{','.join(side_a)} | {','.join(side_b)}")
        with self._lock:
            for a in side_a:
                for b in side_b:
                    self._want(cut, a, b, ["via", self.net.unused_address(), "dev", "eth0"])
                    self._want(cut, b, a, ["via", self.net.unused_address(), "dev", "eth0"])
        return self._applied(cut)

    def bridge(self, a: str, b: str, c: str) -> Cut:
        """``a`` sees ``b``, ``b`` sees ``c``, ``a`` does not see ``c`` (``b`` is the bridge)."""
        cut = self.split([a], [c], kind="bridge")
        cut.detail = f"{a} - {b} - {c} ({a} x {c})"
        return cut

    def local_port(self, host: str, port: int, kind: str = "local_port_cut") -> Cut:
        """Processes of ``host`` can no longer reach its own ``port`` (silently); other hosts still can."""
        cut = Cut(kind, f"{host}:{port} from {host}")
        with self._lock:
            h = self.net.host(host)
            if host not in self._local_moved:
                h.ip("rule", "add", "pref", str(LOCAL_PREF), "table", "local")
                h.ip("rule", "del", "pref", "0", "table", "local")
                self._local_moved.add(host)
            pref = self._next_pref.get(host, LOCAL_PREF - 1)
            self._next_pref[host] = pref - 1
            h.ip("rule", "add", "pref", str(pref), "iif", "lo", "from", h.address, "to", h.address, "ipproto", "tcp",
                 "sport", str(port), "blackhole")
            cut.rules.append((host, pref))
        return self._applied(cut)

    def flap(self, a: str, b: str, *, period_s: float = 0.3, duration_s: float = 5.0) -> Cut:
        """Cut and heal ``a`` x ``b`` every ``period_s`` for ``duration_s`` (in a thread; :meth:`heal`
        stops it early). Counted once."""
        cut = Cut("flapping", f"{a} x {b} every {period_s * 1000:.0f} ms for {duration_s:.0f} s",
                  stop=threading.Event())
        stop = cut.stop
        assert stop is not None

        def run() -> None:
            inner: Cut | None = None
            ticks = int(duration_s / period_s)
            for i in range(ticks):
                if stop.is_set():
                    break
                with self._lock:
                    if i % 2 == 0:
                        inner = Cut("flapping", cut.detail)
                        for x, y in ((a, b), (b, a)):
                            self._want(inner, x, y, ["via", self.net.unused_address(), "dev", "eth0"])
                    elif inner is not None:
                        self._unwant(inner)
                        inner = None
                stop.wait(period_s)
            with self._lock:
                if inner is not None:
                    self._unwant(inner)
        cut.thread = threading.Thread(target=run, name=f"flap-{a}-{b}", daemon=True)
        self._applied(cut)
        cut.thread.start()
        return cut

    # -- healing -------------------------------------------------------------------------------------
    def heal(self, cut: Cut) -> None:
        """Undo one fault (what other faults still want stays)."""
        if cut.healed:
            return
        if cut.stop is not None and cut.thread is not None:
            cut.stop.set()
            cut.thread.join(timeout=10)
        with self._lock:
            self._unwant(cut)
            for host, pref in cut.rules:
                self.net.host(host).ip("rule", "del", "pref", str(pref))
            for host in cut.links:
                self._links_down[host] -= 1
                if self._links_down[host] == 0:
                    self.net.set_link(host, True)
            cut.healed = True
            if cut in self.active:
                self.active.remove(cut)

    def heal_all(self) -> None:
        """Undo every fault, and the permanent neighbour entries and moved local rules (invariant 2)."""
        for cut in list(self.active):
            self.heal(cut)
        with self._lock:
            for host in sorted(self._neighbour_set):
                self.net.host(host).ip("neigh", "del", self.net.unused_address(), "dev", "eth0", check=False)
            self._neighbour_set.clear()
            for host in sorted(self._local_moved):
                h = self.net.host(host)
                h.ip("rule", "add", "pref", "0", "table", "local")
                h.ip("rule", "del", "pref", str(LOCAL_PREF), "table", "local")
            self._local_moved.clear()
            self._next_pref.clear()

    # -- internals -----------------------------------------------------------------------------------
    def _applied(self, cut: Cut) -> Cut:
        with self._lock:
            self.active.append(cut)
            self.counts[cut.kind] = self.counts.get(cut.kind, 0) + 1
        if self.record is not None:
            self.record(cut.kind, cut.detail)
        return cut

    def _host(self, name: str) -> Host:
        return self.net.host(name)

    def _want(self, cut: Cut, a: str, b: str, spec: list[str]) -> None:
        key = (a, self._host(b).address)
        if spec[0] == "via" and a not in self._neighbour_set:
            self._host(a).ip("neigh", "replace", self.net.unused_address(), "lladdr", UNUSED_MAC, "dev", "eth0",
                             "nud", "permanent")
            self._neighbour_set.add(a)
        self._wanted.setdefault(key, []).append((cut, spec))
        cut.routes.append(key)
        self._install(key)

    def _unwant(self, cut: Cut) -> None:
        for key in dict.fromkeys(cut.routes):
            stack = self._wanted.get(key, [])
            stack[:] = [(c, s) for c, s in stack if c is not cut]
            self._install(key)
        cut.routes.clear()

    def _install(self, key: tuple[str, str]) -> None:
        host, peer = key
        stack = self._wanted.get(key, [])
        h = self._host(host)
        if stack:
            spec = stack[-1][1]
            if spec[0] in ("unreachable", "prohibit"):
                h.ip("route", "replace", spec[0], f"{peer}/32")
            else:
                h.ip("route", "replace", f"{peer}/32", *spec)
        else:
            self._wanted.pop(key, None)
            h.ip("route", "del", f"{peer}/32", check=False)
