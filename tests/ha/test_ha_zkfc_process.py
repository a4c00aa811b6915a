"""Real ZKFC processes (``qjournal zkfc``) against fake NameNodes served by RpcServer in the test.

Shows: the daemon prints READY and elects one active; kill -9 of the active's
ZKFC lets the other take over once the dead session expires, fencing the old
NameNode gracefully; a NameNode that stops answering (its RPC server gone) is
fenced with the configured shell method, which sees Hadoop's environment
variables; ``-formatZK`` refuses to clobber without ``-force``; each controller's ``/metrics`` shows
its health, elector state and place in the election.
"""

import asyncio
import json
import os
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qjournal.config.conf import Configuration
from qjournal.transport import RpcClient, RpcServer
from qjournal.util.proc import qjournal_argv, start_daemon

from .fake_ha import FakeHAService
from qjournal.util.waiting import async_wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
DEADLINE_S = 30.0


def write_conf(conf_dir, quorum, parent, nn_ports, zkfc_ports, fencing=""):
    conf = Configuration()
    conf.set("dfs.nameservices", "ns1")
    conf.set("dfs.ha.namenodes.ns1", ",".join(sorted(nn_ports)))
    for nn, port in sorted(nn_ports.items()):
        conf.set(f"dfs.namenode.rpc-address.ns1.{nn}", f"127.0.0.1:{port}")
        conf.set(f"dfs.ha.zkfc.rpc-address.ns1.{nn}", f"127.0.0.1:{zkfc_ports[nn]}")
        conf.set(f"qjournal.zkfc.http-address.ns1.{nn}", "127.0.0.1:0")
    conf.set("dfs.ha.automatic-failover.enabled", "true")
    conf.set("ha.zookeeper.quorum", quorum)
    conf.set("ha.zookeeper.parent-znode", parent)
    conf.set("ha.zookeeper.session-timeout.ms", "2000")
    conf.set("ha.health-monitor.check-interval.ms", "200")
    conf.set("ha.health-monitor.rpc-timeout.ms", "1000")
    conf.set("ha.health-monitor.connect-retry-interval.ms", "200")
    conf.set("ha.failover-controller.graceful-fence.rpc-timeout.ms", "1000")
    conf.set("ha.failover-controller.sleep-after-failure-to-become-active.ms", "300")
    conf.set("dfs.ha.fencing.methods", fencing)
    os.makedirs(conf_dir, exist_ok=True)
    conf.write_xml(os.path.join(conf_dir, "hdfs-site.xml"))


async def zkfc_status(port):
    c = await RpcClient.connect_tcp("127.0.0.1", port, connect_timeout_ms=2000)
    try:
        return await c.call("get_zkfc_status", timeout_ms=5000, events=True)
    finally:
        await c.close()


def zkfc_metrics(http_url):
    """``{(sample name, sorted labels): value}`` of a ZKFC's ``/metrics``."""
    with urllib.request.urlopen(http_url + "/metrics", timeout=10) as r:  # noqa: S310 - loopback test URL
        text = r.read().decode()
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


def test_format_zk_refuses_to_clobber(zookeeper, zk_parent, tmp_path):
    conf_dir = str(tmp_path / "conf")
    write_conf(conf_dir, zookeeper.connect_string, zk_parent, {"nn1": 1, "nn2": 2}, {"nn1": 3, "nn2": 4})
    argv = qjournal_argv("--conf", conf_dir, "zkfc", "-formatZK")
    r1 = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r1.returncode == 0, r1.stderr
    r2 = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r2.returncode != 0 and "already exists" in r2.stderr and f"{zk_parent}/ns1" in r2.stderr
    r3 = subprocess.run(argv + ["-force"], capture_output=True, text=True, timeout=60)
    assert r3.returncode == 0, r3.stderr


def test_zkfc_processes_kill9_and_unresponsive_namenode(zookeeper, zk_parent, tmp_path):
    fence_env = tmp_path / "fence-env.json"
    fencing = ("shell(" + sys.executable + " -c \"import json,os; json.dump({k: v for k, v in os.environ.items() "
               f"if k.startswith('target_')}}, open('{fence_env}', 'w'))\")")

    async def main():
        services, servers, nn_ports = {}, {}, {}
        for nn in ("nn1", "nn2"):
            services[nn] = FakeHAService(nn)
            servers[nn] = RpcServer(services[nn], name=f"fake-{nn}")
            _, nn_ports[nn] = await servers[nn].start_tcp("127.0.0.1", 0)
        zkfc_ports = {nn: 0 for nn in ("nn1", "nn2")}   # port 0: the READY line says which
        conf_dir = str(tmp_path / "conf")
        write_conf(conf_dir, zookeeper.connect_string, zk_parent, nn_ports, zkfc_ports, fencing)
        r = await asyncio.to_thread(subprocess.run, qjournal_argv("--conf", conf_dir, "zkfc", "-formatZK"),
                                    capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        daemons = {}
        try:
            for nn in ("nn1", "nn2"):
                daemons[nn] = await asyncio.to_thread(
                    start_daemon, f"zkfc-{nn}", qjournal_argv("--conf", conf_dir, "zkfc", "--nn-id", nn),
                    log_path=str(tmp_path / f"zkfc-{nn}.log"), ready_timeout_s=60)
                zkfc_ports[nn] = int(daemons[nn].ready["rpc"].rsplit(":", 1)[1])
                assert zkfc_ports[nn] > 0 and daemons[nn].ready["nn_id"] == nn

            def actives():
                return sorted(n for n, s in services.items() if s.state == "active")
            await async_wait_until(lambda: len(actives()) == 1, "one active", DEADLINE_S)
            first = actives()[0]
            second = "nn2" if first == "nn1" else "nn1"
            st = await zkfc_status(zkfc_ports[first])
            assert st["elector_state"] == "ACTIVE" and st["health"] == "SERVICE_HEALTHY"
            # the controllers' /metrics say the same (the alert rules read them)
            seen = {}

            async def elector_states_settled():
                for nn in ("nn1", "nn2"):
                    seen[nn] = await asyncio.to_thread(zkfc_metrics, daemons[nn].ready["http_url"])
                want = {first: "ACTIVE", second: "STANDBY"}
                return all(seen[nn][("qjournal_zkfc_elector_state", (("state", want[nn]),))] == 1 for nn in want)
            await async_wait_until(elector_states_settled, "the controllers' /metrics: ACTIVE, STANDBY", DEADLINE_S)
            for nn in ("nn1", "nn2"):
                m = seen[nn]
                assert m[("qjournal_zkfc_in_election", ())] == 1.0
                assert m[("qjournal_zkfc_health_state", (("state", "SERVICE_HEALTHY"),))] == 1.0
                assert m[("qjournal_zkfc_transitions_to_active_total", ())] == (1.0 if nn == first else 0.0)

            # 1. kill -9 the active's ZKFC: its session expires, the other fences nn gracefully
            await asyncio.to_thread(daemons[first].kill)
            await async_wait_until(lambda: services[second].state == "active",
                                   f"{second} active after kill -9 of zkfc-{first}", DEADLINE_S)
            assert services[first].state == "standby"   # graceful fence made it standby
            assert services[first].history[-1][3] == "zkfc"
            st2 = await zkfc_status(zkfc_ports[second])
            names = [e[1] for e in st2["events"]]
            assert "fence_old_active_done" in names
            assert not fence_env.exists()                  # graceful fencing was enough

            # restart the dead controller: it joins as standby
            daemons[first] = await asyncio.to_thread(
                start_daemon, f"zkfc-{first}", qjournal_argv("--conf", conf_dir, "zkfc", "--nn-id", first),
                log_path=str(tmp_path / f"zkfc-{first}.log"), ready_timeout_s=60)
            zkfc_ports[first] = int(daemons[first].ready["rpc"].rsplit(":", 1)[1])
            await async_wait_until(lambda: services[first].state == "standby", "standby", DEADLINE_S)

            # 2. the active NameNode stops answering (its server goes away): the other side
            #    takes over and fences it with the shell method
            await servers[second].stop()
            await async_wait_until(lambda: services[first].state == "active",
                                   f"{first} active after {second} stopped answering", DEADLINE_S)
            env = json.loads(fence_env.read_text())
            assert env["target_namenodeid"] == second and env["target_nameserviceid"] == "ns1"
            assert env["target_port"] == str(nn_ports[second])
            assert env["target_address"] == f"127.0.0.1:{nn_ports[second]}"
            assert env["target_host"] == "127.0.0.1"
        finally:
            for d in daemons.values():
                await asyncio.to_thread(d.stop)
            for s in servers.values():
                await s.stop()
        for d in daemons.values():
            assert not d.alive()
    asyncio.run(main())


def znode_exists(quorum: str, path: str) -> bool:
    from kazoo.client import KazooClient  # noqa: PLC0415 - the test's own view of ZooKeeper

    zk = KazooClient(hosts=quorum, timeout=10)
    zk.start(timeout=10)
    try:
        return zk.exists(path) is not None
    finally:
        zk.stop()
        zk.close()


def test_clean_stop_of_the_active_controller_deletes_its_breadcrumb(zookeeper, zk_parent, tmp_path):
    """SIGTERM of the active's ZKFC: its NameNode is made standby, the lock and the breadcrumb are deleted
    (seed 004: a clean hand-over leaves nothing to fence), the process exits 0, and the next controller
    becomes active without fencing anybody."""
    fence_env = tmp_path / "fence-env.json"

    async def main():
        services, servers, nn_ports = {}, {}, {}
        for nn in ("nn1", "nn2"):
            services[nn] = FakeHAService(nn)
            servers[nn] = RpcServer(services[nn], name=f"fake-{nn}")
            _, nn_ports[nn] = await servers[nn].start_tcp("127.0.0.1", 0)
        conf_dir = str(tmp_path / "conf")
        write_conf(conf_dir, zookeeper.connect_string, zk_parent, nn_ports, {"nn1": 0, "nn2": 0},
                   f"shell(touch {fence_env})")
        r = await asyncio.to_thread(subprocess.run, qjournal_argv("--conf", conf_dir, "zkfc", "-formatZK"),
                                    capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        lock, crumb = f"{zk_parent}/ns1/ActiveStandbyElectorLock", f"{zk_parent}/ns1/ActiveBreadCrumb"
        daemons = {}
        try:
            daemons["nn1"] = await asyncio.to_thread(
                start_daemon, "zkfc-nn1", qjournal_argv("--conf", conf_dir, "zkfc", "--nn-id", "nn1"),
                log_path=str(tmp_path / "zkfc-nn1.log"), ready_timeout_s=60)
            await async_wait_until(lambda: services["nn1"].state == "active", "nn1 active", DEADLINE_S)
            assert await asyncio.to_thread(znode_exists, zookeeper.connect_string, crumb)
            rc = await asyncio.to_thread(daemons["nn1"].stop, 30)
            assert rc == 0
            assert services["nn1"].state == "standby" and services["nn1"].history[-1][3] == "zkfc"
            assert not await asyncio.to_thread(znode_exists, zookeeper.connect_string, crumb)
            assert not await asyncio.to_thread(znode_exists, zookeeper.connect_string, lock)
            log_text = (tmp_path / "zkfc-nn1.log").read_text()
            assert "breadcrumb_deleted" in log_text or '"breadcrumb_deleted": true' in log_text, log_text[-2000:]
            daemons["nn2"] = await asyncio.to_thread(
                start_daemon, "zkfc-nn2", qjournal_argv("--conf", conf_dir, "zkfc", "--nn-id", "nn2"),
                log_path=str(tmp_path / "zkfc-nn2.log"), ready_timeout_s=60)
            await async_wait_until(lambda: services["nn2"].state == "active", "nn2 active", DEADLINE_S)
            port = int(daemons["nn2"].ready["rpc"].rsplit(":", 1)[1])
            names = [e[1] for e in (await zkfc_status(port))["events"]]
            assert "no_breadcrumb" in names and "fence_start" not in names, names
            assert not fence_env.exists() and services["nn1"].history[-1][2] == "standby"
        finally:
            for d in daemons.values():
                await asyncio.to_thread(d.stop)
            for s in servers.values():
                await s.stop()
    asyncio.run(main())


class ConfusedHAService(FakeHAService):
    """A NameNode whose status cannot be interpreted: the health monitor fails for good."""

    async def rpc_get_service_status(self) -> dict:
        return {"state": "confused"}


def test_controller_exits_3_when_its_health_monitor_fails(zookeeper, zk_parent, tmp_path):
    """HEALTH_MONITOR_FAILED ends the ZKFC with exit status 3 and the reason on stderr (its service unit's
    Restart=on-failure restarts it), after leaving the election."""
    async def main():
        svc = ConfusedHAService("nn1")
        server = RpcServer(svc, name="fake-nn1")
        _, nn_port = await server.start_tcp("127.0.0.1", 0)
        conf_dir = str(tmp_path / "conf")
        write_conf(conf_dir, zookeeper.connect_string, zk_parent, {"nn1": nn_port, "nn2": 1}, {"nn1": 0, "nn2": 0})
        r = await asyncio.to_thread(subprocess.run, qjournal_argv("--conf", conf_dir, "zkfc", "-formatZK"),
                                    capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        try:
            r = await asyncio.to_thread(subprocess.run,
                                        qjournal_argv("--conf", conf_dir, "zkfc", "--nn-id", "nn1"),
                                        capture_output=True, text=True, timeout=60)
        finally:
            await server.stop()
        assert r.returncode == 3, (r.returncode, r.stderr[-2000:])
        assert "health monitor failed" in r.stderr and "confused" in r.stderr, r.stderr[-2000:]
        assert svc.state == "standby" and svc.history == []    # never made active
        assert not await asyncio.to_thread(znode_exists, zookeeper.connect_string,
                                           f"{zk_parent}/ns1/ActiveStandbyElectorLock")
    asyncio.run(main())
