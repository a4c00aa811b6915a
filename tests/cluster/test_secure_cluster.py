"""``qjournal cluster up --secure`` on real processes: a failover, and what an outsider cannot do.

Shows: the secure cluster (a CA and a certificate per role, mutual TLS for RPC, HTTPS and ZooKeeper,
service-level authorization, digest ACLs on the HA znodes) elects one active; the administrator's
identity of the conf dir writes through the DFS client; a SIGKILL of the active NameNode is followed by
the standby's takeover (the ZKFCs reach ZooKeeper over TLS with their digest and the NameNodes' HA
protocol with their certificates) and the writes go on; ``cluster status`` and the JournalNodes' /jmx
work with the administrator's certificate; a ZooKeeper session over TLS but without the digest cannot
read the HA znodes; nothing is refused that the policy allows (no refusal in any daemon's log).
"""

from __future__ import annotations

import asyncio
import glob
import json

import aiohttp
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from qjournal.config import Configuration
from qjournal.localcluster.launcher import ADMIN_USER, LocalCluster
from qjournal.namenode.dfs_client import DFSClient
from qjournal.transport.tls import client_context_from_conf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(str(tmp_path_factory.mktemp("secure") / "run"), out=lambda s: None, secure=True)
    c.up()
    yield c
    c.down()


async def _write_and_read(conf: Configuration, path: str) -> dict:
    async with DFSClient(conf) as client:
        await client.mkdirs(path)
        return await client.get_file_info(path)


def test_secure_cluster_fails_over_and_keeps_outsiders_out(cluster):
    c = cluster
    conf = Configuration.load(c.conf_dir)
    active = c.wait_for_active(30)
    other = "nn2" if active == "nn1" else "nn1"
    assert asyncio.run(_write_and_read(conf, "/before"))["owner"] == ADMIN_USER
    rows = {r["name"]: r for r in c.status_rows()}
    assert rows[active]["state"] == "active" and rows["zk1"]["state"] == "standalone"
    assert rows[f"zkfc-{active}"]["health"] == "SERVICE_HEALTHY"

    c.kill(active)
    assert c.wait_for_active(60, exclude=active) == other
    st = asyncio.run(_write_and_read(conf, "/after"))
    assert st["type"] == "d"

    # /jmx of a JournalNode, with the administrator's certificate
    async def jmx() -> dict:
        jn = "https://" + c.procs["jn1"].ready["http"]
        connector = aiohttp.TCPConnector(ssl=client_context_from_conf(conf))
        async with aiohttp.ClientSession(connector=connector) as s:
            async with s.get(f"{jn}/jmx") as r:
                assert r.status == 200
                return json.loads(await r.text())
    beans = asyncio.run(jmx())["beans"]
    rpc = [b for b in beans if "RpcActivityForPort" in b["name"]][0]
    assert rpc["ServiceAuthorizationEnabled"] is True and rpc["RpcAuthorizationSuccesses"] > 0

    # ZooKeeper: over TLS (the CA's certificate) but without the digest, the HA znodes are closed
    zk = KazooClient(hosts=c.zk.connect_string, use_ssl=True, verify_certs=True,
                     certfile=conf.get("qjournal.rpc.tls.cert.file"), keyfile=conf.get("qjournal.rpc.tls.key.file"),
                     ca=conf.get("qjournal.rpc.tls.ca.file"))
    zk.start(timeout=10)
    try:
        for path in ("/hadoop-ha/ns1", "/hadoop-ha/ns1/ActiveStandbyElectorLock"):
            with pytest.raises(NoAuthError):
                zk.get(path)
    finally:
        zk.stop()
        zk.close()

    # the policy admits everything the cluster itself does
    for log in sorted(glob.glob(f"{c.run_dir}/*.log")):
        with open(log, errors="replace") as fh:
            text = fh.read()
        assert "authorization refused" not in text, log
