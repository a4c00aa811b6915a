"""The NameNode's HTTP server, in process with real sockets: Hadoop's /jmx beans and values,
?qry= / ?get= filtering, Prometheus /metrics, /isActive by HA state, the status page, HTTPS with
mutual TLS (a client without a certificate is refused), and the daemon's READY line."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.request

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from qjournal.config import Configuration
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.format import format_namenode
from qjournal.namenode.http import NameNodeHttpServer, http_address_of
from qjournal.transport import RpcClient, pki
from qjournal.transport.http import http_client_context

from .procs import Cluster

W = dict(user="hdfs", groups=["supergroup"])


def conf_for(tmp, **extra):
    c = Configuration()
    c.set("dfs.namenode.name.dir", f"file://{tmp}/name")
    c.set("qjournal.namenode.superuser", "hdfs")
    c.set("dfs.namenode.checkpoint.check.period", "3600s")
    c.set("dfs.ha.log-roll.period", "0")
    for k, v in extra.items():
        c.set(k, v)
    return c


async def fetch(session, url, **kw):
    async with session.get(url, **kw) as r:
        return r.status, await r.text()


async def jmx(session, base, query=""):
    status, text = await fetch(session, f"{base}/jmx{query}")
    assert status == 200, text
    return {b["name"]: b for b in json.loads(text)["beans"]}


def test_jmx_metrics_status_page_non_ha(tmp_path):
    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-http", namespace_id=77)
        nn = NameNode(conf)
        await nn.start("127.0.0.1", 0)
        http = NameNodeHttpServer(nn)
        host, port = await http.start("127.0.0.1", 0)
        base = f"http://{host}:{port}"
        client = await RpcClient.connect_tcp(*nn.address)
        try:
            async with aiohttp.ClientSession() as s:
                for i in range(3):
                    await client.call("mkdirs", path=f"/d{i}", **W)
                beans = await jmx(s, base)
                st = beans["Hadoop:service=NameNode,name=NameNodeStatus"]
                assert st["State"] == "active" and st["NNRole"] == "NameNode"
                assert st["HostAndPort"] == f"{nn.address[0]}:{nn.address[1]}"
                fs = beans["Hadoop:service=NameNode,name=FSNamesystem"]
                assert fs["HAState"] == "active"
                assert fs["FilesTotal"] == 4  # the root and three directories
                assert fs["LastWrittenTransactionId"] == nn.last_applied_txid
                # format wrote the image at txid 0: every txid since is uncheckpointed
                assert fs["TransactionsSinceLastCheckpoint"] == nn.last_applied_txid > 0
                info = beans["Hadoop:service=NameNode,name=NameNodeInfo"]
                assert info["ClusterId"] == "CID-http" and info["NamespaceId"] == 77
                assert json.loads(info["JournalTransactionInfo"]) == {
                    "LastAppliedOrWrittenTxId": str(nn.last_applied_txid), "MostRecentCheckpointTxId": "0"}
                journals = json.loads(info["NameJournalStatus"])
                assert [j["manager"] for j in journals] == [f"file://{tmp_path}/name"]
                assert journals[0]["disabled"] == "false"
                assert journals[0]["stream"].startswith("Writing segment beginning at txid ")
                rpc = beans[f"Hadoop:service=NameNode,name=RpcActivityForPort{nn.address[1]}"]
                assert rpc["RpcQueueTimeNumOps"] == 3 and rpc["NumOpenConnections"] == 1
                assert rpc["CallsFailed"] == 0

                # a checkpoint resets the count and sets the time
                ck_txid = await nn.checkpointer.checkpoint()
                await client.call("mkdirs", path="/after", **W)
                fs = (await jmx(s, base, "?qry=Hadoop:service=NameNode,name=FSNamesystem"))[
                    "Hadoop:service=NameNode,name=FSNamesystem"]
                assert fs["TransactionsSinceLastCheckpoint"] == nn.last_applied_txid - ck_txid > 0
                assert fs["LastCheckpointTime"] > 0

                # Prometheus: same values from this server's own registry
                status, text = await fetch(s, f"{base}/metrics")
                assert status == 200
                fams = {f.name: f for f in text_string_to_metric_families(text)}
                states = {smp.labels["state"]: smp.value for smp in fams["qjournal_namenode_ha_state"].samples}
                assert states == {"active": 1.0, "initializing": 0.0, "observer": 0.0, "standby": 0.0,
                                  "stopping": 0.0}
                assert fams["qjournal_namenode_last_written_txid"].samples[0].value == nn.last_applied_txid
                assert fams["qjournal_namenode_files"].samples[0].value == 5
                assert fams["qjournal_namenode_rpc_calls"].samples[0].value == 4
                assert fams["qjournal_namenode_journal_healthy"].samples[0].value == 1.0

                status, text = await fetch(s, f"{base}/")
                assert status == 200
                assert "NameNode" in text and "active" in text and f"txid {ck_txid}" in text
                assert f"file://{tmp_path}/name" in text, text
                assert "Files and directories</div><div class='value'>5</div>" in text, text
                assert (await fetch(s, f"{base}/isActive")) == (200, "I am Active!")
        finally:
            await client.close()
            await http.stop()
            await nn.stop()

    asyncio.run(main())


def test_qry_and_get_filtering(tmp_path):
    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-q", namespace_id=1)
        nn = NameNode(conf)
        await nn.start(serve=False)
        http = NameNodeHttpServer(nn)
        host, port = await http.start("127.0.0.1", 0)
        base = f"http://{host}:{port}"
        try:
            async with aiohttp.ClientSession() as s:
                everything = await jmx(s, base)
                assert len(everything) >= 6
                assert list(await jmx(s, base, "?qry=*:*")) == list(everything)
                # exact name, in another key order (ObjectName keys are unordered)
                assert list(await jmx(s, base, "?qry=Hadoop:name=NameNodeStatus,service=NameNode")) == [
                    "Hadoop:service=NameNode,name=NameNodeStatus"]
                assert sorted(await jmx(s, base, "?qry=Hadoop:service=NameNode,name=NameNode*")) == [
                    "Hadoop:service=NameNode,name=NameNodeActivity", "Hadoop:service=NameNode,name=NameNodeInfo",
                    "Hadoop:service=NameNode,name=NameNodeStatus"]
                # a property-list pattern ("...,*") vs an exact key list
                assert len(await jmx(s, base, "?qry=Hadoop:service=NameNode,*")) == len(everything)
                assert await jmx(s, base, "?qry=Hadoop:service=NameNode") == {}
                assert await jmx(s, base, "?qry=java.lang:type=Memory") == {}
                status, text = await fetch(s, f"{base}/jmx?qry=no-colon-here")
                assert status == 400 and "no-colon-here" in json.loads(text)["message"]
                got = await jmx(s, base, "?get=Hadoop:service=NameNode,name=NameNodeStatus::State")
                assert got == {"Hadoop:service=NameNode,name=NameNodeStatus": {
                    "name": "Hadoop:service=NameNode,name=NameNodeStatus",
                    "modelerType": "org.apache.hadoop.hdfs.server.namenode.NameNode", "State": "active"}}
                status, _ = await fetch(s, f"{base}/jmx?get=Hadoop:service=NameNode,name=NameNodeStatus::Nope")
                assert status == 404
                status, _ = await fetch(s, f"{base}/jmx?get=Hadoop:service=NameNode,name=NameNodeStatus")
                assert status == 400
        finally:
            await http.stop()
            await nn.stop()

    asyncio.run(main())


def test_is_active_follows_the_ha_state(tmp_path):
    async def main():
        conf = conf_for(tmp_path, **{"dfs.namenode.shared.edits.dir": f"file://{tmp_path}/shared",
                                     "dfs.ha.tail-edits.period": "3600s"})
        await format_namenode(conf, cluster_id="CID-ha", namespace_id=5)
        nn = NameNode(conf, "nn1")
        await nn.start(serve=False)
        http = NameNodeHttpServer(nn)
        host, port = await http.start("127.0.0.1", 0)
        base = f"http://{host}:{port}"
        try:
            async with aiohttp.ClientSession() as s:
                assert (await fetch(s, f"{base}/isActive")) == (405, "I am not Active!")
                beans = await jmx(s, base)
                assert beans["Hadoop:service=NameNode,name=NameNodeStatus"]["State"] == "standby"
                journals = json.loads(beans["Hadoop:service=NameNode,name=NameNodeInfo"]["NameJournalStatus"])
                assert {"manager": f"file://{tmp_path}/shared", "stream": "open for read", "disabled": "false",
                        "required": "true"} in journals
                await nn.ha_service.transition_to_active("user")
                assert (await fetch(s, f"{base}/isActive")) == (200, "I am Active!")
                beans = await jmx(s, base)
                assert beans["Hadoop:service=NameNode,name=FSNamesystem"]["HAState"] == "active"
                journals = json.loads(beans["Hadoop:service=NameNode,name=NameNodeInfo"]["NameJournalStatus"])
                shared = [j for j in journals if j["manager"] == f"file://{tmp_path}/shared"]
                assert shared and shared[0]["required"] == "true" and shared[0]["disabled"] == "false"
                await nn.ha_service.transition_to_standby("user")
                assert (await fetch(s, f"{base}/isActive"))[0] == 405
        finally:
            await http.stop()
            await nn.stop()

    asyncio.run(main())


def test_http_address_keys():
    c = Configuration()
    assert http_address_of(c, None) == (("0.0.0.0", 9870), "dfs.namenode.http-address", False)
    c.set("dfs.nameservices", "ns1")
    c.set("dfs.namenode.http-address.ns1.nn2", "10.0.0.2:50070")
    assert http_address_of(c, "nn2") == (("10.0.0.2", 50070), "dfs.namenode.http-address.ns1.nn2", True)
    assert http_address_of(c, "nn1")[0] == ("0.0.0.0", 9870)
    c.set("dfs.http.policy", "HTTPS_ONLY")
    assert http_address_of(c, "nn1") == (("0.0.0.0", 9871), "dfs.namenode.https-address", False)
    c.set("dfs.namenode.http-bind-host", "127.0.0.1")
    assert http_address_of(c, "nn1")[0] == ("127.0.0.1", 9871)
    c.set("dfs.http.policy", "HTTP_AND_HTTPS")
    with pytest.raises(Exception, match="dfs.http.policy"):
        http_address_of(c, "nn1")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = pki.make_ca(d, "ca")
    return ca, pki.make_cert(d, ca, "nn"), pki.make_cert(d, ca, "operator")


def tls_keys(cert, ca):
    return {"dfs.http.policy": "HTTPS_ONLY", "qjournal.rpc.tls.cert.file": cert.cert,
            "qjournal.rpc.tls.key.file": cert.key, "qjournal.rpc.tls.ca.file": ca.cert}


def test_https_requires_a_client_certificate(tmp_path, certs):
    ca, nn_cert, op_cert = certs

    async def main():
        conf = conf_for(tmp_path, **tls_keys(nn_cert, ca))
        await format_namenode(conf, cluster_id="CID-tls", namespace_id=3)
        nn = NameNode(conf)
        await nn.start(serve=False)
        http = NameNodeHttpServer(nn)
        host, port = await http.start("127.0.0.1", 0)
        assert http.url == f"https://{host}:{port}"
        try:
            # no client certificate: the handshake is refused
            anon = ssl.create_default_context(cafile=ca.cert)
            async with aiohttp.ClientSession() as s:
                with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
                    await fetch(s, f"{http.url}/isActive", ssl=anon)
                # plain HTTP on the HTTPS port gets nothing useful either
                with pytest.raises(aiohttp.ClientError):
                    await fetch(s, f"http://{host}:{port}/isActive")
            ctx = http_client_context(Configuration(tls_keys(op_cert, ca)))
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
                assert (await fetch(s, f"{http.url}/isActive")) == (200, "I am Active!")
                beans = await jmx(s, http.url)
                assert beans["Hadoop:service=NameNode,name=NameNodeStatus"]["State"] == "active"
        finally:
            await http.stop()
            await nn.stop()

    asyncio.run(main())


@pytest.mark.slow
def test_daemon_announces_http_in_ready_line(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        conf = {"dfs.namenode.name.dir": f"file://{tmp_path}/nn", "qjournal.namenode.superuser": "hdfs"}
        cluster.run("namenode", "-format", "-clusterid", "CID-d", extra=conf)
        nn = cluster.start("nn", "namenode", "--rpc-address", "127.0.0.1:0", extra=conf)
        host, _, port = nn.ready["http"].rpartition(":")
        assert host == "127.0.0.1" and int(port) not in (0, 9870)
        assert nn.ready["http_url"] == f"http://{nn.ready['http']}"
        with urllib.request.urlopen(f"{nn.ready['http_url']}/isActive", timeout=30) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"{nn.ready['http_url']}/jmx?qry=Hadoop:service=NameNode,name=NameNodeStatus",
                                    timeout=30) as r:
            beans = json.loads(r.read())["beans"]
        assert [b["HostAndPort"] for b in beans] == [nn.ready["rpc"]]
    finally:
        cluster.close()
