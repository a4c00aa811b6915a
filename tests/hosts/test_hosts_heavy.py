"""The heavier runs on hosts (``make hosts-soak``): a JournalNode host that lost its disk heals, and a
JournalNode is replaced by a new host (a new address), each under client load, each judged by the checker.

Skipped unless ``QJOURNAL_HOSTS_HEAVY=1`` (about two minutes more than the slice in ``make test``).
"""

from __future__ import annotations

import time

import pytest

from qjournal.deploy.description import parse_description
from qjournal.util.waiting import wait_until

from .conftest import deployed, heavy
from .test_deploy_on_hosts import LOAD_HOSTS, _judge

pytestmark = [pytest.mark.slow, pytest.mark.hosts, pytest.mark.xdist_group("hosts")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, package):
    if not heavy():
        pytest.skip("the heavy hosts runs: QJOURNAL_HOSTS_HEAVY=1 (make hosts-soak)")
    yield from deployed(tmp_path_factory, package, "hosts-heavy")


def _load(cluster, seed: int, seconds_s: float = 2.0) -> None:
    for i, h in enumerate(LOAD_HOSTS):
        cluster.start_load(h, clients=2, seed=seed + i)
    time.sleep(seconds_s)  # steady load before the first step


def test_wiped_journalnode_heals(cluster):
    """docs/deploy.md section 8: jn2's journal directory is gone; the node formats itself from its peers,
    copies every finalized segment, and the journal is fully replicated again; clients notice nothing."""
    _load(cluster, 20, 5.0)
    t0 = time.monotonic()
    cluster.run("heal-journalnode", ["jn2"])
    t1 = time.monotonic()
    time.sleep(1.0)
    parts = cluster.stop_loads()
    _judge(cluster, parts, [("jn2 wiped, back and fully replicated", t0, t1)], "wiped JournalNode heals")
    log = open(cluster.net.host("jn2").path("/var/log/qjournal/journalnode.log")).read()
    assert "formatted from its peers" in log


def test_journalnode_replacement(cluster):
    """docs/deploy.md section 7 under load: jn3 stops being a JournalNode and a new host jn4 (a new address)
    takes its place, by a rolling configuration change; clients notice nothing."""
    cluster.add_host("jn4")
    _load(cluster, 30)
    steps: list[tuple[str, float, float]] = []

    def step(name: str, block: str, hosts: list[str] | None = None, **env: str) -> None:
        t0 = time.monotonic()
        cluster.run(block, hosts, **env)
        steps.append((name, t0, time.monotonic()))

    step("stop the old JournalNode (jn3)", "retire-journalnode")
    old = '[hosts.jn3]\nroles = ["journalnode", "zookeeper"]'
    assert old in cluster.description_text
    new_text = cluster.description_text.replace(old, '[hosts.jn3]\nroles = ["zookeeper"]') + \
        '\n[hosts.jn4]\nroles = ["journalnode"]\n'
    cluster.desc = parse_description(new_text, "the description with jn4")
    cluster.copy_description(new_text)
    step("start the new JournalNode (jn4)", "start-new-journalnode")
    cluster.run("render-namenode")
    active = wait_until(lambda: cluster.active_namenode("c1"), "one active NameNode", 30)
    standby = next(h.namenode_id for h in cluster.desc.with_role("namenode") if h.namenode_id != active)
    step(f"standby {standby} with the new URI", "restart-standby-namenode", [cluster.host_of_namenode(standby)],
         NN=standby)
    step(f"failover {active} -> {standby}", "failover", [cluster.host_of_namenode(active)], FROM=active, TO=standby)
    step(f"former active {active} with the new URI", "restart-standby-namenode", [cluster.host_of_namenode(active)],
         NN=active)
    cluster.run("render-others")
    for jn in ("jn1", "jn2"):
        step(f"JournalNode {jn} with the new peer", "restart-journalnode", [jn])
    step("until nothing is under-replicated", "watch-replicas")
    time.sleep(1.0)
    parts = cluster.stop_loads()
    _judge(cluster, parts, steps, "JournalNode replaced by a new host")
    report = cluster.qjournal("c1", "dfsadmin", "-report").stdout
    assert "jn4:8485" in report and "jn3:8485" not in report, report
