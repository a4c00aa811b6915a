"""JournalNode write-path benchmark: how close does ``journal`` get to the disk's floor?

Why: the quorum write path must reach 250,000 txns/s with batches of 1000 x
100-byte records over three JournalNodes. A JournalNode's share of that is
one ``journal`` call per batch: validate, one write, one fdatasync. This
script measures, in one run on the same disk:

1. floor: ``write`` + ``fdatasync`` of the same batch bytes to a plain file
   (the physical limit of one JournalNode);
2. validate: the batch validator alone (CPU per batch);
3. journal: the synchronous ``Journal.journal`` on a real disk (fsync on);
4. rpc-1: one in-process JournalNode over TCP, one writer pipelining batches;
5. rpc-3: three ``qjournal journalnode`` processes, one writer sending every
   batch to all three and counting a batch done at the second ack (a majority),
   with up to ``--window`` batches in flight;
6. qjm-3: the same three processes under the real quorum client
   (``QuorumJournalManager``): ``write_raw`` + ``mark`` + ``sync`` per batch, one
   sync in flight (the NameNode's group commit at a fixed batch size).

Each line prints txns/s and the ratio to the floor; the last lines give the CPU
time per txn of validate and journal (process time, which other load on a
shared machine disturbs far less than wall-clock rates). Usage::

    .venv/bin/python bench/jn_write.py [--batches 300] [--window 8] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from qjournal.protocol.messages import NamespaceInfo  # noqa: E402
from qjournal.journalnode.journal import Journal  # noqa: E402
from qjournal.protocol.segment import validate_batch  # noqa: E402
from qjournal.journalnode.node import JournalNode  # noqa: E402
from qjournal.journalnode.disk_storage import DiskJournalStorage  # noqa: E402
from qjournal.protocol.messages import RequestInfo  # noqa: E402
from qjournal.protocol.segment import OP_DATA, encode_records  # noqa: E402
from qjournal.transport import RpcClient  # noqa: E402
from qjournal.util.proc import qjournal_argv, start_daemon  # noqa: E402

NS = NamespaceInfo(4242, "bench")
TXNS = 1000
RECORD = 100
JID = "bench"


def make_batches(n: int) -> list[bytes]:
    body = b"b" * RECORD
    return [encode_records([(1 + i * TXNS + k, OP_DATA, body) for k in range(TXNS)]) for i in range(n)]


def floor(d: str, batches: list[bytes]) -> float:
    path = os.path.join(d, "floor")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        t0 = time.perf_counter()
        for b in batches:
            os.write(fd, b)
            os.fdatasync(fd)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return len(batches) * TXNS / dt


#: CPU seconds per txn of the last validate / journal step (robust to other load on the machine)
CPU_PER_TXN: dict[str, float] = {}


def validate(batches: list[bytes]) -> float:
    t0, c0 = time.perf_counter(), time.process_time()
    for i, b in enumerate(batches):
        assert validate_batch(b, 1 + i * TXNS, TXNS, 1 << 20) is not None
    CPU_PER_TXN["validate"] = (time.process_time() - c0) / (len(batches) * TXNS)
    return len(batches) * TXNS / (time.perf_counter() - t0)


def journal_direct(d: str, batches: list[bytes]) -> float:
    j = Journal(JID, DiskJournalStorage(os.path.join(d, "direct", JID)))
    try:
        j.format(NS)
        j.new_epoch(NS, 1)
        j.start_log_segment(RequestInfo(JID, 1, 0), 1, 1)
        t0, c0 = time.perf_counter(), time.process_time()
        for i, b in enumerate(batches):
            j.journal(RequestInfo(JID, 1, i + 1), 1, 1 + i * TXNS, TXNS, b)
        CPU_PER_TXN["journal"] = (time.process_time() - c0) / (len(batches) * TXNS)
        return len(batches) * TXNS / (time.perf_counter() - t0)
    finally:
        j.close()


async def _drive(clients: list[RpcClient], batches: list[bytes], window: int, quorum: int) -> float:
    for c in clients:
        await c.call("format", jid=JID, ns_info=NS.to_wire(), force=True)
        await c.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=1)
        await c.call("start_log_segment", req=RequestInfo(JID, 1, 0).to_wire(), txid=1, layout_version=1)
    sem = asyncio.Semaphore(window)

    async def one(i: int, b: bytes) -> None:
        req = RequestInfo(JID, 1, i + 1).to_wire()
        futs = [asyncio.ensure_future(c.call("journal", req=req, segment_txid=1, first_txid=1 + i * TXNS,
                                             num_txns=TXNS, records=b)) for c in clients]
        done = 0
        for f in asyncio.as_completed(futs):
            await f
            done += 1
            if done >= quorum:
                break
        sem.release()
        await asyncio.gather(*futs)

    t0 = time.perf_counter()
    tasks = []
    for i, b in enumerate(batches):
        await sem.acquire()
        tasks.append(asyncio.ensure_future(one(i, b)))
    await asyncio.gather(*tasks)
    return len(batches) * TXNS / (time.perf_counter() - t0)


async def rpc_one(d: str, batches: list[bytes], window: int) -> float:
    node = JournalNode(edits_dir=os.path.join(d, "rpc1"), rpc_address=("127.0.0.1", 0),
                       http_address=("127.0.0.1", 0))
    info = await node.start()
    host, port = info["rpc"].rsplit(":", 1)
    c = await RpcClient.connect_tcp(host, int(port))
    try:
        return await _drive([c], batches, window, 1)
    finally:
        await c.close()
        await node.stop()


async def rpc_three(d: str, batches: list[bytes], window: int) -> float:
    daemons = []
    clients = []
    try:
        for k in range(3):
            daemons.append(start_daemon(f"jn{k}", qjournal_argv(
                "-D", "qjournal.log.level=WARNING", "journalnode", "--edits-dir", os.path.join(d, f"jn{k}"),
                "--rpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"),
                log_path=os.path.join(d, f"jn{k}.log"), ready_timeout_s=60))
        for dm in daemons:
            host, port = dm.ready["rpc"].rsplit(":", 1)
            clients.append(await RpcClient.connect_tcp(host, int(port)))
        rpc = await _drive(clients, batches, window, 2)
        for c in clients:
            await c.close()
        clients = []
        return rpc, await _qjm(daemons, batches)
    finally:
        for c in clients:
            await c.close()
        for dm in daemons:
            dm.stop()


async def _qjm(daemons: list, batches: list[bytes]) -> float:
    from qjournal.client.qjm import QuorumJournalManager  # noqa: PLC0415

    uri = "qjournal://" + ";".join(dm.ready["rpc"] for dm in daemons) + "/qjmbench"
    q = QuorumJournalManager(uri, ns_info=NS)
    try:
        await q.format(NS, force=True)
        await q.recover_unfinalized_segments()
        out = await q.start_log_segment(1)
        t0 = time.perf_counter()
        for i, b in enumerate(batches):
            out.write_raw(b, 1 + i * TXNS, TXNS)
            out.mark()
            await out.sync()
        return len(batches) * TXNS / (time.perf_counter() - t0)
    finally:
        await q.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    a = p.parse_args()
    sys.setswitchinterval(0.0005)  # as the journalnode daemon does (cli/journalnode.py)
    d = tempfile.mkdtemp(prefix="jnbench-", dir=a.dir)
    try:
        batches = make_batches(a.batches)
        print(f"# {a.batches} batches of {TXNS} x {RECORD}-byte records ({len(batches[0])} bytes each), "
              f"window {a.window}, dir {d}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
        fl = floor(d, batches)
        print(f"floor      write+fdatasync per batch     {fl:12,.0f} txns/s   1.00 x floor")
        results = [
            ("validate", "validate_batch only (CPU)", validate(batches)),
            ("journal", "Journal.journal, fsync on", journal_direct(d, batches)),
            ("rpc-1", "1 JournalNode over TCP", asyncio.run(rpc_one(d, batches, a.window))),
        ]
        rpc3, qjm3 = asyncio.run(rpc_three(d, batches, a.window))
        results += [("rpc-3", "3 JournalNode processes, 2 acks", rpc3),
                    ("qjm-3", "3 processes, QuorumJournalManager", qjm3)]
        for name, what, v in results:
            print(f"{name:<10} {what:<30} {v:12,.0f} txns/s   {v / fl:4.2f} x floor")
        for name in ("validate", "journal"):
            c = CPU_PER_TXN[name]
            print(f"cpu        {name:<30} {c * 1e6:9.2f} us/txn   (one core: {1 / c:,.0f} txns/s)")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
