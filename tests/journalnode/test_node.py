"""The JournalNode daemon in-process: RPC over real TCP and over the memory network,
HTTP /getJournal, /jmx, /metrics, /, accept-recovery downloads between two nodes, and
a node that keeps serving through malformed requests."""

import asyncio
import json
import socket
import struct

import aiohttp
import msgpack
import pytest

from qjournal.errors import (CorruptRecordError, EpochError, InvalidRequestError, JournalError,
                             JournalNotFormattedError, JournalOutOfSyncError)
from qjournal.config import Configuration
from qjournal.journalnode.node import JournalNode
from qjournal.protocol.segment import crc32c, encode_header
from qjournal.sim.loop import run_simulation
from qjournal.transport import MemoryNetwork, RpcClient
from qjournal.transport.download import memory_download

from qjournal.util.waiting import async_wait_until

from .jn_helpers import NS, Writer, batch

JID = "nodetest"
LOOPBACK = ("127.0.0.1", 0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def start_node(tmp_path, name="jn", **kw):
    node = JournalNode(edits_dir=str(tmp_path / name), rpc_address=LOOPBACK, http_address=LOOPBACK, **kw)
    info = await node.start()
    host, port = info["rpc"].rsplit(":", 1)
    client = await RpcClient.connect_tcp(host, int(port))
    return node, client


async def write_epoch(client, epoch, start, n, finalize=True):
    """Become writer `epoch`, write segment start..start+n-1; return the Writer."""
    await client.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=epoch)
    w = Writer(JID, epoch)
    await client.call("start_log_segment", req=w.req().to_wire(), txid=start, layout_version=1)
    await client.call("journal", req=w.req().to_wire(), segment_txid=start, first_txid=start,
                      num_txns=n, records=batch(start, n))
    if finalize:
        await client.call("finalize_log_segment", req=w.req().to_wire(), start_txid=start,
                          end_txid=start + n - 1)
    return w


def test_write_path_over_tcp_and_http(tmp_path):
    async def main():
        node, c = await start_node(tmp_path)
        try:
            assert await c.call("is_formatted", jid=JID) is False
            with pytest.raises(JournalNotFormattedError):
                await c.call("get_journal_state", jid=JID)
            await c.call("format", jid=JID, ns_info=NS.to_wire(), force=False)
            st = await c.call("get_journal_state", jid=JID)
            assert st["last_promised_epoch"] == 0 and st["http_url"] == f"http://{node.http_bound}"
            w = await write_epoch(c, 1, 1, 3)
            await c.call("start_log_segment", req=w.req().to_wire(), txid=4, layout_version=1)
            await c.call("journal", req=w.req().to_wire(), segment_txid=4, first_txid=4, num_txns=2,
                         records=batch(4, 2))
            m = await c.call("get_edit_log_manifest", jid=JID, since_txid=0, in_progress_ok=True)
            assert m["segments"] == [[1, 3, False], [4, 5, True]] and m["last_writer_epoch"] == 1
            with pytest.raises(EpochError):
                await c.call("heartbeat", req=Writer(JID, 0).req().to_wire())
            base = f"http://{node.http_bound}"
            async with aiohttp.ClientSession() as s:
                url = f"{base}/getJournal?jid={JID}&segmentTxId=4&storageInfo=12345:cluster-a"
                async with s.get(url) as r:
                    body = await r.read()
                    assert r.status == 200
                    assert body == encode_header(1) + batch(4, 2)
                    assert int(r.headers["X-Qjournal-Crc32c"], 16) == crc32c(body)
                    assert r.headers["X-Qjournal-Segment"] == "edits_inprogress_0000000000000000004"
                async with s.get(f"{base}/getJournal?jid={JID}&segmentTxId=4&inProgressOk=false") as r:
                    assert r.status == 404
                async with s.get(f"{base}/getJournal?jid={JID}&segmentTxId=2") as r:
                    assert r.status == 404 and "No edit log found starting at txid 2" in await r.text()
                async with s.get(f"{base}/getJournal?jid={JID}&segmentTxId=1&storageInfo=1:x") as r:
                    assert r.status == 403 and "Incompatible namespaceID" in await r.text()
                async with s.get(f"{base}/getJournal?jid=..%2Fx&segmentTxId=1") as r:
                    assert r.status == 400
                async with s.get(f"{base}/getJournal?jid={JID}&segmentTxId=abc") as r:
                    assert r.status == 400
                async with s.get(f"{base}/getJournal?jid=nosuch&segmentTxId=1") as r:
                    assert r.status == 404
                async with s.get(f"{base}/jmx") as r:
                    beans = {b["name"]: b for b in (await r.json())["beans"]}
                bean = beans[f"Hadoop:service=JournalNode,name=Journal-{JID}"]
                assert bean["TxnsWritten"] == 5 and bean["LastWrittenTxId"] == 5
                assert bean["LastPromisedEpoch"] == 1 and bean["BatchesWritten"] == 2
                assert json.loads(beans["Hadoop:service=JournalNode,name=JournalNodeInfo"]["JournalsStatus"]) \
                    == {JID: {"Formatted": "true"}}
                async with s.get(f"{base}/metrics") as r:
                    text = await r.text()
                assert f'qjournal_journalnode_txns_written_total{{jid="{JID}"}} 5.0' in text
                async with s.get(f"{base}/") as r:
                    assert JID in await r.text()
        finally:
            await c.close()
            await node.stop()
    run(main())


def test_malformed_requests_are_answered_and_node_keeps_serving(tmp_path):
    async def main():
        node, c = await start_node(tmp_path)
        try:
            await c.call("format", jid=JID, ns_info=NS.to_wire())
            bad_calls = [
                ("is_formatted", {"jid": "../x"}, InvalidRequestError),
                ("is_formatted", {"jid": ""}, InvalidRequestError),
                ("is_formatted", {"jid": 7}, InvalidRequestError),
                ("no_such_call", {}, InvalidRequestError),
                ("new_epoch", {"jid": JID, "ns_info": "x", "epoch": 1}, InvalidRequestError),
                ("new_epoch", {"jid": JID, "ns_info": {}, "epoch": 1}, InvalidRequestError),
                ("new_epoch", {"jid": JID, "ns_info": NS.to_wire(), "epoch": "1"}, InvalidRequestError),
                ("heartbeat", {"req": {"jid": JID}}, InvalidRequestError),
                ("heartbeat", {"req": None}, InvalidRequestError),
                ("journal", {"req": Writer(JID, 1).req().to_wire(), "segment_txid": 1, "first_txid": 1,
                             "num_txns": 1, "records": "text"}, InvalidRequestError),
                ("accept_recovery", {"req": Writer(JID, 1).req().to_wire(), "segment_state": [1],
                                     "from_url": "x"}, InvalidRequestError),
                ("heartbeat", {}, InvalidRequestError),
            ]
            for method, kw, err in bad_calls:
                with pytest.raises(err):
                    await c.call(method, **kw)
            # an oversized / garbage frame on a raw socket closes only that connection
            host, port = node.rpc_bound.rsplit(":", 1)
            for payload in (struct.pack(">I", 0x7FFFFFFF) + b"x", struct.pack(">I", 3) + b"\xc1\xc1\xc1",
                            struct.pack(">I", 2) + msgpack.packb([9, 9])):
                r, wr = await asyncio.open_connection(host, int(port))
                wr.write(payload)
                await wr.drain()
                await asyncio.wait_for(r.read(), 10)  # returns only at EOF: the server closed it
                wr.close()
            # only the well-behaved client is left (wait on the condition, with a deadline)
            await async_wait_until(lambda: node.rpc_server.connection_count == 1, "one connection left", 10)
            # a corrupt batch is refused, the journal is unchanged and the writer can go on
            w = await write_epoch(c, 1, 1, 2, finalize=False)
            bad = bytearray(batch(3, 2))
            bad[20] ^= 0xFF
            with pytest.raises(CorruptRecordError):
                await c.call("journal", req=w.req().to_wire(), segment_txid=1, first_txid=3, num_txns=2,
                             records=bytes(bad))
            await c.call("journal", req=w.req().to_wire(), segment_txid=1, first_txid=3, num_txns=2,
                         records=batch(3, 2))
            with pytest.raises(JournalOutOfSyncError):
                await c.call("journal", req=w.req().to_wire(), segment_txid=1, first_txid=9, num_txns=1,
                             records=batch(9, 1))
            assert await c.call("is_formatted", jid=JID) is True
        finally:
            await c.close()
            await node.stop()
    run(main())


def test_accept_recovery_downloads_from_peer_over_http(tmp_path):
    async def main():
        a, ca = await start_node(tmp_path, "a")
        b, cb = await start_node(tmp_path, "b")
        try:
            for c in (ca, cb):
                await c.call("format", jid=JID, ns_info=NS.to_wire())
            # epoch 1 wrote 1-5 to a, only 1-2 to b
            wa = await write_epoch(ca, 1, 1, 5, finalize=False)
            wb = await write_epoch(cb, 1, 1, 2, finalize=False)
            del wa, wb
            # writer of epoch 2 recovers: a is the source
            w2 = Writer(JID, 2)
            for c in (ca, cb):
                await c.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=2)
            ra = await ca.call("prepare_recovery", req=w2.req().to_wire(), segment_txid=1)
            rb = await cb.call("prepare_recovery", req=w2.req().to_wire(), segment_txid=1)
            assert ra["segment_state"][:3] == [1, 5, True] and rb["segment_state"][:3] == [1, 2, True]
            # the digest of a's copy travels with the state and is checked on the download
            state = ra["segment_state"]
            assert len(state) == 4
            url = f"http://{a.http_bound}/getJournal?jid={JID}&segmentTxId=1&storageInfo=12345:cluster-a"
            with pytest.raises(JournalError, match="digest"):  # a value whose digest is not a's
                await cb.call("accept_recovery", req=w2.req().to_wire(),
                              segment_state=state[:3] + [state[3] ^ 1], from_url=url)
            for c in (ca, cb):
                await c.call("accept_recovery", req=w2.req().to_wire(), segment_state=state, from_url=url)
            rb = await cb.call("prepare_recovery", req=w2.req().to_wire(), segment_txid=1)
            assert rb["segment_state"] == state and rb["accepted_in_epoch"] == 2
            for c in (ca, cb):
                await c.call("finalize_log_segment", req=w2.req().to_wire(), start_txid=1, end_txid=5)
                m = await c.call("get_edit_log_manifest", jid=JID, since_txid=0, in_progress_ok=True)
                assert m["segments"] == [[1, 5, False]]
            # a download from a dead URL is an error, not a crash
            with pytest.raises(JournalError, match="download"):
                await cb.call("accept_recovery", req=w2.req().to_wire(), segment_state=[6, 9, True],
                              from_url=f"http://127.0.0.1:{_free_port()}/getJournal?jid={JID}&segmentTxId=6")
        finally:
            for c in (ca, cb):
                await c.close()
            await a.stop()
            await b.stop()
    run(main())


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_memory_network_mode_without_http(tmp_path):
    async def main():
        net = MemoryNetwork()
        nodes = []
        for name in ("jn1", "jn2"):
            n = JournalNode(edits_dir=str(tmp_path / name), network=net, name=name, http=False)
            info = await n.start()
            assert info["rpc"] == name and info["http_url"] == f"mem://{name}"
            nodes.append(n)
        c1 = await RpcClient.connect_memory(net, "jn1", src="nn")
        c2 = await RpcClient.connect_memory(net, "jn2", src="nn")
        try:
            for c in (c1, c2):
                await c.call("format", jid=JID, ns_info=NS.to_wire())
            await write_epoch(c1, 1, 1, 4, finalize=False)
            await c2.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=1)
            w2 = Writer(JID, 2)
            await c2.call("accept_recovery", req=w2.req().to_wire(), segment_state=[1, 4, True],
                          from_url=f"mem://jn1/getJournal?jid={JID}&segmentTxId=1")
            m = await c2.call("get_edit_log_manifest", jid=JID, since_txid=0, in_progress_ok=True)
            assert m["segments"] == [[1, 4, True]]
            with pytest.raises(JournalError, match="no in-process HTTP server named 'nosuch'"):
                await c2.call("accept_recovery", req=w2.req().to_wire(), segment_state=[1, 5, True],
                              from_url=f"mem://nosuch/getJournal?jid={JID}&segmentTxId=1")
        finally:
            await c1.close()
            await c2.close()
            for n in nodes:
                await n.stop()
    run(main())


def test_many_journals_in_parallel_and_journal_limit(tmp_path):
    async def main():
        from qjournal.config import Configuration
        conf = Configuration({"qjournal.journalnode.max-journals": 3})
        node = JournalNode(conf, edits_dir=str(tmp_path / "jn"), rpc_address=LOOPBACK, http_address=LOOPBACK)
        info = await node.start()
        host, port = info["rpc"].rsplit(":", 1)
        clients = [await RpcClient.connect_tcp(host, int(port)) for _ in range(3)]
        try:
            jids = ["ja", "jb", "jc"]

            async def writer(c, jid):
                await c.call("format", jid=jid, ns_info=NS.to_wire())
                await c.call("new_epoch", jid=jid, ns_info=NS.to_wire(), epoch=1)
                w = Writer(jid, 1)
                await c.call("start_log_segment", req=w.req().to_wire(), txid=1, layout_version=1)
                for first in range(1, 50, 7):
                    await c.call("journal", req=w.req().to_wire(), segment_txid=1, first_txid=first,
                                 num_txns=7, records=batch(first, 7))
                await c.call("finalize_log_segment", req=w.req().to_wire(), start_txid=1, end_txid=49)
            await asyncio.gather(*(writer(c, j) for c, j in zip(clients, jids)))
            for j in jids:
                m = await clients[0].call("get_edit_log_manifest", jid=j, since_txid=0, in_progress_ok=True)
                assert m["segments"] == [[1, 49, False]]
            with pytest.raises(InvalidRequestError, match="qjournal.journalnode.max-journals"):
                await clients[0].call("is_formatted", jid="jd")
            assert sorted(node.service.journals) == jids
        finally:
            for c in clients:
                await c.close()
            await node.stop()
    run(main())


def test_tls_from_configuration_and_throttled_download(tmp_path):
    from qjournal.config import Configuration
    from qjournal.errors import TransportError
    from qjournal.transport import pki, tls

    d = str(tmp_path)
    ca = pki.make_ca(d)
    server, client = pki.make_cert(d, ca, "jn1"), pki.make_cert(d, ca, "nn1")
    conf = Configuration({"qjournal.rpc.tls.enabled": True, "qjournal.rpc.tls.cert.file": server.cert,
                          "qjournal.rpc.tls.key.file": server.key, "qjournal.rpc.tls.ca.file": server.ca,
                          "dfs.edit.log.transfer.bandwidthPerSec": 40000})

    async def main():
        node = JournalNode(conf, edits_dir=str(tmp_path / "jn"), rpc_address=LOOPBACK, http_address=LOOPBACK)
        await node.start()
        host, port = node.rpc_bound.rsplit(":", 1)
        with pytest.raises(TransportError):  # plain TCP is refused by a TLS server
            plain = await RpcClient.connect_tcp(host, int(port), connect_timeout_ms=5000)
            try:
                await plain.call("is_formatted", timeout_ms=5000, jid=JID)
            finally:
                await plain.close()
        c = await RpcClient.connect_tcp(host, int(port), ssl=tls.client_context(client.cert, client.key, client.ca))
        try:
            await c.call("format", jid=JID, ns_info=NS.to_wire())
            await write_epoch(c, 1, 1, 400, finalize=True)  # ~11 KB of records
            loop = asyncio.get_running_loop()
            async with aiohttp.ClientSession() as s:
                t0 = loop.time()
                async with s.get(f"http://{node.http_bound}/getJournal?jid={JID}&segmentTxId=1") as r:
                    body = await r.read()
                elapsed = loop.time() - t0
            assert body == encode_header(1) + batch(1, 400)
            # a lower bound only (a slow machine cannot break it): 11,216 bytes at 40,000 bytes/s
            # cannot arrive faster than the configured rate allows
            assert elapsed >= len(body) / 40000 - (4096 / 40000) - 0.01, elapsed
        finally:
            await c.close()
            await node.stop()
    run(main())


def test_bind_host_keys(tmp_path):
    from qjournal.config import Configuration

    conf = Configuration({"dfs.journalnode.rpc-address": "0.0.0.0:0", "dfs.journalnode.http-address": "0.0.0.0:0",
                          "dfs.journalnode.rpc-bind-host": "127.0.0.1",
                          "dfs.journalnode.http-bind-host": "127.0.0.1"})

    async def main():
        node = JournalNode(conf, edits_dir=str(tmp_path / "jn"))
        info = await node.start()
        try:
            assert info["rpc"].startswith("127.0.0.1:") and info["http"].startswith("127.0.0.1:")
        finally:
            await node.stop()
    run(main())


def test_a_per_nameservice_edits_dir_holds_that_journal(tmp_path):
    """``dfs.journalnode.edits.dir.<ns>`` (Hadoop's per-nameservice form) is where journal <ns> lives."""
    from qjournal.config import Configuration
    conf = Configuration()
    conf.set(f"dfs.journalnode.edits.dir.{JID}", str(tmp_path / "special"))

    async def main():
        node, c = await start_node(tmp_path, conf=conf)
        try:
            await c.call("format", jid=JID, ns_info=NS.to_wire(), force=False)
            await c.call("format", jid="other", ns_info=NS.to_wire(), force=False)
        finally:
            await c.close()
            await node.stop()
    run(main())
    assert (tmp_path / "special" / JID / "current" / "VERSION").exists()
    assert not (tmp_path / "jn" / JID).exists()
    assert (tmp_path / "jn" / "other" / "current" / "VERSION").exists()


def test_a_throttled_download_never_runs_ahead_of_its_rate(tmp_path):
    """dfs.edit.log.transfer.bandwidthPerSec on the syncer's side: on the simulator's virtual clock,
    streaming 1 MB at 100 kB/s into the journal's tmp file takes at least 10 virtual seconds (and the
    bytes arrive whole, in order); unthrottled it takes no virtual time."""
    body = bytes(range(256)) * 4096
    tmp_name = "edits_0000000000000000001-0000000000000000009.sync.tmp"

    async def fetch(url):
        return memory_download(body, crc32c(body), 64 * 1024)

    def main(bytes_per_s):
        async def run_it():
            node = JournalNode(Configuration({"qjournal.journalnode.fsync": "false"}),
                               edits_dir=str(tmp_path / f"jn{bytes_per_s}"), threaded=False,
                               segment_fetcher=fetch)
            slot = await node.service.journal_slot(JID)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            got = await node.service.download_segment("mem://peer/getJournal", slot, tmp_name, why="the syncer",
                                              bytes_per_s=bytes_per_s)
            elapsed = loop.time() - t0
            data = slot.journal.storage.read(tmp_name)
            await node.stop()
            return got, data, elapsed
        return run_it
    got, data, elapsed = run_simulation(main(100_000), 0)
    assert got == len(body) and data == body
    assert elapsed >= len(body) / 100_000 - 0.2
    got, data, elapsed = run_simulation(main(0), 0)
    assert data == body and elapsed == 0


def test_get_journal_sends_the_file_by_sendfile_unless_throttled(tmp_path):
    """The body of ``/getJournal`` is the file itself handed to the kernel (``sendfile``: the segment's bytes never
    pass through the JournalNode's process; seed 003's raw byte stream without a copy), for a finalized segment and
    for the acknowledged prefix of an in-progress one (never the preallocated tail); a throttled transfer
    (``dfs.edit.log.transfer.bandwidthPerSec``) reads chunks instead. Same bytes, same CRC32C header either way."""
    async def fetch(node, segment_txid):
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://{node.http_bound}/getJournal?jid={JID}&segmentTxId={segment_txid}") as r:
                assert r.status == 200
                body = await r.read()
                assert int(r.headers["X-Qjournal-Crc32c"], 16) == crc32c(body)
                return body

    async def main(throttled: bool, sendfile: bool = True, name: str = ""):
        conf = Configuration({"dfs.edit.log.transfer.bandwidthPerSec": "100000000" if throttled else "0"})
        node, c = await start_node(tmp_path / (name or ("slow" if throttled else "fast")), conf=conf)
        try:
            await c.call("format", jid=JID, ns_info=NS.to_wire(), force=False)
            w = await write_epoch(c, 1, 1, 300)
            await c.call("start_log_segment", req=w.req().to_wire(), txid=301, layout_version=1)
            await c.call("journal", req=w.req().to_wire(), segment_txid=301, first_txid=301, num_txns=2,
                         records=batch(301, 2))
            finalized = await fetch(node, 1)
            in_progress = await fetch(node, 301)
            assert finalized == encode_header(1) + batch(1, 300)
            assert in_progress == encode_header(1) + batch(301, 2)
            sent = node.http_server.sendfile_bytes
            assert sent == (0 if throttled or not sendfile else len(finalized) + len(in_progress)), sent
        finally:
            await c.close()
            await node.stop()

    run(main(False))
    run(main(True))
    try:
        import uvloop
    except ImportError:
        return
    # uvloop (qjournal.event-loop=auto when installed) has no loop.sendfile: the same bytes go out in chunks
    # (the headers were out when its NotImplementedError came, and the body was empty: readers failed over)
    uvloop.run(asyncio.wait_for(main(False, sendfile=False, name="uvloop"), 60))


def test_enospc_on_a_journalnodes_disk_is_logged_by_that_journalnode(tmp_path, monkeypatch, caplog):
    """Issue 28's fault (a): a JournalNode whose segment creation failed with ENOSPC said nothing in its own log (the
    errno was only in the writer's warning; EIO, failing later in the write path, was logged). Now every storage
    error of a call is logged at ERROR by the node, errno named, and answered typed with the errno."""
    import errno as errno_mod

    from qjournal.journalnode.disk_storage import DiskJournalStorage

    real_create = DiskJournalStorage.create

    def full_disk(self, name, data, *, grows=False):
        if name.startswith("edits_inprogress_"):
            raise OSError(errno_mod.ENOSPC, "No space left on device (injected)")
        return real_create(self, name, data, grows=grows)

    async def main():
        node, c = await start_node(tmp_path)
        try:
            await c.call("format", jid=JID, ns_info=NS.to_wire(), force=False)
            await c.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=1)
            monkeypatch.setattr(DiskJournalStorage, "create", full_disk)
            with pytest.raises(JournalError) as e:
                await c.call("start_log_segment", req=Writer(JID, 1).req().to_wire(), txid=1, layout_version=1)
            assert "storage error in start_log_segment" in e.value.message and "No space left" in e.value.message
            assert e.value.fields["errno"] == errno_mod.ENOSPC and e.value.fields["errno_name"] == "ENOSPC"
        finally:
            await c.close()
            await node.stop()

    run(main())
    logged = [r for r in caplog.records if r.levelname == "ERROR" and r.name == "qjournal.journalnode.service"]
    assert logged and "ENOSPC" in logged[0].getMessage() and JID in logged[0].getMessage()


def test_a_storage_error_reading_a_segment_answers_503_not_500(tmp_path, monkeypatch, caplog):
    """Issue 28's fault (c): ``/getJournal`` answered 500 (a server bug, to a reader) when this node's disk could not
    read the copy. Now it is 503 naming the failure (this replica is unavailable; the reader takes another), logged
    at ERROR by the node; a request for a missing segment is still 404."""
    import errno as errno_mod

    from qjournal.journalnode.disk_storage import DiskJournalStorage

    class Unreadable:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            raise OSError(errno_mod.EIO, "Input/output error (injected)")

        def __getattr__(self, name):
            return getattr(self.f, name)

    real_open = DiskJournalStorage.open_read

    async def main():
        node, c = await start_node(tmp_path)
        try:
            await c.call("format", jid=JID, ns_info=NS.to_wire(), force=False)
            await write_epoch(c, 1, 1, 3)
            monkeypatch.setattr(DiskJournalStorage, "open_read", lambda self, name: Unreadable(real_open(self, name)))
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://{node.http_bound}/getJournal?jid={JID}&segmentTxId=1") as r:
                    assert r.status == 503, r.status
                    text = await r.text()
                assert "cannot read the segment" in text and "Input/output error" in text and "another replica" in text
                async with s.get(f"http://{node.http_bound}/getJournal?jid={JID}&segmentTxId=99") as r:
                    assert r.status == 404
        finally:
            await c.close()
            await node.stop()

    run(main())
    assert any(r.levelname == "ERROR" and "EIO" in r.getMessage() for r in caplog.records)
