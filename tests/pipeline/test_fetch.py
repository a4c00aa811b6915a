"""Planning and executor reads against in-process JournalNode stand-ins (RPC manifest + HTTP /getJournal).

The stand-ins serve the contract of docs/architecture.md (``get_edit_log_manifest``,
``get_journal_state``, ``GET /getJournal`` with ``X-Qjournal-Crc32c``) from a
generated journal directory, on an event loop in a thread (the executor side,
``read_task``, runs its own loop as it does inside a Spark task); one node lies
about a checksum, one is down. No Spark here: these are the pieces each task runs.
"""

from __future__ import annotations

import asyncio
import os
import threading
import tracemalloc

import crc32c
import pyarrow as pa
from aiohttp import web

from qjournal.config import Configuration
from qjournal.errors import TransportError
from qjournal.journalnode.node import JournalNode
from qjournal.pipeline import decode as dec
from qjournal.pipeline import fetch as fe
from qjournal.pipeline.generate import GenOptions, generate
from qjournal.protocol.segment import (OP_DATA, encode_header, encode_records, parse_segment_file_name,
                                       segment_file_name)
from qjournal.protocol.messages import NamespaceInfo, RequestInfo
from qjournal.transport import RpcClient, pki
from qjournal.transport import RpcServer


class _FakeJournalNode:
    def __init__(self, current: str, *, bad_crc: bool = False) -> None:
        self.current = current
        self.bad_crc = bad_crc
        self.http_port = 0

    async def rpc_get_edit_log_manifest(self, jid, since_txid, in_progress_ok):
        segs = []
        for name in sorted(os.listdir(self.current)):
            p = parse_segment_file_name(name)
            if p is not None:
                segs.append([p.start_txid, p.end_txid if p.end_txid is not None else p.start_txid, p.in_progress])
        return {"segments": segs, "committed_txid": -12345}

    async def rpc_get_journal_state(self, jid):
        return {"last_promised_epoch": 1, "http_port": self.http_port,
                "http_url": f"http://127.0.0.1:{self.http_port}"}

    async def get_journal(self, request):
        start = int(request.query["segmentTxId"])
        name = next(n for n in sorted(os.listdir(self.current))
                    if (p := parse_segment_file_name(n)) and p.start_txid == start)
        data = open(os.path.join(self.current, name), "rb").read()
        crc = crc32c.crc32c(data) ^ (1 if self.bad_crc else 0)
        return web.Response(body=data, headers={"X-Qjournal-Crc32c": f"{crc:08x}",
                                                "X-Qjournal-Segment": name})


class _Serving:
    """Stand-ins served from an event loop in a background thread; ``ports`` are their RPC ports."""

    def __init__(self, nodes, dead: int = 0) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ports = [self._call(self._serve(n)) for n in nodes]
        for _ in range(dead):
            self.ports.append(self._call(self._dead_port()))

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    async def _serve(self, node):
        app = web.Application()
        app.router.add_get("/getJournal", node.get_journal)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        node.http_port = site._server.sockets[0].getsockname()[1]
        rpc = RpcServer(node)
        _host, port = await rpc.start_tcp("127.0.0.1", 0)
        self._stops = getattr(self, "_stops", []) + [rpc.stop, runner.cleanup]
        return port

    async def _dead_port(self):
        dead = RpcServer(object())
        _h, port = await dead.start_tcp("127.0.0.1", 0)
        await dead.stop()  # nothing listens there any more
        return port

    def close(self) -> None:
        for stop in getattr(self, "_stops", []):
            self._call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _rows(batches) -> list[dict]:
    return pa.Table.from_batches(list(batches), fe.stats_schema()).to_pylist()


def test_plan_on_metadata_then_executor_reads_verify_and_fail_over(tmp_path):
    gen = generate(GenOptions(seed=11, txns=300, out=str(tmp_path / "jn"), roll_every_txns=100))
    cur0 = os.path.join(gen.journal_dirs[0], "qjournal", "current")
    # an in-progress segment on the good node must not be planned
    open(os.path.join(cur0, segment_file_name(301)), "wb").write(b"partial")
    serving = _Serving([_FakeJournalNode(cur0),
                        _FakeJournalNode(os.path.join(gen.journal_dirs[1], "qjournal", "current"),
                                         bad_crc=True)], dead=1)
    try:
        p1, p2, p3 = serving.ports
        uri = f"qjournal://127.0.0.1:{p1};127.0.0.1:{p2};127.0.0.1:{p3}/qjournal"
        plan = fe.plan_copies(uri)
        good, liar, dead = (f"127.0.0.1:{p}" for p in (p1, p2, p3))
        assert plan.nodes == [good, liar, dead] and plan.jid == "qjournal"
        assert len(plan.errors) == 1 and plan.errors[0].startswith(dead)
        assert [(t.segment_start, t.segment_end, t.node) for t in plan.tasks] == \
            [(s, e, n) for s, e in gen.segments for n in sorted((good, liar))]
        assert all(t.path.startswith("http://127.0.0.1:") for t in plan.tasks)

        settings = fe.ReadSettings(batch_rows=64)
        for task in plan.tasks:
            rows = _rows(fe.read_task(task, settings, file_stats=True))
            if task.node == good:
                data = open(os.path.join(cur0, segment_file_name(task.segment_start, task.segment_end)),
                            "rb").read()
                want = dec.decode_segment("qjournal", good, task.segment_start, task.segment_end, data)
                assert [{k: r[k] for k in dec.EDITS_COLUMNS} for r in rows] == want.to_pylist()
                assert {(r["file_length"], r["file_crc32c"]) for r in rows} == {(len(data), crc32c.crc32c(data))}
            else:  # invariant 2: one row says why, nothing of the copy's bytes is used
                assert len(rows) == 1 and not rows[0]["valid"] and rows[0]["file_length"] is None
                assert f"{fe.FETCH_FAILED}: body CRC32C" in rows[0]["problem"]

        # a committed task fails over from the liar to the good replica (invariant 3), in range
        by = {(t.segment_start, t.node): t for t in plan.tasks}
        s, e = gen.segments[1]
        task = fe.CopyTask("qjournal", s, e, (by[(s, liar)].sources[0], by[(s, good)].sources[0]),
                           failover=True)
        rows = _rows(fe.read_task(task, settings, txid_range=(s + 10, s + 19), file_stats=True))
        assert [r["txid"] for r in rows] == list(range(s + 10, s + 20))
        assert {r["node"] for r in rows} == {good} and all(r["valid"] for r in rows)
        only_liar = fe.CopyTask("qjournal", s, e, (by[(s, liar)].sources[0],), failover=True)
        try:
            list(fe.read_task(only_liar, settings))
            raise AssertionError("a committed read with no good replica must fail")
        except TransportError as err:
            assert "no replica could be read" in err.message and liar in err.message
    finally:
        serving.close()


class _StreamingJournalNode:
    """Serves one finalized segment of ``n`` records that never exists whole in memory: generated
    record by record, CRC32C computed by a first pass, the body written in 64 KiB pieces."""

    def __init__(self, n: int, body_bytes: int) -> None:
        self.n, self.body_bytes = n, body_bytes
        self.http_port = 0

    def parts(self):
        yield encode_header()
        for t in range(1, self.n + 1):
            yield encode_records([(t, OP_DATA, bytes([t % 251]) * self.body_bytes)])

    async def rpc_get_edit_log_manifest(self, jid, since_txid, in_progress_ok):
        return {"segments": [[1, self.n, False]], "committed_txid": -12345}

    async def rpc_get_journal_state(self, jid):
        return {"last_promised_epoch": 1, "http_port": self.http_port,
                "http_url": f"http://127.0.0.1:{self.http_port}"}

    async def get_journal(self, request):
        crc = size = 0
        for p in self.parts():
            crc, size = crc32c.crc32c(p, crc), size + len(p)
        resp = web.StreamResponse(headers={"X-Qjournal-Crc32c": f"{crc:08x}"})
        resp.content_length = size
        await resp.prepare(request)
        pending = bytearray()
        for p in self.parts():
            pending += p
            if len(pending) >= 64 * 1024:
                await resp.write(bytes(pending))
                pending.clear()
        await resp.write(bytes(pending))
        await resp.write_eof()
        return resp


def test_executor_read_of_a_large_segment_holds_one_chunk_and_one_batch(tmp_path):
    node = _StreamingJournalNode(4000, 2000)  # an 8 MB segment
    size = sum(len(p) for p in node.parts())
    serving = _Serving([node])
    try:
        plan = fe.plan_copies(f"qjournal://127.0.0.1:{serving.ports[0]}/qjournal")
        assert len(plan.tasks) == 1
        settings = fe.ReadSettings((("qjournal.segment-transfer.chunk.bytes", "32768"),),
                                   batch_rows=100, scratch_dir=str(tmp_path))
        tracemalloc.start()
        try:
            n = last = 0
            for batch in fe.read_task(plan.tasks[0], settings, file_stats=True):
                n += batch.num_rows
                last = max(last, batch.num_rows)
                stats = (batch.column("file_length")[0].as_py(), batch.column("file_crc32c")[0].as_py())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        serving.close()
    crc = 0
    for p in node.parts():
        crc = crc32c.crc32c(p, crc)
    assert n == node.n and last == 100 and stats == (size, crc)
    assert os.listdir(tmp_path) == []  # the spooled download is an unlinked file
    assert peak < size / 8, f"peak {peak} bytes while reading a {size}-byte segment"


def test_executor_reads_over_https_with_the_configured_certificate(tmp_path):
    """``dfs.http.policy = HTTPS_ONLY``: a task presents the certificate of the driver's
    configuration (shipped in its ReadSettings); without one, the copy is a fetch failure."""
    d = str(tmp_path)
    ca = pki.make_ca(d, "ca")
    jn_cert, reader_cert = pki.make_cert(d, ca, "jn"), pki.make_cert(d, ca, "reader")

    def https(cert) -> Configuration:
        return Configuration({"qjournal.journalnode.fsync": "false", "dfs.http.policy": "HTTPS_ONLY",
                              "qjournal.rpc.tls.cert.file": cert.cert, "qjournal.rpc.tls.key.file": cert.key,
                              "qjournal.rpc.tls.ca.file": ca.cert})

    serving = _Serving([])
    ns = NamespaceInfo(77, "CID-tls")
    recs = encode_records([(t, OP_DATA, b"x%d" % t) for t in range(1, 6)])

    async def start():
        node = JournalNode(https(jn_cert), edits_dir=str(tmp_path / "jn"), rpc_address=("127.0.0.1", 0),
                           http_address=("127.0.0.1", 0))
        await node.start()
        client = await RpcClient.connect_tcp(*node.rpc_bound.rsplit(":", 1))
        try:
            await client.call("format", jid="tls", ns_info=ns.to_wire(), force=False)
            await client.call("new_epoch", jid="tls", ns_info=ns.to_wire(), epoch=1)
            await client.call("start_log_segment", req=RequestInfo("tls", 1, 0, 0).to_wire(), txid=1,
                              layout_version=1)
            await client.call("journal", req=RequestInfo("tls", 1, 1, 0).to_wire(), segment_txid=1,
                              first_txid=1, num_txns=5, records=recs)
            await client.call("finalize_log_segment", req=RequestInfo("tls", 1, 2, 5).to_wire(),
                              start_txid=1, end_txid=5)
        finally:
            await client.close()
        return node

    node = serving._call(start())
    try:
        plan = fe.plan_copies(f"qjournal://{node.rpc_bound}/tls", https(reader_cert))
        (task,) = plan.tasks
        assert task.path.startswith("https://") and not plan.errors
        rows = _rows(fe.read_task(task, fe.ReadSettings.from_conf(https(reader_cert)), file_stats=True))
        assert [r["txid"] for r in rows] == [1, 2, 3, 4, 5] and rows[0]["file_length"] == 16 + len(recs)
        (bad,) = _rows(fe.read_task(task, fe.ReadSettings(), file_stats=True))  # no certificate
        assert not bad["valid"] and bad["problem"].startswith(f"tls/{task.node}/")
        assert fe.FETCH_FAILED in bad["problem"]
    finally:
        serving._call(node.stop())
        serving.close()
