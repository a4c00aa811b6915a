"""Where a JournalNode runs a journal's write calls: inline on its event loop while they are fast and
no other journal is written, else on the journal's thread (journalnode/node.py, theory of operation).
Each test records, per storage call, whether it ran on the event loop's thread."""

import asyncio
import contextlib
import os
import threading
import time

from qjournal.config import Configuration
from qjournal.journalnode.disk_storage import DiskJournalStorage
from qjournal.journalnode.node import JournalNode
from qjournal.transport import RpcClient

from .jn_helpers import NS, Writer, batch

LOOPBACK = ("127.0.0.1", 0)


class RecordingStorage(DiskJournalStorage):
    """A disk journal that notes on which thread each append ran; ``sync_delay_s`` makes fsyncs slow
    (a slow disk, injected)."""

    def __init__(self, journal_dir: str, seen: list) -> None:
        super().__init__(journal_dir, fsync=False)
        self.seen = seen
        self.sync_delay_s = 0.0

    def append(self, name: str, data: bytes) -> None:
        self.seen.append(threading.current_thread() is threading.main_thread())
        super().append(name, data)

    def sync(self, name: str) -> None:
        if self.sync_delay_s:
            time.sleep(self.sync_delay_s)
        super().sync(name)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@contextlib.asynccontextmanager
async def node_and_client(tmp_path, conf=None):
    """A threaded JournalNode on recording storages, and a client; yields (node, client, seen, storages)."""
    seen: dict[str, list] = {}
    storages: dict[str, RecordingStorage] = {}

    def factory(d, jid):
        storages[jid] = RecordingStorage(os.path.join(d, jid), seen.setdefault(jid, []))
        return storages[jid]
    node = JournalNode(conf, edits_dir=str(tmp_path / "jn"), rpc_address=LOOPBACK, http_address=LOOPBACK,
                       storage_factory=factory)
    info = await node.start()
    host, port = info["rpc"].rsplit(":", 1)
    c = await RpcClient.connect_tcp(host, int(port))
    try:
        yield node, c, seen, storages
    finally:
        await c.close()
        await node.stop()


def with_max_ms(value: str) -> Configuration:
    conf = Configuration()
    conf.set("qjournal.journalnode.inline-write.max.ms", value)
    return conf


async def open_segment(c, jid):
    await c.call("format", jid=jid, ns_info=NS.to_wire(), force=False)
    await c.call("new_epoch", jid=jid, ns_info=NS.to_wire(), epoch=1)
    w = Writer(jid, 1)
    await c.call("start_log_segment", req=w.req().to_wire(), txid=1, layout_version=1)
    return w


async def write(c, w, txid):
    await c.call("journal", req=w.req().to_wire(), segment_txid=1, first_txid=txid, num_txns=1,
                 records=batch(txid, 1))


def test_fast_write_calls_run_on_the_event_loop(tmp_path):
    async def main():
        async with node_and_client(tmp_path) as (node, c, seen, _):
            w = await open_segment(c, "j")
            before = len(seen["j"])
            for t in range(1, 6):
                await write(c, w, t)
            await c.call("heartbeat", req=w.req(committed=5).to_wire())
            assert seen["j"][before:] == [True] * 5
            m = await c.call("get_edit_log_manifest", jid="j", since_txid=0, in_progress_ok=True)
            assert m["segments"] == [[1, 5, True]]
    run(main())


def test_a_slow_write_call_moves_its_journal_to_the_thread_until_fast_again(tmp_path):
    async def main():
        async with node_and_client(tmp_path, with_max_ms("1")) as (node, c, seen, storages):
            w = await open_segment(c, "j")
            before = len(seen["j"])
            storages["j"].sync_delay_s = 0.005  # slower than 1 ms
            await write(c, w, 1)  # inline, found slow
            await write(c, w, 2)  # on the thread, still slow there
            storages["j"].sync_delay_s = 0.0
            await write(c, w, 3)  # on the thread: the hold-off has not passed
            assert seen["j"][before:] == [True, False, False]
            node.service.journals["j"].thread_until = 0.0  # the hold-off passed; the last call was fast
            await write(c, w, 4)
            assert seen["j"][-1] is True
    run(main())


def test_zero_keeps_write_calls_on_the_thread(tmp_path):
    async def main():
        async with node_and_client(tmp_path, with_max_ms("0")) as (node, c, seen, _):
            w = await open_segment(c, "j")
            before = len(seen["j"])
            for t in range(1, 4):
                await write(c, w, t)
            assert seen["j"][before:] == [False] * 3
    run(main())


def test_journals_written_together_write_on_their_threads(tmp_path):
    async def main():
        async with node_and_client(tmp_path) as (node, c, seen, _):
            wa, wb = await open_segment(c, "a"), await open_segment(c, "b")
            ba, bb = len(seen["a"]), len(seen["b"])
            for t in range(1, 4):
                await write(c, wa, t)
                await write(c, wb, t)
            # the first write of "a" saw no other writer; every later one did
            assert seen["a"][ba:] == [True, False, False] and seen["b"][bb:] == [False] * 3
    run(main())
