"""Real faults between real hosts (issue 28): network, the HA cases, clocks and disks, under client load.

The cluster of docs/deploy.md, with ZooKeeper on hosts of its own (so a host can be cut from ZooKeeper
and not from the JournalNodes), every daemon started under a preload drop-in (libfaketime or libfiu,
``qjournal.hosts.preload``). Each test is one fault family under the clients of ``c1`` and ``c2``; their
histories, merged with the faults, are judged by the cluster checker's rules and searched for a
linearization. ``QJOURNAL_NEMESIS_S=1800`` runs the seeded nemesis for that long (``make soak``).
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from qjournal.hosts.nemesis import FAMILIES, HA_CASES, JN, NN, ZK, ZKFC, Nemesis
from qjournal.hosts.netns import HostsError
from qjournal.hosts.preload import unavailable_reason as preload_unavailable
from qjournal.sim.checker import check
from qjournal.sim.history import OpAcked, OpFailed
from qjournal.sim.linearizability import check_linearizable, violations_of
from qjournal.util.waiting import wait_until

from qjournal.hosts.netns import unavailable_reason as hosts_unavailable

from .conftest import DEPLOY_DOC, deploy

pytestmark = [pytest.mark.slow, pytest.mark.hosts, pytest.mark.xdist_group("hosts")]

LOAD_HOSTS = ("c1", "c2")
SEED = int(os.environ.get("QJOURNAL_NEMESIS_SEED", "0"))


def separate_zookeeper(doc: str) -> str:
    """docs/deploy.md with ZooKeeper on zk1-zk3 and the JournalNodes alone on jn1-jn3."""
    for i in (1, 2, 3):
        pat = re.compile(rf'\[hosts\.jn{i}\]\nroles = \["journalnode", "zookeeper"\]\nzookeeper-id = {i}[^\n]*\n')
        doc, n = pat.subn(f'[hosts.zk{i}]\nroles = ["zookeeper"]\nzookeeper-id = {i}\n\n'
                          f'[hosts.jn{i}]\nroles = ["journalnode"]\n', doc)
        assert n == 1, f"docs/deploy.md's description changed: jn{i} not found as expected"
    # a health check that hangs (a ZKFC cut silently from its own NameNode) fails after 5 s, not Hadoop's 45 s
    old = '"ha.health-monitor.check-interval.ms" = 500\n'
    assert old in doc, "docs/deploy.md's description changed: no health-monitor interval"
    return doc.replace(old, old + '"ha.health-monitor.rpc-timeout.ms" = 5000\n')


@pytest.fixture(scope="module")
def nemesis(tmp_path_factory, package):
    for why in (hosts_unavailable(), preload_unavailable()):
        if why is not None:
            pytest.skip(f"fault tests skipped: {why}")
    holder = {}
    workdir = str(tmp_path_factory.mktemp("faults"))

    def install(cluster):
        holder["n"] = Nemesis(cluster, SEED, os.path.join(workdir, "clock"))
        holder["n"].install()
    cluster = deploy(workdir, package, doc_text=separate_zookeeper(DEPLOY_DOC.read_text()), before_start=install)
    try:
        yield holder["n"]
    finally:
        cluster.close()


def _judge(n: Nemesis, title: str, t0: float) -> dict:
    """Stop the loads, merge their histories with the faults and the final namespace, check both ways."""
    cluster = n.cluster
    n.heal_all()
    wait_until(lambda: n.active_host(), "one active NameNode after healing", 90)
    parts = cluster.stop_loads() + [[e for e in n.events if e.time >= t0]] + [cluster.snapshot("c1")]
    history = cluster.history(parts)
    lin = check_linearizable(history, clock=time.monotonic, budget_s=120)   # searched once: judged and reported
    violations = check(history, linearizability=False) + violations_of(lin)
    acked, failed = len(history.of(OpAcked)), len(history.of(OpFailed))
    print(f"\n{title}: {len(history)} events, {acked} operations acknowledged, {failed} failed; "
          f"linearizability: {lin.verdict} ({lin.parts} parts, {lin.operations} operations, {lin.steps} steps)")
    for v in violations:
        print(f"VIOLATION {v}")
    assert not violations, history.format(only=sorted({s for v in violations for s in v.seqs}))
    assert not n.errors, n.errors
    assert acked > 50, "the clients did little: the run judges nothing"
    return {"acked": acked, "failed": failed}


def _load(n: Nemesis, seed: int) -> float:
    for i, h in enumerate(LOAD_HOSTS):
        n.cluster.start_load(h, clients=2, seed=seed + i)
    wait_until(lambda: n.active_host(), "an active NameNode", 60)
    return time.monotonic()


def _held(n: Nemesis, cut, until=None, timeout_s: float = 30.0, at_least_s: float = 2.0) -> None:
    """Keep a fault for ``at_least_s`` and until ``until()`` holds (with a deadline), then heal it."""
    t = time.monotonic()

    def done() -> bool:
        n.supervise()    # Restart=always: a NameNode that a newer writer fenced comes back as a standby
        return time.monotonic() - t >= at_least_s and (until is None or bool(until()))
    try:
        wait_until(done, f"the effect of {cut.kind}", timeout_s, poll_s=0.5)
    finally:
        n.net.heal(cut)


def test_network_faults_between_hosts(nemesis):
    """Every network fault kind once, on the servers' links, under load: nothing lost or invented, every
    history linearizable."""
    n = nemesis
    t0 = _load(n, 100)
    nf = n.net
    _held(n, nf.silent("jn1", "nn1"))
    _held(n, nf.silent("nn2", "jn2", one_way=True))
    _held(n, nf.fast_fail("jn3", "nn1", how="unreachable"))
    _held(n, nf.isolate("jn2"))
    _held(n, nf.split(["zk1", "jn1", "nn2"], ["zk2", "zk3", "jn2", "jn3", "nn1"]))
    _held(n, nf.bridge("jn1", "jn2", "nn1"))
    cut = nf.flap("jn3", "nn2", period_s=0.3, duration_s=3)
    _held(n, cut, at_least_s=3.2)
    assert set(FAMILIES["network"]) <= set(n.counts), n.counts
    _judge(n, "network faults", t0)


@pytest.mark.timeout(600)   # five failovers with their healing; about 2 minutes on a loaded machine
def test_the_ha_cases_by_name(nemesis):
    """The HA cases: the active cut from ZooKeeper only, from the JournalNodes only, from its clients
    only; its ZKFC cut from its own NameNode; the ensemble split 2/1 with the active's ZKFC on the
    minority. Each but the clients' cut moves the active role to the other NameNode; the cut from the
    clients holds the clients up and moves nothing."""
    n = nemesis
    t0 = _load(n, 200)
    moved = {}
    for case in HA_CASES:
        n.heal_all()     # every daemon runs again (the previous case may have stopped a NameNode)
        before = wait_until(lambda: n.active_host(), "one active NameNode", 60)
        assert n.ha_case(case)
        n.pending.pop()   # the nemesis scheduled its healing: this test heals the cut itself
        cut = next(c for c in reversed(n.net.active) if c.kind == case)
        if case == "active_cut_from_clients":
            _held(n, cut, at_least_s=4.0)
        else:
            _held(n, cut, until=lambda: n.active_host() not in (None, before), timeout_s=45)
        moved[case] = (before, wait_until(lambda: n.active_host(), "one active NameNode after the cut", 60))
        print(f"{case}: active {moved[case][0]} -> {moved[case][1]}")
    assert all(n.counts.get(c) == 1 for c in HA_CASES), n.counts
    _judge(n, "the HA cases", t0)


def test_clock_faults_on_every_role(nemesis):
    """Wall clocks jump ten minutes forwards and backwards and run fast and slow on every role (ZooKeeper
    included): no failover, nothing lost or acknowledged twice (the monotonic clock governs every timeout,
    lease, session and failover decision)."""
    n = nemesis
    t0 = _load(n, 300)
    active = n.active_host()
    clocked = [(h, u) for h, m in sorted(n.modes.items()) if m == "clock" for u in n.units(h)]
    assert {u for _, u in clocked} == {ZK, JN, NN, ZKFC}, clocked
    for i, (h, u) in enumerate(clocked):
        n.proc.jump(h, u, 600 if i % 2 == 0 else -600)
    time.sleep(2.0)   # the clocks stay moved while the clients work (libfaketime re-reads its file each second)
    for i, (h, u) in enumerate(clocked):
        n.proc.jump(h, u, -1200 if i % 2 == 0 else 1200)
    time.sleep(2.0)
    for i, (h, u) in enumerate(clocked):
        n.proc.rate(h, u, 5.0 if i % 2 == 0 else 0.1)
    time.sleep(2.0)
    for h, u in clocked:
        n.proc.clock_reset(h, u)
    assert n.active_host() == active, "a wall-clock fault moved the active role"
    assert {"clock_jump_forward", "clock_jump_backward", "clock_fast", "clock_slow"} <= set(n.counts)
    _judge(n, "clock faults", t0)


def test_disk_faults_on_journalnodes_and_a_namenode(nemesis):
    """fdatasync/fsync EIO, write ENOSPC and EIO, read EIO on one JournalNode at a time, and a write fault on
    a NameNode's process: the quorum goes on without the failing node, nothing acknowledged is lost."""
    n = nemesis
    t0 = _load(n, 400)
    disk_jns = [h for h, m in sorted(n.modes.items()) if m == "disk" and h in n.jns]
    for kind, host in zip(("fsync_eio", "write_enospc", "write_eio", "read_eio"), disk_jns * 4):
        if not n.cluster.services[host].is_active(JN):
            wait_until(lambda: (n.supervise(), n.cluster.services[host].is_active(JN))[1], f"{host} back", 30)
        n.proc.disk_fault(host, JN, kind)
        time.sleep(2.0)   # the clients write through the fault
        n.proc.disk_heal(host, JN)
    nn_host = next(h for h, m in sorted(n.modes.items()) if m == "disk" and h in n.nns)
    try:
        n.proc.disk_fault(nn_host, NN, "fsync_eio")
        time.sleep(2.0)
        n.proc.disk_heal(nn_host, NN)
    except HostsError as e:      # it exited on the failed sync already (Restart= brings it back)
        print(f"NameNode disk fault: {e}")
    assert {"fsync_eio", "write_enospc", "write_eio", "read_eio"} <= set(n.counts)
    _judge(n, "disk faults", t0)


@pytest.mark.skipif(not os.environ.get("QJOURNAL_NEMESIS_S"), reason="the long nemesis run: QJOURNAL_NEMESIS_S=1800 "
                    "(make soak)")
@pytest.mark.timeout(int(float(os.environ.get("QJOURNAL_NEMESIS_S") or 0)) + 1200)   # the run, deployment and judging
def test_nemesis_soak(nemesis, tmp_path):
    """The seeded nemesis for QJOURNAL_NEMESIS_S seconds: every fault kind, judged by both checkers."""
    n = nemesis
    duration = float(os.environ["QJOURNAL_NEMESIS_S"])
    before = dict(n.counts)
    t0 = _load(n, 1000 + SEED)
    n.run(duration)
    result = _judge(n, f"nemesis seed {SEED}, {duration:.0f} s", t0)
    counts = {k: v - before.get(k, 0) for k, v in sorted(n.counts.items()) if v - before.get(k, 0)}
    report = {"seed": SEED, "duration_s": duration, "counts": counts, **result, "loadavg": open("/proc/loadavg").read()}
    print(json.dumps(report, indent=2))
    out = os.environ.get("QJOURNAL_NEMESIS_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=2)
    missing = [k for fam in FAMILIES.values() for k in fam if k not in counts]
    assert not missing, f"fault kinds that never occurred: {missing}"
