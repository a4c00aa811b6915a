"""The cluster on hosts, deployed as docs/deploy.md says: units, addresses, a rolling restart, a failover.

Each host is a network namespace with its own address, name, configuration, data and logs
(``qjournal.hosts``); every daemon was started from the command line of its installed unit, and every
step is a block of docs/deploy.md. Clients run on their own hosts (``c1``, ``c2``) from the installed
package and their histories are judged by the cluster checker of the simulator and the chaos runs.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from qjournal.deploy import layout
from qjournal.deploy.units import units_for_roles
from qjournal.hosts.cluster import HostCluster, step_stats
from qjournal.util.waiting import wait_until
from qjournal.hosts.runbook import parse_runbook
from qjournal.sim.checker import check
from qjournal.sim.history import Fault, OpFailed

from .conftest import DEPLOY_DOC, FIRST_START

pytestmark = [pytest.mark.slow, pytest.mark.hosts, pytest.mark.xdist_group("hosts")]

LOAD_HOSTS = ("c1", "c2")


def _judge(cluster: HostCluster, parts: list, steps: list[tuple[str, float, float]], title: str) -> list:
    """Merge the clients' histories with the test's and the final namespace, check, print the steps."""
    parts = parts + [cluster.snapshot("c1")]
    history = cluster.history(parts)
    violations = check(history)
    stats = step_stats(history, steps)
    print(f"\n{title}: {len(history)} events")
    for s in stats:
        print("  " + s.row())
    for v in violations:
        print(f"VIOLATION {v}")
    assert not violations, history.format(only=sorted({s for v in violations for s in v.seqs}))
    failed = history.of(OpFailed)
    assert not failed, f"clients saw failed operations: {failed[:5]}"
    return stats


def test_every_process_runs_its_units_command_line(cluster):
    """Each daemon's argv is its installed unit's ExecStart=, and systemd-analyze accepts every unit."""
    for name, spec in cluster.desc.hosts.items():
        host = cluster.net.host(name)
        for unit in units_for_roles(spec.roles):
            mgr = cluster.services[name]
            d = mgr.daemon(unit)
            assert d is not None and d.alive(), f"{name}: {unit} is not running"
            with open(f"/proc/{d.pid}/cmdline", "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0") if a]
            want = list(mgr.unit(unit).exec_start)
            if unit == "qjournal-zookeeper.service":   # `zookeeper server` execs the JVM
                assert argv[0] == "java" and argv[-1] == f"{layout.CONF_DIR}/zoo.cfg", argv
            else:
                # the console script runs under the environment's interpreter: python3 /opt/qjournal/bin/qjournal ...
                assert argv[1:] == want and argv[0].startswith(f"{layout.PREFIX}/bin/python"), (argv, want)
        r = host.run(["sh", "-c", "systemd-analyze verify /etc/systemd/system/qjournal-*.service 2>&1 || true"]) \
            if units_for_roles(spec.roles) else None
        assert r is None or r.stdout.strip() == "", f"{name}: systemd-analyze verify says:\n{r.stdout}"


def test_nothing_leans_on_loopback_or_a_shared_configuration(cluster):
    """Rendered files name hosts, never 127.0.0.1; every daemon listens on its own host's address and reads
    only its own host's /etc/qjournal (no -D, nothing shared)."""
    for name in cluster.desc.hosts:
        host = cluster.net.host(name)
        for f in ("core-site.xml", "hdfs-site.xml"):
            text = open(host.path(f"{layout.CONF_DIR}/{f}")).read()
            assert "127.0.0.1" not in text and "localhost" not in text, f"{name}:{f}"
        listening = host.run(["ss", "-Hltn"]).stdout.split("\n")
        locals_ = {ln.split()[3] for ln in listening if ln.strip()}
        loopback = sorted(a for a in locals_ if a.startswith("127.") or a.startswith("[::1]"))
        assert not loopback, f"{name} listens on loopback: {loopback}"
        for d in cluster.services[name].host.daemons.values():
            if not d.alive():
                continue
            with open(f"/proc/{d.pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            assert b"-D" not in argv, f"{name}: a -D override in {argv}"
    # the JournalNodes and NameNodes listen on their own address (ZooKeeper's client port on all of the host's)
    for spec in cluster.desc.with_role("journalnode") + cluster.desc.with_role("namenode"):
        host = cluster.net.host(spec.name)
        listening = host.run(["ss", "-Hltn"]).stdout
        assert f"{host.address}:8485" in listening or "journalnode" not in spec.roles, listening
        assert f"{host.address}:8020" in listening or "namenode" not in spec.roles, listening


def test_rolling_restart_no_client_notices(cluster):
    """docs/deploy.md section 6 under load from c1 and c2: each JournalNode, each ZooKeeper server, the
    standby NameNode, a failover, the other NameNode; no failed operation, nothing acknowledged lost."""
    for i, h in enumerate(LOAD_HOSTS):
        cluster.start_load(h, clients=2, seed=i)
    steps: list[tuple[str, float, float]] = []

    def step(name: str, block: str, hosts: list[str], **env: str) -> None:
        t0 = time.monotonic()
        cluster.run(block, hosts, **env)
        steps.append((name, t0, time.monotonic()))

    time.sleep(2.0)  # steady load before the first step: the workload's duration, not a synchronisation
    t_steady = time.monotonic()
    for jn in cluster.resolve("role:journalnode"):
        step(f"JournalNode {jn}", "restart-journalnode", [jn])
    for zk in cluster.resolve("role:zookeeper"):
        step(f"ZooKeeper on {zk}", "restart-zookeeper", [zk])
    active = wait_until(lambda: cluster.active_namenode("c1"), "one active NameNode", 30)
    standby = next(h.namenode_id for h in cluster.desc.with_role("namenode") if h.namenode_id != active)
    step(f"standby NameNode {standby}", "restart-standby-namenode", [cluster.host_of_namenode(standby)], NN=standby)
    step(f"failover {active} -> {standby}", "failover", [cluster.host_of_namenode(active)], FROM=active, TO=standby)
    step(f"former active {active}", "restart-standby-namenode", [cluster.host_of_namenode(active)], NN=active)
    time.sleep(1.0)
    steps.insert(0, ("steady load (before the steps)", t_steady - 2.0, t_steady))
    parts = cluster.stop_loads()
    _judge(cluster, parts, steps, "rolling restart")
    assert cluster.active_namenode("c1") == standby


def test_active_namenode_host_killed_clients_fail_over(cluster):
    """The demo's scenario on hosts: SIGKILL of every process on the active NameNode's host (its NameNode and
    its ZKFC), the other takes over by itself; the host's units start again (as Restart= would) and it comes
    back as the standby. No failed operation, nothing acknowledged lost."""
    for i, h in enumerate(LOAD_HOSTS):
        cluster.start_load(h, clients=2, seed=10 + i)
    time.sleep(2.0)  # steady load before the fault
    victim = wait_until(lambda: cluster.active_namenode("c1"), "one active NameNode", 30)
    host = cluster.host_of_namenode(victim)
    t_kill = time.monotonic()
    killed = cluster.net.host(host).kill_all(signal.SIGKILL)
    fault = [Fault("host_processes_killed", f"{host}: {victim} active, pids {killed}", time=t_kill)]
    survivor = wait_until(lambda: (a := cluster.active_namenode("c1")) not in (None, victim) and a,
                          f"a NameNode other than {victim} active", 60)
    t_active = time.monotonic()
    for unit in units_for_roles(cluster.desc.host(host).roles):
        cluster.services[host].start(unit)
    wait_until(lambda: cluster.namenode_states("c1").get(victim) == "standby", f"{victim} standby again", 120)
    t_back = time.monotonic()
    time.sleep(1.0)
    parts = cluster.stop_loads()
    stats = _judge(cluster, parts + [fault], [("kill to new active", t_kill, t_active),
                                              ("restart of the killed host's daemons", t_active, t_back)],
                   "failover after SIGKILL of the active's host")
    print(f"  {survivor} active {t_active - t_kill:.1f}s after the kill (session timeout "
          f"{cluster.desc.hdfs_site.get('ha.zookeeper.session-timeout.ms')} ms)")
    assert stats[0].failed == 0


def test_every_marked_block_of_the_doc_is_run_by_a_test():
    """docs/deploy.md and the tests cannot drift: every block with an id is run by name here or in conftest."""
    blocks = set(parse_runbook(DEPLOY_DOC.read_text(), "docs/deploy.md"))
    here = open(__file__).read() + open(DEPLOY_DOC.parent.parent / "tests" / "hosts" / "conftest.py").read()
    heavy = open(DEPLOY_DOC.parent.parent / "tests" / "hosts" / "test_hosts_heavy.py").read()
    named = set(FIRST_START) | set(re.findall(r'"([a-z][a-z0-9-]+)"', here + heavy))
    missing = sorted(blocks - named)
    assert not missing, f"blocks of docs/deploy.md no test runs: {missing}"
