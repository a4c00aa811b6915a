"""The failover controllers told as scenarios on the simulated ZooKeeper: tests/testdata/elector/*.txt.

The real ``ZKFailoverController`` (health monitor, elector, fencing) runs against
fake NameNodes and :class:`qjournal.sim.zookeeper.SimZooKeeper` on the virtual-time
loop, so a whole story (a NameNode stops answering while its controller's ZooKeeper
link dies, a session expires, ZooKeeper restarts) runs in milliseconds and prints
the same trace every time. Commands:

* ``start nodes=nn1,nn2`` -- format the nameservice znode, start one controller per node.
* ``run for=<seconds>`` -- let virtual time pass.
* ``service <nn> [healthy=..] [reachable=..] [state=..] [refuse_active=..]`` -- change a NameNode.
* ``link <nn> zk=cut|heal`` -- cut or heal the link between that controller and ZooKeeper.
* ``expire <nn>`` -- ZooKeeper expires that controller's session.
* ``zk crash|restart`` -- the whole ensemble stops / resumes serving.
* ``failover to=<nn>`` -- an operator's graceful failover (``haadmin -failover``).
* ``status`` -- health, elector and service state per node, the lock holder and the breadcrumb.

Every command prints the controllers' events since the previous command (virtual time since
the start, node, event, details). Regenerate with ``pytest tests/ha/test_elector_scenarios.py --rewrite``.
"""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest
from datadriven import Case, run_file  # tests/datadriven.py (tests/ is on sys.path: tests/conftest.py)

from qjournal.errors import QJournalError
from qjournal.ha.fencing import HATarget
from qjournal.ha.zkfc import ZKFailoverController
from qjournal.sim.loop import START_TIME_S, VirtualTimeLoop
from qjournal.sim.zookeeper import SimZooKeeper

from .fake_ha import FakeHAService, FakeProxy, Harness, service_factory

DATA = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "elector"

#: events that only repeat another event's news
QUIET = {"health", "service_state"}


class _Tee(list):
    """A controller's event list that also feeds the scenario's one ordered timeline."""

    def __init__(self, name: str, sink: list) -> None:
        super().__init__()
        self.name, self.sink = name, sink

    def append(self, item) -> None:
        super().append(item)
        self.sink.append((self.name, item))


def _short(v):
    if isinstance(v, str) and v.startswith("{") and '"nn_id"' in v:
        return json.loads(v)["nn_id"]
    if isinstance(v, str) and len(v) > 90:
        return v[:87] + "..."
    return v


class World:
    def __init__(self, loop: VirtualTimeLoop) -> None:
        self.loop = loop
        self.zk = SimZooKeeper(loop.rng)
        self.links: dict[str, bool] = {}
        self.zk.reachable = lambda name: self.links.get(name, True)
        self.harness: Harness | None = None
        self.zkfcs: dict[str, ZKFailoverController] = {}
        self.timeline: list = []
        self.printed = 0

    def trace(self) -> list[str]:
        out = []
        for name, (t, event, details) in self.timeline[self.printed:]:
            if event in QUIET:
                continue
            d = " ".join(f"{k}={_short(v)}" for k, v in sorted(details.items()) if v not in ("", None))
            out.append(f"+{t - START_TIME_S:.3f}s {name} {event}" + (f" {d}" if d else ""))
        self.printed = len(self.timeline)
        return out

    async def start(self, nodes: list[str]) -> None:
        h = self.harness = Harness("sim", "/hadoop-ha", len(nodes), fencing="shell(/bin/true)")
        self.zk.start()
        self.zk.ensure_path(h.settings(nodes[0]).elector.znode_dir)
        for nn in nodes:
            svc = h.services[nn]

            def target_factory(t: HATarget):
                return service_factory(h.services[t.nn_id])

            def zkfc_factory(t: HATarget):
                async def connect() -> FakeProxy:
                    return FakeProxy(self.zkfcs[t.nn_id])
                return connect

            z = ZKFailoverController(h.settings(nn), proxy_factory=service_factory(svc),
                                     target_proxy_factory=target_factory, zkfc_client_factory=zkfc_factory,
                                     zk_factory=lambda s, n=nn: self.zk.client(n, s),
                                     wall_clock=self.loop.time, fence_method_runner=self.fence)
            z.events = _Tee(nn, self.timeline)
            self.zkfcs[nn] = z
            await z.start(serve_rpc=False)

    async def fence(self, method, target, settings) -> str | None:
        """``shell(/bin/true)`` in the simulated world: it always succeeds and stops nothing
        (the journal's epochs are the last guard against a paused old active)."""
        return None

    def status(self) -> list[str]:
        out = []
        for nn, z in sorted(self.zkfcs.items()):
            svc = self.harness.services[nn]
            out.append(f"{nn}: health={z.health.state.value} elector={z.elector.state.value} "
                       f"service={svc.state} zk={z.elector.conn_state.value}"
                       + (f" failed={z.failure!r}" if z.failure else ""))
        el = next(iter(self.zkfcs.values())).settings.elector
        lock = self.zk.znodes.get(el.lock_path)
        crumb = self.zk.znodes.get(el.breadcrumb_path)
        owner = {z.elector.session_id: nn for nn, z in self.zkfcs.items()}
        out.append(f"lock: {owner.get(lock.ephemeral_owner, '?') if lock else 'none'}; "
                   f"breadcrumb: {HATarget.from_bytes(crumb.data).nn_id if crumb else 'none'}")
        return out

    async def handle(self, case: Case) -> list[str]:
        a = case.args
        words = case.raw_cmd.split()
        if case.cmd == "start":
            await self.start(a["nodes"].split(","))
            await asyncio.sleep(0)
        elif case.cmd == "run":
            await asyncio.sleep(float(a["for"].rstrip("s")))
        elif case.cmd == "service":
            svc = self.harness.services[words[1]]
            for k, v in a.items():
                if k in ("healthy", "reachable", "refuse_active"):
                    setattr(svc, k, v == "true")
                elif k == "state":
                    svc._set(v, "scenario")
        elif case.cmd == "link":
            self.links[words[1]] = a["zk"] == "heal"
        elif case.cmd == "expire":
            self.zk.expire(self.zkfcs[words[1]].elector.session_id)
        elif case.cmd == "zk":
            self.zk.crash() if words[1] == "crash" else self.zk.restart()
        elif case.cmd == "failover":
            try:
                r = await self.zkfcs[a["to"]].rpc_graceful_failover()
                return self.trace() + [f"failover: active={r['active']} previous={r['previous']}"]
            except QJournalError as e:
                return self.trace() + [f"failover failed: {type(e).__name__}: {e}"]
        elif case.cmd == "status":
            return self.trace() + self.status()
        else:
            raise ValueError(f"line {case.line}: unknown command {case.cmd!r}")
        return self.trace()

    async def stop(self) -> None:
        for z in self.zkfcs.values():
            await z.stop()
        await self.zk.stop()


@pytest.mark.parametrize("path", sorted(DATA.glob("*.txt")), ids=lambda p: p.name)
def test_elector_scenario(path, rewrite):
    loop = VirtualTimeLoop(seed=0, max_virtual_time_s=3600)
    asyncio.set_event_loop(loop)
    world = World(loop)
    try:
        run_file(path, lambda case: loop.run_until_complete(world.handle(case)), rewrite)
    finally:
        loop.run_until_complete(world.stop())
        asyncio.set_event_loop(None)
        loop.close()


def test_the_stuck_controller_before_the_fix_now_fails_loudly(monkeypatch):
    """The stuck-controller scenario with the elector's old ``quit_election`` (the ZooKeeper error
    escapes it). With watched background tasks the dead health monitor no longer stalls
    silently: the controller fails (its daemon exits non-zero and is restarted). With the fix
    (``stuck_controller.txt``) nothing fails at all and the controller rejoins."""
    from qjournal.ha.elector import ActiveStandbyElector

    async def old_release_or_defer(self, delete_breadcrumb):
        await self._release(delete_breadcrumb=delete_breadcrumb)   # raises ZkConnectionLossError
    monkeypatch.setattr(ActiveStandbyElector, "_release_or_defer", old_release_or_defer)

    loop = VirtualTimeLoop(seed=0, max_virtual_time_s=3600)
    asyncio.set_event_loop(loop)
    world = World(loop)

    def do(line: str) -> None:
        words = line.split()
        args = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        loop.run_until_complete(world.handle(Case(0, words[0], args, raw_cmd=line)))
    try:
        for line in ("start nodes=nn1,nn2", "run for=2s", "service nn1 reachable=false",
                     "link nn1 zk=cut", "run for=6s"):
            do(line)
        z = world.zkfcs["nn1"]
        assert z.failed.is_set()
        assert "ZkConnectionLossError" in z.failure and "background task died" in z.failure
    finally:
        loop.run_until_complete(world.stop())
        asyncio.set_event_loop(None)
        loop.close()
