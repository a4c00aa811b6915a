"""JournalNode HTTP under ``dfs.http.policy = HTTPS_ONLY`` (in process, real sockets): the server
refuses a client without a certificate, serves /getJournal and /jmx to one with a certificate of
the cluster CA, advertises an ``https://`` URL, and a quorum recovery whose accept-recovery must
download a segment from another JournalNode works end to end over HTTPS, as does the quorum
client's segment reader."""

from __future__ import annotations

import asyncio
import json
import ssl

import aiohttp
import pytest

from qjournal.client.qjm import QuorumJournalManager
from qjournal.client.settings import QJMSettings
from qjournal.config import Configuration
from qjournal.journalnode.node import JournalNode
from qjournal.protocol.messages import RequestInfo
from qjournal.protocol.segment import OP_DATA, crc32c, encode_header, encode_records
from qjournal.transport import RpcClient, pki
from qjournal.transport.http import http_client_context

from qjournal.util.waiting import async_wait_until

from .jn_helpers import NS

JID = "httpsjid"
FAST = QJMSettings().with_overrides(
    start_segment_timeout_ms=10000, prepare_recovery_timeout_ms=10000, accept_recovery_timeout_ms=10000,
    finalize_segment_timeout_ms=10000, select_input_streams_timeout_ms=10000,
    get_journal_state_timeout_ms=10000, new_epoch_timeout_ms=10000, write_txns_timeout_ms=10000,
    operations_timeout_ms=10000, connect_timeout_ms=2000, out_of_sync_heartbeat_interval_ms=3_600_000)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = pki.make_ca(d, "ca")
    return ca, pki.make_cert(d, ca, "jn"), pki.make_cert(d, ca, "nn")


def https_conf(cert, ca) -> Configuration:
    return Configuration({"qjournal.journalnode.fsync": "false", "dfs.http.policy": "HTTPS_ONLY",
                          "qjournal.rpc.tls.cert.file": cert.cert, "qjournal.rpc.tls.key.file": cert.key,
                          "qjournal.rpc.tls.ca.file": ca.cert})


async def start_nodes(tmp_path, conf, n):
    nodes = []
    try:
        for i in range(n):
            node = JournalNode(conf, edits_dir=str(tmp_path / f"jn{i}"), rpc_address=("127.0.0.1", 0),
                               http_address=("127.0.0.1", 0))
            await node.start()
            nodes.append(node)
    except BaseException:
        for node in nodes:
            await node.stop()
        raise
    return nodes


def test_https_serves_certified_clients_only(tmp_path, certs):
    ca, jn_cert, nn_cert = certs

    async def main():
        (node,) = await start_nodes(tmp_path, https_conf(jn_cert, ca), 1)
        try:
            assert node.http_url == f"https://{node.http_bound}"
            client = await RpcClient.connect_tcp(*node.rpc_bound.rsplit(":", 1))
            try:
                await client.call("format", jid=JID, ns_info=NS.to_wire(), force=False)
                st = await client.call("get_journal_state", jid=JID)
                assert st["http_url"] == node.http_url
                await client.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=1)
                req = RequestInfo(JID, 1, 0, 0)
                await client.call("start_log_segment", req=req.to_wire(), txid=1, layout_version=1)
                recs = encode_records([(t, OP_DATA, b"x%d" % t) for t in range(1, 4)])
                await client.call("journal", req=RequestInfo(JID, 1, 1, 0).to_wire(), segment_txid=1,
                                  first_txid=1, num_txns=3, records=recs)
            finally:
                await client.close()
            url = f"{node.http_url}/getJournal?jid={JID}&segmentTxId=1&storageInfo={NS.namespace_id}:{NS.cluster_id}"
            anon = ssl.create_default_context(cafile=ca.cert)  # trusts the server, presents nothing
            async with aiohttp.ClientSession() as s:
                with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
                    async with s.get(url, ssl=anon) as r:
                        await r.read()
                with pytest.raises(aiohttp.ClientError):  # plain HTTP to the HTTPS port
                    async with s.get(url.replace("https://", "http://")) as r:
                        await r.read()
            ctx = http_client_context(https_conf(nn_cert, ca))
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
                async with s.get(url) as r:
                    assert r.status == 200
                    body = await r.read()
                    assert int(r.headers["X-Qjournal-Crc32c"], 16) == crc32c(body)
                assert body == encode_header(1) + recs
                async with s.get(f"{node.http_url}/jmx?qry=Hadoop:service=JournalNode,name=Journal-*") as r:
                    beans = json.loads(await r.text())["beans"]
                assert [b["name"] for b in beans] == [f"Hadoop:service=JournalNode,name=Journal-{JID}"]
                assert beans[0]["LastWrittenTxId"] == 3
        finally:
            await node.stop()

    asyncio.run(main())


def test_quorum_recovery_and_reads_over_https(tmp_path, certs):
    ca, jn_cert, nn_cert = certs

    async def main():
        nodes = await start_nodes(tmp_path, https_conf(jn_cert, ca), 3)
        uri = "qjournal://" + ";".join(n.rpc_bound for n in nodes) + f"/{JID}"
        nn_conf = https_conf(nn_cert, ca)
        q1 = QuorumJournalManager(uri, nn_conf, ns_info=NS, settings=FAST)
        q2 = raw = None
        try:
            await q1.format(NS)
            await q1.recover_unfinalized_segments()
            out = await q1.start_log_segment(1)
            for t in range(1, 21):
                out.write(t, b"op-%d" % t, OP_DATA)
            out.mark()
            await out.sync()
            epoch1 = q1.epoch
            await async_wait_until(
                lambda: all(n.service.journals[JID].journal.highest_written_txid == 20 for n in nodes),
                "every JournalNode to reach txid 20", 30)
            # the dying writer's txns 21-25 reached node 0 only
            raw = await RpcClient.connect_tcp(*nodes[0].rpc_bound.rsplit(":", 1))
            extra = encode_records([(t, OP_DATA, b"op-%d" % t) for t in range(21, 26)])
            await raw.call("journal", req=RequestInfo(JID, epoch1, 10_000, 20).to_wire(), segment_txid=1,
                           first_txid=21, num_txns=5, records=extra)
            await q1.close()
            q1 = None
            # node 2 is down: the recovery quorum is {0, 1}, so node 0's longer copy (1-25) is
            # chosen and node 1 must download it from node 0 over HTTPS with its certificate
            await nodes[2].stop()
            q2 = QuorumJournalManager(uri, nn_conf, ns_info=NS, settings=FAST)
            await q2.recover_unfinalized_segments()
            expect = encode_header(1) + encode_records([(t, OP_DATA, b"op-%d" % t) for t in range(1, 26)])
            for n in nodes[:2]:
                m = await n.service.run(JID, "get_edit_log_manifest", 0, True)
                assert [s.to_wire()[:3] for s in m.segments] == [[1, 25, False]], n.name
                rs = await n.service.run(JID, "open_segment_for_read", 1, False)
                with rs.stream as f:
                    assert f.read(rs.length) == expect, n.name
            # the quorum client's reader downloads the finalized segment over HTTPS too
            stream = await q2.open_input(1)
            got = [(r.txid, r.body) async for r in stream]
            assert got == [(t, b"op-%d" % t) for t in range(1, 26)]
        finally:
            for c in (q1, q2, raw):
                if c is not None:
                    await c.close()
            for n in nodes:
                await n.stop()

    asyncio.run(main())


def test_recovery_download_by_a_node_without_https_keys_fails(tmp_path, certs):
    """A JournalNode configured HTTP_ONLY (no certificate, does not trust the cluster CA) cannot
    fetch a segment from an HTTPS peer: accept-recovery's download fails with a typed error."""
    ca, jn_cert, _ = certs

    async def main():
        (src,) = await start_nodes(tmp_path, https_conf(jn_cert, ca), 1)
        plain = JournalNode(Configuration({"qjournal.journalnode.fsync": "false"}),
                            edits_dir=str(tmp_path / "plain"), rpc_address=("127.0.0.1", 0),
                            http_address=("127.0.0.1", 0))
        await plain.start()
        try:
            url = f"{src.http_url}/getJournal?jid={JID}&segmentTxId=1"
            from qjournal.errors import JournalError
            with pytest.raises(JournalError, match="download of https://"):
                await plain.service.download_segment(url, await plain.service.journal_slot(JID),
                                             "edits_inprogress_0000000000000000001.epoch=1")
        finally:
            await plain.stop()
            await src.stop()

    asyncio.run(main())


def test_a_refused_client_certificate_is_named_in_the_downloads_error(tmp_path, certs):
    """A client whose certificate the JournalNode refuses (none, or one another CA signed) is told that this is
    probably what happened, naming the URL: with TLS 1.3 it sees only a connection closed before any answer."""
    from qjournal.errors import TransportError
    from qjournal.transport.download import http_download

    ca, nn_cert = certs[0], certs[1]
    other_ca = pki.make_ca(str(tmp_path), "other-ca")
    stranger = pki.make_cert(str(tmp_path), other_ca, "stranger")

    async def main():
        nodes = await start_nodes(tmp_path, https_conf(nn_cert, ca), 1)
        try:
            url = f"https://{nodes[0].http_bound}/getJournal?jid=j&segmentTxId=1"
            no_cert = ssl.create_default_context(cafile=ca.cert)
            wrong_ca = ssl.create_default_context(cafile=ca.cert)
            wrong_ca.load_cert_chain(stranger.cert, stranger.key)
            for ctx in (no_cert, wrong_ca):
                ctx.check_hostname = False
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
                    with pytest.raises(TransportError) as e:
                        await http_download(s, url, chunk_bytes=1024, connect_timeout_s=10, read_timeout_s=10)
                assert url in e.value.message and "refuses this client's certificate" in e.value.message
        finally:
            for n in nodes:
                await n.stop()

    asyncio.run(main())
