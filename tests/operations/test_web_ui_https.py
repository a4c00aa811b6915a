"""The file browser over HTTPS in headless Chromium: the caller is its client certificate.

One NameNode (in process, on a background loop) serves HTTPS only (``dfs.http.policy = HTTPS_ONLY``: mutual
TLS). Chromium presents alice's certificate (Playwright's client certificates). Shows: the page says who is
browsing (alice, from the certificate, not from any parameter); alice lists her own directory, with and without
JavaScript (the in-page fetches to WebHDFS carry the same certificate); bob's private directory is refused by
the namespace's permission check; a ``user.name`` naming someone else is refused as impersonation; without a
certificate the browser gets no page at all.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from qjournal.config import Configuration
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.format import format_namenode
from qjournal.namenode.http import NameNodeHttpServer
from qjournal.transport import pki

from .browser import chromium

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

OVERRIDES = "hdfs=supergroup;alice=staff;bob=staff;"


class HttpsNameNode:
    """An active non-HA NameNode serving HTTPS from a background event loop."""

    def __init__(self, tmp: str) -> None:
        d = f"{tmp}/pki"
        os.makedirs(d)
        ca = pki.make_ca(d, "ca")
        nn_cert = pki.make_cert(d, ca, "nn")
        self.alice = pki.make_cert(d, ca, "alice")
        conf = Configuration()
        for k, v in {"dfs.namenode.name.dir": f"file://{tmp}/name", "qjournal.namenode.superuser": "hdfs",
                     "dfs.http.policy": "HTTPS_ONLY", "qjournal.rpc.tls.cert.file": nn_cert.cert,
                     "qjournal.rpc.tls.key.file": nn_cert.key, "qjournal.rpc.tls.ca.file": ca.cert,
                     "hadoop.user.group.static.mapping.overrides": OVERRIDES,
                     "dfs.namenode.checkpoint.check.period": "3600s"}.items():
            conf.set(k, v)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.conf = conf
        self.nn = NameNode(conf)
        self.http = NameNodeHttpServer(self.nn)
        self.do(self._up())

    async def _up(self) -> None:
        await format_namenode(self.conf, cluster_id="CID-https-ui", namespace_id=11)
        await self.nn.start(serve=False)
        host, port = await self.http.start("127.0.0.1", 0)
        self.url = f"https://{host}:{port}"
        cp = self.nn.client_protocol
        su = {"user": "hdfs", "groups": ["supergroup"]}
        await cp.rpc_mkdirs("/user/alice/projects", perm=0o755, create_parent=True, **su)
        await cp.rpc_set_owner("/user/alice", owner="alice", group="staff", **su)
        await cp.rpc_set_owner("/user/alice/projects", owner="alice", group="staff", **su)
        await cp.rpc_create("/user/alice/notes.txt", perm=0o640, **su)
        await cp.rpc_set_owner("/user/alice/notes.txt", owner="alice", group="staff", **su)
        await cp.rpc_mkdirs("/user/bob", perm=0o700, create_parent=True, **su)
        await cp.rpc_set_owner("/user/bob", owner="bob", group="staff", **su)

    def do(self, coro, timeout_s: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        async def down():
            await self.http.stop()
            await self.nn.stop()
        self.do(down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = HttpsNameNode(str(tmp_path_factory.mktemp("https-ui")))
    try:
        yield s
    finally:
        s.close()


def rows(page) -> list[str]:
    return page.eval_on_selector_all("#listing tbody tr:not(.empty)", "trs => trs.map(tr => tr.dataset.name)")


def test_browsing_as_the_certificate_user(server):
    cert = [{"origin": server.url, "certPath": server.alice.cert, "keyPath": server.alice.key}]
    with chromium() as browser:
        for js in (True, False):
            ctx = browser.new_context(client_certificates=cert, ignore_https_errors=True, java_script_enabled=js)
            page = ctx.new_page()
            page.goto(f"{server.url}/explorer.html?path=/user")
            assert "Browsing as alice." in page.text_content("body")
            assert rows(page) == ["alice", "bob"]
            page.click("#listing a.dir:text('alice')")
            page.wait_for_function("() => document.getElementById('crumbs').textContent.includes('alice')")
            assert rows(page) == ["notes.txt", "projects"]
            owners = page.eval_on_selector_all("#listing tbody tr", "trs => trs.map(tr => tr.cells[1].textContent)")
            assert owners == ["alice", "alice"]
            # bob's directory is bob's alone: the namespace refuses alice
            resp = page.goto(f"{server.url}/explorer.html?path=/user/bob")
            assert resp.status == 403 and "Permission denied" in page.text_content("body")
            # naming somebody else does not change who asks
            resp = page.goto(f"{server.url}/explorer.html?path=/user/alice&user.name=hdfs")
            assert resp.status in (403, 401) and "alice" in page.text_content("body")
            ctx.close()
        # no certificate: the TLS handshake fails, no page
        ctx = browser.new_context(ignore_https_errors=True)
        page = ctx.new_page()
        with pytest.raises(Exception, match="ERR_"):
            page.goto(f"{server.url}/explorer.html?path=/user")
        ctx.close()
