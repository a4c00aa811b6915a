"""ZKFCs with mutual TLS (``qjournal.rpc.tls.*``): health checks, transitions, fencing and the
ZKFC-to-ZKFC graceful failover all run over TLS RPC; a client without a cluster
certificate cannot talk to a ZKFC.
"""

import asyncio

import pytest

from qjournal.errors import TransportError
from qjournal.ha.zkfc import format_zk
from qjournal.ha.zkfc import ZKFailoverController
from qjournal.transport import RpcClient, RpcServer, pki, tls

from .fake_ha import Harness
from qjournal.util.waiting import async_wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_zkfcs_over_mutual_tls(zookeeper, zk_parent, tmp_path):
    d = str(tmp_path)
    ca = pki.make_ca(d, "cluster-ca")
    node = pki.make_cert(d, ca, "node")
    server_ctx = tls.server_context(node.cert, node.key, node.ca)
    client_ctx = tls.client_context(node.cert, node.key, node.ca)

    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2)
        servers, zkfcs = [], {}
        try:
            await asyncio.to_thread(format_zk, h.settings("nn1").elector)
            for nn in ("nn1", "nn2"):
                srv = RpcServer(h.services[nn], name=f"fake-{nn}")
                _, port = await srv.start_tcp("127.0.0.1", 0, ssl=server_ctx)
                servers.append(srv)
                s = h.settings(nn)
                s.nn_port, s.zkfc_port = port, 0
                s.ssl_client, s.ssl_server = client_ctx, server_ctx
                zkfcs[nn] = ZKFailoverController(s)   # default TCP factories, with TLS
                await zkfcs[nn].start(serve_rpc=True)
            await async_wait_until(lambda: len(h.actives()) == 1, "one active over TLS", 20)
            first = h.actives()[0]
            second = "nn2" if first == "nn1" else "nn1"
            c = await RpcClient.connect_tcp("127.0.0.1", zkfcs[second].settings.zkfc_port, ssl=client_ctx)
            try:
                r = await c.call("graceful_failover", timeout_ms=20000)
            finally:
                await c.close()
            assert r["active"] == second and r["previous"] == first
            assert h.actives() == [second]
            with pytest.raises(TransportError):
                plain = await RpcClient.connect_tcp("127.0.0.1", zkfcs[second].settings.zkfc_port,
                                                    connect_timeout_ms=2000)
                try:
                    await plain.call("get_zkfc_status", timeout_ms=2000)
                finally:
                    await plain.close()
        finally:
            for z in zkfcs.values():
                await z.stop()
            for srv in servers:
                await srv.stop()
    asyncio.run(main())

