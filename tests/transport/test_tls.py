"""Mutual TLS: a throwaway CA made with the openssl CLI; a client with a
certificate of the cluster CA gets through, a client without one (or with one
from another CA) is refused, and the server keeps serving."""

from __future__ import annotations

import pytest

from qjournal.config.conf import Configuration
from qjournal.errors import ConfigError, TransportError
from qjournal.transport import pki, tls
from qjournal.transport import RpcClient, RpcServer, current_peer

from .helpers import arun


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = pki.make_ca(d, "cluster-ca")
    other_ca = pki.make_ca(d, "other-ca")
    return {
        "ca": ca,
        "server": pki.make_cert(d, ca, "jn1"),
        "client": pki.make_cert(d, ca, "nn1"),
        "stranger": pki.make_cert(d, other_ca, "stranger"),
        "dir": d,
    }


class Service:
    async def rpc_whoami(self):
        peer = current_peer()
        subject = dict(x[0] for x in peer.cert["subject"])
        return [peer.transport, subject["commonName"]]


def _server_ctx(certs):
    s = certs["server"]
    return tls.server_context(s.cert, s.key, s.ca)


async def _start(certs):
    server = RpcServer(Service())
    host, port = await server.start_tcp("127.0.0.1", 0, ssl=_server_ctx(certs))
    return server, host, port


def test_mutual_tls_round_trip_sees_the_client_certificate(certs):
    async def main():
        server, host, port = await _start(certs)
        try:
            c = certs["client"]
            client = await RpcClient.connect_tcp(host, port, ssl=tls.client_context(c.cert, c.key, c.ca))
            assert await client.call("whoami") == ["tls", "nn1"]
            await client.close()
        finally:
            await server.stop()
    arun(main)


@pytest.mark.parametrize("who", ["no_cert", "other_ca"])
def test_client_without_a_cluster_certificate_is_refused(certs, who, caplog):
    async def main():
        server, host, port = await _start(certs)
        try:
            c = certs["client"]
            good = await RpcClient.connect_tcp(host, port, ssl=tls.client_context(c.cert, c.key, c.ca))
            if who == "no_cert":
                ctx = tls.client_context(None, None, certs["ca"].cert)
            else:
                s = certs["stranger"]
                ctx = tls.client_context(s.cert, s.key, certs["ca"].cert)
            with pytest.raises(TransportError):
                # TLS 1.3: the client may finish its handshake before the server
                # rejects its certificate; the refusal then shows on the first call
                bad = await RpcClient.connect_tcp(host, port, ssl=ctx, connect_timeout_ms=10_000)
                await bad.call("whoami", timeout_ms=10_000)
            assert server.metrics["calls"] == 0
            assert await good.call("whoami") == ["tls", "nn1"]
            refusals = [r.getMessage() for r in caplog.records if r.name == "qjournal.transport.tls"]
            assert len(refusals) == 1 and "TLS handshake refused" in refusals[0], refusals
            await good.close()
        finally:
            await server.stop()
    arun(main)


def test_client_refuses_a_server_of_another_ca(certs):
    async def main():
        server = RpcServer(Service())
        s = certs["stranger"]
        host, port = await server.start_tcp("127.0.0.1", 0, ssl=tls.server_context(s.cert, s.key, certs["ca"].cert))
        try:
            c = certs["client"]
            with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
                await RpcClient.connect_tcp(host, port, ssl=tls.client_context(c.cert, c.key, c.ca))
        finally:
            await server.stop()
    arun(main)


def test_plain_client_against_tls_server_fails_cleanly(certs):
    async def main():
        server, host, port = await _start(certs)
        try:
            plain = await RpcClient.connect_tcp(host, port)
            with pytest.raises(TransportError):
                await plain.call("whoami", timeout_ms=10_000)
        finally:
            await server.stop()
    arun(main)


def test_missing_files_name_the_path(certs, tmp_path):
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError, match="nope.pem"):
        tls.server_context(missing, None, certs["ca"].cert)
    with pytest.raises(ConfigError, match="nope.pem"):
        tls.client_context(None, None, missing)
    with pytest.raises(ConfigError, match="cannot be loaded"):
        tls.client_context(certs["ca"].cert, certs["client"].key, certs["ca"].cert)  # key does not match


def test_contexts_from_configuration(certs):
    assert tls.server_context_from_conf(Configuration.load(overrides={})) is None
    c = certs["client"]
    conf = Configuration.load(overrides={
        "qjournal.rpc.tls.enabled": "true", "qjournal.rpc.tls.cert.file": c.cert,
        "qjournal.rpc.tls.key.file": c.key, "qjournal.rpc.tls.ca.file": c.ca,
    })
    assert tls.server_context_from_conf(conf) is not None
    assert tls.client_context_from_conf(conf) is not None
    with pytest.raises(ConfigError, match="qjournal.rpc.tls.cert.file"):
        tls.client_context_from_conf(Configuration.load(overrides={"qjournal.rpc.tls.enabled": "true"}))


def test_rpc_options_from_configuration():
    from qjournal.transport import client_options_from_conf, server_options_from_conf
    conf = Configuration.load(overrides={"ipc.maximum.data.length": "1m", "ipc.client.connect.timeout": "3s",
                                         "qjournal.rpc.server.max-queued-requests": "7"})
    assert server_options_from_conf(conf) == {"max_frame_bytes": 1 << 20, "max_queued_requests": 7}
    assert client_options_from_conf(conf) == {"max_frame_bytes": 1 << 20, "connect_timeout_ms": 3000}
    defaults = Configuration.load(overrides={})
    assert server_options_from_conf(defaults) == {"max_frame_bytes": 64 << 20, "max_queued_requests": 1024}
    with pytest.raises(ConfigError, match="ipc.client.connect.timeout"):
        client_options_from_conf(Configuration.load(overrides={"ipc.client.connect.timeout": "soon"}))


def test_a_stalled_handshake_does_not_block_other_clients(certs):
    async def main():
        import asyncio
        server, host, port = await _start(certs)
        try:
            reader, writer = await asyncio.open_connection(host, port)  # TCP only: never says hello
            writer.write(b"\x16\x03\x01\x00")  # and a torn record header
            await writer.drain()
            c = certs["client"]
            good = await RpcClient.connect_tcp(host, port, ssl=tls.client_context(c.cert, c.key, c.ca))
            assert await good.call("whoami") == ["tls", "nn1"]
            await good.close()
            writer.close()
        finally:
            await server.stop()
    arun(main)
