"""NameNode RPC over mutual TLS (``qjournal.rpc.tls.*``): the DFS client and the HAServiceProtocol
client with the cluster's certificate are served; the same clients without TLS are refused."""

from __future__ import annotations

import asyncio

import pytest

from qjournal.config import Configuration
from qjournal.errors import QJournalError
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.dfs_client import DFSClient, HAServiceClient
from qjournal.namenode.format import format_namenode
from qjournal.transport import pki
from qjournal.transport.tls import client_context_from_conf


def test_namenode_rpc_requires_mutual_tls(tmp_path):
    d = str(tmp_path)
    ca = pki.make_ca(d, "ca")
    nn_cert = pki.make_cert(d, ca, "nn")
    cli_cert = pki.make_cert(d, ca, "hdfs")  # the caller is its certificate's user (docs/security.md)

    def conf(cert=None):
        c = Configuration()
        c.set("dfs.namenode.name.dir", f"file://{d}/name")
        c.set("qjournal.namenode.superuser", "hdfs")
        c.set("dfs.namenode.checkpoint.check.period", "3600s")
        c.set("dfs.ha.log-roll.period", "0")
        c.set("dfs.client.failover.max.attempts", "1")
        c.set("dfs.client.failover.sleep.base.millis", "1")
        c.set("ipc.client.connect.timeout", "2000")
        c.set("qjournal.client.rpc-timeout.ms", "5000")
        if cert is not None:
            for k, v in (("enabled", "true"), ("cert.file", cert.cert), ("key.file", cert.key),
                         ("ca.file", ca.cert)):
                c.set(f"qjournal.rpc.tls.{k}", v)
        return c

    async def main():
        server_conf = conf(nn_cert)
        await format_namenode(server_conf, cluster_id="CID-tls", namespace_id=9)
        nn = NameNode(server_conf)
        host, port = await nn.start("127.0.0.1", 0)
        try:
            addrs = [("nn", host, port)]
            async with DFSClient(conf(cli_cert), addresses=addrs, user="hdfs", groups=["supergroup"]) as c:
                assert await c.mkdirs("/secure") is True
                assert (await c.get_file_info("/secure"))["type"] == "d"
            ha = HAServiceClient(host, port, 5000, ssl=client_context_from_conf(conf(cli_cert)))
            try:
                assert (await ha.get_service_status())["state"] == "active"
            finally:
                await ha.close()
            # without TLS: refused (the server only speaks TLS and wants a certificate)
            plain = DFSClient(conf(), addresses=addrs, user="hdfs", groups=["supergroup"])
            with pytest.raises((QJournalError, OSError)):
                await plain.mkdirs("/plain")
            await plain.close()
            ha_plain = HAServiceClient(host, port, 2000)
            with pytest.raises((QJournalError, OSError)):
                await ha_plain.get_service_status()
            await ha_plain.close()
            assert await nn.client_protocol.rpc_get_file_info("/plain", user="hdfs", groups=["supergroup"]) is None
        finally:
            await nn.stop()

    asyncio.run(main())
