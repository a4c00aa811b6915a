"""Real ZKFC processes (``qjournal zkfc``) against fake NameNodes served by RpcServer in the test.

Shows: the daemon prints READY and elects one active; kill -9 of the active's
ZKFC lets the other take over once the dead session expires, fencing the old
NameNode gracefully; a NameNode that stops answering (its RPC server gone) is
fenced with the configured shell method, which sees Hadoop's environment
variables; ``-formatZK`` refuses to clobber without ``-force``.
"""

import asyncio
import json
import os
import subprocess
import sys

import pytest

from qjournal.config.conf import Configuration
from qjournal.transport import RpcClient, RpcServer
from qjournal.util.proc import qjournal_argv, start_daemon

from .fake_ha import FakeHAService
from tests.waiting import async_wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
DEADLINE_S = 30.0


def write_conf(conf_dir, quorum, parent, nn_ports, zkfc_ports, fencing=""):
    conf = Configuration()
    conf.set("dfs.nameservices", "ns1")
    conf.set("dfs.ha.namenodes.ns1", ",".join(sorted(nn_ports)))
    for nn, port in sorted(nn_ports.items()):
        conf.set(f"dfs.namenode.rpc-address.ns1.{nn}", f"127.0.0.1:{port}")
        conf.set(f"dfs.ha.zkfc.rpc-address.ns1.{nn}", f"127.0.0.1:{zkfc_ports[nn]}")
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
