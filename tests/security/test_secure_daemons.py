"""Identity and service-level authorization on real sockets: a JournalNode and a NameNode in-process with
mutual TLS (RPC and HTTPS), ``hadoop.security.authorization`` and a policy read from the configuration
directory (``hadoop-policy.xml``), reached with the certificates of each role.

What it shows (issue 16): a client certificate cannot call the JournalNode's write RPCs nor
``transition_to_active``; a NameNode certificate writes the journal; a connection without a certificate
is refused at the handshake; a user whose certificate says alice cannot act as hdfs by claiming it
(RPC and WebHDFS); a policy change takes effect after ``dfsadmin -refreshServiceAcl`` without a restart;
expired, wrong-CA and wrong-host certificates are refused with a clear message; every refusal names
the principal and the protocol and is counted on /jmx and /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import ssl
import threading

import aiohttp
import pytest

from qjournal.cli import dfsadmin
from qjournal.client.qjm import QuorumJournalManager
from qjournal.config import Configuration
from qjournal.errors import AuthorizationError, PermissionDeniedError, TransportError
from qjournal.journalnode.node import JournalNode
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.dfs_client import DFSClient
from qjournal.namenode.format import format_namenode
from qjournal.namenode.http import NameNodeHttpServer
from qjournal.protocol.messages import RequestInfo
from qjournal.protocol.segment import INVALID_TXID
from qjournal.transport import pki
from qjournal.transport import RpcClient
from qjournal.transport.tls import client_context

from tests.client.memcluster import FAST, NS

POLICY = {
    "hadoop.security.authorization": "true",
    "security.qjournal.service.protocol.acl": "nn",
    "security.interqjournal.service.protocol.acl": "jn",
    "security.client.protocol.acl": "*",
    "security.ha.service.protocol.acl": "zkfc,hdfs",
    "security.zkfc.protocol.acl": "zkfc,hdfs",
    "security.namenode.protocol.acl": "nn",
    "security.refresh.policy.protocol.acl": "hdfs",
    "security.refresh.user.mappings.protocol.acl": " admins",
    "hadoop.security.instrumentation.requires.admin": "true",
    "dfs.cluster.administrators": "hdfs",
}


class Pki:
    """The CA and one certificate per role, and the bad ones."""

    def __init__(self, d: str) -> None:
        self.dir = d
        self.ca = pki.make_ca(d, "ca")
        self.certs = {name: pki.make_cert(d, self.ca, name.replace("/", "-"), cn=name)
                      for name in ("nn/127.0.0.1", "jn/127.0.0.1", "zkfc/127.0.0.1", "hdfs", "alice")}
        self.expired = pki.make_cert(d, self.ca, "expired-alice", cn="alice", days=-1)
        other = pki.make_ca(d, "other-ca")
        self.wrong_ca = pki.make_cert(d, other, "rogue-nn", cn="nn/127.0.0.1")
        self.wrong_host = pki.make_cert(d, self.ca, "jn-elsewhere", cn="jn/10.9.9.9",
                                        hosts=("10.9.9.9", "elsewhere.example"))

    def ctx(self, who: str | None, cert: pki.CertPaths | None = None) -> ssl.SSLContext:
        """A client context presenting ``who``'s certificate (None: none)."""
        c = cert or (self.certs[who] if who else None)
        return client_context(c.cert if c else None, c.key if c else None, self.ca.cert)

    def conf_dir(self, role: str, who: str, extra: dict | None = None,
                 cert: pki.CertPaths | None = None) -> str:
        """A configuration directory: hdfs-site.xml (TLS with ``who``'s certificate) and hadoop-policy.xml."""
        d = os.path.join(self.dir, f"conf-{role}")
        os.makedirs(d, exist_ok=True)
        c = cert or self.certs[who]
        site = Configuration({"qjournal.rpc.tls.enabled": "true", "qjournal.rpc.tls.cert.file": c.cert,
                              "qjournal.rpc.tls.key.file": c.key, "qjournal.rpc.tls.ca.file": self.ca.cert,
                              "dfs.http.policy": "HTTPS_ONLY", "qjournal.journalnode.fsync": "false",
                              **(extra or {})})
        site.write_xml(os.path.join(d, "hdfs-site.xml"))
        Configuration(POLICY).write_xml(os.path.join(d, "hadoop-policy.xml"))
        return d


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


async def _https_get(ctx: ssl.SSLContext, url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        async with s.get(url) as r:
            return r.status, (await r.read()).decode("utf-8", errors="replace")


async def _call(host: str, port: str, ctx: ssl.SSLContext, method: str, **kwargs):
    c = await RpcClient.connect_tcp(host, int(port), ssl=ctx)
    try:
        return await c.call(method, **kwargs)
    finally:
        await c.close()


def _refused(body: str) -> str:
    """The message of an AuthorizationException answer (Hadoop's RemoteException JSON)."""
    e = json.loads(body)["RemoteException"]
    assert e["javaClassName"] == "org.apache.hadoop.security.authorize.AuthorizationException"
    return e["message"]


def test_journalnode_admits_only_namenodes_as_writers(keys, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    jn_conf = Configuration.load(keys.conf_dir("jn", "jn/127.0.0.1"))

    async def main():
        jn = JournalNode(jn_conf, edits_dir=str(tmp_path / "jn"), rpc_address=("127.0.0.1", 0),
                         http_address=("127.0.0.1", 0))
        await jn.start()
        host, port = jn.rpc_bound.rsplit(":", 1)
        try:
            # a NameNode certificate writes the journal
            nn_conf = Configuration.load(keys.conf_dir("nn-writer", "nn/127.0.0.1"))
            q = QuorumJournalManager(f"qjournal://{jn.rpc_bound}/j1", nn_conf, settings=FAST)
            await q.format(NS)
            await q.recover_unfinalized_segments()
            s = await q.start_log_segment(1)
            for t in (1, 2, 3):
                s.write(t, b"edit-%d" % t)
            s.mark()
            await s.sync()
            await q.finalize_log_segment(1, 3)
            await q.close()
            journal = jn.service.journals["j1"].journal
            epoch = journal.last_promised_epoch

            # a client certificate cannot call the write RPCs (nor read the journal); the handler never runs
            alice = await RpcClient.connect_tcp(host, int(port), ssl=keys.ctx("alice"))
            req = RequestInfo("j1", epoch + 1, 1, INVALID_TXID).to_wire()
            calls = [("new_epoch", dict(jid="j1", ns_info=NS.to_wire(), epoch=epoch + 1)),
                     ("start_log_segment", dict(req=req, txid=4)),
                     ("journal", dict(req=req, segment_txid=4, first_txid=4, num_txns=1, records=b"x")),
                     ("finalize_log_segment", dict(req=req, start_txid=1, end_txid=3)),
                     ("accept_recovery", dict(req=req, segment_state=[1, 3, False], from_url="https://x")),
                     ("format", dict(jid="j1", ns_info=NS.to_wire(), force=True)),
                     ("get_edit_log_manifest", dict(jid="j1", since_txid=0))]
            for method, kwargs in calls:
                with pytest.raises(AuthorizationError) as e:
                    await alice.call(method, **kwargs)
                assert e.value.message.startswith("User alice (principal alice) is not authorized for protocol "
                                                  "QJournalProtocol"), e.value.message
                assert e.value.fields["protocol"].startswith("QJournalProtocol")
            await alice.close()
            assert journal.last_promised_epoch == epoch and journal.is_formatted()
            assert jn.service_auth.metrics["rpc_authorization_failures"] == len(calls)

            # a peer JournalNode may read the manifest (InterQJournalProtocol), not write
            peer = await RpcClient.connect_tcp(host, int(port), ssl=keys.ctx("jn/127.0.0.1"))
            assert (await peer.call("get_edit_log_manifest", jid="j1", since_txid=0))["segments"]
            with pytest.raises(AuthorizationError, match="User jn .*QJournalProtocol"):
                await peer.call("new_epoch", jid="j1", ns_info=NS.to_wire(), epoch=epoch + 1)
            await peer.close()

            # a policy change reaches a JournalNode through its refresh call (`qjournal rpc ... refresh_service_acl`)
            Configuration({**POLICY, "security.qjournal.service.protocol.acl": "nn,alice"}).write_xml(
                os.path.join(jn_conf.conf_dir, "hadoop-policy.xml"))
            with pytest.raises(AuthorizationError, match="RefreshAuthorizationPolicyProtocol"):
                await _call(host, port, keys.ctx("alice"), "refresh_service_acl")
            acls = await _call(host, port, keys.ctx("hdfs"), "refresh_service_acl")
            assert acls["security.qjournal.service.protocol.acl"] == "alice,nn"
            assert (await _call(host, port, keys.ctx("alice"), "get_journal_state", jid="j1"))["last_promised_epoch"]
            failures = len(calls) + 2  # + jn's new_epoch + alice's refresh

            # HTTP: /getJournal for NameNodes and JournalNodes; /jmx for the administrators
            url = f"{jn.http_url}/getJournal?jid=j1&segmentTxId=1&storageInfo={NS.namespace_id}:{NS.cluster_id}"
            status, body = await _https_get(keys.ctx("zkfc/127.0.0.1"), url)
            assert status == 403 and "User zkfc (principal zkfc/127.0.0.1) is not authorized" in _refused(body)
            assert (await _https_get(keys.ctx("nn/127.0.0.1"), url))[0] == 200
            status, body = await _https_get(keys.ctx("nn/127.0.0.1"), f"{jn.http_url}/jmx")
            assert status == 403 and "the HTTP admin endpoints" in _refused(body)
            status, body = await _https_get(keys.ctx("hdfs"), f"{jn.http_url}/jmx")
            rpc = [b for b in json.loads(body)["beans"] if "RpcActivityForPort" in b["name"]][0]
            assert rpc["RpcAuthorizationFailures"] == failures and rpc["HttpAuthorizationFailures"] == 2
            assert rpc["ServiceAuthorizationRefreshes"] == 1
            _, text = await _https_get(keys.ctx("hdfs"), f"{jn.http_url}/metrics")
            assert f"qjournal_journalnode_rpc_authorization_failures_total {failures}.0" in text

            # no certificate: refused in the TLS handshake, before any connection reaches the server
            opened = jn.rpc_server.metrics["connections_opened"]
            with pytest.raises(TransportError, match="refuses this client's certificate"):
                c = await RpcClient.connect_tcp(host, int(port), ssl=keys.ctx(None), connect_timeout_ms=5000)
                try:  # TLS 1.3: the client learns of the refusal on its first read
                    await c.call("get_journal_state", jid="j1", timeout_ms=5000)
                finally:
                    await c.close()
            assert jn.rpc_server.metrics["connections_opened"] == opened
            assert any("TLS handshake refused" in r.getMessage() and "CERTIFICATE" in r.getMessage().upper()
                       for r in caplog.records)

            # bad certificates
            for bad, reason in ((keys.expired, "certificate has expired"),
                                (keys.wrong_ca, "unable to get local issuer certificate")):
                caplog.clear()
                with pytest.raises(TransportError) as e:
                    c = await RpcClient.connect_tcp(host, int(port), ssl=keys.ctx(None, bad), connect_timeout_ms=5000)
                    try:
                        await c.call("get_journal_state", jid="j1", timeout_ms=5000)
                    finally:
                        await c.close()
                assert "refuses this client's certificate" in e.value.message
                assert any(reason in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
            assert jn.rpc_server.metrics["connections_opened"] == opened
        finally:
            await jn.stop()

    asyncio.run(main())


def test_clients_refuse_bad_server_certificates_with_a_clear_message(keys, tmp_path):
    """A server whose certificate is for another host, expired, or from another CA is refused by the
    client; the error says which."""

    async def main():
        for name, cert, reason in (("wrong-host", keys.wrong_host, "IP address mismatch"),
                                   ("expired", keys.expired, "certificate has expired"),
                                   ("wrong-ca", keys.wrong_ca, "unable to get local issuer certificate")):
            conf = Configuration.load(keys.conf_dir(f"jn-{name}", "", cert=cert))
            jn = JournalNode(conf, edits_dir=str(tmp_path / name), rpc_address=("127.0.0.1", 0), http=False)
            await jn.start()
            host, port = jn.rpc_bound.rsplit(":", 1)
            try:
                with pytest.raises(TransportError, match=reason):
                    await RpcClient.connect_tcp(host, int(port), ssl=keys.ctx("nn/127.0.0.1"),
                                                connect_timeout_ms=5000)
            finally:
                await jn.stop()

    asyncio.run(main())


class SecureNameNode:
    """An HA NameNode (standby at start) with RPC and HTTPS on a background loop."""

    def __init__(self, keys: Pki, tmp: str) -> None:
        groups = os.path.join(tmp, "groups")
        with open(groups, "w") as fh:
            fh.write("alice=analysts\nhdfs=supergroup\n")
        self.conf_dir = keys.conf_dir("nn1", "nn/127.0.0.1", {
            "dfs.namenode.name.dir": f"file://{tmp}/name", "qjournal.namenode.superuser": "hdfs",
            "dfs.namenode.checkpoint.check.period": "3600s", "dfs.ha.log-roll.period": "0",
            "dfs.namenode.shared.edits.dir": f"file://{tmp}/shared", "dfs.ha.tail-edits.period": "3600s",
            "qjournal.security.group.mapping.file": groups})
        self.keys = keys
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.conf = Configuration.load(self.conf_dir)
        self.nn = NameNode(self.conf, "nn1")
        self.http = NameNodeHttpServer(self.nn)
        self.do(self._up())

    async def _up(self) -> None:
        await format_namenode(self.conf, cluster_id="CID-secure", namespace_id=11)
        self.addr = await self.nn.start("127.0.0.1", 0)
        host, port = await self.http.start("127.0.0.1", 0)
        self.url = f"https://{host}:{port}"

    def do(self, coro, timeout_s: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    async def call(self, who: str, method: str, **kwargs):
        c = await RpcClient.connect_tcp(*self.addr, ssl=self.keys.ctx(who))
        try:
            return await c.call(method, **kwargs)
        finally:
            await c.close()

    def client_conf(self, who: str) -> Configuration:
        c = Configuration.load(self.keys.conf_dir(f"client-{who.replace('/', '-')}", who))
        c.set("dfs.namenode.rpc-address", f"{self.addr[0]}:{self.addr[1]}")
        c.set("dfs.client.failover.max.attempts", "0")
        return c

    async def dfs(self, who: str, method: str, *args, user: str | None = None, **kwargs):
        async with DFSClient(self.client_conf(who), user=user) as c:
            return await getattr(c, method)(*args, **kwargs)

    def close(self) -> None:
        self.do(self.http.stop())
        self.do(self.nn.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def secure_nn(keys, tmp_path):
    s = SecureNameNode(keys, str(tmp_path))
    yield s
    s.close()


def test_namenode_identity_and_ha_acl(secure_nn):
    s = secure_nn

    async def main():
        # transition_to_active: a client certificate is refused before the handler runs
        with pytest.raises(AuthorizationError, match="User alice .* protocol HAServiceProtocol"):
            await s.call("alice", "transition_to_active", request_source="zkfc")
        assert s.nn.state.value == "standby"
        await s.call("zkfc/127.0.0.1", "transition_to_active", request_source="zkfc")
        assert s.nn.state.value == "active"
        with pytest.raises(AuthorizationError, match="protocol NamenodeProtocol"):
            await s.call("alice", "get_stats")

        # alice cannot act as hdfs by claiming it (RPC); her own calls run as alice
        with pytest.raises(AuthorizationError, match="User: alice .* is not allowed to impersonate hdfs"):
            await s.dfs("alice", "mkdirs", "/claimed", user="hdfs")
        with pytest.raises(PermissionDeniedError):
            await s.dfs("alice", "mkdirs", "/alice")  # "/" belongs to hdfs
        await s.dfs("hdfs", "mkdirs", "/tmp")
        await s.dfs("hdfs", "set_permission", "/tmp", 0o777)
        await s.dfs("alice", "mkdirs", "/tmp/a")
        st = await s.dfs("alice", "get_file_info", "/tmp/a")
        assert st["owner"] == "alice"
        # hdfs's groups come from the mapping file: the superuser group
        await s.dfs("hdfs", "set_owner", "/tmp/a", owner="hdfs")
        assert (await s.dfs("hdfs", "get_file_info", "/tmp/a"))["owner"] == "hdfs"

        # WebHDFS over HTTPS: the certificate's user; a different user.name or doas is refused
        base = f"{s.url}/webhdfs/v1/tmp/a?op=GETFILESTATUS"
        status, body = await _https_get(s.keys.ctx("alice"), base)
        assert status == 200 and json.loads(body)["FileStatus"]["owner"] == "hdfs"
        for claim in ("&user.name=hdfs", "&doas=hdfs", "&user.name=alice&doas=hdfs"):
            status, body = await _https_get(s.keys.ctx("alice"), base + claim)
            assert status == 403 and "alice (principal alice) is not allowed to impersonate hdfs" in \
                json.loads(body)["RemoteException"]["message"], body
        assert (await _https_get(s.keys.ctx("alice"), base + "&user.name=alice"))[0] == 200

        # the refusals are counted: /jmx (administrators only) and /metrics
        assert (await _https_get(s.keys.ctx("alice"), f"{s.url}/jmx"))[0] == 403
        status, body = await _https_get(s.keys.ctx("hdfs"), f"{s.url}/jmx")
        beans = {b["name"].split("name=")[1]: b for b in json.loads(body)["beans"]}
        rpc = [b for n, b in beans.items() if n.startswith("RpcActivityForPort")][0]
        assert rpc["RpcAuthorizationFailures"] == 2 and rpc["HttpAuthorizationFailures"] == 1
        assert beans["NameNodeStatus"]["SecurityEnabled"] is True
        _, text = await _https_get(s.keys.ctx("hdfs"), f"{s.url}/metrics")
        assert "qjournal_namenode_rpc_authorization_failures_total 2.0" in text
        assert (await _https_get(s.keys.ctx("alice"), f"{s.url}/isActive"))[0] == 200

    s.do(main(), 60)


def test_policy_change_takes_effect_after_refresh(secure_nn, capsys):
    s = secure_nn
    s.do(s.call("zkfc/127.0.0.1", "transition_to_active", request_source="zkfc"))
    assert s.do(s.dfs("alice", "get_file_info", "/")) is not None

    # the operator narrows ClientProtocol to hdfs: nothing changes before the refresh
    Configuration({**POLICY, "security.client.protocol.acl": "hdfs"}).write_xml(
        os.path.join(s.conf_dir, "hadoop-policy.xml"))
    assert s.do(s.dfs("alice", "get_file_info", "/")) is not None

    def dfsadmin_as(who: str, *argv: str) -> int:
        d = s.keys.conf_dir(f"client-{who}", who, {"dfs.namenode.rpc-address": f"{s.addr[0]}:{s.addr[1]}"})
        return dfsadmin.run(argparse.Namespace(conf=d, overrides=[], admin_ns=None, admin_user=None,
                                               admin_groups=None, argv=list(argv)))

    # alice may not refresh the policy (security.refresh.policy.protocol.acl = hdfs)
    assert dfsadmin_as("alice", "-refreshServiceAcl") == 1
    err = capsys.readouterr().err
    assert "Refresh service acl failed" in err and "RefreshAuthorizationPolicyProtocol" in err
    assert dfsadmin_as("hdfs", "-refreshServiceAcl") == 0
    assert capsys.readouterr().out.strip() == "Refresh service acl successful"
    with pytest.raises(AuthorizationError, match="User alice .* protocol ClientProtocol"):
        s.do(s.dfs("alice", "get_file_info", "/"))
    assert s.do(s.dfs("hdfs", "get_file_info", "/")) is not None
    assert s.nn.service_auth.metrics["policy_refreshes"] == 1

    # a policy edited into a bad state is refused and the old one stays in force
    with open(os.path.join(s.conf_dir, "hadoop-policy.xml"), "w") as fh:
        fh.write("<configuration><property><name>no.such.key</name><value>x</value></property></configuration>")
    assert dfsadmin_as("hdfs", "-refreshServiceAcl") == 1
    assert "no.such.key" in capsys.readouterr().err
    with pytest.raises(AuthorizationError):
        s.do(s.dfs("alice", "get_file_info", "/"))

    # groups: refresh_user_to_groups_mappings is for the group "admins" (of the mapping file, after a refresh)
    assert dfsadmin_as("hdfs", "-refreshUserToGroupsMappings") == 1
    assert "RefreshUserMappingsProtocol" in capsys.readouterr().err
