"""The quorum client over mutual TLS: JournalNodes and the writer configured with the same
``qjournal.rpc.tls.*`` keys and ``dfs.http.policy = HTTPS_ONLY`` (segment reads over HTTPS with a
client certificate); a writer without TLS gets no quorum."""

from __future__ import annotations

import asyncio

import pytest

from qjournal.client.qjm import QuorumJournalManager
from qjournal.config import Configuration
from qjournal.errors import QuorumError
from qjournal.journalnode.node import JournalNode
from qjournal.transport import pki

from .memcluster import FAST, NS


def test_write_and_read_over_mutual_tls(tmp_path):
    d = str(tmp_path)
    ca = pki.make_ca(d, "ca")
    jn_cert = pki.make_cert(d, ca, "jn")
    nn_cert = pki.make_cert(d, ca, "nn")

    def tls_conf(c):
        return Configuration({"qjournal.journalnode.fsync": "false", "qjournal.rpc.tls.enabled": "true",
                              "qjournal.rpc.tls.cert.file": c.cert, "qjournal.rpc.tls.key.file": c.key,
                              "qjournal.rpc.tls.ca.file": ca.cert, "dfs.http.policy": "HTTPS_ONLY"})

    async def main():
        nodes = [JournalNode(tls_conf(jn_cert), edits_dir=f"{d}/jn{i}", rpc_address=("127.0.0.1", 0),
                             http_address=("127.0.0.1", 0)) for i in range(3)]
        for n in nodes:
            await n.start()
        uri = "qjournal://" + ";".join(n.rpc_bound for n in nodes) + "/tlsjournal"
        try:
            plain = QuorumJournalManager(uri, Configuration(), settings=FAST)
            with pytest.raises(QuorumError):
                await plain.format(NS)
            await plain.close()
            q = QuorumJournalManager(uri, tls_conf(nn_cert), settings=FAST)
            await q.format(NS)
            await q.recover_unfinalized_segments()
            s = await q.start_log_segment(1)
            for t in range(1, 4):
                s.write(t, b"secret-%d" % t)
            s.mark()
            await s.sync()
            await q.finalize_log_segment(1, 3)
            stream = await q.open_input(1)
            got = [(r.txid, r.body) async for r in stream]
            assert all(lg.http_url.startswith("https://") for lg in q.loggers.loggers)
            await q.close()
            return got
        finally:
            for n in nodes:
                await n.stop()
    assert asyncio.run(main()) == [(t, b"secret-%d" % t) for t in range(1, 4)]
