"""Staging fetch against an in-process JournalNode stand-in (RPC manifest + HTTP /getJournal).

The stand-in serves the contract of docs/architecture.md (``get_edit_log_manifest``,
``get_journal_state``, ``GET /getJournal`` with ``X-Qjournal-Crc32c``) from a
generated journal directory; one node lies about a checksum, one is down.
"""

from __future__ import annotations

import asyncio
import os
import tracemalloc

import crc32c
from aiohttp import web

from qjournal.pipeline.fetch import fetch_async, node_dir_name
from qjournal.pipeline.generate import GenOptions, generate
from qjournal.protocol.segment import (OP_DATA, encode_header, encode_records, parse_segment_file_name,
                                       segment_file_name)
from qjournal.transport.rpc import RpcServer


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
                segs.append([p.start_txid, p.end_txid if p.end_txid is not None else -1, p.in_progress])
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


async def _serve(node: _FakeJournalNode):
    app = web.Application()
    app.router.add_get("/getJournal", node.get_journal)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    node.http_port = site._server.sockets[0].getsockname()[1]
    rpc = RpcServer(node)
    host, port = await rpc.start_tcp("127.0.0.1", 0)
    return runner, rpc, port


def test_fetch_stages_verified_segments_and_reports_bad_nodes(tmp_path):
    gen = generate(GenOptions(seed=11, txns=300, out=str(tmp_path / "jn"), roll_every_txns=100))
    # an in-progress segment on the good node must not be fetched
    cur0 = os.path.join(gen.journal_dirs[0], "qjournal", "current")
    open(os.path.join(cur0, segment_file_name(301)), "wb").write(b"partial")
    staging = str(tmp_path / "staging")

    async def scenario():
        good = _FakeJournalNode(cur0)
        liar = _FakeJournalNode(os.path.join(gen.journal_dirs[1], "qjournal", "current"), bad_crc=True)
        r1, s1, p1 = await _serve(good)
        r2, s2, p2 = await _serve(liar)
        dead = RpcServer(good)
        _h, p3 = await dead.start_tcp("127.0.0.1", 0)
        await dead.stop()  # nothing listens there any more
        try:
            uri = f"qjournal://127.0.0.1:{p1};127.0.0.1:{p2};127.0.0.1:{p3}/qjournal"
            first = await fetch_async(uri, staging, timeout_ms=10_000)
            second = await fetch_async(uri, staging, timeout_ms=10_000)
            return first, second, (p1, p2, p3)
        finally:
            await s1.stop(); await s2.stop(); await r1.cleanup(); await r2.cleanup()

    first, second, (p1, p2, p3) = asyncio.run(scenario())
    good_name = node_dir_name("127.0.0.1", p1)
    assert first.node_names == [good_name, node_dir_name("127.0.0.1", p2), node_dir_name("127.0.0.1", p3)]
    assert first.fetched == 3 and second.fetched == 0 and second.skipped == 3
    staged = sorted(os.listdir(os.path.join(staging, good_name, "qjournal", "current")))
    assert staged == [segment_file_name(s, e) for s, e in gen.segments]
    for name in staged:
        assert open(os.path.join(staging, good_name, "qjournal", "current", name), "rb").read() == \
            open(os.path.join(cur0, name), "rb").read()
    liar_dir = os.path.join(staging, node_dir_name("127.0.0.1", p2), "qjournal", "current")
    assert os.listdir(liar_dir) == []  # nothing written when the checksum does not match
    assert sum("does not match X-Qjournal-Crc32c" in e for e in first.errors) == 3
    assert any(e.startswith(node_dir_name("127.0.0.1", p3)) for e in first.errors)


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


def test_fetch_streams_a_large_segment_to_disk_in_bounded_memory(tmp_path):
    node = _StreamingJournalNode(4000, 2000)  # an 8 MB segment
    size = sum(len(p) for p in node.parts())
    staging = str(tmp_path / "staging")

    async def scenario():
        runner, rpc, port = await _serve(node)
        try:
            tracemalloc.start()
            try:
                res = await fetch_async(f"qjournal://127.0.0.1:{port}/qjournal", staging, timeout_ms=30_000,
                                        chunk_bytes=32 * 1024)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            return res, port, peak
        finally:
            await rpc.stop(); await runner.cleanup()
    res, port, peak = asyncio.run(scenario())
    assert res.fetched == 1 and not res.errors
    path = os.path.join(staging, node_dir_name("127.0.0.1", port), "qjournal", "current",
                        segment_file_name(1, node.n))
    crc = 0
    for p in node.parts():
        crc = crc32c.crc32c(p, crc)
    with open(path, "rb") as f:
        got = 0
        while chunk := f.read(1 << 16):
            got = crc32c.crc32c(chunk, got)
    assert os.path.getsize(path) == size and got == crc
    assert peak < size / 8, f"peak {peak} bytes while staging a {size}-byte segment"
