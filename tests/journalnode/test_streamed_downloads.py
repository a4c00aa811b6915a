"""The JournalNode's segment downloads stream (accept-recovery and the syncer): a segment far larger
than the chunk size goes to its tmp file chunk by chunk and is verified in chunks, in memory far below
its size; a peer dying mid-stream and a damaged tail chunk fail the download with its tmp file
deleted, and a retry from another source succeeds."""

from __future__ import annotations

import asyncio
import os
import tracemalloc

import pytest

from qjournal.config import Configuration
from qjournal.errors import JournalError, TransportError
from qjournal.journalnode.sync_installer import synced_tmp_name
from qjournal.journalnode.node import JournalNode
from qjournal.journalnode.service import JournalNodeService
from qjournal.protocol.messages import SegmentState
from qjournal.protocol.segment import OP_DATA, crc32c, encode_header, encode_records, segment_file_name
from qjournal.transport.download import SegmentDownload

from .jn_helpers import NS, Writer

JID = "streamed"
CHUNK = 32 * 1024


def parts(n: int, body: int, damage_txid: int | None = None):
    """Segment ``1..n`` record by record (never whole); ``damage_txid``'s body has a flipped bit."""
    yield encode_header()
    for t in range(1, n + 1):
        rec = bytearray(encode_records([(t, OP_DATA, bytes([t % 251]) * body)]))
        if t == damage_txid:
            rec[20] ^= 0x04
        yield bytes(rec)


class Source:
    """A peer's ``/getJournal``: chunks of ``CHUNK`` bytes generated on the fly; records the largest
    chunk it handed out; ``die_after`` chunks then a reset; ``crc_of`` the body its header describes."""

    def __init__(self, n: int, body: int, *, die_after: int | None = None, damage_txid: int | None = None,
                 header_of_good_body: bool = False) -> None:
        self.n, self.body, self.die_after, self.damage = n, body, die_after, damage_txid
        crc = 0
        for p in parts(n, body, None if header_of_good_body else damage_txid):
            crc = crc32c(p, crc)
        self.crc = crc
        self.largest = 0
        self.urls: list[str] = []

    async def __call__(self, url: str) -> SegmentDownload:
        self.urls.append(url)

        async def chunks():
            pending, sent = bytearray(), 0
            for p in parts(self.n, self.body, self.damage):
                pending += p
                while len(pending) >= CHUNK:
                    if self.die_after is not None and sent == self.die_after:
                        raise TransportError(f"{url}: connection reset by peer")
                    out = bytes(pending[:CHUNK])
                    del pending[:CHUNK]
                    sent += 1
                    self.largest = max(self.largest, len(out))
                    yield out
            if pending:
                yield bytes(pending)
        return SegmentDownload(chunks(), self.crc)


class Router:
    """``segment_fetcher`` of the node: the URL's host picks the source."""

    def __init__(self, **sources: Source) -> None:
        self.sources = sources

    async def __call__(self, url: str) -> SegmentDownload:
        return await self.sources[url.split("/")[2]](url)


def make_node(tmp_path, fetch) -> JournalNode:
    conf = Configuration({"qjournal.journalnode.fsync": "false", "qjournal.segment-transfer.chunk.bytes": CHUNK})
    return JournalNode(conf, edits_dir=str(tmp_path / "jn"), threaded=False, segment_fetcher=fetch)


def current(tmp_path) -> str:
    return str(tmp_path / "jn" / JID / "current")


async def recovering(node: JournalNode) -> tuple[JournalNodeService, Writer]:
    h = node.service  # the RPC handler: its calls take the arguments the protocol table decoded
    await h.rpc_format(JID, NS)
    await h.rpc_new_epoch(JID, NS, 1)
    return h, Writer(JID, 1)


def url(host: str) -> str:
    return f"mem://{host}/getJournal?jid={JID}&segmentTxId=1"


def test_accept_recovery_streams_a_large_segment_in_bounded_memory(tmp_path):
    n, body = 3000, 2000                       # a 6 MB segment, 32 KiB chunks
    size = 16 + n * (body + 17)
    src = Source(n, body)
    node = make_node(tmp_path, Router(a=src))

    async def main():
        h, w = await recovering(node)
        tracemalloc.start()
        try:
            await h.rpc_accept_recovery(w.req(), SegmentState(1, n, True), url("a"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await node.stop()
        return peak
    peak = asyncio.run(main())
    assert src.largest == CHUNK
    assert peak < size / 8, f"peak {peak} bytes for a {size}-byte segment"
    path = os.path.join(current(tmp_path), segment_file_name(1))
    assert os.path.getsize(path) == size
    assert not [f for f in os.listdir(current(tmp_path)) if ".epoch=" in f]


def test_the_syncer_download_and_install_stream_in_bounded_memory(tmp_path):
    n, body = 3000, 2000
    size = 16 + n * (body + 17)
    src = Source(n, body)
    node = make_node(tmp_path, Router(a=src))
    state = SegmentState(1, n, False)

    async def main():
        await node.service.rpc_format(JID, NS)
        slot = await node.service.journal_slot(JID)
        tracemalloc.start()
        try:
            got = await node.service.download_segment(url("a"), slot, synced_tmp_name(state), why="the syncer")
            installed = slot.journal.sync.install_synced_segment(state, n)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await node.stop()
        return got, installed, peak
    got, installed, peak = asyncio.run(main())
    assert got == size and installed and src.largest == CHUNK
    assert peak < size / 8, f"peak {peak} bytes for a {size}-byte segment"
    assert os.path.getsize(os.path.join(current(tmp_path), segment_file_name(1, n))) == size
    assert not [f for f in os.listdir(current(tmp_path)) if f.endswith(".tmp")]


@pytest.mark.parametrize("bad,why", [
    (dict(die_after=3), "connection reset by peer"),                              # dies mid-stream
    (dict(damage_txid=199, header_of_good_body=True), "checksum mismatch"),       # a damaged tail chunk
    (dict(damage_txid=199), "holds txids 1-198"),                                 # damaged at the source
])
def test_a_failed_download_leaves_no_tmp_file_and_the_retry_from_another_source_succeeds(tmp_path, bad, why):
    n, body = 200, 1000
    good, broken = Source(n, body), Source(n, body, **bad)
    node = make_node(tmp_path, Router(bad=broken, good=good))

    async def main():
        h, w = await recovering(node)
        state = SegmentState(1, n, True)
        with pytest.raises(JournalError, match=why):
            await h.rpc_accept_recovery(w.req(), state, url("bad"))
        left = [f for f in os.listdir(current(tmp_path)) if ".epoch=" in f or f.startswith("edits_")]
        await h.rpc_accept_recovery(w.req(), state, url("good"))  # the next tied source
        await node.stop()
        return left
    assert asyncio.run(main()) == []
    with open(os.path.join(current(tmp_path), segment_file_name(1)), "rb") as f:
        assert f.read() == b"".join(parts(n, body))
